"""Who and why on a job's page: a waiting job's place in line and estimated start (scheduling.queue_standing),
and a placed job's one sentence of why there (scheduling.engine.placement.explain). Written by the pass
(SchedulerState.queue / .estimated_starts), shown on the job page and in the job API as an estimate, never
naming other departments' jobs. On the demo inventory (3 racks, 216 GPUs)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scheduling.models import Job, SchedulerState
from scheduling.services.passes import run_pass
from tests.scheduling.test_pass_fallback import SCRIPT, department_a  # noqa: F401 (Research, 48 GPUs)

pytestmark = pytest.mark.django_db


@pytest.fixture
def submit(api_as, member_a):
    def post(name: str, gpus: int, **fields):
        body = {"department": "research", "name": name, "gpus": gpus, "work": {"script": SCRIPT}, **fields}
        response = api_as("member_a").post("/api/v1/jobs/", body, format="json")
        assert response.status_code == 201, response.json()
        return Job.objects.get(pk=response.json()["id"])

    return post


def test_the_pass_keeps_the_line_and_the_page_and_api_show_it(submit, client_as, api_as):
    # Three racks of 18 trays: a 72-GPU job (one rack, topology rack) runs, two more wait for whole racks.
    jobs = [submit(f"big-{n}", 72, topology="rack") for n in range(5)]
    run_pass()
    state = SchedulerState.objects.get(pk=1)
    waiting = [job.pk for job in jobs if Job.objects.get(pk=job.pk).state == "pending"]
    assert waiting and state.queue == waiting  # one department: submission order
    assert set(state.estimated_starts) <= {str(pk) for pk in waiting}

    last = waiting[-1]
    page = client_as("member_a").get(reverse("scheduling:job-detail", args=[last])).content.decode()
    assert f'data-queue-position="{len(waiting)}"' in page
    assert f"{len(waiting) - 1} waiting jobs ahead of it" in page
    assert "An estimate of the last scheduling pass" in page

    body = api_as("member_a").get(f"/api/v1/jobs/{last}/").json()
    assert body["queue"]["position"] == len(waiting) and body["queue"]["ahead"] == len(waiting) - 1
    first = api_as("member_a").get(f"/api/v1/jobs/{waiting[0]}/").json()["queue"]
    # Trays are reserved for the head of the line (the pass reserves for the first two waiting jobs).
    assert str(waiting[0]) in state.estimated_starts and first["estimated_start"]
    running = [job.pk for job in jobs if job.pk not in waiting]
    assert api_as("member_a").get(f"/api/v1/jobs/{running[0]}/").json()["queue"] is None


def test_a_job_submitted_after_the_pass_has_no_standing_yet(submit, client_as):
    run_pass()
    job = submit("late", 4)
    page = client_as("member_a").get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    assert "data-queue-position" not in page


def test_a_placed_job_says_why_there_on_its_page(submit, client_as):
    job = submit("fits", 8)
    run_pass()
    job.refresh_from_db()
    assert job.state in ("starting", "running")
    placed = job.events.filter(kind="placed").latest("at")
    assert " · why here: in NVLink partition " in placed.message and "(best fit)" in placed.message
    page = client_as("member_a").get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    assert '<p class="why-here"><b>Why here:</b> in NVLink partition ' in page
