"""The members API keeps the department page's rule: a role that came from an identity provider's group
follows that group (re-synced at every sign-in), so a lead cannot change or remove it through the API
either."""

import pytest
from rest_framework.test import APIClient

from tenancy.choices import RoleOrigin
from tenancy.models import Membership
from tests.factories import make_member

pytestmark = pytest.mark.django_db


@pytest.fixture
def from_the_provider(department_a):
    member = make_member("sso-member", department_a)
    Membership.objects.filter(user=member).update(origin=RoleOrigin.OIDC)
    return member


def api_as(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def url(department, username=""):
    base = f"/api/v1/departments/{department.slug}/members/"
    return f"{base}{username}/" if username else base


def test_a_provider_role_is_not_changed_or_removed_through_the_api(lead_a, department_a, from_the_provider):
    client = api_as(lead_a)
    for response in (
        client.patch(url(department_a, "sso-member"), {"role": "lead"}, format="json"),
        client.post(url(department_a), {"username": "sso-member", "role": "lead"}, format="json"),
        client.delete(url(department_a, "sso-member")),
    ):
        assert response.status_code == 400, response.content
        assert "comes from an OpenID Connect group" in response.content.decode()
    membership = Membership.objects.get(user=from_the_provider)
    assert (membership.role, membership.origin) == ("member", RoleOrigin.OIDC)


def test_a_role_granted_by_hand_is_still_changed_through_the_api(lead_a, department_a, member_a):
    response = api_as(lead_a).patch(url(department_a, member_a.username), {"role": "lead"}, format="json")
    assert response.status_code == 200, response.content
    assert Membership.objects.get(user=member_a).role == "lead"
