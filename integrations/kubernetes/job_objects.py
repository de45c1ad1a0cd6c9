"""A Rackplane job as Kubernetes objects: `render_job_objects` (pure: a `DispatchRequest` in, validated plain
dicts out) and `job_status` (a Job and its pods read back as a `BackendJobStatus`). The adapter that creates,
reads and deletes them is `KubernetesJobBackend` (jobs.py).

What a job becomes, and why:

* **One Indexed batch/v1 Job**, `completions = parallelism = number of trays`, one pod per tray. One Job (not
  one Job per tray) because Kueue admits a Job as one Workload with one pod set of N pods: the trays are
  admitted, preempted and requeued together (gang), and one object carries the job's state. One Job per tray
  would be N Workloads that Kueue admits one by one, so a multi-tray job could half start. Indexed completion
  mode gives every pod a stable `JOB_COMPLETION_INDEX` (its rank) and hostname `<job>-<index>`.
* **Pinned to exactly the chosen trays**: required node affinity `kubernetes.io/hostname In <hostnames>` (only
  those nodes) plus, for more than one tray, a required pod anti-affinity on `kubernetes.io/hostname` against
  the pods of this run of the job (labels `rackplane.io/job-id` and `rackplane.io/attempt`), so no two pods
  share a tray: N pods on N allowed nodes, one each, i.e. exactly the chosen set. Which index lands on which
  tray is left to the scheduler (a pod template cannot vary per index); every tray of the set is in the
  placement's NVLink partition anyway.
* **GPUs** through the device plugin's extended resource: request = limit = `nvidia.com/gpu: gpus_per_tray`
  (extended resources cannot be overcommitted, so the two must be equal). This is also what Kueue counts
  against the department's ClusterQueue (`tenants.cluster_queue` covers `nvidia.com/gpu`). A slice job
  (scheduling.slices) asks instead `nvidia.com/mig-<profile>: <count>` (the GPU Operator's `mixed` MIG
  strategy) and no `nvidia.com/gpu`; the ClusterQueues cover every MIG resource the fleet's layouts offer,
  in GPU-equivalents (`tenants.mig_quota`), so Kueue admits it like a whole-GPU job.
* **A ComputeDomain for jobs of more than one tray** (NVIDIA DRA driver, `resource.nvidia.com/v1beta1`, in
  the department namespace, `numNodes: 0` as the CRD recommends, `channel.resourceClaimTemplate.name` =
  `<job>-imex-channel`): multi-node NVLink needs an IMEX domain scoped to the job. The driver creates a
  ResourceClaimTemplate of that name in the namespace; every pod claims a channel from it through
  `spec.resourceClaims: [{name: imex-channel, resourceClaimTemplateName: <job>-imex-channel}]` and the
  container's `resources.claims: [{name: imex-channel}]`. Decision: **a one-tray job gets none**: IMEX
  exports and imports GPU memory between OS instances (nodes); the GPUs of one tray share one OS and need no
  IMEX channel, and a ComputeDomain would start IMEX daemons (and an extra DRA claim) for nothing.
  The ComputeDomain has the Job's name (a different kind: no clash), so `cancel` finds it from the job id.
* **Kueue**: label `kueue.x-k8s.io/queue-name: default` (the department's LocalQueue, see
  `tenants.LOCAL_QUEUE_NAME`) and `suspend: true`, as Kueue's own webhook would set
  (`jobframework.ApplyDefaultForSuspend` suspends every Job that names a queue): no pod starts before Kueue
  admits the Workload. No `kueue.x-k8s.io/priority-class` label: it names a `WorkloadPriorityClass`, and
  Rackplane renders none (no such object anywhere in `tenants.py` or `render.py`, and no CRD for it
  in `crds/`); Kueue would hold a Job that names a missing class. The priority class is carried as
  Rackplane's own label instead (`rackplane.io/priority-class`), for people and for a later mapping. No
  topology-aware-scheduling annotation either: the placement engine has already chosen the trays.
* **Runs as its person, Pod Security `restricted`**: the pod's securityContext takes the person's POSIX
  identity (`request.run_as`, core.posix): `runAsUser` = uid, `runAsGroup` = `fsGroup` = gid,
  `supplementalGroups` = the person's other groups with `supplementalGroupsPolicy: Strict` (the image's
  /etc/group adds none: an image could otherwise put the uid into another tenant's group), `runAsNonRoot`,
  seccomp `RuntimeDefault`; the container: `allowPrivilegeEscalation: false`, every capability dropped,
  `runAsNonRoot`. That is the `restricted` Pod Security Standard the tenant namespaces enforce
  (`tenants.POD_SECURITY_LABELS`), so the API server admits the pods and refuses anyone else's
  that are not. A request without an identity renders the same spec without the ids (the rendered-files
  backend of `make run`: the image's user, which the kubelet refuses to start if it is root), and the
  adapter refuses to submit it: on a real cluster every job runs as someone.
* **Lifecycle**: `backoffLimit: 0` (a failed pod fails the job: a restarted rank cannot rejoin a collective),
  `restartPolicy: Never`, `activeDeadlineSeconds` = the time limit (the Job controller resets the Job's
  start time when Kueue unsuspends it, so the deadline runs from admission, like a Slurm time limit). No
  `ttlSecondsAfterFinished`: a finished Job stays so its final state can be read; `cancel` removes it.
* **Names and labels**: the Job and the ComputeDomain are named from `request.rackplane_name` (`rp-<id>`, or
  `rp-<id>-<attempt>` for a run after a preemption: every run has its own objects), made a DNS-1123 label
  of at most 50 characters (room for the `-<index>` pod hostnames and the `-imex-channel` suffix). Labels:
  `app.kubernetes.io/managed-by: rackplane`, `rackplane.io/job-id`, `rackplane.io/attempt`,
  `rackplane.io/department`, `rackplane.io/priority-class`; the human job name goes into the annotation
  `rackplane.io/job-name`. These kinds are not in `target.MANAGED_KINDS`, so a configuration push never
  prunes a running job's objects.

Every object is validated before anything is sent (`validate.validate`: kubernetes-validate for the Job at
`validate.KUBERNETES_VERSION`, the packaged CRD with its CEL rules for the ComputeDomain), and so are the
limits a real API server showed beyond the schemas: the time limit and the GPU count must fit the int64s
the server stores them in, the annotations 256 KiB, and the Job about 1 MiB (etcd's request limit is 1.5
MiB, and the server's answer to a Job over it is a confusing 422 about the Job's own controller-uid label).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from core.posix import PosixIdentity
from integrations.jobs import (
    BackendJobState,
    BackendJobStatus,
    DispatchRequest,
)
from integrations.kubernetes import validate as schema
from integrations.kubernetes.render import HOSTNAME_LABEL, compute_domain
from integrations.kubernetes.tenants import (
    DEPARTMENT_LABEL,
    GPU_RESOURCE,
    LOCAL_QUEUE_NAME,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MIG_RESOURCE_PROFILE,
    mig_resource,
)
from integrations.kubernetes.work import validate_work

JOB_ID_LABEL = "rackplane.io/job-id"
ATTEMPT_LABEL = "rackplane.io/attempt"  # which run of the job (DispatchRequest.attempt: preemptions before)
PRIORITY_CLASS_LABEL = "rackplane.io/priority-class"
JOB_NAME_ANNOTATION = "rackplane.io/job-name"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
# Set by the Job controller on every pod of a Job (Kubernetes >= 1.27): the Job's uid selects its pods.
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
IMEX_CLAIM = "imex-channel"  # the pod's name for its claim on the ComputeDomain's channel
CONTAINER_NAME = "main"
MAX_JOB_NAME = 50  # pod hostnames are "<job>-<index>" (at most 63); the claim template adds "-imex-channel"
# What the API server can store (seen on a real one): activeDeadlineSeconds is an int64 (a larger number is a
# 400 "cannot unmarshal"); an extended resource must be a whole number in milli-units that fit an int64 (a
# larger one is a 422 "must be an integer"); annotations hold 256 KiB in all; and a Job much over 1 MiB fails
# in etcd (1.5 MiB requests) with a 422 about its own controller-uid label that explains nothing.
INT64_MAX = 2**63 - 1
MAX_TIME_LIMIT_MINUTES = INT64_MAX // 60
MAX_GPUS_PER_TRAY = INT64_MAX // 1000
MAX_ANNOTATIONS_BYTES = 256 * 1024
MAX_OBJECT_BYTES = 1024 * 1024
_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


# --- rendering ----------------------------------------------------------------------------------------


def job_name(request: DispatchRequest) -> str:
    """The Job's (and ComputeDomain's) name: `request.rackplane_name` as a DNS-1123 label."""
    name = _NOT_DNS.sub("-", request.rackplane_name.lower()).strip("-")
    name = re.sub(r"-{2,}", "-", name)[:MAX_JOB_NAME].rstrip("-")
    if not name or not name[0].isalnum():
        raise ValueError(f"cannot make a Kubernetes name of {request.rackplane_name!r}")
    return name


def channel_template_name(name: str) -> str:
    """The ResourceClaimTemplate the DRA driver creates for the ComputeDomain `name`."""
    return f"{name}-imex-channel"


def _check_request(request: DispatchRequest) -> None:
    department = request.department
    if not isinstance(department, str) or len(department) > 63 or not _DNS_LABEL.match(department):
        raise ValueError(f"department {department!r} is not a Kubernetes namespace name")
    if request.project and (len(request.home) > 63 or not _DNS_LABEL.match(request.home)):
        raise ValueError(f"project namespace {request.home!r} is not a Kubernetes namespace name")
    if not request.hostnames:
        raise ValueError("the job has no trays (hostnames is empty)")
    if len(set(request.hostnames)) != len(request.hostnames):
        raise ValueError(f"a tray is listed twice in {list(request.hostnames)}")
    for host in request.hostnames:  # matched against the node label kubernetes.io/hostname: a label value
        if not isinstance(host, str) or not host or len(host) > 63 or not _LABEL_VALUE.match(host):
            raise ValueError(f"tray {host!r} is not a valid kubernetes.io/hostname label value")
    counts = [(request.time_limit_minutes, "time limit (minutes)", MAX_TIME_LIMIT_MINUTES)]
    if request.mig_slices or request.mig_profile:
        if len(request.hostnames) != 1 or request.gpus_per_tray:
            raise ValueError("a slice job runs on one tray and asks for no whole GPU")
        if not MIG_RESOURCE_PROFILE.match(request.mig_profile or ""):
            raise ValueError(
                f"{request.mig_profile!r} is not a MIG profile the device plugin names a resource after "
                "(<g>g.<memory>gb)"
            )
        counts.append((request.mig_slices, "mig_slices", MAX_MIG_SLICES_PER_TRAY))
    else:
        counts.append((request.gpus_per_tray, "gpus_per_tray", MAX_GPUS_PER_TRAY))
    for number, what, most in counts:
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise ValueError(f"{what} must be a whole number >= 1, got {number!r}")
        if number > most:
            raise ValueError(f"{what} must be at most {most} (what Kubernetes can store), got {number}")
    if request.run_as is not None and not isinstance(request.run_as, PosixIdentity):
        raise ValueError(f"run_as must be a core.posix.PosixIdentity, got {request.run_as!r}")
    # The one rule for a Kubernetes job's work (the jobs API asks the same one through core.workloads).
    validate_work(request.work if isinstance(request.work, dict) else {"image": None})


# A slice job's devices: `nvidia.com/mig-<profile>` (tenants.mig_resource, the resource the ClusterQueues
# cover too).
MAX_MIG_SLICES_PER_TRAY = 28  # 7 MIG devices on each of a tray's 4 GPUs


def _labels(request: DispatchRequest) -> dict[str, str]:
    return {
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
        JOB_ID_LABEL: str(request.job_id),
        ATTEMPT_LABEL: str(request.attempt),
        DEPARTMENT_LABEL: request.department,
        PRIORITY_CLASS_LABEL: request.priority_class,
    }


# Pod Security Standard `restricted` (https://kubernetes.io/docs/concepts/security/pod-security-standards/):
# what every container of a job pod must say. runAsNonRoot is also on the pod; saying it per container keeps
# the container compliant on its own.
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
}


def pod_security_context(run_as: PosixIdentity | None) -> dict[str, Any]:
    """The pod's securityContext: the person's ids (when known), non-root, seccomp RuntimeDefault."""
    context: dict[str, Any] = {"runAsNonRoot": True}
    if run_as is not None:
        context["runAsUser"] = run_as.uid
        context["runAsGroup"] = run_as.gid
        context["fsGroup"] = run_as.gid
        groups = sorted(set(run_as.groups) - {run_as.gid})
        if groups:
            context["supplementalGroups"] = groups
        context["supplementalGroupsPolicy"] = "Strict"
    context["seccompProfile"] = {"type": "RuntimeDefault"}
    return context


def _container(request: DispatchRequest, claim: bool) -> dict[str, Any]:
    work = request.work
    resource, count = (
        (mig_resource(request.mig_profile), str(request.mig_slices))
        if request.mig_slices
        else (GPU_RESOURCE, str(request.gpus_per_tray))
    )
    resources: dict[str, Any] = {"requests": {resource: count}, "limits": {resource: count}}
    if claim:
        resources["claims"] = [{"name": IMEX_CLAIM}]
    container: dict[str, Any] = {"name": CONTAINER_NAME, "image": work["image"].strip()}
    if work.get("command"):
        container["command"] = list(work["command"])
    if work.get("args"):
        container["args"] = list(work["args"])
    if work.get("env"):
        container["env"] = [{"name": k, "value": "" if v is None else str(v)} for k, v in work["env"].items()]
    container["resources"] = resources
    container["securityContext"] = json.loads(json.dumps(CONTAINER_SECURITY_CONTEXT))  # a copy per pod
    return container


def render_job_objects(request: DispatchRequest) -> list[dict[str, Any]]:
    """The objects for one placed job, in creation order: [ComputeDomain (more than one tray only), Job].

    Raises ValueError (or `validate.ValidationError`, a ValueError) for a request that cannot be run or an
    object the API server would refuse. See the module docstring for the shape and the reasons.
    """
    _check_request(request)
    name = job_name(request)
    namespace = request.home  # the project's namespace (its LocalQueue `default`), else the department's
    trays = len(request.hostnames)
    labels = _labels(request)
    multi_node = trays > 1
    objects: list[dict[str, Any]] = []
    if multi_node:
        domain = compute_domain(name, namespace, channel_template_name(name))
        domain["metadata"]["labels"] = {**domain["metadata"]["labels"], **labels}
        domain["metadata"]["annotations"] = {JOB_NAME_ANNOTATION: request.name}
        objects.append(domain)
    affinity: dict[str, Any] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": HOSTNAME_LABEL, "operator": "In", "values": list(request.hostnames)}
                        ]
                    }
                ]
            }
        }
    }
    if multi_node:
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchLabels": {
                            JOB_ID_LABEL: str(request.job_id),
                            ATTEMPT_LABEL: str(request.attempt),
                        }
                    },
                    "topologyKey": HOSTNAME_LABEL,
                }
            ]
        }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": pod_security_context(request.run_as),
        "affinity": affinity,
    }
    if multi_node:
        pod_spec["resourceClaims"] = [
            {"name": IMEX_CLAIM, "resourceClaimTemplateName": channel_template_name(name)}
        ]
    pod_spec["containers"] = [_container(request, claim=multi_node)]
    pod_labels = {k: v for k, v in labels.items() if k != MANAGED_BY_LABEL}
    objects.append(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {**labels, QUEUE_NAME_LABEL: LOCAL_QUEUE_NAME},
                "annotations": {JOB_NAME_ANNOTATION: request.name},
            },
            "spec": {
                "completionMode": "Indexed",
                "completions": trays,
                "parallelism": trays,
                "backoffLimit": 0,
                "activeDeadlineSeconds": request.time_limit_minutes * 60,
                "suspend": True,
                "template": {"metadata": {"labels": pod_labels}, "spec": pod_spec},
            },
        }
    )
    for obj in objects:
        schema.validate(obj)
        _check_size(obj)
    return objects


def _check_size(obj: dict[str, Any]) -> None:
    """Refuse an object the API server could not store (see MAX_OBJECT_BYTES), in words that say why."""
    ref = f"{obj['kind']} {obj['metadata']['namespace']}/{obj['metadata']['name']}"
    annotations = obj["metadata"].get("annotations") or {}
    used = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
    if used > MAX_ANNOTATIONS_BYTES:
        raise ValueError(
            f"{ref}: its annotations (the job's name) take {used} bytes; Kubernetes takes at most "
            f"{MAX_ANNOTATIONS_BYTES}: give the job a shorter name"
        )
    size = len(json.dumps(obj, separators=(",", ":")).encode())
    if size > MAX_OBJECT_BYTES:
        raise ValueError(
            f"{ref} would be {size} bytes; the API server stores at most about {MAX_OBJECT_BYTES}: keep the "
            "work's command, args and env small (put large inputs in the image or on shared storage)"
        )


# --- reading a Job's state ----------------------------------------------------------------------------


def _true_conditions(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    conditions = (job.get("status") or {}).get("conditions") or []
    return {c.get("type"): c for c in conditions if isinstance(c, dict) and c.get("status") == "True"}


def _words(condition: dict[str, Any], default: str) -> str:
    reason, message = condition.get("reason") or "", condition.get("message") or ""
    if reason and message:
        return f"{reason}: {message}"
    return reason or message or default


def _exit_code(pods: Sequence[dict[str, Any]]) -> int | None:
    """The first non-zero exit code of a terminated container (pods by name), else None."""
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name", "")):
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            code = ((status.get("state") or {}).get("terminated") or {}).get("exitCode")
            if isinstance(code, int) and code != 0:
                return code
    return None


def job_status(backend_id: str, job: dict[str, Any], pods: Sequence[dict[str, Any]] = ()) -> BackendJobStatus:
    """A live batch/v1 Job (and its pods, if read) -> BackendJobStatus.

    `Failed` (or 1.31+'s `FailureTarget`, the decision before the pods are gone) -> FAILED with the
    condition's reason and message; `Complete` (or `SuccessCriteriaMet`) -> COMPLETED; a Job being deleted ->
    CANCELLED; a ready or finished pod -> RUNNING; otherwise (suspended until Kueue admits it, pods being
    scheduled or started) -> PENDING.
    """
    status = job.get("status") or {}
    spec = job.get("spec") or {}
    conditions = _true_conditions(job)
    nodes = tuple(sorted({n for p in pods if (n := (p.get("spec") or {}).get("nodeName"))}))
    trays = spec.get("completions") or spec.get("parallelism") or 0
    active, ready = status.get("active") or 0, status.get("ready") or 0
    succeeded = status.get("succeeded") or 0
    for kind in ("Failed", "FailureTarget"):
        if kind in conditions:
            message = _words(conditions[kind], "the job failed")
            return BackendJobStatus(backend_id, BackendJobState.FAILED, message, _exit_code(pods), nodes)
    for kind in ("Complete", "SuccessCriteriaMet"):
        if kind in conditions:
            message = _words(conditions[kind], "every pod succeeded")
            return BackendJobStatus(backend_id, BackendJobState.COMPLETED, message, 0, nodes)
    if (job.get("metadata") or {}).get("deletionTimestamp"):
        # Cancelled (by Rackplane or anyone): with Foreground deletion the Job stays until its pods are gone.
        message = "cancelled: the Job is being deleted" + (f", {active} pods stopping" if active else "")
        return BackendJobStatus(backend_id, BackendJobState.CANCELLED, message, None, nodes)
    if ready or succeeded:
        message = f"{ready} of {trays} pods running" + (f", {succeeded} succeeded" if succeeded else "")
        return BackendJobStatus(backend_id, BackendJobState.RUNNING, message, None, nodes)
    if spec.get("suspend") or "Suspended" in conditions:
        message = "suspended: waiting for Kueue to admit it"
        if "Suspended" in conditions:
            message += f" ({_words(conditions['Suspended'], 'suspended')})"
        return BackendJobStatus(backend_id, BackendJobState.PENDING, message, None, nodes)
    message = f"{active} of {trays} pods starting" if active else "waiting for its pods to be created"
    return BackendJobStatus(backend_id, BackendJobState.PENDING, message, None, nodes)
