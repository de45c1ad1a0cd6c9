"""Kubernetes objects from Rackplane's state: pure functions, no Django, no I/O.

Inputs are the small dataclasses below (built from the inventory by the caller); outputs are plain dicts in
the shape the API server takes, in apply order. The adapter (`target.py`) validates them (`validate.py`)
and server-side applies them.

What a node is labelled with, and why:

* `accelerator.topograph.run/domain` = the rack's NVLink domain, i.e. its cluster UUID (what Topograph's
  NMX provider publishes as the domain: `DomainUUID`). Topograph's own keys are used because Kueue, KAI
  Scheduler and NVSentinel already read them.
* `accelerator.topograph.run/sub-domain` = the NVLink partition, as `<cluster-uuid>.<clique-id>`.
  Topograph documents the sub-domain as "an optional accelerator sub-domain within that domain" and writes
  it qualified by its domain (`nvl1` / `nvl1.rack01` in its docs/k8s.md; `domain-1.rack-1` in the labeler
  tests), so a value is unique cluster-wide on its own. `<cluster-uuid>.<clique-id>` is also exactly what
  GPU Feature Discovery writes as `nvidia.com/gpu.clique`, so the two can be compared by eye.
* Values longer than 63 characters are hashed with Topograph's rule (pkg/engines/k8s/labeler.go,
  `checkLabel`): kept as is up to 63 bytes, otherwise `"x"` + the lower-case hex (no padding) of the
  64-bit FNV-1a hash of the value's bytes. Rackplane's values then agree with Topograph's when both run.
* Rackplane's own: `rackplane.io/rack` (rack name), `rackplane.io/nvlink-partition` (`<rack>.<partition>`,
  hashed the same way if long: unique cluster-wide, human readable), `rackplane.io/department` (slug of
  the department that owns the partition as a dedicated tier; absent otherwise, so server-side apply
  removes it when the dedication ends), `rackplane.io/service-tier` (absent when the partition has none).
* `rackplane.io/pool` = the shared Kueue ResourceFlavor's name (Decision: every ClusterQueue that
  `tenants.cluster_queue` renders references that one flavor, and a topology-aware flavor must
  select its nodes by at least one label; this is it). Only nodes that have both Topograph labels are in
  the pool, since Kueue's topology-aware scheduling cannot place pods on nodes without them.

The compute fabric above the racks (core.fabric.Fabric, issue 33) is written the way Topograph v1 writes
it: `fabric.topograph.run/tier-N` on every node of a rack the fabric knows, tier-0 the switch tier closest
to the node (the fabric's lowest level, the scalable unit's leaf group), tier-1 the one above (the spine
group), and so on: a fabric of levels ("spine", "unit") gives tier-1 = the spine group, tier-0 = the unit.
Values are the group names, Topograph-hashed when longer than 63 characters, and hashed the same way
(`x` + FNV-1a hex) when they are not valid label values. The key is a format (`fabric_label`, default
FABRIC_TIER_LABEL) like the other keys: a site on another Topograph release passes its own
(`network.topology.nvidia.com/tier-{tier}` on the versions between, reference/operations.md 5.3). With a
fabric, the Kueue Topology gets its levels above the NVLink domain, coarsest first (tier-1, tier-0, domain,
sub-domain, host), and only nodes of racks the fabric knows join the shared pool (a Topology level a node
has no label for is one Kueue cannot place it in). Without one, nothing changes.

Nodes are never created or deleted by Rackplane: a node object here is a partial Node (metadata.name and
metadata.labels only) that the target server-side applies with field manager `rackplane`. Leaving a label
out of the next apply removes it (when no other manager owns it too); labels set by others stay.

Kueue (v1beta2): one `Topology` whose levels go coarsest first (NVLink domain, NVLink partition, host),
the shared ResourceFlavor, and one ResourceFlavor per NVLink partition (for dedicated partitions and
pinning). A rack without a cluster UUID (not discovered yet, or an all-zero UUID: "no NVLink domain") and a
tray without a partition get Rackplane's labels but no Topograph labels, and no flavor selects them.
"""

from __future__ import annotations

import functools
import itertools
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from core.fabric import Fabric
from core.hardware import GPUS_PER_TRAY
from integrations.kubernetes.tenants import (
    _DNS1123_SUBDOMAIN,
    DEFAULT_COHORT,
    DEFAULT_FLAVOR,
    DEPARTMENT_LABEL,
    KUEUE_API_VERSION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MIG_RESOURCE_PROFILE,
    tenant_objects,
)
from inventory.mig_layouts import LayoutError, MigLayout, mig_parted_config
from tenancy import naming
from tenancy.renderers import TenantSpec

# --- label keys and names -----------------------------------------------------------------------------

DOMAIN_LABEL = "accelerator.topograph.run/domain"
SUB_DOMAIN_LABEL = "accelerator.topograph.run/sub-domain"
HOSTNAME_LABEL = "kubernetes.io/hostname"
RACK_LABEL = "rackplane.io/rack"
PARTITION_LABEL = "rackplane.io/nvlink-partition"
SERVICE_TIER_LABEL = "rackplane.io/service-tier"
POOL_LABEL = "rackplane.io/pool"
# The GPU Operator's MIG manager applies the mig-parted config this label names (its result comes back as
# nvidia.com/mig.config.state: pending, rebooting, success or failed; the manager's label, never Rackplane's).
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"
# Topograph v1's fabric tiers; `{tier}` is 0 for the tier closest to the node.
FABRIC_TIER_LABEL = "fabric.topograph.run/tier-{tier}"
MAX_TOPOLOGY_LEVELS = 16  # Kueue: a Topology has 1 to 16 levels
# The mig-parted configuration (key config.yaml) holding every layout a tray was given: the ClusterPolicy's
# spec.migManager.config.name names it (docs/operators/inventory.md, "MIG layouts").
MIG_CONFIG_MAP = "rackplane-mig-parted-config"
MIG_CONFIG_KEY = "config.yaml"
DEFAULT_MIG_NAMESPACE = "gpu-operator"
# DEPARTMENT_LABEL ("rackplane.io/department") is shared with the tenant objects (tenants.py).

# Every node label Rackplane may set: the target uses it to tell Rackplane's labels from others'.
NODE_LABEL_KEYS = (
    DOMAIN_LABEL,
    SUB_DOMAIN_LABEL,
    RACK_LABEL,
    PARTITION_LABEL,
    DEPARTMENT_LABEL,
    SERVICE_TIER_LABEL,
    POOL_LABEL,
    MIG_CONFIG_LABEL,
)

TOPOLOGY_NAME = "nvlink"
COMPUTE_DOMAIN_API_VERSION = "resource.nvidia.com/v1beta1"

# Apply order: what is referenced before what references it. Namespaces hold everything namespaced; node
# labels before the flavors that select them; the Topology before the flavors naming it; flavors before
# the ClusterQueues that list them; ClusterQueues before their LocalQueues; a volume before its claim.
# Pruning deletes in the reverse order.
KIND_ORDER = (
    "Namespace",
    "Node",
    "Topology",
    "ResourceFlavor",
    "ClusterQueue",
    "LocalQueue",
    "ResourceQuota",
    "NetworkPolicy",
    "PersistentVolume",
    "PersistentVolumeClaim",
    # Last, so that the numbered files of `integrations.state.render_files` keep their names: Kueue takes a
    # ClusterQueue naming a Cohort that does not exist yet (an implicit cohort until the Cohort is made).
    "Cohort",
    # mig-parted's configuration, read by the MIG manager when a node's label changes.
    "ConfigMap",
)

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")

MAX_CLIQUE_ID = 32766
_FNV64_OFFSET = 0xCBF29CE484222325
_FNV64_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1


# --- inputs -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RackSpec:
    """One NVL72 rack. `cluster_uuid` is its NVLink domain; None (or all zeros) when not known."""

    name: str
    cluster_uuid: str | uuid.UUID | None = None

    def __post_init__(self):
        _check_label_value(self.name, f"rack name {self.name!r}")
        if not self.name:
            raise ValueError("a rack needs a name")
        value = self.cluster_uuid
        if value is not None:
            try:
                parsed = value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
            except ValueError as error:
                raise ValueError(f"rack {self.name}: cluster UUID {value!r} is not a UUID") from error
            # An all-zero ClusterUUID means "no NVLink domain" (non-MNNVL GPUs), never a shared domain.
            value = None if parsed.int == 0 else str(parsed)
        object.__setattr__(self, "cluster_uuid", value)


@dataclass(frozen=True)
class PartitionSpec:
    """One NVLink partition of a rack. `department`: slug of the department that owns it as a dedicated
    service tier (None: shared). `service_tier`: name of its service tier (None: none)."""

    rack: str
    name: str
    clique_id: int
    department: str | None = None
    service_tier: str | None = None

    def __post_init__(self):
        if not self.name:
            raise ValueError(f"rack {self.rack}: a partition needs a name")
        _check_label_value(self.name, f"rack {self.rack}: partition name {self.name!r}")
        if (
            not isinstance(self.clique_id, int)
            or isinstance(self.clique_id, bool)
            or not 1 <= self.clique_id <= MAX_CLIQUE_ID
        ):
            raise ValueError(
                f"partition {self.rack}.{self.name}: clique ID {self.clique_id!r} is not in "
                f"1..{MAX_CLIQUE_ID}"
            )
        if self.department is not None and not naming.is_slug(self.department):
            raise ValueError(
                f"partition {self.rack}.{self.name}: department {self.department!r} is not a department slug"
            )
        if self.service_tier is not None:
            if not self.service_tier:
                object.__setattr__(self, "service_tier", None)
            else:
                _check_label_value(
                    self.service_tier,
                    f"partition {self.rack}.{self.name}: service tier {self.service_tier!r}",
                )


@dataclass(frozen=True)
class NodeSpec:
    """One compute tray as a Kubernetes node (`hostname` = the Node's name). `partition`: the name of the
    NVLink partition (of `rack`) the inventory puts it in, None when it is in none."""

    hostname: str
    rack: str
    partition: str | None = None
    # The MIG layout chosen for the tray (inventory.mig_layouts): "" leaves MIG alone.
    mig_layout: MigLayout | None = None

    def __post_init__(self):
        if self.mig_layout is not None:
            _check_label_value(self.mig_layout.name, f"node {self.hostname}: MIG layout")
        if len(self.hostname) > 253 or not _DNS1123_SUBDOMAIN.match(self.hostname):
            raise ValueError(
                f"hostname {self.hostname!r} cannot be a Kubernetes node name (DNS-1123 subdomain)"
            )


@dataclass(frozen=True)
class InventoryState:
    """What the Kubernetes side needs from the inventory. Cross-references are checked on construction."""

    racks: tuple[RackSpec, ...] = ()
    partitions: tuple[PartitionSpec, ...] = ()
    nodes: tuple[NodeSpec, ...] = ()

    def __post_init__(self):
        for attr in ("racks", "partitions", "nodes"):
            object.__setattr__(self, attr, tuple(getattr(self, attr)))
        racks: dict[str, RackSpec] = {}
        domains: dict[str, str] = {}
        for rack in self.racks:
            if rack.name in racks:
                raise ValueError(f"rack {rack.name} is listed twice")
            racks[rack.name] = rack
            if rack.cluster_uuid is not None:
                if rack.cluster_uuid in domains:
                    # Two racks in one NVLink domain would be one Kueue topology domain: refuse.
                    raise ValueError(
                        f"racks {domains[rack.cluster_uuid]} and {rack.name} report the same cluster UUID "
                        f"{rack.cluster_uuid}"
                    )
                domains[rack.cluster_uuid] = rack.name
        partitions: set[tuple[str, str]] = set()
        cliques: set[tuple[str, int]] = set()
        for p in self.partitions:
            if p.rack not in racks:
                raise ValueError(f"partition {p.rack}.{p.name}: rack {p.rack} is not in the inventory")
            if (p.rack, p.name) in partitions:
                raise ValueError(f"partition {p.rack}.{p.name} is listed twice")
            if (p.rack, p.clique_id) in cliques:
                raise ValueError(f"rack {p.rack}: clique ID {p.clique_id} is used by two partitions")
            partitions.add((p.rack, p.name))
            cliques.add((p.rack, p.clique_id))
        hostnames: set[str] = set()
        for node in self.nodes:
            if node.hostname in hostnames:
                raise ValueError(f"node {node.hostname} is listed twice")
            hostnames.add(node.hostname)
            if node.rack not in racks:
                raise ValueError(f"node {node.hostname}: rack {node.rack} is not in the inventory")
            if node.partition is not None and (node.rack, node.partition) not in partitions:
                raise ValueError(
                    f"node {node.hostname}: partition {node.partition} is not a partition of rack {node.rack}"
                )


# --- label values -------------------------------------------------------------------------------------


def _check_label_value(value: Any, what: str) -> None:
    if not isinstance(value, str) or not _LABEL_VALUE.match(value):
        raise ValueError(
            f"{what} cannot be a Kubernetes label value (letters, digits, '-', '_', '.'; starting and "
            "ending with a letter or digit)"
        )


def fnv1a_64(data: bytes) -> int:
    """64-bit FNV-1a, as Go's hash/fnv New64a."""
    h = _FNV64_OFFSET
    for byte in data:
        h ^= byte
        h = (h * _FNV64_PRIME) & _MASK64
    return h


def topograph_label_value(value: str) -> str:
    """A label value the way Topograph writes it (pkg/engines/k8s/labeler.go, checkLabel): unchanged up to
    63 bytes, otherwise `fmt.Sprintf("x%x", fnv64a(value))`."""
    data = value.encode()
    if len(data) <= 63:
        return value
    return f"x{fnv1a_64(data):x}"


def nvlink_domain(rack: RackSpec) -> str | None:
    """Value of `accelerator.topograph.run/domain` for the rack's nodes (None: no NVLink domain known)."""
    return None if rack.cluster_uuid is None else topograph_label_value(rack.cluster_uuid)


def nvlink_sub_domain(rack: RackSpec, partition: PartitionSpec) -> str | None:
    """Value of `accelerator.topograph.run/sub-domain`: `<cluster-uuid>.<clique-id>`, Topograph-hashed."""
    if rack.cluster_uuid is None:
        return None
    return topograph_label_value(f"{rack.cluster_uuid}.{partition.clique_id}")


def partition_label_value(partition: PartitionSpec) -> str:
    """Value of `rackplane.io/nvlink-partition`: `<rack>.<partition>` (unique cluster-wide)."""
    value = topograph_label_value(f"{partition.rack}.{partition.name}")
    _check_label_value(value, f"partition {partition.rack}.{partition.name}")
    return value


def partition_flavor_name(partition: PartitionSpec) -> str:
    """The ResourceFlavor of one partition: its label value, lower-cased, '_' -> '-' (a DNS subdomain)."""
    name = partition_label_value(partition).lower().replace("_", "-")
    if not _DNS1123_SUBDOMAIN.match(name):
        raise ValueError(
            f"partition {partition.rack}.{partition.name}: {name!r} cannot be a ResourceFlavor name "
            "(rack and partition names must start and end with a letter or digit)"
        )
    return name


# --- objects ------------------------------------------------------------------------------------------


def _managed_labels(**extra: str) -> dict[str, str]:
    return {MANAGED_BY_LABEL: MANAGED_BY_VALUE, **extra}


def fabric_tier_keys(fabric: Fabric, fabric_label: str = FABRIC_TIER_LABEL) -> list[str]:
    """The fabric's tier label keys, coarsest first (tier-N-1 ... tier-0); none for an empty fabric."""
    if fabric.empty:
        return []
    keys = [fabric_label.format(tier=tier) for tier in range(len(fabric.levels) - 1, -1, -1)]
    for key in keys:
        prefix, slash, name = key.rpartition("/")
        bad_prefix = slash and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix))
        if not _LABEL_VALUE.match(name) or not name or len(name) > 63 or bad_prefix:
            raise ValueError(f"{key!r} is not a Kubernetes label key")
    if len(set(keys)) != len(keys):
        raise ValueError(f"the fabric label {fabric_label!r} must hold {{tier}}")
    if len(keys) + 3 > MAX_TOPOLOGY_LEVELS:
        raise ValueError(
            f"the fabric has {len(keys)} levels: with the NVLink domain, partition and host Kueue's Topology "
            f"would have more than {MAX_TOPOLOGY_LEVELS}"
        )
    return keys


def fabric_label_value(group: str) -> str:
    """A fabric group's name as a label value: Topograph's rule, and its hash for a name that is no value."""
    value = topograph_label_value(group)
    return value if _LABEL_VALUE.match(value) else f"x{fnv1a_64(group.encode()):x}"


def fabric_labels(fabric: Fabric, rack: str, fabric_label: str = FABRIC_TIER_LABEL) -> dict[str, str]:
    """The fabric tier labels of a rack's nodes (tier-0: its unit); empty when the fabric does not know it."""
    path = fabric.path(rack)
    if path is None:
        return {}
    return dict(zip(fabric_tier_keys(fabric, fabric_label), map(fabric_label_value, path), strict=True))


def node_labels(
    state: InventoryState,
    pool: str = DEFAULT_FLAVOR,
    fabric: Fabric | None = None,
    fabric_label: str = FABRIC_TIER_LABEL,
) -> dict[str, dict[str, str]]:
    """The labels Rackplane wants on each node, by hostname. Keys are a subset of NODE_LABEL_KEYS and the
    fabric's tier keys (`fabric_tier_keys`)."""
    fabric = fabric or Fabric()
    racks = {r.name: r for r in state.racks}
    partitions = {(p.rack, p.name): p for p in state.partitions}
    result: dict[str, dict[str, str]] = {}
    for node in state.nodes:
        rack = racks[node.rack]
        labels = {RACK_LABEL: rack.name}
        tiers = fabric_labels(fabric, rack.name, fabric_label)
        labels.update(tiers)
        domain = nvlink_domain(rack)
        if domain is not None:
            labels[DOMAIN_LABEL] = domain
        if node.partition is not None:
            partition = partitions[(node.rack, node.partition)]
            labels[PARTITION_LABEL] = partition_label_value(partition)
            sub_domain = nvlink_sub_domain(rack, partition)
            if sub_domain is not None:
                labels[SUB_DOMAIN_LABEL] = sub_domain
                if fabric.empty or tiers:
                    labels[POOL_LABEL] = pool
            if partition.department:
                labels[DEPARTMENT_LABEL] = partition.department
            if partition.service_tier:
                labels[SERVICE_TIER_LABEL] = partition.service_tier
        if node.mig_layout is not None:
            labels[MIG_CONFIG_LABEL] = node.mig_layout.name
        result[node.hostname] = dict(sorted(labels.items()))
    return result


def node_object(hostname: str, labels: dict[str, str]) -> dict[str, Any]:
    """The partial Node that is server-side applied: name and Rackplane's labels, nothing else."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": hostname, "labels": dict(labels)}}


def node_objects(
    state: InventoryState,
    pool: str = DEFAULT_FLAVOR,
    fabric: Fabric | None = None,
    fabric_label: str = FABRIC_TIER_LABEL,
) -> list[dict[str, Any]]:
    labels = node_labels(state, pool, fabric, fabric_label)
    return [node_object(host, labels) for host, labels in sorted(labels.items())]


def topology(
    name: str = TOPOLOGY_NAME, fabric: Fabric | None = None, fabric_label: str = FABRIC_TIER_LABEL
) -> dict[str, Any]:
    """Kueue Topology: the fabric's tiers (if any, coarsest first), NVLink domain (rack), NVLink partition,
    host. Coarsest first, hostname last."""
    tiers = fabric_tier_keys(fabric or Fabric(), fabric_label)
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Topology",
        "metadata": {"name": name, "labels": _managed_labels()},
        "spec": {
            "levels": [
                *({"nodeLabel": key} for key in tiers),
                {"nodeLabel": DOMAIN_LABEL},
                {"nodeLabel": SUB_DOMAIN_LABEL},
                {"nodeLabel": HOSTNAME_LABEL},
            ]
        },
    }


def shared_flavor(flavor: str = DEFAULT_FLAVOR, topology_name: str = TOPOLOGY_NAME) -> dict[str, Any]:
    """The ResourceFlavor every department's ClusterQueue lists: all pooled nodes, topology-aware."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": flavor, "labels": _managed_labels()},
        "spec": {"nodeLabels": {POOL_LABEL: flavor}, "topologyName": topology_name},
    }


def partition_flavor(partition: PartitionSpec, topology_name: str = TOPOLOGY_NAME) -> dict[str, Any]:
    """One NVLink partition as a topology-aware ResourceFlavor (selects its nodes by partition label)."""
    value = partition_label_value(partition)
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {
            "name": partition_flavor_name(partition),
            "labels": _managed_labels(**{RACK_LABEL: partition.rack, PARTITION_LABEL: value}),
        },
        "spec": {"nodeLabels": {PARTITION_LABEL: value}, "topologyName": topology_name},
    }


@functools.lru_cache(maxsize=65536)
def _kept_partition_flavor(partition: PartitionSpec, topology_name: str) -> dict[str, Any]:
    """`partition_flavor`, the same object for the same (frozen) spec: a render of 10,000 racks makes 20,000
    flavors, and the same objects let integrations.state reuse their YAML by identity. Never changed."""
    return partition_flavor(partition, topology_name)


def forget_flavors() -> None:
    _kept_partition_flavor.cache_clear()


def partition_flavors(state: InventoryState, topology_name: str = TOPOLOGY_NAME) -> list[dict[str, Any]]:
    """One flavor per partition of a rack with a known NVLink domain (labelled with its rack)."""
    racks = {r.name: r for r in state.racks}
    return [
        _kept_partition_flavor(partition, topology_name)
        for partition in state.partitions
        if racks[partition.rack].cluster_uuid is not None
    ]


def resource_flavors(
    state: InventoryState, flavor: str = DEFAULT_FLAVOR, topology_name: str = TOPOLOGY_NAME
) -> list[dict[str, Any]]:
    """The shared flavor and one flavor per partition of a rack with a known NVLink domain."""
    return [shared_flavor(flavor, topology_name), *partition_flavors(state, topology_name)]


def compute_domain(
    name: str, namespace: str, resource_claim_template: str, allocation_mode: str = "Single"
) -> dict[str, Any]:
    """A ComputeDomain (NVIDIA DRA driver) for one multi-node NVLink workload: an IMEX domain scoped to the
    workload's nodes. Its spec is immutable; `numNodes` 0 as the driver recommends. Pods claim the channel
    through `resourceClaimTemplateName: <resource_claim_template>`. Per workload: not in desired_objects."""
    if allocation_mode not in ("Single", "All"):
        raise ValueError(f"allocation_mode must be 'Single' or 'All', got {allocation_mode!r}")
    return {
        "apiVersion": COMPUTE_DOMAIN_API_VERSION,
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": namespace, "labels": _managed_labels()},
        "spec": {
            "numNodes": 0,
            "channel": {
                "resourceClaimTemplate": {"name": resource_claim_template},
                "allocationMode": allocation_mode,
            },
        },
    }


# --- everything ---------------------------------------------------------------------------------------


def object_key(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    """(API group, kind, namespace, name): identifies an object whatever version it is written in."""
    group = obj["apiVersion"].rpartition("/")[0]
    metadata = obj.get("metadata", {})
    return (group, obj["kind"], metadata.get("namespace", ""), metadata["name"])


def object_ref(obj: dict[str, Any]) -> str:
    """`Kind namespace/name` or `Kind name`, for messages."""
    metadata = obj.get("metadata") or {}
    name = metadata.get("name", "?")
    namespace = metadata.get("namespace")
    return f"{obj.get('kind', '?')} {namespace}/{name}" if namespace else f"{obj.get('kind', '?')} {name}"


def _kind_rank(kind: str) -> int:
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)


def sort_for_apply(objects: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """KIND_ORDER, then namespace and name: deterministic and dependency-safe."""
    return sorted(
        objects,
        key=lambda o: (_kind_rank(o["kind"]), o["metadata"].get("namespace", ""), o["metadata"]["name"]),
    )


def mig_config_map(state: InventoryState, namespace: str = DEFAULT_MIG_NAMESPACE) -> dict[str, Any] | None:
    """mig-parted's configuration with every layout a node was given (None when no node has one): the
    ConfigMap the GPU Operator's ClusterPolicy names in spec.migManager.config.name."""
    layouts = [node.mig_layout for node in state.nodes if node.mig_layout is not None]
    if not layouts:
        return None
    try:
        config = mig_parted_config(layouts)
    except LayoutError as error:
        raise ValueError(str(error)) from error
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": MIG_CONFIG_MAP, "namespace": namespace, "labels": _managed_labels()},
        "data": {MIG_CONFIG_KEY: yaml.safe_dump(config, sort_keys=False, default_flow_style=False)},
    }


def mig_offer(state: InventoryState) -> dict[str, int]:
    """The MIG profiles the fleet's layouts offer and how many slices of each (every GPU of a tray holds its
    tray's layout): what the ClusterQueues cover (tenants.mig_quota). Profiles without a Kubernetes resource
    name (+me) are left out: no job asks for them."""
    offer: dict[str, int] = {}
    for node in state.nodes:
        layout = node.mig_layout
        if layout is None or not layout.enabled:
            continue
        for profile, count in layout.devices:
            if MIG_RESOURCE_PROFILE.match(profile):
                offer[profile] = offer.get(profile, 0) + count * GPUS_PER_TRAY
    return dict(sorted(offer.items()))


def desired_objects(
    state: InventoryState,
    tenants: Sequence[TenantSpec],
    *,
    nfs_server: str,
    cohort: str = DEFAULT_COHORT,
    flavor: str = DEFAULT_FLAVOR,
    topology_name: str = TOPOLOGY_NAME,
    mig_namespace: str = DEFAULT_MIG_NAMESPACE,
    fabric: Fabric | None = None,
    fabric_label: str = FABRIC_TIER_LABEL,
    nodes: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Everything Rackplane wants in the cluster, in apply order (see KIND_ORDER).

    Node label patches (with the compute `fabric`'s tier labels), the Kueue Topology, the shared and
    per-partition ResourceFlavors, and for each department `tenants.tenant_objects` (namespace, quota,
    network policy, queues covering the MIG resources of `mig_offer`, volume).
    ValueError when two objects would have the same identity (e.g. a slug listed twice). `nodes`: the node
    objects if already made (`node_objects` of this state, pool and fabric; integrations.state keeps them
    per rack).
    """
    if nodes is None:
        nodes = node_objects(state, pool=flavor, fabric=fabric, fabric_label=fabric_label)
    objects: list[dict[str, Any]] = [topology(topology_name, fabric, fabric_label)]
    objects += resource_flavors(state, flavor, topology_name)
    mig = mig_offer(state)
    for tenant in tenants:
        if not isinstance(tenant, TenantSpec):
            raise TypeError(f"expected TenantSpec, got {type(tenant).__name__}")
        objects += tenant_objects(tenant, nfs_server, cohort=cohort, flavor=flavor, mig=mig)
    if (config_map := mig_config_map(state, mig_namespace)) is not None:
        objects.append(config_map)
    seen: set[tuple[str, str, str, str]] = set()
    for obj in objects:
        key = object_key(obj)
        if key in seen:
            raise ValueError(f"{object_ref(obj)} would be rendered twice")
        seen.add(key)
    return _with_nodes(sort_for_apply(objects), nodes)


def _with_nodes(others: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`sort_for_apply(others + nodes)` for Node objects (one kind, no namespace): they go, by name, where
    their kind's rank puts them (190,000 objects at 10,000 racks are not sorted again when the nodes come
    sorted, as `node_objects` gives them). ValueError for a node name given twice."""
    if any(node["kind"] != "Node" or node["metadata"].get("namespace") for node in nodes):
        raise ValueError("only Node objects, without a namespace, go in the nodes' place")
    names = [node["metadata"]["name"] for node in nodes]
    if any(a >= b for a, b in itertools.pairwise(names)):  # not sorted, or a name twice
        nodes = sorted(nodes, key=lambda node: node["metadata"]["name"])
        names = [node["metadata"]["name"] for node in nodes]
        for a, b in itertools.pairwise(names):
            if a == b:
                raise ValueError(f"Node {a} would be rendered twice")
    rank = _kind_rank("Node")
    at = next((i for i, obj in enumerate(others) if _kind_rank(obj["kind"]) > rank), len(others))
    return [*others[:at], *nodes, *others[at:]]
