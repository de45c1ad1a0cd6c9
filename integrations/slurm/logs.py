"""A Slurm job's output (Kind.read_logs of the Slurm kind; integrations.logs picks it from the registry).

slurmrestd has no endpoint that returns a job's output; ``GET /slurm/v0.0.4N/job/{id}`` gives the path it
writes to on the job's first node, with ``%j`` and friends expanded by Slurm: ``standard_output`` in v0.0.42,
``stdout_expanded`` from v0.0.43 on (where ``standard_output`` is the pattern as submitted; the version's
module says which, integrations.slurm.versions). A pattern left unexpanded is expanded here. Rackplane
submits with ``standard_output = <workdir>/<name>-%j.out`` (integrations.slurm.jobs), so a job slurmctld has
forgotten still has a known path. The file is read when the portal can see it (the jobs' working directory
is a shared filesystem mounted at the same path on the portal); otherwise the page says where the output is
and why it cannot show it.
"""

from __future__ import annotations

import re
from pathlib import Path

from django.utils.translation import gettext

from integrations.job_output import JobLogs, LogPart, _tail
from integrations.jobs import BackendError
from scheduling.models import Job


def _expand_slurm_path(pattern: str, backend_id: str, name: str, user: str) -> str:
    """Slurm's filename patterns for what Rackplane submits: %j/%A job id, %x name, %u user, %% a percent."""
    values = {"j": backend_id, "A": backend_id, "x": name, "u": user, "%": "%"}
    return re.sub(r"%(\w|%)", lambda m: values.get(m.group(1), m.group(0)), pattern)


def slurm_logs(backend, job: Job, limit: int | None) -> JobLogs:
    """The job's output file, as slurmrestd says where it is (integrations.logs' module docstring)."""
    backend_id = job.backend_id
    logs = JobLogs(source="Slurm")
    if not re.fullmatch(r"[1-9][0-9]{0,9}", backend_id or ""):
        logs.error = gettext("The job has no Slurm job id yet: it has not been submitted to Slurm.")
        return logs
    run_name = f"rp-{job.pk}" if not job.preemptions else f"rp-{job.pk}-{job.preemptions}"
    path = f"{backend.workdir.rstrip('/')}/{run_name}-{backend_id}.out"
    record = None
    try:
        record = backend._job(backend_id)
    except BackendError as error:
        logs.error = gettext("slurmrestd could not be asked where the output is: %(error)s") % {
            "error": error
        }
    if record is not None:
        stdout = backend.dialect.output_path(record) or record.get("standard_output") or ""
        if stdout:
            path = _expand_slurm_path(
                stdout, backend_id, str(record.get("name") or run_name), str(record.get("user_name") or "")
            )
    logs.source = gettext("Slurm job %(job)s's output file %(path)s") % {"job": backend_id, "path": path}
    if not path.startswith("/"):
        path = f"{backend.workdir.rstrip('/')}/{path}"
    # Only files inside the jobs' working directory: a path from the outside never opens other portal files.
    workdir = Path(backend.workdir).resolve()
    if not Path(path).resolve().is_relative_to(workdir):
        logs.parts.append(
            LogPart(
                path,
                error=gettext("%(path)s is outside the jobs' working directory %(workdir)s: not read")
                % {"path": path, "workdir": workdir},
            )
        )
        return logs
    part = _tail(Path(path), limit)
    if part.error:
        part.error = gettext(
            "%(error)s (Slurm writes it on the job's first node; mount the jobs' working directory at the "
            "same path on the portal to read it here)"
        ) % {"error": part.error}
    logs.parts.append(part)
    return logs
