"""The Slurm target's adapter: SlurmTarget.apply (atomic files, reconfigure, read back, roll back), QOS."""

from __future__ import annotations

from collections.abc import Callable

from integrations.common import clip
from integrations.slurm.target import SlurmTarget


class SlurmAdapter:
    """SlurmTarget.apply (atomic files, reconfigure, read-back, rollback), then the departments' QOS."""

    def __init__(self, target, values: dict):
        self.slurm = SlurmTarget(
            values["config_dir"], values["scontrol"], slurmctld_log=values.get("slurmctld_log") or None
        )

    def apply(self, payload: dict, log: Callable[..., None], push) -> str:
        files = payload.get("files") or {}
        log(f"writing {', '.join(sorted(files))} to {self.slurm.config_dir} and reconfiguring slurmctld")
        result = self.slurm.apply(files)
        log(*result.log)
        blocks = [b for b in result.topology if not b.get("aggregated")]
        if blocks:
            shown = ", ".join(f"{b['name']}={b['nodes']}" for b in blocks[:8])
            log(f"slurmctld runs {len(blocks)} blocks: {shown}" + (", ..." if len(blocks) > 8 else ""))
        qos = payload.get("qos") or []
        if qos:
            if self.slurm.slurmdbd_configured():
                for entry in qos:
                    log(self.slurm.ensure_qos(entry["name"], entry.get("gpu_limit")).note)
            else:
                log(
                    f"{len(qos)} department QOS not set: this cluster has no slurmdbd, which sacctmgr needs "
                    "(GPU limits are then not enforced by Slurm)"
                )
        if result.changed:
            return f"changed {', '.join(result.changed)}; slurmctld reconfigured and verified"
        return "files already in place; slurmctld runs them"

    def diff(self, payload: dict) -> list[str]:
        diffs = self.slurm.diff(payload.get("files") or {})
        out: list[str] = []
        for name, text in diffs.items():
            out.extend(clip(text.splitlines(), 400, name))
        return out
