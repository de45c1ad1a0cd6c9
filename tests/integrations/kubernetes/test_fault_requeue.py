"""A Kubernetes job on a tray drained by a fault, against the testbed's real kube-apiserver
(tests/integrations/kube_testbed.py): asked to checkpoint (the Job and its pods get the annotation
`rackplane.io/checkpoint-by`, the deadline), then
requeued as a whole gang: its Job is deleted (Foreground: no garbage collector runs here, so it stays with its
deletionTimestamp) and created again under the next run's name, on trays that are in service; the drained
tray's Node is cordoned meanwhile.

Rackplane talks to the server through the `kube_proxy` with the `rackplane` service account's token; the
department's Namespace, ServiceAccount and LocalQueue are made as the admin, as in test_jobs.py."""

from __future__ import annotations

from datetime import timedelta

import pytest

from integrations import dispatch
from integrations.kubernetes.jobs import CHECKPOINT_ANNOTATION
from integrations.kubernetes.tenants import local_queue
from integrations.models import ConfigTarget
from inventory.choices import TrayState
from inventory.health.ingest import record_admin_event
from inventory.models import ComputeTray
from scheduling import requeue
from scheduling.choices import FaultAction, JobEventKind, JobState, PriorityClass
from scheduling.models import FaultPolicy
from tests.factories import make_department, make_job, make_user
from tests.integrations.kubernetes.test_jobs import VISION, _service_account, add_pod

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

WORK = {"image": "nvcr.io/nvidia/pytorch:25.01-py3", "command": ["torchrun"], "args": ["train.py"]}


@pytest.fixture
def cluster(demo_inventory, kube, kube_proxy, kube_testbed):
    department = make_department("Vision", slug="vision", guaranteed_gpus=64)
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vision"}})
    _service_account(kube, "vision", "default")
    kube.create(local_queue(VISION), manager="rackplane")
    ConfigTarget.objects.filter(enabled=True).update(enabled=False)
    ConfigTarget.objects.create(
        name="gb-cluster",
        kind="kubernetes",
        settings={"api_url": kube_proxy.url, "token": kube_testbed.token, "ca_file": kube_testbed.ca},
    )
    for tray in ComputeTray.objects.filter(rack__name="gb-r03"):
        kube.register_node(tray.hostname)
    yield department
    kube.request("DELETE", "/api/v1/namespaces/vision/serviceaccounts/default")


def test_a_requeue_deletes_the_job_and_creates_it_again_elsewhere(
    cluster, kube, django_capture_on_commit_callbacks
):
    FaultPolicy.objects.update_or_create(
        priority_class=PriorityClass.TRAIN, defaults={"action": FaultAction.CHECKPOINT, "grace_s": 60}
    )
    trays = list(ComputeTray.objects.filter(rack__name="gb-r03").order_by("slot")[:2])
    job = make_job(
        cluster,
        "pretrain",
        state=JobState.STARTING,
        trays=trays,
        backend="kubernetes",
        work=WORK,
        submitted_by=make_user("ada"),  # with a POSIX identity: a Kubernetes job runs as its person
    )
    assert dispatch.dispatch(job.pk) == "submitted"
    job.refresh_from_db()
    assert job.backend_id == f"vision/rp-{job.pk}" and kube.names("Job") == [job.backend_id]

    pods = [add_pod(kube, f"rp-{job.pk}", index, tray.hostname) for index, tray in enumerate(trays)]
    failing = trays[1]
    uuid = failing.gpus.order_by("index").first().uuid
    with django_capture_on_commit_callbacks(execute=True):
        record_admin_event(failing, code="", xid=79, gpu_uuid=uuid)
    failing.refresh_from_db()
    assert failing.state == TrayState.DRAIN
    assert kube.get("Node", failing.hostname)["spec"]["unschedulable"] is True  # cordoned

    # Asked to checkpoint: the Job carries the deadline; it still runs.
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.requeue_at is not None
    annotations = kube.get("Job", f"rp-{job.pk}", "vision")["metadata"]["annotations"]
    assert annotations[CHECKPOINT_ANNOTATION] == job.requeue_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    for index in range(len(pods)):  # and so do its pods (a downward API volume shows it to the workload)
        pod = kube.get("Pod", f"rp-{job.pk}-{index}-abcde", "vision")
        assert pod["metadata"]["annotations"][CHECKPOINT_ANNOTATION] == annotations[CHECKPOINT_ANNOTATION]

    # The grace period ends: the old Job is deleted and the next run's Job is created, off the drained tray.
    with django_capture_on_commit_callbacks(execute=True):
        assert requeue.requeue_due(now=job.requeue_at + timedelta(seconds=1)) == [job.pk]
    job.refresh_from_db()
    assert job.state == JobState.RUNNING, (job.pending_reason, job.backend_message)
    assert job.backend_id == f"vision/rp-{job.pk}-1" and job.fault_requeues == 1
    old = kube.get("Job", f"rp-{job.pk}", "vision")
    assert old is None or old["metadata"].get("deletionTimestamp")  # deleted (Foreground: GC finishes it)
    assert kube.names("Job") == [job.backend_id]
    new = kube.get("Job", f"rp-{job.pk}-1", "vision")
    pinned = str(new["spec"]["template"]["spec"].get("affinity"))
    assert failing.hostname not in pinned and all(host in pinned for host in job.placement)
    assert failing.hostname not in job.placement
    assert (
        job.events.filter(kind=JobEventKind.REQUEUED)
        .get()
        .message.endswith(f"drained {failing.hostname} (policy checkpoint, grace 1 min)")
    )
