"""Following a partition plan once the wizard applied it: its progress page, its cancel, the list of plans.

Platform admins only, as the wizard (integrations.plans.views). The progress page polls itself every 2 s and
stops (HTTP 286) once the plan and its pushes are done. It only reads: the plan moves on in tasks (the beat,
and the end of each of its pushes: integrations.tasks).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import hostlist
from django.contrib import messages
from django.db.models import Count, Q
from django.http import QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect, HttpResponseStopPolling

from core.access import require_admin
from core.htmx import confirm_plain_post
from core.moments import stamped_lines_html
from core.tables import JsonArrayLength, Table
from integrations.models import ConfigPush, PlanWindow, PushStatus
from integrations.plans import service as plans
from integrations.plans import windows
from integrations.plans.requeue_now import JobInTheWay, jobs_in_the_way, latest_apply
from integrations.plans.views import WIZARD, render_step, served_by, wizard_steps
from inventory import selectors
from inventory.choices import ACTIVE_PLAN_STATES, PlanStatus
from inventory.models import Gpu, PartitionPlan
from inventory.planning import _ranges as slot_ranges
from inventory.selectors import PARTITION_COLOURS

# How many lines of a push's log the progress view shows (the push page has all of it).
LOG_TAIL_LINES = 12
# Plans that move on by themselves no more (a draft waits for an admin): the progress page stops polling.
SETTLED_PLAN_STATES = (PlanStatus.APPLIED, PlanStatus.FAILED, PlanStatus.CANCELLED, PlanStatus.DRAFT)


# ---- following a plan: its progress, its cancel, the list ----------------------------------------------


def _push_url(push) -> str:
    """The push's own page: its whole log, and the retry button when it failed."""
    return reverse("integrations:push-detail", args=[push.pk])


def _pushes(plan: PartitionPlan) -> list:
    pushes = list(ConfigPush.objects.filter(plan_id=plan.pk).select_related("target").order_by("pk"))
    latest = {push.target_id: push.pk for push in pushes}  # a retry is a later push to the same target
    for push in pushes:
        push.retried = latest[push.target_id] if latest[push.target_id] != push.pk else None
        log = (push.log or "").rstrip().splitlines()
        push.log_tail = stamped_lines_html("\n".join(log[-LOG_TAIL_LINES:]))  # times in the viewer's zone
        push.log_lines = len(log)
        push.log_more = len(log) > LOG_TAIL_LINES
        push.url = _push_url(push)
    return pushes


# How long after an applied plan the progress page waits for the rack's nodes to report their new cliques
# before it stops following them and says which GPUs have not.
NODES_SETTLE_WINDOW = timedelta(minutes=10)


@dataclass(frozen=True)
class NodeReports:
    """After the fabric applied a plan: how many of the rack's GPUs already report their new partition."""

    total: int
    unsettled: int  # drift, or a fabric registration still in progress (inventory.selectors)
    given_up: bool  # past NODES_SETTLE_WINDOW: stop waiting and say so

    @property
    def settled(self) -> int:
        return self.total - self.unsettled


def _node_reports(plan: PartitionPlan, now) -> NodeReports | None:
    """What the rack's node agents report once the plan is applied (None before that)."""
    if plan.status != PlanStatus.APPLIED:
        return None
    counts = Gpu.objects.filter(tray__rack=plan.rack, tray__partition__isnull=False).aggregate(
        total=Count("pk"), unsettled=Count("pk", filter=selectors.GPU_FABRIC_UNSETTLED)
    )
    finished = plan.finished_at or plan.applied_at or now
    return NodeReports(counts["total"], counts["unsettled"], now - finished > NODES_SETTLE_WINDOW)


def _done(plan: PartitionPlan, pushes, nodes: NodeReports | None) -> bool:
    """Nothing left to follow: the plan has settled, no push of it (a retry included) is still active, and
    the rack's nodes report their new cliques (or have had NODES_SETTLE_WINDOW to)."""
    if nodes is not None and nodes.unsettled and not nodes.given_up:
        return False
    return plan.status in SETTLED_PLAN_STATES and all(push.is_finished for push in pushes)


def _drained(plan: PartitionPlan) -> list[tuple[int, str]]:
    """(slot, hostname) of the trays the plan drained, while it waits for them or until it is cancelled."""
    return list(
        plan.rack.trays.filter(state_reason=plans.drain_reason(plan))
        .order_by("slot")
        .values_list("slot", "hostname")
    )


def _in_the_way(
    plan: PartitionPlan, drained: list[tuple[int, str]]
) -> tuple[list[JobInTheWay], list[JobInTheWay]]:
    """The running jobs in a draining plan's way, on every tray it changes (drained for it or not: a plan
    drained by an older release drained only the trays busy when it was applied), as the task that applies
    it finds them (plans.holding_trays): those asked to checkpoint ("Requeue now"), requeued when their grace
    period ends (the plan does not wait for their time limits), and those it waits for."""
    if plan.status != PlanStatus.DRAINING:
        return [], []
    slots = {change.slot for change in plans.holding_trays(plan)} | {slot for slot, _hostname in drained}
    jobs = jobs_in_the_way(plan.rack, sorted(slots))
    return [job for job in jobs if job.requeue_at], [job for job in jobs if not job.requeue_at]


def _holding(plan: PartitionPlan, waiting_for: list[JobInTheWay]) -> list[dict]:
    """Each job a draining plan waits for, with the hostnames of the rack's trays it holds."""
    if not waiting_for:
        return []
    hosts = dict(plan.rack.trays.values_list("slot", "hostname"))
    return [
        {
            "job": job,
            "hosts": format_html_join(
                ", ", '<span class="mono">{}</span>', ((hosts.get(slot, slot),) for slot in job.slots)
            ),
        }
        for job in waiting_for
    ]


def _names_in_sentences(
    plan: PartitionPlan, drained, waiting_on: list[str], failed_pushes: list, requeued: list[JobInTheWay] = ()
) -> dict:
    """The names the page's sentences hold, each list joined as one (a sentence is translated whole)."""
    return {
        # As Slurm writes host lists (gb-r08-t[01-18]): a plan drains every tray it changes, often 18.
        "drained_hostnames": format_html(
            '<span class="mono">{}</span>', hostlist.collect_hostlist([h for _s, h in drained])
        ),
        "waiting_on_names": format_html_join(
            ", ", '<span class="mono">{}</span>', ((job,) for job in waiting_on)
        ),
        "requeued_names": format_html_join(
            ", ", '<span class="mono">{}</span>', ((name,) for name in sorted({job.name for job in requeued}))
        ),
        "layout_names": format_html_join(", ", "<b>{}</b>", ((p["name"],) for p in plan.layout)),
        "failed_push_links": format_html_join(
            ", ",
            '<a href="{}">{}</a>',
            ((push.url, _("the push to %(target)s") % {"target": push.target}) for push in failed_pushes),
        ),
    }


def _progress_context(plan: PartitionPlan) -> dict:
    pushes = _pushes(plan)
    nodes = _node_reports(plan, timezone.now())
    waits_for = windows.waiting_window(plan)  # a draft waiting for its window moves on by itself
    done = _done(plan, pushes, nodes) and waits_for is None
    drained = _drained(plan)
    requeued, waiting_for = _in_the_way(plan, drained)
    waiting_on = sorted({job.name for job in waiting_for})
    failed_pushes = [push for push in pushes if push.status == PushStatus.FAILED and not push.retried]
    return {
        "plan": plan,
        "nodes": nodes,
        "rack": plan.rack,
        "pushes": pushes,
        "done": done,
        "drained": drained,
        "waiting_on": waiting_on,
        "requeued": requeued,
        "holding": _holding(plan, waiting_for),
        # When it applies at the latest: the requeued jobs' grace periods end and the jobs it waits for reach
        # their time limits (as the preview and the "Requeue now" page said).
        "latest": latest_apply(requeued, waiting_for, timezone.now()) if requeued or waiting_for else None,
        "failed_pushes": failed_pushes,
        **_names_in_sentences(plan, drained, waiting_on, failed_pushes, requeued),
        "layout": [
            {
                **p,
                "ranges": slot_ranges(p["slots"]),
                "colour": i % PARTITION_COLOURS,
                "served_by": served_by(p.get("slurm_partition") or "", p.get("department")),
            }
            for i, p in enumerate(plan.layout)
        ],
        "can_cancel": plan.status in (PlanStatus.DRAFT, PlanStatus.DRAINING),
        "steps": wizard_steps("apply", plan.rack, done=plan.status == PlanStatus.APPLIED),
        "step": "apply",
        "retry_query": _retry_query(plan),
        "window": _window(plan),
        "waits_for": waits_for,
    }


@require_GET
def plan_detail(request, pk):
    """The plan's progress: its status, each push with its status and log tail; polls until done.

    Read-only: what it shows was moved on by the tasks (integrations.tasks)."""
    require_admin(request.user, WIZARD)
    plan = get_object_or_404(
        PartitionPlan.objects.visible_to(request.user).select_related("rack", "created_by"), pk=pk
    )
    context = _progress_context(plan)
    if request.htmx and context["done"]:
        return HttpResponseStopPolling(
            render(request, "integrations/wizard/_progress.html", context).content,
            headers={"Vary": "HX-Request"},
        )
    return render_step(
        request, "integrations/wizard/progress.html", "integrations/wizard/_progress.html", context
    )


def _retry_query(plan: PartitionPlan) -> str:
    """The plan as wizard parameters: 'preview again' starts from exactly this plan."""
    params = QueryDict(mutable=True)
    params["preset"] = "custom"
    params.setlist("slots", [slot_ranges(p["slots"]) for p in plan.layout])
    params.setlist("name", [p["name"] for p in plan.layout])
    params.setlist("department", [p.get("department") or "" for p in plan.layout])
    params.setlist("slurm", [p.get("slurm_partition") or "" for p in plan.layout])
    if plan.drain_first:
        params["drain_first"] = "on"
    return params.urlencode()


def cancelled_message(plan: PartitionPlan) -> str:
    """What cancelling `plan` did: its drained trays back in service, or nothing drained yet."""
    if not plan.trays_returned:
        return _("Plan #%(plan)s cancelled; no tray had been drained for it, so nothing else changed.") % {
            "plan": plan.pk
        }
    return ngettext(
        "Plan #%(plan)s cancelled; its %(count)s drained tray is back in service.",
        "Plan #%(plan)s cancelled; its %(count)s drained trays are back in service.",
        plan.trays_returned,
    ) % {"plan": plan.pk, "count": plan.trays_returned}


@require_POST
def plan_cancel(request, pk):
    """Cancel a draft or draining plan; its drained trays return to service."""
    require_admin(request.user, WIZARD)
    plan = get_object_or_404(PartitionPlan.objects.visible_to(request.user).select_related("rack"), pk=pk)
    url = reverse("integrations:plan-detail", args=[plan.pk])
    if plan.status in (PlanStatus.DRAFT, PlanStatus.DRAINING):  # asked first (a settled plan: refused below)
        question = {"plan": plan, "rack": plan.rack, "drained": _drained(plan), "window": _window(plan)}
        asked = confirm_plain_post(
            request,
            question_template="integrations/wizard/_cancel_question.html",
            context=question,
            title=_("Cancel plan #%(plan)s?") % {"plan": plan.pk},
            action=_("Cancel the plan"),
            back_url=url,
        )
        if asked:
            return asked
    try:
        cancelled = plans.cancel_plan(plan, user=request.user)
    except plans.PlanConflict as error:
        messages.error(request, str(error))
    else:
        messages.success(request, cancelled_message(cancelled))
    # htmx (the button's hx-confirm was answered): the whole page again, with the message.
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


def _window(plan: PartitionPlan) -> PlanWindow | None:
    return PlanWindow.objects.filter(plan=plan).first()


@require_GET
def plan_list(request):
    """Plans with their status, newest first unless sorted otherwise (core.tables), a page at a time."""
    require_admin(request.user, WIZARD)
    table = Table(request, "plans", PLAN_SORTS, "-id", per_page=50, exports=False)
    page = table.page(
        table.order(
            PartitionPlan.objects.visible_to(request.user)
            .select_related("rack", "created_by", "window")
            .annotate(partition_count=JsonArrayLength("layout"))
        )
    )
    for plan in page.object_list:
        plan.waits_for = windows.waiting_window(plan)
    # In flight: applying or draining, or waiting for a window (it starts by itself); how many of them wait.
    flight = PartitionPlan.objects.filter(Q(status__in=ACTIVE_PLAN_STATES) | windows.WAITING_FOR_WINDOW)
    counts = flight.aggregate(active=Count("pk"), waiting=Count("pk", filter=windows.WAITING_FOR_WINDOW))
    return render(
        request,
        "integrations/wizard/plan_list.html",
        {
            "plans": page.object_list,
            "page": page,
            "table": table,
            "active": counts["active"],
            "waiting": counts["waiting"],
            "steps": wizard_steps("rack"),
            "step": "rack",
        },
    )


PLAN_SORTS = {
    "id": ("pk",),
    "rack": ("rack__name",),
    "status": ("status",),
    "partitions": ("partition_count",),  # how many partitions the layout carves (annotated by plan_list)
    "by": ("created_by__username",),
    "created": ("created_at",),
    "finished": ("finished_at",),
    "window": ("window__starts_at",),  # a maintenance window's start (integrations.plans.windows)
}
