"""An Idempotency-Key reused with a different request is a 422, never the first job.

It used to answer 200 with the first job, so a client that reused a key by mistake lost its second job
without a word. As the IETF Idempotency-Key draft says: the same key and the same request get the first
answer again; the same key with another request is a 422 naming the key, and nothing is made.
"""

import importlib

import pytest
from django.apps import apps

from scheduling.models import Job, JobEvent
from scheduling.services.admission import submission_fingerprint
from tenancy.models import Membership
from tests.factories import make_department

pytestmark = pytest.mark.django_db

SCRIPT = "#!/bin/bash\nsrun python train.py\n"
BODY = {"department": "research", "name": "train-llm", "gpus": 8, "work": {"script": SCRIPT}}


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Research", guaranteed_gpus=96)


@pytest.fixture
def submit(api_as, member_a, django_capture_on_commit_callbacks):
    def post(key, user=member_a, **changes):
        with django_capture_on_commit_callbacks(execute=True):
            return api_as(user).post(
                "/api/v1/jobs/", {**BODY, **changes}, format="json", HTTP_IDEMPOTENCY_KEY=key
            )

    return post


def rows() -> tuple[int, int]:
    return Job.objects.count(), JobEvent.objects.count()


@pytest.mark.slow(reason="6 cases, each a full request through the stack")
@pytest.mark.parametrize(
    "changes",
    [
        {"gpus": 16},
        {"name": "train-llm-2"},
        {"work": {"script": SCRIPT + "echo done\n"}},
        {"time_limit_minutes": 120},
        {"priority_class": "inference", "gpus": 4},
        {"topology": "rack"},
    ],
    ids=["gpus", "name", "work", "time-limit", "priority-class", "topology"],
)
def test_a_key_reused_with_another_request_is_a_422_naming_it_and_makes_nothing(submit, changes):
    first = submit("key-1")
    assert first.status_code == 201, first.json()
    before = rows()
    again = submit("key-1", **changes)
    assert again.status_code == 422, again.json()
    job = first.json()["id"]
    assert again.json() == {
        "Idempotency-Key": [
            f"the Idempotency-Key 'key-1' was used for job {job} with a different request: send that request "
            "again to get the job, or use a new key for a new job"
        ]
    }
    assert rows() == before


def test_the_same_request_again_gets_the_first_job(submit):
    first = submit("key-2")
    before = rows()
    # The defaults spelled out are the same request: the fingerprint is of the validated submission.
    again = submit(
        "key-2", topology="partition", priority_class="train", backend="slurm", time_limit_minutes=60
    )
    assert again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert rows() == before


def test_a_retry_after_leaving_the_department_still_gets_its_job_and_a_changed_one_a_422(submit, member_a):
    first = submit("key-3")
    Membership.objects.filter(user=member_a).delete()
    before = rows()
    again = submit("key-3")
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert submit("key-3", gpus=16).status_code == 422
    assert rows() == before


def test_the_fingerprint_is_stored_and_a_new_key_makes_a_new_job(submit):
    first = submit("key-4")
    job = Job.objects.get(pk=first.json()["id"])
    assert len(job.idempotency_fingerprint) == 64
    assert submit("key-5", gpus=16).status_code == 201
    assert Job.objects.count() == 2


def test_the_migration_fingerprints_older_jobs_as_the_service_does(submit):
    """Jobs with a key from before the field get the fingerprint submit_job would have stored."""
    job = Job.objects.get(pk=submit("key-6").json()["id"])
    stored = job.idempotency_fingerprint
    assert stored == submission_fingerprint(
        department=job.department,
        name=job.name,
        gpus=job.gpus,
        topology=job.topology,
        priority_class=job.priority_class,
        backend=job.backend,
        time_limit_minutes=job.time_limit_minutes,
        work=job.work,
    )
    Job.objects.filter(pk=job.pk).update(idempotency_fingerprint="")
    migration = importlib.import_module("scheduling.migrations.0007_job_idempotency_fingerprint")
    migration.fingerprint_jobs_with_a_key(apps, None)
    assert Job.objects.get(pk=job.pk).idempotency_fingerprint == stored


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("key", ["k\u00c0\u0080x", "k\u0085x", "caf\u00e9"])
def test_a_key_that_is_not_printable_ascii_is_a_400_and_makes_nothing(submit, key):
    # What a client's UTF-8 bytes in the header become once WSGI decodes them as Latin-1 (found by an
    # outside test): C1 controls and mojibake were stored as the key.
    response = submit(key)
    assert response.status_code == 400, response.content
    assert "printable ASCII" in response.json()["Idempotency-Key"][0]
    assert rows() == (0, 0)


@pytest.mark.parametrize("key", ["", "   "])
def test_an_empty_key_is_a_400_not_a_submission_without_one(submit, key):
    # A client that sends the header meant to retry safely: taken as "no key", its retry made a second job.
    response = submit(key)
    assert response.status_code == 400, response.content
    assert "empty" in response.json()["Idempotency-Key"][0]
    assert rows() == (0, 0)
