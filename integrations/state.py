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
  dedicated NVLink partition and has no tier, one per named tier (`gpu_<name>`, shared), then one per
  department that has dedicated partitions, named after its slug, holding exactly those trays (a tier set on
  a dedicated partition is not used), open only to the department's QOS (`AllowQos=<slug>`) and served
  first (`PriorityTier=10`). Tiers and slugs cannot share a name (tenancy.naming.slurm_partition). Every
  department gets a QOS named after its slug whose `GrpTRES=gres/gpu` is its GPU limit (sacctmgr; needs
  slurmdbd).
* Kubernetes: `integrations.kubernetes.render.desired_objects` with every rack, partition and tray;
  a partition's service tier label is its Slurm partition's name (`gpu`, `gpu_<name>` or the department
  slug).
* OpenSM: one InfiniBand partition per department whose members are the port GUIDs of the trays it owns
  (dedicated partitions) or runs on (trays holding a GPU of one of its running jobs).
* NFS: one export per department.

`render_files` writes the Kubernetes objects one file per kind, numbered in apply order
(`kubernetes/01-namespaces.yaml` ... `kubernetes/10-persistentvolumeclaims.yaml`), so `kubectl apply -f
kubernetes/` applies them in an order the API server accepts; a kind with no objects has no file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import hashlib
import json
import re
import threading
from bisect import bisect_left, insort
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import hostlist
import yaml

from core.fabric import Fabric
from core.hardware import DEFAULT_CLIQUE_ID, GPUS_PER_TRAY
from integrations import contents, kept_rows
from integrations.kept_rows import RackRows, _PartitionRow, _RackRow, _Rows, _TrayRow, read_rows
from integrations.kubernetes.changes import KubernetesState
from integrations.kubernetes.render import (
    DEFAULT_FLAVOR,
    KIND_ORDER,
    RACK_LABEL,
    InventoryState,
    NodeSpec,
    PartitionSpec,
    RackSpec,
    desired_objects,
    fabric_labels,
    forget_flavors,
    node_objects,
    partition_flavors,
    sort_for_apply,
)
from integrations.kubernetes.tenants import _represent_str as _yaml_str  # the same quoting rules as to_yaml
from integrations.kubernetes.tenants import to_yaml
from integrations.slurm.render import (
    MIG_TRES_PROFILE,
    DepartmentQos,
    ServiceTier,
    SlurmAccount,
    SlurmAssociation,
    SlurmNode,
    render_account_script,
)
from integrations.slurm.target import (
    FORMAT_CONF,
    FORMAT_YAML,
    RACKPLANE_CONF,
    TOPOLOGY_CONF,
    TOPOLOGY_YAML,
    SlurmState,
    fabric_tree,
    forget_tree,
)
from integrations.slurm.target import render_files as render_slurm_files
from integrations.slurm.topology import SlurmBlock
from inventory.fabric import current_fabric
from inventory.mig_layouts import MigLayout, slices_within
from inventory.models import Gpu
from tenancy import naming
from tenancy.renderers import (
    ProjectSpec,
    TenantSpec,
    export_path_problem,
    render_nfs_exports,
    render_opensm_partitions,
)

SHARED_TIER = naming.SHARED_PARTITION  # "gpu": no department may take the name (tenancy.naming)
DEDICATED_PRIORITY_TIER = 10
TRAY_CPUS = 144  # two Grace CPUs of 72 Neoverse V2 cores per GB200/GB300 compute tray

SLURM_TOPOLOGY = f"slurm/{TOPOLOGY_CONF}"
SLURM_TOPOLOGY_YAML = f"slurm/{TOPOLOGY_YAML}"  # only when a compute fabric is known (render_files)
SLURM_RACKPLANE = f"slurm/{RACKPLANE_CONF}"
SLURM_ACCOUNTS = "slurm/accounts.sh"  # only when a department has projects (render_files)
OPENSM_PARTITIONS = "opensm/partitions.conf"
NFS_EXPORTS = "nfs/exports"
KUBERNETES_DIR = "kubernetes"
_PLURAL = {"Topology": "topologies", "NetworkPolicy": "networkpolicies"}
# Kind -> file, numbered in apply order (KIND_ORDER).
KUBERNETES_FILES = {
    kind: f"{KUBERNETES_DIR}/{number:02d}-{_PLURAL.get(kind, kind.lower() + 's')}.yaml"
    for number, kind in enumerate(KIND_ORDER, 1)
}

_PORT_GUID = re.compile(r"^0x[0-9a-fA-F]{16}\Z")
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
    # Who may submit under which Slurm account (slurm_associations): pushed with the accounts and QOS.
    associations: tuple[SlurmAssociation, ...] = ()
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
    """The Slurm partition serving an NVLink partition: its department's when it is dedicated to one, else
    the service tier the wizard named (`gpu_<name>`), else the shared `gpu` partition (tenancy.naming
    .slurm_partition: a tier can never name a department's partition, so each has one owner)."""
    return naming.slurm_partition(service_tier, owner_slug)


def block_name(rack_short: str, partition_name: str, clique_id: int) -> str:
    if clique_id == DEFAULT_CLIQUE_ID:
        return rack_short
    return rack_short + _SLURM_UNSAFE.sub("-", partition_name)


def _slurm_blocks(rows: _Rows, tiers: Iterable[_RackTiers] | None = None) -> tuple[SlurmBlock, ...]:
    """One topology block per NVLink partition that has trays, the rack's default partition last; racks by
    name. `tiers`: the racks' `_RackTiers` (in `rows.parts` order), made here when not given."""
    pieces = _rack_tiers_of(rows, tiers)
    short = short_rack_names([r.name for r in rows.racks])
    found = []
    for piece in sorted(pieces, key=lambda piece: piece.rack):
        rack = piece.rack
        for partition, clique_id, hosts in piece.blocks:
            found.append((block_name(short[rack], partition, clique_id), rack, partition, hosts))
    # Short names run together (rack `r1` + partition `1` and rack `r11` are both `r11`): a name given twice
    # becomes `<rack>.<partition>` for each of its blocks. Rack and partition names are DNS labels
    # (inventory.names), so they hold no dot: a dotted name never equals a plain one, and two dotted ones
    # differ (rack names are unique, partition names unique in their rack).
    given = Counter(name for name, *_ in found)
    return tuple(
        SlurmBlock(name if given[name] == 1 else f"{rack}.{partition}", rack, hosts)
        for name, rack, partition, hosts in found
    )


def _tier_of_partition(rows: _Rows, partitions: Iterable[_PartitionRow]) -> dict[int, str]:
    """Partition -> the Slurm partition serving it (see `partition_tier`), for these of `rows`' partitions."""
    tiers = {}
    for p in partitions:
        try:
            tiers[p.id] = partition_tier(p.service_tier, rows.owner_slug(p))
        except ValueError as error:  # a row written around the model's validation and constraint
            raise ValueError(f"partition {rows.rack_name[p.rack_id]} {p.name}: {error}") from error
    return tiers


def slurm_partition_of(service_tier: str, owner_slug: str | None, *, mig: bool = False) -> str:
    """The Slurm partition of a tray (`partition_tier`), or of its MIG twin when the tray is in MIG mode
    (tenancy.naming.mig_partition): the one rule the renderer and dispatch follow."""
    tier = partition_tier(service_tier, owner_slug)
    return naming.mig_partition(tier) if mig else tier


def _service_tiers(rows: _Rows, tiers: Iterable[_RackTiers] | None = None) -> tuple[ServiceTier, ...]:
    """The shared `gpu` partition (if it has trays) first, then every other tier by name; a tier holding a
    department's dedicated trays is open to that department's QOS only and served first. A tray in MIG mode
    (its node lines carry MIG GRES: `_slurm_mig`) is in its tier's MIG partition instead (`<tier>--mig`,
    same owners and priority), where slice jobs share the node. Hosts in the trays' order (`rows.trays`);
    `tiers`: the racks' `_RackTiers` (in `rows.parts` order), made here when not given."""
    tier_hosts: dict[str, list[str]] = {SHARED_TIER: []}
    tier_owners: dict[str, set[int]] = defaultdict(set)
    mig_tiers: set[str] = set()
    for piece in _rack_tiers_of(rows, tiers):
        for name, rack_hosts in piece.tier_hosts:
            tier_hosts.setdefault(name, []).extend(rack_hosts)
        for name, rack_owners in piece.tier_owners:
            tier_owners[name].update(rack_owners)
        mig_tiers.update(piece.mig_tiers)
    tiers_made = []
    if tier_hosts[SHARED_TIER]:
        tiers_made.append(
            ServiceTier(SHARED_TIER, tuple(tier_hosts[SHARED_TIER]), default=True, priority_tier=1)
        )
    for tier, hosts in sorted(tier_hosts.items()):
        if tier == SHARED_TIER:
            continue
        qos: set[str] = set()
        for owner in tier_owners[tier]:
            slug = rows.department_slug[owner]
            qos.update((naming.department_qos(slug), naming.department_borrowed_qos(slug)))
        owners = tuple(sorted(qos))
        tiers_made.append(
            ServiceTier(
                tier,
                tuple(hosts),
                allow_qos=owners,
                priority_tier=DEDICATED_PRIORITY_TIER if owners else 1,
                mig=tier in mig_tiers,
            )
        )
    return tuple(tiers_made)


@dataclass(frozen=True)
class _RackTiers:
    """What the render makes of one rack's rows and the departments' slugs (a partition's tier is named
    after its owner's slug): its Kubernetes rack and partition specs, its trays' hosts by Slurm partition
    (service tier) with the departments owning them, and its topology blocks. Kept while the rack's rows
    are the same objects and the slugs the same (`_rack_tiers`): a render then walks 10,000 racks, not
    180,000 trays (issue 32)."""

    rack: str
    rack_spec: RackSpec
    partition_specs: tuple[PartitionSpec, ...]  # by clique ID, name
    tier_hosts: tuple[tuple[str, tuple[str, ...]], ...]  # tier -> hosts, in slot order
    tier_owners: tuple[tuple[str, frozenset[int]], ...]  # tier -> departments owning trays in it
    mig_tiers: frozenset[str]
    blocks: tuple[tuple[str, int, tuple[str, ...]], ...]  # (partition, clique ID, hosts), the default last


_TIERS: dict[int, tuple[RackRows, tuple, _RackTiers]] = {}  # rack id -> (its rows, the slugs, their tiers)


def _department_slugs(rows: _Rows) -> tuple[tuple[int, str], ...]:
    return tuple(sorted(rows.department_slug.items()))


def _rack_tiers(part: RackRows, rows: _Rows, slugs: tuple) -> _RackTiers:
    """`part`'s `_RackTiers`: made again only when its rows are other objects or the slugs changed."""
    kept = _TIERS.get(part.rack.id)
    if kept is not None and kept[0] is part and kept[1] == slugs:
        return kept[2]
    made = _make_rack_tiers(part, rows)
    _TIERS[part.rack.id] = (part, slugs, made)
    return made


def _make_rack_tiers(part: RackRows, rows: _Rows) -> _RackTiers:
    rack = part.rack
    tier_of = _tier_of_partition(rows, part.partitions)
    tier_hosts: dict[str, list[str]] = {}
    tier_owners: dict[str, set[int]] = defaultdict(set)
    mig_tiers: set[str] = set()
    hosts_of_partition: dict[int, list[str]] = defaultdict(list)
    for tray in part.trays:
        pid = tray.partition_id
        tier = SHARED_TIER if pid is None else tier_of.get(pid, SHARED_TIER)
        if _slurm_mig(tray.mig_layout):
            tier = naming.mig_partition(tier)
            mig_tiers.add(tier)
        tier_hosts.setdefault(tier, []).append(tray.hostname)
        if tray.partition_id is not None:
            hosts_of_partition[tray.partition_id].append(tray.hostname)
            if (owner := rows.owner_of_tray(tray)) is not None:
                tier_owners[tier].add(owner)
    return _RackTiers(
        rack=rack.name,
        rack_spec=_rack_spec(rack.name, str(rack.cluster_uuid) if rack.cluster_uuid else None),
        partition_specs=tuple(
            _partition_spec(rack.name, p.name, p.clique_id, rows.owner_slug(p), tier_of[p.id])
            for p in sorted(part.partitions, key=lambda p: (p.clique_id, p.name))
        ),
        tier_hosts=tuple((tier, tuple(hosts)) for tier, hosts in tier_hosts.items()),
        tier_owners=tuple((tier, frozenset(owners)) for tier, owners in tier_owners.items()),
        mig_tiers=frozenset(mig_tiers),
        blocks=tuple(
            (p.name, p.clique_id, tuple(hosts_of_partition[p.id]))
            for p in sorted(
                part.partitions, key=lambda p: (p.clique_id == DEFAULT_CLIQUE_ID, p.clique_id, p.name)
            )
            if hosts_of_partition.get(p.id)
        ),
    )


def _rack_tiers_of(rows: _Rows, tiers: Iterable[_RackTiers] | None) -> Iterable[_RackTiers]:
    """The given racks' tiers, or each rack's made now (not kept: a slice's or a test's rows)."""
    if tiers is not None:
        return tiers
    return [_make_rack_tiers(part, rows) for part in rows.parts]


def _valid_port_guids(trays: Iterable[_TrayRow], problems: list[str]) -> dict[int, list[str]]:
    """Tray -> its well-formed InfiniBand port GUIDs (lower case); each malformed one is a problem."""
    guids_of_tray = {}
    for tray in trays:
        good = []
        for guid in tray.port_guids or []:
            if isinstance(guid, str) and _PORT_GUID.match(guid) and int(guid, 16):
                good.append(guid.lower())
            else:
                problems.append(
                    f"tray {tray.hostname}: port GUID {guid!r} is not '0x' + 16 hex digits; left out"
                )
        guids_of_tray[tray.id] = good
    return guids_of_tray


def _rack_members(part: RackRows, guids_of_tray: Mapping[int, list[str]]) -> dict[int, list[str]]:
    """Department -> the port GUIDs of its member trays in this rack: the trays it owns (its dedicated
    partitions) or runs on (a GPU of one of its jobs), each tray once, in slot order."""
    owner_of_partition = {p.id: p.owner_id for p in part.partitions}
    trays: dict[int, dict[int, None]] = defaultdict(dict)  # department -> its member trays (ordered set)
    for tray in part.trays:
        if tray.partition_id is not None and (owner := owner_of_partition.get(tray.partition_id)) is not None:
            trays[owner][tray.id] = None
    for department_id, tray_id in sorted(part.running):
        trays[department_id][tray_id] = None
    return {
        department: [g for tray in members for g in guids_of_tray.get(tray, ())]
        for department, members in trays.items()
    }


# Department -> (the fields its TenantSpec was made from, the spec): a spec checks every port GUID again
# (~500,000 at 10,000 racks); equal fields give the same (frozen) spec, and the OpenSM file the same text.
_TENANTS: dict[int, tuple[dict[str, Any], TenantSpec]] = {}


@dataclass
class _MemberGuids:
    """A department's member trays' port GUIDs in order, kept between renders and changed by the racks whose
    rows changed (each render changes few: jobs that started or ended, a re-carve), where walking every tray
    and sorting every GUID took ~0.3 s at 10,000 racks (300,000 GUIDs for the largest department)."""

    count: Counter  # GUID -> how many times the member trays list it (a GUID on two trays is listed once)
    ordered: list[str]  # the GUIDs, sorted
    given: tuple[str, ...] | None = None  # `ordered` as last given out, None once it changed


_GUIDS: dict[int, _MemberGuids] = {}  # department id -> its member GUIDs
# Rack id -> the members (`_rack_members`) counted in _GUIDS.
_COUNTED: dict[int, Mapping[int, list[str]]] = {}
# Renders run in threads (gunicorn's, Celery's pool): the kept lists are changed in place, by one at once.
_GUIDS_LOCK = threading.Lock()
_GUIDS_RESORT_SHARE = 0.25  # past this share of the racks changed, counting and sorting afresh is as quick


def _department_guids(racks: Iterable[tuple[int, Mapping[int, list[str]]]]) -> dict[int, tuple[str, ...]]:
    """Department -> the sorted, distinct GUIDs of its member trays, from every rack's members (rack id, its
    `_rack_members`): the kept ones, with the racks whose members are another object than when counted (or
    that are gone) taken out and put in again (bisect), or counted afresh when many changed."""
    with _GUIDS_LOCK:
        return _department_guids_locked(list(racks))


def _department_guids_locked(racks: list[tuple[int, Mapping[int, list[str]]]]) -> dict[int, tuple[str, ...]]:
    changed = [(rack, members) for rack, members in racks if _COUNTED.get(rack) is not members]
    gone: list[int] = []
    if len(_COUNTED) + sum(rack not in _COUNTED for rack, _ in changed) > len(racks):
        gone = list(_COUNTED.keys() - {rack for rack, _ in racks})
    if not _COUNTED or len(changed) + len(gone) > _GUIDS_RESORT_SHARE * max(len(racks), 1):
        counts: dict[int, Counter] = defaultdict(Counter)
        for _, members in racks:
            for department, guids in members.items():
                counts[department].update(guids)
        _GUIDS.clear()
        _GUIDS.update((d, _MemberGuids(count, sorted(count))) for d, count in counts.items())
        _COUNTED.clear()
        _COUNTED.update(racks)
    else:
        for rack in gone:
            _count(_COUNTED.pop(rack), -1)
        for rack, members in changed:
            if (old := _COUNTED.get(rack)) is not None:
                _count(old, -1)
            _count(members, 1)
            _COUNTED[rack] = members
    given = {}
    for department, kept in _GUIDS.items():
        if kept.given is None:
            kept.given = tuple(kept.ordered)
        given[department] = kept.given
    return given


def _count(members: Mapping[int, list[str]], step: int) -> None:
    """One rack's members counted in (`step` 1) or out (-1) of the kept GUIDs, in place."""
    for department, guids in members.items():
        if not guids:
            continue
        kept = _GUIDS.get(department)
        if kept is None:
            kept = _GUIDS[department] = _MemberGuids(Counter(), [])
        count, ordered = kept.count, kept.ordered
        kept.given = None
        for g in guids:
            count[g] += step
            if step > 0 and count[g] == 1:
                insort(ordered, g)
            elif step < 0 and not count[g]:
                del count[g]
                del ordered[bisect_left(ordered, g)]


def _tenants(rows: _Rows, guids_of_department: Mapping[int, tuple[str, ...]]) -> tuple[TenantSpec, ...]:
    """Every department's network and storage isolation, with the port GUIDs of its member trays
    (`guids_of_department`: `_department_guids`)."""
    tenants = []
    if len(_TENANTS) > len(rows.departments):
        _TENANTS.clear()
    for d in rows.departments:
        guids = guids_of_department.get(d.pk, ())
        # Saved before the rule (tenancy.Department.clean), a path outside the export root is not rendered.
        if problem := export_path_problem(d.export_path, root=rows.tenancy.export_root):
            raise ValueError(f"department {d.name}: export path {d.export_path!r} {problem}")
        fields = {
            "slug": d.slug,
            "name": d.name,
            "guaranteed_gpus": d.guaranteed_gpus,
            "limit_gpus": d.limit_gpus,
            "vlan_id": d.vlan_id,
            "vxlan_vni": d.vxlan_vni,
            "pkey": d.ib_pkey,
            "port_guids": tuple(guids),
            "network_cidr": d.network_cidr,
            "export_path": d.export_path,
            "storage_quota_gib": d.storage_quota_gib,
            "projects": tuple(
                ProjectSpec(p.slug, p.name, p.guaranteed_gpus, p.limit_gpus, _weight(p.over_quota_weight))
                for p in d.projects.all()
            ),
            "weight": _weight(d.over_quota_weight),
        }
        kept = _TENANTS.get(d.pk)
        if kept is not None and kept[0] == fields:
            tenants.append(kept[1])
            continue
        try:
            spec = TenantSpec(**fields)
        except ValueError as error:
            raise ValueError(f"department {d.name}: {error}") from error
        _TENANTS[d.pk] = (fields, spec)
        tenants.append(spec)
    return tuple(tenants)


def _weight(value) -> str:
    """An over-quota weight (Decimal) as Kueue's fair-sharing weight: "1", "0.5", "10"."""
    return format(value.normalize(), "f")


def _kubernetes_inventory(
    rows: _Rows, nodes: Iterable[NodeSpec] | None = None, tiers: Iterable[_RackTiers] | None = None
) -> InventoryState:
    """The inventory as the Kubernetes renderer takes it; `nodes`: the trays' NodeSpecs if already made
    (`_node_specs`, kept per rack); `tiers`: the racks' `_RackTiers`, made here when not given."""
    pieces = list(_rack_tiers_of(rows, tiers))
    return InventoryState(
        racks=tuple(piece.rack_spec for piece in pieces),
        partitions=tuple(
            spec for piece in sorted(pieces, key=lambda piece: piece.rack) for spec in piece.partition_specs
        ),
        nodes=tuple(nodes if nodes is not None else _node_specs(rows.racks, rows.partitions, rows.trays)),
    )


# A render makes a RackSpec and a PartitionSpec per rack and partition of the fleet (10,000 and more at 10,000
# racks), each checking its names again: equal fields give an equal frozen spec, so one is kept by them.
@functools.lru_cache(maxsize=1 << 17)
def _rack_spec(name: str, cluster_uuid: str | None) -> RackSpec:
    return RackSpec(name, cluster_uuid)


@functools.lru_cache(maxsize=1 << 17)
def _partition_spec(
    rack: str, name: str, clique_id: int, department: str | None, service_tier: str | None
) -> PartitionSpec:
    return PartitionSpec(rack, name, clique_id, department=department, service_tier=service_tier)


def _node_specs(
    racks: Iterable[_RackRow], partitions: Iterable[_PartitionRow], trays: Iterable[_TrayRow]
) -> list[NodeSpec]:
    rack_name = {r.id: r.name for r in racks}
    partition_name = {p.id: p.name for p in partitions}
    return [
        NodeSpec(
            t.hostname,
            rack_name[t.rack_id],
            partition_name[t.partition_id] if t.partition_id is not None else None,
            mig_layout=t.mig_layout,
        )
        for t in trays
    ]


def _slurm_node(tray: _TrayRow) -> SlurmNode:
    return SlurmNode(
        hostname=tray.hostname, gpus=GPUS_PER_TRAY, cpus=TRAY_CPUS, mig=_slurm_mig(tray.mig_layout)
    )


@dataclass(frozen=True)
class _RackPieces:
    """What the render makes of one rack's rows alone (`RackRows`), kept while the rows are the same
    objects (integrations.kept_rows keeps a rack's rows until the change log names the rack)."""

    nodes: tuple[SlurmNode, ...]
    specs: tuple[NodeSpec, ...]
    members: dict[int, list[str]]  # department -> its member trays' valid port GUIDs (`_rack_members`)
    problems: tuple[str, ...]
    hosts: tuple[str, ...]


_PIECES: dict[int, tuple[RackRows, _RackPieces]] = {}  # rack id -> (its rows, their pieces)


def _rack_pieces(part: RackRows) -> _RackPieces:
    """`part`'s pieces: made again only when the rack's rows are not the ones they were made from."""
    kept = _PIECES.get(part.rack.id)
    if kept is not None and kept[0] is part:
        return kept[1]
    problems: list[str] = []
    pieces = _RackPieces(
        nodes=tuple(_slurm_node(t) for t in part.trays),
        specs=tuple(_node_specs((part.rack,), part.partitions, part.trays)),
        members=_rack_members(part, _valid_port_guids(part.trays, problems)),
        problems=tuple(problems),
        hosts=tuple(t.hostname for t in part.trays),
    )
    _PIECES[part.rack.id] = (part, pieces)
    return pieces


def _forget_pieces(parts: Iterable[RackRows]) -> None:
    """Drop the pieces and tiers of racks that are not among `parts` any more (deleted racks)."""
    there = {part.rack.id for part in parts}
    for kept in (_PIECES, _TIERS):
        for rack in [rack for rack in list(kept) if rack not in there]:
            kept.pop(rack, None)


def _slurm_mig(layout: MigLayout | None) -> tuple[tuple[str, int], ...]:
    """A tray's MIG devices as Slurm GRES types and counts for the whole node (every GPU has the layout)."""
    if layout is None or not layout.enabled:
        return ()
    return tuple((name, count * GPUS_PER_TRAY) for name, count in layout.devices)


def _fabric_racks(rows: _Rows, rack_names: Iterable[str] | None = None) -> tuple[FabricRack, ...]:
    """Every rack's partitions with their GPUs (one more query: every GPU in a tray; `rack_names`: in those
    racks' trays)."""
    tray_by_id = {t.id: t for t in rows.trays}
    gpus_of_partition: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
    gpus = Gpu.objects.filter(tray__isnull=False)
    if rack_names is not None:
        gpus = gpus.filter(tray__rack__name__in=sorted(set(rack_names)))
    for tray_id, index, uuid in gpus.values_list("tray_id", "index", "uuid"):
        tray = tray_by_id[tray_id]
        if tray.partition_id is not None:
            gpus_of_partition[tray.partition_id].append((uuid, tray.slot, index))
    per_rack: dict[int, list] = defaultdict(list)
    for p in rows.partitions:
        members = tuple(sorted(gpus_of_partition.get(p.id, ())))
        per_rack[p.rack_id].append((p.name, p.clique_id, members))
    return tuple(
        FabricRack(
            rack=r.name,
            domain=str(r.cluster_uuid) if r.cluster_uuid else None,
            partitions=tuple(sorted(per_rack.get(r.id, ()), key=lambda p: (p[1], p[0]))),
        )
        for r in rows.racks
    )


def mig_offer(nodes: Iterable[SlurmNode]) -> dict[str, int]:
    """The MIG profiles the fleet's layouts offer (the nodes' typed GRES) and how many slices of each."""
    offer: dict[str, int] = defaultdict(int)
    for node in nodes:
        for profile, count in node.mig:
            offer[profile] += count
    return dict(sorted(offer.items()))


def mig_limits(gpus: int | None, offer: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """A department's guarantee or limit (GPU-equivalents; None: no bound) as GrpTRES gres/gpu:<profile>
    limits, one per offered MIG profile with a TRES name: the slices of that profile it holds
    (inventory.mig_layouts.slices_within, the rule Kueue's ClusterQueues follow too). No bound, no limits."""
    if gpus is None:
        return ()
    return tuple(
        (profile, slices)
        for profile, count in offer.items()
        if MIG_TRES_PROFILE.match(profile) and (slices := slices_within(profile, gpus, count)) is not None
    )


def slurm_gpu_limits(
    gpus: int | None, offer: Mapping[str, int]
) -> tuple[int | None, tuple[tuple[str, int], ...]]:
    """(GrpTRES gres/gpu, GrpTRES gres/gpu:<profile>) for a guarantee or limit of `gpus` GPU-equivalents.

    Slurm counts a MIG device as one gres/gpu too (a job asking gres/gpu:1g.23gb:2 holds gres/gpu=2 as well),
    and cannot weigh a slice g/7. Decision: the generic limit makes room for the slices the typed limits
    allow, `gpus` + their sum, so Slurm never holds a slice job Rackplane's pass starts within the figure;
    the typed limits bound each profile, and the pass keeps whole GPUs and slices together within it in
    GPU-equivalents. Without MIG in the fleet the generic limit is `gpus`, as before."""
    typed = mig_limits(gpus, offer)
    return (None if gpus is None else gpus + sum(n for _, n in typed)), typed


def department_qos(
    slug: str, guaranteed: int, offer: Mapping[str, int] | None = None
) -> tuple[DepartmentQos, DepartmentQos]:
    """A department's two Slurm QOS: its own (`GrpTRES=gres/gpu=<guarantee>`, its jobs' default: what runs
    within the guarantee) and `<slug>--borrowed` (no GPU limit of its own: what the engine starts beyond
    the guarantee). Slurm takes a Grp limit from the first place that sets it, job QOS before the
    associations (resource_limits.html, "Hierarchy"): a borrowed job is held by its department's account
    association (GrpTRES = the department's limit), which counts every job of the department, in quota and
    borrowed; an in-quota job by the guarantee. integrations.dispatch picks the QOS of each job."""
    return (
        DepartmentQos(naming.department_qos(slug), *slurm_gpu_limits(guaranteed, offer or {})),
        DepartmentQos(naming.department_borrowed_qos(slug), None),
    )


def current_compute_fabric() -> Fabric:
    """The compute fabric every render takes by default (issue 33): the inventory's fabric in use
    (inventory.fabric.current_fabric: one query), the empty Fabric() on a site that imported none."""
    return current_fabric()


def build_state(*, fabric: bool = False, compute_fabric: Fabric | None = None) -> ConfigState:
    """Read the database once (a fixed number of queries) and build the desired state.

    `fabric=True` also reads every GPU (UUID, tray slot, index) for the fabric manager adapter.
    `compute_fabric`: the InfiniBand/Ethernet fabric above the racks (core.fabric, issue 33), rendered as
    Slurm's tree topology and Kubernetes' fabric tier labels; None: `current_compute_fabric()`.
    Raises ValueError when stored data cannot be expressed (the message names the object).
    """
    if compute_fabric is None:
        compute_fabric = current_compute_fabric()
    rows = read_rows()
    pieces = [_rack_pieces(part) for part in rows.parts]
    if len(_PIECES) > len(pieces) or len(_TIERS) > len(pieces):
        _forget_pieces(rows.parts)
    slugs = _department_slugs(rows)
    tiers = [_rack_tiers(part, rows, slugs) for part in rows.parts]
    nodes = tuple(node for piece in pieces for node in piece.nodes)
    problems = [problem for piece in pieces for problem in piece.problems]
    tenants = _tenants(
        rows,
        _department_guids(
            (part.rack.id, piece.members) for part, piece in zip(rows.parts, pieces, strict=True)
        ),
    )
    offer = mig_offer(nodes)
    kubernetes = KubernetesState(
        inventory=_kubernetes_inventory(rows, (spec for piece in pieces for spec in piece.specs), tiers),
        tenants=tenants,
        nfs_server=rows.tenancy.nfs_server,
        fabric=compute_fabric,
    )
    hosts_of_rack = {part.rack.name: piece.hosts for part, piece in zip(rows.parts, pieces, strict=True)}
    return ConfigState(
        slurm=SlurmState(
            nodes=nodes,
            tiers=_service_tiers(rows, tiers),
            blocks=_slurm_blocks(rows, tiers),
            fabric=compute_fabric,
            racks=tuple((rack, hosts) for rack, hosts in hosts_of_rack.items() if hosts),
        ),
        qos=tuple(q for d in rows.departments for q in department_qos(d.slug, d.guaranteed_gpus, offer)),
        kubernetes=kubernetes,
        tenants=tenants,
        fabric=_fabric_racks(rows) if fabric else None,
        associations=tuple(SlurmAssociation(account, user) for account, user in rows.submitters),
        problems=tuple(problems),
    )


@dataclass(frozen=True)
class RackSlice:
    """The part of the desired state that belongs to some racks (issue 32: a one-rack change pushes that
    rack's slice, not the fleet's): their Kubernetes nodes and partitions, and their fabric partitions.

    What a slice holds equals that racks' part of the whole state (`build_state`): the same rows, read for
    those racks only, through the same helpers (tests/integrations/test_rack_slices.py). Nothing fleet-wide
    is in it (Slurm's whole files, tenants, accounts): those are rendered from the whole state."""

    racks: tuple[str, ...]
    inventory: InventoryState
    compute_fabric: Fabric
    fabric: tuple[FabricRack, ...] | None = None


def rack_slice(
    rack_names: Iterable[str], *, fabric: bool = False, compute_fabric: Fabric | None = None
) -> RackSlice:
    """Read the slice of `rack_names` (a fixed number of queries, each bounded by those racks' rows).
    `fabric=True` also reads their GPUs for the fabric manager; `compute_fabric` as for `build_state`."""
    names = tuple(sorted(set(rack_names)))
    if compute_fabric is None:
        compute_fabric = current_compute_fabric()
    rows = read_rows(names)
    return RackSlice(
        racks=tuple(r.name for r in rows.racks),
        inventory=_kubernetes_inventory(rows),
        compute_fabric=compute_fabric,
        fabric=_fabric_racks(rows, names) if fabric else None,
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


def slurm_files(
    state: ConfigState, *, topology_format: str = FORMAT_CONF, **node_overrides: Any
) -> dict[str, str]:
    """`rackplane.conf` and `topology.conf` (Slurm 24.11 topology/block) or `topology.yaml` (25.05+: the
    blocks and the compute fabric's tree): integrations.slurm.target.render_files. ValueError if not
    expressible."""
    return render_slurm_files(state.slurm, slurm_nodes(state, **node_overrides), topology_format)


def kubernetes_objects(state: ConfigState) -> list[dict[str, Any]]:
    k = state.kubernetes
    return desired_objects(
        k.inventory,
        k.tenants,
        nfs_server=k.nfs_server,
        cohort=k.cohort,
        flavor=k.flavor,
        fabric=k.fabric,
        nodes=_node_objects(k),
    )


# Rack name -> (what its node objects were made from, the NodeSpecs, the objects): `_node_objects`.
_NODE_OBJECTS: dict[str, tuple[tuple, tuple[NodeSpec, ...], list[dict[str, Any]]]] = {}


def _node_objects(k: KubernetesState) -> list[dict[str, Any]]:
    """`node_objects(k.inventory, k.flavor, k.fabric)`, made rack by rack: a rack's objects are made again
    only when its NodeSpecs are not the same objects (kept per rack, `_rack_pieces`) or its rack, partitions,
    pool or fabric labels differ. The objects are shared between renders: nothing may change them."""
    inventory = k.inventory
    fabric = k.fabric or Fabric()
    nodes_of: dict[str, list[NodeSpec]] = defaultdict(list)
    for node in inventory.nodes:
        nodes_of[node.rack].append(node)
    partitions_of: dict[str, list[PartitionSpec]] = defaultdict(list)
    for partition in inventory.partitions:
        partitions_of[partition.rack].append(partition)
    objects: list[dict[str, Any]] = []
    for rack in inventory.racks:
        nodes = nodes_of.get(rack.name, [])
        partitions = tuple(partitions_of.get(rack.name, ()))
        key = (rack, partitions, k.flavor, tuple(fabric_labels(fabric, rack.name).items()))
        kept = _NODE_OBJECTS.get(rack.name)
        if (
            kept is not None
            and kept[0] == key
            and len(kept[1]) == len(nodes)
            and all(a is b for a, b in zip(kept[1], nodes, strict=True))
        ):
            made = kept[2]
        else:
            alone = InventoryState((rack,), partitions, tuple(nodes))
            made = node_objects(alone, pool=k.flavor, fabric=fabric)
            _NODE_OBJECTS[rack.name] = (key, tuple(nodes), made)
        objects += made
    if len(_NODE_OBJECTS) > len(inventory.racks):
        there = {rack.name for rack in inventory.racks}
        for name in [name for name in list(_NODE_OBJECTS) if name not in there]:
            _NODE_OBJECTS.pop(name, None)
    objects.sort(key=lambda obj: obj["metadata"]["name"])
    return objects


def kubernetes_rack_objects(part: RackSlice, flavor: str = DEFAULT_FLAVOR) -> list[dict[str, Any]]:
    """The slice's own Kubernetes objects: its nodes' label patches and its partitions' ResourceFlavors
    (labelled with their rack), as `desired_objects` renders them for the whole fleet."""
    objects = node_objects(part.inventory, pool=flavor, fabric=part.compute_fabric)
    objects += partition_flavors(part.inventory)
    return sort_for_apply(objects)


if yaml.__with_libyaml__:

    class _FastDumper(yaml.CSafeDumper):
        """`kubernetes.tenants.to_yaml` with libyaml's emitter: byte-identical output (tested), about six
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


class YamlFragments:
    """The YAML of runs of objects, kept by their content (issue 32: a file of 10,000 racks' nodes is rendered
    again from the racks that changed, the others' text reused). A run's key is the sha256 of its JSON in
    its own key order (YAML keeps that order too), so equal objects always give the text they gave before.
    Least recently used runs go once the kept text passes `max_bytes`. Thread-safe (gunicorn threads)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._kept: OrderedDict[bytes, str] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        # id(first object) -> (the run's objects, its key): a run made of the very objects of an earlier run
        # (renderers that keep their objects: integrations.state._node_objects) is not encoded again. The
        # objects are held, so their ids cannot be reused; renderers never change an object they returned.
        self._identity: dict[int, tuple[tuple[dict[str, Any], ...], bytes]] = {}

    def _key_by_identity(self, objects: list[dict[str, Any]]) -> bytes | None:
        if not objects:
            return None
        with self._lock:
            known = self._identity.get(id(objects[0]))
        if known is None or len(known[0]) != len(objects):
            return None
        if all(a is b for a, b in zip(known[0], objects, strict=True)):
            return known[1]
        return None

    def text(self, objects: list[dict[str, Any]]) -> str:
        key = self._key_by_identity(objects)
        if key is None:
            key = hashlib.sha256(json.dumps(objects, separators=(",", ":")).encode()).digest()
            if objects:
                with self._lock:
                    self._identity[id(objects[0])] = (tuple(objects), key)
        with self._lock:
            text = self._kept.get(key)
            if text is not None:
                self._kept.move_to_end(key)
                self.hits += 1
                return text
        text = _to_yaml(objects)
        with self._lock:
            self.misses += 1
            if key not in self._kept:
                self._kept[key] = text
                self._bytes += len(text)
            while self._bytes > self.max_bytes and self._kept:
                self._bytes -= len(self._kept.popitem(last=False)[1])
            if len(self._identity) > 4 * max(len(self._kept), 1024):  # runs no render makes any more
                self._identity.clear()
        return text

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._identity.clear()
            self._bytes = 0
            self.hits = self.misses = 0


# A process's kept YAML: twice a 10,000-rack fleet's node and flavor files (~80 MB of text) fit.
FRAGMENTS = YamlFragments(max_bytes=192 * 1024 * 1024)


def rack_runs(objects: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """`objects` cut into runs of consecutive objects of one rack (their RACK_LABEL; objects without one
    make runs of their own): the fragments a file is assembled from, in the file's order."""
    runs: list[list[dict[str, Any]]] = []
    last: object = None
    for obj in objects:
        rack = (obj["metadata"].get("labels") or {}).get(RACK_LABEL)
        if not runs or rack != last:
            runs.append([])
            last = rack
        runs[-1].append(obj)
    return runs


def assembled_yaml(objects: list[dict[str, Any]], fragments: YamlFragments = FRAGMENTS) -> str:
    """`_to_yaml(objects)`, assembled from each rack's run, each kept by content (`YamlFragments`): the same
    text (tests/integrations/test_yaml_fragments.py), rendered again only for the runs that changed."""
    return "".join(fragments.text(run) for run in rack_runs(objects))


def kubernetes_files(objects: list[dict[str, Any]]) -> dict[str, str]:
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for obj in objects:
        by_kind[obj["kind"]].append(obj)
    unknown = sorted(set(by_kind) - set(KUBERNETES_FILES))
    if unknown:
        raise ValueError(f"no file is planned for Kubernetes kind(s) {', '.join(unknown)}")
    return {KUBERNETES_FILES[kind]: assembled_yaml(by_kind[kind]) for kind in KIND_ORDER if by_kind.get(kind)}


def render_files(state: ConfigState, objects: list[dict[str, Any]] | None = None) -> dict[str, str]:
    """Every file of the desired configuration, by path relative to a target directory.

    `slurm/topology.conf`, `slurm/rackplane.conf`, `slurm/topology.yaml` (only with a compute fabric),
    `kubernetes/NN-<kind>s.yaml` (one per kind that has objects), `opensm/partitions.conf`, `nfs/exports`.
    `objects`: the Kubernetes objects if already rendered.
    """
    slurm = slurm_files(state)
    files = {SLURM_TOPOLOGY: slurm[TOPOLOGY_CONF], SLURM_RACKPLANE: slurm[RACKPLANE_CONF]}
    if fabric_tree(state.slurm) is not None:
        # What a Slurm 25.05+ target gets beside it: the NVLink blocks and the fabric's tree, so the wizard's
        # preview and a directory target show the tree change with the fabric (its partitions' Topology=
        # lines are in that target's rackplane.conf: integrations.slurm.target.render_files).
        files[SLURM_TOPOLOGY_YAML] = slurm_files(state, topology_format=FORMAT_YAML)[TOPOLOGY_YAML]
    files.update(kubernetes_files(objects if objects is not None else kubernetes_objects(state)))
    files[OPENSM_PARTITIONS] = _opensm_partitions(state.tenants)
    files[NFS_EXPORTS] = render_nfs_exports(state.tenants)
    if any(t.projects for t in state.tenants):
        files[SLURM_ACCOUNTS] = render_account_script(slurm_accounts(state), state.qos)
    return dict(sorted(files.items()))


_LAST_OPENSM: list[tuple[tuple[TenantSpec, ...], str]] = []


def _opensm_partitions(tenants: tuple[TenantSpec, ...]) -> str:
    """`render_opensm_partitions(tenants)`, the last text given again for the same (frozen) specs."""
    last = _LAST_OPENSM[-1] if _LAST_OPENSM else None
    if (
        last is not None
        and len(last[0]) == len(tenants)
        and all(a is b for a, b in zip(last[0], tenants, strict=True))
    ):
        return last[1]
    text = render_opensm_partitions(tenants)
    _LAST_OPENSM[:] = [(tenants, text)]
    return text


def slurm_accounts(state: ConfigState) -> list[SlurmAccount]:
    """The Slurm account tree: each department's account under root (its GPU limit), each project's
    (`<department>--<project>`, tenancy.Project.account) under its department's (the project's limit); both
    allow only the department's two QOS (`department_qos`) and default to its own, so Slurm holds the
    department's in-quota jobs at its guarantee and all of its jobs at its limit (the account's GrpTRES).
    Each account's fairshare is its guarantee in GPUs (at least 1): Slurm's priority then weighs usage
    against the guarantees, as Rackplane's engine does; the cap is the limit, so borrowing stays possible.
    Jobs of a project run under its account (integrations.slurm.jobs). Names: tenancy.naming."""
    accounts = []
    offer = mig_offer(state.slurm.nodes)
    for t in state.tenants:
        department = naming.department_account(t.slug)
        qos = (naming.department_qos(t.slug), naming.department_borrowed_qos(t.slug))
        limit, typed = slurm_gpu_limits(t.limit_gpus, offer)
        accounts.append(SlurmAccount(department, "root", limit, qos, max(t.guaranteed_gpus, 1), typed))
        for p in t.projects:
            limit, typed = slurm_gpu_limits(p.limit_gpus, offer)
            accounts.append(
                SlurmAccount(
                    naming.project_account(t.slug, p.slug),
                    department,
                    limit,
                    qos,
                    max(p.guaranteed_gpus, 1),
                    typed,
                )
            )
    return accounts


def fabric_racks(state: ConfigState | RackSlice) -> list[dict[str, Any]]:
    """The fabric payload: per rack, its partitions with their GPUs (JSON-ready); of a slice, its racks'."""
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


def forget_kept(*, rows: bool = True) -> None:
    """Drop everything this process keeps between renders (the rows, each rack's pieces and node objects,
    the tenant specs, the last OpenSM text and tree, the YAML and file pieces): the next render is cold.
    `rows=False` keeps the rows (integrations.kept_rows): the next render makes every piece again from
    them."""
    if rows:
        kept_rows.forget()
    _PIECES.clear()
    _TIERS.clear()
    _NODE_OBJECTS.clear()
    _TENANTS.clear()
    with _GUIDS_LOCK:
        _GUIDS.clear()
        _COUNTED.clear()
    _LAST_OPENSM.clear()
    _rack_spec.cache_clear()
    _partition_spec.cache_clear()
    FRAGMENTS.clear()
    forget_tree()
    forget_flavors()
    contents.forget_cuts()


_settled = [0]  # the number of kept cold reads the last `settle` saw


def settle() -> None:
    """After a render that read every rack again and kept it (integrations.kept_rows: the first render of a
    process, a rack added or deleted): collect once, then move every object left (the kept rows, their
    pieces, node objects and YAML, and whatever else lives) out of the cyclic collector's reach
    (`gc.freeze`). At 10,000 racks the kept render state is ~1.7 million objects, and a full collection
    walking them took ~0.7 s of most one-rack re-carves. Frozen objects are still freed when nothing refers
    to them (a rack's rows when the rack changes); only a reference cycle among them would stay, which the
    kept state does not make. Nothing to do on SQLite (nothing is kept)."""
    cold = kept_rows.cold_reads_kept()
    if cold != _settled[0]:
        _settled[0] = cold
        gc.collect()
        gc.freeze()


_pause_lock = threading.Lock()
_pauses = [0, False]  # renders under way, whether the collector was on before the first


@contextlib.contextmanager
def collector_paused():
    """No cyclic garbage collection while a render runs (its temporaries, a few hundred thousand objects at
    10,000 racks, are freed by reference counting when it ends; collections in between walked them for
    nothing, ~0.3 s a re-carve). Nested and threaded renders share one pause; the collector is turned back
    on, if it was on, when the last ends."""
    with _pause_lock:
        if _pauses[0] == 0:
            _pauses[1] = gc.isenabled()
            gc.disable()
        _pauses[0] += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses[0] -= 1
            if _pauses[0] == 0 and _pauses[1]:
                gc.enable()


def render_current() -> dict[str, str]:
    """`render_files(build_state())`: what a directory target would hold for the database as it is now
    (inside a transaction: as that transaction sees it, e.g. a plan preview's savepoint)."""
    return render_files(build_state())
