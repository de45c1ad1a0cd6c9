"""The whole desired configuration, built from the database, and the files it renders to.

`build_state()` reads the inventory and the tenancy tables in a fixed number of queries (whatever the number
of racks) and turns them into the renderers' plain inputs; `render_files(state)` is everything a directory
target holds (and `manage.py render_configs` writes). The per-backend adapters take the same state:
`slurm_files`, `kubernetes_objects`, `fabric_racks`. Renderers are pure (no Django) and deterministic, so a
`ConfigPush` hash changes only when the configuration does.

How the database maps to each scheduler (decisions, in one place):

* Slurm blocks (topology/block): one per NVLink partition that has trays, named `<rack><partition>` from the
  rack's short name (the part after its last '-': `gb-r02` -> `r02`) and the partition's name, e.g.
  `r02p1`. A rack's default partition (clique ID 32766, the whole uncarved rack) is named after the rack
  alone (`r01`). When two racks share a short name the full rack names are used for every block.
* Slurm nodes: every compute tray, `Gres=gpu:4` (trays that are drained or down stay defined: their state
  is slurmd's and the operator's, not the file's).
* Slurm partitions, one per service tier: `gpu` (the default partition) with every tray that is not in a
  dedicated NVLink partition, then one per department that has dedicated partitions, named after its slug,
  holding exactly those trays, open only to the department's QOS (`AllowQos=<slug>`) and served first
  (`PriorityTier=10`). Every department gets a QOS named after its slug whose `GrpTRES=gres/gpu` is its GPU
  limit (sacctmgr; needs slurmdbd).
* Kubernetes: `integrations.kubernetes.render.desired_objects` with every rack, partition and tray;
  a partition's service tier label is its Slurm partition's name (`gpu` or the department slug).
* OpenSM: one InfiniBand partition per department whose members are the port GUIDs of the trays it owns
  (dedicated partitions) or runs on (trays holding a GPU of one of its running jobs).
* NFS: one export per department.

`render_files` writes the Kubernetes objects one file per kind, numbered in apply order
(`kubernetes/01-namespaces.yaml` ... `kubernetes/10-persistentvolumeclaims.yaml`), so `kubectl apply -f
kubernetes/` applies them in an order the API server accepts; a kind with no objects has no file.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import hostlist
import yaml

from core.hardware import DEFAULT_CLIQUE_ID, GPUS_PER_TRAY
from integrations.kubernetes.render import (
    KIND_ORDER,
    InventoryState,
    NodeSpec,
    PartitionSpec,
    RackSpec,
    desired_objects,
)
from integrations.kubernetes.target import KubernetesState
from integrations.slurm.render import (
    DepartmentQos,
    ServiceTier,
    SlurmBlock,
    SlurmNode,
    render_rackplane_conf,
    render_topology_conf,
)
from integrations.slurm.target import RACKPLANE_CONF, TOPOLOGY_CONF, SlurmState
from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack
from scheduling.choices import HOLDING_STATES
from scheduling.models import Allocation
from tenancy.models import Department, TenancySettings
from tenancy.renderers import TenantSpec, render_nfs_exports, render_opensm_partitions, to_yaml
from tenancy.renderers import _represent_str as _yaml_str  # the same quoting rules as to_yaml

SHARED_TIER = "gpu"
DEDICATED_PRIORITY_TIER = 10
TRAY_CPUS = 144  # two Grace CPUs of 72 Neoverse V2 cores per GB200/GB300 compute tray

SLURM_TOPOLOGY = f"slurm/{TOPOLOGY_CONF}"
SLURM_RACKPLANE = f"slurm/{RACKPLANE_CONF}"
OPENSM_PARTITIONS = "opensm/partitions.conf"
NFS_EXPORTS = "nfs/exports"
KUBERNETES_DIR = "kubernetes"
_PLURAL = {"Topology": "topologies", "NetworkPolicy": "networkpolicies"}
# Kind -> file, numbered in apply order (KIND_ORDER).
KUBERNETES_FILES = {
    kind: f"{KUBERNETES_DIR}/{number:02d}-{_PLURAL.get(kind, kind.lower() + 's')}.yaml"
    for number, kind in enumerate(KIND_ORDER, 1)
}

_PORT_GUID = re.compile(r"^0x[0-9a-fA-F]{16}$")
_SLURM_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class FabricRack:
    """One rack's NVLink partitions as the fabric manager should hold them.

    `partitions`: (name, partition ID = clique ID, ((GPU UUID, tray slot, GPU index), ...)).
    `domain` is the rack's cluster UUID (None: not discovered yet; the fabric cannot be addressed).
    """

    rack: str
    domain: str | None
    partitions: tuple[tuple[str, int, tuple[tuple[str, int, int], ...]], ...]


@dataclass(frozen=True)
class ConfigState:
    """Everything Rackplane wants the outside world to run, as the renderers' inputs."""

    slurm: SlurmState
    qos: tuple[DepartmentQos, ...]
    kubernetes: KubernetesState
    tenants: tuple[TenantSpec, ...]
    fabric: tuple[FabricRack, ...] | None = None
    # Data that was left out because it cannot be rendered (e.g. a malformed port GUID), in plain words.
    problems: tuple[str, ...] = ()

    @property
    def rack_count(self) -> int:
        return len(self.kubernetes.inventory.racks)


def short_rack_names(names: list[str]) -> dict[str, str]:
    """`gb-r01` -> `r01` when every rack's last '-' part is unique; otherwise the full names."""
    short = {name: name.rsplit("-", 1)[-1] for name in names}
    if len(set(short.values())) != len(short) or not all(short.values()):
        return {name: name for name in names}
    return short


def partition_tier(service_tier: str, owner_slug: str | None) -> str:
    """The Slurm partition serving an NVLink partition: the one the wizard named, else its department's
    (dedicated), else the shared `gpu` partition."""
    return service_tier or owner_slug or SHARED_TIER


def block_name(rack_short: str, partition_name: str, clique_id: int) -> str:
    if clique_id == DEFAULT_CLIQUE_ID:
        return rack_short
    return rack_short + _SLURM_UNSAFE.sub("-", partition_name)


def build_state(*, fabric: bool = False) -> ConfigState:
    """Read the database once (a fixed number of queries) and build the desired state.

    `fabric=True` also reads every GPU (UUID, tray slot, index) for the fabric manager adapter.
    Raises ValueError when stored data cannot be expressed (the message names the object).
    """
    problems: list[str] = []
    racks = list(Rack.objects.order_by("name").values_list("id", "name", "cluster_uuid"))
    rack_name = {pk: name for pk, name, _ in racks}
    partitions = list(
        NVLinkPartition.objects.values_list(
            "id", "rack_id", "name", "clique_id", "dedication__department_id", "service_tier"
        )
    )
    partition_by_id = {row[0]: row for row in partitions}
    trays = sorted(
        ComputeTray.objects.values_list("id", "rack_id", "slot", "hostname", "partition_id", "ib_port_guids"),
        key=lambda t: (rack_name[t[1]], t[2]),
    )
    departments = list(Department.objects.order_by("slug"))
    running = set(
        Allocation.objects.filter(job__state__in=HOLDING_STATES, gpu__tray__isnull=False)
        .values_list("job__department_id", "gpu__tray_id")
        .distinct()
    )
    tenancy = TenancySettings.load()

    dept_slug = {d.pk: d.slug for d in departments}
    tray_dept: dict[int, int] = {}  # tray -> department owning its partition (dedicated)
    hosts_of_partition: dict[int, list[str]] = defaultdict(list)
    for tray_id, _rack_id, _slot, hostname, partition_id, _guids in trays:
        if partition_id is not None:
            hosts_of_partition[partition_id].append(hostname)
            owner = partition_by_id[partition_id][4]
            if owner is not None:
                tray_dept[tray_id] = owner

    # --- Slurm ---------------------------------------------------------------------------------------
    short = short_rack_names([name for _, name, _ in racks])
    blocks = []
    for pk, rack_id, name, clique_id, _owner, _tier in sorted(
        partitions, key=lambda p: (rack_name[p[1]], p[3] == DEFAULT_CLIQUE_ID, p[3], p[2])
    ):
        hosts = hosts_of_partition.get(pk)
        if hosts:
            rack = rack_name[rack_id]
            blocks.append(SlurmBlock(block_name(short[rack], name, clique_id), rack, tuple(hosts)))
    nodes = tuple(SlurmNode(hostname=t[3], gpus=GPUS_PER_TRAY, cpus=TRAY_CPUS) for t in trays)
    # The tier of a partition: the Slurm partition the wizard named, else its department's, else `gpu`.
    tier_of = {
        pk: partition_tier(tier, dept_slug[owner] if owner is not None else None)
        for pk, _rack, _name, _clique, owner, tier in partitions
    }
    tier_hosts: dict[str, list[str]] = {SHARED_TIER: []}
    tier_departments: dict[str, set[str]] = defaultdict(set)
    for _tray, _rack, _slot, hostname, partition_id, _guids in trays:
        tier = tier_of.get(partition_id, SHARED_TIER)
        tier_hosts.setdefault(tier, []).append(hostname)
        owner = partition_by_id[partition_id][4] if partition_id is not None else None
        if owner is not None:
            tier_departments[tier].add(dept_slug[owner])
    tiers = []
    if tier_hosts[SHARED_TIER]:
        tiers.append(ServiceTier(SHARED_TIER, tuple(tier_hosts[SHARED_TIER]), default=True, priority_tier=1))
    for tier, hosts in sorted(tier_hosts.items()):
        if tier == SHARED_TIER:
            continue
        owners = tuple(sorted(tier_departments[tier]))
        tiers.append(
            ServiceTier(
                tier,
                tuple(hosts),
                allow_qos=owners,
                priority_tier=DEDICATED_PRIORITY_TIER if owners else 1,
            )
        )
    qos = tuple(DepartmentQos(d.slug, d.limit_gpus) for d in departments)

    # --- tenants (OpenSM, NFS, Kubernetes namespaces) ---------------------------------------------------
    guids_of_tray = {}
    for tray_id, _rack_id, _slot, hostname, _partition_id, guids in trays:
        good = []
        for guid in guids or []:
            if isinstance(guid, str) and _PORT_GUID.match(guid) and int(guid, 16):
                good.append(guid.lower())
            else:
                problems.append(f"tray {hostname}: port GUID {guid!r} is not '0x' + 16 hex digits; left out")
        guids_of_tray[tray_id] = good
    member_trays: dict[int, set[int]] = defaultdict(set)
    for tray_id, department_id in tray_dept.items():
        member_trays[department_id].add(tray_id)
    for department_id, tray_id in running:
        member_trays[department_id].add(tray_id)
    tenants = []
    for d in departments:
        guids = sorted({g for tray_id in member_trays.get(d.pk, ()) for g in guids_of_tray.get(tray_id, ())})
        try:
            tenants.append(
                TenantSpec(
                    slug=d.slug,
                    name=d.name,
                    guaranteed_gpus=d.guaranteed_gpus,
                    limit_gpus=d.limit_gpus,
                    vlan_id=d.vlan_id,
                    vxlan_vni=d.vxlan_vni,
                    pkey=d.ib_pkey,
                    port_guids=tuple(guids),
                    network_cidr=d.network_cidr,
                    export_path=d.export_path,
                    storage_quota_gib=d.storage_quota_gib,
                )
            )
        except ValueError as error:
            raise ValueError(f"department {d.name}: {error}") from error

    # --- Kubernetes ------------------------------------------------------------------------------------
    partition_name = {row[0]: row[2] for row in partitions}
    inventory = InventoryState(
        racks=tuple(RackSpec(name, str(uuid) if uuid else None) for _, name, uuid in racks),
        partitions=tuple(
            PartitionSpec(
                rack_name[rack_id],
                name,
                clique_id,
                department=dept_slug[owner] if owner is not None else None,
                service_tier=tier_of[pk],
            )
            for pk, rack_id, name, clique_id, owner, _tier in sorted(
                partitions, key=lambda p: (rack_name[p[1]], p[3], p[2])
            )
        ),
        nodes=tuple(
            NodeSpec(t[3], rack_name[t[1]], partition_name[t[4]] if t[4] is not None else None) for t in trays
        ),
    )
    kubernetes = KubernetesState(inventory=inventory, tenants=tuple(tenants), nfs_server=tenancy.nfs_server)

    # --- fabric ----------------------------------------------------------------------------------------
    fabric_racks = None
    if fabric:
        tray_of = {t[0]: t for t in trays}
        gpus_of_partition: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
        for tray_id, index, uuid in Gpu.objects.filter(tray__isnull=False).values_list(
            "tray_id", "index", "uuid"
        ):
            tray = tray_of[tray_id]
            if tray[4] is not None:
                gpus_of_partition[tray[4]].append((uuid, tray[2], index))
        per_rack: dict[int, list] = defaultdict(list)
        for pk, rack_id, name, clique_id, _owner, _tier in partitions:
            members = tuple(sorted(gpus_of_partition.get(pk, ())))
            per_rack[rack_id].append((name, clique_id, members))
        fabric_racks = tuple(
            FabricRack(
                rack=name,
                domain=str(uuid) if uuid else None,
                partitions=tuple(sorted(per_rack.get(pk, ()), key=lambda p: (p[1], p[0]))),
            )
            for pk, name, uuid in racks
        )

    return ConfigState(
        slurm=SlurmState(nodes=nodes, tiers=tuple(tiers), blocks=tuple(blocks)),
        qos=qos,
        kubernetes=kubernetes,
        tenants=tuple(tenants),
        fabric=fabric_racks,
        problems=tuple(problems),
    )


# --- rendering ---------------------------------------------------------------------------------------


def slurm_nodes(
    state: ConfigState,
    *,
    cpus: int | None = None,
    memory_mb: int | None = None,
    node_hostname: str = "",
    node_address: str = "",
    node_port_base: int | None = None,
) -> tuple[SlurmNode, ...]:
    """The state's nodes with a Slurm target's overrides (how its slurmd daemons are reached).

    `node_port_base`: node i (in Slurm's numeric hostname order) listens on port base + i, for several
    slurmd on one host (the testbed). Empty overrides keep the tray defaults.
    """
    changes: dict[str, Any] = {}
    if cpus:
        changes["cpus"] = cpus
    if memory_mb:
        changes["memory_mb"] = memory_mb
    if node_hostname:
        changes["node_hostname"] = node_hostname
    if node_address:
        changes["address"] = node_address
    nodes = state.slurm.nodes
    if not changes and node_port_base is None:
        return nodes
    nodes = tuple(dataclasses.replace(n, **changes) for n in nodes)
    if node_port_base is not None:
        order = {h: i for i, h in enumerate(hostlist.numerically_sorted([n.hostname for n in nodes]))}
        nodes = tuple(dataclasses.replace(n, port=node_port_base + order[n.hostname]) for n in nodes)
    return nodes


def slurm_files(state: ConfigState, **node_overrides: Any) -> dict[str, str]:
    """`rackplane.conf` and `topology.conf` (Slurm 24.11 topology/block). ValueError if not expressible."""
    nodes = slurm_nodes(state, **node_overrides)
    return {
        RACKPLANE_CONF: render_rackplane_conf(nodes, state.slurm.tiers),
        TOPOLOGY_CONF: render_topology_conf(state.slurm.blocks),
    }


def kubernetes_objects(state: ConfigState) -> list[dict[str, Any]]:
    k = state.kubernetes
    return desired_objects(k.inventory, k.tenants, nfs_server=k.nfs_server, cohort=k.cohort, flavor=k.flavor)


if yaml.__with_libyaml__:

    class _FastDumper(yaml.CSafeDumper):
        """`tenancy.renderers.to_yaml` with libyaml's emitter: byte-identical output (tested), about six
        times faster (the node labels of 1,000 racks are 7 MB of YAML)."""

    _FastDumper.add_representer(str, _yaml_str)

    def _to_yaml(objects: list[dict[str, Any]]) -> str:
        return yaml.dump_all(
            objects,
            Dumper=_FastDumper,
            sort_keys=False,
            default_flow_style=False,
            explicit_start=True,
            allow_unicode=True,
            width=120,
        )

else:  # pragma: no cover - PyYAML built without libyaml
    _to_yaml = to_yaml


def kubernetes_files(objects: list[dict[str, Any]]) -> dict[str, str]:
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for obj in objects:
        by_kind[obj["kind"]].append(obj)
    unknown = sorted(set(by_kind) - set(KUBERNETES_FILES))
    if unknown:
        raise ValueError(f"no file is planned for Kubernetes kind(s) {', '.join(unknown)}")
    return {KUBERNETES_FILES[kind]: _to_yaml(by_kind[kind]) for kind in KIND_ORDER if by_kind.get(kind)}


def render_files(state: ConfigState, objects: list[dict[str, Any]] | None = None) -> dict[str, str]:
    """Every file of the desired configuration, by path relative to a target directory.

    `slurm/topology.conf`, `slurm/rackplane.conf`, `kubernetes/NN-<kind>s.yaml` (one per kind that has
    objects), `opensm/partitions.conf`, `nfs/exports`. `objects`: the Kubernetes objects if already rendered.
    """
    slurm = slurm_files(state)
    files = {SLURM_TOPOLOGY: slurm[TOPOLOGY_CONF], SLURM_RACKPLANE: slurm[RACKPLANE_CONF]}
    files.update(kubernetes_files(objects if objects is not None else kubernetes_objects(state)))
    files[OPENSM_PARTITIONS] = render_opensm_partitions(state.tenants)
    files[NFS_EXPORTS] = render_nfs_exports(state.tenants)
    return dict(sorted(files.items()))


def fabric_racks(state: ConfigState) -> list[dict[str, Any]]:
    """The fabric payload: per rack, its partitions with their GPUs (JSON-ready)."""
    if state.fabric is None:
        raise ValueError("the state was built without the fabric (build_state(fabric=True))")
    return [
        {
            "rack": r.rack,
            "domain": r.domain,
            "partitions": [
                {"name": name, "partition_id": pid, "gpus": [list(g) for g in gpus]}
                for name, pid, gpus in r.partitions
            ],
        }
        for r in state.fabric
    ]


def render_current() -> dict[str, str]:
    """`render_files(build_state())`: what a directory target would hold for the database as it is now
    (inside a transaction: as that transaction sees it, e.g. a plan preview's savepoint)."""
    return render_files(build_state())
