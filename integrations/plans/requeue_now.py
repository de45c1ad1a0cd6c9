"""A busy rack's "Requeue now": re-carve it without waiting for the checkpointable jobs in the plan's way.

The jobs on the trays a plan moves are of two kinds, by their priority class's fault policy
(scheduling.requeue.checkpointable, set on the Health settings page): checkpointable ones may be stopped and
requeued, the others are waited for. `summarize` says which is which and when the plan would apply (the
requeued jobs' grace periods, the waited-for jobs' time limits); `requeue_now` saves the plan with drain
first, applies it (its busy trays are drained) and asks the checkpointable jobs to checkpoint, requeued at
the end of the grace period through the path a failing tray's jobs take (scheduling.requeue: back in the
queue with their place in line, placed elsewhere or later, audited, their people notified). The plan then
applies once its trays are free, as any drain-first plan does (integrations.tasks.follow_active_plans).

One transaction, with the locks the plan service takes in its order: the rack, the plan, then the jobs.
A refusal (another plan in flight, nothing checkpointable in the way) leaves nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from core.enqueue import enqueue
from core.task_names import FOLLOW_ACTIVE_PLANS
from integrations.plans.service import (
    PlanConflict,
    apply_plan,
    create_plan,
    drain_reason,
    holding_on,
    in_flight,
)
from inventory.choices import PlanStatus
from inventory.models import PartitionPlan, Rack
from inventory.planning import PlanCheck, PlannedPartition
from scheduling import requeue as decisions
from scheduling.models import SliceAllocation


@dataclass(frozen=True)
class JobInTheWay:
    pk: int
    name: str
    slots: tuple[int, ...]
    checkpointable: bool
    grace_s: int  # a checkpointable job's time to checkpoint before it is requeued
    ends_in_s: float | None  # seconds until it reaches its time limit (None: it has no limit)
    ends_at: datetime | None = None  # when it reaches its time limit (None: it has no limit)
    department: str = ""  # whose job it is: its department's name
    submitter: str = ""  # and the username of whoever submitted it ("" when the user is gone)
    # When it is requeued, already asked to checkpoint ("Requeue now", a window's requeue, a fault): its
    # grace period ends then (scheduling.requeue); None: it is not being requeued.
    requeue_at: datetime | None = None

    @property
    def grace_minutes(self) -> float:
        return self.grace_s / 60


@dataclass(frozen=True)
class LatestApply:
    """When a busy plan applies at the latest, and which job sets that time (`latest_apply`)."""

    at: datetime | None  # None: `job` has no time limit, so no latest time can be given
    job: JobInTheWay | None  # whose end comes last (or the one without a limit); None: nothing waited for
    by_limit: bool  # `at` is `job`'s time limit ending (False: a requeued job's grace period)


def latest_apply(requeued: list[JobInTheWay], waited: list[JobInTheWay], now: datetime) -> LatestApply:
    """When a plan applies at the latest once the `requeued` jobs are requeued (each within its grace period)
    and the `waited` ones have reached their time limits; drain first is the case with nothing requeued. The
    one rule for the busy summary, the preview, "Requeue now" and a draining plan's progress page."""
    if unlimited := next((job for job in waited if job.ends_at is None), None):
        return LatestApply(None, unlimited, by_limit=True)
    # A job already asked to checkpoint is requeued when its grace period ends (requeue_at), not a whole
    # grace period from now.
    ends = [
        (max(now, job.requeue_at) if job.requeue_at else now + timedelta(seconds=job.grace_s), False, job)
        for job in requeued
    ]
    ends += [(max(now, job.ends_at), True, job) for job in waited if job.ends_at is not None]
    if not ends:
        return LatestApply(now, None, by_limit=False)
    at, by_limit, job = max(ends, key=lambda end: (end[0], end[1]))
    return LatestApply(at, job, by_limit)


@dataclass
class RequeueSummary:
    """The jobs in a plan's way: requeued by "Requeue now" (checkpointable) or waited for."""

    requeued: list[JobInTheWay] = field(default_factory=list)
    waited: list[JobInTheWay] = field(default_factory=list)
    now: datetime = field(default_factory=timezone.now)

    @property
    def count(self) -> int:
        return len(self.requeued) + len(self.waited)

    @property
    def after_requeue(self) -> LatestApply:
        """When the plan applies at the latest after "Requeue now"."""
        return latest_apply(self.requeued, self.waited, self.now)

    @property
    def drain_first(self) -> LatestApply:
        """When the plan applies at the latest with drain first: every job in its way reaches its limit."""
        return latest_apply([], self.requeued + self.waited, self.now)

    @property
    def applies_within_s(self) -> float | None:
        """Seconds until the plan applies at the latest after "Requeue now"; None when a waited-for job has no
        time limit."""
        at = self.after_requeue.at
        return None if at is None else (at - self.now).total_seconds()

    @property
    def applies_by(self) -> datetime | None:
        return self.after_requeue.at


def jobs_in_the_way(rack: Rack, slots, now: datetime | None = None) -> list[JobInTheWay]:
    """The jobs holding GPUs on `rack`'s trays `slots`, each once with its trays, by rack order. One query."""
    now = now or timezone.now()
    rows: dict[int, dict] = {}
    columns = (
        "job_id",
        "job__name",
        "job__priority_class",
        "job__started_at",
        "job__placed_at",
        "job__time_limit_minutes",
        "gpu__tray__slot",
        "job__department__name",
        "job__submitted_by__username",
        "job__requeue_at",
    )
    # Whole GPUs and MIG slices alike (service.holding_on): a slice job on a changed tray is in the way.
    held = holding_on(rack, gpu__tray__slot__in=slots).values_list(*columns)
    sliced = holding_on(rack, SliceAllocation, gpu__tray__slot__in=slots).values_list(*columns)
    for pk, name, klass, started, placed, limit, slot, department, submitter, requeue_at in held.union(
        sliced
    ):
        since = started or placed or now  # as integrations.plans.service.rack_trays
        ends_at = since + timedelta(minutes=limit) if limit else None  # no limit: no known end
        ends = None if ends_at is None else (ends_at - now).total_seconds()
        row = rows.setdefault(
            pk,
            {
                "name": name,
                "class": klass,
                "ends": ends,
                "ends_at": ends_at,
                "slots": set(),
                "department": department,
                "submitter": submitter or "",
                "requeue_at": requeue_at,
            },
        )
        row["slots"].add(slot)
    policies: dict[str, tuple[bool, int]] = {}  # class -> (checkpointable, grace)
    jobs = []
    for pk, row in rows.items():
        klass = row["class"]
        if klass not in policies:
            policies[klass] = (decisions.checkpointable(klass), decisions.policy_for(klass)[1])
        checkpointable, grace = policies[klass]
        jobs.append(
            JobInTheWay(
                pk,
                row["name"],
                tuple(sorted(row["slots"])),
                checkpointable,
                grace,
                row["ends"],
                row["ends_at"],
                row["department"],
                row["submitter"],
                row["requeue_at"],
            )
        )
    return sorted(jobs, key=lambda job: (job.slots[0], job.name))


def summarize(rack: Rack, check: PlanCheck, now: datetime | None = None) -> RequeueSummary | None:
    """Which jobs in the plan's way "Requeue now" would requeue, which it would wait for, and when the plan
    would apply; None when no job is in its way."""
    slots = [change.slot for change in check.busy_trays]
    if not slots:
        return None
    now = now or timezone.now()
    summary = RequeueSummary(now=now)
    for job in jobs_in_the_way(rack, slots, now):
        (summary.requeued if job.checkpointable else summary.waited).append(job)
    return summary


def requeue_plans_jobs(plan: PartitionPlan, now: datetime | None = None) -> list[decisions.Handled]:
    """Ask the checkpointable jobs on the trays a draining plan drained to checkpoint, then requeue them
    (scheduling.requeue.requeue_for_plan). In the caller's transaction, which holds the rack and the plan."""
    slots = list(plan.rack.trays.filter(state_reason=drain_reason(plan)).values_list("slot", flat=True))
    ids = [job.pk for job in jobs_in_the_way(plan.rack, slots, now)]
    handled = decisions.requeue_for_plan(ids, plan.pk, plan.rack.name, now=now)
    enqueue(FOLLOW_ACTIVE_PLANS)  # jobs requeued at once freed their trays: the plan may apply now
    return handled


def requeue_now(
    rack: Rack, partitions: list[PlannedPartition], *, user, now: datetime | None = None
) -> PartitionPlan:
    """Save the plan with drain first, apply it and requeue the checkpointable jobs in its way; or nothing.

    ValidationError: the plan cannot be applied, or no checkpointable job is in its way (then "Drain first"
    is the same thing); PlanConflict: another plan is in flight on the rack (a second admin racing the first
    waits for the rack's lock and gets this)."""
    with transaction.atomic():
        rack = Rack.objects.select_for_update().get(pk=rack.pk)
        if (busy := in_flight(rack)) is not None:
            raise PlanConflict(busy)
        plan = create_plan(rack, partitions, drain=True, user=user)
        plan = apply_plan(plan, user=user)
        if plan.status != PlanStatus.DRAINING:
            raise ValidationError(_("No job is in the plan's way: apply it without requeueing anything."))
        handled = requeue_plans_jobs(plan, now)
        if all(item.what == decisions.WAIT for item in handled):
            raise ValidationError(
                _(
                    "None of the jobs in the plan's way is checkpointable (their classes' fault policy): "
                    "choose Drain first to wait for them."
                )
            )
    return plan
