"""The job pages: list (visible_to, filters, live polling, bounded queries), detail (why it waits, where it
runs, its history, 404 when not visible), cancel (who may, what a finished job says), the placement on the
rack view and each job's share on the department dashboard.

Real jobs go through the API (the pass and the dispatch run eagerly on commit, the embedded backend renders
them); where a test only needs jobs to exist, Job and Allocation rows are made directly."""

import html as html_lib
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from django.utils.html import strip_tags

from inventory.models import ComputeTray
from scheduling.choices import JobEventKind, JobState
from scheduling.models import Allocation, Job, JobEvent
from tests.factories import free_trays, make_department, make_job

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
SCRIPT = "#!/bin/bash\nsrun python train.py\n"
LIST = reverse("scheduling:job-list")


# The shared personas (tests/conftest.py): department A is Research, B is Vision, on the demo inventory.


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Research", guaranteed_gpus=96)


@pytest.fixture
def department_b(demo_inventory):
    return make_department("Vision", guaranteed_gpus=64)


@pytest.fixture(autouse=True)
def people(lead_a, member_a, lead_b, member_b, outsider, platform_admin):
    """Everyone exists in every test, so visibility has something to hide."""


@pytest.fixture
def submit(api_as, django_capture_on_commit_callbacks):
    """Submit through the API as `user` (a persona's name); returns the job as the database has it after the
    eager pass."""

    def post(user="member_a", **fields):
        body = {"department": "research", "name": "train-llm", "gpus": 8, "work": {"script": SCRIPT}}
        body.update(fields)
        with django_capture_on_commit_callbacks(execute=True):
            response = api_as(user).post("/api/v1/jobs/", body, format="json")
        assert response.status_code == 201, response.json()
        return Job.objects.get(pk=response.json()["id"])

    return post


def shown_ids(response) -> set[int]:
    return {job.pk for job in response.context["page"].object_list}


def text(response) -> str:
    return html_lib.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode())))


# ------------------------------------------------------------------------------------------------- list


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_list_shows_only_the_jobs_each_user_may_see(client_as, lead_a, member_a, submit):
    research = submit(name="research-train")
    vision = submit(user="lead_b", department="vision", name="vision-train")
    assert research.state == vision.state == JobState.RUNNING

    expected = {
        "lead_a": {research.pk},
        "member_a": {research.pk},
        "lead_b": {vision.pk},
        "member_b": {vision.pk},
        "outsider": set(),
        "platform_admin": {research.pk, vision.pk},
    }
    for name, ids in expected.items():
        response = client_as(name).get(LIST)
        assert response.status_code == 200
        assert shown_ids(response) == ids, name
        html = response.content.decode()
        assert ("research-train" in html) == (research.pk in ids), name
        assert ("vision-train" in html) == (vision.pk in ids), name
    # A row says where the job runs, compressed: "gb-r02-t[01-02]".
    html = client_as("member_a").get(LIST).content.decode()
    assert re.search(r'<code class="hostlist"[^>]*>gb-r02-t\[\d\d-\d\d\]</code>', html), html
    assert 'class="badge job-running">Running<' in html
    assert "No jobs yet" in client_as("outsider").get(LIST).content.decode()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_filters_narrow_the_list(client_as, department_a, department_b, member_a):
    research, vision = department_a, department_b
    running = make_job(research, "llm-pretrain", trays=free_trays(2), backend="slurm")
    pending = make_job(research, "llm-finetune", JobState.PENDING, gpus=8, priority_class="build")
    k8s = make_job(
        research, "serve-api", trays=free_trays(1), backend="kubernetes", priority_class="inference"
    )
    done = make_job(research, "old-eval", JobState.COMPLETED, gpus=4)
    theirs = make_job(vision, "vision-pretrain", trays=free_trays(1))
    client = client_as("platform_admin")

    def ids(**params):
        response = client.get(LIST, params)
        assert response.status_code == 200
        return shown_ids(response)

    assert ids() == {running.pk, pending.pk, k8s.pk, done.pk, theirs.pk}
    assert ids(state="pending") == {pending.pk}
    assert ids(state=["running", "pending"]) == {running.pk, pending.pk, k8s.pk, theirs.pk}
    assert ids(department="vision") == {theirs.pk}
    assert ids(backend="kubernetes") == {k8s.pk}
    assert ids(priority_class="build") == {pending.pk}
    assert ids(name="LLM") == {running.pk, pending.pk}
    assert ids(name="pretrain", department="research") == {running.pk}
    # The form keeps what was chosen, and offers only departments the user may see.
    html = client.get(LIST, {"state": "pending", "department": "vision"}).content.decode()
    assert 'value="pending" checked' in html and '<option value="vision" selected>' in html
    member_form = client_as("member_a").get(LIST).content.decode()
    assert '<option value="research"' in member_form and '<option value="vision"' not in member_form


def test_a_pending_job_says_why_in_the_list_and_on_its_page(client_as, department_a, member_a):
    reason = "waiting: no NVLink partition has 6 free trays; the largest free block is 4 trays in gb-r02 p2"
    job = make_job(department_a, "wide-job", JobState.PENDING, gpus=24, pending_reason=reason, preemptions=1)
    client = client_as("member_a")
    assert reason in text(client.get(LIST))

    # The reason is HTML (its data marked translate="no", its moments in the viewer's zone): read as words.
    html = client.get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    page = " ".join(html_lib.unescape(strip_tags(html)).split())
    assert (
        "Why it waits: No NVLink partition has 6 free trays; the largest free block is 4 trays in gb-r02 p2. "
        "It asks for 24 GPUs (6 whole trays) in one NVLink partition. "
        "It was preempted 1 time and kept its place in the queue" in page
    )


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_htmx_gets_the_table_and_polling_stops_when_nothing_is_active(client_as, department_a, member_a):
    job = make_job(department_a, "live-job", trays=free_trays(1))
    client = client_as("member_a")

    page = client.get(LIST, {"department": "research"}).content.decode()
    assert re.search(
        r'<div id="job-table" hx-get="[^"]*department=research[^"]*" hx-trigger="every 2s"', page
    )

    partial = client.get(LIST, {"department": "research"}, headers=HTMX)
    assert partial.status_code == 200
    body = partial.content.decode()
    assert body.lstrip().startswith('<div id="job-table"') and "<html" not in body
    assert 'hx-trigger="every 2s"' in body and "live-job" in body
    assert "HX-Request" in partial["Vary"]

    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED, finished_at=timezone.now())
    Allocation.objects.filter(job=job).delete()
    stopped = client.get(LIST, {"department": "research"}, headers=HTMX)
    assert stopped.status_code == 286  # htmx stops polling, and still swaps in the final table
    assert "hx-trigger" not in stopped.content.decode()
    assert 'class="badge job-completed">Completed<' in stopped.content.decode()
    # A page with nothing active never polls its table (the header's bell polls for itself).
    assert 'id="job-table" hx-get' not in client.get(LIST).content.decode()
    assert 'id="job-table"' in client.get(LIST).content.decode()


@pytest.mark.slow(reason="grows the data to compare query counts")
def test_list_queries_do_not_grow_with_the_jobs(
    client_as, department_a, lead_a, member_a, django_assert_max_num_queries
):
    client = client_as("member_a")
    trays = free_trays(40)
    for number in range(3):
        make_job(department_a, f"few-{number}", trays=trays[number : number + 1], submitted_by=lead_a)
    client.get(LIST)  # the first request of a session may load more
    with CaptureQueriesContext(connection) as few:
        assert client.get(LIST).status_code == 200
    for number in range(3, 40):
        make_job(
            department_a,
            f"many-{number}",
            trays=trays[number : number + 1],
            submitted_by=lead_a,
        )
    for number in range(30):
        make_job(department_a, f"queued-{number}", JobState.PENDING, submitted_by=member_a)
    # Session, user, departments and projects for the filter, the count and the page, and the menu's roles
    # (full pages only): whatever the number of rows.
    with django_assert_max_num_queries(7), CaptureQueriesContext(connection) as many:
        response = client.get(LIST)
    assert len(response.context["page"].object_list) == 50
    assert len(many) == len(few)
    with django_assert_max_num_queries(4):
        assert client.get(LIST, headers=HTMX).status_code == 200


# ----------------------------------------------------------------------------------------------- detail


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_detail_shows_placement_events_and_a_cancel_button(client_as, lead_a, member_a, submit):
    job = submit(user="member_a", name="two-trays")
    JobEvent.objects.create(
        job=job, kind=JobEventKind.PREEMPTED, message="preempted: its GPUs were borrowed", placement=["x"]
    )
    Job.objects.filter(pk=job.pk).update(backend_message="job is running on the requested nodes")
    response = client_as("member_a").get(reverse("scheduling:job-detail", args=[job.pk]))
    assert response.status_code == 200
    html = response.content.decode()
    page = text(response)
    trays = ComputeTray.objects.filter(hostname__in=job.placement).select_related("partition")
    for tray in trays:  # each tray links to its row on the rack view, with the job highlighted
        assert f'href="/inventory/racks/gb-r02/?job={job.pk}#tray-{tray.slot}">{tray.hostname}</a>' in html
        assert tray.partition.name in page
    assert f'<a class="rack-link" href="/inventory/racks/gb-r02/?job={job.pk}">gb-r02</a>' in html
    assert "GPU 0, GPU 1, GPU 2, GPU 3" in page  # the GPUs it holds now
    kinds = re.findall(r'<li class="job-event event-\w+" data-kind="(\w+)"', html)
    assert kinds == ["submitted", "placed", "dispatched", "preempted"]
    assert "placed in quota on 2 trays in gb-r02" in page
    assert "Slurm says: job is running on the requested nodes" in page
    assert f'hx-post="/scheduling/jobs/{job.pk}/cancel/"' in html and "hx-confirm=" in html
    assert f'<div id="job-status" hx-get="/scheduling/jobs/{job.pk}/" hx-trigger="every 2s"' in html
    assert "srun python train.py" in page  # what it runs
    account = member_a.posix_account  # the Unix user a live backend runs it as
    assert f"Unix user {account.name} (uid {account.uid}, gid {account.gid})" in page

    # Another member of the department sees it, without a Cancel button; the lead may cancel it.
    other = submit(user="lead_a", name="leads-job")
    html = client_as("member_a").get(reverse("scheduling:job-detail", args=[other.pk])).content.decode()
    assert "Cancel job" not in html
    assert (
        "Cancel job"
        in client_as("lead_a").get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    )


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_detail_is_404_for_jobs_the_user_may_not_see(client_as, department_a, lead_a, member_a):
    job = make_job(department_a, "secret", trays=free_trays(1))
    url = reverse("scheduling:job-detail", args=[job.pk])
    for name in ("lead_b", "member_b", "outsider"):
        assert client_as(name).get(url).status_code == 404, name
        assert client_as(name).get(url, headers=HTMX).status_code == 404, name
        assert client_as(name).post(reverse("scheduling:job-cancel", args=[job.pk])).status_code == 404, name
    for name in ("lead_a", "member_a", "platform_admin"):
        assert client_as(name).get(url).status_code == 200, name
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    assert client_as("platform_admin").get(reverse("scheduling:job-detail", args=[999999])).status_code == 404


def test_the_status_partial_polls_until_the_job_finishes(client_as, department_a, member_a):
    job = make_job(department_a, "short", trays=free_trays(1))
    client = client_as("member_a")
    url = reverse("scheduling:job-detail", args=[job.pk])
    live = client.get(url, headers=HTMX)
    assert live.status_code == 200 and live.content.decode().lstrip().startswith(
        '<div id="job-status" hx-get='
    )
    Job.objects.filter(pk=job.pk).update(state=JobState.FAILED, exit_code=3, finished_at=timezone.now())
    done = client.get(url, headers=HTMX)
    assert done.status_code == 286
    assert "hx-trigger" not in done.content.decode() and "Failed with exit code 3" in text(done)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_detail_queries_do_not_grow_with_events_or_trays(
    client_as, department_a, lead_a, member_a, django_assert_max_num_queries
):
    small = make_job(department_a, "small", trays=free_trays(1), submitted_by=member_a)
    big = make_job(department_a, "big", trays=free_trays(9, skip=1), submitted_by=member_a)
    JobEvent.objects.bulk_create(
        JobEvent(job=big, kind=JobEventKind.PREEMPTED, message=str(n)) for n in range(40)
    )
    client = client_as("lead_a")  # not the submitter: may_cancel asks whether they lead the department
    client.get(reverse("scheduling:job-detail", args=[small.pk]))
    counts = []
    for job in (small, big):
        # Session, user, the job, may_cancel, events, trays, allocations; the menu's "leads a department?".
        with django_assert_max_num_queries(8), CaptureQueriesContext(connection) as queries:
            assert client.get(reverse("scheduling:job-detail", args=[job.pk])).status_code == 200
        counts.append(len(queries))
        with django_assert_max_num_queries(7):
            assert (
                client.get(reverse("scheduling:job-detail", args=[job.pk]), headers=HTMX).status_code == 200
            )
    assert counts[0] == counts[1]


# ----------------------------------------------------------------------------------------------- cancel


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_submitter_cancels_and_the_gpus_are_freed(
    client_as, member_a, submit, django_capture_on_commit_callbacks
):
    job = submit(user="member_a")
    assert job.state == JobState.RUNNING and Allocation.objects.filter(job=job).count() == 8
    Job.objects.filter(pk=job.pk).update(backend_message="Running on gb-r01-t[01-02]")
    client = client_as("member_a")
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("scheduling:job-cancel", args=[job.pk]), headers=HTMX)
    assert response.status_code == 286  # the status partial, final: polling stops
    page = text(response)
    assert "Cancelled: its GPUs are free again." in page and "Cancel job" not in page
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.finished_at is not None
    # The backend's last words were about the running job: not shown as a cancelled job's last word.
    assert job.backend_message == "" and "Running on gb-r01" not in page
    assert not Allocation.objects.filter(job=job).exists()
    assert job.events.last().kind == JobEventKind.CANCELLED and "by member-a" in job.events.last().message


def test_a_plain_post_asks_first_then_cancels_and_redirects_with_a_message(client_as, department_a, lead_a):
    job = make_job(department_a, "queued", JobState.PENDING, gpus=8, submitted_by=lead_a)
    url = reverse("scheduling:job-cancel", args=[job.pk])
    client = client_as("lead_a")
    # Posted without htmx (JavaScript off, or a click before the deferred htmx script ran): the question the
    # button's hx-confirm asks, on a page; nothing is cancelled yet.
    asked = client.post(url)
    assert asked.status_code == 200 and 'data-confirm="asked"' in asked.content.decode()
    assert f"Cancel job #{job.pk} queued? It leaves the queue." in text(asked)
    assert 'name="confirmed" value="yes"' in asked.content.decode()
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING
    # Anything but "yes" asks again.
    assert 'data-confirm="asked"' in client.post(url, {"confirmed": "YES"}).content.decode()
    assert Job.objects.get(pk=job.pk).state == JobState.PENDING
    response = client.post(url, {"confirmed": "yes"}, follow=True)
    assert response.redirect_chain == [(reverse("scheduling:job-detail", args=[job.pk]), 302)]
    assert f"Job #{job.pk} queued cancelled" in text(response)
    assert Job.objects.get(pk=job.pk).state == JobState.CANCELLED


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_plain_member_may_not_cancel_anothers_job(client_as, department_a, lead_a, member_a):
    job = make_job(department_a, "leads-run", trays=free_trays(2), submitted_by=lead_a)
    url = reverse("scheduling:job-cancel", args=[job.pk])
    client = client_as("member_a")
    refused = client.post(url, headers=HTMX)
    assert refused.status_code == 200
    assert "Only the job's submitter, its department's leads and platform admins may cancel it." in text(
        refused
    )
    followed = client.post(url, follow=True)  # not asked first: refused at once
    assert "may cancel it" in text(followed) and 'data-confirm="asked"' not in followed.content.decode()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and Allocation.objects.filter(job=job).count() == 8


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_cancelling_a_finished_job_says_why_not(client_as, department_a, member_a):
    job = make_job(department_a, "finished", JobState.COMPLETED, submitted_by=member_a)
    response = client_as("member_a").post(reverse("scheduling:job-cancel", args=[job.pk]), follow=True)
    # Nothing to ask about: the answer at once.
    assert f"Not cancelled: job {job.pk} has already ended (completed)." in text(response)
    assert Job.objects.get(pk=job.pk).state == JobState.COMPLETED
    htmx = client_as("member_a").post(reverse("scheduling:job-cancel", args=[job.pk]), headers=HTMX)
    assert htmx.status_code == 286 and "has already ended (completed)" in text(htmx)


@pytest.mark.parametrize(("gpus", "words"), [(1, "its 1 GPU is freed."), (8, "its 8 GPUs are freed.")])
def test_the_cancel_question_counts_the_gpus_in_words(client_as, department_a, member_a, gpus, words):
    job = make_job(department_a, "run", trays=free_trays(1), gpus=gpus, submitted_by=member_a)
    page = client_as("member_a").get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    assert f'hx-confirm="Cancel job #{job.pk} run? It is stopped and {words}"' in page


# ------------------------------------------------------------------------------------------ rack view


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_rack_view_marks_exactly_the_jobs_trays(client_as, department_b, member_a, submit):
    job = submit(user="member_a", name="marked-job")
    other = make_job(department_b, "vision-neighbour", trays=free_trays(1, skip=0))
    rack = "gb-r02"
    assert {host.rsplit("-t", 1)[0] for host in job.placement} == {rack}
    url = reverse("scheduling:rack-detail", args=[rack])

    html = client_as("member_a").get(url, {"job": job.pk}).content.decode()
    marked = set(re.findall(rf'id="tray-(\d+)" data-job-tray="{job.pk}"', html))
    slots = {
        str(slot)
        for slot in ComputeTray.objects.filter(hostname__in=job.placement).values_list("slot", flat=True)
    }
    assert marked == slots and len(marked) == 2
    assert len(re.findall(rf'data-job-gpu="{job.pk}"', html)) == 8
    banner = text(client_as("member_a").get(url, {"job": job.pk}))
    assert (
        f"Highlighting job #{job.pk} marked-job (Research, running): 2 of its trays are in this rack."
        in banner
    )
    # Each of its trays says which job holds it, linking to the job's page.
    holders = re.findall(
        r'data-held-by="(\d+)"><span aria-hidden="true">▶</span>\s*<a href="([^"]+)">([^<]+)</a>', html
    )
    mine = [(href, name) for pk, href, name in holders if pk == str(job.pk)]
    assert mine == [(reverse("scheduling:job-detail", args=[job.pk]), "marked-job")] * 2

    # Without ?job= nothing is highlighted; another department's job is shown without its name.
    plain = client_as("member_a").get(
        reverse("scheduling:rack-detail", args=[other.placement[0].rsplit("-t", 1)[0]])
    )
    plain_html = plain.content.decode()
    assert "data-job-tray" not in plain_html and "vision-neighbour" not in plain_html
    assert "a job of another department" in plain_html
    # A job the user may not see highlights nothing and says so.
    outsider = client_as("outsider").get(url, {"job": job.pk}).content.decode()
    assert "data-job-tray" not in outsider and f"No job #{job.pk} that you may see" in outsider
    assert "marked-job" not in outsider


@pytest.mark.slow(reason="grows the data to compare query counts")
def test_the_rack_view_stays_within_its_queries_with_jobs(
    client_as, department_a, department_b, member_a, django_assert_max_num_queries
):
    trays = free_trays(18)
    for number, tray in enumerate(trays):
        make_job(department_a if number % 2 else department_b, f"job-{number}", trays=[tray])
    rack = trays[0].rack.name
    job = Job.objects.get(name="job-1")
    client = client_as("member_a")
    client.get(reverse("scheduling:rack-detail", args=[rack]))
    # Session, user, rack, partitions, trays, GPUs with the job holding each, dedications, the menu's roles,
    # the "node silent" rule (stale trays), the re-carving policy with the scheduler's re-carves, the rack's
    # place in the compute fabric (issue 33); ?job= adds the job.
    with django_assert_max_num_queries(11):
        assert client.get(reverse("scheduling:rack-detail", args=[rack])).status_code == 200
    with django_assert_max_num_queries(12):
        response = client.get(reverse("scheduling:rack-detail", args=[rack]), {"job": job.pk})
    assert re.findall(r'data-job-tray="(\d+)"', response.content.decode()) == [str(job.pk)]


# -------------------------------------------------------------------------------------------- dashboards


def test_the_department_dashboard_shows_each_running_jobs_share(client_as, department_a, lead_a):
    research = department_a
    big = make_job(research, "big-train", trays=free_trays(6))
    small = make_job(research, "small-train", trays=free_trays(2))
    queued = make_job(research, "waiting-train", JobState.PENDING, gpus=8)
    response = client_as("lead_a").get(reverse("scheduling:department-detail", args=["research"]))
    html = response.content.decode()
    shares = dict(re.findall(r'<tr data-job="(\d+)">.*?data-share="([\d.]+)"', html, re.S))
    assert shares == {str(big.pk): "75.0", str(small.pk): "25.0"}
    page = text(response)
    assert "75.0% of 32" in page and "25.0% of 32" in page
    for job in (big, small, queued):
        assert (
            f'<a class="job-link" href="{reverse("scheduling:job-detail", args=[job.pk])}">{job.name}</a>'
            in html
        )
    assert f'href="{LIST}?department=research"' in html


def test_the_admin_dashboard_counts_running_and_pending_jobs(client_as, department_a):
    make_job(department_a, "r1", trays=free_trays(1))
    make_job(department_a, "r2", JobState.STARTING, trays=free_trays(1, skip=1))
    make_job(department_a, "r3", JobState.PENDING)
    html = client_as("platform_admin").get(reverse("scheduling:admin-dashboard")).content.decode()
    row = re.search(r'<tr data-department="research">(.*?)</tr>', html, re.S).group(1)
    counts = re.search(r'<td class="num job-counts">.*?>(\d+)</a> / <a[^>]*>(\d+)</a>', row, re.S)
    assert counts.groups() == ("2", "1")


def test_the_navigation_has_jobs(client_as, member_a):
    html = client_as("member_a").get(LIST).content.decode()
    assert f'<a href="{LIST}" aria-current="page">Jobs</a>' in html
    assert 'aria-current="page">Racks' not in html
