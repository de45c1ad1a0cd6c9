"""Who and why on the department page and a waiting job's page (issue 31): every job row of the department
page names its submitter ("(yours)" for the viewer's own), and a waiting job the scheduler reserves no trays
for says plainly that it has no estimated start and why (its reason, in the viewer's language), labelled as
the estimate of a job that has one. On the demo inventory (3 racks, 216 GPUs), through the real pass."""

from __future__ import annotations

import html as markup
import re

import pytest
from django.urls import reverse

from scheduling.models import Job, SchedulerState
from scheduling.services.passes import run_pass
from tests.factories import make_department, make_job
from tests.scheduling.test_pass_fallback import SCRIPT

pytestmark = pytest.mark.django_db


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Research", guaranteed_gpus=24)


@pytest.fixture
def submit(api_as, member_a):
    def post(name: str, gpus: int, persona: str = "member_a", **fields):
        body = {"department": "research", "name": name, "gpus": gpus, "work": {"script": SCRIPT}, **fields}
        response = api_as(persona).post("/api/v1/jobs/", body, format="json")
        assert response.status_code == 201, response.json()
        return Job.objects.get(pk=response.json()["id"])

    return post


def text(html: str) -> str:
    """The visible text: tags dropped (a cell's lines apart), entities read, white space collapsed."""
    html = re.sub(r"<(td|div|th)\b", r" <\1", html)
    return " ".join(markup.unescape(re.sub(r"<[^>]+>", "", html)).split())


def job_row(html: str, job: Job) -> str:
    """The visible text of the department page's row of `job` (running or pending)."""
    start = rf'<tr(?: data-job="{job.pk}")?>\s*<td><a class="job-link" href="/scheduling/jobs/{job.pk}/"'
    match = re.search(start + r".*?</tr>", html, re.S)
    assert match, f"no row for job {job.pk}"
    return text(match.group(0))


def test_the_department_pages_job_rows_name_their_submitters(client_as, department_a, member_a, lead_a):
    mine = make_job(department_a, "mine-running", state="running", submitted_by=member_a, gpus=8)
    theirs = make_job(department_a, "theirs-running", state="running", submitted_by=lead_a, gpus=8)
    waiting = make_job(department_a, "theirs-waiting", state="pending", submitted_by=lead_a, gpus=8)
    page = client_as("member_a").get(reverse("scheduling:department-detail", args=["research"]))
    html = page.content.decode()
    assert "(yours)" in job_row(html, mine) and "by " not in job_row(html, mine)
    assert "by lead-a" in job_row(html, theirs)
    assert "by lead-a" in job_row(html, waiting)
    # On a phone the running table keeps the job (with its submitter), GPUs, quota and start: the rest is
    # left out rather than scrolled off the side.
    head = re.search(r'<table class="data running">\s*<thead>(.*?)</thead>', html, re.S).group(1)
    assert [text(th) for th in re.findall(r'<th scope="col" class="phone-hide"[^>]*>.*?</th>', head)] == [
        "Share of in use",
        "Class",
        "Backend",
        "Trays",
    ]
    ja = (
        client_as("lead_a")
        .get(reverse("scheduling:department-detail", args=["research"]), HTTP_ACCEPT_LANGUAGE="ja")
        .content.decode()
    )
    assert "あなたのジョブ" in job_row(ja, theirs) and "投入者 member-a" in job_row(ja, mine)


def test_a_job_held_by_its_departments_limit_says_it_has_no_estimate_and_why(submit, client_as, department_a):
    department_a.limit_gpus = 48  # at most 48 GPUs held: a second big job waits for the first to end
    department_a.save(update_fields=["limit_gpus"])
    first = submit("big-first", 40)
    held = submit("big-held", 40)
    run_pass()
    first.refresh_from_db(), held.refresh_from_db()
    assert first.state in ("starting", "running") and held.state == "pending"
    state = SchedulerState.objects.get(pk=1)
    assert state.queue == [held.pk] and str(held.pk) not in state.estimated_starts  # no trays reserved

    page = client_as("member_a").get(reverse("scheduling:job-detail", args=[held.pk])).content.decode()
    standing = text(re.search(r'<p class="queue-standing".*?</p>', page, re.S).group(0))
    assert 'data-estimate="none"' in page
    assert standing.startswith(
        "In line: first of the waiting jobs; estimated start: none, as no trays are reserved for it while it "
        "waits for the reason above."
    ), standing
    # The reason is said once, in "Why it waits", not again after the estimate.
    box = text(re.search(r'<div class="note note-warn" data-why="pending">.*?</div>', page, re.S).group(0))
    assert box.startswith(
        "Why it waits: The department's limit is 48 GPUs; it holds 40 and this job needs 40"
    )
    assert box.count("limit is 48 GPUs") == 1, box
    assert "<b>estimated start</b>: none" in page  # labelled as the estimate of a job that has one

    ja = (
        client_as("member_a")
        .get(reverse("scheduling:job-detail", args=[held.pk]), HTTP_ACCEPT_LANGUAGE="ja")
        .content.decode()
    )

    # Clock times (the pass's "as of HH:MM:SS") taken out: a time at 11:48 holds "48" too.
    def untimed(html: str) -> str:
        return re.sub(r"\d{1,2}:\d\d(:\d\d)?", "", text(html))

    standing = untimed(re.search(r'<p class="queue-standing".*?</p>', ja, re.S).group(0))
    assert "<b>開始見込み</b>: なし" in ja and "48" not in standing
    box = untimed(re.search(r'<div class="note note-warn" data-why="pending">.*?</div>', ja, re.S).group(0))
    assert box.count("48") == 1 and "limit" not in box, box  # the reason once, read in Japanese


@pytest.mark.parametrize("language", ["en", "ja"])
def test_a_reason_that_starts_with_a_class_reads_the_same_on_the_list_and_the_page(
    submit, client_as, department_a, language
):
    """ "inference jobs run only within the department's guarantee": the class as the list shows it, on the
    job's page too (it was capitalised there, "Inference", which is neither the class nor a department)."""
    running = submit("serve-first", 16, priority_class="inference")
    held = submit("serve-held", 16, priority_class="inference")
    run_pass()
    running.refresh_from_db(), held.refresh_from_db()
    assert held.state == "pending" and "inference jobs run only" in held.pending_reason, held.pending_reason
    client = client_as("member_a")
    listed = client.get(reverse("scheduling:job-list"), HTTP_ACCEPT_LANGUAGE=language).content.decode()
    row = re.search(rf'<tr data-job="{held.pk}".*?</tr>', listed, re.S).group(0)
    reason = text(re.search(r'<span class="pending-reason">.*?</span>', row, re.S).group(0))
    page = client.get(reverse("scheduling:job-detail", args=[held.pk]), HTTP_ACCEPT_LANGUAGE=language)
    box = text(re.search(r'data-why="pending">.*?</div>', page.content.decode(), re.S).group(0))
    # In Japanese the class is read as its label, as the Class column shows it (never its stored value).
    named = "inference " if language == "en" else "推論（プリエンプト不可）"  # noqa: RUF001
    sentence = reason[reason.index(named) :].rstrip(".。")  # after the list's "waiting:"
    assert "Inference" not in box and sentence in box, (reason, box)  # the class named the same way
    assert language == "en" or "inference" not in box + reason


def test_a_job_with_reserved_trays_keeps_its_estimated_start(submit, client_as):
    """The other branch, unchanged: three racks, a whole-rack job runs on each, the fourth waits with trays
    reserved for it and shows when they should free up."""
    jobs = [submit(f"rack-{n}", 72, topology="rack") for n in range(4)]
    run_pass()
    state = SchedulerState.objects.get(pk=1)
    [head] = [job for job in jobs if str(job.pk) in state.estimated_starts]
    page = client_as("member_a").get(reverse("scheduling:job-detail", args=[head.pk])).content.decode()
    assert 'data-estimate="reserved"' in page and "<b>estimated start</b> <time datetime=" in page
    assert "no trays are reserved" not in page


def running_panel(html: str) -> str:
    match = re.search(r'<section class="panel" aria-labelledby="running-jobs">.*?</section>', html, re.S)
    assert match
    return match.group(0)


def test_a_few_running_jobs_are_shown_whole_a_long_list_scrolls(client_as, department_a, lead_a):
    """Eight running jobs in a box sized for seven cut the last row under the "All jobs" link: up to ten rows
    are shown whole; a longer list scrolls in its box (whose shadow says there is more)."""
    for n in range(10):
        make_job(department_a, f"few-{n}", state="running", submitted_by=lead_a, gpus=1)
    url = reverse("scheduling:department-detail", args=["research"])
    panel = running_panel(client_as("lead_a").get(url).content.decode())
    assert panel.count("<tr data-job=") == 10 and "scroll-box" not in panel
    make_job(department_a, "one-more", state="running", submitted_by=lead_a, gpus=1)
    panel = running_panel(client_as("lead_a").get(url).content.decode())
    assert panel.count("<tr data-job=") == 11 and 'class="scroll-box"' in panel
