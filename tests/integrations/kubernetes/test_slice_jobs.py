"""A slice job (scheduling.slices) the whole way to the testbed's real kube-apiserver: submitted through
POST /api/v1/jobs/, placed by the pass on MIG devices of a tray given all-balanced, dispatched as a Job whose
container asks `nvidia.com/mig-1g.23gb` (the GPU Operator's mixed strategy) and no whole GPU, pinned to that
tray. The cluster (namespace, service account, LocalQueue, Nodes, target) is test_fault_requeue's."""

from __future__ import annotations

import pytest

from inventory.models import MigDevice
from scheduling.choices import JobState
from scheduling.models import Job, SliceAllocation
from tests.factories import make_member, mig_tray, token_client
from tests.integrations.kubernetes.test_fault_requeue import WORK, cluster  # noqa: F401 (a fixture)
from tests.integrations.kubernetes.test_jobs import pod_spec

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

TRAY = "gb-r03-t02"


def test_a_slice_job_from_the_api_is_a_job_asking_its_mig_profile_on_its_tray(
    cluster,  # noqa: F811
    kube,
    django_capture_on_commit_callbacks,
):
    mig_tray(TRAY)
    ada = make_member("ada", cluster)
    body = {
        "department": "vision",
        "name": "notebook",
        "backend": "kubernetes",
        "mig_profile": "1g.23gb",
        "mig_slices": 2,
        "work": WORK,
    }
    with django_capture_on_commit_callbacks(execute=True):
        response = token_client(ada).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.state == JobState.RUNNING, (job.pending_reason, job.backend_message)
    assert job.placement == [TRAY] and job.backend_id == f"vision/rp-{job.pk}"
    held = set(SliceAllocation.objects.filter(job=job).values_list("mig_uuid", flat=True))
    assert len(held) == 2
    assert held <= set(MigDevice.objects.filter(gpu__tray__hostname=TRAY).values_list("uuid", flat=True))

    stored = kube.get("Job", f"rp-{job.pk}", "vision")
    spec = pod_spec(stored)
    resources = spec["containers"][0]["resources"]
    assert resources["limits"] == resources["requests"] == {"nvidia.com/mig-1g.23gb": "2"}
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [TRAY]
    assert kube.names("ComputeDomain") == []
