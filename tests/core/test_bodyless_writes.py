"""The write endpoints that take no body refuse one (an outside test: "unknown fields refused on every
write endpoint"). Cancelling a job, cancelling a partition plan and rotating a token used to answer 200 to
`{"force": true}` or `{"expires_at": "2099-01-01"}`, dropping the fields without a word, while every endpoint
with a body refuses an unknown field (core.fields.KnownFieldsOnly). Now such a body is a 400 naming each field
(core.fields.refuse_body) and nothing is done; no body, `{}` or `null` still work.
"""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from core import tokens
from core.models import PersonalToken
from inventory.choices import PlanStatus
from inventory.models import PartitionPlan
from scheduling.choices import JobState
from scheduling.models import Job
from tests.factories import make_department, make_job, run_job

pytestmark = pytest.mark.django_db

ROTATE = "/api/v1/tokens/rotate/"
PLANS = "/api/v1/partition-plans/"


def client_with(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@pytest.mark.parametrize("body", [{"force": True}, {"reason": "x", "signal": "KILL"}])
def test_cancelling_a_job_with_a_body_is_a_400_naming_its_fields_and_cancels_nothing(
    api_as, department_a, member_a, body
):
    job = make_job(department_a, state=JobState.PENDING, submitted_by=member_a)
    response = api_as(member_a).post(f"/api/v1/jobs/{job.pk}/cancel/", body, format="json")
    assert response.status_code == 400, response.content
    assert set(response.json()) == set(body)
    assert "takes no body" in str(response.json())
    job.refresh_from_db()
    assert job.state == JobState.PENDING

    for empty in (None, {}):  # what clients send to a body-less endpoint still works
        again = make_job(department_a, state=JobState.PENDING, submitted_by=member_a)
        answer = api_as(member_a).post(f"/api/v1/jobs/{again.pk}/cancel/", empty, format="json")
        assert answer.status_code == 200, answer.content
    assert not Job.objects.filter(pk=job.pk, state=JobState.CANCELLED).exists()


def test_a_body_that_is_not_an_object_is_refused_too(api_as, department_a, member_a):
    job = make_job(department_a, state=JobState.PENDING, submitted_by=member_a)
    response = api_as(member_a).post(f"/api/v1/jobs/{job.pk}/cancel/", ["force"], format="json")
    assert response.status_code == 400
    assert "takes no body" in str(response.json())
    job.refresh_from_db()
    assert job.state == JobState.PENDING


def test_rotating_a_token_with_a_body_is_a_400_and_the_token_is_kept(member_a):
    original, key = tokens.issue(member_a, "script", timezone.now() + datetime.timedelta(days=1))
    response = client_with(key).post(ROTATE, {"expires_at": "2099-01-01", "name": "forever"}, format="json")
    assert response.status_code == 400, response.content
    assert set(response.json()) == {"expires_at", "name"}
    original.refresh_from_db()
    assert original.revoked_at is None
    assert PersonalToken.objects.filter(user=member_a).count() == 1
    assert client_with(key).post(ROTATE).status_code == 200  # without a body it rotates


def test_cancelling_a_plan_with_a_body_is_a_400_and_the_plan_goes_on(
    demo_inventory, admin_user, local_target
):
    staff = APIClient()
    staff.force_authenticate(admin_user)
    run_job(make_department("Ops"), trays=["gb-r01-t02"], name="ops-train")
    created = staff.post(
        PLANS, {"rack": "gb-r01", "layout": {"preset": "2x9"}, "drain_first": True}, format="json"
    )
    assert created.status_code == 201, created.content
    plan = created.json()["id"]
    response = staff.post(f"{PLANS}{plan}/cancel/", {"force": True}, format="json")
    assert response.status_code == 400, response.content
    assert "force" in response.json()
    assert PartitionPlan.objects.get(pk=plan).status == PlanStatus.DRAINING
    assert staff.post(f"{PLANS}{plan}/cancel/").status_code == 200


@pytest.mark.parametrize("form", ["multipart", None])
def test_a_form_with_fields_is_refused_and_an_empty_one_taken(api_as, department_a, member_a, form):
    job = make_job(department_a, state=JobState.PENDING, submitted_by=member_a)
    client = api_as(member_a)
    if form:
        response = client.post(f"/api/v1/jobs/{job.pk}/cancel/", {"force": "1"}, format=form)
    else:
        response = client.post(
            f"/api/v1/jobs/{job.pk}/cancel/", "force=1", content_type="application/x-www-form-urlencoded"
        )
    assert response.status_code == 400, response.content
    assert "force" in response.json()
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert client.post(f"/api/v1/jobs/{job.pk}/cancel/", {}, format="multipart").status_code == 200
