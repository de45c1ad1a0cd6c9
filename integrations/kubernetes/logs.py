"""A Kubernetes job's output (Kind.read_logs of the Kubernetes kind; integrations.logs picks it from the
registry): the pods of the job's Job (label selector ``job-name=<name>``, which the Job controller sets) and
each pod's log through the API (``GET .../pods/{name}/log``, ``limitBytes`` bounds what the API server
sends). The API server fetches logs from the node's kubelet: a cluster without one answers with an error in
words, which the page shows as is.
"""

from __future__ import annotations

from django.utils.translation import gettext

from integrations.job_output import DEFAULT_LIMIT, MAX_DOWNLOAD, JobLogs, LogPart
from integrations.jobs import BackendError

MAX_PODS = 36  # one pod per tray: 18 trays per rack, a job on two whole racks


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
        return LogPart(
            pod,
            error=gettext("the API server answered %(status)s: %(words)s")
            % {"status": error.status, "words": _api_words(error.body)},
        )
    except Exception as error:  # urllib3/OS errors: the API server is not reachable
        return LogPart(
            pod,
            error=gettext("the API server could not be reached: %(error)s")
            % {"error": f"{type(error).__name__}: {error}"},
        )
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
    logs = JobLogs(source=gettext("the pods of Kubernetes Job %(job)s") % {"job": backend_id})
    if not namespace or not name or "/" in name:
        logs.error = gettext("The job has no Kubernetes Job yet: it has not been submitted to Kubernetes.")
        return logs
    try:
        status, data = backend._call(
            f"listing the pods of Job {backend_id}",
            backend.core.list_namespaced_pod,
            namespace,
            label_selector=f"job-name={name}",
        )
    except BackendError as error:
        logs.error = gettext("The pods could not be listed: %(error)s") % {"error": error}
        return logs
    if status >= 400:
        message = data.get("message") if isinstance(data, dict) else data
        logs.error = gettext(
            "The pods could not be listed: the API server answered %(status)s: %(message)s"
        ) % {
            "status": status,
            "message": message,
        }
        return logs
    pods = sorted((item.get("metadata") or {}).get("name", "") for item in (data or {}).get("items") or [])[
        :MAX_PODS
    ]
    if not pods:
        logs.error = gettext("Job %(job)s has no pods (not started yet, or already cleaned up).") % {
            "job": backend_id
        }
        return logs
    logs.parts = [_pod_log(backend, namespace, pod, limit) for pod in pods if pod]
    return logs


def read_logs(backend, job, limit: int | None) -> JobLogs:
    """Kind.read_logs: the job's Kubernetes Job is its backend id, `<namespace>/<name>`."""
    return kubernetes_logs(backend, job.backend_id, limit)
