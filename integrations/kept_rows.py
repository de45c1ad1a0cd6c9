"""The rows the configuration render reads (integrations.state.build_state), and the copy a process keeps of
them between renders (issue 32: at 10,000 racks a render read 180,000 trays, ~2 s of database and decoding,
for a one-rack re-carve that changed 18 of them).

**Kept, on PostgreSQL**: triggers (migration integrations 0011) log in `integrations_renderchange` the racks
every transaction changed a rendered row of (`RENDER_COLUMNS`: racks, partitions, dedications, trays, a GPU
moving tray, allocations, a job starting or stopping holding GPUs), whatever made the change. A process keeps
each rack's rows (`RackRows`) with the snapshot they were read under (`Mark`); the next read asks, in one
query, which racks transactions that snapshot did not see changed, and reads those racks again with the
same queries limited to them. Rack 0 in the log (a rack inserted, deleted or renamed; a truncate), another
server or database, or the log pruned past the mark: every rack is read (cold). A read made while its own
transaction has changed rendered rows (a wizard preview inside its savepoint) uses them but is not kept:
what it saw may be rolled back. The tenancy rows (departments, projects, people, settings: small) are read
every time. Exact, never a heuristic on counts or times: tests/integrations/test_kept_rows.py compares every
kept read with a cold one after changes of every watched kind, in the same and in other transactions.

SQLite (the embedded default) has no triggers: every read is cold.
"""

from __future__ import annotations

import functools
import threading
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.db.models import Prefetch

from core import change_logs, posix
from core.access import Role
from core.change_logs import database_key
from inventory.mig_layouts import MigLayout
from inventory.mig_layouts import layout as mig_layout
from inventory.models import ComputeTray, NVLinkPartition, Rack
from scheduling.choices import HOLDING_STATES
from scheduling.models import Allocation
from tenancy import naming
from tenancy.models import Department, Membership, PosixAccount, Project, ProjectMembership, TenancySettings

LOG = "integrations_renderchange"  # (xid, rack): rack 0 is every rack; (0, N) the pruning horizon
# Log rows: past this many a read, or the beat (`prune`), deletes the ones every snapshot since has seen.
# A pass logs the racks it placed or ended work on (~100 rows); a copy kept from before a prune reads cold,
# so the bound is high: ~8 MB of log, hours of passes between two prunes.
PRUNE_AT = 200_000
# Table -> the columns of it the render reads (migration integrations 0011's triggers watch exactly these;
# tests/integrations/test_kept_rows.py compares both with the installed triggers and with the queries).
RENDER_COLUMNS: dict[str, tuple[str, ...]] = {
    "inventory_rack": ("name", "cluster_uuid"),
    "inventory_nvlinkpartition": ("rack_id", "clique_id", "name", "service_tier"),
    "tenancy_dedicatedpartition": ("partition_id", "department_id"),
    "inventory_computetray": (
        "hostname",
        "rack_id",
        "slot",
        "partition_id",
        "ib_port_guids",
        "mig_layout",
        "mig_layout_devices",
    ),
    "inventory_gpu": ("tray_id",),
    "scheduling_allocation": ("job_id", "gpu_id"),
    "scheduling_job": ("state", "department_id"),
}


@dataclass(frozen=True, slots=True)
class _RackRow:
    id: int
    name: str
    cluster_uuid: Any


@dataclass(frozen=True, slots=True)
class _PartitionRow:
    id: int
    rack_id: int
    name: str
    clique_id: int
    owner_id: int | None  # the department it is dedicated to
    service_tier: str


@dataclass(frozen=True, slots=True)
class _TrayRow:
    id: int
    rack_id: int
    slot: int
    hostname: str
    partition_id: int | None
    port_guids: Any
    mig_layout_name: str = ""
    mig_layout_devices: Any = None

    @property
    def mig_layout(self) -> MigLayout | None:
        """The MIG layout chosen for the tray (ComputeTray.mig_layout), None when none was."""
        if not self.mig_layout_name:
            return None
        return mig_layout(self.mig_layout_name, self.mig_layout_devices or {})


@dataclass(frozen=True)
class _Rows:
    """What `build_state` reads from the database, with the lookups every step shares."""

    racks: list[_RackRow]
    partitions: list[_PartitionRow]
    trays: list[_TrayRow]  # in rack name, slot order
    departments: list[Department]
    running: set[tuple[int, int]]  # (department, tray) of every job holding GPUs
    tenancy: TenancySettings
    submitters: tuple[tuple[str, str], ...] = ()  # (Slurm account, login name): _submitters
    parts: tuple[RackRows, ...] = ()  # the same rows by rack (read_rows): what per-rack work is kept by

    @functools.cached_property
    def rack_name(self) -> dict[int, str]:
        return {r.id: r.name for r in self.racks}

    @functools.cached_property
    def partition_by_id(self) -> dict[int, _PartitionRow]:
        return {p.id: p for p in self.partitions}

    @functools.cached_property
    def department_slug(self) -> dict[int, str]:
        return {d.pk: d.slug for d in self.departments}

    def owner_of_tray(self, tray: _TrayRow) -> int | None:
        """The department owning the tray's partition (dedicated), else None."""
        return self.partition_by_id[tray.partition_id].owner_id if tray.partition_id is not None else None

    def owner_slug(self, partition: _PartitionRow) -> str | None:
        return self.department_slug[partition.owner_id] if partition.owner_id is not None else None


@dataclass(frozen=True)
class RackRows:
    """One rack's rendered rows: the rack, its partitions, its trays (slot order) and the (department, tray)
    pairs of the jobs holding GPUs there."""

    rack: _RackRow
    partitions: tuple[_PartitionRow, ...]
    trays: tuple[_TrayRow, ...]
    running: frozenset[tuple[int, int]]


def _inventory(
    rack_ids: Iterable[int] | None = None, rack_names: Iterable[str] | None = None
) -> list[RackRows]:
    """The racks' rows, in rack name order: every rack's, or those of `rack_ids` or `rack_names`. Four
    queries, whatever the number of racks."""
    rack_rows, partition_rows, tray_rows = (
        Rack.objects.all(),
        NVLinkPartition.objects.all(),
        ComputeTray.objects.all(),
    )
    allocations = Allocation.objects.filter(job__state__in=HOLDING_STATES, gpu__tray__isnull=False)
    if rack_ids is not None or rack_names is not None:
        field, values = ("id", rack_ids) if rack_ids is not None else ("name", rack_names)
        among = sorted(set(values or ()))
        rack_rows = rack_rows.filter(**{f"{field}__in": among})
        partition_rows = partition_rows.filter(**{f"rack__{field}__in": among})
        tray_rows = tray_rows.filter(**{f"rack__{field}__in": among})
        allocations = allocations.filter(**{f"gpu__tray__rack__{field}__in": among})
    racks = [_RackRow(*row) for row in rack_rows.order_by("name").values_list("id", "name", "cluster_uuid")]
    partitions: dict[int, list[_PartitionRow]] = defaultdict(list)
    for row in partition_rows.values_list(
        "id", "rack_id", "name", "clique_id", "dedication__department_id", "service_tier"
    ):
        partitions[row[1]].append(_PartitionRow(*row))
    trays: dict[int, list[_TrayRow]] = defaultdict(list)
    for row in tray_rows.values_list(
        "id",
        "rack_id",
        "slot",
        "hostname",
        "partition_id",
        "ib_port_guids",
        "mig_layout",
        "mig_layout_devices",
    ):
        trays[row[1]].append(_TrayRow(*row))
    running: dict[int, set[tuple[int, int]]] = defaultdict(set)
    for department_id, tray_id, rack_id in allocations.values_list(
        "job__department_id", "gpu__tray_id", "gpu__tray__rack_id"
    ).distinct():
        running[rack_id].add((department_id, tray_id))
    return [
        RackRows(
            r,
            tuple(sorted(partitions.get(r.id, ()), key=lambda p: p.id)),
            tuple(sorted(trays.get(r.id, ()), key=lambda t: t.slot)),
            frozenset(running.get(r.id, ())),
        )
        for r in racks
    ]


def _rows(parts: list[RackRows], *, submitters: bool = True) -> _Rows:
    """The render's rows from the racks' (in rack name order) and the tenancy tables, read now."""
    departments = list(
        Department.objects.order_by("slug").prefetch_related(
            Prefetch("projects", queryset=Project.objects.named().order_by("slug"))
        )
    )
    running: set[tuple[int, int]] = set()
    for part in parts:
        running |= part.running
    return _Rows(
        [part.rack for part in parts],
        [p for part in parts for p in part.partitions],
        [t for part in parts for t in part.trays],
        departments,
        running,
        TenancySettings.load(),
        _submitters(departments) if submitters else (),
        tuple(parts),
    )


def read_rows(rack_names: Iterable[str] | None = None) -> _Rows:
    """The render's rows as the database holds them now: a rack slice's (`rack_names`: those racks' only, no
    accounts: who may submit is the whole state's), or the whole state's, through the copy this process
    keeps when it can be checked (`kept_parts`)."""
    if rack_names is not None:
        return _rows(_inventory(rack_names=rack_names), submitters=False)
    return _rows(kept_parts())


# --- PostgreSQL: kept between reads ------------------------------------------------------------------


@dataclass(frozen=True)
class Mark:
    """What kept rows were read under."""

    snapshot: str  # txid_current_snapshot() before the first query of the read
    xmin: int  # its oldest transaction still running: every older one had ended
    own: int | None  # the reading transaction's id, if it had one (its later changes are read again)
    server: tuple  # the server's start and the database's oid: another server or a restore is another history


@dataclass(frozen=True)
class Kept:
    mark: Mark
    parts: dict[int, RackRows]  # by rack id
    order: tuple[int, ...]  # rack ids in rack name order
    racks_read: int = field(default=0, compare=False)  # how many racks the read that made it read


_kept: dict[tuple, Kept] = {}
_lock = threading.Lock()
_cold_kept = 0  # how many times this process kept a cold read (integrations.state.settle)


def _database() -> tuple:
    return database_key()


def has_log() -> bool:
    """Whether the database in use logs rendered changes (PostgreSQL with migration integrations 0011)."""
    return change_logs.has_log(LOG)


def kept() -> Kept | None:
    """The rows this process keeps for the database in use (tests and the benchmark)."""
    with _lock:
        return _kept.get(_database())


def cold_reads_kept() -> int:
    """How many cold reads this process has kept (each one a new copy of every rack's rows)."""
    return _cold_kept


def forget() -> None:
    """Drop every kept copy in this process (the next read is cold)."""
    with _lock:
        _kept.clear()


# One query: where a read starts (a new mark), the log's horizon, whether this transaction has logged
# changes, the log's size (bounded), and the racks changed since the kept mark: by transactions its snapshot
# did not see, and by its own transaction (all of them: a snapshot counts its own transaction as seen).
_CHECK = f"""
SELECT
    txid_current_snapshot()::text,
    txid_current_if_assigned(),
    pg_postmaster_start_time()::text,
    (SELECT oid::bigint FROM pg_database WHERE datname = current_database()),
    COALESCE((SELECT max(rack_id) FROM {LOG} WHERE xid = 0), 0),
    EXISTS (SELECT 1 FROM {LOG} WHERE xid = txid_current_if_assigned()),
    (SELECT count(*) FROM (SELECT 1 FROM {LOG} LIMIT {PRUNE_AT + 1}) AS logged),
    ARRAY(
        SELECT DISTINCT rack_id FROM {LOG}
        WHERE xid > 0 AND (
            (xid >= %(xmin)s AND NOT txid_visible_in_snapshot(xid, %(snapshot)s::txid_snapshot))
            OR xid = %(own)s::bigint
        )
    )
"""


def _check(mark: Mark | None) -> tuple[Mark, int, bool, int, set[int]]:
    with connection.cursor() as cursor:
        cursor.execute(
            _CHECK,
            {
                "xmin": mark.xmin if mark else 2**62,  # no mark: no rack to name (the read is cold)
                "snapshot": mark.snapshot if mark else "1:1:",
                "own": mark.own if mark else None,
            },
        )
        snapshot, own, started, oid, horizon, own_logged, logged, racks = cursor.fetchone()
    now = Mark(snapshot, int(snapshot.split(":", 1)[0]), own, (started, oid))
    return now, int(horizon), bool(own_logged), int(logged), set(racks)


def prune() -> int:
    """Delete the log rows every snapshot has seen when the log holds more than PRUNE_AT (the beat, every
    minute: a site that seldom renders would otherwise grow it with every pass). Returns how many went."""
    if not has_log():
        return 0
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM (SELECT 1 FROM {LOG} LIMIT {PRUNE_AT + 1}) AS logged")
        if cursor.fetchone()[0] <= PRUNE_AT:
            return 0
        cursor.execute("SELECT txid_current_snapshot()::text")
        xmin = int(cursor.fetchone()[0].split(":", 1)[0])
    return _prune_below(xmin)


def _prune(mark: Mark) -> None:
    """Delete the log rows every snapshot since `mark`'s has seen; a copy kept from before reads cold."""
    _prune_below(mark.xmin)


def _prune_below(xmin: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {LOG} WHERE xid < %s", [xmin])
        deleted = cursor.rowcount
        cursor.execute(f"INSERT INTO {LOG} (xid, rack_id) VALUES (0, %s) ON CONFLICT DO NOTHING", [xmin])
    return deleted


def kept_parts() -> list[RackRows]:
    """Every rack's rows, in rack name order: the kept copy with the racks changed since read again, or
    every rack read (cold). SQLite: always cold."""
    if not has_log():
        return _inventory()
    key = _database()
    with _lock:
        old = _kept.get(key)
    mark, horizon, own_logged, logged, changed = _check(old.mark if old else None)
    cold = old is None or old.mark.server != mark.server or horizon > old.mark.xmin or 0 in changed
    if cold:
        parts = _inventory()
        new = Kept(mark, {p.rack.id: p for p in parts}, tuple(p.rack.id for p in parts), len(parts))
    else:
        fresh = {p.rack.id: p for p in _inventory(rack_ids=changed)} if changed else {}
        if any(rack not in old.parts for rack in fresh):  # a rack the copy does not know (never expected)
            cold = True
            parts = _inventory()
            new = Kept(mark, {p.rack.id: p for p in parts}, tuple(p.rack.id for p in parts), len(parts))
        else:
            gone = changed - set(fresh)  # deleted racks log rack 0 too: a rack's rows left with it
            merged = {**old.parts, **fresh}
            for rack in gone:
                merged.pop(rack, None)
            order = tuple(rack for rack in old.order if rack in merged)
            new = Kept(mark, merged, order, len(fresh))
    if not own_logged:  # what this read saw of its own transaction's changes may still be rolled back
        if logged > PRUNE_AT:
            _prune(mark)
        global _cold_kept
        with _lock:
            _kept[key] = new
            if cold:
                _cold_kept += 1
    return [new.parts[rack] for rack in new.order]


def _submitters(departments: list[Department]) -> tuple[tuple[str, str], ...]:
    """(Slurm account, login name) of everyone who may submit under each account, as the portal decides
    (core.access, scheduling.services.admission.submittable_departments): under a department's account its
    members (any role) and the platform admins; under a project's account (`may_use_project`) its members who
    are still members of its department, the department's leads and the platform admins. Only active people
    with a usable POSIX account count: a Slurm job runs as its person's login name, and someone without one
    never submits to Slurm. Three queries, whatever the number of people."""
    people = {
        user_id: (name, staff or superuser)
        for user_id, name, staff, superuser in PosixAccount.objects.filter(user__is_active=True).values_list(
            "user_id", "name", "user__is_staff", "user__is_superuser"
        )
        if posix.name_problem(name) is None
    }
    admins = sorted(name for name, staff in people.values() if staff)
    members: dict[int, dict[int, str]] = defaultdict(dict)  # department -> user -> role
    for department_id, user_id, role in Membership.objects.values_list("department_id", "user_id", "role"):
        if user_id in people:
            members[department_id][user_id] = role
    in_project: dict[int, set[int]] = defaultdict(set)
    for project_id, user_id in ProjectMembership.objects.values_list("project_id", "user_id"):
        in_project[project_id].add(user_id)
    pairs: set[tuple[str, str]] = set()
    for d in departments:
        account = naming.department_account(d.slug)
        pairs.update((account, name) for name in admins)
        pairs.update((account, people[u][0]) for u in members[d.pk])
        for p in d.projects.all():
            project = naming.project_account(d.slug, p.slug)
            pairs.update((project, name) for name in admins)
            pairs.update(
                (project, people[u][0])
                for u, role in members[d.pk].items()
                if role == Role.LEAD or u in in_project[p.pk]
            )
    return tuple(sorted(pairs))
