"""A job requeued by a partition plan's "Requeue now" or by a fault (scheduling.requeue) is told as what it
was: its history's events are a plan's (not "its tray failed", not "requeued after a fault"), counted as a
plan's requeue (not a preemption), its sentences read back in the viewer's language with the requeue's moment
in the viewer's zone, named; its submitter's "job requeued" subscription hears of it (a fault's too).

Also: a seeded job's history, and the class in a wait reason, read in Japanese."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.urls import reverse
from django.utils import formats, timezone

from core.models import InboxItem, Notification, NotificationEvent
from core.moments import utc_words
from portal.demo.jobs import job_story, placed_on
from portal.web.middleware import TIMEZONE_COOKIE
from scheduling import requeue
from scheduling.choices import JobEventKind, JobState, PriorityClass
from scheduling.engine.scheduler import GUARANTEE_ONLY
from scheduling.engine.words import WAITING, say
from scheduling.models import Job, JobEvent
from scheduling.words import SEEDED_DEMO_JOB
from tests import factories
from tests.scheduling.test_i18n_pages import assert_japanese

pytestmark = pytest.mark.django_db

TOKYO = ZoneInfo("Asia/Tokyo")
# Past 15:00 UTC: the requeue's moment falls on the next day in Tokyo (its date must be the viewer's).
ASKED = datetime(2026, 11, 30, 15, 57, 30, tzinfo=UTC)


@pytest.fixture
def submitter(department_a):
    return factories.make_member("suzuki", department_a)


@pytest.fixture
def running(demo_inventory, department_a, submitter):
    """A training job (checkpoint policy, 5 min grace) running in its backend on one tray of gb-r02."""
    return factories.run_job(
        department_a,
        trays=["gb-r02-t04"],
        name="train-llm",
        submitted_by=submitter,
        priority_class=PriorityClass.TRAIN,
        backend_id="4242",
    )


def viewer(client, user):
    client.force_login(user)
    client.cookies[TIMEZONE_COOKIE] = "Asia/Tokyo"
    return client


def requeued_for_plan(job: Job) -> Job:
    """Plan #7's "Requeue now": asked to checkpoint at ASKED, requeued when its grace period is over."""
    [handled] = requeue.requeue_for_plan([job.pk], 7, "gb-r02", now=ASKED)
    assert handled.what == requeue.SIGNAL
    assert requeue.requeue_due(ASKED + timedelta(seconds=301)) == [job.pk]
    return Job.objects.get(pk=job.pk)


def test_a_plans_requeue_is_a_plans_in_its_history_and_counts(running):
    job = requeued_for_plan(running)

    kinds = list(job.events.values_list("kind", flat=True))
    assert kinds[-2:] == [JobEventKind.PLAN_CHECKPOINT, JobEventKind.PLAN_REQUEUED]
    assert not job.events.filter(kind__in=[JobEventKind.FAULT, JobEventKind.REQUEUED]).exists()
    assert (job.state, job.preemptions, job.plan_requeues, job.fault_requeues) == (JobState.PENDING, 1, 1, 0)
    asked = job.events.get(kind=JobEventKind.PLAN_CHECKPOINT).message
    # The moment with its date, UTC named (core.moments.utc_words): a page reads it in the viewer's zone.
    assert asked == (
        "plan #7 re-carves gb-r02: asked to checkpoint (SIGUSR1); requeued at "
        f"{utc_words(ASKED + timedelta(seconds=300))} unless it ends first (policy checkpoint, grace 5 min)"
    )
    assert job.events.get(kind=JobEventKind.PLAN_REQUEUED).message == (
        "plan #7 re-carves gb-r02 (requeue now, policy checkpoint, grace 5 min)"
    )


def test_its_page_in_japanese_names_the_plan_and_the_moment_in_the_viewers_zone(client, running, submitter):
    job = requeued_for_plan(running)
    url = reverse("scheduling:job-detail", args=[job.pk])

    html = assert_japanese(viewer(client, submitter), url)

    due = timezone.localtime(ASKED + timedelta(seconds=300), TOKYO)
    assert formats.date_format(due, "Y-m-d H:i:s T") in html  # 2026-12-01 01:02:30 JST
    assert "UTC unless" not in html and "01:02:30 UTC" not in html
    assert "パーティション計画のためチェックポイントを要求" in html
    assert "パーティション計画のため再キュー投入" in html
    assert "計画 #7 による" in html
    assert "トレイの障害" not in html and "障害後に再キュー投入" not in html  # no fault's labels
    # Counted as a plan's requeue, not a preemption.
    assert 'data-count="plan-requeues"' in html and 'data-count="preempted"' not in html
    assert "パーティション計画のため 1 回再キュー投入されました" in html  # why it waits


def test_its_page_in_english_says_the_same(client, running, submitter):
    job = requeued_for_plan(running)
    client.force_login(submitter)

    html = client.get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()

    assert "Asked to checkpoint for a partition plan" in html and "Requeued for a partition plan" in html
    assert "Its tray failed" not in html and "Requeued after a fault" not in html
    assert "It was requeued 1 time for a partition plan and kept its place in the queue" in html
    assert ">Preempted<" not in html


def test_a_faults_requeue_reads_in_japanese_too(client, running, submitter):
    [handled] = requeue.handle_drained_tray(
        running.allocations.first().gpu.tray_id,
        "gb-r02-t04",
        f"rackplane: XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS) on GPU-1 at {utc_words(ASKED)}",
        now=ASKED,
    )
    assert handled.what == requeue.SIGNAL
    requeue.requeue_due(ASKED + timedelta(seconds=301))
    job = Job.objects.get(pk=running.pk)
    assert (job.fault_requeues, job.plan_requeues) == (1, 0)

    html = assert_japanese(viewer(client, submitter), reverse("scheduling:job-detail", args=[job.pk]))

    assert formats.date_format(timezone.localtime(ASKED + timedelta(seconds=300), TOKYO), "H:i:s T") in html
    assert "チェックポイントを要求しました" in html and "ポリシー: チェックポイント、猶予 5 分" in html


def test_the_submitter_hears_of_a_plans_requeue_and_of_a_faults(running, submitter, client):
    client.force_login(submitter)
    # Offered on a member's own notifications page, and saved from it.
    scope = f"user:{submitter.pk}"
    form = {"channel": "portal", "events": ["job_put_back"], "scope": scope}
    assert client.post(reverse("my-notifications"), form).status_code == 302
    job = requeued_for_plan(running)

    [item] = InboxItem.objects.filter(user=submitter)
    assert item.subject == (
        f"Job train-llm (#{job.pk}) was requeued: plan #7 re-carves gb-r02 (requeue now, policy checkpoint, "
        "grace 5 min)"
    )
    # Planned work is no fault: the health subscriptions' "Job requeued by a fault" is not sent for it.
    assert not Notification.objects.filter(event=NotificationEvent.JOB_REQUEUED).exists()
    inbox = client.get(reverse("my-inbox"), HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    assert "が再キュー投入されました: 計画 #7 による" in inbox

    # Running again, then requeued by a fault: heard too.
    again = factories.run_job(
        job.department, trays=["gb-r02-t05"], name="train-2", submitted_by=submitter, backend_id="4343"
    )
    requeue.handle_drained_tray(
        again.allocations.first().gpu.tray_id, "gb-r02-t05", "rackplane: XID 48 on GPU-2", now=ASKED
    )
    requeue.requeue_due(ASKED + timedelta(seconds=301))
    subjects = list(InboxItem.objects.filter(user=submitter).order_by("pk").values_list("subject", flat=True))
    assert subjects[1] == (
        f"Job train-2 (#{again.pk}) was requeued: XID 48 on GPU-2 drained gb-r02-t05 (policy checkpoint, "
        "grace 5 min)"
    )


def test_a_seeded_jobs_history_and_a_class_in_a_wait_reason_read_in_japanese(
    client, demo_inventory, department_a, submitter
):
    ran = factories.make_job(
        department_a, name="train-llm", state=JobState.COMPLETED, trays=["gb-r02-t06"], submitted_by=submitter
    )
    ran.started_at = ran.placed_at = timezone.now() - timedelta(hours=1)
    ran.finished_at = timezone.now()
    JobEvent.objects.bulk_create(job_story([ran], placed_on, SEEDED_DEMO_JOB))
    waiting = factories.make_job(
        department_a,
        name="serve-chat",
        state=JobState.PENDING,
        gpus=16,
        priority_class=PriorityClass.INFERENCE,
        submitted_by=submitter,
        pending_reason=say(WAITING, reason=say(GUARANTEE_ONLY, priority_class="inference", guaranteed=8)),
    )
    client = viewer(client, submitter)

    html = assert_japanese(client, reverse("scheduling:job-detail", args=[ran.pk]))
    assert "で開始（デモ用に作成したジョブ: 実行するバックエンドはありません）" in html  # noqa: RUF001
    assert "完了、終了コード 0" in html

    html = assert_japanese(client, reverse("scheduling:job-detail", args=[waiting.pk]))
    # The class as its label, as the class column shows it, not its stored value.
    assert "推論（プリエンプト不可）のジョブは部門の保証" in html  # noqa: RUF001
    assert "inference のジョブ" not in html
    listing = client.get(reverse("scheduling:job-list"), HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    assert "推論（プリエンプト不可）のジョブは部門の保証" in listing  # noqa: RUF001
