"""The wizard's "Requeue now" (confirm page and its POST) and "Schedule for a window" (the preview's form),
as an admin and as everybody else, with hostile input: a GET never writes, a refusal writes nothing."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.urls import reverse
from django.utils import timezone

from integrations.models import PlanWindow, WindowState
from inventory.choices import PlanStatus
from inventory.models import PartitionPlan
from scheduling.choices import JobState, PriorityClass
from scheduling.models import Job
from tests.factories import make_department, run_job
from tests.i18n_check import english_left

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("local_target")]

PLAN = {"preset": "2x9"}
TOKYO = ZoneInfo("Asia/Tokyo")


@pytest.fixture
def jobs(demo_inventory):
    ops = make_department("Ops")
    started = {"started_at": timezone.now(), "time_limit_minutes": 120, "over_quota": True}
    return {
        "train": run_job(ops, trays=["gb-r01-t01", "gb-r01-t02"], name="train-a", **started),
        "train2": run_job(ops, trays=["gb-r01-t03"], name="train-b", **started),
        "build": run_job(
            ops, trays=["gb-r01-t05"], name="build-a", priority_class=PriorityClass.BUILD, **started
        ),
    }


def nothing_written(before: tuple[int, int], jobs) -> None:
    assert (PartitionPlan.objects.count(), PlanWindow.objects.count()) == before
    assert all(state == JobState.RUNNING for state in Job.objects.values_list("state", flat=True))


def counts() -> tuple[int, int]:
    return PartitionPlan.objects.count(), PlanWindow.objects.count()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_busy_preview_offers_requeue_now_and_its_confirm_page_says_who_and_when(
    jobs, client_as, platform_admin
):
    client = client_as(platform_admin)
    layout = client.get(reverse("integrations:plan-layout", args=["gb-r01"]), PLAN).content.decode()
    href = html.unescape(re.search(r'class="button small requeue-now-inline" href="([^"]+)"', layout)[1])
    assert href.startswith(reverse("integrations:plan-requeue", args=["gb-r01"]) + "?")

    before = counts()
    page = client.get(href)
    assert page.status_code == 200
    text = page.content.decode()
    summary = page.context["requeue"]
    assert [job.name for job in summary.requeued] == ["train-a", "train-b"]
    assert [job.name for job in summary.waited] == ["build-a"]
    assert 'data-requeued="2" data-waited="1"' in text and "applies by <b>" in text
    nothing_written(before, jobs)  # a GET never writes

    response = client.post(reverse("integrations:plan-requeue", args=["gb-r01"]), PLAN)
    plan = PartitionPlan.objects.get()
    assert response.status_code == 302 and response.url == reverse("integrations:plan-detail", args=[plan.pk])
    assert plan.status == PlanStatus.DRAINING and plan.created_by == platform_admin
    states = dict(Job.objects.values_list("name", "state"))
    assert states == {"train-a": JobState.PENDING, "train-b": JobState.PENDING, "build-a": JobState.RUNNING}


def test_requeue_now_with_nothing_checkpointable_is_a_400_that_writes_nothing(
    demo_inventory, client_as, platform_admin
):
    build = run_job(make_department("Ops"), trays=["gb-r01-t04"], name="build-x", priority_class="build")
    client = client_as(platform_admin)
    page = client.get(reverse("integrations:plan-requeue", args=["gb-r01"]), PLAN)
    assert b"requeue-button" in page.content and b" disabled>" in page.content
    before = counts()
    response = client.post(reverse("integrations:plan-requeue", args=["gb-r01"]), PLAN)
    assert response.status_code == 400 and "checkpointable" in response.context["apply_error"]
    nothing_written(before, [build])


@pytest.mark.parametrize("persona", ["lead_a", "member_a", "member_b", "outsider"])
def test_only_platform_admins_may_requeue_or_schedule(jobs, client_as, persona):
    client = client_as(persona)
    before = counts()
    start = timezone.now() + timedelta(hours=1)
    window = {
        **PLAN,
        "window_start": f"{start:%Y-%m-%dT%H:%M}",
        "window_end": f"{start + timedelta(hours=2):%Y-%m-%dT%H:%M}",
    }
    assert client.get(reverse("integrations:plan-requeue", args=["gb-r01"]), PLAN).status_code == 403
    assert client.post(reverse("integrations:plan-requeue", args=["gb-r01"]), PLAN).status_code == 403
    assert client.post(reverse("integrations:plan-schedule", args=["gb-r01"]), window).status_code == 403
    nothing_written(before, jobs)


def _local(moment) -> str:
    return f"{moment.astimezone(TOKYO):%Y-%m-%dT%H:%M}"


def test_a_window_is_typed_in_the_viewers_zone_shown_on_the_plan_and_in_the_list_and_cancel_removes_it(
    jobs, client, platform_admin
):
    client.force_login(platform_admin)
    client.cookies["rackplane_tz"] = "Asia/Tokyo"
    start = (timezone.now() + timedelta(days=2)).replace(second=0, microsecond=0)
    response = client.post(
        reverse("integrations:plan-schedule", args=["gb-r01"]),
        {
            **PLAN,
            "window_start": _local(start),
            "window_end": _local(start + timedelta(hours=4)),
            "window_requeue": "on",
        },
    )
    plan = PartitionPlan.objects.get()
    assert response.status_code == 302 and response.url == reverse("integrations:plan-detail", args=[plan.pk])
    window = PlanWindow.objects.get(plan=plan)
    assert (window.starts_at, window.ends_at) == (start, start + timedelta(hours=4))  # kept in UTC
    assert window.requeue and window.state == WindowState.SCHEDULED and plan.status == PlanStatus.DRAFT
    assert all(state == JobState.RUNNING for state in Job.objects.values_list("state", flat=True))

    shown = f"{start.astimezone(TOKYO):%Y-%m-%d %H:%M}"
    detail = client.get(reverse("integrations:plan-detail", args=[plan.pk])).content.decode()
    assert (
        'data-window-state="scheduled"' in detail and shown in detail and "Waiting for its window" in detail
    )
    listing = client.get(reverse("integrations:plan-list")).content.decode()
    assert re.search(r'<td class="plan-window"><span class="window-when">Window ' + shown, listing)

    cancel = reverse("integrations:plan-cancel", args=[plan.pk])
    assert client.post(cancel, {"confirmed": "yes"}).status_code == 302
    assert not PlanWindow.objects.exists()
    assert PartitionPlan.objects.get().status == PlanStatus.CANCELLED


HOSTILE = {
    "not a time": ({"window_start": "tomorrow", "window_end": "later"}, "window_start"),
    "end before start": (None, "window_end"),
    "year 1": ({"window_start": "0001-01-01T00:00", "window_end": "0001-01-01T05:00"}, "window_start"),
    "year 9999": ({"window_start": "9999-12-31T20:00", "window_end": "9999-12-31T23:59"}, "window_start"),
    "year 2100": ({"window_start": "2100-01-01T00:00", "window_end": "2100-01-01T05:00"}, "window_start"),
    # A form body cannot carry a lone surrogate but as the bytes UTF-8 forbids for one (sent raw below).
    "lone surrogate": ({"window_start": "2030-01-01T00:00%ED%A0%80", "window_end": "x"}, "window_start"),
    "control chars": ({"window_start": "2030-01-01\x00T00:00", "window_end": "\x1b"}, "window_start"),
    # A NUL after a valid time was dropped by the parser and the window accepted (a walkthrough's finding).
    "trailing NUL": (
        {"window_start": "2030-01-01T05:00\x00", "window_end": "2030-01-01T06:00"},
        "window_start",
    ),
    "a list": ({"window_start": ["2030-01-01T00:00", "2031-01-01T00:00"], "window_end": ""}, "window_end"),
    "in the past": (
        {"window_start": "2001-01-01T00:00", "window_end": "2001-01-01T04:00"},
        "window_start",
    ),
}


@pytest.mark.slow(reason="8 cases, 2.0 s together on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_window_is_a_400_in_words_that_writes_nothing(case, jobs, client, platform_admin):
    client.force_login(platform_admin)
    client.cookies["rackplane_tz"] = "Pacific/Kiritimati"  # UTC+14: year 1 there cannot become UTC
    values, field = HOSTILE[case]
    if values is None:
        start = timezone.now() + timedelta(days=1)
        values = {"window_start": _local(start), "window_end": _local(start - timedelta(hours=1))}
    before = counts()
    url = reverse("integrations:plan-schedule", args=["gb-r01"])
    if case == "lone surrogate":
        body = "preset=2x9&" + "&".join(f"{key}={value}" for key, value in values.items())
        response = client.post(url, body, content_type="application/x-www-form-urlencoded")
    else:
        response = client.post(url, {**PLAN, **values})
    assert response.status_code == 400
    assert response.context["window_form"].errors.get(field), response.context["window_form"].errors
    assert response.context["apply_error"]
    nothing_written(before, jobs)


def test_a_window_for_a_plan_that_cannot_be_made_or_another_racks_plan_is_refused(
    jobs, client, platform_admin
):
    client.force_login(platform_admin)
    start = timezone.now() + timedelta(hours=1)
    window = {
        "window_start": f"{start:%Y-%m-%dT%H:%M}",
        "window_end": f"{start + timedelta(hours=2):%Y-%m-%dT%H:%M}",
    }
    before = counts()
    bad = client.post(
        reverse("integrations:plan-schedule", args=["gb-r01"]),
        {"preset": "custom", "slots": ["1-19"], **window},
    )
    assert bad.status_code == 400
    assert (
        client.post(reverse("integrations:plan-schedule", args=["gb-r99"]), {**PLAN, **window}).status_code
        == 404
    )
    assert (
        client.get(reverse("integrations:plan-schedule", args=["gb-r01"]), {**PLAN, **window}).status_code
        == 405
    )
    # Another plan's id is not something these forms take: cancelling one that does not exist is a 404.
    assert client.post(reverse("integrations:plan-cancel", args=[987654])).status_code == 404
    nothing_written(before, jobs)


def test_a_window_too_short_for_the_plan_says_to_choose_another_window_not_to_fix_the_checks(
    jobs, client, platform_admin
):
    """The jobs in the plan's way may run 2 hours: a 30-minute window is refused, and the advice is about the
    window (a walkthrough was told to fix the checks, layout and names, of a plan that had nothing wrong)."""
    client.force_login(platform_admin)
    client.cookies["rackplane_tz"] = "Asia/Tokyo"
    start = (timezone.now() + timedelta(minutes=10)).replace(second=0, microsecond=0)
    before = counts()
    response = client.post(
        reverse("integrations:plan-schedule", args=["gb-r01"]),
        {**PLAN, "window_start": _local(start), "window_end": _local(start + timedelta(minutes=30))},
    )
    assert response.status_code == 400
    assert "the plan would not apply in it" in response.context["apply_error"]
    text = html.unescape(re.sub(r"<[^>]+>", "", response.content.decode()))
    assert "What to do: choose a later or longer window in Or in a maintenance window" in text
    assert "fix what the checks below say" not in text
    assert "The plan was not scheduled." in text and "The plan was not applied." not in text
    japanese = client.post(
        reverse("integrations:plan-schedule", args=["gb-r01"]),
        {**PLAN, "window_start": _local(start), "window_end": _local(start + timedelta(minutes=30))},
        HTTP_ACCEPT_LANGUAGE="ja",
    ).content.decode()
    assert "計画は予約されませんでした。" in japanese and "より遅い、またはより長い期間を選び" in japanese
    assert not english_left(japanese)
    nothing_written(before, jobs)


@pytest.mark.parametrize("drain_first", ["", "on"])
def test_the_busy_previews_summary_leads_to_requeue_now_with_drain_first_ticked_or_not(
    jobs, client_as, platform_admin, drain_first
):
    """The second walkthrough: with Drain first ticked the preview described Requeue now and when it would
    apply, but offered no way to it (the only button sat beside each job's error, which Drain first takes
    away). The summary's estimate leads to the Requeue now page either way; that page offers no second link
    to itself."""
    client = client_as(platform_admin)
    params = {**PLAN, **({"drain_first": drain_first} if drain_first else {})}
    preview = client.get(reverse("integrations:plan-preview", args=["gb-r01"]), params).content.decode()
    found = re.search(r'class="button small requeue-now-summary" href="([^"]+)"', preview)
    assert found, "no Requeue now in the summary"
    href = html.unescape(found[1])
    assert href.startswith(reverse("integrations:plan-requeue", args=["gb-r01"]) + "?")
    page = client.get(href)
    assert page.status_code == 200 and [j.name for j in page.context["requeue"].requeued] == [
        "train-a",
        "train-b",
    ]
    assert "requeue-now-summary" not in page.content.decode()
