"""Brute force and floods: sign-in lockout on the portal's and the admin's login forms
(django-axes), API request rates per account and per address with node agents apart (DRF throttles), and
the one rule that names a client's address behind proxies."""

import datetime

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.test import RequestFactory, override_settings
from django.urls import path
from django.utils import timezone
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from core.throttling import client_address
from tests import factories

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-operator-password-7"


@pytest.fixture
def operator(db):
    return factories.make_user("night-operator", password=PASSWORD)


def sign_in(client, username, password, url="/login/", address="10.0.0.7"):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address)


def signed_in_as(client) -> str | None:
    return client.session.get("_auth_user_id")


def let_the_cool_off_pass():
    """The clock moves on past the cool-off: every recorded failure is that much older."""
    AccessAttempt.objects.update(
        attempt_time=timezone.now() - settings.AXES_COOLOFF_TIME - datetime.timedelta(1)
    )


# --- sign-in lockout ---------------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_30_wrong_passwords_then_the_right_one_is_refused_until_the_cool_off_passes(client, operator):
    for _ in range(30):
        assert sign_in(client, "night-operator", "guess").status_code in (200, 429)
    refused = sign_in(client, "night-operator", PASSWORD)
    assert refused.status_code == 429
    page = refused.content.decode()
    assert "Too many failed sign-ins for night-operator" in page
    assert "even with the right password, for 15 minutes" in page
    assert signed_in_as(client) is None

    let_the_cool_off_pass()
    allowed = sign_in(client, "night-operator", PASSWORD)
    assert allowed.status_code == 302
    assert signed_in_as(client) == str(operator.pk)


def test_the_lock_starts_at_the_configured_limit(client, operator):
    assert settings.AXES_FAILURE_LIMIT == 5
    for attempt in range(1, 5):
        response = sign_in(client, "night-operator", "guess")
        assert response.status_code == 200, attempt  # the form again, with its error
    assert sign_in(client, "night-operator", "guess").status_code == 429  # the fifth failure locks
    assert sign_in(client, "night-operator", PASSWORD).status_code == 429


def test_a_successful_sign_in_clears_the_count(client, operator):
    for _ in range(4):
        sign_in(client, "night-operator", "guess")
    assert sign_in(client, "night-operator", PASSWORD).status_code == 302
    client.logout()
    for _ in range(4):
        sign_in(client, "night-operator", "guess")
    assert sign_in(client, "night-operator", PASSWORD).status_code == 302  # 8 failures, never 5 in a row


def test_the_admin_login_is_protected_too(client, admin_user):
    for _ in range(5):
        sign_in(client, "admin", "guess", url="/admin/login/")
    refused = sign_in(client, "admin", "admin-password-1", url="/admin/login/")
    assert refused.status_code == 429
    assert signed_in_as(client) is None
    # The lock is on the account, whichever form asks.
    assert sign_in(client, "admin", "admin-password-1", address="10.9.9.9").status_code == 429


def test_one_address_guessing_many_usernames_is_locked_out(client, operator):
    for n in range(5):
        sign_in(client, f"someone-{n}", "guess", address="10.0.0.66")
    assert sign_in(client, "night-operator", PASSWORD, address="10.0.0.66").status_code == 429
    assert sign_in(client, "night-operator", PASSWORD, address="10.0.0.8").status_code == 302


def test_the_lockout_page_renders_without_a_session(client, operator):
    """The lockout answer is a page of the portal (base template, no request-dependent failure), not text."""
    for _ in range(5):
        sign_in(client, "night-operator", "guess")
    page = sign_in(client, "night-operator", PASSWORD)
    assert page["Content-Type"].startswith("text/html")
    assert "<title>Sign-in paused · Rackplane</title>" in page.content.decode()


# --- the client's address ----------------------------------------------------------------------------------


def test_client_address_trusts_forwarded_for_only_behind_configured_proxies():
    request = RequestFactory().get("/", REMOTE_ADDR="10.1.1.1", HTTP_X_FORWARDED_FOR="6.6.6.6, 192.0.2.10")
    assert client_address(request) == "10.1.1.1"  # no proxy configured: the header is the client's word
    with override_settings(REST_FRAMEWORK={**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}):
        assert client_address(request) == "192.0.2.10"  # what our one proxy saw, not what the client wrote


# --- API rates ---------------------------------------------------------------------------------------------


def rates(**scopes):
    return override_settings(
        REST_FRAMEWORK={
            **settings.REST_FRAMEWORK,
            "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], **scopes},
        }
    )


def test_default_rates_fit_a_thousand_racks():
    configured = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
    assert configured == {"user": "1200/min", "anon": "60/min", "node-agent": None}


def test_an_account_over_its_rate_gets_429_with_retry_after_in_header_and_json(api_as, member_a, member_b):
    client = api_as(member_a)
    with rates(user="3/min"):
        assert [client.get("/api/v1/jobs/").status_code for _ in range(3)] == [200, 200, 200]
        throttled = client.get("/api/v1/jobs/")
        assert throttled.status_code == 429
        retry_after = int(throttled.headers["Retry-After"])
        assert 0 < retry_after <= 60
        assert throttled.json() == {
            "detail": f"Request was throttled. Expected available in {retry_after} seconds.",
            "retry_after": retry_after,
        }
        # Each account has its own count.
        assert api_as(member_b).get("/api/v1/jobs/").status_code == 200


class OpenView(APIView):
    """An endpoint anyone may call: where the anonymous rate applies (the API's own views all need an
    account, and DRF checks permission before rate)."""

    permission_classes = [AllowAny]

    def get(self, request):
        return Response({"ok": True})


urlpatterns = [path("open/", OpenView.as_view())]


@pytest.mark.urls(__name__)
def test_anonymous_requests_are_counted_per_address(client):
    with rates(anon="2/min"):
        assert [client.get("/open/", REMOTE_ADDR="10.2.0.1").status_code for _ in range(3)] == [200, 200, 429]
        assert client.get("/open/", REMOTE_ADDR="10.2.0.2").status_code == 200


def test_node_agents_are_not_held_to_peoples_rates(node_agent):
    """The fleet agent posts for every node every minute: far over a person's rate, never a 429."""
    agent = factories.token_client(node_agent)
    with rates(user="2/min"):
        codes = [agent.post("/api/v1/discovery/reports/", {}, format="json").status_code for _ in range(5)]
        codes += [
            agent.post("/api/v1/telemetry/dcgm/", "", content_type="text/plain").status_code for _ in range(5)
        ]
    assert set(codes) == {400}, codes  # answered (an empty report is refused), never throttled


def test_a_node_agent_rate_counts_per_agent_token(django_user_model):
    first = factories.token_client(factories.make_node_agent())
    with rates(**{"node-agent": "2/min"}):
        codes = [first.post("/api/v1/discovery/reports/", {}, format="json").status_code for _ in range(3)]
        assert codes == [400, 400, 429]
        other_user = factories.make_user("rack-aggregator")
        other_user.user_permissions.set(
            django_user_model.objects.get(username="node-agent").user_permissions.all()
        )
        second = factories.token_client(other_user)
        assert second.post("/api/v1/discovery/reports/", {}, format="json").status_code == 400
