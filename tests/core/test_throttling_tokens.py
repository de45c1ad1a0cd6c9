"""Unknown and invalid tokens count against the anonymous rate of their address.

DRF refuses bad credentials before its throttles run: a flood of guessed tokens used to get 401 after 401,
never a 429, while the same client without any token was throttled. Now every refused authentication counts
against the anonymous rate of the client's address: the 401 stands within it, 429 once over it."""

import pytest
from django.conf import settings
from django.test import override_settings
from django.urls import path
from rest_framework.authtoken.models import Token
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.test import APIClient
from rest_framework.views import APIView

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs/"
WRONG = {
    "personal": "rpt_" + "x" * 43,
    "single": "0123456789abcdef0123456789abcdef01234567",
    "agent": "rpa_" + "y" * 43,
    "malformed": "not-a-token",
}


def rates(**scopes):
    return override_settings(
        REST_FRAMEWORK={
            **settings.REST_FRAMEWORK,
            "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], **scopes},
        }
    )


def with_key(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


@pytest.mark.parametrize("kind", ["personal", "single"])
def test_a_flood_of_wrong_tokens_gets_401_then_429_by_address(kind):
    client = with_key(WRONG[kind])
    with rates(anon="3/min"):
        codes = [client.get(JOBS, REMOTE_ADDR="10.9.0.1").status_code for _ in range(5)]
        assert codes == [401, 401, 401, 429, 429]
        throttled = client.get(JOBS, REMOTE_ADDR="10.9.0.1")
        retry_after = int(throttled.headers["Retry-After"])
        assert 0 < retry_after <= 60
        assert throttled.json()["retry_after"] == retry_after
        assert "without valid credentials" in throttled.json()["detail"]
        # Another address has its own count.
        assert client.get(JOBS, REMOTE_ADDR="10.9.0.2").status_code == 401


def test_guessed_keys_of_every_kind_share_one_count_with_requests_without_any():
    with rates(anon="4/min"):
        codes = [with_key(key).get(JOBS).status_code for key in WRONG.values()]
        # An agent key outside the agents' endpoints: a 403 (core.tokens.AgentTokenElsewhere), counted too.
        assert codes == [401, 401, 403, 401], codes
        assert APIClient().get(JOBS).status_code == 429
        assert with_key(WRONG["personal"]).get(JOBS).status_code == 429


def test_a_working_token_from_the_same_address_is_not_held_to_the_anonymous_count(member_a):
    good = with_key(Token.objects.create(user=member_a).key)
    with rates(anon="2/min"):
        assert [with_key(WRONG["personal"]).get(JOBS).status_code for _ in range(3)] == [401, 401, 429]
        assert good.get(JOBS).status_code == 200


def test_within_the_rate_a_wrong_token_is_still_a_401_that_says_why():
    response = with_key(WRONG["personal"]).get(JOBS)
    assert response.status_code == 401
    assert response.json()["detail"].startswith("Unknown API token rpt_xxxxxxxx")
    assert response.headers["WWW-Authenticate"] == "Token"


class OpenView(APIView):
    permission_classes = [AllowAny]

    def get(self, request):
        return Response({"ok": True})


urlpatterns = [path("open/", OpenView.as_view())]


@pytest.mark.urls(__name__)
def test_wrong_tokens_use_up_the_anonymous_budget_of_an_open_endpoint(client):
    with rates(anon="3/min"):
        bad = [
            client.get("/open/", HTTP_AUTHORIZATION=f"Token {WRONG['personal']}").status_code
            for _ in range(2)
        ]
        assert bad == [401, 401]
        assert [client.get("/open/").status_code for _ in range(2)] == [200, 429]
