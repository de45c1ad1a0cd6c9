"""The short path of POST /api/v1/discovery/reports/ for hash-only reports (`{"host", "report_sha256",
"agent"}`): what 180,000 trays send once a minute when nothing changed (3,000 requests/s at 10,000 racks).

The whole path (inventory.api.discovery.DiscoveryReportView: DRF's request, its authentication classes,
throttles, content negotiation and the report serializer with every field of a full report) costs several
times the heartbeat it leads to, and reads the database three times (the agent token, the host's scope, the
tray). Here a report that is plainly a well-formed hash-only report from a live agent token whose scope holds
the host is answered with ONE read (inventory.ingest.heartbeats.heartbeat_for_token: token, scope and tray
together): 200 `unchanged` or 409 `full_report_needed`, the same bodies and headers the whole path answers.

Everything else goes the whole way (`answer` returns None), so every refusal keeps its words and its status:
another credential (a fleet token, a session), an unknown or revoked agent token (401, counted against the
address's rate of refused credentials), a host outside the token's scope (403), a host the inventory lacks
(400), a body that is not exactly the three known keys with a hash of 64 lower-case hex digits and a valid
`agent`, a body over SHORT_BODY_BYTES, a query string, another media type. The checks below only choose the
path: they never answer a refusal themselves. Nothing is cached: a revoked token is refused on its next
report.
"""

from __future__ import annotations

import io
from types import SimpleNamespace

from django.http import HttpResponse
from django.utils import timezone
from rest_framework.renderers import JSONRenderer

from core.parsers import JSONParser
from core.throttling import NodeAgentRateThrottle
from inventory import agent_tokens
from inventory.discovery import health_report
from inventory.discovery.report_hash import HASH_RE
from inventory.ingest.heartbeats import heartbeat_for_token
from inventory.names import hostname_error

# A hash-only report is ~150 bytes (host, 64 hex digits, the agent's version and interval); longer bodies
# (a full report, or anything else) take the whole path, which reads them within the API's body limit.
SHORT_BODY_BYTES = 1024
KEYS = frozenset({"host", "report_sha256", "agent"})
JSON_TYPES = frozenset({"application/json", "application/json; charset=utf-8"})
ACCEPTED = frozenset({"", "*/*", "application/json"})
# As DRF's APIView answers this view (finalize_response): its allowed methods, and Vary since it has more than
# one renderer to choose from.
HEADERS = {"Allow": "POST, OPTIONS", "Vary": "Accept"}


def full_report_needed(host: str) -> dict:
    """The 409's body: the portal needs the node's full report."""
    return {
        "detail": f"The portal needs the full report for {host}: its last reconciled report had another "
        "hash, or the tray has something the health rules must see again (a fault, a drain, drift, a changed "
        "partition). Post the full report.",
        "full_report_needed": True,
    }


def answer(request) -> HttpResponse | None:
    """The answer to a plain hash-only report from an agent token, or None: the whole path answers."""
    secret = _agent_secret(request)
    report = _hash_only_report(request) if secret is not None else None
    if report is None:
        return None
    host, sha256 = report
    found = heartbeat_for_token(agent_tokens.hash_secret(secret), host, sha256)
    if found is None or not _throttle_allows(request, found.token):
        return None
    agent_tokens.mark_used(found.token)
    if found.beat is None:
        return _json(full_report_needed(host), status=409)
    return _json({**found.beat.as_dict(), "problems": found.beat.problems}, status=200)


def _agent_secret(request) -> str | None:
    """The agent token's secret of a POST without a query string that takes JSON, else None."""
    meta = request.META
    if request.method != "POST" or meta.get("QUERY_STRING"):
        return None
    if meta.get("HTTP_ACCEPT", "") not in ACCEPTED or meta.get("CONTENT_TYPE", "").lower() not in JSON_TYPES:
        return None
    parts = meta.get("HTTP_AUTHORIZATION", "").split()
    if len(parts) != 2 or parts[0].lower() not in ("bearer", "token"):
        return None
    secret = parts[1]
    if not secret.startswith(agent_tokens.SECRET_PREFIX) or not secret.isascii():
        return None
    return secret


def _hash_only_report(request) -> tuple[str, str] | None:
    """(host, hash) of a short body that the report serializer would take as a valid hash-only report."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or "")
    except ValueError:
        return None
    if not 0 < length <= SHORT_BODY_BYTES:
        return None
    try:  # the API's one JSON parser: its limits and refusals (a key twice, a lone surrogate) are the same
        data = JSONParser().parse(io.BytesIO(request.body), "application/json", None)
    except Exception:  # any refusal is answered by the whole path, in its words
        return None
    if not isinstance(data, dict) or not {"host", "report_sha256"} <= data.keys() <= KEYS:
        return None
    host, sha256, agent = data["host"], data["report_sha256"], data.get("agent")
    if not isinstance(host, str) or hostname_error(host) is not None:
        return None
    if not isinstance(sha256, str) or HASH_RE.fullmatch(sha256) is None:
        return None
    if "agent" in data:
        if not isinstance(agent, dict):
            return None
        if health_report.validate_health(None, None, agent, now=timezone.now())[1]:
            return None
    return host, sha256


def _throttle_allows(request, token) -> bool:
    """The node agents' rate (RACKPLANE_THROTTLE_NODE_AGENT), counted per token as the whole path counts it.
    Over the rate: False, and the whole path answers the 429 (a refused request is not counted twice)."""
    throttle = NodeAgentRateThrottle()
    if throttle.rate is None:
        return True
    return throttle.allow_request(SimpleNamespace(auth=token, META=request.META), None)


def _json(data: dict, status: int) -> HttpResponse:
    response = HttpResponse(JSONRenderer().render(data), status=status, content_type="application/json")
    for name, value in HEADERS.items():
        response.headers[name] = value
    return response
