"""The one rule for a Slurm job's work: {"script": "#!/bin/bash ..."} (sbatch needs the interpreter line).

`SCHEMA` is the same rule as JSON Schema (the OpenAPI document's `work` for Slurm jobs), `EXAMPLE` a work it
accepts; tests/test_openapi.py checks the three agree. The script is the only thing the user names: the
job's partition, account, QOS, environment and name are Rackplane's own (integrations.slurm.jobs).
MAX_SCRIPT characters are at most 4,000,000 bytes in UTF-8, under slurmctld's default max_script_size (4 MB).
"""

from __future__ import annotations

from core.workloads import WorkError, refuse_unknown_keys

MAX_SCRIPT = 1_000_000

SCHEMA = {
    "type": "object",
    "title": "SlurmWork",
    "description": "The batch script sbatch runs (its first line names the interpreter).",
    "properties": {
        "script": {
            "type": "string",
            # A NUL cannot be stored (PostgreSQL's jsonb) nor passed to sbatch.
            "pattern": "^#![^\\u0000]*$",
            "maxLength": MAX_SCRIPT,
        }
    },
    "required": ["script"],
    "additionalProperties": False,
}
EXAMPLE = {"script": "#!/bin/bash\nsrun python train.py --epochs 1\n"}


def validate_work(work: dict) -> dict:
    refuse_unknown_keys(work, {"script"}, "a Slurm job")
    script = work.get("script")
    if not isinstance(script, str) or not script.startswith("#!"):
        raise WorkError('a Slurm job needs {"script": "#!/bin/bash ..."}: a script starting with #!')
    if len(script) > MAX_SCRIPT:
        raise WorkError(f"the script is over {MAX_SCRIPT} characters")
    if "\x00" in script:
        raise WorkError("the script contains a NUL character")
    return {"script": script}
