"""A job's opt-in to a wider topology after a bounded wait: the API takes and refuses it, the pass
passes it to the engine, and the job's history says when it fell back.

On the demo inventory: gb-r01 and gb-r03 have one default partition each, gb-r02 is carved p1/p2 (9 trays)."""

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from inventory.models import ComputeTray
from scheduling.choices import JobEventKind, JobState
from scheduling.models import Job
from scheduling.services.passes import run_pass
from tests.factories import make_department, make_job

pytestmark = pytest.mark.django_db

SCRIPT = "#!/bin/bash\nsrun python train.py\n"


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Research", guaranteed_gpus=48)


@pytest.fixture
def submit(api_as, member_a):
    def post(**fields):
        body = {"department": "research", "name": "train-llm", "gpus": 40, "work": {"script": SCRIPT}}
        body.update(fields)
        return api_as("member_a").post("/api/v1/jobs/", body, format="json")

    return post


# --- the API -------------------------------------------------------------------------------------------


def test_the_fallback_is_taken_stored_and_shown(submit):
    response = submit(topology="partition", fallback_topology="rack", fallback_after_minutes=90)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["fallback_topology"] == "rack" and body["fallback_after_minutes"] == 90
    job = Job.objects.get(pk=body["id"])
    assert (job.fallback_topology, job.fallback_after_minutes) == ("rack", 90)
    assert (
        job.events.get(kind=JobEventKind.SUBMITTED).message
        == "40 GPUs, partition; rack accepted after 90 min"
    )
    client = Client()
    client.force_login(job.submitted_by)
    html = client.get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    assert "One NVLink partition; One NVLink domain (rack) accepted after 90 min of waiting" in html


def test_the_bound_defaults_to_two_hours_and_no_fallback_is_strict(submit):
    body = submit(fallback_topology="any").json()
    assert (body["topology"], body["fallback_topology"], body["fallback_after_minutes"]) == (
        "partition",
        "any",
        120,
    )
    body = submit(fallback_topology=None).json()
    assert (body["fallback_topology"], body["fallback_after_minutes"]) == (None, None)
    assert Job.objects.get(pk=body["id"]).fallback_topology == ""


@pytest.mark.slow(reason="11 cases, each a full request through the stack")
@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"fallback_topology": "partition"}, "fallback_topology", "must be wider than the job's topology"),
        ({"topology": "rack", "fallback_topology": "partition"}, "fallback_topology", "give any"),
        ({"topology": "rack", "fallback_topology": "rack"}, "fallback_topology", "must be wider"),
        ({"topology": "any", "fallback_topology": "rack"}, "fallback_topology", "nothing is wider"),
        ({"fallback_topology": "cluster"}, "fallback_topology", "is not a valid choice"),
        ({"fallback_topology": 2}, "fallback_topology", "is not a valid choice"),
        (
            {"fallback_topology": "rack", "fallback_after_minutes": 0},
            "fallback_after_minutes",
            "greater than",
        ),
        (
            {"fallback_topology": "rack", "fallback_after_minutes": 10081},
            "fallback_after_minutes",
            "less than",
        ),
        (
            {"fallback_topology": "rack", "fallback_after_minutes": "60"},
            "fallback_after_minutes",
            "JSON integer",
        ),
        (
            {"fallback_topology": "rack", "fallback_after_minutes": 60.0},
            "fallback_after_minutes",
            "JSON integer",
        ),
        ({"fallback_after_minutes": 60}, "fallback_after_minutes", "needs a fallback_topology"),
    ],
)
def test_bad_fallbacks_are_refused_naming_the_field_and_nothing_is_written(submit, fields, field, words):
    response = submit(**fields)
    assert response.status_code == 400, response.json()
    errors = response.json()
    assert set(errors) == {field}, errors
    assert words in " ".join(errors[field]), errors
    assert not Job.objects.exists()


def test_a_retry_with_another_fallback_is_another_request(api_as, member_a):
    body = {"department": "research", "name": "t", "gpus": 40, "work": {"script": SCRIPT}}
    client = api_as("member_a")
    first = client.post("/api/v1/jobs/", body, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert first.status_code == 201
    again = client.post("/api/v1/jobs/", body, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    other = {**body, "fallback_topology": "rack"}
    assert client.post("/api/v1/jobs/", other, format="json", HTTP_IDEMPOTENCY_KEY="k1").status_code == 422
    assert Job.objects.count() == 1


# --- the pass --------------------------------------------------------------------------------------------


@pytest.fixture
def crowded(department_a):
    """gb-r01 and gb-r03 are full of another department's in-quota work (not reclaimable); gb-r02's two
    9-tray partitions are free: a 10-tray job fits in rack gb-r02 but in no partition."""
    other = make_department("Platform", guaranteed_gpus=144)
    for rack in ("gb-r01", "gb-r03"):
        make_job(
            other, f"{rack}-work", trays=ComputeTray.objects.filter(rack__name=rack, partition__isnull=False)
        )
    assert not Job.objects.filter(over_quota=True).exists()
    return department_a


def waiting_since(job: Job, minutes: float) -> Job:
    Job.objects.filter(pk=job.pk).update(created_at=timezone.now() - timedelta(minutes=minutes))
    run_pass()
    job.refresh_from_db()
    return job


def test_an_in_quota_gang_falls_back_only_after_its_bound_and_only_when_opted_in(crowded):
    opted = make_job(
        crowded, "opted", JobState.PENDING, gpus=40, fallback_topology="rack", fallback_after_minutes=60
    )
    strict = make_job(crowded, "strict", JobState.PENDING, gpus=40)
    run_pass()
    for job in (opted, strict):
        job.refresh_from_db()
        assert job.state == JobState.PENDING, job.pending_reason
    assert waiting_since(opted, 30).state == JobState.PENDING  # before its bound: its topology holds
    assert waiting_since(strict, 300).state == JobState.PENDING  # never without the opt-in

    opted = waiting_since(opted, 61)
    assert opted.state == JobState.STARTING and not opted.over_quota
    assert len(opted.placement) == 10 and {h.rsplit("-t", 1)[0] for h in opted.placement} == {"gb-r02"}
    placed = opted.events.get(kind=JobEventKind.PLACED)
    assert placed.message.startswith(
        "waited 61 min for one NVLink partition; placed on rack gb-r02 as its submitter allowed: placed in "
        "quota on 10 trays in "
    ), placed.message
    assert "(2 NVLink partitions)" in placed.message
    strict.refresh_from_db()
    assert strict.state == JobState.PENDING  # the opted job took the rack: the strict one still waits


def test_a_borrower_keeps_its_topology_past_the_bound(crowded):
    trays = ComputeTray.objects.filter(rack__name="gb-r02").order_by("slot")
    by_partition = {}
    for tray in trays:
        by_partition.setdefault(tray.partition_id, []).append(tray)
    assert len(by_partition) == 2
    make_job(crowded, "holds-the-guarantee", trays=[t for part in by_partition.values() for t in part[:6]])
    # Research holds 48 GPUs (its guarantee): a 16-GPU job would borrow; gb-r02 has 6 trays left, 3 per
    # partition, so only the rack fits it.
    borrower = make_job(
        crowded, "b", JobState.PENDING, gpus=16, fallback_topology="rack", fallback_after_minutes=1
    )
    assert waiting_since(borrower, 600).state == JobState.PENDING
