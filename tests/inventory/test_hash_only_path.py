"""The short path of hash-only node reports (inventory.api.hash_only): a plain `{"host", "report_sha256",
"agent"}` from a live agent token whose scope holds the host is answered with one read, as the whole DRF path
would answer it (200 `unchanged` / 409 `full_report_needed`, same body and headers); every other request,
hostile ones included, is left to the whole path and gets its refusal unchanged."""

import json

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from inventory import agent_tokens
from inventory.api import hash_only
from inventory.models import AgentToken, ComputeTray, Rack
from tests.core.test_throttling import rates
from tests.factories import node_report, token_client

pytestmark = pytest.mark.django_db
URL = "/api/v1/discovery/reports/"
HOST = "gb-r02-t10"  # rack gb-r02, partition p2 (clique 2)
NEIGHBOUR = "gb-r02-t11"
ELSEWHERE = "gb-r01-t05"
AGENT = {"version": "0.1.0", "interval_s": 60}
COMPARED_HEADERS = ("Content-Type", "Allow", "Vary", "Content-Language")


@pytest.fixture
def rack_secret(demo_inventory) -> str:
    return agent_tokens.issue(rack=Rack.objects.get(name="gb-r02"), description="test")[1]


def agent(secret: str, scheme: str = "Bearer") -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{scheme} {secret}")
    return client


def tray(hostname: str = HOST) -> ComputeTray:
    return ComputeTray.objects.select_related("rack", "partition").get(hostname=hostname)


@pytest.fixture
def sha256(rack_secret) -> str:
    """The hash of HOST's last reconciled report (its first full report, posted now)."""
    answer = agent(rack_secret).post(URL, node_report(tray(), 2, agent=AGENT), format="json")
    assert answer.status_code == 200, answer.content
    return answer.json()["report_sha256"]


@pytest.fixture
def paths(monkeypatch):
    """post(client, body_or_bytes, **extra) -> (answer, answered by the short path); whole(...) the same
    request with the short path switched off."""
    taken: list[bool] = []
    short = hash_only.answer

    def spy(request):
        found = short(request)
        taken.append(found is not None)
        return found

    monkeypatch.setattr(hash_only, "answer", spy)

    def send(client, body, content_type="application/json", **extra):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return client.generic("POST", URL, data, content_type=content_type, **extra)

    def post(client, body, **extra):
        taken.clear()
        answer = send(client, body, **extra)
        return answer, taken == [True]

    def whole(client, body, **extra):
        monkeypatch.setattr(hash_only, "answer", lambda request: None)
        try:
            return send(client, body, **extra)
        finally:
            monkeypatch.setattr(hash_only, "answer", spy)

    return post, whole


def same_answer(short, whole) -> None:
    assert short.status_code == whole.status_code, (short.content, whole.content)
    assert short.content == whole.content
    for name in COMPARED_HEADERS:
        assert short.headers.get(name) == whole.headers.get(name), name


def test_a_heartbeat_is_one_read_and_answers_as_the_whole_path(rack_secret, sha256, paths):
    post, whole = paths
    body = {"host": HOST, "report_sha256": sha256, "agent": AGENT}
    seen = tray().last_report_at
    with CaptureQueriesContext(connection) as queries:
        answer, short = post(agent(rack_secret), body)
    assert short and answer.status_code == 200
    assert answer.json() == {"host": HOST, "unchanged": True, "report_sha256": sha256, "problems": []}
    reads = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("SELECT")]
    assert len(reads) == 1, reads  # the token, its scope and the tray together
    assert tray().last_report_at > seen  # the heartbeat was recorded (written at once inside a test)
    same_answer(answer, whole(agent(rack_secret), body))


def test_a_stranger_hash_is_the_same_409(rack_secret, sha256, paths):
    post, whole = paths
    body = {"host": HOST, "report_sha256": "0" * 64}
    answer, short = post(agent(rack_secret), body)
    assert short and answer.status_code == 409 and answer.json()["full_report_needed"] is True
    same_answer(answer, whole(agent(rack_secret), body))


def test_a_host_token_and_the_token_scheme_take_the_short_path(demo_inventory, sha256, paths):
    post, whole = paths
    secret = agent_tokens.issue(hostname=HOST)[1]
    body = {"host": HOST, "report_sha256": sha256}
    answer, short = post(agent(secret, "Token"), body)
    assert short and answer.status_code == 200
    same_answer(answer, whole(agent(secret, "Token"), body))


def test_a_revoked_token_is_refused_on_its_next_report(rack_secret, sha256, paths):
    """Nothing caches a token: the report after the revocation is the whole path's 401."""
    post, whole = paths
    body = {"host": HOST, "report_sha256": sha256}
    assert post(agent(rack_secret), body)[0].status_code == 200
    agent_tokens.revoke(AgentToken.objects.get(secret_hash=agent_tokens.hash_secret(rack_secret)))
    answer, short = post(agent(rack_secret), body)
    assert not short and answer.status_code == 401 and "was revoked" in answer.json()["detail"]
    same_answer(answer, whole(agent(rack_secret), body))


def test_a_rotated_token_is_refused_and_its_successor_is_taken(rack_secret, sha256, paths):
    post, _whole = paths
    body = {"host": HOST, "report_sha256": sha256}
    old = AgentToken.objects.get(secret_hash=agent_tokens.hash_secret(rack_secret))
    _new, secret = agent_tokens.rotate(old)
    assert post(agent(rack_secret), body)[0].status_code == 401
    answer, short = post(agent(secret), body)
    assert short and answer.status_code == 200


def test_an_expired_api_token_is_the_whole_paths_401(node_agent, sha256, paths):
    """A fleet account's API token past RACKPLANE_TOKEN_TTL_DAYS (agent tokens do not expire: they are
    revoked) never takes the short path."""
    post, whole = paths
    client = token_client(node_agent)
    body = {"host": HOST, "report_sha256": sha256}
    answer, short = post(client, body)
    assert not short and answer.status_code == 200  # a fleet token: the whole path
    Token.objects.filter(user=node_agent).update(created="2000-01-01T00:00:00Z")
    answer, short = post(client, body)
    assert not short and answer.status_code == 401
    same_answer(answer, whole(client, body))


def test_usage_is_recorded_once_a_minute_as_before(rack_secret, sha256, paths):
    post, _whole = paths
    token = AgentToken.objects.get(secret_hash=agent_tokens.hash_secret(rack_secret))
    AgentToken.objects.filter(pk=token.pk).update(last_used_at=None)
    assert post(agent(rack_secret), {"host": HOST, "report_sha256": sha256})[1]
    assert AgentToken.objects.get(pk=token.pk).last_used_at is not None


def test_the_node_agent_rate_counts_short_answers_too(rack_secret, sha256, paths):
    post, _whole = paths
    cache.clear()
    body = {"host": HOST, "report_sha256": sha256}
    with rates(**{"node-agent": "2/min"}):
        answers = [post(agent(rack_secret), body) for _ in range(3)]
    assert [(a.status_code, short) for a, short in answers] == [(200, True), (200, True), (429, False)]
    cache.clear()


# Every request the short path must leave to the whole path, with what the whole path answers.
LEFT_TO_THE_WHOLE_PATH = {
    "a host of another rack": ({"host": ELSEWHERE}, {}, 403),
    "a host the inventory lacks": ({"host": "gb-r99-t01"}, {}, 403),
    "upper-case hex": ({"report_sha256": "AB" * 32}, {}, 400),
    "63 digits": ({"report_sha256": "ab" * 31 + "a"}, {}, 400),
    "a hash with a newline": ({"report_sha256": "ab" * 32 + "\n"}, {}, None),
    "a hash as a number": ({"report_sha256": 1}, {}, 400),
    # Scope before anything else (an outside host learns nothing more): a 403 for these.
    "a control character in the host": ({"host": HOST + "\x07"}, {}, 403),
    "a NUL in the host": ({"host": HOST + "\x00"}, {}, 403),
    "an upper-case host": ({"host": HOST.upper()}, {}, 403),
    "a host with spaces around it": ({"host": f" {HOST} "}, {}, 200),
    "an extra key": ({"dry_run": True}, {}, 400),
    "dry_run false": ({"dry_run": False}, {}, 200),
    "a full report's field": ({"nvidia_smi": "x"}, {}, 400),
    "agent null": ({"agent": None}, {}, 400),
    "agent not an object": ({"agent": "0.1.0"}, {}, 400),
    "an agent interval of 0": ({"agent": {"version": "0.1.0", "interval_s": 0}}, {}, 400),
    "an unknown agent key": ({"agent": {**AGENT, "extra": 1}}, {}, 400),
    "a long agent version": ({"agent": {"version": "v" * 5000, "interval_s": 60}}, {}, 400),
    "a query string": ({}, {"QUERY_STRING": "format=json"}, 200),
    "an HTML client": ({}, {"HTTP_ACCEPT": "text/html"}, 200),
    "an indented answer": ({}, {"HTTP_ACCEPT": "application/json; indent=2"}, 200),
}


@pytest.mark.slow(reason="6 cases, 3.2 s together on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("case", LEFT_TO_THE_WHOLE_PATH)
def test_anything_but_a_plain_hash_only_report_goes_the_whole_way(rack_secret, sha256, paths, case):
    post, whole = paths
    fields, extra, status = LEFT_TO_THE_WHOLE_PATH[case]
    body = {"host": HOST, "report_sha256": sha256, **fields}
    answer, short = post(agent(rack_secret), body, **extra)
    assert not short
    if status is not None:
        assert answer.status_code == status, answer.content
    if "HTTP_ACCEPT" not in extra or "json" in extra["HTTP_ACCEPT"]:  # an HTML page carries a CSRF token
        same_answer(answer, whole(agent(rack_secret), body, **extra))


RAW_BODIES = {
    "a key twice": (b'{"host": "%s", "host": "%s", "report_sha256": "%s"}', 400),
    "a lone surrogate in the agent's version": (
        b'{"host": "%s", "report_sha256": "%s", "agent": {"version": "\\ud800", "interval_s": 60}}',
        400,
    ),
    "not JSON": (b"host=%s&report_sha256=%s", 400),
    "a JSON list": (b'["%s", "%s"]', 400),
}


@pytest.mark.parametrize("case", RAW_BODIES)
def test_hostile_bodies_get_the_whole_paths_refusal(rack_secret, sha256, paths, case):
    post, whole = paths
    template, status = RAW_BODIES[case]
    values = (
        (HOST.encode(), HOST.encode(), sha256.encode())
        if template.count(b"%s") == 3
        else (
            HOST.encode(),
            sha256.encode(),
        )
    )
    body = template % values
    answer, short = post(agent(rack_secret), body)
    assert not short and answer.status_code == status, answer.content
    same_answer(answer, whole(agent(rack_secret), body))


def test_a_huge_body_is_the_whole_paths_413(rack_secret, sha256, paths):
    post, whole = paths
    body = json.dumps({"host": HOST, "report_sha256": sha256, "agent": {"version": "v" * (5 << 20)}}).encode()
    answer, short = post(agent(rack_secret), body)
    assert not short and answer.status_code == 413
    same_answer(answer, whole(agent(rack_secret), body))


@pytest.mark.parametrize(
    ("content_type", "status"), [("text/plain", 415), ("application/json; charset=latin-1", 200)]
)
def test_other_media_types_go_the_whole_way(rack_secret, sha256, paths, content_type, status):
    post, whole = paths
    body = {"host": HOST, "report_sha256": sha256}
    answer, short = post(agent(rack_secret), body, content_type=content_type)
    assert not short and answer.status_code == status, answer.content
    same_answer(answer, whole(agent(rack_secret), body, content_type=content_type))


@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer rpa_unknown", "Bearer rpa_\u00e9t\u00e9", "Basic rpa_x", "Bearer", "Bearer a b"],
)
def test_missing_unknown_or_malformed_credentials_are_the_whole_paths_401(
    rack_secret, sha256, paths, authorization
):
    post, whole = paths
    client = APIClient()
    if authorization is not None:
        client.credentials(HTTP_AUTHORIZATION=authorization)
    body = {"host": HOST, "report_sha256": sha256}
    answer, short = post(client, body)
    assert not short and answer.status_code == 401, answer.content
    same_answer(answer, whole(client, body))


def test_a_host_token_of_another_host_is_the_whole_paths_403(demo_inventory, sha256, paths):
    post, whole = paths
    secret = agent_tokens.issue(hostname=NEIGHBOUR)[1]
    body = {"host": HOST, "report_sha256": sha256}
    answer, short = post(agent(secret), body)
    assert not short and answer.status_code == 403
    same_answer(answer, whole(agent(secret), body))


def test_a_tray_with_open_health_business_gets_the_409(rack_secret, sha256, paths):
    """Drift on the tray (its partition changed): the hash no longer matches what the inventory intends."""
    post, whole = paths
    moved = tray()
    moved.partition = moved.rack.partitions.get(clique_id=1)
    moved.save(update_fields=["partition"])
    body = {"host": HOST, "report_sha256": sha256}
    answer, short = post(agent(rack_secret), body)
    assert short and answer.status_code == 409
    same_answer(answer, whole(agent(rack_secret), body))
