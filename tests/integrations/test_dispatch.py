"""Dispatch and state sync through a real adapter: Kubernetes jobs against the local API stand-in.

A job submitted through the REST API is placed, handed to the API server (ComputeDomain + Job pinned to its
trays), followed to completion by the sync task, and its GPUs go to the next job. A backend that is down
leaves jobs in a clear state and is retried; nothing is lost and nothing runs twice.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from integrations.models import ConfigTarget
from integrations.tasks import sync_jobs
from scheduling.choices import JobEventKind, JobState
from scheduling.models import Allocation, BackendCancel, Job
from tests.factories import make_department, token_client
from tests.integrations.k8s_standin import KubeStandIn

pytestmark = pytest.mark.django_db

WORK = {"image": "nvcr.io/nvidia/pytorch:24.10-py3", "command": ["python", "train.py"]}


@pytest.fixture
def standin():
    with KubeStandIn() as server:
        server.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "research"}})
        yield server


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Research", guaranteed_gpus=200)


@pytest.fixture
def api(demo_inventory, standin, department_a, platform_admin):
    """A platform admin's API client; jobs with backend "kubernetes" go to the stand-in's API server."""
    ConfigTarget.objects.create(
        name="cluster",
        kind="kubernetes",
        settings={
            "api_url": standin.url,
            "token": "t0ken",
            "ca_file": "",
            "insecure": False,
            "dry_run": False,
        },
    )
    return token_client(platform_admin)


@pytest.fixture
def submit(api, django_capture_on_commit_callbacks):
    def post(**fields):
        body = {
            "department": "research",
            "name": "pretrain",
            "gpus": 8,
            "backend": "kubernetes",
            "work": WORK,
        }
        body.update(fields)
        with django_capture_on_commit_callbacks(execute=True):
            response = api.post("/api/v1/jobs/", body, format="json")
        assert response.status_code == 201, response.json()
        return Job.objects.get(pk=response.json()["id"])

    return post


@pytest.fixture
def sync(django_capture_on_commit_callbacks):
    def run():
        with django_capture_on_commit_callbacks(execute=True):
            return sync_jobs()

    return run


def test_a_job_runs_in_kubernetes_on_its_trays_and_completion_frees_its_gpus(submit, standin, sync):
    job = submit(gpus=8)
    assert job.state == JobState.RUNNING and job.backend_id == f"research/rp-{job.pk}"
    live = standin.get("Job", f"rp-{job.pk}", "research")
    affinity = live["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    hosts = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert hosts["matchExpressions"][0]["values"] == job.placement
    assert standin.get("ComputeDomain", f"rp-{job.pk}", "research") is not None

    standin.set_status("Job", f"rp-{job.pk}", "research", {"active": 2, "ready": 2})
    assert sync()["finished"] == 0
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.backend_message.startswith("Kubernetes (cluster): running")

    standin.set_status(
        "Job",
        f"rp-{job.pk}",
        "research",
        {"succeeded": 2, "conditions": [{"type": "Complete", "status": "True"}]},
    )
    assert sync()["finished"] == 1
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED and job.finished_at is not None
    assert not Allocation.objects.filter(job=job).exists()
    assert job.events.filter(kind=JobEventKind.COMPLETED).exists()


def test_completion_lets_the_waiting_job_start(submit, standin, sync):
    big = submit(gpus=200, topology="any")  # every schedulable tray but a few
    waiting = submit(gpus=72, topology="rack")
    assert waiting.state == JobState.PENDING and waiting.pending_reason.startswith("waiting: no rack has 18")
    standin.set_status(
        "Job",
        f"rp-{big.pk}",
        "research",
        {"conditions": [{"type": "Failed", "status": "True", "message": "OOM"}]},
    )
    sync()
    big.refresh_from_db()
    waiting.refresh_from_db()
    assert big.state == JobState.FAILED and "OOM" in big.backend_message
    assert waiting.state == JobState.RUNNING  # the completion triggered a pass


def test_an_unreachable_backend_keeps_the_job_starting_and_a_retry_runs_it_once(submit, standin, sync):
    standin.refuse_connections()
    job = submit(gpus=8)
    assert job.state == JobState.STARTING
    assert job.dispatch_attempts == 1 and job.next_dispatch_at is not None
    assert "unreachable" in job.backend_message and "keeps its GPUs" in job.backend_message
    assert Allocation.objects.filter(job=job).count() == 8  # it keeps its place
    assert job.events.filter(kind=JobEventKind.DISPATCH_RETRY).count() == 1

    sync()  # not due yet: nothing is sent
    job.refresh_from_db()
    assert job.state == JobState.STARTING and job.dispatch_attempts == 1

    standin.accept_connections()
    Job.objects.filter(pk=job.pk).update(next_dispatch_at=timezone.now() - timedelta(seconds=1))
    sync()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and "unreachable" not in job.backend_message
    sync()
    assert standin.names("Job") == [f"research/rp-{job.pk}"]  # one Job, never two


def test_a_lost_reply_is_adopted_not_run_twice(submit, standin, sync):
    from integrations.dispatch import dispatch_request
    from integrations.kubernetes.jobs import render_job_objects

    standin.fail(503, method="POST", path="/computedomains")
    job = submit(gpus=8)
    assert job.state == JobState.STARTING
    # The API server had stored the objects after all (the 503 came from a proxy on the way back).
    for obj in render_job_objects(dispatch_request(job, {})):
        standin.add(obj, manager="rackplane")
    version = standin.get("Job", f"rp-{job.pk}", "research")["metadata"]["resourceVersion"]
    Job.objects.filter(pk=job.pk).update(next_dispatch_at=timezone.now() - timedelta(seconds=1))
    sync()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.backend_id == f"research/rp-{job.pk}"
    assert standin.names("Job") == [f"research/rp-{job.pk}"]  # adopted: one Job, never two
    assert standin.get("Job", f"rp-{job.pk}", "research")["metadata"]["resourceVersion"] == version


def test_a_refused_job_fails_with_the_backends_words_and_frees_its_gpus(submit, standin):
    standin.fail(422, "admission webhook denied: image not allowed", method="POST", path="/jobs")
    job = submit(gpus=8)
    assert job.state == JobState.FAILED
    assert "image not allowed" in job.backend_message
    assert not Allocation.objects.filter(job=job).exists()


def test_sync_with_the_backend_down_leaves_running_jobs_running_and_says_so(submit, standin, sync):
    job = submit(gpus=8)
    standin.refuse_connections()
    assert sync()["unreachable"] == 1
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert "unreachable" in job.backend_message and "state not updated" in job.backend_message


def test_cancel_while_the_backend_is_down_is_delivered_later(submit, standin, sync, api):
    job = submit(gpus=8)
    standin.refuse_connections()
    assert api.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 200
    sync()
    cancel = BackendCancel.objects.get(job=job)
    assert cancel.done_at is None and cancel.attempts >= 1 and cancel.error
    assert standin.names("Job") == [f"research/rp-{job.pk}"]
    standin.accept_connections()
    sync()
    cancel.refresh_from_db()
    assert cancel.done_at is not None
    assert standin.names("Job") == [] and standin.names("ComputeDomain") == []
