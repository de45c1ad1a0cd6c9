"""A job's output, read from where its backend keeps it: the effect behind the job page's "Logs" panel.

Each job-running kind reads its own (`Kind.read_logs`, in its folder's logs.py); this module picks the
reader from the registry (integrations.job_output holds what they share: JobLogs, LogPart, bounded reads):

* **Slurm**: slurmrestd has no endpoint that returns a job's output; ``GET /slurm/v0.0.4N/job/{id}`` gives
  the path it writes to (``%j`` and friends expanded by Slurm; integrations.slurm.logs) on the job's first
  node. Rackplane submits with ``standard_output = <workdir>/<name>-%j.out`` (integrations.slurm.jobs), so a
  job slurmctld has forgotten still has a known path. The file is read when the portal can see it (the
  jobs' working directory is a shared filesystem mounted at the same path on the portal); otherwise the page
  says where the output is and why it cannot show it.
* **Kubernetes**: the pods of the job's Job (label selector ``job-name=<name>``, which the Job controller
  sets) and each pod's log through the API (``GET .../pods/{name}/log``, ``limitBytes`` bounds what the API
  server sends). The API server fetches logs from the node's kubelet: a cluster without one answers with an
  error in words, which the page shows as is.
* **Embedded** (no live backend): what the renderer wrote for the job (the exact request the real backend
  would get): nothing ran, so there is no output. The file is on the portal's own disk: its path is shown
  to platform admins only (`show_paths`); others see its name, and in words why there is nothing to show
  (a cancelled job's request is removed with it).

Every read is bounded: the last ``limit`` bytes (``None``: everything, for "download all", capped at
MAX_DOWNLOAD). Text is returned as ``str``; escaping is the template's (autoescape), never done here.
"""

from __future__ import annotations

from django.utils.translation import gettext

from integrations import registry
from integrations.dispatch import backend_for
from integrations.embedded import PREFIX, RenderedJobBackend
from integrations.job_output import DEFAULT_LIMIT, JobLogs, _tail
from integrations.jobs import BackendError
from scheduling.choices import JobState
from scheduling.models import Job


def _rendered_logs(backend: RenderedJobBackend, job: Job, limit: int | None, show_paths: bool) -> JobLogs:
    name = (job.backend_id or "").removeprefix(PREFIX)
    logs = JobLogs(
        source=gettext("the embedded backend (no live scheduler): the request it rendered; nothing ran")
    )
    if not job.backend_id.startswith(PREFIX) or not name or "/" in name:
        logs.error = gettext("The job has not been handed to a backend yet.")
        return logs
    path = backend._file(name)
    part = _tail(path, limit)
    if show_paths:
        logs.parts.append(part)
    elif part.error:  # in words, without the portal's own path
        logs.error = (
            gettext("The embedded backend removed the request it rendered when the job was cancelled.")
            if job.state == JobState.CANCELLED
            else gettext("The job's log is not available from the portal yet.")
        )
    else:
        part.name = path.name
        logs.parts.append(part)
    return logs


def job_logs(job: Job, limit: int | None = DEFAULT_LIMIT, *, show_paths: bool = False) -> JobLogs:
    """The job's output as its backend keeps it, the last `limit` bytes of each stream (None: all, capped
    at MAX_DOWNLOAD). Never raises for an outside system's failure: the error is in the result, in words.
    `show_paths`: files on the portal's own disk named by their paths (platform admins), else their names."""
    try:
        backend, label, _ = backend_for(job.backend, job.backend_id)
    except BackendError as error:
        return JobLogs(
            source=job.get_backend_display(),
            error=gettext("No backend runs this job: %(error)s") % {"error": error},
        )
    if isinstance(backend, RenderedJobBackend) or (job.backend_id or "").startswith(PREFIX):
        if not isinstance(backend, RenderedJobBackend):
            return JobLogs(
                source=label,
                error=gettext("The job ran on the embedded backend, which is no longer the one configured."),
            )
        return _rendered_logs(backend, job, limit, show_paths)
    kind = registry.job_kind(job.backend)
    try:
        if kind is not None and kind.read_logs is not None:
            return kind.read_logs(backend, job, limit)
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()
    return JobLogs(
        source=label, error=gettext("Rackplane cannot read logs from %(label)s.") % {"label": label}
    )
