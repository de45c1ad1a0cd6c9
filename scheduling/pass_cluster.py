"""The scheduling pass's cluster read cold from the database: the engine's Cluster with the running jobs'
GPUs on it, and which GPUs of each tray are free.

A cold read is a fixed handful of queries whatever the number of racks or jobs (the trays in cluster order,
their schedulable GPUs, the few unsettled trays, the running jobs' allocations), and builds the engine's
indexes. At 1,000 racks that is 18,000 trays and 72,000 GPUs: ~0.5 s, more than a whole pass may take, so
on PostgreSQL a process keeps the cluster it built between passes (scheduling.pass_cache). SQLite (the
embedded default) has no triggers: every pass reads cold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db import connection

from core.fabric import Fabric
from core.hardware import GPUS_PER_TRAY
from inventory.models import ComputeTray, Gpu
from inventory.selectors import unsettled_fabric_trays
from scheduling.choices import HOLDING_STATES
from scheduling.engine.cluster import Cluster, TraySpec
from scheduling.models import Allocation
from tenancy.services import schedulable_gpus_q


@dataclass(frozen=True)
class Mark:
    """What a kept cluster's inventory was read under (PostgreSQL: scheduling.pass_cache)."""

    snapshot: str  # txid_current_snapshot() before the first inventory query
    xmin: int  # its oldest transaction still running: every older one had ended
    own: int | None  # the reading transaction's id, if it had one
    own_seq: int | None  # its last change to the inventory before the read (a test, a seed), if any
    postmaster: datetime  # the server's start: another server, or a restore, is another history


@dataclass
class Held:
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
    held: dict[int, Held]
    # tray index -> its row of the cold read (pk, hostname, rack, partition, dedicated to, rack pk): what a
    # rack re-read is compared with (scheduling.pass_cache)
    tray_row: list[tuple] = field(default_factory=list)
    allocated: set[int] = field(default_factory=set)  # the GPUs the held jobs hold
    mark: Mark | None = None  # None: not kept (SQLite, or the log is missing)
    cold: bool = True  # built by this pass (not kept from an earlier one)
    reread: int = 0  # racks a kept cluster read again for this pass (scheduling.pass_cache)
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


# --- cold read ----------------------------------------------------------------------------------------


def group_allocations(rows, state: ClusterState) -> dict[int, tuple]:
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


def unsettled_tray_rows(racks=None):
    """The pks of the trays whose fabric is unsettled (inventory.selectors: few)."""
    trays = unsettled_fabric_trays()
    if racks is not None:
        trays = trays.filter(rack_id__in=racks)
    return trays.values_list("pk", flat=True)


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


INVENTORY_QUERIES = (tray_rows, schedulable_gpu_rows, unsettled_tray_rows, degraded_tray_rows)


def _rows(queryset) -> list[tuple]:
    """A values_list queryset's rows as the driver gives them (tens of thousands of rows, nothing for
    Django to convert)."""
    with connection.cursor() as cursor:
        cursor.execute(*queryset.query.sql_with_params())
        return cursor.fetchall()


def build(placed: dict[int, object], mark: Mark | None = None, fabric: Fabric | None = None) -> ClusterState:
    """Read the cluster cold: trays in rack/partition/slot order, each with the GPUs a job may use (the
    schedulable ones, and the ones a running job holds anyway), and the running jobs' GPUs allocated on it.
    `placed`: when each running job was placed, as the pass read it (its version; any comparable value).
    `fabric`: the compute fabric above the racks (core.fabric), for multi-rack placement; none by default."""
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
        tray_row=trays,
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
    jobs = group_allocations(
        ((job, gpu, tray_index.get(tray), pk) for job, gpu, tray, pk in _rows(allocations)), state
    )
    for _, unschedulable, _, _ in jobs.values():
        for t, n in unschedulable:
            state.held_unschedulable[t] += n
    state.cluster = Cluster(
        (
            TraySpec(hostname, rack, partition, state.capacity(t), owner, pk not in unsettled)
            for t, (pk, hostname, rack, partition, owner, _) in enumerate(trays)
        ),
        fabric,
    )
    for pk, why in degraded.items():
        if (t := tray_index.get(pk)) is not None:
            state.cluster.part_degraded[state.cluster.tray_part[t]] = why
    for job_id, (placement, unschedulable, gpus, last) in jobs.items():
        if placement:
            state.cluster.allocate(job_id, placement)
        state.held[job_id] = Held(placed.get(job_id), placement, unschedulable, gpus, last)
        state.allocated.update(gpus)
    return state


def load_cluster() -> tuple[Cluster, dict[int, int]]:
    """The cluster read cold, and its tray index by ComputeTray pk (the benchmark's placement part)."""
    state = build({})
    return state.cluster, state.tray_index
