"""The scheduling pass's cluster read cold from the database: the engine's Cluster with the running jobs'
GPUs on it, and which GPUs of each tray are free.

A cold read is a fixed handful of queries whatever the number of racks or jobs (the trays in cluster order,
their schedulable GPUs, the few unsettled trays, the running jobs' allocations), and builds the engine's
indexes. At 1,000 racks that is 18,000 trays and 72,000 GPUs: ~0.5 s, more than a whole pass may take, so
on PostgreSQL a process keeps the cluster it built between passes (scheduling.pass_cache). SQLite (the
embedded default) has no triggers: every pass reads cold.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from itertools import chain, groupby, repeat
from operator import itemgetter
from typing import NamedTuple

from django.contrib.postgres.aggregates import ArrayAgg
from django.db import connection
from django.db.models import FloatField, Func, Max, Q
from django.db.models.functions import Coalesce

from core.apart import AtOnce
from core.fabric import Fabric
from core.hardware import GPUS_PER_TRAY
from inventory.models import ComputeTray, Gpu
from inventory.selectors import GPU_FABRIC_UNSETTLED, HAS_FABRIC_PROBLEMS, unsettled_fabric_trays
from scheduling.choices import HOLDING_STATES
from scheduling.engine.cluster import Cluster, TrayColumns
from scheduling.engine.standing import StandingOrder
from scheduling.models import Allocation, Job
from tenancy.services import schedulable_gpus_q, unschedulable_gpus_q_parts


@dataclass(frozen=True)
class Mark:
    """What a kept cluster's inventory was read under (PostgreSQL: scheduling.pass_cache)."""

    snapshot: str  # txid_current_snapshot() before the first inventory query
    xmin: int  # its oldest transaction still running: every older one had ended
    own: int | None  # the reading transaction's id, if it had one
    own_seq: int | None  # its last change to the inventory before the read (a test, a seed), if any
    postmaster: datetime  # the server's start: another server, or a restore, is another history
    # The jobs the job log named for the reading transaction when read (a savepoint rolled back since takes
    # some away: what was read of them is then read again); None: too many to keep.
    own_jobs: tuple[int, ...] | None = ()


class Held(NamedTuple):
    """A running job's GPUs as the cluster has them (never changed: a tuple, 47,700 made by a cold read at
    10,000 racks)."""

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
    held: dict[int, Held]
    # tray index -> its row of the cold read (pk, hostname, rack, partition, dedicated to, rack pk): what a
    # rack re-read is compared with (scheduling.pass_cache)
    tray_row: list[tuple] = field(default_factory=list)
    # rack pk -> the cluster's index of the rack, made by the first rack re-read (scheduling.pass_cache: the
    # racks and their trays do not change while the state is kept, a re-read that finds other trays reads
    # cold)
    rack_index: dict[int, int] = field(default_factory=dict)
    allocated: set[int] = field(default_factory=set)  # the GPUs the held jobs hold
    mark: Mark | None = None  # None: not kept (SQLite, or the log is missing)
    cold: bool = True  # built by this pass (not kept from an earlier one)
    # The function that read the cluster's fabric (the one in use, scheduling.pass_cache.read), or None
    # when the fabric was given.
    fabric_source: object = None
    reread: int = 0  # racks a kept cluster read again for this pass (scheduling.pass_cache)
    # The engine's RunningJob of each running job and the row it was made from (pass_inputs, kept by pk).
    running_jobs: dict = field(default_factory=dict)
    # The running jobs' rows (pk -> `read_running` row) as this pass read them, and what they were read
    # under (PostgreSQL: scheduling.pass_cache reads again only the jobs the job change log names since).
    running_rows: dict[int, tuple] = field(default_factory=dict)
    running_placed: dict[int, object] = field(default_factory=dict)  # pk -> its row's `placed` (last column)
    job_mark: Mark | None = None
    # The engine's standing order of the running jobs after the last pass (PassResult.standing), which the
    # next pass's starts from (scheduling.services.passes keeps it).
    standing: StandingOrder | None = None
    # The jobs whose rows (pk) or allocations (-pk) this pass read again; None: every running job was read.
    changed_jobs: set[int] | None = None
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


# --- the running jobs ----------------------------------------------------------------------------------


class _Seconds(Func):
    """A timestamp as seconds since 1970 (a float), computed by PostgreSQL: parsing thousands of
    timestamps into datetimes costs more than reading the rest of the running jobs' rows."""

    template = "EXTRACT(EPOCH FROM %(expressions)s)::double precision"
    output_field = FloatField()


def seconds_of(value) -> float | None:
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


def running_query(jobs=None):
    """The query of `read_running` (PostgreSQL's; SQLite's reads the timestamps themselves)."""
    # Slice jobs (MIG devices, no whole GPU) are the pass's own (scheduling.services.slices), not the
    # engine's.
    rows = Job.objects.filter(state__in=HOLDING_STATES, mig_slices=0).order_by()
    if jobs is not None:
        rows = rows.filter(pk__in=jobs)
    if connection.vendor != "postgresql":
        return rows.values_list(*RUNNING_COLUMNS, "placed_at", "started_at")
    since = _Seconds(Coalesce("placed_at", "started_at"))
    return rows.annotate(since=since, placed=_Seconds("placed_at")).values_list(
        *RUNNING_COLUMNS, "since", "placed"
    )


def read_running(jobs=None) -> list[tuple]:
    """The running (holding) jobs (`jobs`: of those pks only), one query."""
    query = running_query(jobs)
    if connection.vendor == "postgresql":
        # The driver's tuples as they come: thousands of rows, nothing for Django to convert.
        with connection.cursor() as cursor:
            cursor.execute(*query.query.sql_with_params())
            return cursor.fetchall()
    return [(*row[:-2], seconds_of(row[-2] or row[-1]), seconds_of(row[-2])) for row in query]


# --- cold read ----------------------------------------------------------------------------------------


def group_allocations(rows, state: ClusterState, tray_index: dict[int, int]) -> dict[int, tuple]:
    """Per job: (placement, unschedulable, GPUs, highest allocation id) from `allocation_rows` (job, tray
    pk or None, GPUs, their highest allocation id), the trays' pks indexed by `tray_index` (a tray not in it,
    or none: the GPUs are not on the cluster). One walk, in C where it can be (a cold read's ~128,000 rows at
    10,000 racks)."""
    schedulable = state.gpu_tray.__contains__
    index = tray_index.get
    jobs: dict[int, list] = {}
    entry_of = jobs.get
    for job_id, tray, gpus, last in rows:
        t = index(tray)
        entry = entry_of(job_id)
        if entry is None:
            entry = jobs[job_id] = [{}, {}, list(gpus), last]
        else:
            if last > entry[3]:
                entry[3] = last
            entry[2].extend(gpus)
        if t is None:  # a GPU out of any tray, or a tray out of any partition: not on the cluster
            continue
        placement = entry[0]
        placement[t] = placement.get(t, 0) + len(gpus)
        if not all(map(schedulable, gpus)):
            off = entry[1]
            off[t] = off.get(t, 0) + sum(1 for gpu in gpus if not schedulable(gpu))
    return {
        job_id: (
            tuple(sorted(placement.items())) if len(placement) > 1 else tuple(placement.items()),
            tuple(sorted(off.items())) if off else (),
            tuple(gpus),
            last,
        )
        for job_id, (placement, off, gpus, last) in jobs.items()
    }


def group_job_allocations(rows, state: ClusterState, held_off: dict[int, int]) -> dict[int, tuple]:
    """`group_allocations` of a cold read on PostgreSQL, from `_job_allocation_query`'s rows (job, its GPUs,
    its highest allocation id): each GPU's tray from the inventory read (`state.gpu_tray`: the schedulable
    GPUs, `held_off`: the cluster's trays' other GPUs -> their tray index; a GPU in neither is on no tray of
    the cluster), not joined by the database (~0.8 s of its time at 10,000 racks: 488,000 allocations to
    720,000 GPUs). One row per job (~47,700), the GPUs counted by tray in C."""
    on_tray, off_tray = state.gpu_tray.get, held_off.get
    jobs: dict[int, tuple] = {}
    for job_id, gpus, last in rows:
        trays = list(map(on_tray, gpus))
        first = trays[0] if trays else None
        if first is not None and trays.count(first) == len(trays):  # one tray, every GPU schedulable (most)
            jobs[job_id] = (((first, len(trays)),), (), tuple(gpus), last)
            continue
        if None in trays:  # GPUs not schedulable, or on no tray of the cluster (rare)
            off: dict[int, int] = {}
            for at in [at for at, t in enumerate(trays) if t is None]:
                t = off_tray(gpus[at])
                if t is not None:
                    trays[at] = t
                    off[t] = off.get(t, 0) + 1
            counted = Counter(t for t in trays if t is not None)
            unschedulable = tuple(sorted(off.items()))
        else:
            counted = Counter(trays)
            unschedulable = ()
        placement = tuple(sorted(counted.items())) if len(counted) > 1 else tuple(counted.items())
        jobs[job_id] = (placement, unschedulable, tuple(gpus), last)
    return jobs


def _job_allocation_query():
    """The running jobs' allocations, a row per job: (job, its GPUs, its highest allocation id)
    (PostgreSQL's cold read: `group_job_allocations`)."""
    return (
        Allocation.objects.filter(job__state__in=HOLDING_STATES)
        .order_by()
        .values("job_id")
        .annotate(gpus=ArrayAgg("gpu_id"), last=Max("pk"))
        .values_list("job_id", "gpus", "last")
    )


def allocation_rows(jobs=None) -> list[tuple]:
    """The running jobs' allocations (`jobs`: of those only) as `group_allocations` reads them: (job, tray
    pk or None, GPUs, highest allocation id), one row per job and tray on PostgreSQL (the rows grouped
    there: ~488,000 allocations at 10,000 racks are ~128,000 rows), one per allocation elsewhere."""
    return _as_grouped(_rows(_allocation_query(jobs)))


def _allocation_query(jobs=None):
    """`allocation_rows`' query: (job, tray pk, GPU pks, highest allocation id) grouped on PostgreSQL, one
    row per allocation (job, tray pk, GPU pk, its id) elsewhere."""
    allocations = Allocation.objects.filter(job__state__in=HOLDING_STATES)
    if jobs is not None:
        allocations = allocations.filter(job_id__in=jobs)
    if connection.vendor == "postgresql":
        return (
            allocations.order_by()
            .values("job_id", "gpu__tray_id")
            .annotate(gpus=ArrayAgg("gpu_id"), last=Max("pk"))
            .values_list("job_id", "gpu__tray_id", "gpus", "last")
        )
    return allocations.order_by().values_list("job_id", "gpu__tray_id", "gpu_id", "pk")


def _as_grouped(rows: list[tuple]) -> list[tuple]:
    """`_allocation_query`'s rows as `allocation_rows` gives them (elsewhere than PostgreSQL: a GPU a row)."""
    if connection.vendor == "postgresql":
        return rows
    return [(job, tray, (gpu,), pk) for job, tray, gpu, pk in rows]


RACK_PK = 5  # a `tray_rows` row's rack pk


def tray_rows(racks=None):
    """(pk, hostname, rack, partition, dedicated to, rack pk) of the trays in a partition, in cluster order
    (`racks`: of those racks only)."""
    trays = ComputeTray.objects.filter(partition__isnull=False)
    if racks is not None:
        trays = trays.filter(rack_id__in=racks)
    return trays.order_by("rack__name", "partition__clique_id", "slot").values_list(
        "pk",
        "hostname",
        "rack__name",
        "partition__name",
        "partition__dedication__department__slug",
        "rack_id",
    )


def schedulable_gpu_rows(racks=None):
    """(pk, tray pk) of the schedulable GPUs in trays in a partition, by tray and index."""
    gpus = Gpu.objects.filter(schedulable_gpus_q(), tray__partition__isnull=False)
    if racks is not None:
        gpus = gpus.filter(tray__rack_id__in=racks)
    return gpus.order_by("tray_id", "index").values_list("pk", "tray_id")


def schedulable_gpus_by_tray(racks=None) -> list[tuple[int, tuple[int, ...]]]:
    """(tray pk, its schedulable GPUs' pks in index order) of the trays in a partition with any
    (`schedulable_gpu_rows`; grouped by PostgreSQL there: a row per tray, 180,000 rows instead of 720,000
    at 10,000 racks)."""
    return _gpus_by_tray(_rows(_gpus_by_tray_query(racks)))


def _gpus_by_tray_query(racks=None):
    gpus = schedulable_gpu_rows(racks)
    if connection.vendor == "postgresql":
        return (
            gpus.order_by()
            .values("tray_id")
            .annotate(gpus=ArrayAgg("pk", order_by=("index",)))
            .values_list("tray_id", "gpus")
        )
    return gpus


def _gpus_by_tray(rows: list[tuple]) -> list[tuple[int, tuple[int, ...]]]:
    """`_gpus_by_tray_query`'s rows as `schedulable_gpus_by_tray` gives them."""
    if connection.vendor == "postgresql":
        return [(tray, tuple(pks)) for tray, pks in rows]
    return [(tray, tuple(pk for pk, _ in rows)) for tray, rows in groupby(rows, key=itemgetter(1))]


def unsettled_tray_rows(racks=None):
    """The pks of the trays whose fabric is unsettled (inventory.selectors: few). Of `racks`, their GPUs
    only are looked at (the whole fleet's GPUs otherwise: 720,000 at 10,000 racks, for a one-rack re-read)."""
    if racks is None:
        trays = unsettled_fabric_trays()
    else:
        unsettled_gpus = Gpu.objects.filter(GPU_FABRIC_UNSETTLED, tray__rack_id__in=racks).values("tray_id")
        trays = ComputeTray.objects.filter(rack_id__in=racks).filter(
            HAS_FABRIC_PROBLEMS | Q(pk__in=unsettled_gpus)
        )
    return trays.order_by().values_list("pk", flat=True)


# The inventory queries of a cold read: scheduling.pass_cache.CACHED_COLUMNS must name every column they read.
def degraded_tray_rows(racks=None):
    """(pk, why) of the trays of NVLink partitions the health rules marked degraded (few): like unsettled
    trays, they take no job spanning trays until the partition recovers (inventory.health)."""
    trays = ComputeTray.objects.filter(partition__isnull=False)
    if racks is not None:
        trays = trays.filter(rack_id__in=racks)
    return (
        trays.exclude(partition__degraded_reason="")
        .order_by()
        .values_list("pk", "partition__degraded_reason")
    )


# The GPUs in trays in a partition that are not schedulable (few), in two queries, one per half of
# `schedulable_gpus_q`'s complement (tenancy.services.unschedulable_gpus_q_parts), each found by an index:
# running jobs may hold some (a GPU that turned unhealthy under its job).
def off_gpu_rows(racks=None):
    """(pk, tray pk) of the GPUs in trays in a partition that are not schedulable by their own fields
    (unhealthy, in MIG mode)."""
    gpus = Gpu.objects.filter(unschedulable_gpus_q_parts()[0], tray__partition__isnull=False)
    if racks is not None:
        gpus = gpus.filter(tray__rack_id__in=racks)
    return gpus.order_by().values_list("pk", "tray_id")


def off_tray_gpu_rows(racks=None):
    """(pk, tray pk) of the GPUs of the trays in a partition that are not schedulable by their tray (not
    up, or a MIG layout chosen)."""
    gpus = Gpu.objects.filter(unschedulable_gpus_q_parts()[1], tray__partition__isnull=False)
    if racks is not None:
        gpus = gpus.filter(tray__rack_id__in=racks)
    return gpus.order_by().values_list("pk", "tray_id")


INVENTORY_QUERIES = (
    tray_rows,
    schedulable_gpu_rows,
    off_gpu_rows,
    off_tray_gpu_rows,
    unsettled_tray_rows,
    degraded_tray_rows,
)


def _rows(queryset) -> list[tuple]:
    """A values_list queryset's rows as the driver gives them (tens of thousands of rows, nothing for
    Django to convert)."""
    with connection.cursor() as cursor:
        cursor.execute(*queryset.query.sql_with_params())
        return cursor.fetchall()


# The running jobs' allocations are joined to their GPUs by hash, not one index lookup per allocation: the
# planner, estimating the share of allocations held by running jobs from the whole job table (21 M jobs
# at 10,000 racks, 47,700 running), expects a few hundred rows where every allocation is one (~488,000)
# and chose ~488,000 lookups: 1.0 s -> 0.7 s. The hash and the grouping sort in memory, not on disk.
ALLOCATIONS_PLANNER = {"enable_nestloop": "off", "work_mem": "64MB"}


def _sql(queryset) -> tuple[str, tuple]:
    return queryset.query.sql_with_params()


def build(
    placed: dict[int, object] | None,
    mark: Mark | None = None,
    fabric: Fabric | None = None,
    apart: bool = False,
) -> ClusterState:
    """Read the cluster cold: trays in rack/partition/slot order, each with the GPUs a job may use (the
    schedulable ones, and the ones a running job holds anyway), and the running jobs' GPUs allocated on it.
    `placed`: when each running job was placed, as the pass read it (its version; any comparable value);
    None: the running jobs are read here too (`read_running`'s rows: `ClusterState.running_rows`), placed as
    their rows say.
    `fabric`: the compute fabric above the racks (core.fabric), for multi-rack placement; none by default.

    The queries are read at once (core.apart; ~3 s one after the other at 10,000 racks, most of it the
    server's scans and the rows' decoding): the running jobs' allocations on this connection in a thread
    while the cluster is built from the inventory, whose queries run on other connections when `apart`
    (this transaction changed none of the inventory's logged columns: scheduling.pass_cache), else on this
    one before the allocations."""
    postgres = connection.vendor == "postgresql"
    inventory = [tray_rows(), _gpus_by_tray_query(), unsettled_tray_rows(), degraded_tray_rows()]
    # PostgreSQL: the allocations a row per job, their trays found from the inventory's GPUs (not joined),
    # the GPUs off the schedulable ones read with the inventory; elsewhere the join gives every GPU's tray.
    if postgres:
        inventory += [off_gpu_rows(), off_tray_gpu_rows()]
    allocation_query = _job_allocation_query() if postgres else _allocation_query()
    running_rows = None
    if placed is None and connection.vendor != "postgresql":  # (its timestamps are converted in Python)
        running_rows = read_running()
    # PostgreSQL: the running jobs before their allocations, in the same thread (their rows as the driver
    # gives them: read_running's).
    jobs_here = placed is None and running_rows is None
    with AtOnce(
        # The GPUs by tray (the largest) on one connection, the others on another.
        [[_sql(inventory[1])], [_sql(query) for query in (inventory[0], *inventory[2:])]],
        [*([_sql(running_query())] if jobs_here else []), _sql(allocation_query)],
        apart=apart,
        here_settings=ALLOCATIONS_PLANNER,
    ) as reads:
        (trays, unsettled_rows, degraded_rows, *off_rows), (gpu_rows,) = reads.group(1), reads.group(0)
        degraded = dict(degraded_rows)
        unsettled = {row[0] for row in unsettled_rows} | set(degraded)
        state = _inventory(trays, _gpus_by_tray(gpu_rows), unsettled, mark, fabric)
        for pk, why in degraded.items():
            if (t := state.tray_index.get(pk)) is not None:
                state.cluster.part_degraded[state.cluster.tray_part[t]] = why
        *read_jobs, allocations = reads.here()
    if placed is None:
        if jobs_here:
            (running_rows,) = read_jobs
        assert running_rows is not None
        state.running_rows = {row[0]: row for row in running_rows}
        placed = state.running_placed = {pk: row[-1] for pk, row in state.running_rows.items()}
    if postgres:
        index = state.tray_index
        held_off = {gpu: index[tray] for rows in off_rows for gpu, tray in rows if tray in index}
        jobs = group_job_allocations(allocations, state, held_off)
    else:
        jobs = group_allocations(_as_grouped(allocations), state, state.tray_index)
    cluster = state.cluster
    for _, unschedulable, _, _ in jobs.values():
        for t, n in unschedulable:
            state.held_unschedulable[t] += n
            # Capacity counts the GPUs running jobs hold anyway (rare: the cluster was built without them).
            cluster.set_capacity(t, state.capacity(t))
    # Every running job placed at once: each tray re-indexed once, each partition moved once (~0.1 s less
    # than job by job for 47,700 jobs at 10,000 racks; the same indexes: Cluster.allocate_all).
    cluster.allocate_all((job_id, job[0]) for job_id, job in jobs.items() if job[0])
    version = placed.get
    state.held = {job_id: Held(version(job_id), *job) for job_id, job in jobs.items()}
    state.allocated = set(chain.from_iterable(map(itemgetter(2), jobs.values())))
    return state


def _inventory(
    trays: list[tuple],
    by_tray: list[tuple[int, tuple[int, ...]]],
    unsettled: set[int],
    mark: Mark | None,
    fabric: Fabric | None,
) -> ClusterState:
    """The cluster of the inventory's rows (`build`), with no job on it yet."""
    tray_pk = list(map(itemgetter(0), trays))
    tray_index = dict(zip(tray_pk, range(len(trays)), strict=True))
    tray_gpus: list[tuple[int, ...]] = [()] * len(trays)
    found, found_gpus = [], []
    for tray_id, gpus in by_tray:
        t = tray_index.get(tray_id)
        if t is not None:  # else a tray that joined a partition since the trays were read: next pass
            tray_gpus[t] = gpus
            found.append(t)
            found_gpus.append(gpus)
    # Every GPU -> its tray, made in C: each tray index repeated once per GPU of it.
    trays_of_gpus = chain.from_iterable(map(repeat, found, map(len, found_gpus)))
    gpu_tray = dict(zip(chain.from_iterable(found_gpus), trays_of_gpus, strict=True))
    state = ClusterState(
        cluster=None,  # type: ignore[arg-type]  (set below)
        tray_pk=tray_pk,
        tray_row=trays,
        tray_index=tray_index,
        tray_gpus=tray_gpus,
        gpu_tray=gpu_tray,
        held_unschedulable=[0] * len(trays),
        held={},
        mark=mark,
    )
    columns = TrayColumns(
        list(map(itemgetter(1), trays)),
        list(map(itemgetter(2), trays)),
        list(map(itemgetter(3), trays)),
        list(map(min, repeat(GPUS_PER_TRAY), map(len, tray_gpus))),
        list(map(itemgetter(4), trays)),
        [pk not in unsettled for pk in tray_pk] if unsettled else [True] * len(trays),
    )
    state.cluster = Cluster(columns, fabric)
    return state


def load_cluster() -> tuple[Cluster, dict[int, int]]:
    """The cluster read cold, and its tray index by ComputeTray pk (the benchmark's placement part)."""
    state = build({})
    return state.cluster, state.tray_index
