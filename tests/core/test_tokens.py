"""API tokens expire and their owner rotates them (issue 12, finding 8): an expired token is a 401 that says
so, rotation replaces the key (the old one stops at once, the new one is shown once) and is audited without
the key; platform admins revoke tokens in the Django admin."""

import datetime

import pytest
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from core.models import AuditEvent
from tests import factories

pytestmark = pytest.mark.django_db

ROTATE = "/api/v1/tokens/rotate/"


def client_with(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def age(token: Token, days: float) -> None:
    Token.objects.filter(pk=token.pk).update(created=timezone.now() - datetime.timedelta(days=days))


def test_a_token_works_until_its_time_to_live_then_401_says_it_expired(member_a, settings):
    settings.RACKPLANE_TOKEN_TTL_DAYS = 90
    token = Token.objects.create(user=member_a)
    client = client_with(token.key)
    age(token, 89.9)
    assert client.get("/api/v1/jobs/").status_code == 200
    age(token, 90.1)
    response = client.get("/api/v1/jobs/")
    assert response.status_code == 401
    assert response.json()["detail"].startswith("Token expired at ")
    assert "API token page" in response.json()["detail"]
    assert response.headers["WWW-Authenticate"] == "Token"


def test_the_owner_rotates_the_old_key_stops_and_the_new_one_works(member_a):
    old = Token.objects.create(user=member_a)
    response = client_with(old.key).post(ROTATE)
    assert response.status_code == 200, response.content
    body = response.json()
    new = Token.objects.get(user=member_a)
    assert body["token"] == new.key != old.key
    expires = datetime.datetime.fromisoformat(body["expires_at"])
    assert expires - new.created == datetime.timedelta(days=90)
    assert client_with(old.key).get("/api/v1/jobs/").status_code == 401
    assert client_with(new.key).get("/api/v1/jobs/").status_code == 200
    event = AuditEvent.objects.get(object_type="authtoken.token")
    assert (event.actor, event.source, event.action, event.object_id) == (
        member_a,
        "api",
        "update",
        str(member_a.pk),
    )
    assert old.key not in str(event.__dict__) and new.key not in str(event.__dict__)


def test_an_expired_token_cannot_rotate_itself(member_a):
    token = Token.objects.create(user=member_a)
    age(token, 91)
    assert client_with(token.key).post(ROTATE).status_code == 401
    assert Token.objects.get(user=member_a).key == token.key


def test_rotation_needs_credentials():
    assert APIClient().post(ROTATE).status_code == 401


def test_the_token_page_shows_the_expiry_and_the_new_key_once(client_as, member_a):
    client = client_as(member_a)
    page = client.get("/account/api-token/")
    assert page.status_code == 200
    assert "You have no API token yet." in page.content.decode()

    made = client.post("/account/api-token/")
    token = Token.objects.get(user=member_a)
    assert token.key in made.content.decode()
    assert "no-cache" in made.headers["Cache-Control"]

    again = client.get("/account/api-token/").content.decode()
    assert token.key not in again
    assert f"expires {(token.created + datetime.timedelta(days=90)):%Y-%m-%d %H:%M} UTC" in again

    age(token, 100)
    assert "expired" in client.get("/account/api-token/").content.decode()
    replaced = client.post("/account/api-token/")
    new = Token.objects.get(user=member_a)
    assert new.key != token.key and new.key in replaced.content.decode()
    assert AuditEvent.objects.filter(object_type="authtoken.token", source="ui").count() == 2


def test_a_platform_admin_revokes_a_token_in_the_django_admin(client_as, admin_user, member_a):
    token = Token.objects.create(user=member_a)
    client = client_as(admin_user)
    listing = client.get("/admin/authtoken/tokenproxy/")
    assert listing.status_code == 200 and "member-a" in listing.content.decode()
    response = client.post(f"/admin/authtoken/tokenproxy/{member_a.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Token.objects.filter(user=member_a).exists()
    assert client_with(token.key).get("/api/v1/jobs/").status_code == 401


def test_the_fleet_agent_token_is_an_api_token_like_any_other(node_agent):
    """The fleet account's token expires too (inventory's own agent tokens are separate)."""
    token = Token.objects.get(user=node_agent)
    age(token, 91)
    assert (
        factories.token_client(node_agent).post("/api/v1/discovery/reports/", {}, format="json").status_code
        == 401
    )
