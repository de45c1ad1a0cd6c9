"""Kubernetes objects of department (tenant) isolation: state in, plain dicts out, and `to_yaml`.

Pure Python, no Django import: the config push (integrations.state, integrations.kubernetes.target), the
job renderer (integrations.kubernetes.jobs) and the tests call these with tenancy.renderers' `TenantSpec`
values built from the database. What is not Kubernetes' (the tenant model, its names, OpenSM partitions
and NFS exports) stays in tenancy; this module only turns it into Kubernetes objects. Every renderer is
deterministic (same tenants in any order -> byte-identical output) so that a `ConfigPush` hash only
changes when the configuration does.

Objects per department: Namespace (Pod Security `restricted`), ResourceQuota, NetworkPolicy, Kueue
ClusterQueue and LocalQueue, NFS PersistentVolume + PersistentVolumeClaim.

Projects under departments (`ProjectSpec`): a department with projects is a Kueue Cohort (child of
the shared cohort, its limit as the subtree's borrowing limit) holding one ClusterQueue per project (its
guarantee as nominal quota, its limit as borrowing limit, its over-quota weight as fair-sharing weight) and
the department's own ClusterQueue (guaranteed what its projects leave); each project gets a namespace
`<department>--<project>` (tenancy.naming) with a ResourceQuota (its limit), the department's isolation
policy (open to the department's other namespaces) and a LocalQueue `default`. A department without
projects renders exactly as before.

Formats follow the Kubernetes and Kueue API references; choices they leave open are documented where they are
made (search for "Decision:").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from inventory.mig_layouts import slices_within
from tenancy import naming
from tenancy.renderers import ProjectSpec, TenantSpec, _check_nfs_server, project_namespace

# --- labels and API versions --------------------------------------------------------------------------

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "rackplane"
DEPARTMENT_LABEL = "rackplane.io/department"
DEPARTMENT_NAME_ANNOTATION = "rackplane.io/department-name"
PROJECT_LABEL = "rackplane.io/project"
PROJECT_NAME_ANNOTATION = "rackplane.io/project-name"
# Set by the API server on every namespace (Kubernetes >= 1.22); selects exactly one namespace by name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# Pod Security Admission on every tenant namespace (department and project): the API server refuses a pod
# that is not `restricted` (root, privileged, host namespaces or paths, added capabilities, no seccomp, ...),
# and audits and warns on the same level. The version is pinned to the Kubernetes minor the tests prove it on
# (testbed/kube-apiserver: v1.36), so a cluster upgrade cannot tighten or loosen the checks unseen; a server
# older than the pin evaluates it as its `latest`. Rackplane's own job pods are compliant by construction
# (integrations.kubernetes.jobs: runAsNonRoot, the person's uid, no privilege escalation, no capabilities,
# seccomp RuntimeDefault).
POD_SECURITY_LEVEL = "restricted"
POD_SECURITY_VERSION = "v1.36"
POD_SECURITY_LABELS = {
    f"pod-security.kubernetes.io/{mode}{suffix}": value
    for mode in ("enforce", "audit", "warn")
    for suffix, value in (("", POD_SECURITY_LEVEL), ("-version", POD_SECURITY_VERSION))
}

GPU_RESOURCE = "nvidia.com/gpu"
# A multi-tray job's pods each claim an IMEX channel of their ComputeDomain: a ResourceClaimTemplate of
# NVIDIA's DRA driver whose device class is CHANNEL_DEVICE_CLASS. From Kueue 0.18 its DRA integration counts
# such claims against quota and leaves a workload Inadmissible ("DeviceClass ... is not mapped in DRA
# configuration") unless Kueue's configuration maps the class to a resource its ClusterQueues cover.
# Decision: the mapping's resource is IMEX_CHANNEL_RESOURCE, covered beside the GPUs with the same quota
# numbers, so it never binds before the GPUs do (a pod claims one channel and holds at least one GPU); Kueue's
# own configuration carries the mapping (`kueue_configuration`, the part of kueue-manager-config it needs).
CHANNEL_DEVICE_CLASS = "compute-domain-default-channel.nvidia.com"
IMEX_CHANNEL_RESOURCE = "resource.nvidia.com/imex-channel"
QUOTA_RESOURCES = (GPU_RESOURCE, IMEX_CHANNEL_RESOURCE)
# A slice job's devices (the GPU Operator's `mixed` MIG strategy): the device plugin advertises each MIG
# profile as its own extended resource, `nvidia.com/mig-<profile>` (operations.md 1.2). A profile with a
# media-extension suffix (+me) makes no valid resource name and is never asked for.
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
MIG_RESOURCE_PROFILE = re.compile(r"^[0-9]{1,2}g\.[0-9]{1,4}gb\Z")
# Kueue: the CRDs in crds/ serve v1beta1 (deprecated) and v1beta2 (served + storage);
# v1beta2 is the newest served version and the one whose ClusterQueue has `spec.cohortName`.
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"

DEFAULT_COHORT = "rackplane"
DEFAULT_FLAVOR = "nvl72"
# Decision: the department's LocalQueue is called "default". Kueue's LocalQueue defaulting admits Jobs that
# carry no `kueue.x-k8s.io/queue-name` label through the LocalQueue named "default" of their namespace,
# so department users get quota accounting without having to label every Job.
LOCAL_QUEUE_NAME = "default"
RESOURCE_QUOTA_NAME = "rackplane-gpu-quota"
NETWORK_POLICY_NAME = "rackplane-department-isolation"
PVC_NAME = "department-data"

# Kubernetes object names (also integrations.kubernetes.render's).
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")


def _check_dns_subdomain(value: str, what: str) -> None:
    if not isinstance(value, str) or len(value) > 253 or not _DNS1123_SUBDOMAIN.match(value):
        raise ValueError(f"{what} {value!r} is not a DNS-1123 subdomain")


def mig_resource(profile: str) -> str:
    """The extended resource of a MIG profile under the mixed strategy (nvidia.com/mig-1g.23gb)."""
    return MIG_RESOURCE_PREFIX + profile


# Slice quotas in Kueue (issue 30). A department's guarantee and limit are GPU-equivalents: a slice of a
# profile with g compute slices counts g/7 of a GPU (inventory.mig_layouts.gpu_equivalents), the rule
# Rackplane's own pass holds slice jobs to. Kueue counts every resource on its own and cannot add a 1g slice
# to a whole GPU, so each MIG resource the fleet's layouts offer gets its own quota, the department's
# figure expressed in that profile's slices and never more than the fleet has of it:
#   nominalQuota   = min(floor(guarantee * 7 / g), fleet slices of the profile)
#   borrowingLimit = min(floor(limit * 7 / g), fleet slices of the profile) - nominalQuota (no limit: none)
# So Kueue admits whatever the pass starts (the pass never lets one profile's slices pass the department's
# guarantee or limit in GPU-equivalents, let alone their sum with its GPUs), and holds work submitted to
# the queue by other means to the same figures per profile; the sum across profiles and whole GPUs is the
# pass's to keep (docs/operators/jobs.md, "Kueue" under MIG slices).
# Decision: the MIG resources share the GPUs' one resource group and flavor. Kueue takes a resource in only
# one resource group of a queue and a flavor in only one group (its ClusterQueue webhook,
# validateResourceGroups: field.Duplicate on either), so a second group would need a second flavor: one
# selecting MIG trays by a label, while the pass already pins each slice job to its tray. One group keeps
# one topology-aware flavor for all GPU work; every flavor of a group must list every covered resource, in
# the same order (the same webhook), which `_gpu_quota` does.


# The rule itself, shared with Slurm's typed GRES limits (integrations.state.department_qos).
mig_quota = slices_within


def _mig_offer(mig: Mapping[str, int]) -> list[tuple[str, int]]:
    """The MIG profiles with a resource name, and how many slices of each the fleet offers, by name."""
    return sorted((p, n) for p, n in mig.items() if MIG_RESOURCE_PROFILE.match(p) and n > 0)


# --- Kubernetes objects -------------------------------------------------------------------------------


def _labels(t: TenantSpec) -> dict[str, str]:
    return {MANAGED_BY_LABEL: MANAGED_BY_VALUE, DEPARTMENT_LABEL: t.slug}


def _metadata(t: TenantSpec, name: str, namespaced: bool) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespaced:
        metadata["namespace"] = naming.department_namespace(t.slug)
    metadata["labels"] = _labels(t)
    return metadata


def _gib(value: int) -> str:
    return f"{value}Gi"


def namespace(t: TenantSpec) -> dict[str, Any]:
    """The department's namespace. Its `rackplane.io/department` label is what the NetworkPolicies of the
    other departments use to recognise it, so it must stay on the namespace."""
    metadata = _metadata(t, naming.department_namespace(t.slug), namespaced=False)
    metadata["labels"] = {**metadata["labels"], **POD_SECURITY_LABELS}
    metadata["annotations"] = {DEPARTMENT_NAME_ANNOTATION: t.name}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def resource_quota(t: TenantSpec) -> dict[str, Any]:
    """Hard cap on GPUs requested in the namespace: `requests.nvidia.com/gpu` = limit_gpus.

    Decision (no limit): the ResourceQuota is still rendered, with an empty `spec.hard`. The set of objects
    per department then never changes shape, and when a limit is removed a server-side apply of this object
    drops the GPU key that Rackplane owned, instead of leaving a stale cap behind that nothing deletes.
    Extended resources cannot be overcommitted, so only the `requests.` form exists for nvidia.com/gpu.
    """
    hard: dict[str, str] = {}
    if t.limit_gpus is not None:
        hard[f"requests.{GPU_RESOURCE}"] = str(t.limit_gpus)
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": _metadata(t, RESOURCE_QUOTA_NAME, namespaced=True),
        "spec": {"hard": hard},
    }


def network_policy(t: TenantSpec) -> dict[str, Any]:
    """Ingress isolation between departments.

    Decision: every pod in the department's namespace accepts ingress from
      1. pods in the same namespace, and
      2. pods in any namespace that is NOT a department namespace (no `rackplane.io/department` label):
         kube-system, monitoring, ingress controllers, operators keep working (Prometheus scrapes,
         webhooks, ingress).
    Ingress from another department's namespace is denied. Egress is not restricted here: traffic towards
    another department is stopped by that department's own policy. Traffic that does not come from a pod
    (node/hostNetwork, outside the cluster) is treated as the CNI treats non-pod sources: kubelet probes are
    allowed by common CNIs; external clients should come in through an ingress controller.
    """
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(t, NETWORK_POLICY_NAME, namespaced=True),
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {}}]},
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchExpressions": [{"key": DEPARTMENT_LABEL, "operator": "DoesNotExist"}]
                            }
                        }
                    ]
                },
            ],
        },
    }


def cluster_queue(
    t: TenantSpec,
    cohort: str = DEFAULT_COHORT,
    flavor: str = DEFAULT_FLAVOR,
    mig: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Kueue ClusterQueue (v1beta2) named after the department.

    nominalQuota = guaranteed GPUs; borrowingLimit = limit - guarantee (absent = may borrow without bound
    when there is no limit). All departments share one cohort. Preemption: a department below its
    guarantee reclaims from anyone borrowing (`reclaimWithinCohort: Any`), borrowing may preempt lower
    priority work in the cohort, and within the queue lower priority work yields.
    The namespaceSelector admits only the department's own namespace: Kueue's default (null) admits none,
    and `{}` would let any namespace point a LocalQueue at this department's quota.
    The ResourceFlavor named `flavor` must exist (it is cluster-wide, not per department).
    `mig`: the MIG profiles the fleet's layouts offer and how many slices of each (`mig_offer`), each
    covered in GPU-equivalents (`mig_quota`).
    """
    _check_dns_subdomain(cohort, "cohort")
    _check_dns_subdomain(flavor, "flavor")
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ClusterQueue",
        "metadata": _metadata(t, naming.department_cluster_queue(t.slug), namespaced=False),
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: naming.department_namespace(t.slug)}},
            "resourceGroups": _gpu_quota(flavor, t.guaranteed_gpus, t.limit_gpus, mig),
            "preemption": {
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {"policy": "LowerPriority"},
                "withinClusterQueue": "LowerPriority",
            },
        },
    }


def local_queue(t: TenantSpec, cluster_queue: str | None = None) -> dict[str, Any]:
    """Kueue LocalQueue `default` in the department's namespace, backed by its ClusterQueue
    (`cluster_queue`, by default the department's own, named after the slug)."""
    cq = naming.department_cluster_queue(t.slug) if cluster_queue is None else cluster_queue
    _check_dns_subdomain(cq, "cluster_queue")
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "LocalQueue",
        "metadata": _metadata(t, LOCAL_QUEUE_NAME, namespaced=True),
        "spec": {"clusterQueue": cq},
    }


def persistent_volume_name(t: TenantSpec) -> str:
    return naming.persistent_volume(t.slug)


def persistent_volume(t: TenantSpec, nfs_server: str) -> dict[str, Any]:
    """Statically provisioned NFS volume for the department's export, pre-bound to its claim.

    `claimRef` reserves the volume for exactly `<slug>/department-data`; `storageClassName: ""` keeps any
    dynamic provisioner away. Reclaim policy Retain: deleting the claim never deletes department data.
    The capacity is informational for NFS; the quota is enforced on the file server.
    """
    _check_nfs_server(nfs_server)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": _metadata(t, persistent_volume_name(t), namespaced=False),
        "spec": {
            "capacity": {"storage": _gib(t.storage_quota_gib)},
            "volumeMode": "Filesystem",
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": naming.department_namespace(t.slug),
                "name": PVC_NAME,
            },
            "nfs": {"server": nfs_server, "path": t.export_path},
        },
    }


def persistent_volume_claim(t: TenantSpec) -> dict[str, Any]:
    """The department's claim on its NFS volume (`volumeName` binds it to exactly that volume)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(t, PVC_NAME, namespaced=True),
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeMode": "Filesystem",
            "volumeName": persistent_volume_name(t),
            "resources": {"requests": {"storage": _gib(t.storage_quota_gib)}},
        },
    }


# --- projects under departments (module docstring) -----------------------------------------------------


def _project_metadata(t: TenantSpec, p: ProjectSpec, name: str, namespaced: bool) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespaced:
        metadata["namespace"] = project_namespace(t, p)
    metadata["labels"] = {**_labels(t), PROJECT_LABEL: p.slug}
    return metadata


def _gpu_quota(
    flavor: str, guaranteed: int, limit: int | None, mig: Mapping[str, int] | None = None
) -> list[dict[str, Any]]:
    """One resource group: the GPUs and the IMEX channels (see IMEX_CHANNEL_RESOURCE), the same numbers,
    then each MIG resource of `mig` in that profile's slices (`mig_quota`, the rule above it)."""
    quotas = []
    for name in QUOTA_RESOURCES:
        resource: dict[str, Any] = {"name": name, "nominalQuota": str(guaranteed)}
        if limit is not None:
            resource["borrowingLimit"] = str(limit - guaranteed)
        quotas.append(resource)
    for profile, offered in _mig_offer(mig or {}):
        nominal = mig_quota(profile, guaranteed, offered)
        resource = {"name": mig_resource(profile), "nominalQuota": str(nominal)}
        if (most := mig_quota(profile, limit, offered)) is not None:
            resource["borrowingLimit"] = str(max(0, most - (nominal or 0)))
        quotas.append(resource)
    covered = [q["name"] for q in quotas]
    return [{"coveredResources": covered, "flavors": [{"name": flavor, "resources": quotas}]}]


def kueue_configuration() -> dict[str, Any]:
    """What Kueue's own configuration (the kueue-manager-config ConfigMap of its installation,
    `config.kueue.x-k8s.io/v1beta2`) needs for Rackplane's multi-tray jobs: the IMEX channel device class
    mapped to IMEX_CHANNEL_RESOURCE. An admin merges it into the installed configuration; Kueue reads it at
    start."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "resources": {
            "deviceClassMappings": [
                {"name": IMEX_CHANNEL_RESOURCE, "deviceClassNames": [CHANNEL_DEVICE_CLASS]}
            ]
        },
    }


def department_cohort(
    t: TenantSpec,
    cohort: str = DEFAULT_COHORT,
    flavor: str = DEFAULT_FLAVOR,
    mig: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """Kueue Cohort (v1beta2) of a department with projects, named after it, child of the shared `cohort`.

    Its own nominal quota is 0: a Cohort's quota is on top of its ClusterQueues' (the CRD's words), and the
    department's guarantee is already theirs (projects', and its own queue's remainder), so the subtree
    holds exactly the guarantee. Its borrowing limit (limit - guarantee) bounds what the whole department
    borrows from the other departments; no limit, no bound. Its fair-sharing weight is the department's
    over-quota weight (used when Kueue's fair sharing is on).
    """
    _check_dns_subdomain(cohort, "cohort")
    _check_dns_subdomain(flavor, "flavor")
    quota = _gpu_quota(flavor, 0, None if t.limit_gpus is None else t.limit_gpus - t.guaranteed_gpus, mig)
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Cohort",
        "metadata": _metadata(t, naming.department_cohort(t.slug), namespaced=False),
        "spec": {
            "parentName": cohort,
            "resourceGroups": quota,
            "fairSharing": {"weight": t.weight},
        },
    }


_PREEMPTION = {
    "reclaimWithinCohort": "Any",
    "borrowWithinCohort": {"policy": "LowerPriority"},
    "withinClusterQueue": "LowerPriority",
}


def _queue(metadata, cohort: str, namespace_name: str, groups, weight: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ClusterQueue",
        "metadata": metadata,
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: namespace_name}},
            "resourceGroups": groups,
            "preemption": dict(_PREEMPTION),
            "fairSharing": {"weight": weight},
        },
    }


def project_cluster_queue(
    t: TenantSpec, p: ProjectSpec, flavor: str = DEFAULT_FLAVOR, mig: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """A project's ClusterQueue, in its department's Cohort: nominal quota = its guarantee, borrowing limit
    = limit - guarantee, fair-sharing weight = its over-quota weight; only its own namespace points at it.
    Reclaim within the cohort: an in-quota project takes back what a sibling (or another department)
    borrows."""
    name = naming.project_cluster_queue(t.slug, p.slug)
    return _queue(
        _project_metadata(t, p, name, namespaced=False),
        naming.department_cohort(t.slug),
        project_namespace(t, p),
        _gpu_quota(flavor, p.guaranteed_gpus, p.limit_gpus, mig),
        p.weight,
    )


def department_cluster_queue(
    t: TenantSpec, flavor: str = DEFAULT_FLAVOR, mig: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """The ClusterQueue of a department with projects for its work without a project (its own namespace):
    in its Cohort, guaranteed what the projects' guarantees leave of the department's."""
    rest = t.guaranteed_gpus - sum(p.guaranteed_gpus for p in t.projects)
    slug = t.slug
    return _queue(
        _metadata(t, naming.department_cluster_queue(slug), namespaced=False),
        naming.department_cohort(slug),
        naming.department_namespace(slug),
        _gpu_quota(flavor, rest, None, mig),
        "1",
    )


def project_objects(
    t: TenantSpec, p: ProjectSpec, flavor: str = DEFAULT_FLAVOR, mig: Mapping[str, int] | None = None
) -> list[dict[str, Any]]:
    """A project's namespace, ResourceQuota (its limit), isolation policy, ClusterQueue and LocalQueue."""
    name = project_namespace(t, p)
    ns_metadata = _project_metadata(t, p, name, namespaced=False)
    ns_metadata["labels"] = {**ns_metadata["labels"], **POD_SECURITY_LABELS}
    ns_metadata["annotations"] = {DEPARTMENT_NAME_ANNOTATION: t.name, PROJECT_NAME_ANNOTATION: p.name}
    hard = {} if p.limit_gpus is None else {f"requests.{GPU_RESOURCE}": str(p.limit_gpus)}
    policy = network_policy(t)
    policy["metadata"] = _project_metadata(t, p, NETWORK_POLICY_NAME, namespaced=True)
    # Open to the department's own namespaces (its projects work together), closed to other departments.
    policy["spec"]["ingress"][0] = {
        "from": [{"namespaceSelector": {"matchLabels": {DEPARTMENT_LABEL: t.slug}}}]
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": ns_metadata},
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": _project_metadata(t, p, RESOURCE_QUOTA_NAME, namespaced=True),
            "spec": {"hard": hard},
        },
        policy,
        project_cluster_queue(t, p, flavor, mig),
        {
            "apiVersion": KUEUE_API_VERSION,
            "kind": "LocalQueue",
            "metadata": _project_metadata(t, p, LOCAL_QUEUE_NAME, namespaced=True),
            "spec": {"clusterQueue": naming.project_cluster_queue(t.slug, p.slug)},
        },
    ]


def tenant_objects(
    t: TenantSpec,
    nfs_server: str,
    cohort: str = DEFAULT_COHORT,
    flavor: str = DEFAULT_FLAVOR,
    mig: Mapping[str, int] | None = None,
) -> list[dict[str, Any]]:
    """All Kubernetes objects of one department, in apply order: the namespace before what lives in it,
    the ClusterQueue before its LocalQueue, the volume before its claim. A department with projects is a
    Cohort with its own ClusterQueue and each project's objects (module docstring)."""
    if t.projects:
        queue = [department_cohort(t, cohort, flavor, mig), department_cluster_queue(t, flavor, mig)]
    else:
        queue = [cluster_queue(t, cohort=cohort, flavor=flavor, mig=mig)]
    objects = [
        namespace(t),
        resource_quota(t),
        network_policy(t),
        *queue,
        local_queue(t, naming.department_cluster_queue(t.slug)),
        persistent_volume(t, nfs_server),
        persistent_volume_claim(t),
    ]
    for p in sorted(t.projects, key=lambda p: p.slug):
        objects += project_objects(t, p, flavor, mig)
    return objects


# --- YAML ---------------------------------------------------------------------------------------------

# PyYAML writes YAML 1.1, but kubectl and the Go YAML libraries also read YAML 1.2 forms: a plain `1e3` or
# `0o17` (possible department slugs) is a string to PyYAML, a number to Go. Quote every string that a
# YAML 1.1 or 1.2 reader could take for something else.
_YAML12_NON_STRING = re.compile(
    r"""^(?:
        [-+]?[0-9][0-9_]*                                   # int
      | 0o[0-7]+ | 0x[0-9a-fA-F]+ | 0b[01]+                 # int, other bases
      | [-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?  # float
      | [-+]?\.(?:inf|Inf|INF) | \.(?:nan|NaN|NAN)
      | ~ | null | Null | NULL | y | Y | n | N
      | (?:true|True|TRUE|false|False|FALSE|yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF)
    )$""",
    re.VERBOSE,
)


class _Dumper(yaml.SafeDumper):
    pass


# Characters a plain or single-quoted scalar cannot carry intact: C0/C1 controls (a plain NEL, U+0085, is
# read back as a line break folded to a space), line and paragraph separators, the BOM, surrogates and
# noncharacters. A string holding one is written double-quoted, where YAML escapes it ("\N", "\t").
_YAML_ESCAPE = re.compile("[^\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]|[\u2028\u2029\ufeff]")


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if _YAML_ESCAPE.search(value):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')
    if _YAML12_NON_STRING.match(value):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="'")
    return dumper.represent_str(value)


_Dumper.add_representer(str, _represent_str)


def to_yaml(objects: Iterable[dict[str, Any]]) -> str:
    """A multi-document YAML stream, keys in the order the renderers build them (apiVersion, kind,
    metadata, spec), each document starting with `---`."""
    return yaml.dump_all(
        list(objects),
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        explicit_start=True,
        allow_unicode=True,
        width=120,
    )
