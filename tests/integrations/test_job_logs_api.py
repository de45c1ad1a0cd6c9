"""GET /api/v1/jobs/{id}/logs/ (integrations.api.JobLogsView): a job's output for REST clients (`rp logs`),
read as the job page's Logs panel reads it, bounded the same, visible to whom the job is."""

from __future__ import annotations

import pytest
from django.urls import reverse

from integrations.dispatch import dispatch
from integrations.job_output import DEFAULT_LIMIT
from tests.factories import make_job

SCRIPT = "#!/bin/bash\necho hello from the job\n"


@pytest.fixture
def job(department_a, demo_inventory):
    """A job placed on a tray and handed to the embedded backend (no target enabled): rendered files."""
    job = make_job(department_a, "logs", state="starting", trays=["gb-r02-t05"], work={"script": SCRIPT})
    assert dispatch(job.pk) == "submitted"
    job.refresh_from_db()
    return job


def test_a_member_reads_the_output_of_a_job_of_their_department(api_as, member_a, job):
    response = api_as(member_a).get(reverse("job-logs", args=[job.pk]))

    assert response.status_code == 200
    body = response.json()
    assert (body["job"], body["state"], body["error"], body["limit_bytes"]) == (
        job.pk,
        "running",
        "",
        DEFAULT_LIMIT,
    )
    assert "the embedded backend" in body["source"]
    [part] = body["parts"]
    assert "echo hello from the job" in part["text"] and part["size"] == len(part["text"].encode())
    assert part["truncated"] is False and part["error"] == ""


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_only_the_end_of_a_long_stream_is_sent(api_as, member_a, job, settings):
    (rendered,) = [
        p for p in (settings.RACKPLANE_RENDER_DIR / "jobs").glob(f"rp-{job.pk}.*") if p.suffix != ".ends"
    ]
    rendered.write_text("".join(f"line {n:06d}\n" for n in range(20000)))

    [part] = api_as(member_a).get(reverse("job-logs", args=[job.pk])).json()["parts"]

    assert part["truncated"] is True and part["size"] == 20000 * 12
    assert len(part["text"].encode()) <= DEFAULT_LIMIT and part["text"].startswith("line ")
    assert part["text"].endswith("line 019999\n")


def test_a_job_not_yet_handed_to_a_backend_says_so(api_as, member_a, department_a):
    pending = make_job(department_a, "waiting", state="pending")

    body = api_as(member_a).get(reverse("job-logs", args=[pending.pk])).json()

    assert body["parts"] == [] and "not been handed to a backend" in body["error"]


@pytest.mark.parametrize(
    ("persona", "status"), [("member_b", 404), ("outsider", 404), ("platform_admin", 200)]
)
def test_who_may_read_a_jobs_output(api_as, job, persona, status):
    assert api_as(persona).get(reverse("job-logs", args=[job.pk])).status_code == status


def test_without_a_token_it_is_a_401(api_client, job):
    assert api_client.get(reverse("job-logs", args=[job.pk])).status_code == 401
