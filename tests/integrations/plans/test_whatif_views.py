"""The preview's what-if: who may run it, a POST that starts it (Celery, eager here), a GET that polls it
and only reads, clear words for an empty window, bad input and failures, and the comparison it shows."""

import json
import re
from datetime import timedelta
from html import unescape as html_unescape
from urllib.parse import urlencode

import pytest
from django.urls import reverse
from django.utils import timezone

from inventory.demo import seed_datacenter
from scheduling.choices import JobState, WhatIfState
from scheduling.models import Job, WhatIfLayout, WhatIfRun
from scheduling.whatif import MAX_DAYS
from scheduling.whatif_runs import NOT_STARTED_AFTER, NOW
from tests.factories import make_department
from tests.i18n_check import assert_japanese

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def url(view, /, *args, **params) -> str:
    query = urlencode(params, doseq=True)
    return reverse(f"integrations:{view}", args=args) + (f"?{query}" if query else "")


def start_url(rack="gb-r01") -> str:
    return url("plan-whatif", rack)


@pytest.fixture
def admin(admin_client_logged_in, demo_inventory):
    return admin_client_logged_in


def past_job(department, name, gpus, *, hours_ago, ran_h, state=JobState.COMPLETED, waited_h=0.25):
    """A job submitted `hours_ago`, that waited `waited_h` and ran `ran_h` (to now, if it still runs)."""
    now = timezone.now()
    submitted = now - timedelta(hours=hours_ago)
    started = submitted + timedelta(hours=waited_h)
    job = Job.objects.create(
        department=department,
        name=name,
        gpus=gpus,
        state=state,
        placed_at=started,
        started_at=started,
        finished_at=None if state == JobState.RUNNING else started + timedelta(hours=ran_h),
        time_limit_minutes=24 * 60,
    )
    Job.objects.filter(pk=job.pk).update(created_at=submitted)  # auto_now_add set it to now
    return job


@pytest.fixture
def history(demo_inventory):
    """Two departments' week: 36- and 72-GPU gangs and small jobs on the three seeded racks."""
    research = make_department("Research", guaranteed_gpus=96)
    vision = make_department("Vision", guaranteed_gpus=48)
    for n in range(24):
        department = research if n % 2 else vision
        gpus = (72, 36, 36, 8, 4, 36)[n % 6]
        past_job(department, f"train-gang-{n:02d}", gpus, hours_ago=150 - n * 6, ran_h=5 + n % 4)
    past_job(research, "train-long-run", 36, hours_ago=3, ran_h=0, state=JobState.RUNNING)
    return research, vision


def plan(preset="2x9", **extra) -> dict:
    return {"preset": preset, **extra}


def counts():
    return WhatIfRun.objects.count(), WhatIfLayout.objects.count()


# --- who may -----------------------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("persona", ["lead_a", "member_a", "outsider"])
def test_only_platform_admins_may_run_or_follow_a_what_if(client_as, persona, demo_inventory, admin_user):
    run = WhatIfRun.objects.create(days=7, created_by=admin_user)
    client = client_as(persona)
    response = client.post(start_url(), {**plan(), "days": 7})
    assert response.status_code == 403
    assert "Only platform admins may use the NVLink partition wizard" in response.content.decode()
    assert client.post(start_url(), {**plan(), "days": 7}, headers=HTMX).status_code == 403
    assert client.get(url("whatif-detail", run.pk)).status_code == 403
    assert client.get(url("whatif-detail", run.pk), headers=HTMX).status_code == 403
    assert counts() == (1, 0)  # nothing written


def test_signed_out_visitors_are_sent_to_log_in(client, demo_inventory):
    response = client.post(start_url(), {**plan(), "days": 7})
    assert response.status_code == 302 and "/login/" in response["Location"]
    assert counts() == (0, 0)


def test_starting_is_a_post_and_polling_is_a_get(admin):
    assert admin.get(start_url(), {**plan(), "days": 7}).status_code == 405
    run = WhatIfRun.objects.create(days=7)
    assert admin.post(url("whatif-detail", run.pk)).status_code == 405
    assert counts() == (1, 0)


# --- the preview offers it ---------------------------------------------------------------------------------


def test_the_preview_offers_the_what_if_with_the_plan_in_hidden_fields(admin):
    response = admin.get(url("plan-preview", "gb-r01", preset="2x9"))
    html = response.content.decode()
    form = re.search(
        r'<form method="post" action="/inventory/racks/gb-r01/plan/whatif/".*?</form>', html, re.S
    )
    assert form, "the preview has no what-if form"
    assert (
        'name="days"' in form.group(0)
        and 'value="7"' in form.group(0)
        and f'max="{MAX_DAYS}"' in form.group(0)
    )
    assert '<input type="hidden" name="preset" value="2x9">' in form.group(0)
    assert 'hx-post="/inventory/racks/gb-r01/plan/whatif/"' in form.group(0)
    # the portal's hashed copy, no CDN
    assert re.search(r"/static/plotly/plotly\.min\.[0-9a-f]{12}\.js", html)
    assert counts() == (0, 0)  # a preview writes nothing


def test_a_plan_with_errors_offers_no_what_if_and_refuses_one(admin):
    bad = plan("custom", slots=["1-30"])
    html = admin.get(url("plan-preview", "gb-r01", **bad)).content.decode()
    assert "The what-if runs once the checks pass." in html
    response = admin.post(start_url(), {**bad, "days": 7})
    assert response.status_code == 400
    assert "The plan has errors" in response.content.decode()
    assert counts() == (0, 0)


# --- bad input ---------------------------------------------------------------------------------------------


@pytest.mark.slow(reason="7 cases, each a full request through the stack")
@pytest.mark.parametrize(
    ("days", "words"),
    [
        ("-1", "Replay at least 1 day of history."),
        ("0", "Replay at least 1 day of history."),
        (str(MAX_DAYS + 1), f"At most {MAX_DAYS} days"),
        ("100000", f"At most {MAX_DAYS} days"),
        ("seven", "Give the days as a whole number, e.g. 7."),
        ("7.5", "Give the days as a whole number, e.g. 7."),
        ("", "Say how many days of history to replay, e.g. 7."),
    ],
)
def test_bad_days_are_a_400_in_words_and_start_nothing(
    admin, days, words, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        page = admin.post(start_url(), {**plan(), "days": days})
        partial = admin.post(start_url(), {**plan(), "days": days}, headers=HTMX)
    assert page.status_code == partial.status_code == 400
    assert words in page.content.decode()
    assert "The what-if was not started." in partial.content.decode() and words in partial.content.decode()
    assert "<html" not in partial.content.decode()  # htmx gets the words only
    assert page.context["check"].ok  # the page is the preview again, with the plan as it was
    assert counts() == (0, 0) and callbacks == []


def test_an_unknown_layout_to_try_is_refused(admin):
    response = admin.post(start_url(), {**plan(), "days": 7, "also": ["5x5"]}, headers=HTMX)
    assert response.status_code == 400
    assert "5x5 is not a preset layout to try." in response.content.decode()
    assert counts() == (0, 0)


# --- a run, start to end -----------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_post_starts_a_sweep_whose_tasks_replay_each_layout_and_the_poll_shows_the_comparison(
    admin, history, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):  # eager Celery: prepare, then the group, here
        response = admin.post(start_url(), {**plan(), "days": 7, "also": ["3x6", "1x18"]}, headers=HTMX)
        # The answer was made before the tasks ran (they start once the request's transaction commits):
        # the partial polls the run.
        run = WhatIfRun.objects.get()
        assert response.status_code == 200
        assert f'hx-get="{url("whatif-detail", run.pk)}"' in response.content.decode()
    run.refresh_from_db()
    assert run.state == WhatIfState.DONE and run.rack == "gb-r01" and run.days == 7
    assert run.jobs == 25  # the week's 24 jobs and the one still running
    # 1x18 is gb-r01 as it is: not replayed twice.
    layouts = list(run.layouts.all())
    assert [layout.label for layout in layouts] == [NOW, "This plan", "gb-r01 as 3x6"]
    assert all(layout.state == WhatIfState.DONE and layout.started_at for layout in layouts)
    assert layouts[1].carvings == [
        {
            "rack": "gb-r01",
            "partitions": [["p1", list(range(1, 10)), None], ["p2", list(range(10, 19)), None]],
        }
    ]
    now, carved, thirds = (layout.figures for layout in layouts)
    assert now["jobs"] == carved["jobs"] == thirds["jobs"] == 25
    # 36-GPU gangs do not fit a 6-tray partition: carving gb-r01 3x6 costs NVLink locality or waits.
    assert thirds["layout"] == "3 racks, 6 partitions, 216 GPUs"

    before = list(WhatIfLayout.objects.values_list("pk", "state", "figures", "finished_at"))
    response = admin.get(url("whatif-detail", run.pk), headers=HTMX)
    assert response.status_code == 286  # done: the poll stops
    html = response.content.decode()
    table = re.search(r'<table class="data whatif-table">.*?</table>', html, re.S).group(0)
    # The labels are templates read back (core.sentences_i18n), the rack and the preset marked as data.
    for label in (NOW, "This plan", '<span translate="no">gb-r01</span> as <span translate="no">3x6</span>'):
        assert label in table
    for figure in (
        "Average wait",
        "p95 wait",
        "Average JCT",
        "Multi-tray jobs in one partition",
        "Guarantee shortfall",
    ):
        assert figure in table
    charts = re.findall(r'data-plotly-figure="([^"]+)"', html)
    figures = [json.loads(html_unescape(chart)) for chart in charts]
    # One chart per panel (stacked on a phone by CSS, never three panels' titles in one figure's width),
    # each its own title, one bar series per layout; the first carries the legend.
    assert len(figures) == 3
    for figure in figures:
        assert [trace["name"] for trace in figure["data"]] == [NOW, "This plan", "gb-r01 as 3x6"]
    assert [figure["layout"]["title"]["text"] for figure in figures] == [
        "<b>Wait and job completion time</b>",
        "<b>Multi-tray jobs in one partition</b>",
        "<b>Guarantee shortfall</b>",
    ]
    assert [figure["layout"]["showlegend"] for figure in figures] == [True, False, False]
    assert not any("annotations" in figure["layout"] or "xaxis2" in figure["layout"] for figure in figures)
    # Labels lie flat with the room they need, so none is cut or slanted over the bars.
    assert all(figure["layout"]["xaxis"]["tickangle"] == 0 for figure in figures)
    assert all(figure["layout"]["yaxis"]["automargin"] for figure in figures)
    assert (
        '<div class="whatif-charts" role="group"' in html
        and html.count('class="plotly-chart whatif-chart"') == 3
    )

    # The run's own page shows the same; neither wrote anything.
    page = admin.get(url("whatif-detail", run.pk))
    assert page.status_code == 200 and "What-if #" in page.content.decode()
    assert re.search(r"/static/plotly/plotly\.min\.[0-9a-f]{12}\.js", page.content.decode())
    assert list(WhatIfLayout.objects.values_list("pk", "state", "figures", "finished_at")) == before


def test_without_htmx_a_post_redirects_to_the_runs_page(admin, history, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = admin.post(start_url(), {**plan(), "days": 7})
    run = WhatIfRun.objects.get()
    assert response.status_code == 302 and response["Location"] == url("whatif-detail", run.pk)


def test_a_queued_run_polls_and_the_poll_writes_nothing(admin, history, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):  # no worker has taken it yet
        response = admin.post(start_url(), {**plan(), "days": 3}, headers=HTMX)
    assert response.status_code == 200
    run = WhatIfRun.objects.get()
    html = response.content.decode()
    assert f'hx-get="{url("whatif-detail", run.pk)}"' in html and 'hx-trigger="every 2s"' in html
    assert "Queued: waiting for a worker" in html
    for _ in range(2):
        poll = admin.get(url("whatif-detail", run.pk), headers=HTMX)
        assert poll.status_code == 200 and 'hx-trigger="every 2s"' in poll.content.decode()
    run.refresh_from_db()
    assert run.state == WhatIfState.QUEUED and run.history == {}
    assert set(run.layouts.values_list("state", flat=True)) == {WhatIfState.QUEUED}

    # Still queued minutes later: no worker runs. The page says what to check, and stops polling.
    WhatIfRun.objects.filter(pk=run.pk).update(
        created_at=timezone.now() - NOT_STARTED_AFTER - timedelta(minutes=1)
    )
    stuck = admin.get(url("whatif-detail", run.pk), headers=HTMX)
    assert stuck.status_code == 286
    assert "check that the Celery worker is running" in stuck.content.decode()


def test_a_run_in_progress_shows_how_far_it_is(admin, admin_user):
    run = WhatIfRun.objects.create(days=7, state=WhatIfState.RUNNING, jobs=120, window_end=timezone.now())
    for position, (label, state) in enumerate([(NOW, WhatIfState.DONE), ("This plan", WhatIfState.RUNNING)]):
        WhatIfLayout.objects.create(
            run=run, position=position, label=label, state=state, started_at=timezone.now()
        )
    html = admin.get(url("whatif-detail", run.pk), headers=HTMX).content.decode()
    assert "Replaying 120 jobs under 2 layouts, one task each: 1 of 2 done." in html
    assert '<progress max="2" value="1"' in html and 'hx-trigger="every 2s"' in html


def test_an_empty_window_says_so_and_draws_no_chart(admin, django_capture_on_commit_callbacks):
    make_department("Research", guaranteed_gpus=96)
    with django_capture_on_commit_callbacks(execute=True):
        admin.post(start_url(), {**plan(), "days": 2}, headers=HTMX)
    run = WhatIfRun.objects.get()
    response = admin.get(url("whatif-detail", run.pk), headers=HTMX)
    assert run.state == WhatIfState.EMPTY and run.jobs == 0
    assert set(run.layouts.values_list("state", flat=True)) == {WhatIfState.EMPTY}
    html = response.content.decode()
    assert response.status_code == 286
    assert "No job was submitted or ran in the last 2 days: there is no history to replay" in html
    assert "data-plotly-figure" not in html and "whatif-table" not in html


def test_a_layout_that_cannot_run_the_history_is_reported_in_words(
    client, admin_user, django_capture_on_commit_callbacks
):
    seed_datacenter(racks=1)  # gb-r01 only: 72 GPUs
    client.force_login(admin_user)
    research = make_department("Research", guaranteed_gpus=36)
    past_job(research, "train-rack-wide", 72, hours_ago=20, ran_h=4)
    past_job(research, "train-small", 8, hours_ago=10, ran_h=2)
    # The plan leaves two trays out: 64 GPUs, and the 72-GPU job of the history could never run.
    with django_capture_on_commit_callbacks(execute=True):
        started = client.post(start_url(), {**plan(leave_out=["9", "18"]), "days": 7}, headers=HTMX)
    assert started.status_code == 200
    run = WhatIfRun.objects.get()
    response = client.get(url("whatif-detail", run.pk), headers=HTMX)
    assert run.state == WhatIfState.DONE  # the cluster as it is replayed
    failed = run.layouts.get(label="This plan")
    assert failed.state == WhatIfState.FAILED
    assert failed.error == (
        "This layout has 64 GPUs in its partitions, and 1 job of the history needs more (the largest 72): it "
        "could never run it."
    )
    html = response.content.decode()
    assert "Not every layout could be replayed" in html and "it could never run it" in html
    assert "n/a" in html  # its column has no figures
    # Stored in English, shown in Japanese: the labels, the layouts' descriptions, the notes and the refusal.
    html = assert_japanese(client, url("whatif-detail", run.pk))
    assert "このレイアウトのパーティションには GPU が 64 基ありますが、履歴のジョブ 1 件" in html
    assert "現在のクラスター" in html and "この計画" in html


def test_a_failed_run_is_shown_in_words(admin):
    run = WhatIfRun.objects.create(
        days=7, state=WhatIfState.FAILED, error="No layout could be replayed: each one says why below."
    )
    WhatIfLayout.objects.create(
        run=run, position=0, label=NOW, state=WhatIfState.FAILED, error="The replay failed: disk full"
    )
    response = admin.get(url("whatif-detail", run.pk), headers=HTMX)
    html = response.content.decode()
    assert response.status_code == 286
    assert "The what-if failed:" in html and "No layout could be replayed" in html
    # The replay's own words (an outside error) are shown as written, marked as data.
    assert 'The replay failed: <span translate="no">disk full</span>' in html
    assert "data-plotly-figure" not in html


def test_an_unknown_run_is_404(admin):
    assert admin.get(url("whatif-detail", 999)).status_code == 404
