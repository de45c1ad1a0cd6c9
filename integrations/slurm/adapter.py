"""The Slurm target's adapter: SlurmTarget.apply (atomic files, reconfigure, read back, roll back), then
slurmdbd's QOS, accounts and associations (integrations.slurm.accounting)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from integrations.common import clip
from integrations.jobs import API_VERSION_SETTING, TARGET_ID_SETTING, BackendRejected
from integrations.slurm import assoc_mgr
from integrations.slurm.accounting import AccountingPlan, accounting_from_settings
from integrations.slurm.jobs import backend_from_settings
from integrations.slurm.render import DepartmentQos, SlurmAccount, SlurmAssociation, declared_tres
from integrations.slurm.target import (
    FORMAT_CONF,
    RACKPLANE_CONF,
    TOPOLOGY_CONF,
    SlurmConfigurationError,
    SlurmError,
    SlurmRejected,
    SlurmTarget,
    SlurmUnavailable,
    left_out_note,
)


class SlurmAdapter:
    """slurmdbd's QOS, accounts and associations, then SlurmTarget.apply (atomic files, reconfigure,
    read-back, rollback).

    Accounting first: a dedicated partition's `AllowQos=<department>` naming a QOS slurmdbd does not hold yet
    is dropped by slurmctld when it loads the file ("error: Ignoring invalid Allow/DenyQOS value", measured
    with 24.11.5), and stays dropped until the next reconfigure, which would leave the partition open to any
    QOS; a tier's `QOS=` naming one is refused outright ("fatal: Partition ... has an invalid qos"). Waiting
    for slurmctld to hold the accounting (integrations.slurm.assoc_mgr) before the reconfigure also keeps the
    two from racing."""

    def __init__(self, target, values: dict):
        self.target = target
        self.values = values
        self.facts: dict = {}  # what check() and apply() learned (integrations.pushes.remember)
        self.slurm = SlurmTarget(
            values["config_dir"], values["scontrol"], slurmctld_log=values.get("slurmctld_log") or None
        )

    def apply(self, payload: dict, log: Callable[..., None], push) -> str:
        files = payload.get("files") or {}
        self.slurm.check_files(files)  # a misconfigured target fails as such before slurmdbd is asked
        # The MIG profiles' TRES (rackplane.conf's AccountingStorageTRES): slurmdbd refuses a limit on one
        # slurmctld does not track yet, and slurmctld registers them only when it loads the file. So while
        # some are new, the accounting goes first without the per-profile limits, then whole after it.
        declared = declared_tres(files.get(RACKPLANE_CONF) or "")
        new = sorted(set(declared) - self.slurm.tracked_tres()) if declared else []
        if new:
            log(
                f"slurmctld does not track {', '.join(new)} yet: the QOS and accounts go without their "
                "MIG profile limits, then with them once the reconfigure has registered those TRES"
            )
            self._apply_accounting(_without_mig(payload), log)
        else:
            accounting = self._apply_accounting(payload, log)
        log(f"writing {', '.join(sorted(files))} to {self.slurm.config_dir} and reconfiguring slurmctld")
        result = self.slurm.apply(files)
        log(*result.log)
        if declared:
            self._check_tres(declared, log)
        if new:
            accounting = self._apply_accounting(payload, log)
        if note := left_out_note(files.get(TOPOLOGY_CONF) or ""):
            log(note)
        blocks = [b for b in result.topology if not b.get("aggregated")]
        if blocks:
            shown = ", ".join(f"{b['name']}={b['nodes']}" for b in blocks[:8])
            log(f"slurmctld runs {len(blocks)} blocks: {shown}" + (", ..." if len(blocks) > 8 else ""))
        with contextlib.suppress(SlurmError):  # the version is a fact for the wizard, not the push's outcome
            self.facts = {"slurm_version": self.slurm.version()}
        if result.changed:
            return f"changed {', '.join(result.changed)}; slurmctld reconfigured and verified{accounting}"
        return f"files already in place; slurmctld runs them{accounting}"

    def _apply_accounting(self, payload: dict, log: Callable[..., None]) -> str:
        """QOS, accounts and associations into slurmdbd (integrations.slurm.accounting, through slurmrestd);
        without slurmrestd only the QOS, through sacctmgr. Returns what the push's summary adds."""
        qos = payload.get("qos") or []
        accounts = payload.get("accounts") or []
        if not qos and not accounts:
            return ""
        cluster = self.slurm.accounting_cluster()
        if cluster is None:
            log(
                f"{len(qos)} department QOS and {len(accounts)} accounts not set: this cluster has no "
                "slurmdbd (GPU limits and who may submit are then not enforced by Slurm)"
            )
            return ""
        if not (self.values.get("rest_url") or "").strip():
            # sacctmgr makes QOS only here: the account tree and its users need slurmrestd's slurmdb API.
            for entry in qos:
                log(self.slurm.ensure_qos(entry["name"], entry.get("gpu_limit"), _mig(entry)).note)
            log(
                f"{len(accounts)} accounts and their users not set: give the target slurmrestd (rest_url and "
                "a JWT), through which Rackplane writes slurmdbd's accounts and associations"
            )
            return ""
        plan = AccountingPlan(
            qos=tuple(DepartmentQos(q["name"], q.get("gpu_limit"), _mig(q)) for q in qos),
            accounts=tuple(
                SlurmAccount(
                    a["name"],
                    a.get("parent") or "root",
                    a.get("gpu_limit"),
                    a.get("qos")
                    or (),  # a list; one name in a payload queued before (SlurmAccount takes both)
                    a.get("shares") or 1,
                    _mig(a),
                )
                for a in accounts
            ),
            associations=tuple(
                SlurmAssociation(a["account"], a["user"]) for a in payload.get("associations") or []
            ),
        )
        try:
            done = accounting_from_settings(self.values, cluster).apply(plan)
        except ValueError as error:
            raise SlurmRejected(
                f"the accounting cannot be written to slurmdbd: {error}", "fix the names"
            ) from error
        log(*(f"slurmdbd: {line}" for line in done.changed))
        log(*(f"slurmdbd: not done: {line}" for line in done.left))
        if done.changed:
            lacking = assoc_mgr.wait(
                self.slurm,
                {q.name: q.gpu_limit for q in plan.qos},
                {(a.name, "") for a in plan.accounts} | {(a.account, a.user) for a in plan.associations},
                removed=done.removed,
            )
            if lacking:
                log(f"slurmctld does not hold yet: {', '.join(lacking[:8])} (slurmdbd sends it by itself)")
            else:
                log("slurmctld holds the new QOS limits and associations (scontrol show assoc_mgr)")
        if not done.changed:
            log(
                f"slurmdbd already holds the {len(plan.qos)} QOS, {len(plan.accounts)} accounts and "
                f"{len(plan.associations)} user associations"
            )
            return "; slurmdbd unchanged"
        return f"; slurmdbd: {len(done.changed)} changes"

    def _check_tres(self, declared: Sequence[str], log: Callable[..., None]) -> None:
        """slurmctld tracks every TRES rackplane.conf declares, or the push fails saying why."""
        missing = sorted(set(declared) - self.slurm.tracked_tres())
        if missing:
            raise SlurmRejected(
                f"slurmctld does not track {', '.join(missing)} after the reconfigure, although "
                f"{RACKPLANE_CONF} sets AccountingStorageTRES",
                "slurm.conf sets AccountingStorageTRES after `Include rackplane.conf` (Slurm takes the "
                "latest): remove that line, or move it before the Include",
            )
        log(f"slurmctld tracks {', '.join(declared)} (AccountingStorageTRES)")

    def check(self) -> list[str]:
        """Test connection (integrations.push_history): slurmctld answers `scontrol ping` and the
        configuration directory is there; with slurmrestd (rest_url), the API version is chosen afresh with
        it and remembered on the target (integrations.slurm.versions). Nothing is written to Slurm."""
        if not self.slurm.ping():
            raise SlurmUnavailable(
                "slurmctld does not answer `scontrol ping`", "start slurmctld or fix the scontrol setting"
            )
        if not self.slurm.config_dir.is_dir():
            raise SlurmConfigurationError(
                f"the configuration directory {self.slurm.config_dir} does not exist",
                "point the target at the directory slurm.conf is in",
            )
        version = self.slurm.version()
        self.facts = {"slurm_version": version}
        return [
            f"Slurm {version}: slurmctld answers scontrol ping",
            f"configuration directory {self.slurm.config_dir} found",
            *self._check_rest(),
        ]

    def _check_rest(self) -> list[str]:
        """Choose the slurmrestd API version again (what it serves may have changed with an upgrade)."""
        if not (self.values.get("rest_url") or "").strip():
            return ["no slurmrestd (rest_url): this target does not run jobs"]
        values = {**self.values, API_VERSION_SETTING: ""}  # "": ask slurmrestd anew
        try:
            backend = backend_from_settings(values, on_api_version=remembering(values))
        except BackendRejected:
            return []
        dialect = backend.negotiate()
        # Kept by integrations.pushes.remember with the Slurm version (the versions page shows them).
        self.facts.update(slurm_rest=dialect.version, slurm_rest_served=list(backend.served))
        return [f"slurmrestd serves {', '.join(backend.served)}: Rackplane speaks {dialect.version}"]

    def diff(self, payload: dict) -> list[str]:
        diffs = self.slurm.diff(payload.get("files") or {})
        out: list[str] = []
        for name, text in diffs.items():
            out.extend(clip(text.splitlines(), 400, name))
        return out


def remembering(values: dict) -> Callable[[str, list[str]], None]:
    """A callback keeping the chosen API version on the target `values` came from (TARGET_ID_SETTING), with
    the facts the versions page shows (slurm_rest, slurm_rest_served: versions.VERSION_FACTS)."""
    target_id = values.get(TARGET_ID_SETTING)

    def remember(version: str, served: list[str]) -> None:
        from integrations.models import remember_api_version  # models import the registry, which loads kinds

        facts = {"slurm_rest": version, "slurm_rest_served": list(served)}
        remember_api_version(target_id if isinstance(target_id, int) else None, version, facts)

    return remember


def _without_mig(payload: dict) -> dict:
    """The payload's QOS and accounts without their per-profile limits (`mig_limits`)."""
    return {
        **payload,
        **{
            key: [{k: v for k, v in entry.items() if k != "mig_limits"} for entry in payload.get(key) or []]
            for key in ("qos", "accounts")
        },
    }


def _mig(entry: dict) -> tuple[tuple[str, int], ...]:
    """A payload entry's GrpTRES gres/gpu:<profile> limits (none in a payload queued before them)."""
    return tuple((str(profile), int(slices)) for profile, slices in entry.get("mig_limits") or ())


def tree_left_out_targets() -> list[str]:
    """The enabled Slurm targets writing topology.conf (Slurm 24.11), where the fabric's tree is left out."""
    from integrations.models import ConfigTarget  # models import the registry, which loads kinds

    return [
        t.name
        for t in ConfigTarget.objects.filter(kind="slurm", enabled=True).order_by("name")
        if (t.settings or {}).get("topology_format", FORMAT_CONF) == FORMAT_CONF
    ]
