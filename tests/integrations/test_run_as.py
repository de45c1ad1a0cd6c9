"""Every job runs as its person: the dispatch request carries the submitter's POSIX identity (run_as); a
person without one cannot submit to a live backend (API 400 / form error naming `backend`) and a job whose
person lost theirs is refused at dispatch, never sent as someone else. No server is needed: refusals happen
before slurmrestd is asked (the real daemon: tests/integration/test_slurm_identity.py)."""

import pytest
from django.urls import reverse

from core.posix import PosixIdentity
from integrations import dispatch
from integrations.jobs import BackendRejected, DispatchRequest
from integrations.models import ConfigTarget
from integrations.slurm.jobs import SlurmJobBackend
from scheduling.choices import JobState
from scheduling.models import Job
from tenancy.models import PosixAccount
from tests.factories import give_posix_account, make_job, make_member, make_unreachable_slurm_target

pytestmark = pytest.mark.django_db

SCRIPT = "#!/bin/bash\nsleep 1\n"
NO_IDENTITY = "Your account has no POSIX identity (uid/gid)"


@pytest.fixture
def slurm_target(tmp_path):
    """A live Slurm target (slurmrestd address and jwt_key); nothing listens there: nothing may be sent."""
    ConfigTarget.objects.filter(kind="directory").update(enabled=False)
    return make_unreachable_slurm_target(tmp_path)


def body(department, **fields):
    return {"department": department.slug, "name": "train", "gpus": 4, "work": {"script": SCRIPT}, **fields}


def test_the_dispatch_request_carries_the_submitters_identity(demo_inventory, department_a):
    person = make_member("ada-lovelace", department_a)
    PosixAccount.objects.filter(user=person).update(name="ada", uid=20001, gid=20001, groups=[20100])
    job = make_job(department_a, trays=["gb-r01-t01"], submitted_by=person, state=JobState.STARTING)
    request = dispatch.dispatch_request(job, {})
    assert request.run_as == PosixIdentity("ada", 20001, 20001, (20100,))


def test_a_person_without_an_identity_cannot_submit_to_a_live_backend(
    demo_inventory, department_a, slurm_target, api_as
):
    person = make_member("no-posix", department_a)
    PosixAccount.objects.filter(user=person).delete()
    response = api_as(person).post("/api/v1/jobs/", body(department_a), format="json")
    assert response.status_code == 400, response.content
    assert NO_IDENTITY in " ".join(response.json()["backend"])
    assert "ask a platform admin" in " ".join(response.json()["backend"])
    assert not Job.objects.exists()
    # With an identity the same request is taken.
    give_posix_account(person)
    assert api_as(person).post("/api/v1/jobs/", body(department_a), format="json").status_code == 201


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_job_form_says_why(client, demo_inventory, department_a, slurm_target):
    person = make_member("no-posix", department_a)
    PosixAccount.objects.filter(user=person).delete()
    client.force_login(person)
    data = {
        "department": department_a.slug,
        "name": "train",
        "gpus": "4",
        "backend": "slurm",
        "script": SCRIPT,
    }
    response = client.post(reverse("scheduling:job-new"), data)
    assert response.status_code == 400 and NO_IDENTITY in response.content.decode()
    assert not Job.objects.exists()


def test_the_embedded_renderer_needs_no_identity(demo_inventory, department_a, api_as):
    person = make_member("no-posix", department_a)
    PosixAccount.objects.filter(user=person).delete()
    assert api_as(person).post("/api/v1/jobs/", body(department_a), format="json").status_code == 201


def test_a_job_whose_person_lost_the_identity_is_refused_at_dispatch(
    demo_inventory, department_a, slurm_target
):
    person = make_member("ada-lovelace", department_a)
    job = make_job(department_a, trays=["gb-r01-t01"], submitted_by=person, state=JobState.STARTING)
    PosixAccount.objects.filter(user=person).delete()  # after submitting
    assert dispatch.dispatch(job.pk) == "rejected"
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert "ada-lovelace, has no POSIX identity" in job.backend_message
    assert job.backend_id == ""  # never sent as anyone else


def request_as(identity) -> DispatchRequest:
    return DispatchRequest(
        job_id=1,
        name="train",
        department="alpha",
        priority_class="train",
        hostnames=("gb-r01-t01",),
        gpus_per_tray=4,
        time_limit_minutes=5,
        work={"script": SCRIPT},
        service_tier="batch",
        run_as=identity,
    )


def test_the_slurm_backend_never_submits_without_a_person():
    backend = SlurmJobBackend("http://127.0.0.1:9", "slurm", jwt_key_file="/nonexistent/jwt.key")
    with pytest.raises(BackendRejected, match="no POSIX identity"):
        backend.submit(request_as(None))


def test_a_static_token_cannot_act_as_another_person():
    backend = SlurmJobBackend("http://127.0.0.1:9", "rackplane", token="static.jwt.token")
    with pytest.raises(BackendRejected, match=r"static rest_token .* cannot act as another user"):
        backend.submit(request_as(PosixIdentity("ada", 20001, 20001)))
    with pytest.raises(BackendRejected, match="cannot act as another user"):
        backend.cancel("42", run_as=PosixIdentity("ada", 20001, 20001))
    assert backend.acting_user(PosixIdentity("rackplane", 20005, 20005)) == "rackplane"  # its own: fine
