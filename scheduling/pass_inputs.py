"""The scheduling pass's inputs from the database: the engine's Cluster with the running jobs' GPUs on it,
and which GPUs of each tray are free.

A cold read is a fixed handful of queries whatever the number of racks or jobs (the trays in cluster order,
their schedulable GPUs, the few unsettled trays, the running jobs' allocations), and builds the engine's
indexes. At 1,000 racks that is 18,000 trays and 72,000 GPUs: ~0.5 s, more than a whole pass may take. So
on PostgreSQL a process keeps the cluster it built and, at the next pass, checks it with one query and
brings it up to date:

* **the inventory** (racks, trays, GPUs, NVLink partitions, dedications, department slugs): triggers
  (migration scheduling 0010) log the id of every transaction that changes a column the cluster is built
  from (`CACHED_COLUMNS`), whatever made the change (a save, a bulk update, raw SQL, the admin). A kept
  cluster remembers the snapshot its inventory was read under; a logged transaction that snapshot did not
  see, or the log pruned past it, means a cold read. Exact: never a heuristic on counts or times.
* **the running jobs' GPUs** change at every pass: allocations are made by passes only (one at a time) and
  deleted with their job's end or preemption. The running jobs are read every pass anyway (the engine needs
  them); a job that is new, or placed again since (``placed_at``), has its allocations read (one query for
  all of them), a job that left is released. Then the kept allocations must match the table's row count and
  highest id (the same query as the inventory check), else a cold read.

The engine changes the cluster it is given (starts, preemptions, held trays). After the pass `keep` puts it
back as it was read, by the difference of its jobs, so the next pass starts from the database's state
whether this one committed or rolled back; its own allocations arrive through the second point above.
Whatever the cache believes, Allocation's unique GPU constraint still refuses a GPU given twice.

SQLite (the embedded default) has no triggers: every pass reads cold.

`gather` reads everything a pass decides from (departments, projects, running and pending jobs, the cluster
with the silent trays held out) and `PassInputs.engine_args` turns it into the engine's inputs. The pass
(scheduling.services) and the job form's dry run (scheduling.preview) both read through it, so the dry run
cannot drift from the pass.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection
from django.db.models import FloatField, Func
from django.db.models.functions import Coalesce
from django.utils import timezone

from core.hardware import GPUS_PER_TRAY
from inventory.models import ComputeTray, Gpu
from inventory.selectors import unsettled_fabric_trays
from inventory.services import silent_policy, silent_tray_pks
from scheduling.choices import HOLDING_STATES, JobState
from scheduling.engine.cluster import Cluster, TraySpec
from scheduling.engine.scheduler import Department as EngineDepartment
from scheduling.engine.scheduler import PendingJob, RunningJob
from scheduling.engine.scheduler import Project as EngineProject
from scheduling.models import Allocation, Job
from tenancy.models import Department, Project
from tenancy.services import schedulable_gpus_q

# Table -> the columns the cluster is built from; the triggers of migration scheduling 0010 watch exactly
# these (tests/scheduling/test_pass_cache.py compares both with the SQL of the queries below).
CACHED_COLUMNS: dict[str, tuple[str, ...]] = {
    "inventory_rack": ("name",),
    "inventory_computetray": ("hostname", "rack_id", "slot", "partition_id", "state", "fabric_problems"),
    "inventory_gpu": ("tray_id", "index", "health", "fabric_state", "reported_clique_id"),
    "inventory_nvlinkpartition": ("rack_id", "clique_id", "name", "degraded_reason"),
    "tenancy_dedicatedpartition": ("partition_id", "department_id"),
    "tenancy_department": ("slug",),
}
# Allocations changed in place (never by a pass: the admin) are logged too; made and deleted ones are not.
ALLOCATION_COLUMNS: dict[str, tuple[str, ...]] = {"scheduling_allocation": ("job_id", "gpu_id")}
CHANGE_LOG = "scheduling_inventorychange"
PRUNE_AT = 1000  # log rows: a cold read past this many deletes the ones every snapshot since has seen


@dataclass(frozen=True)
class _Mark:
    """What a kept cluster's inventory was read under (PostgreSQL)."""

    snapshot: str  # txid_current_snapshot() before the first inventory query
    xmin: int  # its oldest transaction still running: every older one had ended
    own: int | None  # the reading transaction's id, if it had one
    own_seq: int | None  # its last change to the inventory before the read (a test, a seed), if any
    postmaster: datetime  # the server's start: another server, or a restore, is another history


@dataclass
class _Held:
    """A running job's GPUs as the cluster has them."""

    placed: object  # its version (when it was placed): a job placed again has new allocations
    placement: tuple[tuple[int, int], ...]  # (tray index, GPUs) on the cluster's trays
    unschedulable: tuple[tuple[int, int], ...]  # (tray index, GPUs it holds there that are not schedulable)
    gpus: tuple[int, ...]  # its allocated GPUs (pks), on any tray
    last: int  # its highest allocation id


@dataclass
class ClusterState:
    """The cluster and what it was built from. `cluster` holds exactly the `held` placements."""

    cluster: Cluster
    tray_pk: list[int]  # tray index -> ComputeTray pk
    tray_index: dict[int, int]  # ComputeTray pk -> tray index
    tray_gpus: list[tuple[int, ...]]  # tray index -> its schedulable GPUs (pks) in index order
    gpu_tray: dict[int, int]  # schedulable GPU (tray up, GPU not unhealthy) -> its tray's index
    held_unschedulable: list[int]  # tray index -> GPUs running jobs hold there that are not schedulable
    held: dict[int, _Held]
    allocated: set[int] = field(default_factory=set)  # the GPUs the held jobs hold
    mark: _Mark | None = None  # None: not kept (SQLite, or the log is missing)
    cold: bool = True  # built by this pass (not kept from an earlier one)
    # The engine's RunningJob of each running job, with the row it was made from (scheduling.services).
    running_jobs: dict = field(default_factory=dict)
    # The allocations this process's last pass made: job -> (placed, placement, GPUs, highest id). The next
    # pass takes a new job's from here when it was placed then (else it reads them).
    recorded: dict = field(default_factory=dict)
    # Set by `read`, for `keep`: the cluster as the pass found it.
    jobs_before: dict = field(default_factory=dict)
    free_before: int = 0
    cap_before: list[int] = field(default_factory=list)
    settled_before: list[bool] = field(default_factory=list)
    # Trays whose node stopped reporting, held out of this pass (node silent rule): index -> capacity before.
    silenced: dict[int, int] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        """Allocation rows of the held jobs."""
        return len(self.allocated)

    def capacity(self, t: int) -> int:
        """GPUs a job may hold on tray t: the schedulable ones and those running jobs hold anyway."""
        return min(GPUS_PER_TRAY, len(self.tray_gpus[t]) + self.held_unschedulable[t])

    def record(self, placed, allocations: list[tuple[int, int, int]], last: dict[int, int]) -> None:
        """Note the allocations a pass made ((job, GPU, tray index) each; `last`: each job's highest
        allocation id) at `placed` (the jobs' version, as the next pass will read it)."""
        jobs: dict[int, tuple[dict, list]] = {}
        for job_id, gpu_id, t in allocations:
            trays, gpus = jobs.setdefault(job_id, ({}, []))
            trays[t] = trays.get(t, 0) + 1
            gpus.append(gpu_id)
        self.recorded = {
            job_id: (placed, tuple(sorted(trays.items())), (), tuple(gpus), last[job_id])
            for job_id, (trays, gpus) in jobs.items()
        }

    def free_gpus(self, trays, freed: set[int]) -> dict[int, list[int]]:
        """Tray index -> its schedulable GPUs that no held job holds (or whose job is in `freed`: the GPUs
        of jobs the pass preempted), in index order."""
        allocated = self.allocated
        return {t: [gpu for gpu in self.tray_gpus[t] if gpu not in allocated or gpu in freed] for t in trays}


_kept: dict[tuple, ClusterState] = {}
_kept_lock = threading.Lock()
_logged: dict[tuple, bool] = {}  # database -> whether its change log exists (checked once per process)


def _database() -> tuple:
    settings = connection.settings_dict
    return (connection.alias, settings.get("NAME"), settings.get("HOST"), settings.get("PORT"))


def forget() -> None:
    """Drop every kept cluster in this process (the next pass reads cold)."""
    with _kept_lock:
        _kept.clear()


def kept() -> ClusterState | None:
    """The cluster this process keeps for the database in use, if any (for tests and the benchmark)."""
    with _kept_lock:
        return _kept.get(_database())


# --- cold read ----------------------------------------------------------------------------------------


def _group(rows, state: ClusterState) -> dict[int, tuple]:
    """Per job: (placement, unschedulable, GPUs, highest allocation id) from allocation rows (job, GPU,
    tray index or None when the GPU is not on the cluster, allocation id)."""
    jobs: dict[int, list] = {}
    for row in rows:
        entry = jobs.get(row[0])
        if entry is None:
            jobs[row[0]] = [row]
        else:
            entry.append(row)
    gpu_tray = state.gpu_tray
    grouped = {}
    for job_id, job_rows in jobs.items():
        placement: dict[int, int] = {}
        off: dict[int, int] = {}
        for _, gpu_id, t, _ in job_rows:
            if t is None:  # a GPU out of any tray, or a tray out of any partition: not on the cluster
                continue
            placement[t] = placement.get(t, 0) + 1
            if gpu_id not in gpu_tray:
                off[t] = off.get(t, 0) + 1
        grouped[job_id] = (
            tuple(sorted(placement.items())),
            tuple(sorted(off.items())),
            tuple(row[1] for row in job_rows),
            max(row[3] for row in job_rows),
        )
    return grouped


def tray_rows():
    """(pk, hostname, rack, partition, dedicated to) of the trays in a partition, in cluster order."""
    return (
        ComputeTray.objects.filter(partition__isnull=False)
        .order_by("rack__name", "partition__clique_id", "slot")
        .values_list(
            "pk", "hostname", "rack__name", "partition__name", "partition__dedication__department__slug"
        )
    )


def schedulable_gpu_rows():
    """(pk, tray pk) of the schedulable GPUs in trays in a partition, by tray and index."""
    return (
        Gpu.objects.filter(schedulable_gpus_q(), tray__partition__isnull=False)
        .order_by("tray_id", "index")
        .values_list("pk", "tray_id")
    )


def unsettled_tray_rows():
    """The pks of the trays whose fabric is unsettled (inventory.selectors: few)."""
    return unsettled_fabric_trays().values_list("pk", flat=True)


# The inventory queries of a cold read: CACHED_COLUMNS must name every column they read.
def degraded_tray_rows():
    """(pk, why) of the trays of NVLink partitions the health rules marked degraded (few): like unsettled
    trays, they take no job spanning trays until the partition recovers (inventory.health)."""
    return (
        ComputeTray.objects.filter(partition__isnull=False)
        .exclude(partition__degraded_reason="")
        .order_by()
        .values_list("pk", "partition__degraded_reason")
    )


INVENTORY_QUERIES = (tray_rows, schedulable_gpu_rows, unsettled_tray_rows, degraded_tray_rows)


def _rows(queryset) -> list[tuple]:
    """A values_list queryset's rows as the driver gives them (tens of thousands of rows, nothing for
    Django to convert)."""
    with connection.cursor() as cursor:
        cursor.execute(*queryset.query.sql_with_params())
        return cursor.fetchall()


def build(placed: dict[int, object], mark: _Mark | None = None) -> ClusterState:
    """Read the cluster cold: trays in rack/partition/slot order, each with the GPUs a job may use (the
    schedulable ones, and the ones a running job holds anyway), and the running jobs' GPUs allocated on it.
    `placed`: when each running job was placed, as the pass read it (its version; any comparable value)."""
    trays = _rows(tray_rows())
    tray_index = {row[0]: t for t, row in enumerate(trays)}
    tray_gpus: list[list[int]] = [[] for _ in trays]
    for gpu_id, tray_id in _rows(schedulable_gpu_rows()):
        t = tray_index.get(tray_id)
        if t is not None:  # else a tray that joined a partition since the trays were read: next pass
            tray_gpus[t].append(gpu_id)
    unsettled = set(unsettled_tray_rows())
    degraded = dict(_rows(degraded_tray_rows()))
    unsettled |= set(degraded)
    state = ClusterState(
        cluster=None,  # type: ignore[arg-type]  (set below)
        tray_pk=[row[0] for row in trays],
        tray_index=tray_index,
        tray_gpus=[tuple(gpus) for gpus in tray_gpus],
        gpu_tray={gpu: t for t, gpus in enumerate(tray_gpus) for gpu in gpus},
        held_unschedulable=[0] * len(trays),
        held={},
        mark=mark,
    )
    allocations = (
        Allocation.objects.filter(job__state__in=HOLDING_STATES)
        .order_by()
        .values_list("job_id", "gpu_id", "gpu__tray_id", "pk")
    )
    jobs = _group(((job, gpu, tray_index.get(tray), pk) for job, gpu, tray, pk in _rows(allocations)), state)
    for _, unschedulable, _, _ in jobs.values():
        for t, n in unschedulable:
            state.held_unschedulable[t] += n
    state.cluster = Cluster(
        TraySpec(hostname, rack, partition, state.capacity(t), owner, pk not in unsettled)
        for t, (pk, hostname, rack, partition, owner) in enumerate(trays)
    )
    for pk, why in degraded.items():
        if (t := tray_index.get(pk)) is not None:
            state.cluster.part_degraded[state.cluster.tray_part[t]] = why
    for job_id, (placement, unschedulable, gpus, last) in jobs.items():
        if placement:
            state.cluster.allocate(job_id, placement)
        state.held[job_id] = _Held(placed.get(job_id), placement, unschedulable, gpus, last)
        state.allocated.update(gpus)
    return state


def load_cluster() -> tuple[Cluster, dict[int, int]]:
    """The cluster read cold, and its tray index by ComputeTray pk (the benchmark's placement part)."""
    state = build({})
    return state.cluster, state.tray_index


# --- PostgreSQL: the change log -------------------------------------------------------------------------


def _has_log() -> bool:
    if connection.vendor != "postgresql":
        return False
    key = _database()
    if key not in _logged:
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [CHANGE_LOG])
            _logged[key] = bool(cursor.fetchone()[0])
    return _logged[key]


def _mark() -> _Mark:
    """Where a cold read starts: taken before its first query, so whatever it reads was committed by then
    or later (never earlier than the snapshot says). Prunes the log now and then."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT txid_current_snapshot()::text, txid_current_if_assigned(), "
            f"(SELECT seq FROM {CHANGE_LOG} WHERE xid = txid_current_if_assigned()), "
            f"pg_postmaster_start_time(), (SELECT count(*) FROM {CHANGE_LOG})"
        )
        snapshot, own, own_seq, postmaster, logged = cursor.fetchone()
        mark = _Mark(snapshot, int(snapshot.split(":", 1)[0]), own, own_seq, postmaster)
        if logged > PRUNE_AT:
            # Every transaction older than this snapshot's oldest running one had ended before it; caches
            # read before the horizon (row xid 0) can no longer be checked and read cold.
            cursor.execute(f"DELETE FROM {CHANGE_LOG} WHERE xid > 0 AND xid < %s", [mark.xmin])
            cursor.execute(
                f"INSERT INTO {CHANGE_LOG} (xid, seq) VALUES (0, %s) ON CONFLICT (xid) "
                f"DO UPDATE SET seq = GREATEST({CHANGE_LOG}.seq, EXCLUDED.seq)",
                [mark.xmin],
            )
    return mark


_CHECK = f"""
SELECT
    pg_postmaster_start_time() = %(postmaster)s
    AND NOT EXISTS (
        SELECT 1 FROM {CHANGE_LOG}
        WHERE xid >= %(xmin)s
          AND NOT txid_visible_in_snapshot(xid, %(snapshot)s::txid_snapshot)
          AND (xid, seq) IS DISTINCT FROM (%(own)s::bigint, %(own_seq)s::bigint)
    )
    AND COALESCE((SELECT seq FROM {CHANGE_LOG} WHERE xid = 0), 0) <= %(xmin)s
    AND (
        %(own_seq)s::bigint IS NULL
        OR (
            EXISTS (SELECT 1 FROM {CHANGE_LOG} WHERE xid = %(own)s::bigint AND seq = %(own_seq)s::bigint)
            AND (
                %(own)s::bigint = txid_current_if_assigned()
                OR txid_status(%(own)s::bigint) = 'committed'
            )
        )
    ),
    (SELECT count(*) FROM scheduling_allocation),
    (SELECT COALESCE(max(id), 0) FROM scheduling_allocation)
"""


def _check(mark: _Mark) -> tuple[bool, int, int]:
    """(the inventory is as `mark` read it, allocation rows, highest allocation id): one query.

    Unchanged means: no transaction the snapshot did not see has changed the inventory since, but the
    reader's own, if its changes before the read are all it made and it committed (or is still this one)."""
    with connection.cursor() as cursor:
        cursor.execute(
            _CHECK,
            {
                "postmaster": mark.postmaster,
                "xmin": mark.xmin,
                "snapshot": mark.snapshot,
                "own": mark.own,
                "own_seq": mark.own_seq,
            },
        )
        unchanged, rows, last = cursor.fetchone()
    return bool(unchanged), rows, last


# --- kept clusters brought up to date -------------------------------------------------------------------


def _set_capacity(state: ClusterState, t: int) -> None:
    state.cluster.set_capacity(t, state.capacity(t))


def _drop(state: ClusterState, job_id: int) -> None:
    held = state.held.pop(job_id)
    if held.placement:
        state.cluster.release(job_id)
    for t, n in held.unschedulable:
        state.held_unschedulable[t] -= n
        _set_capacity(state, t)
    state.allocated.difference_update(held.gpus)


def _add(state: ClusterState, job_id: int, placed, allocation: tuple) -> None:
    placement, unschedulable, gpus, last = allocation
    for t, n in unschedulable:
        state.held_unschedulable[t] += n
        _set_capacity(state, t)
    if placement:
        state.cluster.allocate(job_id, placement)
    state.held[job_id] = _Held(placed, placement, unschedulable, gpus, last)
    state.allocated.update(gpus)


def _catch_up(state: ClusterState, placed: dict[int, object], rows: int, last: int) -> bool:
    """Release the jobs that left or were placed again, allocate the new ones; True when the result has
    the table's allocation rows and highest id (else the caller reads cold)."""
    gone = object()
    for job_id in [j for j, held in state.held.items() if placed.get(j, gone) != held.placed]:
        _drop(state, job_id)
    new = [job_id for job_id in placed if job_id not in state.held]
    recorded, state.recorded = state.recorded, {}
    if recorded:  # placed by this process's last pass, which committed: no need to read them
        known = [job_id for job_id in new if job_id in recorded and recorded[job_id][0] == placed[job_id]]
        for job_id in known:
            _add(state, job_id, placed[job_id], recorded[job_id][1:])
        if known:
            new = [job_id for job_id in new if job_id not in state.held]
    if new:
        # Passes allocate schedulable GPUs of the cluster only: their trays are known. Any other GPU (a
        # job made by hand) is read cold.
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT job_id, gpu_id, id FROM {Allocation._meta.db_table} "
                "WHERE job_id = ANY(%s::bigint[])",
                ["{" + ",".join(map(str, new)) + "}"],
            )
            allocations = cursor.fetchall()
        gpu_tray = state.gpu_tray
        if any(gpu not in gpu_tray for _, gpu, _ in allocations):
            return False
        jobs = _group(((job, gpu, gpu_tray[gpu], pk) for job, gpu, pk in allocations), state)
        for job_id in new:
            _add(state, job_id, placed[job_id], jobs.get(job_id, ((), (), (), 0)))
    highest = max((held.last for held in state.held.values()), default=0)
    return state.rows == rows and highest == last


def read(placed: dict[int, object]) -> ClusterState:
    """The cluster for a pass, with the allocations of the running jobs in `placed` (pk -> when it was
    placed, as the pass read it): the one this process kept, checked and brought up to date, or read cold."""
    key = _database()
    with _kept_lock:
        state = _kept.pop(key, None)
    if state is not None:
        state.cold = False
        try:
            unchanged, rows, last = _check(state.mark)
            if not unchanged or not _catch_up(state, placed, rows, last):
                state = None
        except (ValueError, KeyError):  # the cluster's own checks refused a change (never expected)
            state = None
    if state is None:
        state = build(placed, _mark() if _has_log() else None)
    cluster = state.cluster
    state.jobs_before = dict(cluster.jobs)
    state.free_before = cluster.free_gpus
    state.cap_before = list(cluster.tray_cap)
    state.settled_before = list(cluster.tray_settled)
    return state


def silence(state: ClusterState) -> None:
    """After `read`, for the pass: trays whose node stopped reporting get no new work while an enabled
    node_silent rule says "hold" (inventory.services.silent_policy; computed from last-seen times, never
    written, so no change the kept cluster's check could see): they are held out of the engine's indexes
    for the pass (as a reservation holds trays), which keep() undoes. Jobs there keep running. One query,
    two when the rule holds."""
    policy = silent_policy()
    if not policy.hold:
        return
    cluster = state.cluster
    for pk in silent_tray_pks(policy, timezone.now()):
        t = state.tray_index.get(pk)
        if t is not None:
            state.silenced[t] = cluster.tray_cap[t]
    # Held, not shrunk: GPUs a preemption frees there during the pass must not take new work either.
    cluster.hold(list(state.silenced))


def keep(state: ClusterState) -> None:
    """Put the cluster back as `read` returned it (undoing the engine's starts, preemptions and held trays)
    and keep it for this process's next pass. Not kept when it cannot be (SQLite) or does not come back
    exactly."""
    if state.mark is None:
        return
    cluster = state.cluster
    try:
        silenced, state.silenced = state.silenced, {}
        for t, capacity in silenced.items():
            cluster.set_capacity(t, capacity)
        if True in cluster.tray_held:
            cluster.unhold([t for t, held in enumerate(cluster.tray_held) if held])
        before = state.jobs_before
        for job_id, placement in list(cluster.jobs.items()):
            if before.get(job_id) != placement:
                cluster.release(job_id)
        for job_id, placement in before.items():
            if job_id not in cluster.jobs:
                cluster.allocate(job_id, placement)
    except (ValueError, KeyError):  # the cluster's own checks refused: read cold next time
        return
    if (
        cluster.free_gpus != state.free_before
        or cluster.tray_cap != state.cap_before
        or cluster.tray_settled != state.settled_before
    ):
        return
    with _kept_lock:
        _kept[_database()] = state


# --- the rest of the pass's inputs: departments, projects, running and pending jobs ----------------------


def epoch(value) -> float:
    """A timestamp in seconds since 1970 (now when None)."""
    return value.timestamp() if value is not None else time.time()


# The columns a pass reads of the pending jobs (the engine's PendingJob).
PENDING_COLUMNS = (
    "pk",
    "department_id",
    "gpus",
    "topology",
    "priority_class",
    "created_at",
    "time_limit_minutes",
    "pending_reason",
    "fallback_topology",
    "fallback_after_minutes",
    "project_id",
)


def project_rows() -> list[tuple]:
    """Every project as the engine reads it: (pk, department, slug, guarantee, weight, limit); one query."""
    return list(
        Project.objects.order_by("pk").values_list(
            "pk", "department_id", "slug", "guaranteed_gpus", "over_quota_weight", "limit_gpus"
        )
    )


def project_slugs(projects: list[tuple] | None = None) -> dict[int, str]:
    return {row[0]: row[2] for row in (project_rows() if projects is None else projects)}


def engine_departments(
    departments: list[Department], projects: list[tuple] | None = None
) -> list[EngineDepartment]:
    """The engine's departments, each with its projects (`project_rows`; read when not given)."""
    by_department: dict[int, list[EngineProject]] = {}
    for _, department_id, slug, guaranteed, weight, limit in project_rows() if projects is None else projects:
        by_department.setdefault(department_id, []).append(
            EngineProject(slug, guaranteed, float(weight), limit)
        )
    return [
        EngineDepartment(
            d.slug,
            d.guaranteed_gpus,
            float(d.over_quota_weight),
            d.limit_gpus,
            d.priority,
            tuple(by_department.get(d.pk, ())),
        )
        for d in departments
    ]


class _Seconds(Func):
    """A timestamp as seconds since 1970 (a float), computed by PostgreSQL: parsing thousands of
    timestamps into datetimes costs more than reading the rest of the running jobs' rows."""

    template = "EXTRACT(EPOCH FROM %(expressions)s)::double precision"
    output_field = FloatField()


def _seconds(value) -> float | None:
    return value.timestamp() if value is not None else None


# A running job as a pass reads it: (pk, department pk, GPUs, time limit in minutes, over quota, priority
# class, project pk, since, placed), `since` (placed, else started) and `placed` in seconds since 1970, or
# None.
RUNNING_COLUMNS = (
    "pk",
    "department_id",
    "gpus",
    "time_limit_minutes",
    "over_quota",
    "priority_class",
    "project_id",
)
OVER_QUOTA = 4  # a running row's over-quota column


def read_running() -> list[tuple]:
    """The running (holding) jobs, one query."""
    jobs = Job.objects.filter(state__in=HOLDING_STATES).order_by()
    if connection.vendor == "postgresql":
        since = _Seconds(Coalesce("placed_at", "started_at"))
        query = jobs.annotate(since=since, placed=_Seconds("placed_at")).values_list(
            *RUNNING_COLUMNS, "since", "placed"
        )
        # The driver's tuples as they come: thousands of rows, nothing for Django to convert.
        with connection.cursor() as cursor:
            cursor.execute(*query.query.sql_with_params())
            return cursor.fetchall()
    return [
        (*row[:-2], _seconds(row[-2] or row[-1]), _seconds(row[-2]))
        for row in jobs.values_list(*RUNNING_COLUMNS, "placed_at", "started_at")
    ]


def engine_running_jobs(
    rows, slug: dict[int, str], kept: dict, projects: dict[int, str] | None = None
) -> list[RunningJob]:
    """The engine's RunningJob of each row. `kept` ({pk: (row, RunningJob)} and the department and project
    slugs under None, from the last pass; replaced by this pass's) gives back the ones whose row has not
    changed: thousands of them. `projects`: project slugs by pk (`project_slugs`; read when not given)."""
    projects = project_slugs() if projects is None else projects
    if kept.get(None) != (slug, projects):  # a department renamed: every job may read differently
        kept.clear()
    jobs = []
    built: dict = {None: (slug, projects)}
    for row in rows:
        pk = row[0]
        job = kept.get(pk)
        if job is not None and job[0] == row:
            job = job[1]
        else:
            _, department_id, gpus, limit, over_quota, priority_class, project_id, since, _ = row
            started = since if since is not None else time.time()
            job = RunningJob(
                id=pk,
                department=slug[department_id],
                gpus=gpus,
                started_at=started,
                expected_end=started + limit * 60,
                over_quota=over_quota,
                priority_class=priority_class,
                project=projects.get(project_id),
            )
        if row[7] is not None:  # else "started now": not the same at the next pass
            built[pk] = (row, job)
        jobs.append(job)
    kept.clear()
    kept.update(built)
    return jobs


def engine_pending_jobs(
    rows, slug: dict[int, str], projects: dict[int, str] | None = None
) -> list[PendingJob]:
    """The engine's PendingJob of each row (`PENDING_COLUMNS`, or a Job). `projects`: as for
    `engine_running_jobs`."""
    projects = project_slugs() if projects is None else projects
    return [
        PendingJob(
            id=j.pk,
            department=slug[j.department_id],
            gpus=j.gpus,
            topology=j.topology,
            priority_class=j.priority_class,
            submitted_at=epoch(j.created_at),
            time_limit_s=j.time_limit_minutes * 60,
            fallback_topology=j.fallback_topology or None,
            fallback_after_s=(j.fallback_after_minutes or 0) * 60,
            project=projects.get(j.project_id),
        )
        for j in rows
    ]


@dataclass
class PassInputs:
    """What a pass decides from, as `gather` read it."""

    state: ClusterState  # the cluster (silent trays held out), and what it was built from
    departments: list[Department]
    slug: dict[int, str]  # department pk -> slug
    project_rows: list[tuple]  # `project_rows`
    project_slug: dict[int, str]  # project pk -> slug
    running: dict[int, tuple]  # pk -> `read_running` row, of the running jobs on the cluster
    pending: dict[int, tuple]  # pk -> `PENDING_COLUMNS` row (named), of the pending jobs

    @property
    def cluster(self) -> Cluster:
        return self.state.cluster

    def engine_args(self, now: datetime, extra_pending: Iterable = ()) -> tuple:
        """The engine's `schedule` arguments: (cluster, departments, running jobs, pending jobs, now).
        `extra_pending`: jobs (Job objects) queued behind the pending ones (the dry run's proposed job)."""
        return (
            self.cluster,
            engine_departments(self.departments, self.project_rows),
            engine_running_jobs(self.running.values(), self.slug, self.state.running_jobs, self.project_slug),
            engine_pending_jobs([*self.pending.values(), *extra_pending], self.slug, self.project_slug),
            now.timestamp(),
        )


def gather(*, kept: bool = True) -> PassInputs:
    """Read everything a pass decides from, in a fixed handful of queries (tests/scheduling/
    test_pass_queries.py): the departments, the projects, the running jobs, the cluster with their GPUs
    (`read`: the one this process keeps when `kept`, else cold and not to be kept: a dry run must not touch
    the pass's), the silent trays held out (`silence`), the pending jobs. A pass calls `keep(state)` after."""
    departments = list(Department.objects.all())
    projects = project_rows()
    holding_rows = read_running()
    placed = {row[0]: row[-1] for row in holding_rows}
    state = read(placed) if kept else build(placed)
    silence(state)  # nodes that stopped reporting: no new work there (node_silent rule)
    cluster = state.cluster
    return PassInputs(
        state=state,
        departments=departments,
        slug={d.pk: d.slug for d in departments},
        project_rows=projects,
        project_slug=project_slugs(projects),
        running={row[0]: row for row in holding_rows if row[0] in cluster.jobs},
        pending={
            row.pk: row
            for row in Job.objects.filter(state=JobState.PENDING)
            .order_by()
            .values_list(*PENDING_COLUMNS, named=True)
        },
    )
