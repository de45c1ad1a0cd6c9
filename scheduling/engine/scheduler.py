"""One scheduling pass: quota-aware admission, gang placement, reclaim by preemption, reservation, backfill.

Pure Python, shared by the portal (scheduling.services.run_pass builds the inputs from the database) and
the simulator (scheduling.simulator replays traces in virtual time). Times are seconds on any clock.

Admission follows `tenancy.quota.fair_share` (Run:ai / KAI semantics):

1. **In quota first.** Pending jobs are taken in order (department priority, then submission time). A job
   is *in quota* when its department's GPUs, with it, stay within the department's in-quota share (its
   guarantee, scaled down only when failures leave less capacity than was promised). In-quota work is not
   preemptible.
2. **Then over quota.** Preemptible (training) jobs beyond the guarantee borrow free GPUs, departments
   furthest below their fair share first, never past a department's limit. Non-preemptible classes
   (build, inference) only run in quota. Borrowed work may also use partitions dedicated to other
   departments (after its own and the shared ones).
3. **Reclaim.** An in-quota job that does not fit preempts over-quota work of other departments: first
   the borrowers on partitions dedicated to the job's department, then the least-priority department's,
   most recently started first, until the job fits. Victims whose trays the job does not need keep running.
4. **Reservation and backfill.** The first jobs that still do not fit (the head of the queue; two by
   default, `max_reservations`) get reservations: the trays that free up earliest for each (by the running
   jobs' time limits) are held for the rest of the pass. A later job may use held trays only if its time
   limit ends before the earliest reservation starts, so backfilling never delays the head jobs. Two
   rather than one (EASY backfill) because the trace replay showed a single reservation starving large
   jobs behind a stream of in-quota work (docs/simulator.md).

**Standing.** Every pass recomputes which running jobs are in quota and which borrow (`standing`), before
admission (so reclaim preempts today's borrowers, not the ones of when they started) and after it (the
result's `over_quota`): per department, its running jobs are in quota while their GPUs stay within the
department's in-quota share, non-preemptible classes first (they run only in quota), then oldest first;
the rest borrow. A job on a partition dedicated to another department always borrows. Raising a guarantee
turns the oldest borrowers into in-quota work at the next pass; lowering it turns the newest in-quota jobs
into borrowers.

The pass changes the given cluster (allocations for started jobs, releases for preempted ones) and returns
what it decided; the caller makes it so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from core.hardware import GPUS_PER_TRAY
from scheduling.engine.cluster import Cluster
from scheduling.engine.placement import (
    PARTITION,
    RACK,
    RACKPLANE,
    Placement,
    Request,
    fits_when_settled,
    place,
    why_not,
)
from tenancy.quota import DepartmentQuota, fair_share, in_quota_prefix

PREEMPTIBLE_CLASSES = ("train",)


@dataclass(frozen=True)
class Department:
    name: str
    guaranteed: int
    weight: float = 1.0
    limit: int | None = None
    priority: int = 0


@dataclass(frozen=True)
class PendingJob:
    id: int
    department: str
    gpus: int
    topology: str = PARTITION
    priority_class: str = "train"
    submitted_at: float = 0.0
    time_limit_s: float = 3600.0

    @property
    def preemptible(self) -> bool:
        return self.priority_class in PREEMPTIBLE_CLASSES

    def request(self, borrow: bool = False) -> Request:
        return Request(self.gpus, self.topology, self.department, borrow)


@dataclass(frozen=True)
class RunningJob:
    id: int
    department: str
    gpus: int
    started_at: float
    expected_end: float  # start + time limit
    over_quota: bool = False
    priority_class: str = "train"

    @property
    def preemptible(self) -> bool:
        return self.over_quota and self.priority_class in PREEMPTIBLE_CLASSES


@dataclass(frozen=True)
class Start:
    job_id: int
    placement: Placement
    over_quota: bool
    preempted: tuple[int, ...] = ()  # jobs preempted to make room for it


@dataclass(frozen=True)
class Reservation:
    job_id: int
    trays: tuple[int, ...]
    start_at: float


@dataclass
class PassResult:
    started: list[Start] = field(default_factory=list)
    preempted: dict[int, int] = field(default_factory=dict)  # victim job id -> the job it made room for
    waiting: dict[int, str] = field(default_factory=dict)  # job id -> why it waits (plain words)
    reservation: Reservation | None = None
    decisions: int = 0  # placement decisions made (calls of `place`)
    # Every job running after the pass (started ones included) -> True when it borrows (see Standing).
    over_quota: dict[int, bool] = field(default_factory=dict)
    in_quota_share: dict[str, int] = field(default_factory=dict)  # department -> its in-quota share
    on_dedicated: dict[int, str] = field(default_factory=dict)  # job -> owner of the dedicated partition


def _minutes(seconds: float) -> str:
    minutes = max(1, round(seconds / 60))
    if minutes < 120:
        return f"about {minutes} min"
    return f"about {minutes / 60:.1f} h"


class _Pass:
    def __init__(self, cluster, departments, running, pending, now, policy, explain, max_reservations):
        self.cluster = cluster
        self.departments = {d.name: d for d in departments}
        self.running = {job.id: job for job in running}
        self.pending = pending
        self.now = now
        self.policy = policy
        self.explain = explain
        self.max_reservations = max_reservations
        self.result = PassResult()
        self.held: dict[str, int] = {name: 0 for name in self.departments}
        for job in running:
            if job.department in self.held:
                self.held[job.department] += job.gpus
        demand = dict(self.held)
        for job in pending:
            if job.department in demand:
                demand[job.department] += job.gpus
        shares = fair_share(
            cluster.capacity,
            [
                DepartmentQuota(
                    name=d.name,
                    guaranteed=d.guaranteed,
                    weight=d.weight,
                    limit=d.limit,
                    priority=d.priority,
                    demand=demand[d.name],
                    allocated=self.held[d.name],
                )
                for d in departments
            ],
        ).shares
        self.in_quota = {name: share.in_quota for name, share in shares.items()}
        self.fair = {name: share.fair_share for name, share in shares.items()}
        self._restand()
        self.reserved: list[Reservation] = []
        self.reserved_from = math.inf  # the earliest start of a reservation
        self.held_trays: set[int] = set()
        # Shapes that did not fit in this pass: nothing frees up during a pass except by preemption.
        self.failed: dict[tuple, str] = {}
        # (GPUs, topology, department) whose reclaim failed in this pass. Within a pass only in-quota jobs
        # reclaim, and what happens between two attempts (in-quota starts, which are not preemptible and
        # keep their department within its guarantee; reservations) only takes capacity away, so a failed
        # reclaim fails again until capacity moves (a reclaim succeeds): then both caches are cleared.
        self.reclaim_failed: set[tuple] = set()

    # --- standing: in quota or borrowed ------------------------------------------------------------

    def _dedicated_owner(self, job: RunningJob) -> str | None:
        """The owner of another department's dedicated partition the job holds trays on, if any."""
        cluster = self.cluster
        for t, _ in cluster.jobs.get(job.id, ()):
            if cluster.dedicated_to_other(t, job.department):
                return cluster.part_owner[cluster.tray_part[t]]
        return None

    def _restand(self) -> None:
        """Recompute every running job's over_quota (module docstring, Standing)."""
        by_department: dict[str, list[RunningJob]] = {}
        on_dedicated: dict[int, str] = {}
        for job in self.running.values():
            owner = self._dedicated_owner(job)
            if owner is not None:
                on_dedicated[job.id] = owner
            else:
                by_department.setdefault(job.department, []).append(job)
        in_quota: set[int] = set()
        for name, jobs in by_department.items():
            if name not in self.in_quota:
                continue  # unknown department: nothing is guaranteed to it
            # Oldest first; non-preemptible classes first (they run only in quota), and within one start
            # time the pass's own decision first (a job started in quota next to a borrower it outranks).
            jobs.sort(
                key=lambda j: (j.priority_class in PREEMPTIBLE_CLASSES, j.started_at, j.over_quota, j.id)
            )
            in_quota |= in_quota_prefix(self.in_quota[name], [(j.id, j.gpus) for j in jobs])
        for job_id, job in self.running.items():
            over = job_id not in in_quota
            if job.over_quota != over:
                self.running[job_id] = replace(job, over_quota=over)
        self.result.over_quota = {job_id: job.over_quota for job_id, job in self.running.items()}
        self.result.on_dedicated = on_dedicated
        self.result.in_quota_share = dict(self.in_quota)

    # --- placement with reservations respected ---------------------------------------------------

    def _place(self, job: PendingJob, may_backfill: bool, borrow: bool = False) -> Placement | None:
        owner = job.department if job.department in self.cluster.owners else None
        key = (job.gpus, job.topology, owner, may_backfill, borrow)
        if key in self.failed:
            return None
        backfill = may_backfill and self.held_trays
        if backfill:
            self.cluster.unhold(self.held_trays)
        try:
            self.result.decisions += 1
            placement = place(self.cluster, job.request(borrow), self.policy)
        finally:
            if backfill:
                self.cluster.hold(self.held_trays)
        if placement is None:
            self.failed[key] = ""
        return placement

    def _may_backfill(self, job: PendingJob) -> bool:
        return bool(self.reserved) and self.now + job.time_limit_s <= self.reserved_from

    def _start(self, job: PendingJob, placement: Placement, over_quota: bool, victims=()) -> None:
        self.cluster.allocate(job.id, placement)
        self.held[job.department] += job.gpus
        self.running[job.id] = RunningJob(
            job.id,
            job.department,
            job.gpus,
            self.now,
            self.now + job.time_limit_s,
            over_quota,
            job.priority_class,
        )
        self.result.started.append(Start(job.id, placement, over_quota, tuple(victims)))

    # --- reclaim -----------------------------------------------------------------------------------

    def _reclaim(self, job: PendingJob) -> bool:
        """Preempt over-quota work of other departments until the in-quota `job` fits."""
        key = (job.gpus, job.topology, job.department)
        if key in self.reclaim_failed:
            return False
        if self.cluster.free_gpus + self._reclaimable() < job.gpus or not self._try_reclaim(job):
            self.reclaim_failed.add(key)
            return False
        return True

    def _try_reclaim(self, job: PendingJob) -> bool:
        cluster = self.cluster

        def on_its_partitions(r: RunningJob) -> bool:  # a borrower on the job's department's dedicated ones
            return any(
                cluster.part_owner[cluster.tray_part[t]] == job.department for t, _ in cluster.jobs[r.id]
            )

        victims = sorted(
            (
                (not on_its_partitions(r), r)
                for r in self.running.values()
                if r.preemptible and r.department != job.department and r.id in cluster.jobs
            ),
            key=lambda v: (v[0], self.departments[v[1].department].priority, -v[1].started_at, -v[1].id),
        )
        if not victims:
            return False
        released: list[tuple[RunningJob, tuple]] = []
        placement = None
        request = job.request()
        for elsewhere, victim in victims:
            # Only departments holding more than their guarantee give GPUs back, except from partitions
            # dedicated to the job's department: work there is always borrowed.
            if elsewhere and self.held[victim.department] <= self.departments[victim.department].guaranteed:
                continue
            released.append((victim, self.cluster.release(victim.id)))
            self.held[victim.department] -= victim.gpus
            self.result.decisions += 1
            placement = place(self.cluster, request, self.policy)
            if placement is not None:
                break
        if placement is None:
            for victim, trays in reversed(released):
                self.cluster.allocate(victim.id, trays)
                self.held[victim.department] += victim.gpus
            return False
        used = {t for t, _ in placement}
        preempted = []
        for victim, trays in reversed(released):
            if used.isdisjoint(t for t, _ in trays):
                self.cluster.allocate(victim.id, trays)  # not needed: it keeps running
                self.held[victim.department] += victim.gpus
            else:
                preempted.append(victim.id)
                del self.running[victim.id]
                self.result.preempted[victim.id] = job.id
        self.failed.clear()  # capacity moved: earlier failures may fit now
        self.reclaim_failed.clear()
        self._start(job, placement, over_quota=False, victims=preempted)
        return True

    # --- reservation -------------------------------------------------------------------------------

    def _reserve(self, job: PendingJob) -> Reservation | None:
        """The trays that free up earliest for `job`, by the running jobs' time limits."""
        cluster = self.cluster
        n = job.request().trays
        end = {r.id: r.expected_end for r in self.running.values()}

        def ready_at(t: int) -> float | None:
            if cluster.tray_cap[t] != GPUS_PER_TRAY or t in self.held_trays:
                return None
            if n > 1 and not cluster.tray_settled[t]:
                return None  # multi-tray jobs wait for settled fabric
            if not cluster.usable(t, job.department):
                return None
            return max((end.get(j, self.now) for j in cluster.tray_jobs[t]), default=self.now)

        def best_of(trays) -> tuple[float, tuple[int, ...]] | None:
            times = sorted((at, t) for t in trays if (at := ready_at(t)) is not None)
            if len(times) < n:
                return None
            chosen = times[:n]
            return max(self.now, chosen[-1][0]), tuple(sorted(t for _, t in chosen))

        groups: list[list[int]]
        if self.policy == RACKPLANE and job.topology == PARTITION and job.gpus > GPUS_PER_TRAY:
            groups = [trays for trays in cluster.part_trays if len(trays) >= n]
        elif self.policy == RACKPLANE and job.topology == RACK and job.gpus > GPUS_PER_TRAY:
            groups = [[t for p in parts for t in cluster.part_trays[p]] for parts in cluster.rack_parts]
        else:
            groups = [list(range(len(cluster)))]
        best = None
        for trays in groups:
            candidate = best_of(trays)
            if candidate is not None and (best is None or candidate[0] < best[0]):
                best = candidate
        if best is None:
            return None
        return Reservation(job.id, best[1], best[0])

    # --- the pass ----------------------------------------------------------------------------------

    def _consider(self, job: PendingJob, sweep: int) -> bool:
        """Try one job; True when it is settled for this pass (started or waiting with a reason)."""
        department = self.departments.get(job.department)
        if department is None:
            self.result.waiting[job.id] = f"waiting: department {job.department} is unknown"
            return True
        held = self.held[job.department]
        if department.limit is not None and held + job.gpus > department.limit:
            self.result.waiting[job.id] = (
                f"waiting: the department's limit is {department.limit} GPUs; it holds {held} "
                f"and this job needs {job.gpus}"
            )
            return True
        in_quota = held + job.gpus <= self.in_quota[job.department]
        if sweep == 1 and not in_quota:
            return False  # over quota: the second sweep, after every in-quota job
        if not in_quota and not job.preemptible:
            self.result.waiting[job.id] = (
                f"waiting: {job.priority_class} jobs run only within the department's guarantee "
                f"({department.guaranteed} GPUs); it holds {held} and this job needs {job.gpus}"
            )
            return True
        placement = self._place(job, self._may_backfill(job), borrow=not in_quota)
        if placement is not None:
            self._start(job, placement, over_quota=not in_quota)
            return True
        if in_quota and self._reclaim(job):
            return True
        self._wait(job, borrow=not in_quota)
        return True

    def _reclaimable(self) -> int:
        return sum(r.gpus for r in self.running.values() if r.preemptible)

    def _wait(self, job: PendingJob, borrow: bool = False) -> None:
        """Record why `job` waits (for the trays a borrower may use too, when it would borrow), and reserve
        trays for it if it is one of the first that do not fit."""
        request = job.request(borrow)
        reason = ""
        if self.explain:
            reason = "waiting: " + (
                why_not(self.cluster, request) if not self.held_trays else self._why_with_reservation(request)
            )
        if len(self.reserved) < self.max_reservations and job.id not in {r.job_id for r in self.reserved}:
            reservation = self._reserve(job)
            if reservation is not None:
                self.reserved.append(reservation)
                self.reserved_from = min(self.reserved_from, reservation.start_at)
                self.held_trays.update(reservation.trays)
                self.cluster.hold(reservation.trays)
                self.failed.clear()
                self.reclaim_failed.clear()
                if self.result.reservation is None:
                    self.result.reservation = reservation
                if self.explain:
                    wait = _minutes(reservation.start_at - self.now)
                    if fits_when_settled(self.cluster, request):
                        reason += (
                            "; it starts as soon as their nodes report the new partition (failing that, "
                            f"trays are reserved for it, expected to start in {wait})"
                        )
                    else:
                        reason += f"; trays are reserved for it, expected to start in {wait}"
        self.result.waiting[job.id] = reason

    def _why_with_reservation(self, request: Request) -> str:
        self.cluster.unhold(self.held_trays)
        try:
            fits = place(self.cluster, request, self.policy) is not None
            words = why_not(self.cluster, request)
        finally:
            self.cluster.hold(self.held_trays)
        if fits:
            head = self.reserved[0]
            return (
                f"the free trays it fits on are reserved for job #{head.job_id}, which should start in "
                f"{_minutes(head.start_at - self.now)}; this job's time limit would delay it"
            )
        return words

    def run(self) -> PassResult:
        # Negated department priorities, looked up once per job (unknown departments: 0).
        rank = {name: -department.priority for name, department in self.departments.items()}
        order = sorted(self.pending, key=lambda j: (rank.get(j.department, 0), j.submitted_at, j.id))
        later = [job for job in order if not self._consider(job, sweep=1)]
        # Over quota: departments furthest below their fair share first.
        below = {name: self.held[name] - self.fair[name] for name in self.departments}
        later.sort(
            key=lambda j: (rank.get(j.department, 0), below.get(j.department, 0), j.submitted_at, j.id)
        )
        for job in later:
            self._consider(job, sweep=2)
        self.cluster.unhold(self.held_trays)
        self._restand()
        # A start is reported with its standing after the pass (same as the jobs already running).
        self.result.started = [
            replace(s, over_quota=self.result.over_quota.get(s.job_id, s.over_quota))
            for s in self.result.started
        ]
        return self.result


def schedule(
    cluster: Cluster,
    departments: list[Department],
    running: list[RunningJob],
    pending: list[PendingJob],
    now: float,
    policy: str = RACKPLANE,
    *,
    explain: bool = True,
    max_reservations: int = 2,
) -> PassResult:
    """Run one pass. `cluster` must hold the running jobs' allocations (by job id); it is changed in place."""
    return _Pass(cluster, departments, running, pending, now, policy, explain, max_reservations).run()
