"""A job's output, read from where its backend keeps it: the effect behind the job page's "Logs" panel.

* **Slurm**: slurmrestd has no endpoint that returns a job's output; ``GET /slurm/v0.0.42/job/{id}`` gives
  the path it writes to (``standard_output``, with ``%j`` and friends expanded by Slurm) on the job's first
  node. Rackplane submits with ``standard_output = <workdir>/<name>-%j.out`` (integrations.slurm.jobs), so a
  job slurmctld has forgotten still has a known path. The file is read when the portal can see it (the
  jobs' working directory is a shared filesystem mounted at the same path on the portal); otherwise the page
  says where the output is and why it cannot show it.
* **Kubernetes**: the pods of the job's Job (label selector ``job-name=<name>``, which the Job controller
  sets) and each pod's log through the API (``GET .../pods/{name}/log``, ``limitBytes`` bounds what the API
  server sends). The API server fetches logs from the node's kubelet: a cluster without one answers with an
  error in words, which the page shows as is.
* **Embedded** (no live backend): what the renderer wrote for the job (the exact request the real backend
  would get): nothing ran, so there is no output.

Every read is bounded: the last ``limit`` bytes (``None``: everything, for "download all", capped at
MAX_DOWNLOAD). Text is returned as ``str``; escaping is the template's (autoescape), never done here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from integrations.dispatch import backend_for
from integrations.embedded import PREFIX, RenderedJobBackend
from integrations.jobs import BackendError
from scheduling.choices import Backend
from scheduling.models import Job

DEFAULT_LIMIT = 64 * 1024  # what the page shows: the last 64 KiB
MAX_DOWNLOAD = (
    16 * 1024 * 1024
)  # "download all" stops here too: a runaway log must not fill the portal's memory
MAX_PODS = 36  # one pod per tray: 18 trays per rack, a job on two whole racks


@dataclass
class LogPart:
    """One stream of output: a file, or one pod's log."""

    name: str
    text: str = ""
    size: int | None = None  # bytes in the whole stream, when known
    truncated: bool = False  # only the last `limit` bytes are in `text`
    error: str = ""


@dataclass
class JobLogs:
    source: str  # where the output comes from, in words
    parts: list[LogPart] = field(default_factory=list)
    error: str = ""  # why nothing could be read at all

    @property
    def truncated(self) -> bool:
        return any(part.truncated for part in self.parts)

    def as_text(self) -> str:
        """All parts as one text (the download), each under a header line when there are several."""
        if len(self.parts) == 1:
            return self.parts[0].text
        chunks = []
        for part in self.parts:
            chunks.append(f"==> {part.name} <==\n")
            chunks.append(part.text if not part.error else f"({part.error})\n")
        return "".join(chunks)


def _tail(path: Path, limit: int | None) -> LogPart:
    """The last `limit` bytes of a file (decoded as UTF-8, bad bytes replaced), starting at a line."""
    cap = MAX_DOWNLOAD if limit is None else limit
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            start = max(0, size - cap)
            handle.seek(start)
            data = handle.read(cap)
    except FileNotFoundError:
        return LogPart(str(path), error=f"{path} does not exist (yet) where the portal can read it")
    except OSError as error:
        return LogPart(str(path), error=f"{path} cannot be read: {error.strerror or error}")
    if start and b"\n" in data:
        data = data[data.index(b"\n") + 1 :]  # begin at a whole line
    return LogPart(str(path), data.decode("utf-8", "replace"), size=size, truncated=start > 0)


def _expand_slurm_path(pattern: str, backend_id: str, name: str, user: str) -> str:
    """Slurm's filename patterns for what Rackplane submits: %j/%A job id, %x name, %u user, %% a percent."""
    values = {"j": backend_id, "A": backend_id, "x": name, "u": user, "%": "%"}
    return re.sub(r"%(\w|%)", lambda m: values.get(m.group(1), m.group(0)), pattern)


def _slurm_logs(backend, job: Job, limit: int | None) -> JobLogs:
    backend_id = job.backend_id
    logs = JobLogs(source="Slurm")
    if not re.fullmatch(r"[1-9][0-9]{0,9}", backend_id or ""):
        logs.error = "The job has no Slurm job id yet: it has not been submitted to Slurm."
        return logs
    run_name = f"rp-{job.pk}" if not job.preemptions else f"rp-{job.pk}-{job.preemptions}"
    path = f"{backend.workdir.rstrip('/')}/{run_name}-{backend_id}.out"
    record = None
    try:
        record = backend._job(backend_id)
    except BackendError as error:
        logs.error = f"slurmrestd could not be asked where the output is: {error}"
    if record is not None:
        stdout = record.get("standard_output") or ""
        if stdout:
            path = _expand_slurm_path(
                stdout, backend_id, str(record.get("name") or run_name), str(record.get("user_name") or "")
            )
    logs.source = f"Slurm job {backend_id}'s output file {path}"
    if not path.startswith("/"):
        path = f"{backend.workdir.rstrip('/')}/{path}"
    # Only files inside the jobs' working directory: a path from the outside never opens other portal files.
    workdir = Path(backend.workdir).resolve()
    if not Path(path).resolve().is_relative_to(workdir):
        logs.parts.append(
            LogPart(path, error=f"{path} is outside the jobs' working directory {workdir}: not read")
        )
        return logs
    part = _tail(Path(path), limit)
    if part.error:
        part.error += (
            " (Slurm writes it on the job's first node; mount the jobs' working directory at the same path "
            "on the portal to read it here)"
        )
    logs.parts.append(part)
    return logs


def _pod_log(backend, namespace: str, pod: str, limit: int | None) -> LogPart:
    from kubernetes.client.exceptions import ApiException

    cap = MAX_DOWNLOAD if limit is None else limit
    try:
        response = backend.core.read_namespaced_pod_log(
            pod,
            namespace,
            limit_bytes=cap + 1,
            _preload_content=False,
            _request_timeout=(backend.timeout, backend.timeout),
        )
        data = response.data or b""
    except ApiException as error:
        return LogPart(pod, error=f"the API server answered {error.status}: {_api_words(error.body)}")
    except Exception as error:  # urllib3/OS errors: the API server is not reachable
        return LogPart(pod, error=f"the API server could not be reached: {type(error).__name__}: {error}")
    truncated = len(data) > cap
    if truncated:
        data = data[-cap:]
        if b"\n" in data:
            data = data[data.index(b"\n") + 1 :]
    return LogPart(pod, data.decode("utf-8", "replace"), truncated=truncated)


def _api_words(body) -> str:
    import json

    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        decoded = json.loads(body) if body else None
    except (TypeError, ValueError):
        decoded = None
    if isinstance(decoded, dict) and decoded.get("message"):
        return str(decoded["message"])
    return " ".join(str(body or "no details").split())[:500]


def kubernetes_logs(backend, backend_id: str, limit: int | None = DEFAULT_LIMIT) -> JobLogs:
    """The logs of the pods of Kubernetes Job `<namespace>/<name>`, each bounded to `limit` bytes."""
    namespace, _, name = (backend_id or "").partition("/")
    logs = JobLogs(source=f"the pods of Kubernetes Job {backend_id}")
    if not namespace or not name or "/" in name:
        logs.error = "The job has no Kubernetes Job yet: it has not been submitted to Kubernetes."
        return logs
    try:
        status, data = backend._call(
            f"listing the pods of Job {backend_id}",
            backend.core.list_namespaced_pod,
            namespace,
            label_selector=f"job-name={name}",
        )
    except BackendError as error:
        logs.error = f"The pods could not be listed: {error}"
        return logs
    if status >= 400:
        message = data.get("message") if isinstance(data, dict) else data
        logs.error = f"The pods could not be listed: the API server answered {status}: {message}"
        return logs
    pods = sorted((item.get("metadata") or {}).get("name", "") for item in (data or {}).get("items") or [])[
        :MAX_PODS
    ]
    if not pods:
        logs.error = f"Job {backend_id} has no pods (not started yet, or already cleaned up)."
        return logs
    logs.parts = [_pod_log(backend, namespace, pod, limit) for pod in pods if pod]
    return logs


def _rendered_logs(backend: RenderedJobBackend, job: Job, limit: int | None) -> JobLogs:
    name = (job.backend_id or "").removeprefix(PREFIX)
    logs = JobLogs(source="the embedded backend (no live scheduler): the request it rendered; nothing ran")
    if not job.backend_id.startswith(PREFIX) or not name or "/" in name:
        logs.error = "The job has not been handed to a backend yet."
        return logs
    logs.parts.append(_tail(backend._file(name), limit))
    return logs


def job_logs(job: Job, limit: int | None = DEFAULT_LIMIT) -> JobLogs:
    """The job's output as its backend keeps it, the last `limit` bytes of each stream (None: all, capped
    at MAX_DOWNLOAD). Never raises for an outside system's failure: the error is in the result, in words."""
    try:
        backend, label, _ = backend_for(job.backend, job.backend_id)
    except BackendError as error:
        return JobLogs(source=job.get_backend_display(), error=f"No backend runs this job: {error}")
    if isinstance(backend, RenderedJobBackend) or (job.backend_id or "").startswith(PREFIX):
        if not isinstance(backend, RenderedJobBackend):
            return JobLogs(
                source=label,
                error="The job ran on the embedded backend, which is no longer the one configured.",
            )
        return _rendered_logs(backend, job, limit)
    try:
        if job.backend == Backend.SLURM:
            return _slurm_logs(backend, job, limit)
        if job.backend == Backend.KUBERNETES:
            return kubernetes_logs(backend, job.backend_id, limit)
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()
    return JobLogs(source=label, error=f"Rackplane cannot read logs from {label}.")
