"""The Slurm QOS a placed job is dispatched under (integrations.dispatch.job_qos): its department's own, which
Slurm holds at the guarantee, when the engine admitted it in quota and it fits beside what the department's
running jobs already hold under that QOS; else `<department>--borrowed`. What slurmdbd does with the two QOS
on both Slurm releases: tests/integration/test_slurm_accounting.py."""

import json

import pytest
from django.conf import settings

from core.access import Role
from integrations import dispatch
from integrations.slurm.jobs import SlurmJobBackend
from scheduling.choices import Backend, JobState, PriorityClass
from scheduling.models import Job
from tests.factories import make_department, make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def optics(demo_inventory):
    return make_department("Optics", slug="optics", guaranteed_gpus=8, limit_gpus=16)


WORK = {"script": "#!/bin/bash\nsrun python train.py\n"}


def starting(department, tray: str, gpus: int = 4, **fields):
    """A job the engine placed; in quota unless `over_quota=True` (the factory's own standing is not wanted:
    it counts jobs on every backend, as the engine does, where the QOS counts Slurm's side only)."""
    fields.setdefault("over_quota", False)
    fields.setdefault("work", WORK)
    return make_job(department, f"job-{tray}", state=JobState.STARTING, trays=[tray], gpus=gpus, **fields)


def dispatched(job) -> dict:
    """Dispatch to the embedded backend (no target enabled) and read the slurmrestd request it rendered."""
    assert dispatch.dispatch(job.pk) == "submitted"
    job.refresh_from_db()
    return json.loads((settings.RACKPLANE_RENDER_DIR / "jobs" / f"rp-{job.pk}.json").read_text())["job"]


def test_in_quota_work_runs_under_the_guarantee_qos_until_it_is_full_then_borrows(optics, render_dir):
    first = starting(optics, "gb-r01-t01")
    assert dispatched(first)["qos"] == "optics" and first.qos == "optics"
    second = starting(optics, "gb-r01-t02")
    assert dispatched(second)["qos"] == "optics"  # 4 + 4 = the guarantee of 8
    # The engine counts a third job in quota (e.g. an inference job ranks before the older training jobs,
    # which it now counts as borrowed), but Slurm's guarantee QOS already holds 8 GPUs: it borrows there.
    third = starting(optics, "gb-r01-t03", priority_class=PriorityClass.INFERENCE)
    assert dispatched(third)["qos"] == "optics--borrowed" and third.qos == "optics--borrowed"


def test_a_job_the_engine_started_over_quota_borrows(optics, render_dir):
    job = starting(optics, "gb-r01-t01", over_quota=True)
    assert dispatched(job)["qos"] == "optics--borrowed"


def test_only_the_departments_running_jobs_under_its_own_qos_on_the_same_backend_count(optics, render_dir):
    other = make_department("Vision", slug="vision", guaranteed_gpus=8)
    make_job(other, "theirs", trays=["gb-r01-t05", "gb-r01-t06"], gpus=8, qos="vision")
    make_job(optics, "borrowing", trays=["gb-r01-t07"], gpus=4, qos="optics--borrowed")
    make_job(optics, "on-kubernetes", trays=["gb-r01-t08"], gpus=4, backend=Backend.KUBERNETES, qos="optics")
    make_job(optics, "finished", state=JobState.COMPLETED, trays=["gb-r01-t09"], gpus=4, qos="optics")
    make_job(optics, "held", trays=["gb-r01-t10"], gpus=4, qos="optics")
    assert dispatched(starting(optics, "gb-r01-t01"))["qos"] == "optics"  # 4 held + 4 = 8
    assert dispatched(starting(optics, "gb-r01-t02", gpus=1))["qos"] == "optics--borrowed"


def test_a_job_larger_than_the_guarantee_borrows_from_the_start(optics, render_dir):
    job = make_job(
        optics,
        "wide",
        state=JobState.STARTING,
        trays=["gb-r01-t01", "gb-r01-t02", "gb-r01-t03"],
        gpus=12,
        work=WORK,
    )
    assert dispatched(job)["qos"] == "optics--borrowed"


def test_a_backend_that_runs_no_department_qos_records_none(optics, render_dir):
    """Kubernetes (Kueue decides borrowing from the ClusterQueues) and a Slurm target without accounting
    (Slurm gets no account or QOS) run no department QOS: the job records none, and counts for none."""
    work = {"image": "nvcr.io/nvidia/pytorch:25.01-py3", "command": ["torchrun"]}
    job = starting(optics, "gb-r01-t01", backend=Backend.KUBERNETES, work=work)
    assert dispatch.dispatch(job.pk) == "submitted"
    job.refresh_from_db()
    assert job.backend_id.startswith("rendered/") and job.qos == ""
    without = SlurmJobBackend("http://slurmrestd:6820", "slurm", token="t", accounting=False)
    assert without.submits_qos is False
    assert SlurmJobBackend("http://slurmrestd:6820", "slurm", token="t", accounting=True).submits_qos


def test_the_job_page_says_which_qos_it_runs_under(optics, render_dir, client_as):
    from django.urls import reverse

    from tests.factories import make_member

    lead = make_member("optics-lead", optics, role=Role.LEAD)
    inside, beyond = starting(optics, "gb-r01-t01"), starting(optics, "gb-r01-t02", over_quota=True)
    dispatched(inside), dispatched(beyond)
    page = client_as(lead).get(reverse("scheduling:job-detail", args=[inside.pk])).content.decode()
    assert "<dt>QOS</dt><dd><code>optics</code> (its department's guarantee)" in page
    page = client_as(lead).get(reverse("scheduling:job-detail", args=[beyond.pk])).content.decode()
    assert "<code>optics--borrowed</code> (borrowed: beyond the guarantee)" in page


def test_jobs_running_on_slurm_before_the_two_qos_count_in_the_departments_own(optics):
    """scheduling 0017: a job submitted before under the department's one QOS holds its GPUs there."""
    import importlib

    from django.apps import apps

    migration = importlib.import_module("scheduling.migrations.0017_running_slurm_jobs_qos")
    live = make_job(optics, "live", trays=["gb-r01-t01"], gpus=4, backend_id="4242")
    rendered = make_job(optics, "rendered", trays=["gb-r01-t02"], gpus=4, backend_id="rendered/rp-9")
    kube = make_job(
        optics, "kube", trays=["gb-r01-t03"], gpus=4, backend=Backend.KUBERNETES, backend_id="a/b"
    )
    waiting = make_job(optics, "waiting", state=JobState.PENDING, gpus=4)
    migration.count_running_slurm_jobs(apps, None)
    assert [(j.name, Job.objects.get(pk=j.pk).qos) for j in (live, rendered, kube, waiting)] == [
        ("live", "optics"),
        ("rendered", ""),
        ("kube", ""),
        ("waiting", ""),
    ]
