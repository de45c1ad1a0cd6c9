"""A MIG tray's node line (typed GRES, integrations.slurm.render) against the real Slurm 24.11 controller of
the testbed: slurmctld takes the file, the node registers with its MIG GRES and a job asking for one
`1g.23gb` runs there; the other nodes keep `gpu:4`.

On a real node slurmd finds the MIG devices itself (gres.conf `AutoDetect=nvml`, the only way Slurm supports
MIG) and names them `<gpu>_<profile>`, of which the node line's type (the profile) is a substring. The testbed
has no GPU and no NVML, so the test stands in for that detection with the site's gres.conf: one typed line
per MIG profile for that node with one device file per MIG device, the fake GPU files for the others. Each
test leaves the testbed as it found it (`slurm_baseline`, and gres.conf put back here)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import time

import pytest

pytestmark = pytest.mark.integration
MIG = (("1g.23gb", 8), ("2g.47gb", 4), ("3g.93gb", 4))  # all-balanced on a tray's four GPUs
# One device file per MIG device (scripts/slurm-testbed.sh makes them; a real node's /dev/nvidia-caps/).
CAPS = "/opt/fakegpu/nvidia-caps/nvidia-cap"
MIG_FILES = (("1g.23gb", f"{CAPS}[0-7]"), ("2g.47gb", f"{CAPS}[8-11]"), ("3g.93gb", f"{CAPS}[12-15]"))


def _show(testbed, host: str) -> str:
    return subprocess.run(
        [testbed.scontrol, "show", "node", host], capture_output=True, text=True, check=True
    ).stdout


def test_slurmctld_takes_a_mig_trays_typed_gres_and_runs_a_slice_job(slurm_testbed, slurm_baseline):
    target = slurm_testbed.target()
    state = slurm_testbed.state([18])
    hosts = [n.hostname for n in state.nodes]
    mig_host = hosts[6]
    nodes = tuple(dataclasses.replace(n, mig=MIG) if n.hostname == mig_host else n for n in state.nodes)
    rendered = target.render(dataclasses.replace(state, nodes=nodes))
    line = next(
        line for line in rendered["rackplane.conf"].splitlines() if line.startswith(f"NodeName={mig_host} ")
    )
    assert "Gres=gpu:1g.23gb:8,gpu:2g.47gb:4,gpu:3g.93gb:4" in line

    gres_conf = slurm_testbed.conf_dir / "gres.conf"
    saved = gres_conf.read_text()
    others = ",".join(h for h in hosts if h != mig_host)
    gres_conf.write_text(
        "AutoDetect=off\n"
        f"NodeName={others} Name=gpu File=/opt/fakegpu/nvidia[0-3]\n"
        + "".join(f"NodeName={mig_host} Name=gpu Type={kind} File={files}\n" for kind, files in MIG_FILES)
    )
    sbatch, squeue, scancel = (str(slurm_testbed.bin / n) for n in ("sbatch", "squeue", "scancel"))
    job = ""
    try:
        result = target.apply(rendered)
        assert result.reconfigured
        deadline = time.monotonic() + 60
        while "State=IDLE " not in (shown := _show(slurm_testbed, mig_host)) or "DRAIN" in shown:
            assert time.monotonic() < deadline, shown + slurm_testbed.log_tail()
            time.sleep(0.5)
        gres = re.search(r"\bGres=(\S+)", shown).group(1)
        assert sorted(gres.split(",")) == ["gpu:1g.23gb:8", "gpu:2g.47gb:4", "gpu:3g.93gb:4"], shown
        assert re.search(r"\bGres=gpu:4\b", _show(slurm_testbed, hosts[0]))

        # What dispatch asks for a slice: gres/gpu:<profile>:1. Only the MIG node has it.
        job = subprocess.run(
            [sbatch, "--parsable", "--gres=gpu:1g.23gb:1", "--wrap", "sleep 60"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        deadline = time.monotonic() + 30
        while (
            out := subprocess.run(
                [squeue, "-h", "-j", job, "-o", "%T %N"], capture_output=True, text=True, check=True
            ).stdout.split()
        )[:1] != ["RUNNING"]:
            assert time.monotonic() < deadline, (
                f"the slice job did not start: {out}" + slurm_testbed.log_tail()
            )
            time.sleep(0.5)
        assert out[1] == mig_host
    finally:
        if job:
            subprocess.run([scancel, job], check=False)
        gres_conf.write_text(saved)
        slurm_testbed.cancel_all_jobs()
