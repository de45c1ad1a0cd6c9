"""A busy rack in the partition wizard, in a real Chromium in Tokyo: the admin reads which jobs "Requeue now"
would requeue (the checkpointable training jobs), which it would wait for (a build job) and when the plan
would apply; schedules the plan for a maintenance window typed in Tokyo time and finds it on the plan's page
and in the plan list; cancels it (the window goes); then confirms "Requeue now", and the training jobs go
back to the queue while the build job runs on.

Screenshots at desktop (1400 px) and phone (390 px) width through `shots`."""

from __future__ import annotations

import re
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from integrations.models import PlanWindow
from inventory.demo import seed_datacenter
from inventory.models import PartitionPlan
from scheduling.choices import JobState, PriorityClass
from scheduling.models import Job
from tests.e2e.browser import sign_in
from tests.e2e.test_wizard_findings import DESKTOP, both_widths
from tests.factories import make_department, run_job

PASSWORD = "e2e-admin-password-1"
TOKYO = ZoneInfo("Asia/Tokyo")


@pytest.fixture
def admin(transactional_db, django_user_model, local_target):
    """Three racks; on gb-r01 checkpointable training jobs (one with a day-long limit) and a build job, in the
    way of a 2x9 plan."""
    seed_datacenter(racks=3)
    ops = make_department("Ops")
    started = {"started_at": timezone.now(), "time_limit_minutes": 120, "over_quota": True}
    run_job(ops, trays=["gb-r01-t01", "gb-r01-t02"], name="train-a", **started)
    run_job(ops, trays=["gb-r01-t03"], name="train-b", **started)
    run_job(ops, trays=["gb-r01-t05"], name="build-a", priority_class=PriorityClass.BUILD, **started)
    run_job(ops, trays=["gb-r01-t07"], name="pretrain", **{**started, "time_limit_minutes": 1440})
    return django_user_model.objects.create_superuser("e2e-admin", "e2e-admin@example.com", PASSWORD)


@pytest.mark.e2e
def test_an_admin_reads_requeue_now_schedules_a_window_and_requeues(live_server, browser, admin, shots):
    context = browser.new_context(viewport=DESKTOP, timezone_id="Asia/Tokyo")
    page = context.new_page()
    try:
        sign_in(page, live_server, admin.username, PASSWORD)
        preview = f"{live_server.url}/inventory/racks/gb-r01/plan/preview/?preset=2x9"
        page.goto(preview)

        summary = page.locator("section.requeue-summary")
        expect(summary).to_have_attribute("data-requeued", "3")
        expect(summary).to_have_attribute("data-waited", "1")
        expect(summary.locator("h2 .count-pill")).to_have_text("4")
        expect(summary.locator("ul.requeue-jobs")).to_contain_text("requeued within 5 min")
        expect(summary.locator("ul.requeue-jobs")).to_contain_text("train-a")
        expect(summary.locator("ul.requeue-jobs")).to_contain_text("train-b")
        expect(summary.locator("ul.waited-jobs")).to_contain_text("build-a")
        # Requeue now: the build job's 2-hour limit (the time alone today in Tokyo, else with its date).
        expect(summary.locator(".requeue-estimate")).to_contain_text(
            re.compile(r"applies by (\d{4}-\d\d-\d\d )?\d\d:\d\d JST")
        )
        # Drain first: when the last job's time limit ends, the pretraining job's day-long one, dated.
        pretrain = Job.objects.get(name="pretrain")
        latest = (pretrain.started_at + timedelta(minutes=1440)).astimezone(TOKYO)
        expect(summary.locator(".drain-first-estimate a")).to_have_attribute(
            "href", f"/scheduling/jobs/{pretrain.pk}/"
        )
        expect(summary.locator(".drain-first-estimate")).to_have_text(
            f"Drain first: The plan applies by {latest:%Y-%m-%d %H:%M} JST at the latest "
            f"(when job #{pretrain.pk}'s time limit ends)."
        )
        expect(page.locator("a.requeue-now-inline")).to_have_count(1)
        both_widths(page, shots, "busy-preview")

        # A window two days ahead, typed in Tokyo time.
        start = (timezone.now() + timedelta(days=2)).replace(second=0, microsecond=0)
        end = start + timedelta(hours=3)
        page.fill("#id_window_start", f"{start.astimezone(TOKYO):%Y-%m-%dT%H:%M}")
        page.fill("#id_window_end", f"{end.astimezone(TOKYO):%Y-%m-%dT%H:%M}")
        page.check("#id_window_requeue")
        with page.expect_navigation():
            page.get_by_role("button", name="Schedule for the window").click()
        expect(page).to_have_url(re.compile(r"/inventory/plans/\d+/$"))
        line = page.locator(".plan-window-line")
        expect(line).to_have_attribute("data-window-state", "scheduled")
        expect(line).to_contain_text(f"{start.astimezone(TOKYO):%Y-%m-%d %H:%M}")
        expect(line).to_contain_text("Waiting for its window")
        status = page.locator(".plan-status h2")
        expect(status).to_contain_text("Scheduled")
        expect(status).to_contain_text(
            f"waiting for its window: starts by itself at {start.astimezone(TOKYO):%Y-%m-%d %H:%M} JST"
        )
        expect(status).not_to_contain_text("Draft")
        both_widths(page, shots, "window-plan")
        window = PlanWindow.objects.get()
        assert (window.starts_at, window.ends_at, window.requeue) == (start, end, True)
        assert set(Job.objects.values_list("state", flat=True)) == {JobState.RUNNING}  # nothing requeued yet

        page.goto(f"{live_server.url}/inventory/plans/")
        expect(page.locator("td.plan-window").first).to_contain_text("Waiting for its window")
        expect(page.locator("main")).to_contain_text(
            "1 plan in flight. Of these, 1 is waiting for its maintenance window."
        )
        both_widths(page, shots, "window-plan-list")
        page.goto(f"{live_server.url}/inventory/plans/{window.plan_id}/")
        asked: list[str] = []  # "Cancel the plan" asks first (the walkthrough's plan went at one click)
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
        with page.expect_navigation():
            page.get_by_role("button", name="Cancel the plan").click()
        assert asked and asked[0].startswith(f"Cancel plan #{window.plan_id} for gb-r01?"), asked
        assert not PlanWindow.objects.exists()

        # Requeue now: the confirm page, then the POST.
        page.goto(preview)
        with page.expect_navigation():
            page.locator("a.requeue-now-inline").click()
        expect(page).to_have_url(re.compile(r"/inventory/racks/gb-r01/plan/requeue/\?"))
        expect(page.locator("section.requeue-summary")).to_contain_text("build-a")
        both_widths(page, shots, "requeue-confirm")
        assert PartitionPlan.objects.count() == 1  # the cancelled one: the confirm page saved nothing
        with page.expect_navigation():
            page.get_by_role("button", name="Requeue now and apply").click()
        expect(page).to_have_url(re.compile(r"/inventory/plans/\d+/$"))
        expect(page.locator("#plan-progress")).to_have_attribute("data-status", "draining")
        expect(page.locator("#plan-progress")).to_contain_text("build-a")
        # What it waits for: each job holding a tray it changes, with its trays (walkthrough: named none).
        build = Job.objects.get(name="build-a")
        expect(page.locator(f'ul.plan-holding li[data-job="{build.pk}"]')).to_contain_text("gb-r01-t")
        both_widths(page, shots, "requeued-draining")
        requeues = dict(Job.objects.values_list("name", "plan_requeues"))
        assert requeues == {"train-a": 1, "train-b": 1, "pretrain": 1, "build-a": 0}
        assert Job.objects.get(name="build-a").state == JobState.RUNNING
    finally:
        context.close()
