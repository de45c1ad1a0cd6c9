"""Borrowed slice jobs give way to in-quota ones (issue 30; scheduling.services.slices, "Reclaim"): a
slice job within its department's guarantee that finds no free device of its profile preempts the newest
borrowed slice jobs of other departments holding such devices on one tray, and starts on them in the same
pass."""

from __future__ import annotations

import pytest

from scheduling.choices import JobEventKind, JobState
from scheduling.models import BackendCancel, Job, JobEvent, SliceAllocation
from scheduling.services.passes import run_pass
from tenancy.models import Department
from tests.factories import mig_tray

pytestmark = pytest.mark.django_db

SCRIPT = "#!/bin/bash\nsrun python serve.py\n"
TRAY = "gb-r03-t02"  # all-balanced: one 3g.93gb per GPU, four on the tray
HOLDING = (JobState.STARTING, JobState.RUNNING)
ALL_HELD = "waiting: no free 3g.93gb slice: all 4 on trays in service are held"


@pytest.fixture
def submit(api_as, demo_inventory, django_capture_on_commit_callbacks):
    """`submit(persona, department slug, **fields)`: POST a 3g.93gb slice job; the pass runs on commit."""
    mig_tray(TRAY)

    def post(persona, department, **fields):
        body = {"department": department, "name": "serve", "work": {"script": SCRIPT}}
        body.update({"mig_profile": "3g.93gb", **fields})
        with django_capture_on_commit_callbacks(execute=True):
            response = api_as(persona).post("/api/v1/jobs/", body, format="json")
        assert response.status_code == 201, response.json()
        return Job.objects.get(pk=response.json()["id"])

    return post


def _quota(department: Department, guaranteed: int, limit: int | None) -> None:
    department.guaranteed_gpus, department.limit_gpus = guaranteed, limit
    department.save(update_fields=["guaranteed_gpus", "limit_gpus"])


def _devices(job: Job) -> set[str]:
    return set(SliceAllocation.objects.filter(job=job).values_list("mig_uuid", flat=True))


def _state(job: Job) -> str:
    return Job.objects.get(pk=job.pk).state


@pytest.fixture
def borrowers(submit, member_b, department_a, department_b):
    """Beta, guaranteed nothing, borrows all four 3g.93gb devices (one train job each, oldest first) and
    runs them; Alpha is guaranteed one GPU."""
    _quota(department_a, 1, 1)
    _quota(department_b, 0, None)
    jobs = [submit(member_b, department_b.slug, priority_class="train") for _ in range(4)]
    for job in jobs:
        job.refresh_from_db()
        assert job.state in HOLDING and job.over_quota and job.backend_id, job.pending_reason
    return jobs


def test_an_in_quota_slice_job_reclaims_the_newest_borrowed_one(submit, member_a, department_a, borrowers):
    newest = borrowers[-1]
    held, backend_id = _devices(newest), newest.backend_id
    mine = submit(member_a, department_a.slug, priority_class="inference")
    assert mine.state in HOLDING and not mine.over_quota, mine.pending_reason
    assert _devices(mine) == held  # the device the newest borrower held
    newest.refresh_from_db()
    assert newest.state == JobState.PENDING and newest.preemptions == 1
    assert newest.pending_reason.startswith("waiting: preempted")
    assert not _devices(newest)
    event = JobEvent.objects.get(job=newest, kind=JobEventKind.PREEMPTED)
    assert f"{department_a.slug} reclaimed them for job #{mine.pk} within its guarantee" in event.message
    assert BackendCancel.objects.get(job_id=newest.pk).backend_id == backend_id
    # The older borrowers keep their devices.
    for job in borrowers[:-1]:
        assert _state(job) in HOLDING and len(_devices(job)) == 1
    # The preempted job waits (borrowing, it reclaims nothing back): no ping-pong at the next pass.
    run_pass()
    newest.refresh_from_db()
    assert newest.state == JobState.PENDING and newest.pending_reason == ALL_HELD
    assert _state(mine) in HOLDING and _devices(mine) == held


def test_two_slices_reclaim_the_two_newest_borrowers(submit, member_a, department_a, borrowers):
    before = {job.pk: _devices(job) for job in borrowers}
    mine = submit(member_a, department_a.slug, mig_slices=2, priority_class="inference")
    assert mine.state in HOLDING, mine.pending_reason
    pending = [job for job in borrowers if _state(job) == JobState.PENDING]
    assert pending == borrowers[2:]
    assert _devices(mine) == before[borrowers[2].pk] | before[borrowers[3].pk]


def test_a_job_beyond_its_guarantee_reclaims_nothing(submit, member_a, department_a, borrowers):
    _quota(department_a, 0, None)
    mine = submit(member_a, department_a.slug, priority_class="train")
    assert mine.state == JobState.PENDING and mine.pending_reason == ALL_HELD
    assert all(_state(job) in HOLDING for job in borrowers)


def test_in_quota_slice_jobs_are_never_preempted(submit, member_a, member_b, department_a, department_b):
    _quota(department_a, 1, 1)
    _quota(department_b, 4, 4)  # Beta's four 3g.93gb are within its guarantee (12/7 GPUs)
    theirs = [submit(member_b, department_b.slug, priority_class="train") for _ in range(4)]
    assert not any(Job.objects.get(pk=job.pk).over_quota for job in theirs)
    mine = submit(member_a, department_a.slug, priority_class="inference")
    assert mine.state == JobState.PENDING and mine.pending_reason == ALL_HELD
    assert not JobEvent.objects.filter(kind=JobEventKind.PREEMPTED).exists()
