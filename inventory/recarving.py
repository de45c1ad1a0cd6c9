"""Re-carving policies (inventory.models.recarving): setting one, and what the pass and the pages read.

`set_policy` is the one way a policy changes (the rack page's form and the API both call it): under the
rack's row lock, validated by the model's own rules, audited by core.audit's model signals. The scheduler's
side reads here too, since the plans it counts are inventory's rows (PartitionPlan, origin "scheduler"): the
scheduling pass asks `pass_view` which racks it may re-carve and how many re-carves each made in the last
hour, with no need of integrations' models (integrations records each re-carve as a plan, and a plan is all
there is to count).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Count, IntegerField, Q, Subquery
from django.db.models.functions import Coalesce

from inventory.choices import ACTIVE_PLAN_STATES, PlanOrigin, PlanStatus
from inventory.models import PartitionPlan, Rack, RecarvePolicy

# The rolling window of the hourly bound (RecarvePolicy.max_per_hour).
RATE_WINDOW = timedelta(hours=1)
# The admin dashboard's window (its re-carves card and the rack page agree on it).
RECENT_WINDOW = timedelta(hours=24)


@transaction.atomic
def set_policy(rack: Rack, *, enabled: bool, smallest_trays: int, max_per_hour: int) -> RecarvePolicy:
    """Create or change `rack`'s policy. ValidationError (the model's words) when a value is out of bounds."""
    Rack.objects.select_for_update().filter(pk=rack.pk).first()
    policy = RecarvePolicy.objects.filter(rack=rack).first() or RecarvePolicy(rack=rack)
    policy.enabled, policy.smallest_trays, policy.max_per_hour = enabled, smallest_trays, max_per_hour
    policy.full_clean()
    policy.save()
    return policy


def scheduler_plans():
    return PartitionPlan.objects.filter(origin=PlanOrigin.SCHEDULER)


@dataclass
class PassView:
    """What a scheduling pass needs to know about re-carving, read in two queries.

    `policies`: rack name -> its enabled policy, for the racks the scheduler may re-carve now (none of them
    has a plan in flight: a rack re-carves one plan at a time); `recent`: rack name -> the scheduler's
    re-carves of it in the last hour (the hourly bound); `served`: the jobs a scheduler plan was made for in
    the last hour and not cancelled or failed: they wait for that plan's partition, not for another one."""

    policies: dict[str, RecarvePolicy] = field(default_factory=dict)
    recent: dict[str, int] = field(default_factory=dict)
    served: set[int] = field(default_factory=set)


def pass_view(now: datetime) -> PassView:
    view = PassView()
    policies = {p.rack.name: p for p in RecarvePolicy.objects.enabled().select_related("rack").order_by()}
    if not policies:
        return view
    since = now - RATE_WINDOW
    busy: set[str] = set()
    for name, status, origin, created_at, job_id in (
        PartitionPlan.objects.filter(rack__name__in=list(policies))
        .filter(Q(status__in=ACTIVE_PLAN_STATES) | Q(origin=PlanOrigin.SCHEDULER, created_at__gte=since))
        .order_by()
        .values_list("rack__name", "status", "origin", "created_at", "for_job_id")
    ):
        if status in ACTIVE_PLAN_STATES:
            busy.add(name)
        if origin == PlanOrigin.SCHEDULER and created_at >= since:
            view.recent[name] = view.recent.get(name, 0) + 1
            if job_id is not None and status not in (PlanStatus.CANCELLED, PlanStatus.FAILED):
                view.served.add(job_id)
    view.policies = {name: policy for name, policy in policies.items() if name not in busy}
    return view


def recarves_in_window(rack: Rack, now: datetime, window: timedelta = RATE_WINDOW) -> int:
    """The scheduler's re-carves of `rack` since `now - window` (the hourly bound, re-checked by integrations
    under the rack's lock)."""
    return scheduler_plans().filter(rack=rack, created_at__gte=now - window).count()


def last_recarve(rack: Rack) -> PartitionPlan | None:
    """The rack's latest plan made by the scheduler, if any."""
    return scheduler_plans().filter(rack=rack).order_by("-created_at", "-pk").first()


@dataclass(frozen=True)
class RecentRecarves:
    """The scheduler's re-carves since `since`, fleet-wide: how many, and how many each rack had."""

    since: datetime
    total: int
    applied: int
    by_rack: list[tuple[str, int]]  # (rack name, re-carves), most first
    enabled_racks: int


def recent_recarves(now: datetime, window: timedelta = RECENT_WINDOW) -> RecentRecarves:
    """Two queries: the re-carves per rack in the window, and the racks with re-carving enabled."""
    since = now - window
    rows = list(
        scheduler_plans()
        .filter(created_at__gte=since)
        .order_by()
        .values("rack__name")
        .annotate(n=Count("pk"), applied=Count("pk", filter=Q(status=PlanStatus.APPLIED)))
        .order_by("-n", "rack__name")
    )
    return RecentRecarves(
        since=since,
        total=sum(row["n"] for row in rows),
        applied=sum(row["applied"] for row in rows),
        by_rack=[(row["rack__name"], row["n"]) for row in rows],
        enabled_racks=RecarvePolicy.objects.enabled().count(),
    )


def policy_context(rack: Rack, now: datetime) -> dict:
    """What the rack page's re-carving panel shows (inventory/_recarve_policy.html): the policy (unsaved
    defaults when none; read with the rack when it was selected with it), the scheduler's last re-carve of the
    rack and its re-carves in RECENT_WINDOW (the dashboard's window, so both agree). One query, or two."""
    window = (
        scheduler_plans()
        .filter(rack=rack, created_at__gte=now - RECENT_WINDOW)
        .order_by()
        .values("rack")
        .annotate(n=Count("pk"))
        .values("n")
    )
    last = (
        scheduler_plans()
        .filter(rack=rack)
        .annotate(recent=Coalesce(Subquery(window, output_field=IntegerField()), 0))
        .order_by("-created_at", "-pk")
        .first()
    )
    return {
        "policy": RecarvePolicy.of(rack),
        "last_recarve": last,
        "recent_recarves": last.recent if last is not None else 0,
    }
