"""Dispatch and state sync through a real adapter: Kubernetes jobs on the testbed's real API server.

A job submitted through the REST API is placed, handed to the API server (ComputeDomain + Job pinned to its
trays) with the `rackplane` service account's token (exactly deploy/kubernetes/rbac.yaml) through
tests/integrations/kube_testbed.py's FaultProxy, followed to completion by the sync task, and its GPUs go to
the next job. No controller runs on the testbed: what Kueue and the Job controller would write (unsuspend,
start time, pod counts, the conditions the API server's Job status validation requires) the tests write
with the admin's `set_status`. A backend that is down, a 503 and a reply lost on the way back come from the
proxy; every other answer is the real server's. A backend that is down leaves jobs in a clear state and is
retried; nothing is lost and nothing runs twice.
"""

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from integrations import pushes
from integrations import state as configstate
from integrations.kubernetes.job_objects import CONTROLLER_UID_LABEL, QUEUE_NAME_LABEL
from integrations.kubernetes.render import RACK_LABEL
from integrations.models import ConfigTarget, PushStatus
from integrations.registry import clean_settings
from integrations.tasks import sync_jobs
from scheduling.choices import JobEventKind, JobState
from scheduling.models import Allocation, BackendCancel, Job
from tests.factories import make_department, token_client

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

NAMESPACE = "research"
WORK = {"image": "nvcr.io/nvidia/pytorch:24.10-py3", "command": ["python", "train.py"]}


# --- what the controllers that do not run on the testbed would write ---------------------------------


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(kind: str, reason: str, message: str) -> dict:
    return {"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now()}


def name_of(job: Job) -> str:
    return f"rp-{job.pk}"


def start(kube, job: Job) -> dict:
    """Kueue admits the Workload and unsuspends the Job; the Job controller records the start and one
    running, ready pod per tray."""
    trays = len(job.placement)
    kube.merge_patch("Job", name_of(job), {"spec": {"suspend": False}}, NAMESPACE, fieldManager="kueue")
    return kube.set_status(
        "Job", name_of(job), NAMESPACE, {"startTime": now(), "active": trays, "ready": trays}
    )


def succeed(kube, job: Job) -> dict:
    """The Job controller: every index succeeded (SuccessCriteriaMet first, then Complete, as validated)."""
    trays = len(job.placement)
    message = "Reached expected number of succeeded pods"
    return kube.set_status(
        "Job",
        name_of(job),
        NAMESPACE,
        {
            "active": 0,
            "ready": 0,
            "succeeded": trays,
            "completedIndexes": "0" if trays == 1 else f"0-{trays - 1}",
            "completionTime": now(),
            "conditions": [
                condition("SuccessCriteriaMet", "CompletionsReached", message),
                condition("Complete", "CompletionsReached", message),
            ],
        },
    )


def fail(kube, job: Job) -> dict:
    """The Job controller: a pod failed and backoffLimit is 0 (FailureTarget first, then Failed)."""
    message = "Job has reached the specified backoff limit"
    return kube.set_status(
        "Job",
        name_of(job),
        NAMESPACE,
        {
            "active": 0,
            "ready": 0,
            "failed": 1,
            "conditions": [
                condition("FailureTarget", "BackoffLimitExceeded", message),
                condition("Failed", "BackoffLimitExceeded", message),
            ],
        },
    )


def failed_pod(kube, job: Job, index: int, exit_code: int, reason: str) -> None:
    """The Job controller's pod for `index` on the job's first tray, and the kubelet's report that its
    container ended with `exit_code`."""
    live = kube.get("Job", name_of(job), NAMESPACE)
    template = live["spec"]["template"]
    pod_name = f"{name_of(job)}-{index}-x7k2p"
    labels = {
        **template["metadata"]["labels"],
        CONTROLLER_UID_LABEL: live["metadata"]["uid"],
        "batch.kubernetes.io/job-name": name_of(job),
        "batch.kubernetes.io/job-completion-index": str(index),
    }
    spec = {**template["spec"], "nodeName": job.placement[0]}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name, "namespace": NAMESPACE}}
    kube.create({**pod, "metadata": {**pod["metadata"], "labels": labels}, "spec": spec}, "job-controller")
    container = spec["containers"][0]
    terminated = {"exitCode": exit_code, "reason": reason, "startedAt": now(), "finishedAt": now()}
    kube.set_status(
        "Pod",
        pod_name,
        NAMESPACE,
        {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": container["name"],
                    "image": container["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": terminated},
                }
            ],
        },
    )


# --- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture
def namespace(kube):
    """The department's namespace, made by a cluster admin (a configuration push makes it in production:
    see TestWithoutTheDepartmentsNamespace)."""
    return kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})


@pytest.fixture
def service_account(kube, namespace):
    """The namespace's `default` ServiceAccount, as its controller would make it: pods need one."""
    path = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts"
    kube.ok("POST", path, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}})
    yield
    kube.request("DELETE", f"{path}/default")  # the wipe finalizes namespaces by hand: leave nothing behind


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Research", guaranteed_gpus=200)


@pytest.fixture
def target(demo_inventory, kube_proxy, kube_testbed):
    """The Kubernetes target: jobs with backend "kubernetes" go to the real API server through the proxy,
    with the rackplane service account's token and the cluster CA (never insecure)."""
    settings = {"api_url": kube_proxy.url, "token": kube_testbed.token, "ca_file": kube_testbed.ca}
    return ConfigTarget.objects.create(
        name="cluster", kind="kubernetes", settings=clean_settings("kubernetes", settings)
    )


@pytest.fixture
def api(target, namespace, department_a, platform_admin):
    """A platform admin's API client."""
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


def make_due(job: Job) -> None:
    Job.objects.filter(pk=job.pk).update(next_dispatch_at=timezone.now() - timedelta(seconds=1))


# --- tests ---------------------------------------------------------------------------------------------


def test_a_job_runs_in_kubernetes_on_its_trays_and_completion_frees_its_gpus(
    submit, kube, kube_proxy, kube_testbed, sync
):
    job = submit(gpus=8)
    assert job.state == JobState.RUNNING and job.backend_id == f"research/{name_of(job)}"
    live = kube.get("Job", name_of(job), NAMESPACE)
    affinity = live["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    hosts = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert hosts["matchExpressions"][0]["values"] == job.placement
    assert live["spec"]["suspend"] is True  # until Kueue admits it
    assert [m["manager"] for m in live["metadata"]["managedFields"]] == ["rackplane"]
    domain = kube.get("ComputeDomain", name_of(job), NAMESPACE)
    assert domain["spec"]["channel"]["resourceClaimTemplate"]["name"] == f"{name_of(job)}-imex-channel"
    assert all(r.authorization == f"Bearer {kube_testbed.token}" for r in kube_proxy.requests)

    assert sync()["finished"] == 0
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert job.backend_message.startswith("Kubernetes (cluster): pending (suspended: waiting for Kueue")

    start(kube, job)
    assert sync()["finished"] == 0
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert job.backend_message == "Kubernetes (cluster): running (2 of 2 pods running)"

    succeed(kube, job)
    assert sync()["finished"] == 1
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED and job.finished_at is not None and job.exit_code == 0
    assert "Reached expected number of succeeded pods" in job.backend_message
    assert not Allocation.objects.filter(job=job).exists()
    assert job.events.filter(kind=JobEventKind.COMPLETED).exists()


def test_a_failure_reports_the_exit_code_and_lets_the_waiting_job_start(submit, kube, service_account, sync):
    big = submit(gpus=200, topology="any")  # every schedulable tray but a few
    waiting = submit(gpus=72, topology="rack")
    assert waiting.state == JobState.PENDING and waiting.pending_reason.startswith("waiting: no rack has 18")
    assert kube.names("Job") == [f"research/{name_of(big)}"]
    start(kube, big)
    failed_pod(kube, big, 0, 137, "OOMKilled")
    fail(kube, big)
    sync()
    big.refresh_from_db()
    waiting.refresh_from_db()
    assert big.state == JobState.FAILED and big.exit_code == 137
    assert "BackoffLimitExceeded: Job has reached the specified backoff limit" in big.backend_message
    assert "exit code 137" in big.backend_message
    assert waiting.state == JobState.RUNNING  # the failure triggered a pass
    assert kube.get("Job", name_of(waiting), NAMESPACE)["spec"]["completions"] == 18


def test_an_unreachable_backend_keeps_the_job_starting_and_a_retry_runs_it_once(
    submit, kube, kube_proxy, sync
):
    kube_proxy.refuse_connections()
    job = submit(gpus=8)
    assert job.state == JobState.STARTING
    assert job.dispatch_attempts == 1 and job.next_dispatch_at is not None
    assert "unreachable" in job.backend_message and "keeps its GPUs" in job.backend_message
    assert Allocation.objects.filter(job=job).count() == 8  # it keeps its place
    assert job.events.filter(kind=JobEventKind.DISPATCH_RETRY).count() == 1
    assert kube_proxy.requests == [] and kube.names("Job") == []

    sync()  # not due yet: nothing is sent
    job.refresh_from_db()
    assert job.state == JobState.STARTING and job.dispatch_attempts == 1

    kube_proxy.accept_connections()
    make_due(job)
    sync()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and "unreachable" not in job.backend_message
    sync()
    assert kube.names("Job") == [f"research/{name_of(job)}"]  # one Job, never two
    assert kube.names("ComputeDomain") == [f"research/{name_of(job)}"]


def test_a_503_on_the_create_is_retried(submit, kube, kube_proxy, sync):
    kube_proxy.fail(503, "etcdserver: leader changed", method="POST", path="/jobs")
    job = submit(gpus=8)
    assert job.state == JobState.STARTING
    assert "503" in job.backend_message and "leader changed" in job.backend_message
    assert kube.names("Job") == []  # the real server never saw it
    make_due(job)
    sync()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert kube.names("Job") == [f"research/{name_of(job)}"]


def test_a_lost_reply_is_adopted_not_run_twice(submit, kube, kube_proxy, sync):
    # The API server stores the Job; its reply is lost on the way back (a 503 from a proxy on the way).
    kube_proxy.fail(503, "upstream connect error", method="POST", path="/jobs", after_forward=True)
    job = submit(gpus=8)
    assert job.state == JobState.STARTING and "503" in job.backend_message
    stored = kube.get("Job", name_of(job), NAMESPACE)
    assert stored is not None  # the server has it after all
    make_due(job)
    sync()
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.backend_id == f"research/{name_of(job)}"
    assert kube.names("Job") == [f"research/{name_of(job)}"]  # adopted: one Job, never two
    live = kube.get("Job", name_of(job), NAMESPACE)
    assert live["metadata"]["uid"] == stored["metadata"]["uid"]
    assert live["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    creates = [r.path for r in kube_proxy.writes if r.method == "POST" and r.path.endswith("/jobs")]
    assert len(creates) == 2  # the retry did ask; the server answered AlreadyExists and it was adopted


def test_a_refused_job_fails_with_the_backends_words_and_frees_its_gpus(submit, kube):
    # A quota the cluster admin set on the namespace, with the status the quota controller would write.
    quota = {"count/jobs.batch": "0"}
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "no-jobs", "namespace": NAMESPACE},
            "spec": {"hard": quota},
        }
    )
    kube.set_status("ResourceQuota", "no-jobs", NAMESPACE, {"hard": quota, "used": quota})
    job = submit(gpus=8)
    assert job.state == JobState.FAILED
    assert "refused by Kubernetes (cluster)" in job.backend_message
    assert "403 Forbidden" in job.backend_message and "exceeded quota: no-jobs" in job.backend_message
    assert not Allocation.objects.filter(job=job).exists()
    assert kube.names("Job") == []
    assert kube.names("ComputeDomain", live_only=False) == []  # the one made before the refusal is removed


def test_sync_with_the_backend_down_leaves_running_jobs_running_and_says_so(submit, kube_proxy, sync):
    job = submit(gpus=8)
    kube_proxy.refuse_connections()
    assert sync()["unreachable"] == 1
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert "unreachable" in job.backend_message and "state not updated" in job.backend_message
    # The moment in full and in UTC, named (a page shows it in the viewer's zone: core.moments.moment_html).
    assert re.search(r" unreachable at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC: ", job.backend_message)


def assert_being_deleted(kube, job: Job) -> None:
    """The Job is being deleted in the foreground (the garbage collector, absent here, would remove its
    pods and then the Job); its ComputeDomain is gone."""
    live = kube.get("Job", name_of(job), NAMESPACE)
    assert live["metadata"].get("deletionTimestamp")
    assert "foregroundDeletion" in live["metadata"]["finalizers"]
    assert kube.names("Job") == []  # no live Job left (names() leaves out the ones being deleted)
    assert kube.names("ComputeDomain", live_only=False) == []


def test_cancel_stops_the_job_in_kubernetes_and_frees_its_gpus_at_once(submit, kube, kube_proxy, sync, api):
    job = submit(gpus=8)
    start(kube, job)
    assert api.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 200
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and not Allocation.objects.filter(job=job).exists()
    sync()
    assert BackendCancel.objects.get(job=job).done_at is not None
    assert_being_deleted(kube, job)
    [delete] = [r for r in kube_proxy.writes if r.method == "DELETE" and "/jobs/" in r.path]
    assert delete.query["propagationPolicy"] == ["Foreground"]
    # The next job runs at once; which free trays it takes is the engine's choice (it differs between the
    # cluster a PostgreSQL worker keeps between passes and a cold read). The cancelled one is not asked about
    # again.
    again = submit(gpus=8)
    assert again.state == JobState.RUNNING
    assert not Allocation.objects.filter(job=job).exists()
    writes = len(kube_proxy.writes)
    sync()
    assert len(kube_proxy.writes) == writes
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED


def test_cancel_while_the_backend_is_down_is_delivered_later(submit, kube, kube_proxy, sync, api):
    job = submit(gpus=8)
    kube_proxy.refuse_connections()
    assert api.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 200
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and not Allocation.objects.filter(job=job).exists()
    sync()
    cancel = BackendCancel.objects.get(job=job)
    assert cancel.done_at is None and cancel.attempts >= 1 and "not reachable" in cancel.error
    assert kube.names("Job") == [f"research/{name_of(job)}"]
    kube_proxy.accept_connections()
    sync()
    cancel.refresh_from_db()
    assert cancel.done_at is not None and cancel.error == ""
    assert_being_deleted(kube, job)


class TestWithoutTheDepartmentsNamespace:
    """The cluster admin made no namespace: only a configuration push sets the department up."""

    @pytest.fixture
    def namespace(self):
        return None

    def test_a_department_the_cluster_does_not_have_fails_its_job_saying_so(self, submit, kube):
        job = submit(gpus=8)
        assert job.state == JobState.FAILED
        assert 'namespaces "research" not found' in job.backend_message
        assert not Allocation.objects.filter(job=job).exists()
        assert kube.names("ComputeDomain") == [] and kube.names("Job") == []

    def test_a_department_set_up_by_a_push_runs_its_jobs_on_its_local_queue(
        self, target, submit, kube, django_capture_on_commit_callbacks
    ):
        for node in configstate.build_state().kubernetes.inventory.nodes:
            kube.register_node(node.hostname)
        with django_capture_on_commit_callbacks(execute=True):
            [push] = pushes.queue_pushes(reason="set up the cluster", targets=[target])
        push.refresh_from_db()
        assert push.status == PushStatus.SUCCEEDED, push.error
        assert kube.get("Namespace", NAMESPACE)["metadata"]["labels"]["app.kubernetes.io/managed-by"] == (
            "rackplane"
        )

        job = submit(gpus=8)
        assert job.state == JobState.RUNNING, job.backend_message
        live = kube.get("Job", name_of(job), NAMESPACE)
        queue = live["metadata"]["labels"][QUEUE_NAME_LABEL]
        assert kube.names("LocalQueue") == [f"{NAMESPACE}/{queue}"]
        for host in job.placement:  # trays the push labelled with their rack
            assert RACK_LABEL in kube.get("Node", host)["metadata"]["labels"], host
