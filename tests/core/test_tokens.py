"""API tokens expire and their owner rotates them: an expired token is a 401 that says
so, rotation replaces the key (the old one stops at once, the new one is shown once) and is audited without
the key; platform admins revoke tokens in the Django admin. The page makes a token by Post/Redirect/Get: a
reload shows the key no more and makes nothing; replacing a working token needs a confirmation."""

import datetime
import logging

import pytest
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from core.models import AuditEvent
from portal.pages import account
from tests import factories

pytestmark = pytest.mark.django_db

ROTATE = "/api/v1/tokens/rotate/"
PAGE = "/account/api-token/"
NEW_PAGE = "/account/api-token/new/"


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


def tokens_and_events(user) -> tuple:
    return (
        list(Token.objects.filter(user=user).values_list("key", "created")),
        AuditEvent.objects.filter(object_type="authtoken.token").count(),
    )


def test_making_a_token_redirects_to_a_page_that_shows_it_once(client_as, member_a, caplog):
    caplog.set_level(logging.DEBUG)
    client = client_as(member_a)
    page = client.get(PAGE)
    assert page.status_code == 200
    assert "You have no API token yet." in page.content.decode() and "confirm" not in page.content.decode()

    made = client.post(PAGE)
    assert made.status_code == 303 and made["Location"] == NEW_PAGE
    token = Token.objects.get(user=member_a)
    assert token.key not in made.content.decode()

    shown = client.get(NEW_PAGE)
    assert shown.status_code == 200 and token.key in shown.content.decode()
    assert "no-store" in shown.headers["Cache-Control"]
    assert account.NEW_KEY_SESSION_KEY not in client.session  # taken out as it was shown

    reloaded = client.get(NEW_PAGE)
    assert reloaded.status_code == 200 and "no-store" in reloaded.headers["Cache-Control"]
    assert token.key not in reloaded.content.decode()
    assert "The token was shown once; make a new one if you lost it." in reloaded.content.decode()
    assert Token.objects.get(user=member_a).key == token.key  # the reload replaced nothing

    again = client.get(PAGE).content.decode()
    assert token.key not in again
    assert f"expires {(token.created + datetime.timedelta(days=90)):%Y-%m-%d %H:%M} UTC" in again
    assert token.key not in caplog.text  # never logged


def test_a_reload_never_makes_or_replaces_a_token(client_as, member_a):
    client = client_as(member_a)
    for url in (PAGE, NEW_PAGE):
        assert client.get(url).status_code == 200
    assert tokens_and_events(member_a) == ([], 0)

    client.post(PAGE, follow=True)
    before = tokens_and_events(member_a)
    for _ in range(2):
        for url in (NEW_PAGE, PAGE):
            page = client.get(url)
            assert page.status_code == 200 and before[0][0][0] not in page.content.decode()
    assert tokens_and_events(member_a) == before


def test_replacing_a_working_token_needs_the_confirmation(client_as, member_a):
    old = Token.objects.create(user=member_a)
    client = client_as(member_a)
    page = client.get(PAGE).content.decode()
    assert "Replace my token" in page and "I understand my current token stops working at once" in page
    assert 'type="checkbox" name="confirm"' in page

    refused = client.post(PAGE)
    assert refused.status_code == 400 and "Tick the box to replace your token" in refused.content.decode()
    assert tokens_and_events(member_a) == ([(old.key, old.created)], 0)
    assert client_with(old.key).get("/api/v1/jobs/").status_code == 200

    replaced = client.post(PAGE, {"confirm": "on"})
    assert replaced.status_code == 303 and replaced["Location"] == NEW_PAGE
    new = Token.objects.get(user=member_a)
    assert new.key != old.key and new.key in client.get(NEW_PAGE).content.decode()
    assert client_with(old.key).get("/api/v1/jobs/").status_code == 401
    assert AuditEvent.objects.get(object_type="authtoken.token").source == "ui"


def test_an_expired_token_is_replaced_without_confirmation(client_as, member_a):
    old = Token.objects.create(user=member_a)
    age(old, 100)
    client = client_as(member_a)
    page = client.get(PAGE).content.decode()
    assert "expired" in page and 'name="confirm"' not in page
    assert client.post(PAGE).status_code == 303
    new = Token.objects.get(user=member_a)
    assert new.key != old.key and new.key in client.get(NEW_PAGE).content.decode()


def test_a_key_replaced_again_before_it_was_shown_is_not_shown(client_as, member_a):
    """Replaced through the API (or another tab) between the POST and its page: that key no longer works."""
    client = client_as(member_a)
    client.post(PAGE)
    first = Token.objects.get(user=member_a)
    second = client_with(first.key).post(ROTATE).json()["token"]
    page = client.get(NEW_PAGE).content.decode()
    assert first.key not in page and second not in page and "shown once" in page


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
