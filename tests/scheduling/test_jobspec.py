"""JobSpec (scheduling.jobspec): the fields a submitter sets, named once.

Each place that handles a submission derives its list from JobSpec; these tests fail when one forgets a
field: the API takes exactly JobSpec's fields, every field survives submit -> resubmit with the same
fingerprint, the pass reads every field the engine reads of a pending job, and the fingerprint keeps the
form stored for older jobs.
"""

import dataclasses
import hashlib
import importlib
import json
from types import SimpleNamespace

import pytest
from django.apps import apps

from scheduling import pass_inputs
from scheduling.api.serializers import JobDetailSerializer, JobSubmitSerializer
from scheduling.choices import Backend, PriorityClass, Topology
from scheduling.jobspec import JobSpec
from scheduling.models import Job
from scheduling.services.admission import submission_fingerprint
from tenancy.models import Project, ProjectMembership
from tests.factories import make_department, mig_tray

SCRIPT = "#!/bin/bash\nsrun python train.py\n"


def _legacy_fingerprint(
    *,
    department,
    name,
    gpus,
    topology,
    priority_class,
    backend,
    time_limit_minutes,
    work,
    fallback_topology="",
    fallback_after_minutes=None,
    project=None,
) -> str:
    """submission_fingerprint as it was before JobSpec (in scheduling/services.py then), kept verbatim: the
    form of every fingerprint stored so far."""
    canonical = {
        "department": department.pk,
        "name": name,
        "gpus": gpus,
        "topology": topology,
        "priority_class": priority_class,
        "backend": backend,
        "time_limit_minutes": time_limit_minutes,
        "work": work,
    }
    if fallback_topology:
        canonical["fallback"] = [fallback_topology, fallback_after_minutes]
    if project is not None:
        canonical["project"] = project.pk
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


PLAIN = {
    "department": SimpleNamespace(pk=3),
    "name": "train-llm",
    "gpus": 8,
    "topology": "partition",
    "priority_class": "train",
    "backend": "slurm",
    "time_limit_minutes": 60,
    "work": {"script": SCRIPT, "env": {"É": "ü"}},
}


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"fallback_topology": "rack", "fallback_after_minutes": 120},
        {"project": SimpleNamespace(pk=7)},
        {"fallback_topology": "any", "fallback_after_minutes": 5, "project": SimpleNamespace(pk=7)},
    ],
    ids=["plain", "fallback", "project", "both"],
)
def test_the_fingerprint_keeps_the_stored_form(extra):
    fields = {**PLAIN, **extra}
    assert submission_fingerprint(JobSpec(**fields)) == _legacy_fingerprint(**fields)
    assert submission_fingerprint(**fields) == _legacy_fingerprint(**fields)


def test_the_fingerprint_of_a_plain_job_is_pinned():
    # Stored in Job.idempotency_fingerprint: a change here would refuse every retry of an older job.
    assert submission_fingerprint(JobSpec(**PLAIN)) == (
        "e0d667e361df8698f0cdbe604e6917e379ba6f18203272a1cd23a92fdd4f576f"
    )


def test_a_field_at_its_default_leaves_the_fingerprint_as_it_was():
    """Why a new field needs a default: the material of a spec that leaves every defaulted field alone
    names only the required fields, so adding a field keeps the fingerprints stored before it."""
    required = [f.name for f in dataclasses.fields(JobSpec) if f.default is dataclasses.MISSING]
    assert set(JobSpec(**PLAIN).fingerprint_material()) == set(required)


def test_the_lists_derive_from_the_fields():
    assert tuple(f.name for f in dataclasses.fields(JobSpec)) == JobSpec.FIELDS
    assert len(JobSpec.COLUMNS) == len(JobSpec.FIELDS)
    assert set(JobSpec.ENGINE_COLUMNS) <= set(JobSpec.COLUMNS)
    spec = JobSpec(**PLAIN)
    assert JobSpec.from_job(spec) == spec
    assert JobSpec.from_job(spec, gpus=16).gpus == 16
    assert spec.as_model_kwargs() == {name: getattr(spec, name) for name in JobSpec.FIELDS}


def test_every_field_is_a_job_column():
    columns = {f.attname for f in Job._meta.concrete_fields}
    assert set(JobSpec.COLUMNS) <= columns


def test_the_api_takes_exactly_the_spec_and_shows_it():
    """The submission serializer (and so the job form, which reads it) takes every JobSpec field and no
    other; the job's detail answer shows each."""
    submit = {name for name, f in JobSubmitSerializer().fields.items() if not f.read_only}
    assert submit == set(JobSpec.FIELDS)
    assert set(JobSpec.FIELDS) <= set(JobDetailSerializer.Meta.fields)


class _Reads:
    """A pending row that records which attributes the engine's conversion reads."""

    def __init__(self):
        self.read: set[str] = set()

    def __getattr__(self, name):
        self.read.add(name)
        return {
            "pk": 1,
            "department_id": 1,
            "project_id": None,
            "gpus": 4,
            "topology": "any",
            "priority_class": "train",
            "time_limit_minutes": 60,
            "fallback_topology": "",
            "fallback_after_minutes": None,
        }.get(name, SimpleNamespace(timestamp=lambda: 0.0))


def test_the_pass_reads_every_column_the_engine_reads_of_a_pending_job():
    row = _Reads()
    pass_inputs.engine_pending_jobs([row], {1: "research"}, {})
    assert row.read <= set(pass_inputs.PENDING_COLUMNS)
    # And JobSpec's engine marks are true: each field the engine reads is marked, each marked one read.
    assert row.read & set(JobSpec.COLUMNS) == set(JobSpec.ENGINE_COLUMNS)


# --- through the database: submit -> resubmit -> fingerprint ----------------------------------------------


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Research", guaranteed_gpus=96)


@pytest.fixture
def vision(department_a, member_a):
    project = Project.objects.create(department=department_a, name="Vision", slug="vision")
    ProjectMembership.objects.create(user=member_a, project=project)
    return project


# Every field set, each one away from its default (a field left at it would not show that it is carried).
EVERY_FIELD = {
    "department": "research",
    "project": "vision",
    "name": "every-field",
    "gpus": 8,
    "topology": Topology.RACK,
    "priority_class": PriorityClass.INFERENCE,
    "backend": Backend.KUBERNETES,
    "time_limit_minutes": 90,
    "work": {"image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "train.py"]},
    "fallback_topology": Topology.ANY,
    "fallback_after_minutes": 30,
}
# The fields a whole-GPU job cannot set (MIG slices instead of GPUs: scheduling.slices), carried by a slice
# job of their own; with EVERY_FIELD they name every field. The size chooses the profile (2g.47gb).
SLICE_FIELDS = {"mig_profile": "2g.47gb", "mig_slices": 2, "mig_memory_gb": 40}


@pytest.mark.django_db
def test_every_field_round_trips_through_submit_resubmit_and_the_fingerprint(
    api_as, client_as, member_a, vision
):
    assert set(EVERY_FIELD) | set(SLICE_FIELDS) == set(JobSpec.FIELDS), "give the new field a value here"
    defaults = {
        f.name: f.default for f in dataclasses.fields(JobSpec) if f.default is not dataclasses.MISSING
    }
    assert all({**EVERY_FIELD, **SLICE_FIELDS}[name] != default for name, default in defaults.items())

    response = api_as(member_a).post("/api/v1/jobs/", EVERY_FIELD, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert response.status_code == 201, response.json()
    first = Job.objects.select_related("department", "project").get(pk=response.json()["id"])
    spec = JobSpec.from_job(first)
    assert spec.department.slug == "research" and spec.project == vision
    assert {name: getattr(spec, name) for name in EVERY_FIELD if name not in ("department", "project")} == {
        name: value for name, value in EVERY_FIELD.items() if name not in ("department", "project")
    }
    assert first.idempotency_fingerprint == submission_fingerprint(spec)

    again = client_as(member_a).post(f"/scheduling/jobs/{first.pk}/resubmit/", {"key": "k-2"})
    assert again.status_code == 302, again.content.decode()[:2000]
    second = Job.objects.exclude(pk=first.pk).get()
    assert JobSpec.from_job(second) == spec
    assert second.idempotency_fingerprint == first.idempotency_fingerprint


@pytest.mark.django_db
def test_the_migration_fingerprints_a_job_as_its_spec_does(department_a, member_a):
    job = Job.objects.create(
        department=department_a,
        submitted_by=member_a,
        name="older",
        gpus=4,
        topology="any",
        work={"script": SCRIPT},
        idempotency_key="older-key",
    )
    migration = importlib.import_module("scheduling.migrations.0007_job_idempotency_fingerprint")
    migration.fingerprint_jobs_with_a_key(apps, None)
    job.refresh_from_db()
    assert job.idempotency_fingerprint == submission_fingerprint(JobSpec.from_job(job))


@pytest.mark.django_db
def test_a_slice_jobs_fields_round_trip_through_submit_resubmit_and_the_fingerprint(
    api_as, client_as, member_a, vision
):
    mig_tray("gb-r03-t02")
    body = {
        **{
            k: v
            for k, v in EVERY_FIELD.items()
            if k not in ("gpus", "topology", "fallback_topology", "fallback_after_minutes")
        }
    }
    body["mig_memory_gb"] = SLICE_FIELDS["mig_memory_gb"]
    body["mig_slices"] = SLICE_FIELDS["mig_slices"]
    response = api_as(member_a).post("/api/v1/jobs/", body, format="json", HTTP_IDEMPOTENCY_KEY="s-1")
    assert response.status_code == 201, response.json()
    first = Job.objects.select_related("department", "project").get(pk=response.json()["id"])
    spec = JobSpec.from_job(first)
    assert {name: getattr(spec, name) for name in SLICE_FIELDS} == SLICE_FIELDS
    assert spec.gpus == 0 and first.idempotency_fingerprint == submission_fingerprint(spec)
    again = client_as(member_a).post(f"/scheduling/jobs/{first.pk}/resubmit/", {"key": "s-2"})
    assert again.status_code == 302, again.content.decode()[:2000]
    second = Job.objects.exclude(pk=first.pk).get()
    assert JobSpec.from_job(second) == spec
