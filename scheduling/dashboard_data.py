"""The department and admin dashboards: everything each page shows, assembled from the figures of
scheduling.usage (positions, idle and free GPUs) in a fixed number of queries, every list bounded.

Visibility comes from `visible_to(user)` / `led_by(user)` on the models and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count
from django.utils import timezone
from hostlist import collect_hostlist

from core.access import leads
from inventory.recarving import RecentRecarves, recent_recarves
from scheduling.choices import HOLDING_STATES, JobState, StrandedCause
from scheduling.models import Job, SchedulerState
from scheduling.slice_holders import IdleSlices, idle_slices
from scheduling.usage import (
    SNAPSHOT_FIELDS,
    GuaranteeStatus,
    Position,
    Positions,
    department_positions,
    free_gpus_count,
    idle_as_listed,
    idle_gpus_queryset,
    longest_idle,
    without_data_of,
)
from tenancy.activity import STALE_AFTER
from tenancy.models import DedicatedPartition, Department, Membership, QuotaSnapshot, TenancySettings

HISTORY = timedelta(hours=24)
# Bounded lists: the rest is summarised as "N more".
IDLE_LIMIT = 100
JOB_LIMIT = 50
ADMIN_IDLE_LIMIT = 50


# ------------------------------------------------------------------------------------ lead dashboard


def members(user, department: Department) -> list[Membership]:
    """The memberships of `department` the user may see (all of them to its people, leads and admins;
    only its leads and admins manage them)."""
    return list(
        Membership.objects.visible_to(user)
        .filter(department=department)
        .select_related("user")
        .order_by("role", "user__username")
    )


def quota_history(user, department: Department, now: datetime) -> list[dict]:
    return list(
        QuotaSnapshot.objects.visible_to(user)
        .filter(department=department, taken_at__gte=now - HISTORY, taken_at__lte=now)
        .order_by("taken_at")
        .values("taken_at", *SNAPSHOT_FIELDS)
    )


@dataclass
class DepartmentDashboard:
    department: Department
    position: Position
    capacity: int
    history: list[dict]  # the last 24 hours of QuotaSnapshot rows (every five minutes)
    idle_gpus: list  # Gpu rows annotated by idle_gpus_queryset
    running_jobs: list[Job]
    pending_jobs: list[Job]
    partitions: list[DedicatedPartition]
    members: list[Membership]
    can_manage: bool
    taken_at: datetime
    positions: Positions | None = None  # every department's (the shortfall banner for admins)
    no_data_gpus: int = 0  # held GPUs neither idle nor freshly sampled (`held_without_data`)
    # The MIG devices no slice job holds that its slice jobs may take: any department's may take any (slice
    # placement knows no dedication), so the admin dashboard's figure (scheduling.slice_holders.idle_slices)
    idle_slices: IdleSlices | None = None

    @property
    def history_to_now(self) -> list[dict]:
        """The snapshots and a last point at `taken_at` from `position` (what the cards show), so the
        chart ends at the live figures rather than at the last snapshot, up to five minutes old."""
        return [*self.history, {"taken_at": self.taken_at, **self.position.figures()}]

    @property
    def idle_more(self) -> int:
        return max(0, self.position.idle - len(self.idle_gpus))

    @property
    def running_more(self) -> int:
        return max(0, self.position.running_jobs - len(self.running_jobs))

    @property
    def reporting_gpus(self) -> int:
        """Held GPUs with utilization data (idle or working)."""
        return max(0, self.position.in_use - self.no_data_gpus)

    @property
    def stale_after_minutes(self) -> int:
        return int(STALE_AFTER.total_seconds() // 60)

    @property
    def pending_more(self) -> int:
        return max(0, self.position.pending_jobs - len(self.pending_jobs))

    @property
    def dedicated_gpus(self) -> int:
        return sum(p.gpus for p in self.partitions)


def job_share(gpus: int, in_use: int) -> float:
    """A running job's share of the GPUs its department holds, in percent (0 when it holds none)."""
    return min(100.0, round(100 * gpus / in_use, 1)) if in_use else 0.0


def department_dashboard(user, department: Department, now: datetime | None = None) -> DepartmentDashboard:
    """Everything the department dashboard shows, in a fixed number of queries.

    `department` must come from `Department.objects.visible_to(user)`.
    """
    now = now or timezone.now()
    settings = TenancySettings.load()
    positions = department_positions(now, settings)
    idle = longest_idle(
        idle_gpus_queryset(now=now, department=department, settings=settings), IDLE_LIMIT, "hostname", "index"
    )
    position = positions.of(department)
    idle_as_listed([position], idle, IDLE_LIMIT)
    jobs = Job.objects.visible_to(user).filter(department=department).select_related("submitted_by")
    running_jobs = list(jobs.filter(state__in=HOLDING_STATES).order_by("-started_at", "-pk")[:JOB_LIMIT])
    for job in running_jobs:  # a bounded page of jobs: "gb-r0001-t[01-09]" reads better than nine names
        job.hostlist = collect_hostlist(job.placement or [])
        job.share = job_share(job.gpus, position.in_use)
    pending_jobs = list(jobs.filter(state=JobState.PENDING).order_by("created_at", "pk")[:JOB_LIMIT])
    partitions = list(
        DedicatedPartition.objects.visible_to(user)
        .filter(department=department)
        .select_related("partition__rack")
        .annotate(gpus=Count("partition__trays__gpus"))
        .order_by("partition__rack__name", "partition__clique_id")
    )
    return DepartmentDashboard(
        department=department,
        position=position,
        capacity=positions.capacity,
        history=quota_history(user, department, now),
        idle_gpus=idle,
        no_data_gpus=without_data_of([position], now),
        running_jobs=running_jobs,
        pending_jobs=pending_jobs,
        partitions=partitions,
        members=members(user, department),
        can_manage=leads(user, department),  # core.access: admins and its leads manage its members
        taken_at=now,
        positions=positions,
        idle_slices=idle_slices(),
    )


# ----------------------------------------------------------------------------------- admin dashboard


@dataclass
class StrandedCapacity:
    """Stranded NVLink capacity as the last scheduling pass computed it (scheduling.engine.stranded's
    `Stranded.as_dict`, kept in SchedulerState.last_summary): read, never computed, by a GET."""

    as_of: datetime  # the pass's time
    figures: dict

    @property
    def causes(self) -> list[tuple[str, str, int]]:
        """(value, label, stranded GPUs) of every cause, in StrandedCause's order."""
        by_cause = self.figures.get("by_cause", {})
        return [(c.value, c.label, by_cause.get(c.value, 0)) for c in StrandedCause]

    @property
    def worst_racks(self) -> list[dict]:
        """The worst racks, each with its causes as (value, label, GPUs) in StrandedCause's order."""
        return [
            {**rack, "causes": [(c.value, c.label, rack["by_cause"].get(c.value, 0)) for c in StrandedCause]}
            for rack in self.figures.get("worst_racks", [])
        ]


def last_stranded() -> StrandedCapacity | None:
    """The last pass's stranded-capacity figures; None before a pass has computed them. One query."""
    state = SchedulerState.objects.filter(pk=1).only("last_pass_at", "last_summary").first()
    figures = (state.last_summary or {}).get("stranded") if state is not None else None
    if not figures or state.last_pass_at is None:
        return None
    return StrandedCapacity(as_of=state.last_pass_at, figures=figures)


@dataclass
class AdminDashboard:
    positions: Positions
    status: GuaranteeStatus
    free: int
    idle_gpus: list
    owed: list[Position] = field(default_factory=list)  # owed GPUs of their guarantee (`starved` > 0)
    stranded: StrandedCapacity | None = None  # as of the last scheduling pass
    # The scheduler's re-carves in the last 24 h (inventory.recarving: the rack page counts the same way).
    recarves: RecentRecarves | None = None
    # MIG devices no slice job holds (scheduling.slice_holders); each department's held ones: Position.slices
    idle_slices: IdleSlices | None = None

    @property
    def owed_gpus(self) -> int:
        return sum(p.starved for p in self.owed)

    @property
    def owed_beyond_free(self) -> int:
        """Owed GPUs the free ones cannot cover: reclaimed from borrowers by preemption."""
        return max(0, self.owed_gpus - self.free)

    @property
    def capacity(self) -> int:
        return self.positions.capacity

    @property
    def idle_more(self) -> int:
        return max(0, self.positions.idle - len(self.idle_gpus))


def admin_dashboard(now: datetime | None = None) -> AdminDashboard:
    """All departments side by side, capacity, oversubscription, and the idle GPUs cluster-wide."""
    now = now or timezone.now()
    settings = TenancySettings.load()
    positions = department_positions(now, settings)
    free = free_gpus_count(schedulable=positions.capacity)
    # Who is owed GPUs of its guarantee: guarantee_positions' `owed`, the one answer (Position.starved).
    owed = [p for p in positions if p.starved > 0]
    idle = longest_idle(
        idle_gpus_queryset(now=now, settings=settings),
        ADMIN_IDLE_LIMIT,
        *("department_name", "hostname", "index"),
    )
    idle_as_listed(positions, idle, ADMIN_IDLE_LIMIT)
    return AdminDashboard(
        positions=positions,
        status=positions.capacity_status(),
        free=free,
        idle_gpus=idle,
        owed=owed,
        stranded=last_stranded(),
        recarves=recent_recarves(now),
        idle_slices=idle_slices(),
    )
