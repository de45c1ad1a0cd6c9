"""Tokens never outlive their limits: rotation keeps a token's kind and expiry (a
short-lived personal token used to rotate into a 90-day single token that outlived its revocation), the old
key stops at once, a revoked token is refused on the very next request, and a token used beyond its scope
stays refused."""

import datetime
import threading
import time

import pytest
from django.db import connection, connections
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from core import tokens
from core.models import AuditEvent, PersonalToken
from inventory import agent_tokens
from inventory.models import AgentToken, Rack
from tests import factories

pytestmark = pytest.mark.django_db

ROTATE = "/api/v1/tokens/rotate/"
JOBS = "/api/v1/jobs/"


def client_with(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def personal(user, days: float = 1, name: str = "nightly script") -> tuple[PersonalToken, str]:
    return tokens.issue(user, name, timezone.now() + datetime.timedelta(days=days))


# --- personal tokens ---------------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_rotating_a_short_lived_personal_token_makes_a_personal_token_expiring_no_later(member_a):
    original, key = personal(member_a, days=1)
    response = client_with(key).post(ROTATE)
    assert response.status_code == 200, response.content
    body = response.json()
    # The same kind: a personal token, never a single (legacy) token with its own 90 days.
    assert not Token.objects.filter(user=member_a).exists()
    assert body["kind"] == "personal" and body["token"].startswith(tokens.KEY_PREFIX)
    new = tokens.find(body["token"])
    assert new is not None and new.pk != original.pk
    assert (new.user, new.name, new.expires_at) == (member_a, original.name, original.expires_at)
    assert datetime.datetime.fromisoformat(body["expires_at"]) == original.expires_at
    # The old key stops at once; the new one works.
    original.refresh_from_db()
    assert original.revoked_at is not None
    assert client_with(key).get(JOBS).status_code == 401
    assert client_with(body["token"]).get(JOBS).status_code == 200


def test_revoking_the_rotated_token_leaves_no_working_credential(client_as, member_a):
    """The finding: after rotating, revoking what the rotation made left a long-lived key working."""
    _, key = personal(member_a, days=1)
    new_key = client_with(key).post(ROTATE).json()["token"]
    new = tokens.find(new_key)
    client_as(member_a).post(f"/account/tokens/{new.pk}/revoke/", {"confirmed": "yes"})
    for credential in [key, new_key, *Token.objects.filter(user=member_a).values_list("key", flat=True)]:
        assert client_with(credential).get(JOBS).status_code == 401
    assert not PersonalToken.objects.filter(user=member_a, revoked_at__isnull=True).exists()


def test_the_rotated_token_expires_when_the_original_would_have(member_a):
    _, key = personal(member_a, days=1)
    new_key = client_with(key).post(ROTATE).json()["token"]
    assert client_with(new_key).get(JOBS).status_code == 200
    # The original's day passes: the rotated token is refused with it.
    PersonalToken.objects.filter(user=member_a).update(
        expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    response = client_with(new_key).get(JOBS)
    assert response.status_code == 401
    assert "expired" in response.json()["detail"]
    # And an expired token rotates into nothing.
    assert client_with(new_key).post(ROTATE).status_code == 401
    assert PersonalToken.objects.filter(user=member_a).count() == 2
    assert not Token.objects.filter(user=member_a).exists()


def test_rotation_is_audited_as_a_revocation_and_a_creation_without_the_key(member_a):
    original, key = personal(member_a)
    new_key = client_with(key).post(ROTATE).json()["token"]
    new = tokens.find(new_key)
    events = AuditEvent.objects.filter(object_type="core.personaltoken")
    assert set(events.values_list("object_id", "action")) >= {
        (str(original.pk), "update"),
        (str(new.pk), "create"),
    }
    assert all(key not in str(e.__dict__) and new_key not in str(e.__dict__) for e in events)


def test_a_rotated_token_cannot_be_rotated_twice(member_a):
    """Two rotations of one token (the second holds the row as it was before the first): one new token."""
    original, _ = personal(member_a)
    stale = PersonalToken.objects.get(pk=original.pk)
    tokens.rotate_personal(original)
    with pytest.raises(tokens.NotRotatable, match=r"was rotated at .* UTC, to rpt_"):
        tokens.rotate_personal(stale)
    assert PersonalToken.objects.filter(user=member_a, revoked_at__isnull=True).count() == 1


def test_a_rotated_key_is_refused_as_rotated_naming_its_successor_and_a_revoked_one_as_revoked(member_a):
    """A rotated token was replaced, not revoked: its refusal says so and names the one that replaced it."""
    original, key = personal(member_a)
    new_key = client_with(key).post(ROTATE).json()["token"]
    new = tokens.find(new_key)
    assert PersonalToken.objects.get(pk=original.pk).rotated_to == new
    refused = client_with(key).get("/api/v1/jobs/")
    assert refused.status_code == 401
    detail = refused.json()["detail"]
    assert f"({original.name}) was rotated at " in detail and f"replaced by {new.prefix}…" in detail
    assert "revoked" not in detail
    tokens.revoke(new)
    refused = client_with(new_key).get("/api/v1/jobs/")
    assert "was revoked at" in refused.json()["detail"] and "rotated" not in refused.json()["detail"]


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_rotations_of_one_token_make_one_new_token(department_a, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL row locks and concurrent connections; scripts/test.sh runs it")
    user = factories.make_member("racer", department_a)
    original, _ = personal(user)
    real_revoke = tokens.revoke

    def slow_revoke(token, by=None):
        # Each thread reads the token well before the other commits: without the row lock both would
        # find it working and both would make a new token.
        time.sleep(0.3)
        return real_revoke(token, by=by)

    monkeypatch.setattr(tokens, "revoke", slow_revoke)
    barrier = threading.Barrier(2)
    outcome: list[object] = []

    def attempt():
        try:
            barrier.wait(timeout=10)
            outcome.append(tokens.rotate_personal(PersonalToken.objects.get(pk=original.pk)))
        except Exception as error:  # reported to the test thread
            outcome.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=attempt) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sum(isinstance(result, tokens.NotRotatable) for result in outcome) == 1, outcome
    assert PersonalToken.objects.filter(user=user, revoked_at__isnull=True).count() == 1


# --- the single (legacy) token -----------------------------------------------------------------------------


def test_rotating_the_single_token_keeps_its_expiry(member_a):
    old = Token.objects.create(user=member_a)
    Token.objects.filter(pk=old.pk).update(created=timezone.now() - datetime.timedelta(days=80))
    old.refresh_from_db()
    response = client_with(old.key).post(ROTATE)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["kind"] == "single"
    new = Token.objects.get(user=member_a)
    assert new.key == body["token"] != old.key
    assert tokens.expires_at(new) == tokens.expires_at(old)
    assert datetime.datetime.fromisoformat(body["expires_at"]) == tokens.expires_at(old)
    assert client_with(old.key).get(JOBS).status_code == 401
    # Rotating again and again never buys another day.
    again = client_with(new.key).post(ROTATE).json()
    assert datetime.datetime.fromisoformat(again["expires_at"]) == tokens.expires_at(old)


def test_only_a_token_rotates_itself(client_as, member_a):
    # A browser session (it would have minted a 90-day single token): refused, nothing made.
    session = client_as(member_a).post(ROTATE)
    assert session.status_code == 400
    assert "token" in session.json()
    assert not Token.objects.filter(user=member_a).exists()
    # An agent token outside the node agent's endpoints: still refused.
    _, secret = agent_tokens.issue(rack=Rack.objects.create(name="gb-r09"))
    assert client_with(secret).post(ROTATE).status_code == 403


# --- agent tokens ------------------------------------------------------------------------------------------


def test_rotating_an_agent_token_keeps_its_scope_and_revokes_the_old_at_once(demo_inventory, admin_user):
    rack = Rack.objects.order_by("name").first()
    old, old_secret = agent_tokens.issue(rack=rack, description="rack agent")
    new, new_secret = agent_tokens.rotate(old, created_by=admin_user)
    old.refresh_from_db()
    assert old.revoked_at is not None
    assert (new.rack, new.hostname, new.description, new.revoked_at) == (rack, "", "rack agent", None)
    assert agent_tokens.find(old_secret).is_revoked
    assert agent_tokens.find(new_secret).pk == new.pk
    report = "/api/v1/discovery/reports/"
    assert client_with(old_secret).post(report, {}, format="json").status_code == 401
    assert client_with(new_secret).post(report, {}, format="json").status_code == 400  # answered: empty
    with pytest.raises(Exception, match="revoked"):
        agent_tokens.rotate(old)
    assert AgentToken.objects.filter(revoked_at__isnull=True).count() == 1


# --- revocation is immediate -------------------------------------------------------------------------------


def test_a_revoked_personal_token_is_refused_on_the_very_next_request(client_as, member_a):
    token, key = personal(member_a, days=30)
    api = client_with(key)
    assert api.get(JOBS).status_code == 200
    client_as(member_a).post(f"/account/tokens/{token.pk}/revoke/", {"confirmed": "yes"})
    response = api.get(JOBS)
    assert response.status_code == 401
    assert "revoked" in response.json()["detail"]


def test_a_revoked_agent_token_is_refused_on_its_very_next_report(demo_inventory):
    token, secret = agent_tokens.issue(rack=Rack.objects.order_by("name").first())
    agent = client_with(secret)
    assert agent.post("/api/v1/discovery/reports/", {}, format="json").status_code == 400
    agent_tokens.revoke(token)
    assert agent.post("/api/v1/discovery/reports/", {}, format="json").status_code == 401
