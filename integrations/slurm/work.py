"""The one rule for a Slurm job's work: {"script": "#!/bin/bash ..."} (sbatch needs the interpreter line).

`SCHEMA` is the same rule as JSON Schema (the OpenAPI document's `work` for Slurm jobs), `EXAMPLE` a work it
accepts; tests/test_openapi.py checks the three agree. The script is the only thing the user names: the
job's partition, account, QOS, environment and name are Rackplane's own (integrations.slurm.jobs).
MAX_SCRIPT characters are at most 4,000,000 bytes in UTF-8, under slurmctld's default max_script_size (4 MB).

Device visibility (core.devices): a Slurm job's work carries no environment, so there is no `env` to refuse
device variables in; the submit's `environment` is Rackplane's own (PATH, LANG, RACKPLANE_*), and Slurm sets
CUDA_VISIBLE_DEVICES from the job's gres. The script is free text: an `export CUDA_VISIBLE_DEVICES=...` or
`NVIDIA_VISIBLE_DEVICES=all` inside it cannot be policed by reading it (a shell can build any name at run
time), and need not be: what holds a Slurm job to its GPUs is the node's device cgroup, `ConstrainDevices=yes`
in cgroup.conf (with `ProctrackType=proctrack/cgroup` and `TaskPlugin=task/cgroup`), which a site must set
(docs/security-kubernetes.md). If this rule ever takes an environment, it must call
`core.workloads.refuse_device_variables` (core.workloads.validate_work checks a returned `env` anyway).
"""

from __future__ import annotations

from collections.abc import Mapping

from django.utils.translation import gettext_lazy as _

from core.textrule import text_problem
from core.workloads import WorkError, WorkForm, WorkInput, refuse_unknown_keys

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
    # The text rule of a multi-line field (core.textrule): newlines and tabs, but no NUL, ESC, bare CR, and no
    # bidi or invisible characters that would make the script read otherwise than it runs (Trojan Source).
    problem = text_problem(script, multiline=True)
    if problem:
        raise WorkError(problem.message("the script"))
    return {"script": script}


# --- the job form (scheduling.views.job_form): the script in a textarea ----------------------------------


NO_SCRIPT = _("A Slurm job needs a script starting with #! (for example #!/bin/bash).")


def from_form(values: Mapping[str, str]) -> dict:
    """The script typed in the form; one that does not start with #! is refused in the form's words (the
    API's, validate_work, speak of its JSON)."""
    script = values.get("script", "").replace("\r\n", "\n")
    if not script.startswith("#!"):
        raise WorkError(str(NO_SCRIPT))
    return {"script": script}


def to_form(work: dict) -> dict[str, str]:
    return {"script": work.get("script", "")}


FORM = WorkForm(
    label="Slurm",
    inputs=(
        WorkInput(
            "script",
            _("Batch script (Slurm)"),
            multiline=True,
            rows=9,
            # Clearly an example, not a script already typed in (grey text reads as filled in).
            placeholder=_("For example:\n#!/bin/bash\nsrun python train.py"),
            help=_(
                "sbatch runs it; the first line names the interpreter (`#!/bin/bash`). Rackplane sets the "
                "GPUs, nodes and time limit."
            ),
        ),
    ),
    from_form=from_form,
    to_form=to_form,
)
