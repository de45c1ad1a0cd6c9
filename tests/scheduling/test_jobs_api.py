"""Jobs through the REST API: submission, validation, idempotency, visibility, placement, reasons, cancel,
preemption. The pass and the dispatch run eagerly on commit (Celery eager, the embedded rendered backend)."""

import json
from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from rest_framework.test import APIClient

from integrations.tasks import sync_jobs
from inventory.choices import FabricState
from inventory.models import ComputeTray, Gpu
from scheduling.choices import JobEventKind, JobState
from scheduling.models import Allocation, BackendCancel, Job
from scheduling.pass_inputs import PassInputs
from scheduling.services import passes as services
from tenancy.models import DedicatedPartition
from tests.factories import make_department, make_unreachable_slurm_target

pytestmark = pytest.mark.django_db

SCRIPT = "#!/bin/bash\nsrun python train.py\n"


# The shared personas (tests/conftest.py): department A is Research, B is Vision, on the demo inventory.


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Research", guaranteed_gpus=96)


@pytest.fixture
def department_b(demo_inventory):
    return make_department("Vision", guaranteed_gpus=64, limit_gpus=120)


@pytest.fixture(autouse=True)
def people(lead_a, member_a, lead_b, outsider, platform_admin):
    """Everyone exists in every test, so visibility has something to hide."""


@pytest.fixture
def submit(api_as, django_capture_on_commit_callbacks):
    """POST a job as `user` (a persona's name), by default a member of Research."""

    def post(user="member_a", key=None, **fields):
        body = {"department": "research", "name": "train-llm", "gpus": 8, "work": {"script": SCRIPT}}
        body.update(fields)
        headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
        with django_capture_on_commit_callbacks(execute=True):
            response = api_as(user).post("/api/v1/jobs/", body, format="json", **headers)
        # The pass and the dispatch ran on commit (here: when the capture ends): read the job as it is now.
        if response.status_code in (200, 201):
            response.after = api_as(user).get(f"/api/v1/jobs/{response.json()['id']}/").json()
        return response

    return post


def test_a_two_tray_job_is_placed_in_one_partition_and_dispatched(submit, member_a):
    response = submit(gpus=8)
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.state == JobState.RUNNING
    assert job.topology == "partition" and job.submitted_by == member_a
    assert len(job.placement) == 2
    racks = {host.rsplit("-t", 1)[0] for host in job.placement}
    assert racks == {"gb-r02"}  # best fit: a 9-tray partition, never a whole 18-tray rack
    assert Allocation.objects.filter(job=job).count() == 8
    assert {a.gpu.tray.hostname for a in Allocation.objects.filter(job=job)} == set(job.placement)
    # The embedded backend wrote the exact slurmrestd request, pinned to the chosen trays.
    payload = json.loads((settings.RACKPLANE_RENDER_DIR / "jobs" / f"rp-{job.pk}.json").read_text())
    assert job.backend_id == f"rendered/rp-{job.pk}"
    assert set(json.dumps(payload).split('"')) >= set(job.placement)
    kinds = [event.kind for event in job.events.all()]
    assert kinds == [JobEventKind.SUBMITTED, JobEventKind.PLACED, JobEventKind.DISPATCHED]
    detail = response.after
    assert detail["state"] == "running" and detail["placement"] == job.placement
    assert [e["kind"] for e in detail["events"]] == kinds


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_idempotency_key_returns_the_first_job(submit):
    first = submit(key="retry-me-1", gpus=8)
    again = submit(key="retry-me-1", gpus=8)
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert Job.objects.count() == 1
    # Another user's identical key is another job.
    assert submit(user="lead_a", key="retry-me-1").status_code == 201
    assert Job.objects.count() == 2


@pytest.mark.slow(reason="10 cases, each a full request through the stack")
@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"gpus": 6}, "gpus", "multiple of 4"),
        ({"gpus": 80}, "gpus", "more than any NVLink partition can hold (the largest has 18 trays)"),
        ({"gpus": 80, "topology": "rack"}, "gpus", "more than any rack can hold"),
        ({"department": "vision"}, "department", "you are not a member of a department 'vision'"),
        ({"department": "nope"}, "department", "you are not a member of a department 'nope'"),
        ({"work": {"script": "srun x"}}, "work", "starting with #!"),
        ({"work": {"image": "x"}}, "work", "unknown keys for a Slurm job"),
        ({"backend": "kubernetes", "work": {"image": "nvcr.io/x:1", "command": "run"}}, "work", "list"),
        ({"priority_class": "inference", "gpus": 100, "topology": "any"}, "priority_class", "guarantee"),
        ({"topology": "socket"}, "topology", "valid choice"),
    ],
)
def test_bad_requests_name_the_field_and_the_reason(submit, fields, field, words):
    response = submit(**fields)
    assert response.status_code == 400
    assert words in " ".join(response.json()[field]), response.json()
    assert Job.objects.count() == 0


def test_over_the_department_limit_is_refused(submit):
    response = submit(user="lead_b", department="vision", gpus=124, topology="any")
    assert response.status_code == 400
    assert response.json()["gpus"] == [
        "124 GPUs is over the department's limit of 120 GPUs: it could never run"
    ]


def test_anonymous_clients_get_401():
    assert APIClient().post("/api/v1/jobs/", {}, format="json").status_code == 401


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_lists_and_details_follow_visible_to(submit, api_as):
    research_job = submit().json()["id"]
    vision_job = submit(user="lead_b", department="vision").json()["id"]

    def ids(user):
        return {row["id"] for row in api_as(user).get("/api/v1/jobs/").json()["results"]}

    assert ids("member_a") == {research_job}
    assert ids("lead_b") == {vision_job}
    assert ids("outsider") == set()
    assert ids("platform_admin") == {research_job, vision_job}
    assert api_as("outsider").get(f"/api/v1/jobs/{research_job}/").status_code == 404
    assert api_as("lead_b").get(f"/api/v1/jobs/{research_job}/").status_code == 404
    filtered = (
        api_as("platform_admin").get("/api/v1/jobs/", {"department": "vision", "state": "running"}).json()
    )
    assert [row["id"] for row in filtered["results"]] == [vision_job]


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_pending_job_says_why_in_plain_words(submit, django_capture_on_commit_callbacks):
    # Fill the two default racks and gb-r02, leaving 4 trays free in one of its partitions. (gb-r01 has 15
    # whole trays: one is drained, two have an unhealthy GPU.)
    DedicatedPartition.objects.all().delete()
    # gb-r03 is free, but one of its GPUs is still registering with the fabric (the demo's): the whole-rack
    # job waits, naming that tray, and starts when the GPU's registration completes (a pass trigger).
    registering = Gpu.objects.select_related("tray").get(fabric_state=FabricState.IN_PROGRESS)
    whole_rack = submit(gpus=72, topology="partition").after
    assert whole_rack["state"] == "pending"
    assert whole_rack["pending_reason"] == (
        "waiting: gb-r03 default has 18 free trays but 1 of them report another NVLink clique than their "
        "partition, unfinished fabric registration or a fabric problem (fabric change in progress, drift or "
        "degraded fabric health): "
        f"{registering.tray.hostname}"
    )
    with django_capture_on_commit_callbacks(execute=True):
        registering.fabric_state, registering.fabric_status = FabricState.COMPLETED, "Success"
        registering.save()
        ComputeTray.objects.filter(pk=registering.tray_id).update(fabric_problems=[])
    assert Job.objects.get(pk=whole_rack["id"]).state == JobState.RUNNING  # gb-r03 whole
    vision = submit(user="lead_b", department="vision", gpus=60, topology="partition").after
    assert vision["state"] == "running", vision["pending_reason"]  # the 15 whole trays of gb-r01
    assert submit(gpus=36).after["state"] == "running"  # one 9-tray partition of gb-r02
    assert submit(gpus=20).after["state"] == "running"  # 5 trays of the other one
    waiting = submit(gpus=24).after  # 6 trays: no partition has them
    assert waiting["state"] == "pending"
    assert waiting["pending_reason"].startswith(
        "waiting: no NVLink partition has 6 free trays; the largest free block is 4 trays in gb-r02 p"
    )


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_cancel_frees_the_gpus_and_stops_the_backend_job(submit, api_as, django_capture_on_commit_callbacks):
    job_id = submit().json()["id"]
    job = Job.objects.get(pk=job_id)
    rendered = settings.RACKPLANE_RENDER_DIR / "jobs" / f"rp-{job_id}.json"
    assert rendered.exists()
    assert api_as("lead_b").post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 404  # not visible
    assert api_as("member_a").post(f"/api/v1/jobs/{job_id}/cancel/").status_code == 200  # the submitter
    with django_capture_on_commit_callbacks(execute=True):
        response = api_as("lead_a").post(f"/api/v1/jobs/{job_id}/cancel/")
    assert response.status_code == 400  # already cancelled
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.finished_at is not None
    assert not Allocation.objects.filter(job=job).exists()
    cancel = BackendCancel.objects.get(job=job)
    sync_jobs()
    cancel.refresh_from_db()
    assert cancel.done_at is not None and not rendered.exists()


def test_the_embedded_backend_ends_a_job_at_its_time_limit(submit, django_capture_on_commit_callbacks):
    """Nothing executes in the embedded mode, so a job would run for ever: the backend ends it at its time
    limit, as Slurm and Kubernetes would, and the sync frees its GPUs."""
    job_id = submit().json()["id"]
    ends = settings.RACKPLANE_RENDER_DIR / "jobs" / f"rp-{job_id}.ends"
    limit = Job.objects.get(pk=job_id).time_limit_minutes
    assert datetime.fromisoformat(ends.read_text()) - timezone.now() > timedelta(minutes=limit - 1)
    sync_jobs()
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.RUNNING and "ends at its time limit" in job.backend_message

    ends.write_text((timezone.now() - timedelta(seconds=1)).isoformat())  # the limit is up
    with django_capture_on_commit_callbacks(execute=True):
        sync_jobs()
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED and job.finished_at is not None
    assert "ran until its time limit" in job.backend_message
    assert not Allocation.objects.filter(job=job).exists()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_members_may_not_cancel_others_jobs_but_leads_may(submit, api_as):
    job_id = submit(user="lead_a").json()["id"]
    response = api_as("member_a").post(f"/api/v1/jobs/{job_id}/cancel/")
    assert response.status_code == 403
    other = submit(user="member_a").json()["id"]
    assert api_as("lead_a").post(f"/api/v1/jobs/{other}/cancel/").status_code == 200


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_department_below_its_guarantee_reclaims_borrowed_gpus(submit):
    DedicatedPartition.objects.all().delete()
    # Vision (guarantee 64, limit 120) borrows: 64 in quota, then 56 more over quota.
    in_quota = submit(user="lead_b", department="vision", gpus=64, topology="any").after
    borrowed = submit(user="lead_b", department="vision", gpus=56, topology="any").after
    assert in_quota["over_quota"] is False and borrowed["over_quota"] is True
    filler = submit(gpus=80, topology="any").after  # research in quota: all whole trays but one
    assert filler["state"] == "running"
    # Research asks for 8 more GPUs within its 96 guarantee: vision's borrowed job is preempted.
    reclaimer = submit(gpus=8).after
    assert reclaimer["state"] == "running", reclaimer["pending_reason"]
    victim = Job.objects.get(pk=borrowed["id"])
    assert victim.state == JobState.PENDING and victim.preemptions == 1
    assert not Allocation.objects.filter(job=victim).exists()
    preempted = victim.events.get(kind=JobEventKind.PREEMPTED)
    assert f"job #{reclaimer['id']}" in preempted.message and "research" in preempted.message
    assert BackendCancel.objects.filter(job=victim, backend_id=f"rendered/rp-{victim.pk}").exists()
    assert Job.objects.get(pk=in_quota["id"]).state == JobState.RUNNING  # in-quota work is never touched


def test_small_jobs_packed_on_one_tray_in_one_pass_get_different_gpus(department_a):
    research = department_a
    jobs = [
        Job.objects.create(department=research, name=f"small-{gpus}", gpus=gpus, topology="any", work={})
        for gpus in (1, 2)
    ]
    summary = services.run_pass()
    assert summary.started == 2
    first, second = (Job.objects.get(pk=job.pk) for job in jobs)
    assert first.state == second.state == JobState.STARTING
    assert first.placement == second.placement  # packed into the partly used tray
    gpus = [set(Allocation.objects.filter(job=job).values_list("gpu_id", flat=True)) for job in jobs]
    assert [len(g) for g in gpus] == [1, 2] and not gpus[0] & gpus[1]


def test_a_job_cancelled_while_the_pass_decides_is_not_started(department_a, monkeypatch):
    job = Job.objects.create(department=department_a, name="late-cancel", gpus=8, work={})
    real_decide = PassInputs.decide

    def decide_then_cancel(self, *args, **kwargs):
        result = real_decide(self, *args, **kwargs)
        assert [s.job_id for s in result.started] == [job.pk]
        Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)  # a cancel that committed meanwhile
        return result

    monkeypatch.setattr(PassInputs, "decide", decide_then_cancel)
    assert services.run_pass().started == 0
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert not Allocation.objects.filter(job=job).exists()


def test_a_live_target_added_later_leaves_the_rendered_jobs_to_the_renderer(
    submit, tmp_path, django_capture_on_commit_callbacks
):
    """A job the embedded renderer took stays the renderer's: a Slurm target added afterwards never knew it,
    and asking it used to fail the job ("no longer knows rendered/rp-N") or leave it unreachable."""

    job_id = submit().json()["id"]
    make_unreachable_slurm_target(tmp_path)  # nothing listens at its port
    assert sync_jobs()["unreachable"] == 0
    job = Job.objects.get(pk=job_id)
    assert job.state == JobState.RUNNING and "ends at its time limit" in job.backend_message

    ends = settings.RACKPLANE_RENDER_DIR / "jobs" / f"rp-{job_id}.ends"
    ends.write_text((timezone.now() - timedelta(seconds=1)).isoformat())
    with django_capture_on_commit_callbacks(execute=True):
        sync_jobs()
    assert Job.objects.get(pk=job_id).state == JobState.COMPLETED  # read from the renderer, as before
