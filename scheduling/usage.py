"""Read-side figures for the department pages and dashboards, and the glue to the pure fair-share arithmetic:
each department's position, who is short of their guarantee, idle and free GPUs, who holds a rack's GPUs.
The dashboards themselves are assembled in scheduling.dashboard_data.

Every figure is aggregated in SQL, so a page makes the same few queries whatever the number of racks, GPUs
or jobs, and every list is bounded. On PostgreSQL the database keeps each department's and project's held
and borrowed GPUs and job counts as allocations and jobs change (migration scheduling 0031's triggers:
`kept_held`, `held_gpus_by_department`), so the dashboards sum a few rows a department and count only what
moves with the clock (idle GPUs, from the idle activity rows); elsewhere they read each table once per
request: one GROUP BY over the running jobs' allocations (in use, idle), one over the active jobs (running,
pending). GPU counts start from the few unschedulable GPUs (tenancy.services).
Visibility comes from `visible_to(user)` / `led_by(user)` on the models and nowhere else.

Definitions the dashboards share (and `scheduling.tasks.record_quota_snapshots` records):

* **in use**: GPUs held by the department's running jobs (Allocation rows).
* **borrowed / in quota**: borrowed is the GPUs held by its running jobs flagged ``Job.over_quota`` (the
  badges; every pass recomputes them, scheduling.engine.scheduler, Standing: oldest jobs in quota while they
  fit, non-preemptible first); in quota is in use minus borrowed. So the cards, the chart, the API and the
  snapshots add up to the badges of its running jobs.
* **short of its guarantee**: `guarantee_status` / `Positions.capacity_status`, from
  `tenancy.quota.guarantee_positions` (the scheduler's own arithmetic): the GPUs of its guarantee that
  capacity cannot honour (cut; the shortfall banner) and the in-quota GPUs it asks for and does not hold
  (owed; the dashboards and the API's ``starved``). Nothing else computes who is short.
* **pending demand**: GPUs its pending jobs ask for.
* **slices**: the MIG devices its running slice jobs hold (scheduling.slices), and what they count for in
  GPUs: each slice its share of a GPU's compute slices, g/7 (Job.mig_compute_slices; `departments_with_jobs`
  sums them in the same query). Whole-GPU
  figures (in use, borrowed, fair share) leave them out; `Position.in_use_equivalents` adds them, and is
  what the department's limit and guarantee hold a slice job to (scheduling.services.slices).
* **idle**: `idle_gpus_queryset` (allocated to a running job, utilization under the threshold for the whole
  window, and the activity row fresh: tenancy.activity's one staleness rule, so a stale row is "no data",
  never idle and never working).
* **fair share**: `tenancy.quota.fair_share` of the schedulable GPUs, with demand = in use + pending demand
  and allocated = in use.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import (
    Count,
    DateTimeField,
    Exists,
    ExpressionWrapper,
    F,
    FilteredRelation,
    FloatField,
    Func,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce, Exp, Greatest
from django.utils import timezone
from django.utils.translation import gettext as _

from core.access import leads
from inventory.mig_layouts import COMPUTE_SLICES
from inventory.models import Gpu
from scheduling import fleet_counts
from scheduling.choices import ACTIVE_STATES, HOLDING_STATES, JobState
from scheduling.fleet_counts import schedulable_gpus
from scheduling.models import Allocation, IdleCount, Job, UsageRollup
from tenancy import activity
from tenancy.activity import fresh_activity, fresh_since
from tenancy.models import Department, GpuActivity, Membership, TenancySettings
from tenancy.quota import DepartmentQuota, GuaranteePosition, fair_share, guarantee_positions
from tenancy.services import count_of, schedulable_gpus_q, unschedulable_gpus
from tenancy.usage_decay import average_gpus, history_standing

# A Position's figures that a QuotaSnapshot records (scheduling.tasks) and the quota chart draws.
SNAPSHOT_FIELDS = ("guaranteed", "in_use", "in_quota", "borrowed", "fair_share", "pending_demand", "idle")


@dataclass
class Position:
    """One department's quota position now."""

    department: Department
    in_use: int
    borrowed: int  # GPUs held by its running jobs flagged over_quota (the badges)
    running_jobs: int
    pending_demand: int
    pending_jobs: int
    idle: int
    fair_share: int = 0
    over_quota_share: int = 0  # the borrowed part of the fair share
    starved: int = 0  # GPUs owed within its guarantee that it does not hold
    reclaimable: int = 0  # GPUs held beyond the fair share, which others may take back
    role: str = ""  # the viewing user's role in it, when the list page sets it
    slices: int = 0  # MIG devices its running slice jobs hold
    slice_equivalents: float = 0.0  # what they count for in GPUs (g/7 each)
    slices_borrowed_equivalents: float = 0.0  # of that, held by slice jobs flagged over quota
    guarantee: GuaranteePosition | None = None  # tenancy.quota.guarantee_positions: cut and owed
    # Held GPUs without utilization data as the beat counted them (IdleCount, while fresh); None: not kept
    # (count them: held_without_data).
    no_data: int | None = None

    @property
    def guaranteed(self) -> int:
        return self.department.guaranteed_gpus

    @property
    def in_quota(self) -> int:
        return self.in_use - self.borrowed

    @property
    def within_guarantee_share(self) -> int:
        """The part of the fair share within its guarantee (the rest, `over_quota_share`, is beyond it)."""
        return self.fair_share - self.over_quota_share

    @property
    def in_use_equivalents(self) -> float:
        """Whole GPUs in use plus its slices in GPU-equivalents."""
        return self.in_use + self.slice_equivalents

    @property
    def demand(self) -> int:
        return self.in_use + self.pending_demand

    def figures(self) -> dict[str, int]:
        """The figures a QuotaSnapshot records (SNAPSHOT_FIELDS), as the cards show them."""
        return {name: getattr(self, name) for name in SNAPSHOT_FIELDS}

    def as_quota(self) -> DepartmentQuota:
        department = self.department
        return DepartmentQuota(
            name=department.slug,
            guaranteed=department.guaranteed_gpus,
            weight=float(department.over_quota_weight),
            limit=department.limit_gpus,
            priority=department.priority,
            demand=self.demand,
            allocated=self.in_use,
        )


@dataclass
class Positions:
    capacity: int  # schedulable GPUs: tray up, GPU not unhealthy
    positions: list[Position]
    taken_at: datetime

    def __iter__(self):
        return iter(self.positions)

    def of(self, department: Department) -> Position:
        return next(p for p in self.positions if p.department.pk == department.pk)

    @property
    def guaranteed(self) -> int:
        return sum(p.guaranteed for p in self.positions)

    @property
    def in_use(self) -> int:
        return sum(p.in_use for p in self.positions)

    @property
    def idle(self) -> int:
        return sum(p.idle for p in self.positions)

    @property
    def pending_demand(self) -> int:
        return sum(p.pending_demand for p in self.positions)

    def capacity_status(self) -> GuaranteeStatus:
        """Who is short of their guarantee, from these figures, without counting anything again."""
        return GuaranteeStatus(self.capacity, tuple((p.department.name, p.guarantee) for p in self.positions))


@dataclass(frozen=True)
class GuaranteeStatus:
    """Who is short of their guarantee (tenancy.quota.guarantee_positions), for the banner and dashboards."""

    capacity: int
    positions: tuple[tuple[str, GuaranteePosition], ...]  # (department name, position), by name

    @property
    def guaranteed(self) -> int:
        return sum(p.guaranteed for _, p in self.positions)

    @property
    def shortfall(self) -> int:
        """GPUs promised beyond the schedulable capacity (failures)."""
        return max(0, self.guaranteed - self.capacity)

    @property
    def cut(self) -> list[tuple[str, int]]:
        """(department, GPUs of its guarantee capacity cannot honour), largest first: what the scheduler
        scales every guarantee down by (in proportion to it) while capacity is short."""
        cut = [(name, p.cut) for name, p in self.positions if p.cut > 0]
        return sorted(cut, key=lambda item: (-item[1], item[0]))

    @property
    def affected(self) -> list[str]:
        return [_("%(name)s (%(gpus)s short)") % {"name": name, "gpus": gpus} for name, gpus in self.cut]

    @property
    def owed(self) -> list[tuple[str, int]]:
        """(department, in-quota GPUs it asks for and does not hold); empty from `guarantee_status`."""
        return [(name, p.owed) for name, p in self.positions if p.owed > 0]


def guarantee_status() -> GuaranteeStatus:
    """`GuaranteeStatus` for the shortfall banner on every page: two queries (capacity, guarantees).

    The cut does not depend on demand, so the departments are taken as asking their full guarantee and
    holding nothing (`owed` is left empty: the dashboards have the real figures).
    """
    capacity = schedulable_gpus()
    quotas = [
        (name, DepartmentQuota(name=slug, guaranteed=guaranteed, demand=guaranteed, priority=priority))
        for name, slug, guaranteed, priority in Department.objects.values_list(
            "name", "slug", "guaranteed_gpus", "priority"
        )
    ]
    positions = guarantee_positions(capacity, [quota for _, quota in quotas])
    held_none = {slug: replace(p, held=p.in_quota) for slug, p in positions.items()}
    return GuaranteeStatus(capacity, tuple((name, held_none[quota.name]) for name, quota in quotas))


def departments_with_jobs() -> QuerySet[Department]:
    """Every department, by name, annotated with running_jobs, pending_jobs and pending_gpus, and its slice
    jobs' held_slices, held_slice_g and borrowed_slice_g (compute slices). One query.

    A single join to the department's active jobs (FilteredRelation: the join condition, not a WHERE, so a
    department without jobs keeps its row), grouped by department. Finished jobs are never read.
    """
    pending = Q(active_jobs__state=JobState.PENDING)
    holding = Q(active_jobs__state__in=HOLDING_STATES)
    slice_g = F("active_jobs__mig_slices") * F("active_jobs__mig_compute_slices")
    return (
        Department.objects.annotate(
            active_jobs=FilteredRelation("jobs", condition=Q(jobs__state__in=ACTIVE_STATES))
        )
        .annotate(
            running_jobs=Count("active_jobs", filter=Q(active_jobs__state__in=HOLDING_STATES)),
            pending_jobs=Count("active_jobs", filter=pending),
            pending_gpus=Coalesce(Sum("active_jobs__gpus", filter=pending), 0),
            # Slice jobs (scheduling.slices): MIG devices held, and their compute slices (g each; /7 = GPUs).
            held_slices=Coalesce(Sum("active_jobs__mig_slices", filter=holding), 0),
            held_slice_g=Coalesce(Sum(slice_g, filter=holding), 0),
            borrowed_slice_g=Coalesce(Sum(slice_g, filter=holding & Q(active_jobs__over_quota=True)), 0),
        )
        .order_by("name")
    )


# Each department's and project's held and borrowed GPUs, kept by the database in the transaction of every
# allocation's and job's change (PostgreSQL: migration scheduling 0031's triggers; a few rows a department
# to sum). Elsewhere (SQLite) `counted_held` counts the allocations.
HELD_TABLE = "scheduling_heldgpus"
HeldFigures = dict[tuple[int, int | None], tuple[int, int]]


def keeps_held() -> bool:
    """Whether the database keeps the held figures (the triggers run only on PostgreSQL)."""
    return connection.vendor == "postgresql"


def counted_held(department=None) -> HeldFigures:
    """{(department pk, project pk or None): (GPUs in use, borrowed)} counted from the running jobs'
    allocations (borrowed: held by jobs flagged over_quota), the pairs holding GPUs only; `department` (a
    Department or pk) narrows it. The figures `kept_held` reads are always equal to these. One query."""
    allocations = Allocation.objects.filter(job__state__in=HOLDING_STATES)
    if department is not None:
        allocations = allocations.filter(job__department=getattr(department, "pk", department))
    rows = (
        allocations.order_by()
        .values_list("job__department", "job__project")
        .annotate(in_use=Count("pk"), borrowed=Count("pk", filter=Q(job__over_quota=True)))
    )
    return {(dept, project): (in_use, borrowed) for dept, project, in_use, borrowed in rows}


def kept_held_sql(department=None) -> tuple[str, list]:
    """`kept_held`'s SQL (PostgreSQL) and parameters: rows (department, project, in use, borrowed)."""
    where, params = "", []
    if department is not None:
        where, params = "WHERE department_id = %s", [getattr(department, "pk", department)]
    return (
        f"SELECT department_id, project_id, SUM(in_use), SUM(borrowed) FROM {HELD_TABLE} {where} "
        "GROUP BY department_id, project_id HAVING SUM(in_use) <> 0 OR SUM(borrowed) <> 0",
        params,
    )


def kept_held(department=None) -> HeldFigures:
    """`counted_held`'s figures, read from the rows the database keeps (PostgreSQL: one query over a few
    rows a department, whatever the number of allocations), counted elsewhere."""
    if not keeps_held():
        return counted_held(department)
    sql, params = kept_held_sql(department)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {(dept, project): (in_use, borrowed) for dept, project, in_use, borrowed in cursor.fetchall()}


# The job counts of `departments_with_jobs`, which the database keeps too (PostgreSQL).
JOB_FIGURES = (
    "running_jobs",
    "pending_jobs",
    "pending_gpus",
    "held_slices",
    "held_slice_g",
    "borrowed_slice_g",
)
HELD_FIGURES = ("in_use", "borrowed", "idle")


# A kept idle count (IdleCount, the beat's every minute) stands for the live one this long after it was taken:
# one missed beat; after that the pages count again.
IDLE_KEPT_FOR = timedelta(minutes=2)


def _held_idle(now: datetime, settings: TenancySettings) -> QuerySet:
    """The idle GPUs running jobs hold, counted per department: (department pk, idle) rows. From the
    allocations (no join through the GPU table: a GPU has at most one): fresh activity rows low for the
    whole window (`idle_activity_queryset`, a fraction of the GPUs) whose job has held the GPU for the
    whole window too (`held_through`). Exactly the GPUs `idle_gpus_queryset` lists."""
    idle = idle_activity_queryset(now, settings)
    held = held_through(idle_cutoff(now, settings)[0])
    return (
        Allocation.objects.filter(held, job__state__in=HOLDING_STATES, gpu__in=idle.values("gpu"))
        .order_by()
        .values_list("job__department")
        .annotate(idle=Count("pk"))
    )


def keep_idle_counts(now: datetime | None = None) -> int:
    """Count every department's idle GPUs now (`_held_idle`) and its held GPUs without utilization data
    (`without_data_by_department`), and keep the figures (IdleCount, one row per department, 0 included),
    for the pages to read while fresh (`held_gpus_by_department`, `held_without_data`). The beat's, every
    minute (scheduling.tasks.keep_idle_counts); PostgreSQL only, where the pages read them (elsewhere the
    pages count, and nothing is written). Returns the departments counted."""
    if not keeps_held():
        return 0
    now = now or timezone.now()
    counted = dict(_held_idle(now, TenancySettings.load()))
    without = without_data_by_department(now)
    rows = [
        IdleCount(department_id=pk, idle=counted.get(pk, 0), no_data=without.get(pk, 0), taken_at=now)
        for pk in Department.objects.order_by("pk").values_list("pk", flat=True)
    ]
    IdleCount.objects.bulk_create(  # an upsert: two beats counting at once never collide
        rows,
        update_conflicts=True,
        unique_fields=["department"],
        update_fields=["idle", "no_data", "taken_at"],
    )
    return len(rows)


def held_gpus_by_department(
    now: datetime, settings: TenancySettings
) -> tuple[dict[int, dict[str, int]], bool]:
    """({department pk: {in_use, borrowed, idle}} for the departments whose jobs count for something, with
    `JOB_FIGURES` too where the database keeps them (PostgreSQL), and `no_data` when the beat's counts were
    read; whether they were). One query.

    In use and borrowed as `kept_held` has them (summed over projects); idle counted from the idle activity
    rows held by a running job (`_held_idle`). PostgreSQL: the kept rows and the idle counts in one
    statement, the idle counts the beat kept (IdleCount) when it took them less than `IDLE_KEPT_FOR` before
    `now`, else counted (the branch not taken is not run: its condition is a one-time filter); elsewhere one
    pass over the running jobs' allocations counts all three (and `departments_with_jobs` the job figures).
    """
    if not keeps_held():
        idle = idle_activity_queryset(now, settings)
        held = held_through(idle_cutoff(now, settings)[0])
        rows = (
            Allocation.objects.filter(job__state__in=HOLDING_STATES)
            .order_by()
            .values_list("job__department")
            .annotate(
                in_use=Count("pk"),
                borrowed=Count("pk", filter=Q(job__over_quota=True)),
                idle=Count("pk", filter=Q(gpu__in=idle.values("gpu")) & held),
            )
        )
        return {dept: dict(zip(HELD_FIGURES, values, strict=True)) for dept, *values in rows}, False
    idle_sql, idle_params = _held_idle(now, settings).query.sql_with_params()
    kept = ("in_use", "borrowed", *JOB_FIGURES)
    names = [*kept, "idle", "no_data"]
    zeros = "0, " * len(kept)
    counts, taken = IdleCount._meta.db_table, IdleCount._meta.get_field("taken_at")
    window = [taken.get_db_prep_value(moment, connection) for moment in (now - IDLE_KEPT_FOR, now)]
    fresh = f"SELECT 1 FROM {counts} WHERE {taken.column} >= %s AND {taken.column} <= %s"
    figures: dict[int, dict[str, int]] = {}
    read_kept = False
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT department_id, {', '.join(f'SUM({name})' for name in kept)}, 0, 0, FALSE "
            f"FROM {HELD_TABLE} GROUP BY department_id "
            f"UNION ALL SELECT department_id, {zeros}idle, no_data, TRUE FROM {counts} "
            f"WHERE {taken.column} >= %s AND {taken.column} <= %s "
            f"UNION ALL SELECT department_id, {zeros}idle, 0, FALSE "
            f"FROM ({idle_sql}) idle(department_id, idle) WHERE NOT EXISTS ({fresh})",
            [*window, *idle_params, *window],
        )
        for dept, *values, from_kept in cursor.fetchall():
            total = figures.setdefault(dept, dict.fromkeys(names, 0))
            for name, value in zip(names, values, strict=True):
                total[name] += value
            read_kept = read_kept or from_kept
    return figures, read_kept


def department_positions(now: datetime | None = None, settings: TenancySettings | None = None) -> Positions:
    """Every department's position and fair share, in a fixed handful of queries.

    The departments with their job counts, the GPUs they hold (and how many of those are idle), and the
    schedulable GPUs (one count); the settings row too unless `settings` is passed. Fair share is a property
    of the whole cluster, so it is always computed over all departments; pages then show only the ones the
    user may see.
    """
    now = now or timezone.now()
    settings = settings or TenancySettings.load()
    kept = keeps_held()  # PostgreSQL keeps the job figures too: the departments alone, not their jobs
    departments = list(Department.objects.order_by("name") if kept else departments_with_jobs())
    held, kept_counts = held_gpus_by_department(now, settings)
    positions = []
    for department in departments:
        figures = held.get(department.pk, {})
        if kept:
            for name in JOB_FIGURES:
                setattr(department, name, figures.get(name, 0))
        positions.append(
            Position(
                department=department,
                in_use=figures.get("in_use", 0),
                borrowed=figures.get("borrowed", 0),
                running_jobs=department.running_jobs,
                pending_demand=department.pending_gpus,
                pending_jobs=department.pending_jobs,
                idle=figures.get("idle", 0),
                no_data=figures.get("no_data", 0) if kept_counts else None,
                slices=department.held_slices,
                slice_equivalents=department.held_slice_g / COMPUTE_SLICES,
                slices_borrowed_equivalents=department.borrowed_slice_g / COMPUTE_SLICES,
            )
        )
    capacity = schedulable_gpus()
    quotas = [p.as_quota() for p in positions]
    shares = fair_share(capacity, quotas).shares
    guarantees = guarantee_positions(capacity, quotas)
    for position in positions:
        share = shares[position.department.slug]
        position.fair_share = share.fair_share
        position.over_quota_share = share.over_quota
        position.reclaimable = share.reclaimable
        position.guarantee = guarantees[position.department.slug]
        position.starved = position.guarantee.owed
    return Positions(capacity=capacity, positions=positions, taken_at=now)


# ------------------------------------------------------------------------------------------ list page


def department_list(user, positions: Positions | None = None) -> list[Position]:
    """The positions of the departments `user` may see, with the user's role in each.

    `positions`: `department_positions()` when the caller has it already.
    """
    membership = Membership.objects.filter(user=user, department=OuterRef("pk"))
    roles = dict(
        Department.objects.visible_to(user)
        .annotate(role=Subquery(membership.values("role")[:1]))
        .values_list("pk", "role")
    )
    if positions is None:
        positions = department_positions()
    visible = [p for p in positions if p.department.pk in roles]
    for position in visible:
        position.role = roles[position.department.pk] or ""
    return visible


def visible_department(user, slug: str) -> Department | None:
    return Department.objects.visible_to(user).filter(slug=slug).first()


# ------------------------------------------------------------------------------------ idle and free GPUs


def idle_cutoff(now: datetime, settings: TenancySettings) -> tuple[datetime, float]:
    """The idle test on a GPU's activity row: (``low_since`` at the latest, ``utilization`` below). The row
    must be fresh too (``tenancy.activity.fresh_since``): a stale low row is "no data", not idle."""
    return now - timedelta(minutes=settings.idle_window_minutes), settings.idle_threshold_percent


def idle_activity_queryset(now: datetime | None = None, settings: TenancySettings | None = None) -> QuerySet:
    """Fresh activity rows of GPUs under the threshold for the whole window, held by a job or not.

    `idle_gpus_queryset` is these GPUs narrowed to the ones a running job holds; the dashboards count the
    idle GPUs per department with it (scheduling.usage.held_gpus_by_department).
    """
    now = now or timezone.now()
    low_since, threshold = idle_cutoff(now, settings or TenancySettings.load())
    return fresh_activity(now).filter(low_since__lte=low_since, utilization__lt=threshold)


def held_gpus() -> QuerySet:
    """The GPUs a starting or running job holds, one row each (``gpu_id``) with when its job got it
    (``since``: its placement, its start when it has none): tenancy.activity keeps a run of low samples only
    for these (registered by scheduling.apps: tenancy is a layer below)."""
    return (
        Allocation.objects.filter(job__state__in=HOLDING_STATES)
        .order_by()
        .values("gpu_id")
        .annotate(since=Coalesce("job__placed_at", "job__started_at"))
    )


activity.use_held_gpus(held_gpus)  # once, at import (scheduling.apps imports this module when ready)


def held_through(cutoff: datetime, prefix: str = "") -> Q:
    """An allocation (`prefix` the path to it, e.g. "allocations__") whose job has held its GPU since
    `cutoff` or earlier: placed then (``placed_at``, set by each placement), started then when it has no
    placement time, and always when it has neither (a row from before either was kept)."""
    placed, started = f"{prefix}job__placed_at", f"{prefix}job__started_at"
    return (
        Q(**{f"{placed}__lte": cutoff})
        | Q(**{f"{placed}__isnull": True, f"{started}__lte": cutoff})
        | Q(**{f"{placed}__isnull": True, f"{started}__isnull": True})
    )


def idle_gpus_queryset(
    now: datetime | None = None, department=None, settings: TenancySettings | None = None
) -> QuerySet[Gpu]:
    """GPUs allocated to a running job whose utilization has stayed under the threshold for the window
    while that job held them (`held_through`; ``idle_since``: the later of the low run's start and the
    job's placement).

    One query (two without `settings`, the loaded TenancySettings); each row is annotated with ``job_id``,
    ``job_name``, ``submitted_by`` (the username of the person who submitted the job, None for a job nobody
    submitted through the portal), ``department_id``, ``department_name``, ``hostname``, ``utilization`` and
    ``idle_since``.
    `department` (a Department or its pk) narrows it.
    """
    now = now or timezone.now()
    low_since, threshold = idle_cutoff(now, settings or TenancySettings.load())
    conditions = {
        "allocations__job__state__in": HOLDING_STATES,
        "activity__sampled_at__gte": fresh_since(now),  # the one staleness rule: a stale row is no data
        "activity__low_since__lte": low_since,
        # low_since was set against the threshold of its time; an admin may have raised or lowered it since.
        "activity__utilization__lt": threshold,
    }
    if department is not None:
        conditions["allocations__job__department"] = getattr(department, "pk", department)
    # One filter() call, so every condition is on the same allocation join (a GPU has at most one).
    # Low for the window while this job held it: a GPU that sat free and low for hours is not its new job's
    # idle GPU the minute it is placed (an exporter samples every GPU, held or not).
    queryset = Gpu.objects.filter(held_through(low_since, "allocations__"), **conditions)
    return queryset.annotate(
        job_id=F("allocations__job_id"),
        job_name=F("allocations__job__name"),
        submitted_by=F("allocations__job__submitted_by__username"),
        department_id=F("allocations__job__department_id"),
        department_name=F("allocations__job__department__name"),
        hostname=F("tray__hostname"),
        utilization=F("activity__utilization"),
        idle_since=Greatest(
            "activity__low_since",
            Coalesce("allocations__job__placed_at", "allocations__job__started_at", "activity__low_since"),
        ),
    ).order_by("department_name", "job_name", "hostname", "index")


# `longest_idle` first looks for its GPUs among the oldest low runs, this many of them per GPU listed.
CANDIDATES_PER_ROW = 20


def longest_idle(queryset: QuerySet[Gpu], limit: int, *ties: str) -> list[Gpu]:
    """The first `limit` GPUs of `queryset` (an `idle_gpus_queryset`, maybe narrowed) longest idle first
    (``idle_since``, then `ties`), in two queries the low-run index serves (three when fewer than `limit`
    are among the oldest low runs, four when some are beyond them).

    ``idle_since`` is the later of the low run's start and the job's placement, an expression no index
    orders, so sorting every candidate by it reads a big department's idle GPUs whole (60 ms at 10,000
    racks). Instead: `limit` of them early by the run's start; the latest ``idle_since`` among them,
    `bound`, is at least the `limit`-th smallest of all (any `limit` of them give such a bound), and
    ``idle_since`` is never before the run's start, so every GPU of the true first `limit` has a run started
    by `bound`: those are sorted.

    The `limit` are looked for among the GPUs of the `CANDIDATES_PER_ROW` x `limit` oldest low runs (the
    low-run index's first entries), not by the whole query in the run's order: PostgreSQL cannot tell how
    many low runs belong to a running job (or to a department), so it joins every idle GPU to its job and
    sorts them (35,000 at 10,000 racks: 300-600 ms). Only when fewer than `limit` are there and there are
    more low runs is the whole query read.
    """
    window = limit * CANDIDATES_PER_ROW
    oldest = GpuActivity.objects.filter(low_since__isnull=False).order_by("low_since")
    by_run = list(
        queryset.filter(pk__in=oldest.values("gpu_id")[:window]).order_by("activity__low_since", *ties)[
            :limit
        ]
    )
    if len(by_run) < limit and oldest[window : window + 1].exists():
        by_run = list(queryset.order_by("activity__low_since", *ties)[:limit])
    if not by_run:
        return []
    bound = max(gpu.idle_since for gpu in by_run)
    return list(queryset.filter(activity__low_since__lte=bound).order_by("idle_since", *ties)[:limit])


def idle_as_listed(positions: Iterable[Position], listed: list[Gpu], limit: int) -> None:
    """When the idle list (`longest_idle`, at most `limit` GPUs) holds every idle GPU of the `positions`'
    departments (fewer than `limit`), set their idle figures from it, so that a page's count and its list
    agree: the figures may be the beat's (IdleCount, up to a minute old) where the list is read now."""
    if len(listed) >= limit:
        return
    by_department: dict[int, int] = {}
    for gpu in listed:
        by_department[gpu.department_id] = by_department.get(gpu.department_id, 0) + 1
    for position in positions:
        position.idle = by_department.get(position.department.pk, 0)


# `held_without_data`: stale activity rows are "few" below 1 in STALE_FEW of them.
STALE_FEW = 4


def held_without_data(
    department, now: datetime | None = None, settings: TenancySettings | None = None
) -> int:
    """How many GPUs the department's running jobs hold with no utilization data: no activity row, or one
    not refreshed for ``tenancy.activity.STALE_AFTER`` (the one staleness rule: such a row is neither idle
    nor working). Idle rows are fresh (`idle_activity_queryset`), so held = idle + working + no data, and
    "no data" never reads as working. `department` may be a list of departments or ids (a person's home: all
    of theirs). `settings` is accepted for the callers' symmetry; the count does not need it.

    Counted now (`without_data_by_department`: two queries, a third when some activity row is stale and every
    GPU has one); the pages take the beat's count instead while it is fresh (`Position.no_data`).
    """
    several = department if isinstance(department, list | tuple | set) else [department]
    ids = [getattr(one, "pk", one) for one in several]
    return sum(without_data_by_department(now or timezone.now(), ids).values())


def without_data_of(positions: list[Position], now: datetime | None = None) -> int:
    """The held GPUs without utilization data of these positions' departments, as a page shows them: the
    beat's counts while fresh (`Position.no_data`, all of them kept), else counted (`held_without_data`)."""
    if not positions:
        return 0
    if all(p.no_data is not None for p in positions):
        return sum(p.no_data or 0 for p in positions)
    return held_without_data([p.department.pk for p in positions], now)


def without_data_by_department(now: datetime, ids: list[int] | None = None) -> dict[int, int]:
    """{department pk: held GPUs with no utilization data} (`held_without_data`), counted now, for the
    departments of `ids` (None: every department); a department with none may be left out."""
    held = Allocation.objects.filter(job__state__in=HOLDING_STATES)
    if ids is not None:
        held = held.filter(job__department__in=ids)

    def per_department(allocations: QuerySet, department: str = "job__department") -> dict[int, int]:
        return dict(allocations.order_by().values_list(department).annotate(n=Count("pk")))

    missing, stale, rows = _activity_gaps(now)
    if not missing:
        # Every GPU has an activity row (a telemetry source samples every GPU, held or not): only a stale
        # row leaves a held GPU without data, so the few stale rows are joined, not every held GPU (issue
        # 32: the anti-join below is ~120 ms for a department holding 290,000 GPUs at 10,000 racks).
        if not stale:
            return {}
        if stale == rows:  # the telemetry stopped: every held GPU is without data (not 290,000 probes)
            return per_department(held)
        stale_rows = GpuActivity.objects.filter(sampled_at__lt=fresh_since(now)).values("gpu")
        if stale * STALE_FEW > rows:  # many: the department's held GPUs probed against the stale rows
            return per_department(held.filter(gpu__in=stale_rows))
        # Few rows stale (a rack's exporter down): from the stale rows to the allocations on their GPUs,
        # each one's job looked up by its key (a subquery per row), not the department's running jobs joined
        # to every allocation and probed against the activity rows (300 ms at 10,000 racks however few rows
        # are stale; this: ~40 ms for 1% of them, as much as that way at a quarter).
        holder = (
            Job.objects.filter(pk=OuterRef("job_id"), state__in=HOLDING_STATES)
            .order_by()
            .values("department_id")
        )
        on_stale = Allocation.objects.filter(gpu__in=stale_rows).annotate(holder=Subquery(holder))
        on_stale = on_stale.filter(holder__isnull=False) if ids is None else on_stale.filter(holder__in=ids)
        return per_department(on_stale, "holder")
    # NOT EXISTS, not NOT IN: PostgreSQL plans `NOT IN (subquery)` as a scan of the subquery per row once
    # it outgrows work_mem (10,000 racks: 25 minutes for one count), NOT EXISTS as an anti-join.
    fresh = fresh_activity(now).filter(gpu=OuterRef("gpu"))
    return per_department(held.exclude(Exists(fresh)))


def _activity_gaps(now: datetime) -> tuple[int, int, int]:
    """(GPUs with no activity row, activity rows not fresh at `now`, activity rows) in one statement, so
    under one snapshot: an activity row is one GPU's and goes with it, so the difference of the two counts is
    exactly the GPUs without one. The GPUs are counted only when the inventory changed
    (scheduling.fleet_counts: kept otherwise); the activity rows in one scan (~30 ms at 720,000 GPUs)."""
    rows = GpuActivity._meta
    sampled = rows.get_field("sampled_at")
    gpus, seen, stale = fleet_counts.gpus_with(
        "seen.n, COALESCE(seen.stale, 0)",
        f"FROM (SELECT COUNT(*) AS n, SUM(CASE WHEN {sampled.column} < %s THEN 1 ELSE 0 END) AS stale "
        f"FROM {rows.db_table}) seen",
        [sampled.get_db_prep_value(fresh_since(now), connection)],
    )
    return max(0, gpus - seen), stale, seen


def free_gpus_queryset() -> QuerySet[Gpu]:
    """Schedulable GPUs (tray up, not unhealthy) that no job holds."""
    return Gpu.objects.filter(schedulable_gpus_q(), allocations__isnull=True)


def free_gpus_count(schedulable: int | None = None) -> int:
    """How many GPUs `free_gpus_queryset` selects, counted without joining every GPU to the allocations.

    Free = schedulable GPUs minus the schedulable GPUs some job holds, and those are all allocations minus
    the ones on unschedulable GPUs (few: `unschedulable_gpus`); PostgreSQL reads all allocations' number
    from the figures its triggers keep (`kept_held`'s table), elsewhere they are counted. Pass `schedulable`
    (`schedulable_gpus()`) when the caller has counted it already: then this is one query.
    """
    if schedulable is None:
        schedulable = schedulable_gpus()
    on_unschedulable = Allocation.objects.filter(gpu__in=unschedulable_gpus())
    if not keeps_held():
        return schedulable - Allocation.objects.aggregate(n=Count("*") - count_of(on_unschedulable))["n"]
    # PostgreSQL: every allocation as the triggers count them (migration scheduling 0031's `allocated`).
    sql, params = (
        on_unschedulable.order_by()
        .annotate(n=Func(template="COUNT(*)", output_field=IntegerField()))
        .values("n")
        .query.sql_with_params()
    )
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT (SELECT COALESCE(SUM(allocated), 0) FROM {HELD_TABLE}) - ({sql})", params)
        return schedulable - cursor.fetchone()[0]


# ------------------------------------------------------------------------------ who holds a rack's GPUs


def holder_annotations(user) -> dict:
    """Annotations for a GPU query: the job holding each GPU (an Allocation exists only while its job is
    starting or running; one per GPU, so the joins never multiply rows) and whether `user` may see it."""
    return {
        "held_job_id": F("allocations__job_id"),
        "held_job_name": F("allocations__job__name"),
        "held_job_department": F("allocations__job__department__name"),
        "held_job_submitter": F("allocations__job__submitted_by__username"),
        "held_job_visible": Exists(Job.objects.visible_to(user).filter(pk=OuterRef("allocations__job_id"))),
    }


# --- historical fair share -------------------------------------------------------------------------------


class _EpochSeconds(Func):
    """A timestamp as seconds since 1970 (a float), in SQL: PostgreSQL's date_part, SQLite's julianday (Django
    stores SQLite datetimes as UTC text, which julianday reads). Not EXTRACT: since PostgreSQL 14 it computes
    a numeric, a third of the running jobs' usage aggregate's time at 10,000 racks (issue 32)."""

    template = "date_part('epoch', %(expressions)s)"
    output_field = FloatField()

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(
            compiler, connection, template="((julianday(%(expressions)s) - 2440587.5) * 86400.0)", **extra
        )


# Usage older than this many half-lives is under 2 ** -20 of what it was: left out of the query.
FORGOTTEN_AFTER_HALF_LIVES = 20


def _usage_by_owner(
    jobs, at: datetime, half_life_s: float, running: bool = False
) -> dict[tuple[int, int | None], float]:
    """Decayed GPU-seconds at `at` of `jobs` (tenancy.usage_decay.interval_usage, summed in SQL; a slice
    job's in GPU-equivalents) per (department pk, project pk or None), in one aggregate query: each job's run
    from its start (started, else placed) to its end (finished, or `at` while it holds its GPUs).
    `running`: only the jobs not finished are summed (NOT_FINISHED, the aggregate's FILTER, not a WHERE:
    `decayed_usage`), each run ending at `at`, which takes one exponential a job instead of two (the
    running jobs' sum is read on every department page: 47,700 jobs at 10,000 racks)."""
    rate = math.log(2) / half_life_s
    moment = at.timestamp()
    start = Exp((_EpochSeconds(Coalesce("started_at", "placed_at")) - Value(moment)) * Value(rate))
    # gpus * h / ln 2 * (2 ** -((at - end) / h) - 2 ** -((at - start) / h)), as exponentials (the first
    # is 1 for a run ending at `at`); a slice job's GPUs are its GPU-equivalents (scheduling.slices: g/7 a
    # slice), so fair share counts slices too.
    if running:
        end = Value(1.0)
    else:
        at_end = _EpochSeconds(Coalesce("finished_at", Value(at, output_field=DateTimeField())))
        end = Exp((at_end - Value(moment)) * Value(rate))
    gpus = F("gpus") + F("mig_slices") * F("mig_compute_slices") * Value(1.0 / COMPUTE_SLICES)
    value = ExpressionWrapper(gpus * Value(1.0 / rate), output_field=FloatField()) * (end - start)
    rows = (
        jobs.filter(Q(started_at__isnull=False) | Q(placed_at__isnull=False))
        .order_by()
        .values("department_id", "project_id")
        .annotate(usage=Sum(value, output_field=FloatField(), filter=NOT_FINISHED if running else None))
        .values_list("department_id", "project_id", "usage")
    )
    return {(department, project): usage or 0.0 for department, project, usage in rows}


# The jobs whose run has not ended: holding their GPUs (HOLDING), not finished (NOT_FINISHED).
HOLDING = Q(state__in=HOLDING_STATES)
NOT_FINISHED = Q(finished_at__isnull=True)


def _finished(now: datetime, half_life_s: float) -> Q:
    """The jobs that finished by `now`, less those that ended more than FORGOTTEN_AFTER_HALF_LIVES
    half-lives before."""
    cutoff = now - timedelta(seconds=FORGOTTEN_AFTER_HALF_LIVES * half_life_s)
    return Q(finished_at__gte=cutoff, finished_at__lte=now)


def roll_up_usage(now: datetime | None = None) -> int:
    """Write the finished jobs' decayed usage at `now` (UsageRollup, one row per department and project
    that has any), in place of the rows before: the beat's, every five minutes (scheduling.tasks.
    snapshot_quotas). Returns how many rows; 0 with the half-life setting off (the rows are removed). One
    aggregate over the finished jobs of the last FORGOTTEN_AFTER_HALF_LIVES half-lives (4 s of the
    database at 10,000 racks and a year of jobs; every reader then reads a few rows instead)."""
    half_life_s = settings.RACKPLANE_FAIRSHARE_HALF_LIFE_S
    now = now or timezone.now()
    usage = {}
    if half_life_s is not None:
        usage = _usage_by_owner(Job.objects.filter(_finished(now, half_life_s)), now, half_life_s)
    rows = [
        UsageRollup(
            department_id=department, project_id=project, usage=value, through=now, half_life_s=half_life_s
        )
        for (department, project), value in usage.items()
    ]
    with transaction.atomic():
        UsageRollup.objects.all().delete()
        UsageRollup.objects.bulk_create(rows)
    return len(rows)


def decayed_usage(now: datetime, half_life_s: float) -> dict[tuple[int, int | None], float]:
    """Decayed GPU-seconds (tenancy.usage_decay.interval_usage; a slice job's in GPU-equivalents) per
    (department pk, project pk or None) at `now`: each job's run from its start (started, else placed) to
    its end (finished, or now while it holds its GPUs). Jobs that ended more than
    `FORGOTTEN_AFTER_HALF_LIVES` half-lives ago are not read. A preempted job's earlier runs are not kept on
    its row (it is pending again, its start cleared or replaced at its next start): they are not counted.

    From the beat's rollup when there is one for this half-life (roll_up_usage): its rows decayed from their
    moment to `now` (usage decays by one factor, 2 ** -(elapsed / half-life)), plus, in one aggregate, the
    jobs still running and those that finished after it (the index on finished_at): two small reads
    instead of a year of jobs. Without one (before the beat's first run, or the half-life changed), one
    aggregate over every job that counts. A job whose end is written later than the rollup's moment but
    dated before it is counted from the next rollup on."""
    rollup = list(
        UsageRollup.objects.filter(half_life_s=half_life_s, through__lte=now).values_list(
            "department_id", "project_id", "usage", "through"
        )
    )
    throughs = {through for *_rest, through in rollup}
    totals: dict[tuple[int, int | None], float] = {}
    if len(throughs) == 1:
        [through] = throughs
        decay = 2.0 ** (-(now - through).total_seconds() / half_life_s)
        totals = {(department, project): usage * decay for department, project, usage, _at in rollup}
        ended = Q(finished_at__gt=through, finished_at__lte=now)
    else:  # none (or a rollup replaced under a reader without a snapshot): every job that counts
        ended = _finished(now, half_life_s)
    # Two aggregates, the running jobs' and the ended ones', not one over `HOLDING & NOT_FINISHED | ended`:
    # PostgreSQL multiplies the selectivities of "holding" and "not finished" (47,700 running jobs at 10,000
    # racks estimated as 59), then sorts them to group, spilling to disk (issue 32: 102 ms; now ~35). The
    # running ones are read by their state (the running-jobs index) and "not finished" is the sum's filter.
    parts = (
        _usage_by_owner(Job.objects.filter(HOLDING), now, half_life_s, running=True),
        _usage_by_owner(Job.objects.filter(ended), now, half_life_s),
    )
    for part in parts:
        for owner, value in part.items():
            totals[owner] = totals.get(owner, 0.0) + value
    return {owner: max(0.0, value) for owner, value in totals.items()}


def department_usage(usage: dict[tuple[int, int | None], float]) -> dict[int, float]:
    """`decayed_usage` summed per department pk."""
    total: dict[int, float] = {}
    for (department, _day), value in usage.items():
        total[department] = total.get(department, 0.0) + value
    return total


@dataclass(frozen=True)
class FairShareHistory:
    """A department's historical fair share, as its page shows it (leads and admins only)."""

    gpu_hours: float  # decayed GPU-hours
    average_gpus: float  # GPUs held on average over the decayed window
    standing: float  # average beyond the guarantee per unit of weight (tenancy.usage_decay.history_standing)
    rank: int | None  # 1: borrows first among the departments that may borrow; None: weight 0
    borrowers: int  # departments that may borrow (over-quota weight above 0)
    half_life_days: float
    orders_borrowers: bool  # whether the pass uses it (settings.RACKPLANE_FAIRSHARE_ORDERS_BORROWERS)


def fairshare_history(
    user, department: Department, now: datetime | None = None, *, leads_it: bool | None = None
) -> FairShareHistory | None:
    """The department's decayed usage and its rank among borrowers, for a lead of it or an admin (None for
    anyone else, and when the half-life setting is off). Two queries: the departments, the usage.
    `leads_it`: whether `user` leads it, when the caller asked already (the department page has)."""
    half_life_s = settings.RACKPLANE_FAIRSHARE_HALF_LIFE_S
    if half_life_s is None or not (leads(user, department) if leads_it is None else leads_it):
        return None
    now = now or timezone.now()
    usage = department_usage(decayed_usage(now, half_life_s))
    standings = {
        pk: history_standing(usage.get(pk, 0.0), guaranteed, float(weight), half_life_s)
        for pk, guaranteed, weight in Department.objects.values_list(
            "pk", "guaranteed_gpus", "over_quota_weight"
        )
    }
    borrowers = sorted((s, pk) for pk, s in standings.items() if math.isfinite(s))
    rank = next((i for i, (_, pk) in enumerate(borrowers, 1) if pk == department.pk), None)
    own = usage.get(department.pk, 0.0)
    return FairShareHistory(
        gpu_hours=own / 3600,
        average_gpus=average_gpus(own, half_life_s),
        standing=standings.get(department.pk, math.inf),
        rank=rank,
        borrowers=len(borrowers),
        half_life_days=half_life_s / 86400,
        orders_borrowers=settings.RACKPLANE_FAIRSHARE_ORDERS_BORROWERS,
    )
