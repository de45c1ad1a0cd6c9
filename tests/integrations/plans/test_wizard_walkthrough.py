"""A walkthrough's wizard findings: the header's GPU count is the rack page's, a GPU's health is said in its
label, the jobs in a plan's way say whose they are (and "tray 5" for one tray), a window the plan cannot
apply in is refused before anything is saved, and cancelling a plan says what really happened."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from integrations.models import PlanWindow
from integrations.plans import service as plans
from inventory.choices import GpuHealth, PlanStatus
from inventory.models import Gpu, PartitionPlan
from inventory.planning import preset_layout
from scheduling.choices import JobState, PriorityClass
from scheduling.models import Job
from tests.factories import make_department, make_member, run_job

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("local_target")]

PLAN = {"preset": "2x9"}


@pytest.fixture
def jobs(demo_inventory):
    ops = make_department("Ops")
    erin = make_member("erin", ops)
    started = {"started_at": timezone.now(), "time_limit_minutes": 120, "over_quota": True}
    return {
        "train": run_job(
            ops, trays=["gb-r01-t01", "gb-r01-t02"], name="train-a", submitted_by=erin, **started
        ),
        "build": run_job(
            ops,
            trays=["gb-r01-t05"],
            name="build-a",
            priority_class=PriorityClass.BUILD,
            submitted_by=erin,
            **started,
        ),
    }


def _window(start, end, requeue=True) -> dict:
    fields = {"window_start": f"{start:%Y-%m-%dT%H:%M}", "window_end": f"{end:%Y-%m-%dT%H:%M}"}
    return {**fields, "window_requeue": "on"} if requeue else fields


def test_the_wizard_counts_healthy_gpus_as_the_rack_page_and_names_a_gpus_health_by_its_label(
    demo_inventory, client_as, platform_admin
):
    gpu = Gpu.objects.get(tray__hostname="gb-r03-t13", index=3)
    gpu.health = GpuHealth.LIMITED_CAPACITY
    gpu.save(update_fields=["health"])
    client = client_as(platform_admin)
    rack_page = client.get(reverse("scheduling:rack-detail", args=["gb-r03"]))
    wizard = client.get(reverse("integrations:plan-layout", args=["gb-r03"]), {"preset": "1x18"})
    layout = rack_page.context["layout"]
    assert (
        wizard.context["gpus_healthy"],
        wizard.context["gpus_total"],
        wizard.context["gpus_degraded"],
    ) == (
        layout.gpus_healthy,
        layout.gpus_total,
        layout.gpus_degraded,
    )
    text = wizard.content.decode()
    healthy = layout.gpus_healthy
    assert healthy < layout.gpus_total  # the limited GPU is not counted healthy, on either page
    assert f"<b>{healthy}</b> / {layout.gpus_total} GPUs healthy" in text
    assert f"<b>{layout.gpus_degraded}</b> degraded GPU" in text
    assert "GPU 3: Limited capacity" in text and "GPU 3 Limited capacity" in text
    assert "limited_capacity" not in re.sub(r'class="[^"]*"', "", text)


def test_the_jobs_in_the_plans_way_say_whose_they_are_and_one_tray_is_a_tray(jobs, client_as, platform_admin):
    client = client_as(platform_admin)
    page = client.get(reverse("integrations:plan-requeue", args=["gb-r01"]), PLAN).content.decode()
    assert re.search(r"train-a</span> <span class=\"job-owner small\">Ops, submitted by erin</span>", page)
    assert "trays 1, 2 · requeued within" in page
    assert re.search(r"build-a</span> <span class=\"job-owner small\">Ops, submitted by erin</span>", page)
    assert "tray 5</span>" in page and "trays 5" not in page


def test_a_window_the_plan_cannot_apply_in_is_refused_with_the_reason_before_anything_is_saved(
    jobs, client, platform_admin
):
    client.force_login(platform_admin)
    start = timezone.now() + timedelta(minutes=10)
    build = jobs["build"]
    until = timezone.localtime(build.started_at + timedelta(minutes=120))
    before = (PartitionPlan.objects.count(), PlanWindow.objects.count())
    url = reverse("integrations:plan-schedule", args=["gb-r01"])
    response = client.post(url, {**PLAN, **_window(start, start + timedelta(hours=1))})
    assert response.status_code == 400
    error = response.context["apply_error"]
    assert f"but job #{build.pk} (build-a) on tray 5 may run until {until:%Y-%m-%d %H:%M}" in error, error
    assert "the plan would not apply in it. Choose a window ending after that." in error
    assert (PartitionPlan.objects.count(), PlanWindow.objects.count()) == before
    assert all(state == JobState.RUNNING for state in Job.objects.values_list("state", flat=True))

    # Without requeue the checkpointable job sets the time, and ticking requeue is the advice.
    response = client.post(url, {**PLAN, **_window(start, start + timedelta(hours=1), requeue=False)})
    assert response.status_code == 400
    assert "requeue the checkpointable jobs at its start" in response.context["apply_error"]

    # A window that lasts past the jobs' limits is saved.
    response = client.post(url, {**PLAN, **_window(start, start + timedelta(hours=3))})
    assert response.status_code == 302
    assert PlanWindow.objects.count() == before[1] + 1


def test_cancelling_says_whether_drained_trays_went_back_into_service(jobs, client, platform_admin):
    client.force_login(platform_admin)
    start = timezone.now() + timedelta(days=1)
    client.post(
        reverse("integrations:plan-schedule", args=["gb-r01"]),
        {**PLAN, **_window(start, start + timedelta(hours=3))},
    )
    waiting = PartitionPlan.objects.get(status=PlanStatus.DRAFT)
    response = client.post(reverse("integrations:plan-cancel", args=[waiting.pk]), {"confirmed": "yes"})
    [message] = [str(m) for m in get_messages(response.wsgi_request)]
    assert (
        message == f"Plan #{waiting.pk} cancelled; no tray had been drained for it, so nothing else changed."
    )

    rack = waiting.rack
    draining = plans.create_and_apply(rack, preset_layout("2x9"), drain=True, user=platform_admin)
    assert draining.status == PlanStatus.DRAINING
    drained = rack.trays.filter(state_reason=plans.drain_reason(draining)).count()
    assert drained > 1
    response = client.post(reverse("integrations:plan-cancel", args=[draining.pk]), {"confirmed": "yes"})
    message = [str(m) for m in get_messages(response.wsgi_request)][-1]  # the first one's is still kept
    assert message == f"Plan #{draining.pk} cancelled; its {drained} drained trays are back in service."
