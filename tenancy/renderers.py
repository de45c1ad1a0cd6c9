"""Configuration renderers for department (tenant) isolation: state in, text or plain objects out.

Pure Python, no Django import: the web app, the config-push tasks and the simulator all call these with
`TenantSpec` values built from the database. Every renderer is deterministic (same tenants in any order ->
byte-identical output) so that a `ConfigPush` hash only changes when the configuration does.

Outputs:
- OpenSM `partitions.conf` (one InfiniBand partition key per department),
- Kubernetes objects as plain dicts (Namespace, ResourceQuota, NetworkPolicy, Kueue ClusterQueue and
  LocalQueue, NFS PersistentVolume + PersistentVolumeClaim), and `to_yaml` to serialise them,
- NFS `/etc/exports` lines (one export per department, restricted to the department's network).

Projects under departments (issue 16, `ProjectSpec`): a department with projects is a Kueue Cohort (child of
the shared cohort, its limit as the subtree's borrowing limit) holding one ClusterQueue per project (its
guarantee as nominal quota, its limit as borrowing limit, its over-quota weight as fair-sharing weight) and
the department's own ClusterQueue (guaranteed what its projects leave); each project gets a namespace
`<department>--<project>` (tenancy.naming) with a ResourceQuota (its limit), the department's isolation
policy (open to the department's other namespaces) and a LocalQueue `default`. A department without
projects renders exactly as before.

Formats follow shared/REFERENCE.md; choices that the reference leaves open are documented where they are
made (search for "Decision:").
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from tenancy import naming

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
# Kueue: the CRDs in shared/reference/crds serve v1beta1 (deprecated) and v1beta2 (served + storage);
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

# --- validation helpers -------------------------------------------------------------------------------

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_PORT_GUID = re.compile(r"^0x[0-9a-fA-F]{16}\Z")
# Export paths are written unquoted into /etc/exports and into PV specs: allow only characters that need
# no quoting or octal escaping in exports(5) (no whitespace, '#', quotes, parentheses, backslashes), see
# `export_path_problem`.
_EXPORT_PATH_CHAR = re.compile(r"[A-Za-z0-9._/-]")
EXPORT_PATH_MAX = 255  # the model field's max_length; PATH_MAX is far larger, exportfs lines are not

PKEY_MIN, PKEY_MAX = 0x0001, 0x7FFE  # 0x7fff is the default partition; the top bit is the membership bit.
DEFAULT_PKEY = 0x7FFF
VLAN_MIN, VLAN_MAX = 1, 4094
VNI_MIN, VNI_MAX = 1, 16_777_215


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_dns_label(value: str, what: str) -> None:
    if not isinstance(value, str) or len(value) > 63 or not _DNS1123_LABEL.match(value):
        raise ValueError(
            f"{what} {value!r} is not a DNS-1123 label (lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters)"
        )


def _check_dns_subdomain(value: str, what: str) -> None:
    if not isinstance(value, str) or len(value) > 253 or not _DNS1123_SUBDOMAIN.match(value):
        raise ValueError(f"{what} {value!r} is not a DNS-1123 subdomain")


def _check_int_range(value: Any, lo: int, hi: int | None, what: str) -> None:
    if not _is_int(value) or value < lo or (hi is not None and value > hi):
        bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise ValueError(f"{what} must be an integer in {bound}, got {value!r}")


# What exports(5) and exportfs give a meaning to, named in the refusal so the person sees why.
_EXPORTS_SPECIAL = {
    "*": "a client wildcard in exports",
    "?": "a client wildcard in exports",
    "(": "the start of an export's options",
    ")": "the end of an export's options",
    ",": "the option separator in exports",
    "#": "the start of a comment in exports",
    '"': "a quote in exports",
    "\\": "an octal escape in exports",
    "@": "a netgroup in exports",
    ":": "a separator of NFS server and path",
}


def _describe_char(char: str) -> str:
    if char in "\n\r":
        return "a line break"
    if char.isspace():
        return f"whitespace (U+{ord(char):04X})"
    if char in _EXPORTS_SPECIAL:
        return f"{char!r} ({_EXPORTS_SPECIAL[char]})"
    name = unicodedata.name(char, "a control character")
    return f"{char!r} (U+{ord(char):04X} {name})" if char.isprintable() else f"U+{ord(char):04X} ({name})"


def export_path_problem(path: Any, root: str | None = None) -> str:
    """Why `path` cannot be a department's export path ("" when it can): it is written unquoted as the first
    token of an /etc/exports line and as a PersistentVolume's `nfs.path`.

    It must be absolute and in normal form (posixpath.normpath gives it back: no '.' or '..' component, no
    '//', no trailing '/'), at most EXPORT_PATH_MAX characters, of letters, digits, '.', '_' and '-' between
    '/' only (no whitespace or line break, which would split the line; none of exports(5)'s '*', '(', ')',
    ',', '#', '"', '\\'), and, when `root` is given, strictly inside `root` (never the root itself, which
    holds every department's data). The sentence reads after the path's name: "export path ... <problem>".
    """
    if not isinstance(path, str) or not path:
        return "is empty"
    if len(path) > EXPORT_PATH_MAX:
        return f"is {len(path)} characters long: at most {EXPORT_PATH_MAX}"
    for char in path:
        if not _EXPORT_PATH_CHAR.fullmatch(char):
            return (
                f"contains {_describe_char(char)}: use only letters, digits, '.', '_' and '-' between the "
                "'/' of an absolute path"
            )
    if not path.startswith("/"):
        return "is not absolute: it must start with '/'"
    if path == "/":
        return "is the root directory: every file of the server would be exported"
    if "//" in path:
        return "contains '//': write one '/' between directories"
    if path.endswith("/"):
        return "ends with '/': leave the trailing '/' out"
    if any(part in (".", "..") for part in path.split("/")):
        return "has a '.' or '..' component: write the directory it means"
    if posixpath.normpath(path) != path:  # pragma: no cover - the rules above leave nothing for it
        return f"is not in normal form ({posixpath.normpath(path)})"
    if root is not None and not is_inside(path, root):
        return f"is not inside the export root {root}: departments' exports live under it"
    return ""


def is_inside(path: str, directory: str) -> bool:
    """Whether `path` lies strictly below `directory` (both absolute, normal form): '/a/bc' is not inside
    '/a/b'."""
    return path != directory and path.startswith(directory.rstrip("/") + "/")


def _normalise_guid(guid: str, slug: str) -> str:
    if not isinstance(guid, str) or not _PORT_GUID.match(guid):
        raise ValueError(
            f"department {slug!r}: port GUID {guid!r} is not '0x' followed by 16 hexadecimal digits"
        )
    if int(guid, 16) == 0:
        # OpenSM rejects a zero GUID ("bad PortGUID") and discards the rest of the file.
        raise ValueError(f"department {slug!r}: port GUID {guid!r} is zero")
    return guid.lower()


@dataclass(frozen=True)
class ProjectSpec:
    """A project of a department (tenancy.Project): its share of the department's GPUs."""

    slug: str  # with the department's slug, the namespace `<department>--<project>` (tenancy.naming)
    name: str
    guaranteed_gpus: int
    limit_gpus: int | None = None
    weight: str = "1"  # over-quota weight, as a decimal string (Kueue's fairSharing.weight)

    def __post_init__(self) -> None:
        if (why := naming.slug_error(self.slug, department=False)) is not None:
            raise ValueError(f"project slug {self.slug!r}: {why}")
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"project {self.slug!r}: name must be a non-empty string")
        _check_int_range(self.guaranteed_gpus, 0, None, f"project {self.slug!r}: guaranteed_gpus")
        if self.limit_gpus is not None:
            _check_int_range(
                self.limit_gpus, self.guaranteed_gpus, None, f"project {self.slug!r}: limit_gpus"
            )
        if not isinstance(self.weight, str) or not re.fullmatch(r"[0-9]+(\.[0-9]+)?", self.weight):
            raise ValueError(f"project {self.slug!r}: weight {self.weight!r} is not a decimal number >= 0")


@dataclass(frozen=True)
class TenantSpec:
    """What the renderers need to know about one department. Validated on construction.

    GUIDs are normalised to lower case and de-duplicated (a tray can be listed both because the department
    owns it and because it runs there); their order is kept, renderers sort where order matters.
    """

    slug: str  # DNS-1123 label, also the Kubernetes namespace name
    name: str
    guaranteed_gpus: int
    limit_gpus: int | None  # None = no limit
    vlan_id: int  # 1..4094
    vxlan_vni: int  # 1..16777215
    pkey: int  # InfiniBand partition key, 0x0001..0x7ffe
    port_guids: tuple[str, ...]  # "0x" + 16 hex digits
    network_cidr: str  # e.g. "10.42.3.0/24"
    export_path: str  # e.g. "/exports/tenants/<slug>"
    storage_quota_gib: int
    projects: tuple[ProjectSpec, ...] = ()  # empty: the department is not split (rendered as before)
    weight: str = "1"  # the department's over-quota weight (its Cohort's fairSharing.weight, with projects)

    def __post_init__(self) -> None:
        # The slug becomes namespaces, accounts and partitions we create and police (tenancy.naming): the
        # rules the model validates at save, reserved names (Kubernetes' own namespaces...) included.
        if (why := naming.slug_error(self.slug)) is not None:
            raise ValueError(f"department slug {self.slug!r}: {why}")
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"department {self.slug!r}: name must be a non-empty string")
        _check_int_range(self.guaranteed_gpus, 0, None, f"department {self.slug!r}: guaranteed_gpus")
        if self.limit_gpus is not None:
            _check_int_range(self.limit_gpus, 0, None, f"department {self.slug!r}: limit_gpus")
            if self.limit_gpus < self.guaranteed_gpus:
                raise ValueError(
                    f"department {self.slug!r}: limit_gpus ({self.limit_gpus}) is below "
                    f"guaranteed_gpus ({self.guaranteed_gpus})"
                )
        _check_int_range(self.vlan_id, VLAN_MIN, VLAN_MAX, f"department {self.slug!r}: vlan_id")
        _check_int_range(self.vxlan_vni, VNI_MIN, VNI_MAX, f"department {self.slug!r}: vxlan_vni")
        if not _is_int(self.pkey) or not PKEY_MIN <= self.pkey <= PKEY_MAX:
            raise ValueError(
                f"department {self.slug!r}: pkey {self.pkey!r} is outside 0x{PKEY_MIN:04x}..0x{PKEY_MAX:04x}"
            )
        if isinstance(self.port_guids, str) or not isinstance(self.port_guids, Iterable):
            raise ValueError(f"department {self.slug!r}: port_guids must be a sequence of GUID strings")
        guids = tuple(dict.fromkeys(_normalise_guid(g, self.slug) for g in self.port_guids))
        object.__setattr__(self, "port_guids", guids)
        try:
            network = ipaddress.ip_network(self.network_cidr, strict=True)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"department {self.slug!r}: network_cidr {self.network_cidr!r} is not a network "
                f"address with prefix length (host bits must be zero): {exc}"
            ) from None
        object.__setattr__(self, "network_cidr", str(network))
        # Checked again here although the model refuses it at save: a row saved before the rule must not
        # reach /etc/exports (a line break or "*(rw)" in it would export to the world).
        if problem := export_path_problem(self.export_path):
            raise ValueError(f"department {self.slug!r}: export_path {self.export_path!r} {problem}")
        _check_int_range(self.storage_quota_gib, 1, None, f"department {self.slug!r}: storage_quota_gib")
        self._check_projects()

    def _check_projects(self) -> None:
        projects = tuple(self.projects)
        object.__setattr__(self, "projects", projects)
        slugs: set[str] = set()
        for p in projects:
            if not isinstance(p, ProjectSpec):
                raise ValueError(f"department {self.slug!r}: expected ProjectSpec, got {type(p).__name__}")
            if p.slug in slugs:
                raise ValueError(f"department {self.slug!r}: project {p.slug!r} appears more than once")
            slugs.add(p.slug)
            _check_dns_label(project_namespace(self, p), f"department {self.slug!r}: project namespace")
        total = sum(p.guaranteed_gpus for p in projects)
        if total > self.guaranteed_gpus:
            raise ValueError(
                f"department {self.slug!r}: its projects are guaranteed {total} GPUs, more than its "
                f"{self.guaranteed_gpus}"
            )

    @property
    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_network(self.network_cidr)


def _check_unique(tenants: Sequence[TenantSpec], attr: str, fmt=str) -> None:
    seen: dict[Any, str] = {}
    for t in tenants:
        value = getattr(t, attr)
        if value in seen:
            raise ValueError(f"{attr} {fmt(value)} is used by both {seen[value]!r} and {t.slug!r}")
        seen[value] = t.slug


def _as_tenants(tenants: Iterable[TenantSpec]) -> list[TenantSpec]:
    tenants = list(tenants)
    for t in tenants:
        if not isinstance(t, TenantSpec):
            raise TypeError(f"expected TenantSpec, got {type(t).__name__}")
    seen: set[str] = set()
    for t in tenants:
        if t.slug in seen:
            raise ValueError(f"department slug {t.slug!r} appears more than once")
        seen.add(t.slug)
    return tenants


_IPV4_MAPPED = int(ipaddress.IPv6Address("::ffff:0:0"))


def _as_ipv6(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> ipaddress.IPv6Network:
    """An IPv4 network as the IPv4-mapped IPv6 network (::ffff:a.b.c.d/96+n) its hosts are to a dual-stack
    server; an IPv6 network as it is."""
    if network.version == 6:
        return network
    return ipaddress.IPv6Network((_IPV4_MAPPED | int(network.network_address), 96 + network.prefixlen))


def networks_overlap(a, b) -> bool:
    """Whether two tenant networks share an address, across IP versions too: `::/0` and `::ffff:0:0/96`
    hold every IPv4 host in its mapped form, so an export to them reaches every other department's hosts
    (Python's `overlaps` says False for two versions)."""
    return _as_ipv6(a).overlaps(_as_ipv6(b))


def _check_exports_disjoint(tenants: Sequence[TenantSpec]) -> None:
    """Storage isolation: no department's export may contain another's, nor its network another's."""
    for i, a in enumerate(tenants):
        for b in tenants[i + 1 :]:
            if a.export_path == b.export_path:
                raise ValueError(f"export_path {a.export_path!r} is used by both {a.slug!r} and {b.slug!r}")
            outer, inner = sorted((a, b), key=lambda t: len(t.export_path))
            if inner.export_path.startswith(outer.export_path + "/"):
                raise ValueError(
                    f"export_path {inner.export_path!r} of {inner.slug!r} lies inside "
                    f"{outer.export_path!r} of {outer.slug!r}: {outer.slug!r} could read its data"
                )
            if networks_overlap(a.network, b.network):
                raise ValueError(
                    f"network_cidr {a.network_cidr} of {a.slug!r} overlaps {b.network_cidr} of {b.slug!r}: "
                    "hosts of one department could mount the other's export"
                )


def validate_tenants(tenants: Iterable[TenantSpec]) -> list[TenantSpec]:
    """Every cross-department invariant at once (for services that save several departments).

    Slugs, partition keys, VLAN IDs and VXLAN VNIs are unique; exports and networks do not overlap.
    Each renderer checks the subset it depends on; this returns the tenants as a list.
    """
    tenants = _as_tenants(tenants)
    _check_unique(tenants, "pkey", lambda v: f"0x{v:04x}")
    _check_unique(tenants, "vlan_id")
    _check_unique(tenants, "vxlan_vni")
    _check_exports_disjoint(tenants)
    return tenants


# --- OpenSM partitions.conf ---------------------------------------------------------------------------

# OpenSM reads partitions.conf with fgets() into a 4096-byte buffer (osm_prtn_config.c), so a longer
# physical line is cut and a GUID can be split in two. Member lists are wrapped after a ',' instead, which
# the grammar allows ("The Line can be wrapped after ':' ... and between"); continuation lines are indented.
OPENSM_MAX_LINE = 4000


def opensm_partition_name(t: TenantSpec) -> str:
    """Partition name for a department: the slug with '-' -> '_' (tenancy.naming.opensm_partition).

    Slugs only contain [a-z0-9-], so the name never contains OpenSM's delimiters ('=', ',', ':', ';', '#')
    or whitespace, never collides with "Default" (upper case), and stays unique because slugs are.
    """
    return naming.opensm_partition(t.slug)


def _entry_lines(head: str, members: list[str]) -> list[str]:
    """`head` followed by the members and ` ;`, wrapped after a ',' so that no line exceeds the limit."""
    if not members:
        return [f"{head} ;"]
    lines: list[str] = []
    current, on_line = head, 0
    for i, member in enumerate(members):
        piece = member + ("," if i < len(members) - 1 else " ;")
        if on_line and len(current) + 1 + len(piece) > OPENSM_MAX_LINE:
            lines.append(current)
            current, on_line = "   ", 0  # continuation lines are indented by four spaces
        current = f"{current} {piece}"
        on_line += 1
    lines.append(current)
    return lines


def render_opensm_partitions(
    tenants: Iterable[TenantSpec], default_membership: Literal["full", "limited"] = "full"
) -> str:
    """OpenSM partitions.conf: the default partition, then one partition per department, by PKey.

    Example line: `ml_research=0x0010, ipoib, defmember=full : 0x0002c90300a1b2c3=full ;`

    Decision (department without ports): the entry is still written, with an empty member list
    (`name=0x0011, ipoib, defmember=full : ;`). OpenSM's doc/partition-config.txt states "Empty list means no
    ports in this partition", and the parser (osm_prtn_config.c, partition_add_port) skips an empty member
    token. Keeping the entry reserves the PKey and creates the IPoIB broadcast group, so adding the first
    tray later only adds members.

    `default_membership="full"` renders the default partition exactly as REFERENCE.md gives it
    (`Default=0x7fff, ipoib : ALL=full ;`). Note that with it every port stays a full member of 0x7fff and
    can reach every other port there, so the department PKeys separate IPoIB subnets but do not isolate the
    fabric. `"limited"` renders `Default=0x7fff, ipoib : ALL=limited, ALL_SWITCHES=full, SELF=full ;`:
    end ports can then only talk to the SM and switches on the default partition, which is what makes the
    department partitions an isolation boundary.
    """
    tenants = _as_tenants(tenants)
    _check_unique(tenants, "pkey", lambda v: f"0x{v:04x}")
    if default_membership == "full":
        lines = ["Default=0x7fff, ipoib : ALL=full ;"]
    elif default_membership == "limited":
        lines = ["Default=0x7fff, ipoib : ALL=limited, ALL_SWITCHES=full, SELF=full ;"]
    else:
        raise ValueError(f"default_membership must be 'full' or 'limited', got {default_membership!r}")
    for t in sorted(tenants, key=lambda t: t.pkey):
        head = f"{opensm_partition_name(t)}=0x{t.pkey:04x}, ipoib, defmember=full :"
        members = [f"{guid}=full" for guid in sorted(t.port_guids)]
        lines.extend(_entry_lines(head, members))
    return "\n".join(lines) + "\n"


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
    t: TenantSpec, cohort: str = DEFAULT_COHORT, flavor: str = DEFAULT_FLAVOR
) -> dict[str, Any]:
    """Kueue ClusterQueue (v1beta2) named after the department.

    nominalQuota = guaranteed GPUs; borrowingLimit = limit - guarantee (absent = may borrow without bound
    when there is no limit). All departments share one cohort. Preemption: a department below its
    guarantee reclaims from anyone borrowing (`reclaimWithinCohort: Any`), borrowing may preempt lower
    priority work in the cohort, and within the queue lower priority work yields.
    The namespaceSelector admits only the department's own namespace: Kueue's default (null) admits none,
    and `{}` would let any namespace point a LocalQueue at this department's quota.
    The ResourceFlavor named `flavor` must exist (it is cluster-wide, not per department).
    """
    _check_dns_subdomain(cohort, "cohort")
    _check_dns_subdomain(flavor, "flavor")
    resource: dict[str, Any] = {"name": GPU_RESOURCE, "nominalQuota": str(t.guaranteed_gpus)}
    if t.limit_gpus is not None:
        resource["borrowingLimit"] = str(t.limit_gpus - t.guaranteed_gpus)
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ClusterQueue",
        "metadata": _metadata(t, naming.department_cluster_queue(t.slug), namespaced=False),
        "spec": {
            "cohortName": cohort,
            "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: naming.department_namespace(t.slug)}},
            "resourceGroups": [
                {
                    "coveredResources": [GPU_RESOURCE],
                    "flavors": [{"name": flavor, "resources": [resource]}],
                }
            ],
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


def _check_nfs_server(nfs_server: str) -> None:
    if isinstance(nfs_server, str):
        try:
            ipaddress.ip_address(nfs_server)
            return
        except ValueError:
            pass
        if len(nfs_server) <= 253 and _DNS1123_SUBDOMAIN.match(nfs_server.lower()):
            return
    raise ValueError(f"nfs_server {nfs_server!r} is neither an IP address nor a DNS name")


# --- projects under departments (module docstring) -----------------------------------------------------


def project_namespace(t: TenantSpec, p: ProjectSpec) -> str:
    """A project's namespace, also its ClusterQueue's name: `<department slug>--<project slug>`, which no
    department's slug nor another project's namespace can equal (tenancy.naming)."""
    return naming.project_namespace(t.slug, p.slug)


def _project_metadata(t: TenantSpec, p: ProjectSpec, name: str, namespaced: bool) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespaced:
        metadata["namespace"] = project_namespace(t, p)
    metadata["labels"] = {**_labels(t), PROJECT_LABEL: p.slug}
    return metadata


def _gpu_quota(flavor: str, guaranteed: int, limit: int | None) -> list[dict[str, Any]]:
    resource: dict[str, Any] = {"name": GPU_RESOURCE, "nominalQuota": str(guaranteed)}
    if limit is not None:
        resource["borrowingLimit"] = str(limit - guaranteed)
    return [{"coveredResources": [GPU_RESOURCE], "flavors": [{"name": flavor, "resources": [resource]}]}]


def department_cohort(
    t: TenantSpec, cohort: str = DEFAULT_COHORT, flavor: str = DEFAULT_FLAVOR
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
    resource: dict[str, Any] = {"name": GPU_RESOURCE, "nominalQuota": "0"}
    if t.limit_gpus is not None:
        resource["borrowingLimit"] = str(t.limit_gpus - t.guaranteed_gpus)
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Cohort",
        "metadata": _metadata(t, naming.department_cohort(t.slug), namespaced=False),
        "spec": {
            "parentName": cohort,
            "resourceGroups": [
                {"coveredResources": [GPU_RESOURCE], "flavors": [{"name": flavor, "resources": [resource]}]}
            ],
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


def project_cluster_queue(t: TenantSpec, p: ProjectSpec, flavor: str = DEFAULT_FLAVOR) -> dict[str, Any]:
    """A project's ClusterQueue, in its department's Cohort: nominal quota = its guarantee, borrowing limit
    = limit - guarantee, fair-sharing weight = its over-quota weight; only its own namespace points at it.
    Reclaim within the cohort: an in-quota project takes back what a sibling (or another department)
    borrows."""
    name = naming.project_cluster_queue(t.slug, p.slug)
    return _queue(
        _project_metadata(t, p, name, namespaced=False),
        naming.department_cohort(t.slug),
        project_namespace(t, p),
        _gpu_quota(flavor, p.guaranteed_gpus, p.limit_gpus),
        p.weight,
    )


def department_cluster_queue(t: TenantSpec, flavor: str = DEFAULT_FLAVOR) -> dict[str, Any]:
    """The ClusterQueue of a department with projects for its work without a project (its own namespace):
    in its Cohort, guaranteed what the projects' guarantees leave of the department's."""
    rest = t.guaranteed_gpus - sum(p.guaranteed_gpus for p in t.projects)
    slug = t.slug
    return _queue(
        _metadata(t, naming.department_cluster_queue(slug), namespaced=False),
        naming.department_cohort(slug),
        naming.department_namespace(slug),
        _gpu_quota(flavor, rest, None),
        "1",
    )


def project_objects(t: TenantSpec, p: ProjectSpec, flavor: str = DEFAULT_FLAVOR) -> list[dict[str, Any]]:
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
        project_cluster_queue(t, p, flavor),
        {
            "apiVersion": KUEUE_API_VERSION,
            "kind": "LocalQueue",
            "metadata": _project_metadata(t, p, LOCAL_QUEUE_NAME, namespaced=True),
            "spec": {"clusterQueue": naming.project_cluster_queue(t.slug, p.slug)},
        },
    ]


def tenant_objects(
    t: TenantSpec, nfs_server: str, cohort: str = DEFAULT_COHORT, flavor: str = DEFAULT_FLAVOR
) -> list[dict[str, Any]]:
    """All Kubernetes objects of one department, in apply order: the namespace before what lives in it,
    the ClusterQueue before its LocalQueue, the volume before its claim. A department with projects is a
    Cohort with its own ClusterQueue and each project's objects (module docstring)."""
    if t.projects:
        queue = [department_cohort(t, cohort, flavor), department_cluster_queue(t, flavor)]
    else:
        queue = [cluster_queue(t, cohort=cohort, flavor=flavor)]
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
        objects += project_objects(t, p, flavor)
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


# --- NFS exports --------------------------------------------------------------------------------------

NFS_EXPORT_OPTIONS = "rw,sync,no_subtree_check,root_squash"


def render_nfs_exports(tenants: Iterable[TenantSpec]) -> str:
    """/etc/exports lines, one per department, ordered by export path:
    `<export_path> <network_cidr>(rw,sync,no_subtree_check,root_squash)`.

    exports(5): no whitespace between the client and its option list (with a space the options would
    apply to the whole world). Export paths may not repeat or nest and networks may not overlap, since
    either would give one department access to another's data.
    """
    tenants = _as_tenants(tenants)
    _check_exports_disjoint(tenants)
    lines = [
        f"{t.export_path} {t.network_cidr}({NFS_EXPORT_OPTIONS})"
        for t in sorted(tenants, key=lambda t: t.export_path)
    ]
    return "".join(line + "\n" for line in lines)
