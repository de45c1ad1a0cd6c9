"""Rackplane's own sentences stored in English, shown in Japanese with Japanese punctuation: the pending
reasons on the home page, the inbox's notifications about a job, a job's backend message and history, why a
job runs where it does; the error pages' way home named as the menu names it; and the main pages in Japanese
without ASCII punctuation or stray spaces beside Japanese text (tests.i18n_check.punctuation_left)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from core.models import InboxItem, NotificationChannel, NotificationSubscription
from core.sentences import say
from integrations import words as integration_words
from integrations.dispatch import backend_state_words
from integrations.jobs import BackendJobState, BackendJobStatus
from scheduling.choices import JobEventKind, JobState
from scheduling.engine import placement
from scheduling.engine.words import CLAUSES, WAITING
from scheduling.models import JobEvent
from scheduling.services.actions import notify_job
from scheduling.services.admission import submitted_words
from scheduling.services.pass_writes import WHY_HERE, placed_words
from tests import factories
from tests.i18n_check import assert_japanese_punctuation, english_left, punctuation_left, shown_text
from tests.scheduling import test_i18n_pages as scheduling_pages

pytestmark = pytest.mark.django_db

# An admin, a lead and a member whose names hold no English word (the checker reads names too): a fixture.
people = scheduling_pages.people

# Why a 72-GPU job waits, as the engine writes it (the walkthrough's bob's home page).
REASON = say(
    WAITING,
    reason=say(placement.NO_RACK_HAS, trays=18, most=16)
    + CLAUSES
    + say(placement.LARGEST_BLOCK_MANY, trays=16, partition="gb-r08 default"),
)


@pytest.mark.parametrize("who", ["sato", "suzuki"])
def test_the_home_page_shows_why_jobs_wait_in_japanese(client, people, department_a, who):
    factories.make_job(department_a, "bigone", state=JobState.PENDING, gpus=72, pending_reason=REASON)
    client.force_login(people[who])
    html = client.get(reverse("home"), HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    text = shown_text(html)
    assert "no rack has" not in text
    assert "18 台" in text and "gb-r08 default" in text  # the values, kept
    assert not [left for left in english_left(html) if "rack" in left or "trays" in left]
    assert not punctuation_left(html)
    # English viewers read it as stored.
    assert REASON in client.get(reverse("home")).content.decode()


def test_a_job_notification_reads_in_the_viewers_language(client, people, department_a):
    member = people["suzuki"]
    NotificationSubscription.objects.create(
        name="mine",
        channel=NotificationChannel.PORTAL,
        events=["job_started", "job_preempted"],
        owner=member,
        scope=f"user:{member.pk}",
    )
    job = factories.make_job(department_a, "belltest", submitted_by=member)
    running = say(
        integration_words.RUNNING_ON, backend=integration_words.RENDERED_FILES, backend_id="rendered/rp-1"
    )
    notify_job(job, JobEventKind.STARTED, running)
    item = InboxItem.objects.get(user=member)
    # Stored and sent in English, as before.
    assert item.subject == f"Job belltest (#{job.pk}) started: running on rendered files as rendered/rp-1"
    client.force_login(member)
    html = assert_japanese_punctuation(client, reverse("my-inbox"))
    text = shown_text(html)
    assert f"ジョブ belltest（#{job.pk}）が開始しました" in text  # noqa: RUF001
    assert "レンダリング済みファイル" in text and "rendered/rp-1" in text
    assert not english_left(html)
    assert f"Job belltest (#{job.pk}) started" in shown_text(client.get(reverse("my-inbox")).content.decode())


def test_a_jobs_backend_message_history_and_placement_read_in_japanese(
    client, people, department_a, demo_inventory
):
    trays = factories.free_trays(1)
    job = factories.make_job(department_a, "trainer", trays=trays, submitted_by=people["suzuki"])
    status = BackendJobStatus(
        "rendered/rp-1",
        BackendJobState.RUNNING,
        say(
            integration_words.EMBEDDED_RENDERED_UNTIL,
            rendered_file="rp-1.json",
            backend_kind="slurm",
            ends_at="2026-11-30 07:26 UTC",  # core.moments.utc_words
        ),
    )
    job.backend_message = backend_state_words(integration_words.RENDERED_FILES, status)
    job.save(update_fields=["backend_message"])
    JobEvent.objects.create(job=job, kind=JobEventKind.SUBMITTED, message=submitted_words(4, "partition"))
    JobEvent.objects.create(
        job=job,
        kind=JobEventKind.PLACED,
        message=placed_words(
            False, 1, "gb-r01 p1", why=say(placement.ON_PARTLY_USED_TRAY_ONE, partition="gb-r01 p1", free=1)
        ),
        placement=job.placement,
    )
    JobEvent.objects.create(
        job=job,
        kind=JobEventKind.DISPATCHED,
        message=say(
            integration_words.SUBMITTED_TO,
            backend=integration_words.RENDERED_FILES,
            backend_id="rendered/rp-1",
        ),
    )
    client.force_login(people["suzuki"])
    url = reverse("scheduling:job-detail", args=[job.pk])
    html = client.get(url, HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    text = shown_text(html)
    assert "rendered files" not in text and "no live" not in text and "submitted to" not in text
    assert "レンダリング済みファイル: 実行中" in text and "rp-1.json" in text
    assert "GPU 4 基、トポロジー「1 つの NVLink パーティション」" in text  # the topology's label
    # Why here ends with 。 (no ASCII full stop after the translated sentence); one free GPU, singular.
    assert "空き GPU 1 基" in text
    assert "placed" not in text and "why here" not in text  # the history's placed event too
    assert WHY_HERE in "%(placed)s · why here: %(why)s"  # the job page finds the reason after it
    assert not punctuation_left(html), punctuation_left(html)
    english = shown_text(client.get(url).content.decode())
    assert "whose 1 free GPU fits it best" in english and "1 free GPUs" not in english
    assert "rendered files: running (rendered to rp-1.json: no live slurm backend is configured" in english


def test_the_waiting_reasons_on_a_job_page_are_joined_the_japanese_way(client, people, department_a):
    job = factories.make_job(
        department_a, "waiter", state=JobState.PENDING, gpus=72, pending_reason=REASON, preemptions=1
    )
    client.force_login(people["suzuki"])
    html = assert_japanese_punctuation(client, reverse("scheduling:job-detail", args=[job.pk]))
    why = shown_text(re.search(r'data-why="pending">\s*<p>(.*?)</p>', html, re.DOTALL).group(1))
    assert why.count("。") >= 3 and "。 " not in why  # sentences follow each other without a space


@pytest.mark.slow(reason="2 cases, 0.5 s together on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(("who", "link"), [("kato", "概要に戻る"), ("suzuki", "ホームに戻る")])
def test_the_error_pages_lead_home_by_the_menus_name(client, people, who, link):
    client.force_login(people[who])
    html = client.get("/no/such/page/", HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    assert f'<a href="/">{link}</a>' in html
    english = client.get("/no/such/page/").content.decode()
    assert ('<a href="/">Back to Home</a>' in english) == (who == "suzuki")
    assert ('<a href="/">Back to the overview</a>' in english) == (who == "kato")


@pytest.mark.parametrize("who", ["kato", "sato", "suzuki"])
def test_the_main_pages_keep_japanese_punctuation(client, people, department_a, demo_inventory, who):
    factories.make_job(department_a, "bigone", state=JobState.PENDING, gpus=72, pending_reason=REASON)
    client.force_login(people[who])
    for url in (
        reverse("home"),
        reverse("scheduling:job-list"),
        reverse("inventory:rack-list"),
        reverse("my-inbox"),
        reverse("my-notifications"),
        reverse("scheduling:department-detail", args=[department_a.slug]),
        *([reverse("scheduling:admin-dashboard")] if who == "kato" else []),
    ):
        assert_japanese_punctuation(client, url)


def test_a_placed_event_reads_as_the_placed_sentence_then_why_here(
    client, people, department_a, demo_inventory
):
    """The walkthrough's job 65: "why here" was read as part of the partitions' names, so its sentence sat
    inside the placed one ("配置 gb-r03 default · ここに配置した理由: …のトレイ 1 台に…で配置")."""
    trays = factories.free_trays(1)
    job = factories.make_job(department_a, "trainer", trays=trays, submitted_by=people["suzuki"])
    why = say(placement.ON_PARTLY_USED_TRAY_ONE, partition="gb-r03 default", free=1)
    message = placed_words(False, 1, "gb-r03 default", why=why)
    JobEvent.objects.create(job=job, kind=JobEventKind.PLACED, message=message, placement=job.placement)
    JobEvent.objects.create(
        job=job, kind=JobEventKind.SUBMITTED, message=submitted_words(16, "any") + CLAUSES + "x"
    )
    client.force_login(people["suzuki"])
    html = client.get(reverse("scheduling:job-detail", args=[job.pk]), HTTP_ACCEPT_LANGUAGE="ja").content
    history = shown_text(re.search(r'<ol class="job-events">.*?</ol>', html.decode(), re.DOTALL).group(0))
    placed = "gb-r03 default のトレイ 1 台にクォータ内で配置"
    assert placed + "。ここに配置した理由: " in history, history
    assert history.count("クォータ内で配置") == 1  # once, before the reason (not after it)
    assert "トポロジー「任意の場所」" in history and "any" not in history.split()
    # English as stored.
    english = shown_text(client.get(reverse("scheduling:job-detail", args=[job.pk])).content.decode())
    assert message in english and "16 GPUs, any" in english
