"""A job's logs never show a member a path on the portal's own disk (the embedded backend's rendered files):
the Logs panel and GET /api/v1/jobs/{id}/logs/ name the file by its name and say in words why there is
nothing to show; a platform admin still sees where the portal looks. How the job ended reads in the viewer's
language (its cancel event is a stored sentence)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.urls import reverse

from integrations.dispatch import dispatch, process_cancels
from scheduling.models import Job
from scheduling.services.actions import cancel_job
from tests.factories import make_job
from tests.integrations.test_i18n_pages import assert_japanese

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(department_a, demo_inventory, member_a):
    """A member's job handed to the embedded backend (no target enabled): its rendered request."""
    job = make_job(
        department_a,
        "logs",
        state="starting",
        trays=["gb-r02-t05"],
        submitted_by=member_a,
        work={"script": "#!/bin/bash\necho hi\n"},
    )
    assert dispatch(job.pk) == "submitted"
    job.refresh_from_db()
    return job


@pytest.fixture
def cancelled(job, member_a):
    """The member cancels it while it runs; the backend's cancel (the sync task's) removes its files."""
    cancel_job(Job.objects.get(pk=job.pk), member_a)
    assert process_cancels() == 1
    return Job.objects.get(pk=job.pk)


def render_dir() -> str:
    return str(settings.RACKPLANE_RENDER_DIR)


def test_a_member_reads_a_running_jobs_file_by_its_name(client_as, api_as, member_a, job):
    html = client_as(member_a).get(reverse("integrations:job-logs", args=[job.pk])).content.decode()
    body = api_as(member_a).get(reverse("job-logs", args=[job.pk])).json()

    assert "echo hi" in html and render_dir() not in html
    [part] = body["parts"]
    assert part["name"].startswith(f"rp-{job.pk}.") and "/" not in part["name"] and "echo hi" in part["text"]
    assert render_dir() not in str(body)


def test_a_member_is_told_in_words_why_a_cancelled_jobs_log_is_gone(client_as, api_as, member_a, cancelled):
    html = client_as(member_a).get(reverse("integrations:job-logs", args=[cancelled.pk])).content.decode()
    body = api_as(member_a).get(reverse("job-logs", args=[cancelled.pk])).json()

    assert render_dir() not in html and render_dir() not in str(body)
    assert "removed the request it rendered when the job was cancelled" in html
    assert body["parts"] == [] and "removed the request it rendered" in body["error"]


def test_a_platform_admin_sees_where_the_portal_looks(client_as, api_as, platform_admin, cancelled):
    body = api_as(platform_admin).get(reverse("job-logs", args=[cancelled.pk])).json()

    [part] = body["parts"]
    assert part["name"].startswith(render_dir()) and part["error"]


def test_how_a_cancelled_job_ended_reads_in_japanese(client_as, member_a, cancelled):
    html = assert_japanese(client_as(member_a), reverse("integrations:job-logs", args=[cancelled.pk]))

    assert '実行中に <span translate="no">member-a</span> がキャンセル' in html
    assert "cancelled by" not in html and render_dir() not in html
    english = client_as(member_a).get(reverse("integrations:job-logs", args=[cancelled.pk])).content.decode()
    assert 'Cancelled: cancelled by <span translate="no">member-a</span> while running' in english
