"""When a busy plan applies (integrations.plans.requeue_now.latest_apply: the jobs in its way reach their time
limits), said the same in the busy summary, the preview's Apply panel and a draining plan's progress page, in
the viewer's zone with the date when it is not today; and a plan waiting for its maintenance window reads as
scheduled on its page and in the list, and counts as in flight."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.urls import reverse
from django.utils import timezone

from integrations.plans import requeue_now as busy
from integrations.plans import service as plans
from integrations.plans import windows
from inventory.choices import PlanStatus
from inventory.models import PartitionPlan, Rack
from inventory.planning import preset_layout
from scheduling.choices import PriorityClass
from scheduling.models import Job
from tests.factories import make_department, run_job
from tests.i18n_check import assert_japanese

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("local_target")]

TOKYO = ZoneInfo("Asia/Tokyo")
PLAN = {"preset": "2x9", "drain_first": "on"}


@pytest.fixture
def rack(demo_inventory) -> Rack:
    return Rack.objects.get(name="gb-r01")


@pytest.fixture
def in_the_way(rack):
    """On gb-r01 (which the 2x9 plan moves): a day-long checkpointable pretraining job started an hour ago,
    whose limit ends last, and a 90-minute build job (not checkpointable) started now."""
    ops = make_department("Ops")
    now = timezone.now()
    return {
        "pretrain": run_job(
            ops, trays=["gb-r01-t01", "gb-r01-t02"], name="pretrain", over_quota=True,
            started_at=now - timedelta(hours=1), time_limit_minutes=1440,
        ),
        "build": run_job(
            ops, trays=["gb-r01-t05"], name="build-1", over_quota=True, priority_class=PriorityClass.BUILD,
            started_at=now, time_limit_minutes=90,
        ),
    }  # fmt: skip


def ends(job) -> timezone.datetime:
    return job.started_at + timedelta(minutes=job.time_limit_minutes)


def in_tokyo(moment) -> str:
    """`moment` as the page writes it in Tokyo: the time alone on the same day there within a day of now (a
    run just after midnight in Tokyo sees a day-long job end today), else with its date."""
    local, now = moment.astimezone(TOKYO), timezone.now()
    if local.date() == now.astimezone(TOKYO).date() and abs(moment - now) < timedelta(days=1):
        return f"{local:%H:%M} JST"
    return f"{local:%Y-%m-%d %H:%M} JST"


def time_element(moment, shown: str | None = None) -> str:
    """How the `clock` filter shows `moment` (in Tokyo, with its date unless `shown` says otherwise)."""
    return f'<time class="nowrap" datetime="{moment.isoformat()}">{shown or in_tokyo(moment)}</time>'


def applies_by(when: str, job) -> str:
    link = f'<a href="{reverse("scheduling:job-detail", args=[job.pk])}">job #{job.pk}</a>'
    return f"The plan applies by <b>{when}</b> at the latest (when {link}'s time limit ends)."


def tokyo_admin(client, platform_admin):
    client.force_login(platform_admin)
    client.cookies["rackplane_tz"] = "Asia/Tokyo"
    return client


def test_drain_first_applies_when_the_last_time_limit_ends_and_requeue_now_by_the_same_rule(rack, in_the_way):
    now = timezone.now()
    summary = busy.summarize(rack, plans.check(rack, preset_layout("2x9"), drain=True), now)
    drain = summary.drain_first
    assert drain.job.pk == in_the_way["pretrain"].pk and drain.by_limit
    assert drain.at == ends(in_the_way["pretrain"])
    # Requeue now requeues the pretraining job (its grace period): the build job's limit is then the latest.
    after = summary.after_requeue
    assert after.job.pk == in_the_way["build"].pk and after.by_limit
    assert after.at == ends(in_the_way["build"]) and summary.applies_by == after.at

    waited = busy.latest_apply([], [], now)
    assert (waited.at, waited.job) == (now, None)  # nothing in the way: at once


def test_the_busy_summary_and_the_apply_panel_say_when_in_the_viewers_zone_with_the_date(
    rack, in_the_way, client, platform_admin
):
    client = tokyo_admin(client, platform_admin)
    page = client.get(reverse("integrations:plan-preview", args=["gb-r01"]), PLAN)
    assert page.status_code == 200
    text = page.content.decode()
    sentence = applies_by(time_element(ends(in_the_way["pretrain"])), in_the_way["pretrain"])
    assert text.count(sentence) == 2  # the busy summary and the Apply panel's "Drain first"
    # Requeue now's estimate: the same formatter, the build job's limit (today within the hour, or dated).
    build_end = ends(in_the_way["build"]).astimezone(TOKYO)
    today = build_end.date() == timezone.now().astimezone(TOKYO).date()
    shown = time_element(ends(in_the_way["build"]), f"{build_end:%H:%M} JST" if today else None)
    assert f"After Requeue now the plan applies by <b>{shown}</b> at the latest" in text


def test_a_job_without_a_time_limit_is_named_and_no_latest_time_given(
    rack, in_the_way, client, platform_admin
):
    endless = run_job(
        make_department("Lab"), trays=["gb-r01-t09"], name="endless", over_quota=True,
        priority_class=PriorityClass.BUILD, started_at=timezone.now(), time_limit_minutes=0,
    )  # fmt: skip
    summary = busy.summarize(rack, plans.check(rack, preset_layout("2x9"), drain=True))
    assert summary.drain_first.at is None and summary.drain_first.job.pk == endless.pk
    assert summary.applies_by is None  # Requeue now waits for it too
    text = (
        tokyo_admin(client, platform_admin)
        .get(reverse("integrations:plan-preview", args=["gb-r01"]), PLAN)
        .content.decode()
    )
    link = f'<a href="{reverse("scheduling:job-detail", args=[endless.pk])}">Job #{endless.pk}</a>'
    assert f"{link} has no time limit, so no latest time can be given for the plan." in text
    assert "applies by <b>" not in text.split("After Requeue now")[0]


def test_a_draining_plans_page_gives_the_same_time(rack, in_the_way, client, platform_admin):
    plan = plans.apply_plan(
        plans.create_plan(rack, preset_layout("2x9"), drain=True, user=platform_admin), user=platform_admin
    )
    assert plan.status == PlanStatus.DRAINING
    text = tokyo_admin(client, platform_admin).get(reverse("integrations:plan-detail", args=[plan.pk]))
    sentence = applies_by(time_element(ends(in_the_way["pretrain"])), in_the_way["pretrain"])
    assert sentence in text.content.decode()


def test_a_plan_waiting_for_its_window_reads_as_scheduled_and_counts_as_in_flight(
    rack, in_the_way, client, platform_admin
):
    start = (timezone.now() + timedelta(days=2)).replace(second=0, microsecond=0)
    plan = windows.schedule(
        rack, preset_layout("2x9"), starts_at=start, ends_at=start + timedelta(hours=4), requeue=False,
        user=platform_admin,
    )  # fmt: skip
    assert plan.status == PlanStatus.DRAFT
    client = tokyo_admin(client, platform_admin)
    url = reverse("integrations:plan-detail", args=[plan.pk])
    detail = client.get(url).content.decode()
    assert '<span class="badge plan-scheduled">Scheduled</span>' in detail
    assert f"waiting for its window: starts by itself at {time_element(start)}" in detail
    assert 'data-done="false"' in detail and ">done<" not in detail and "Draft" not in detail
    assert client.get(url, headers={"HX-Request": "true"}).status_code == 200  # it keeps following the plan

    listing = html.unescape(client.get(reverse("integrations:plan-list")).content.decode())
    assert "1 plan in flight. Of these, 1 is waiting for its maintenance window." in listing
    assert f"waiting for its window: starts at {time_element(start)}" in listing and ">Draft<" not in listing

    # A draining plan is in flight too (made one here as the beat would); the waiting one still counts once.
    draining = plans.create_plan(rack, preset_layout("2x9"), drain=True, user=platform_admin)
    PartitionPlan.objects.filter(pk=draining.pk).update(status=PlanStatus.DRAINING)
    listing = html.unescape(client.get(reverse("integrations:plan-list")).content.decode())
    assert "2 plans in flight. Of these, 1 is waiting for its maintenance window." in listing

    plans.cancel_plan(plan)
    listing = html.unescape(client.get(reverse("integrations:plan-list")).content.decode())
    assert "1 plan in flight." in listing and "waiting for" not in listing


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_plan_waiting_for_its_window_shows_in_the_wizard_where_plans_in_flight_are(
    rack, in_the_way, client, platform_admin
):
    """The wizard's rack list said "—" under "Plan in flight" for a rack whose plan waited for its window, and
    the rack's layout page did not mention it (a walkthrough found plan #2 of gb-r07 nowhere there)."""
    start = (timezone.now() + timedelta(days=6)).replace(second=0, microsecond=0)
    plan = windows.schedule(
        rack, preset_layout("2x9"), starts_at=start, ends_at=start + timedelta(hours=4), requeue=False,
        user=platform_admin,
    )  # fmt: skip
    client = tokyo_admin(client, platform_admin)
    detail = reverse("integrations:plan-detail", args=[plan.pk])
    racks = client.get(reverse("integrations:plan-new")).content.decode()
    row = re.search(r'<tr data-rack="gb-r01">.*?</tr>', racks, re.S).group(0)
    assert f'<a href="{detail}" data-plan="{plan.pk}">#{plan.pk} scheduled: its window starts at ' in row
    assert time_element(start) in row
    other = re.search(r'<tr data-rack="gb-r02">.*?</tr>', racks, re.S).group(0)
    assert '<td class="plans-in-flight"><span class="muted">—</span></td>' in other

    for step in ("plan-layout", "plan-names", "plan-preview"):
        page = html.unescape(client.get(reverse(f"integrations:{step}", args=["gb-r01"])).content.decode())
        note = re.search(r'<p class="note note-info scheduled-plan".*?</p>', page, re.S).group(0)
        assert (
            f'<a href="{detail}">Plan #{plan.pk}</a> is scheduled on gb-r01 for the maintenance window'
            in note
        )
        assert time_element(start) in note and time_element(start + timedelta(hours=4)) in note
    assert (
        "scheduled-plan"
        not in client.get(reverse("integrations:plan-layout", args=["gb-r02"])).content.decode()
    )
    page = assert_japanese(client, reverse("integrations:plan-layout", args=["gb-r01"]))
    assert "メンテナンス期間" in page

    plans.cancel_plan(plan)
    racks = client.get(reverse("integrations:plan-new")).content.decode()
    assert f'data-plan="{plan.pk}"' not in racks
    assert (
        "scheduled-plan"
        not in client.get(reverse("integrations:plan-layout", args=["gb-r01"])).content.decode()
    )


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_after_requeue_now_the_plans_page_gives_the_requeue_time_the_confirm_page_promised(
    rack, client, platform_admin
):
    """After "Requeue now" on a rack whose jobs in the way are all checkpointable, the confirm page promised
    the end of their grace period, but the plan's page said the plan applied by the last job's time limit (a
    day later) and listed the jobs being requeued as waited for (a walkthrough found it on gb-r04)."""
    ops = make_department("Ops")
    now = timezone.now()
    train = [
        run_job(
            ops, trays=[f"gb-r01-t{slot:02d}"], name=f"train-{slot}", over_quota=True, backend_id=f"{slot}",
            started_at=now - timedelta(hours=1), time_limit_minutes=1440 + slot,
        )
        for slot in (1, 2)
    ]  # fmt: skip
    client = tokyo_admin(client, platform_admin)
    url = reverse("integrations:plan-requeue", args=["gb-r01"])
    promised = client.get(url, PLAN).context["requeue"]
    assert [job.pk for job in promised.requeued] == [job.pk for job in train] and not promised.waited
    response = client.post(url, PLAN)
    assert response.status_code == 302, response.content.decode()
    plan = PartitionPlan.objects.get()
    assert plan.status == PlanStatus.DRAINING
    requeue_at = {job.pk: job.requeue_at for job in Job.objects.filter(pk__in=[job.pk for job in train])}
    assert all(requeue_at.values())

    page = client.get(reverse("integrations:plan-detail", args=[plan.pk]))
    latest = page.context["latest"]
    assert not latest.by_limit and latest.at == max(requeue_at.values())
    assert abs((latest.at - promised.applies_by).total_seconds()) < 60  # what the confirm page said
    assert page.context["waiting_on"] == []
    text = page.content.decode()
    job = latest.job.pk
    link = f'<a href="{reverse("scheduling:job-detail", args=[job])}">job #{job}</a>'
    assert (
        f"The plan applies by <b>{time_element(latest.at, f'{latest.at.astimezone(TOKYO):%H:%M} JST')}</b>"
        f" at the latest (when {link} is requeued, at the end of its grace period)."
        in text
        or f"The plan applies by <b>{time_element(latest.at)}</b> at the latest (when {link} is requeued"
        in text
    )
    assert "time limit ends" not in text and "once they have been requeued" in text
    assert "were asked to checkpoint: each is requeued when its grace period ends" in text
    assert_japanese(client, reverse("integrations:plan-detail", args=[plan.pk]))


def test_the_new_sentences_read_in_japanese(rack, in_the_way, client, platform_admin):
    client = tokyo_admin(client, platform_admin)
    pretrain = in_the_way["pretrain"]
    page = assert_japanese(client, reverse("integrations:plan-preview", args=["gb-r01"]), data=PLAN)
    when = time_element(ends(pretrain))
    link = f'<a href="{reverse("scheduling:job-detail", args=[pretrain.pk])}">ジョブ #{pretrain.pk}</a>'
    sentence = f"計画は遅くとも <b>{when}</b> までに適用されます（{link} の制限時間が終わる時刻）。"  # noqa: RUF001
    assert page.count(sentence) == 2

    start = (timezone.now() + timedelta(days=2)).replace(second=0, microsecond=0)
    plan = windows.schedule(
        rack, preset_layout("2x9"), starts_at=start, ends_at=start + timedelta(hours=4), requeue=False,
        user=platform_admin,
    )  # fmt: skip
    detail = assert_japanese(client, reverse("integrations:plan-detail", args=[plan.pk]))
    assert f"メンテナンス期間を待機中: {time_element(start)} に自動で開始します" in detail
    listing = assert_japanese(client, reverse("integrations:plan-list"))
    assert "うち 1 件はメンテナンス期間を待機中です。" in listing
