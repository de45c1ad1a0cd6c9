"""Partition plans scheduled for a maintenance window (integrations.models.PlanWindow).

An admin saves a plan with a window instead of applying it now (`schedule`): the plan waits as a draft. The
beat (`run_windows`, task integrations.tasks.run_plan_windows, every 30 s) then, for each window:

* at its start: applies the plan with drain first (its busy trays drained; with `requeue`, the
  checkpointable jobs in its way asked to checkpoint and requeued: integrations.plans.requeue_now); another
  plan in flight on the rack makes it wait (and say so), a rack whose partitions changed since the plan was
  checked expires it;
* while it is open: applies the plan once its trays are free (integrations.plans.service.continue_draining,
  which also refuses to apply a plan past its window's end, whoever calls it);
* at its end, when the plan has not been applied: withdraws it (cancelled, its trays back in service) and
  marks the window expired with the reason (which jobs it still waited for).

Each step is one transaction with the rack, the plan and the window locked in that order (the plan
service's order), so the beat and an admin's cancel, or two beats, never act on a window twice.
Cancelling the plan removes its window (service.cancel_plan).
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import formats, timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from core.sentences import gettext_noop, say
from integrations.models import PlanWindow, WindowState
from integrations.plans import service
from integrations.plans.requeue_now import jobs_in_the_way, requeue_plans_jobs, summarize
from inventory.choices import PlanStatus
from inventory.models import PartitionPlan, Rack
from inventory.planning import PlannedPartition

logger = logging.getLogger(__name__)

OPEN_STATES = (WindowState.SCHEDULED, WindowState.STARTED)

# A plan waiting for its window: a draft whose window has not started. It is in flight (it starts by itself),
# so the plan list counts it with the active plans, and its page and row say it waits for its window.
WAITING_FOR_WINDOW = Q(status=PlanStatus.DRAFT, window__state=WindowState.SCHEDULED)


def waiting_on(rack: Rack) -> list[PartitionPlan]:
    """The plans saved for a maintenance window on `rack` that has not started, soonest first (each with its
    window read)."""
    return list(
        PartitionPlan.objects.filter(WAITING_FOR_WINDOW, rack=rack)
        .select_related("window")
        .order_by("window__starts_at")
    )


def waiting_window(plan: PartitionPlan) -> PlanWindow | None:
    """The window `plan` waits for (it is a draft and the window has not started); None otherwise."""
    if plan.status != PlanStatus.DRAFT:
        return None
    try:
        window = plan.window
    except PlanWindow.DoesNotExist:
        return None
    return window if window.state == WindowState.SCHEDULED else None


# Why a window waits, or why it expired (PlanWindow.reason, and the plan's error): stored in English as
# templates (core.sentences), shown in the viewer's language (the `sentence_words` filter).
NO_LONGER_A_DRAFT = gettext_noop("The plan was no longer a draft when its window started.")
ENDED_BEFORE_START = gettext_noop("The window ended at %(end)s before the plan could start.")
WAITING = gettext_noop("Waiting: %(busy)s")
COULD_NOT_START = gettext_noop("The plan could not start in its window: %(why)s")
NONE = gettext_noop("none")
ENDED_BEFORE_FREE = gettext_noop(
    "The window ended at %(end)s before the plan's trays were free (still running: %(jobs)s)."
)
EXPIRED = gettext_noop("Expired: %(why)s")


def _when(moment: datetime) -> str:
    """A moment in words for a reason kept with the window (UTC: read by whoever opens it later)."""
    return (
        formats.date_format(timezone.localtime(moment, timezone.get_fixed_timezone(0)), "Y-m-d H:i") + " UTC"
    )


def schedule(
    rack: Rack,
    partitions: list[PlannedPartition],
    *,
    starts_at: datetime,
    ends_at: datetime,
    requeue: bool,
    user,
    now: datetime | None = None,
) -> PartitionPlan:
    """Save the plan as a draft with its window; a window already open starts at once. ValidationError: the
    plan cannot be made, or the window is impossible (ends before it starts, or has ended)."""
    now = now or timezone.now()
    if ends_at <= starts_at:
        raise ValidationError(_("The window ends before it starts: choose an end after the start."))
    if ends_at <= now:
        raise ValidationError(_("The window has already ended: choose an end in the future."))
    with transaction.atomic():
        rack = Rack.objects.select_for_update().get(pk=rack.pk)
        if (waiting := service.waiting_window(rack)) is not None:  # a plan being applied: this one waits
            raise ValidationError(waiting)
        plan = service.create_plan(rack, partitions, drain=True, user=user)
        window = PlanWindow.objects.create(
            plan=plan, starts_at=starts_at, ends_at=ends_at, requeue=requeue, created_by=user
        )
    if starts_at <= now:
        step(window.pk, now)
        plan.refresh_from_db()
    return plan


def misses_window(
    rack: Rack, partitions: list[PlannedPartition], *, starts_at: datetime, ends_at: datetime, requeue: bool
) -> str | None:
    """Why the plan could not apply in the window, in the viewer's words, when its latest apply time
    (requeue_now.latest_apply, counted from the window's start: the requeued jobs' grace periods, the
    waited-for jobs' time limits) falls after the window's end; None when it applies in time (or no job is
    in its way, or a waited-for job has no time limit, so no latest time is known). A plan scheduled in such
    a window would only expire at its end (`_follow`): the wizard refuses it before saving."""
    summary = summarize(rack, service.check(rack, partitions, drain=True), now=starts_at)
    if summary is None:
        return None
    latest = summary.after_requeue if requeue else summary.drain_first
    if latest.at is None or latest.job is None or latest.at <= ends_at:
        return None
    job = latest.job
    when = {
        "end": formats.date_format(timezone.localtime(ends_at), "Y-m-d H:i T"),
        "until": formats.date_format(timezone.localtime(latest.at), "Y-m-d H:i T"),
        "job": job.pk,
        "name": job.name,
        "trays": ", ".join(str(slot) for slot in job.slots),
    }
    if latest.by_limit:
        sentence = ngettext(
            "This window ends at %(end)s, but job #%(job)s (%(name)s) on tray %(trays)s may run until "
            "%(until)s: the plan would not apply in it.",
            "This window ends at %(end)s, but job #%(job)s (%(name)s) on trays %(trays)s may run until "
            "%(until)s: the plan would not apply in it.",
            len(job.slots),
        )
        advice = (
            _("Choose a window ending after that, or requeue the checkpointable jobs at its start.")
            if job.checkpointable and not requeue
            else _("Choose a window ending after that.")
        )
    else:
        sentence = ngettext(
            "This window ends at %(end)s, but job #%(job)s (%(name)s) on tray %(trays)s is requeued only at "
            "%(until)s, after its grace period: the plan would not apply in it.",
            "This window ends at %(end)s, but job #%(job)s (%(name)s) on trays %(trays)s is requeued only at "
            "%(until)s, after its grace period: the plan would not apply in it.",
            len(job.slots),
        )
        advice = _("Choose a longer window.")
    return f"{sentence % when} {advice}"


def run_windows(now: datetime | None = None) -> dict[str, int]:
    """The beat's round: every open window whose start has come moves on by one step (see the module doc)."""
    now = now or timezone.now()
    counts = {"started": 0, "applied": 0, "expired": 0, "waiting": 0}
    due = PlanWindow.objects.filter(state__in=OPEN_STATES, starts_at__lte=now).order_by("starts_at", "pk")
    for pk in list(due.values_list("pk", flat=True)):
        try:
            outcome = step(pk, now)
        except Exception:  # one window's trouble never stops the others; it is tried again next round
            logger.exception("maintenance window %s: could not move on", pk)
            continue
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def step(pk: int, now: datetime) -> str:
    """Move one window on: 'started', 'applied', 'expired', 'waiting' or 'gone'."""
    with transaction.atomic():
        row = PlanWindow.objects.filter(pk=pk).values_list("plan__rack_id", flat=True).first()
        if row is None:
            return "gone"
        Rack.objects.select_for_update().get(pk=row)
        plan = (
            PartitionPlan.objects.select_for_update(of=("self",))
            .select_related("rack", "created_by")
            .filter(window__pk=pk)
            .first()
        )
        window = PlanWindow.objects.select_for_update().filter(pk=pk).first()
        if plan is None or window is None:  # the plan was cancelled (and its window removed) meanwhile
            return "gone"
        if window.state not in OPEN_STATES or window.starts_at > now:
            return "gone"
        if window.state == WindowState.SCHEDULED:
            return _start(plan, window, now)
        return _follow(plan, window, now)


def _start(plan: PartitionPlan, window: PlanWindow, now: datetime) -> str:
    if plan.status != PlanStatus.DRAFT:  # cancelled another way (the window goes with a cancel)
        return _expire(plan, window, NO_LONGER_A_DRAFT)
    if now >= window.ends_at:
        return _expire(
            plan,
            window,
            say(ENDED_BEFORE_START, end=_when(window.ends_at)),
        )
    busy = service.in_flight(plan.rack, but=plan)
    if busy is not None:
        _save(window, reason=say(WAITING, busy=busy))
        return "waiting"
    try:
        with transaction.atomic():
            plan = service.apply_plan(plan, user=plan.created_by)
            if window.requeue and plan.status == PlanStatus.DRAINING:
                requeue_plans_jobs(plan, now)
    except (service.PlanConflict, ValidationError) as error:
        words = " ".join(error.messages) if isinstance(error, ValidationError) else str(error)
        return _expire(plan, window, say(COULD_NOT_START, why=words))
    if plan.status == PlanStatus.DRAINING:
        _save(window, state=WindowState.STARTED, reason="")
        return "started"
    _save(window, state=WindowState.DONE, reason="")
    return "applied"


def _follow(plan: PartitionPlan, window: PlanWindow, now: datetime) -> str:
    if plan.status != PlanStatus.DRAINING:  # applied meanwhile (follow_active_plans), or ended otherwise
        _save(window, state=WindowState.DONE, reason="")
        return "applied"
    if now >= window.ends_at:
        slots = list(
            plan.rack.trays.filter(state_reason=service.drain_reason(plan)).values_list("slot", flat=True)
        )
        names = ", ".join(job.name for job in jobs_in_the_way(plan.rack, slots, now)) or NONE
        return _expire(
            plan,
            window,
            say(ENDED_BEFORE_FREE, end=_when(window.ends_at), jobs=names),
        )
    if service.continue_draining(plan):
        _save(window, state=WindowState.DONE, reason="")
        return "applied"
    return "waiting"


def _expire(plan: PartitionPlan, window: PlanWindow, reason: str) -> str:
    """Not applied in its window: the plan withdrawn (trays back in service), the window expired, and why."""
    reason = reason[:500]
    if plan.status in (PlanStatus.DRAFT, PlanStatus.DRAINING):
        service.withdraw(plan, error=say(EXPIRED, why=reason))
    _save(window, state=WindowState.EXPIRED, reason=reason)
    logger.info("plan #%s: maintenance window expired: %s", plan.pk, reason)
    return "expired"


def _save(window: PlanWindow, **values) -> None:
    for name, value in values.items():
        setattr(window, name, value)
    window.save(update_fields=[*values, "updated_at"])
