"""The one rule for a Slurm job's work: {"script": "#!/bin/bash ..."} (sbatch needs the interpreter line)."""

from __future__ import annotations

from core.workloads import WorkError

MAX_SCRIPT = 1_000_000


def validate_work(work: dict) -> dict:
    unknown = sorted(set(work) - {"script"})
    if unknown:
        raise WorkError(f"unknown keys for a Slurm job: {', '.join(unknown)}")
    script = work.get("script")
    if not isinstance(script, str) or not script.startswith("#!"):
        raise WorkError('a Slurm job needs {"script": "#!/bin/bash ..."}: a script starting with #!')
    if len(script) > MAX_SCRIPT:
        raise WorkError(f"the script is over {MAX_SCRIPT} characters")
    return {"script": script}
