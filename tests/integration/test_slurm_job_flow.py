"""A job from the REST API to the real Slurm 24.11 testbed and back.

gb-r01 (the testbed's 18 trays) is carved 2x9 and pushed to slurmctld; the Slurm target also names the
testbed's slurmrestd (JWT minted from its key). A 2-tray job submitted through POST /api/v1/jobs/ is placed in
one NVLink partition, dispatched through slurmrestd pinned to those trays, runs there, completes, and the
sync task shows it completed with its GPUs free.
"""

from __future__ import annotations

import subprocess
import time

import pytest
from rest_framework.test import APIClient

from integrations.tasks import sync_jobs
from scheduling.choices import JobEventKind, JobState
from scheduling.models import Allocation, Job
from tenancy.models import Department
from tenancy.services import save_department
from tests.integration.conftest import carve_and_run_jobs, give_identity, tenant_people

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

SCRIPT = '#!/bin/bash\necho "ran on $SLURM_JOB_NODELIST"\nsleep 2\n'


@pytest.fixture
def slurm_jobs(slurm_testbed, testbed_target, django_capture_on_commit_callbacks):
    carve_and_run_jobs(testbed_target, django_capture_on_commit_callbacks)
    save_department(Department(name="Research", slug="research", guaranteed_gpus=64))
    yield testbed_target
    for job in Job.objects.filter(state__in=[JobState.RUNNING]).exclude(backend_id=""):
        subprocess.run([str(slurm_testbed.bin / "scancel"), job.backend_id], check=False)


def slurm_nodes(testbed, job_id: str) -> list[str]:
    out = subprocess.run(
        [str(testbed.bin / "scontrol"), "show", "job", job_id], capture_output=True, text=True, check=True
    ).stdout
    nodelist = next(part.split("=", 1)[1] for part in out.split() if part.startswith("NodeList="))
    return subprocess.run(
        [testbed.scontrol, "show", "hostnames", nodelist], capture_output=True, text=True, check=True
    ).stdout.split()


def sync_until_finished(job: Job, capture, timeout: float = 90) -> None:
    """Run the sync task (its on-commit work too) until the job is no longer running."""
    deadline = time.monotonic() + timeout
    while job.state == JobState.RUNNING:
        assert time.monotonic() < deadline, f"job {job.backend_id} did not finish: {job.backend_message}"
        time.sleep(1)
        with capture(execute=True):
            sync_jobs()
        job.refresh_from_db()


def test_a_two_tray_job_runs_on_its_trays_in_slurm_and_completes(
    slurm_testbed, slurm_jobs, admin_user, django_capture_on_commit_callbacks
):
    api = APIClient()
    give_identity(admin_user, tenant_people()["ada"])  # jobs run as their person's Unix user
    api.force_authenticate(admin_user)
    body = {"department": "research", "name": "two-trays", "gpus": 8, "work": {"script": SCRIPT}}
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post("/api/v1/jobs/", body, format="json", HTTP_IDEMPOTENCY_KEY="flow-1")
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.state == JobState.RUNNING, (job.pending_reason, job.backend_message)
    assert len(job.placement) == 2
    partitions = {h: int(h.rsplit("-t", 1)[1]) <= 9 for h in job.placement}
    assert len(set(partitions.values())) == 1, "both trays in one NVLink partition"
    assert job.backend_id.isdigit()

    sync_until_finished(job, django_capture_on_commit_callbacks)

    assert job.state == JobState.COMPLETED, job.backend_message
    assert job.exit_code == 0
    assert slurm_nodes(slurm_testbed, job.backend_id) == job.placement  # pinned: Slurm ran it there
    assert not Allocation.objects.filter(job=job).exists()
    detail = api.get(f"/api/v1/jobs/{job.pk}/").json()
    assert detail["state"] == "completed" and detail["finished_at"]
    assert [e["kind"] for e in detail["events"]] == [
        JobEventKind.SUBMITTED,
        JobEventKind.PLACED,
        JobEventKind.DISPATCHED,
        JobEventKind.COMPLETED,
    ]
