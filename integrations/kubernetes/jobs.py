"""KubernetesJobBackend: runs one placed Rackplane job as Kubernetes objects (the `JobBackend` interface).

`render_job_objects` and `job_status` (job_objects.py: what a job becomes, and why) and the adapter that
creates, reads and deletes those objects through the official `kubernetes` client.

The adapter: `submit` creates the ComputeDomain, then the Job (POST, `fieldManager=rackplane`,
`fieldValidation=Strict`); a 409 AlreadyExists is an earlier try's object, adopted when it carries this
job's id and run (and, for a ComputeDomain, the same channel template: its spec is immutable, a CEL rule
of the CRD, so a different one is refused with what to do rather than patched). An object of that name that
is being deleted is reported as such (transient: the retry creates it again once it is gone). When the API
server refuses the Job for good after its ComputeDomain was made, the ComputeDomain is deleted again so
nothing of a failed job stays. `status` reads the Jobs (and, once a Job has pods, their nodes and exit
codes; without permission to list pods the state is still read from the Job, and the message says the nodes
and exit code are unknown). `cancel` deletes the Job with `propagationPolicy=Foreground` and then its
ComputeDomain; 404 is success. Foreground because the Job then stays, with a deletionTimestamp and the
`foregroundDeletion` finalizer, until the garbage collector has removed its pods: while that lasts `status`
says CANCELLED (never RUNNING, whatever its pods still report), a resubmission of the same run is told the
old one is still being deleted (its pods may still hold the trays), and a vanished Job means the trays are
free. Errors: connection refused, timeouts, 429 and 5xx -> `BackendUnavailable`; any other 4xx (a missing
or terminating namespace, RBAC, an invalid object's 422) -> `BackendRejected` with the API server's
message; a TLS or configuration failure -> `BackendRejected` (retrying will not fix it). `dry_run` sends
creates and deletes with `dryRun=All`: the API server checks them and stores nothing (a later `status`
says UNKNOWN).

Not done here: a headless Service for pod-to-pod DNS by hostname (workloads that need it rendezvous through
index 0's pod IP or their own launcher), and Kueue accounting of the IMEX channel claim (Kueue counts DRA
claims only with its DRA feature gate; GPUs are counted through `nvidia.com/gpu`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pydantic
import urllib3

from core.outbound import ALLOW_PRIVATE_SETTING, OutboundRefused
from integrations.jobs import (
    BackendError,
    BackendJobState,
    BackendJobStatus,
    BackendRejected,
    BackendUnavailable,
    DispatchRequest,
)
from integrations.kubernetes.job_objects import (
    ATTEMPT_LABEL,
    CONTROLLER_UID_LABEL,
    JOB_ID_LABEL,
    job_status,
    render_job_objects,
)
from integrations.kubernetes.render import COMPUTE_DOMAIN_API_VERSION
from integrations.kubernetes.target import (
    FIELD_MANAGER,
    KubernetesConfigurationError,
    KubernetesTarget,
)

if TYPE_CHECKING:
    from kubernetes import client as k8s_client

COMPUTE_DOMAIN_GROUP, _, COMPUTE_DOMAIN_VERSION = COMPUTE_DOMAIN_API_VERSION.partition("/")
COMPUTE_DOMAIN_PLURAL = "computedomains"
CHECKPOINT_ANNOTATION = "rackplane.io/checkpoint-by"  # signal(): the Job and its pods are asked to checkpoint
MERGE_PATCH = "application/merge-patch+json"


# --- the adapter --------------------------------------------------------------------------------------


def _message(data: Any) -> str:
    if isinstance(data, dict):
        return str(data.get("message") or data.get("reason") or data)
    return str(data or "no message")


def _reason(data: Any) -> str:
    return str(data.get("reason") or "") if isinstance(data, dict) else ""


class KubernetesJobBackend:
    """Jobs on one Kubernetes cluster, through its API server. See the module docstring.

    Configure with `api_url` + `token` + (`ca_file` or `insecure=True`), or hand in a ready `api_client`.
    The connection (Configuration, CA handling, no client-side retries) is the one `KubernetesTarget` makes.
    """

    def __init__(
        self,
        api_url: str | None = None,
        *,
        token: str | None = None,
        ca_file: str | None = None,
        insecure: bool = False,
        dry_run: bool = False,
        timeout: float = 30.0,
        api_client: k8s_client.ApiClient | None = None,
        allow_private: bool = True,
    ):
        try:
            self._target = KubernetesTarget(
                api_url,
                token=token,
                ca_cert=ca_file,
                insecure=insecure,
                timeout=timeout,
                api_client=api_client,
                allow_private=allow_private,
            )
        except KubernetesConfigurationError as error:
            raise BackendRejected(str(error)) from error
        self.timeout = timeout
        self.dry_run = dry_run
        self.api = self._target.api
        from kubernetes import client as k8s_client  # imported with a connection (client.py says why)

        self.batch = k8s_client.BatchV1Api(self.api)
        self.core = k8s_client.CoreV1Api(self.api)
        self.custom = k8s_client.CustomObjectsApi(self.api)

    def close(self) -> None:
        self._target.close()

    def __enter__(self) -> KubernetesJobBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- HTTP -------------------------------------------------------------------------------------

    def _call(self, what: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[int, Any]:
        """One API call -> (status, decoded JSON). Raises BackendUnavailable when the API server cannot be
        reached, times out, throttles (429) or fails (5xx), BackendRejected on TLS failures; returns other
        4xx answers for the caller to judge."""
        from kubernetes.client.rest import ApiException

        host = self.api.configuration.host
        try:
            response = method(
                *args, _preload_content=False, _request_timeout=(self.timeout, self.timeout), **kwargs
            )
            status, raw = response.status, response.data
        except ApiException as error:
            if not error.status:  # the REST layer reports TLS failures as status 0
                reason = " ".join(str(error.reason).split())  # one line: the SSL error carries a newline
                raise BackendRejected(
                    f"{what}: cannot establish a trusted connection to {host}: {reason} "
                    "(check the API URL and the cluster CA certificate)"
                ) from error
            status, raw = error.status, error.body
        except OutboundRefused as error:  # the outbound guard (core.outbound): asking again gets the same
            raise BackendRejected(f"{what}: {error}") from error
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise BackendUnavailable(
                f"{what}: the API server at {host} is not reachable: {type(error).__name__}: {error}"
            ) from error
        except pydantic.ValidationError as error:  # the client's own model check refused the request
            raise BackendRejected(f"{what}: the Kubernetes client refused the request: {error}") from error
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", "replace")
        try:
            data = json.loads(raw) if raw and raw.strip() else None
        except json.JSONDecodeError:
            data = raw
        if status == 429 or status >= 500:
            raise BackendUnavailable(f"{what}: the API server answered {status}: {_message(data)}")
        return status, data

    def _rejected(self, what: str, status: int, data: Any) -> BackendRejected:
        reason, message = _reason(data), _message(data)
        causes = [
            f"{c.get('field', '')}: {c.get('message', '')}".strip(": ")
            for c in ((data.get("details") or {}).get("causes") or [] if isinstance(data, dict) else [])
        ]
        # A real 422's message already lists its causes: only what it leaves out is added.
        causes = [c for c in causes if c not in message]
        detail = f" [{'; '.join(causes)}]" if causes else ""
        return BackendRejected(
            f"{what}: the API server refused it ({status}{' ' + reason if reason else ''}): {message}{detail}"
        )

    def _dry_run(self) -> dict[str, str]:
        return {"dry_run": "All"} if self.dry_run else {}

    # --- objects ----------------------------------------------------------------------------------

    def _create(self, obj: dict[str, Any]) -> tuple[int, Any]:
        namespace = obj["metadata"]["namespace"]
        options = {
            "field_manager": FIELD_MANAGER,
            "field_validation": "Strict",
            "_headers": {"Content-Type": "application/json"},
            **self._dry_run(),
        }
        what = f"creating {obj['kind']} {namespace}/{obj['metadata']['name']}"
        if obj["kind"] == "Job":
            return self._call(what, self.batch.create_namespaced_job, namespace, obj, **options)
        return self._call(
            what,
            self.custom.create_namespaced_custom_object,
            COMPUTE_DOMAIN_GROUP,
            COMPUTE_DOMAIN_VERSION,
            namespace,
            COMPUTE_DOMAIN_PLURAL,
            obj,
            **options,
        )

    def _read(self, kind: str, namespace: str, name: str) -> tuple[int, Any]:
        what = f"reading {kind} {namespace}/{name}"
        if kind == "Job":
            return self._call(what, self.batch.read_namespaced_job, name, namespace)
        return self._call(
            what,
            self.custom.get_namespaced_custom_object,
            COMPUTE_DOMAIN_GROUP,
            COMPUTE_DOMAIN_VERSION,
            namespace,
            COMPUTE_DOMAIN_PLURAL,
            name,
        )

    def _create_or_adopt(self, obj: dict[str, Any], request: DispatchRequest) -> None:
        kind, metadata = obj["kind"], obj["metadata"]
        ref = f"{kind} {metadata['namespace']}/{metadata['name']}"
        status, data = self._create(obj)
        if status < 400:
            return
        if status != 409:
            raise self._rejected(f"creating {ref}", status, data)
        status, live = self._read(kind, metadata["namespace"], metadata["name"])
        if status == 404:  # gone between the two calls (being deleted): the retry creates it
            raise BackendUnavailable(f"creating {ref}: it existed a moment ago and is gone now; retry")
        if status >= 400:
            raise self._rejected(f"reading {ref}", status, live)
        live_meta = live.get("metadata") or {}
        live_labels = live_meta.get("labels") or {}
        mine = {JOB_ID_LABEL: str(request.job_id), ATTEMPT_LABEL: str(request.attempt)}
        theirs = {k: live_labels.get(k) for k in mine}
        if theirs != mine:
            raise BackendRejected(
                f"creating {ref}: an object of that name exists and is not Rackplane job {request.job_id}'s "
                f"run {request.attempt} (its labels: {theirs})"
            )
        if live_meta.get("deletionTimestamp"):
            waiting = ", ".join(live_meta.get("finalizers") or []) or "nothing"
            raise BackendUnavailable(
                f"creating {ref}: the earlier {kind} of this name is still being deleted (since "
                f"{live_meta['deletionTimestamp']}, waiting on: {waiting}); it is created again once that "
                "one is gone. If it stays, check that the cluster's garbage collector "
                "(kube-controller-manager) runs"
            )
        if kind == "ComputeDomain":
            wanted = obj["spec"]["channel"]["resourceClaimTemplate"]["name"]
            have = (((live.get("spec") or {}).get("channel") or {}).get("resourceClaimTemplate") or {}).get(
                "name"
            )
            if have != wanted:
                raise BackendRejected(
                    f"creating {ref}: the existing ComputeDomain's channel template is {have!r}, "
                    f"not {wanted!r} (its spec is immutable: delete it, then submit again)"
                )

    # --- JobBackend ----------------------------------------------------------------------------------

    def submit(self, request: DispatchRequest) -> str:
        """Create the ComputeDomain (if any), then the Job; adopt what an earlier try created.
        Returns "<namespace>/<job name>"."""
        if request.run_as is None:
            raise BackendRejected(
                f"job {request.job_id}: its person has no POSIX identity (uid, gid) to run it as; a "
                "Kubernetes job runs as its person (runAsUser/runAsGroup/fsGroup), never as the image's "
                "user. An administrator gives the person one (LDAP uidNumber/gidNumber, OIDC claims or the "
                "admin mapping); then submit it again"
            )
        try:
            objects = render_job_objects(request)
        except ValueError as error:
            raise BackendRejected(f"job {request.job_id}: {error}") from error
        domain: dict[str, Any] | None = None
        for obj in objects:
            try:
                self._create_or_adopt(obj, request)
            except BackendRejected as error:
                if domain is None or self.dry_run:
                    raise
                # The job fails for good: its ComputeDomain (made or adopted just now) must not stay behind.
                raise BackendRejected(f"{error}{self._remove(domain)}") from error
            if obj["kind"] == "ComputeDomain":
                domain = obj
        job = objects[-1]["metadata"]
        return f"{job['namespace']}/{job['name']}"

    def _remove(self, domain: dict[str, Any]) -> str:
        """Delete the ComputeDomain of a job the API server refused; words to append to the refusal."""
        metadata = domain["metadata"]
        ref = f"ComputeDomain {metadata['namespace']}/{metadata['name']}"
        try:
            status, data = self._delete_domain(metadata["namespace"], metadata["name"])
        except BackendError as error:
            return f" (removing its {ref} failed: {error}; cancelling the job removes it)"
        if status >= 400 and status != 404:
            return f" (removing its {ref} failed: {status} {_message(data)}; cancelling the job removes it)"
        return f" (its {ref} was removed)"

    def _delete_domain(self, namespace: str, name: str) -> tuple[int, Any]:
        return self._call(
            f"deleting ComputeDomain {namespace}/{name}",
            self.custom.delete_namespaced_custom_object,
            COMPUTE_DOMAIN_GROUP,
            COMPUTE_DOMAIN_VERSION,
            namespace,
            COMPUTE_DOMAIN_PLURAL,
            name,
            **self._dry_run(),
        )

    def _pods(self, namespace: str, job: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        """The Job's pods (by its uid, as the Job controller labels them), and words to add to the status
        when they cannot be listed (e.g. RBAC without `list pods`): the Job's state is still known from the
        Job itself, only its nodes and exit code are not."""
        uid = (job.get("metadata") or {}).get("uid")
        if not uid:
            return [], ""
        status, data = self._call(
            f"listing the pods of Job {namespace}/{job['metadata'].get('name')}",
            self.core.list_namespaced_pod,
            namespace,
            label_selector=f"{CONTROLLER_UID_LABEL}={uid}",
        )
        if status >= 400:
            return [], (
                f" (its pods could not be listed: {status} {_message(data)}; its nodes and exit code are "
                "unknown)"
            )
        return (data or {}).get("items") or [], ""

    def status(self, backend_ids: list[str]) -> dict[str, BackendJobStatus]:
        out: dict[str, BackendJobStatus] = {}
        for backend_id in backend_ids:
            if backend_id in out:
                continue
            namespace, _, name = backend_id.partition("/")
            if not namespace or not name or "/" in name:
                out[backend_id] = BackendJobStatus(
                    backend_id, BackendJobState.UNKNOWN, "not a Kubernetes job id (<namespace>/<name>)"
                )
                continue
            status, job = self._read("Job", namespace, name)
            if status == 404:
                out[backend_id] = BackendJobStatus(backend_id, BackendJobState.UNKNOWN, "no such Job")
                continue
            if status >= 400:
                raise self._rejected(f"reading Job {backend_id}", status, job)
            counts = job.get("status") or {}
            started = any(counts.get(k) for k in ("active", "ready", "succeeded", "failed"))
            pods, note = self._pods(namespace, job) if started else ([], "")
            result = job_status(backend_id, job, pods)
            out[backend_id] = dataclasses.replace(result, message=result.message + note) if note else result
        return out

    def signal(self, backend_id: str, signal: str = "USR1", *, deadline: str = "") -> bool:
        """Ask a running Job to checkpoint (scheduling.requeue): Kubernetes cannot signal a container from
        outside, so the Job and each of its pods get the annotation `rackplane.io/checkpoint-by` (the
        deadline, else the signal's name), which a workload reads through a downward API volume (updated in
        place). False when the Job is gone: nothing to ask."""
        namespace, _, name = backend_id.partition("/")
        if not namespace or not name or "/" in name:
            raise BackendRejected(f"{backend_id!r} is not a Kubernetes job id (<namespace>/<name>)")
        what = f"annotating Job {backend_id} to checkpoint"
        patch = {"metadata": {"annotations": {CHECKPOINT_ANNOTATION: deadline or f"SIG{signal}"}}}
        status, data = self._call(
            what,
            self.batch.patch_namespaced_job,
            name,
            namespace,
            patch,
            _content_type=MERGE_PATCH,
            **self._dry_run(),
        )
        if status == 404:
            return False
        if status >= 400:
            raise self._rejected(what, status, data)
        pods, _ = self._pods(namespace, data or {})
        for pod in pods:
            pod_name = (pod.get("metadata") or {}).get("name")
            status, data = self._call(
                f"annotating pod {namespace}/{pod_name} to checkpoint",
                self.core.patch_namespaced_pod,
                pod_name,
                namespace,
                patch,
                _content_type=MERGE_PATCH,
                **self._dry_run(),
            )
            if status >= 400 and status != 404:
                raise self._rejected(f"annotating pod {namespace}/{pod_name}", status, data)
        return True

    def cancel(self, backend_id: str) -> None:
        namespace, _, name = backend_id.partition("/")
        if not namespace or not name or "/" in name:
            raise BackendRejected(f"{backend_id!r} is not a Kubernetes job id (<namespace>/<name>)")
        status, data = self._call(
            f"deleting Job {backend_id}",
            self.batch.delete_namespaced_job,
            name,
            namespace,
            propagation_policy="Foreground",
            **self._dry_run(),
        )
        if status >= 400 and status != 404:
            raise self._rejected(f"deleting Job {backend_id}", status, data)
        # The ComputeDomain has the Job's name; a one-tray job has none (404). A 404 without a Status of
        # kind NotFound for the object (the CRD is not installed) is just as much "nothing to delete".
        status, data = self._delete_domain(namespace, name)
        if status >= 400 and status != 404:
            raise self._rejected(f"deleting ComputeDomain {backend_id}", status, data)


def backend_from_settings(settings: dict[str, Any], *, timeout: float = 30.0) -> KubernetesJobBackend:
    """The backend for a `kubernetes` ConfigTarget's settings (api_url, token, ca_file, insecure, dry_run;
    see integrations/kubernetes/kind.py). Missing keys take those defaults."""
    return KubernetesJobBackend(
        settings.get("api_url") or None,
        token=settings.get("token") or None,
        ca_file=settings.get("ca_file") or None,
        insecure=bool(settings.get("insecure", False)),
        dry_run=bool(settings.get("dry_run", False)),
        timeout=timeout,
        allow_private=bool(settings.get(ALLOW_PRIVATE_SETTING, True)),
    )


__all__ = ["KubernetesJobBackend", "backend_from_settings"]
