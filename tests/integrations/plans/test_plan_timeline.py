"""A tray a partition plan drains shows it on its health timeline, and its return (found by a walkthrough,
issue 31: gb-r04-t01 was "Drain" for a plan while its timeline said "no health events or decisions").

The plan's drain and the tray's return (the plan applied, or cancelled) are recorded as the plan's own
decisions (HealthAction kinds plan_drain / plan_return, by the admin who applied or cancelled it), never as a
fault: the circuit breaker and the repeat offenders count only the health rules' quarantines."""

import html
import re

import pytest
from django.urls import reverse

from integrations.plans import service as plans
from inventory.choices import QUARANTINE_ACTIONS, ActionKind, TrayState
from inventory.models import ComputeTray, HealthAction, Rack
from inventory.planning import preset_layout
from scheduling.choices import JobState
from scheduling.models import Allocation, Job
from tests.factories import make_department, run_job

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("local_target")]


@pytest.fixture
def rack(demo_inventory) -> Rack:
    return Rack.objects.get(name="gb-r01")


def _timeline(client, tray: ComputeTray, language: str = "en") -> str:
    url = reverse("inventory:tray-detail", args=[tray.pk]) + "?health=24h"
    markup = client.get(url, headers={"HX-Request": "true", "Accept-Language": language}).content.decode()
    section = re.search(r'<section class="health-timeline".*?</section>', markup, re.S).group(0)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", section)))


def _drain_for_a_plan(rack, admin_user):
    job = run_job(make_department("Ops"), trays=rack.trays.filter(slot=3), name="train-0001")
    plan = plans.apply_plan(plans.create_plan(rack, preset_layout("2x9"), drain=True, user=admin_user))
    return job, plan, ComputeTray.objects.get(rack=rack, slot=3)


def test_a_plans_drain_and_the_return_after_it_applied_are_on_the_trays_timeline(client, rack, admin_user):
    job, plan, tray = _drain_for_a_plan(rack, admin_user)
    assert tray.state == TrayState.DRAIN
    client.force_login(admin_user)
    shown = _timeline(client, tray)
    assert "No health events or decisions" not in shown
    assert "Drained for a partition plan" in shown
    assert f"Rackplane plan #{plan.pk}: draining before repartitioning gb-r01" in shown
    assert f"by {admin_user.username}" in shown

    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED)
    Allocation.objects.filter(job=job).delete()
    assert plans.continue_draining(plan) is True
    shown = _timeline(client, tray)
    assert "Returned to service after a partition plan" in shown
    assert f"Rackplane plan #{plan.pk}: gb-r01 repartitioned, back in service" in shown
    # Only the trays the plan drained (every tray it changes, while it waited): each drained and returned
    # once; a tray of another rack never.
    plan_actions = HealthAction.objects.filter(kind__startswith="plan_")
    assert not plan_actions.exclude(tray__rack=rack).exists()
    drained = set(plan_actions.filter(kind=ActionKind.PLAN_DRAIN).values_list("tray", flat=True))
    returned = set(plan_actions.filter(kind=ActionKind.PLAN_RETURN).values_list("tray", flat=True))
    assert tray.pk in drained and drained == returned
    # No fault: nothing the circuit breaker or the offenders count.
    assert not HealthAction.objects.filter(tray=tray, kind__in=QUARANTINE_ACTIONS).exists()


def test_a_cancelled_plans_trays_return_on_their_timeline_by_whoever_cancelled(client, rack, admin_user):
    _, plan, tray = _drain_for_a_plan(rack, admin_user)
    client.force_login(admin_user)
    response = client.post(reverse("integrations:plan-cancel", args=[plan.pk]), {"confirmed": "yes"})
    assert response.status_code == 302
    tray.refresh_from_db()
    assert tray.state == TrayState.UP
    kinds = list(HealthAction.objects.filter(tray=tray).order_by("pk").values_list("kind", "actor"))
    assert kinds == [(ActionKind.PLAN_DRAIN, admin_user.pk), (ActionKind.PLAN_RETURN, admin_user.pk)]
    assert f"Rackplane plan #{plan.pk} was not applied: back in service" in _timeline(client, tray)


def test_the_plans_words_on_the_timeline_read_in_japanese(client, rack, admin_user):
    _, plan, tray = _drain_for_a_plan(rack, admin_user)
    client.force_login(admin_user)
    shown = _timeline(client, tray, "ja")
    assert "Drained for a partition plan" not in shown and "draining before" not in shown
    assert f"#{plan.pk}" in shown and "gb-r01" in shown
