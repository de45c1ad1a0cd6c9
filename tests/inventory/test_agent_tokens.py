"""Agent tokens bound to the hosts they may report for.

A token is issued for one rack (all its trays) or one host, in the portal or by `manage.py
discovery_agent_token`; only a hash of its secret is stored. Discovery reports and telemetry pushes outside
its scope are a 403 that writes nothing; a revoked or unknown token is a 401. The fleet token (an account a
platform admin gave `inventory.report_discovery`) still reports for every host. The portal page issues by
Post/Redirect/Get: the token's "issued" page shows the secret once, and a reload shows it no more and issues
nothing.
"""

import hashlib
import logging
from datetime import timedelta
from io import StringIO

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from core.models import AuditEvent
from inventory import agent_tokens
from inventory.models import AgentToken, ComputeTray, Gpu, Rack
from inventory.views import agent_tokens as views
from tenancy.models import GpuActivity
from tests import factories

pytestmark = pytest.mark.django_db
REPORTS = "/api/v1/discovery/reports/"
TELEMETRY = "/api/v1/telemetry/dcgm/"
PAGE = "/inventory/agent-tokens/"
HOST = "gb-r02-t10"
NEIGHBOUR = "gb-r02-t11"  # same rack
ELSEWHERE = "gb-r01-t05"  # another rack


def issue_by_command(*args) -> str:
    out = StringIO()
    call_command("discovery_agent_token", *args, stdout=out)
    return out.getvalue().strip().rsplit(" ", 1)[1]


def agent(secret: str, scheme: str = "Bearer") -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{scheme} {secret}")
    return client


def report(hostname: str, clique_id: int | None = None, uuids: list[str] | None = None) -> dict:
    tray = ComputeTray.objects.select_related("rack", "partition").get(hostname=hostname)
    clique_id = clique_id if clique_id is not None else tray.partition.clique_id
    uuids = uuids or list(tray.gpus.order_by("index").values_list("uuid", flat=True))
    return {
        "host": hostname,
        "gpus": [
            {
                "uuid": uuid,
                "index": index,
                "fabric": {
                    "state": "completed",
                    "status": "Success",
                    "cluster_uuid": str(tray.rack.cluster_uuid),
                    "clique_id": clique_id,
                    "health": "healthy",
                },
            }
            for index, uuid in enumerate(uuids)
        ],
    }


def dcgm_page(uuids: list[str], value: float = 55.0) -> str:
    lines = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    lines += [f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}",UUID="{uuid}"}} {value}' for i, uuid in enumerate(uuids)]
    return "\n".join(lines) + "\n"


def gpu_uuids(hostname: str) -> list[str]:
    return list(Gpu.objects.filter(tray__hostname=hostname).order_by("index").values_list("uuid", flat=True))


def snapshot() -> tuple:
    return (
        list(Gpu.objects.order_by("pk").values()),
        list(ComputeTray.objects.order_by("pk").values()),
        list(GpuActivity.objects.order_by("pk").values()),
    )


@pytest.fixture
def rack_secret(demo_inventory) -> str:
    return issue_by_command("--rack", "gb-r02")


@pytest.fixture
def host_secret(demo_inventory) -> str:
    return issue_by_command("--host", HOST)


# --- issuing: the command, the hash -----------------------------------------------------------------------


def test_the_command_issues_a_rack_token_and_stores_only_its_hash(demo_inventory):
    out = StringIO()
    call_command("discovery_agent_token", "--rack", "gb-r02", "--description", "r02 agents", stdout=out)
    secret = out.getvalue().strip().rsplit(" ", 1)[1]
    assert "Authorization: Bearer rpa_" in out.getvalue() and "rack gb-r02" in out.getvalue()
    token = AgentToken.objects.get()
    assert token.rack.name == "gb-r02" and token.hostname == "" and token.description == "r02 agents"
    assert token.secret_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret.startswith(token.prefix) and len(token.prefix) == len("rpa_") + 8 and len(secret) > 40
    stored = AgentToken.objects.values_list().get()
    assert not any(secret in str(value) for value in stored)


def test_the_command_issues_a_host_token(demo_inventory):
    issue_by_command("--host", HOST)
    token = AgentToken.objects.get()
    assert token.rack is None and token.hostname == HOST and token.scope == f"host {HOST}"


@pytest.mark.parametrize(
    "args, words",
    [
        (["--rack", "gb-r99"], "gb-r99"),
        (["--host", "gb-r99-t01"], "gb-r99-t01"),
        ([], "one of the arguments --rack --host --fleet is required"),
        (["--rack", "gb-r02", "--host", HOST], "not allowed with"),
    ],
)
def test_the_command_refuses_a_scope_it_cannot_bind(demo_inventory, args, words):
    with pytest.raises(CommandError, match=words):
        issue_by_command(*args)
    assert not AgentToken.objects.exists()


def test_each_token_has_its_own_secret(demo_inventory):
    assert issue_by_command("--rack", "gb-r02") != issue_by_command("--rack", "gb-r02")
    assert AgentToken.objects.count() == 2


def test_the_fleet_token_is_kept_for_aggregators_and_shown_again(demo_inventory):
    first, second = issue_by_command("--fleet"), issue_by_command("--fleet")
    assert first == second and not AgentToken.objects.exists()
    response = agent(first, "Token").post(REPORTS, report(ELSEWHERE), format="json")
    assert response.status_code == 200, response.content


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_an_expired_fleet_token_is_replaced_not_shown_again(demo_inventory, settings):
    first = issue_by_command("--fleet")
    expired = timezone.now() - timedelta(days=settings.RACKPLANE_TOKEN_TTL_DAYS + 1)
    Token.objects.filter(key=first).update(created=expired)
    second = issue_by_command("--fleet")
    assert second != first and not Token.objects.filter(key=first).exists()
    assert agent(second, "Token").post(REPORTS, report(HOST), format="json").status_code == 200


def test_a_token_has_exactly_one_scope(demo_inventory):
    with pytest.raises(ValidationError):
        agent_tokens.issue(rack=Rack.objects.get(name="gb-r02"), hostname=HOST)
    with pytest.raises(ValidationError):
        agent_tokens.issue()
    with pytest.raises(IntegrityError), transaction.atomic():
        AgentToken.objects.create(prefix="rpa_x", secret_hash="x" * 64)  # the database refuses it too


def test_issuing_and_revoking_are_audited_without_the_hash(demo_inventory):
    token, _ = agent_tokens.issue(hostname=HOST, description="node")
    agent_tokens.revoke(token)
    events = AuditEvent.objects.filter(object_type="inventory.agenttoken").order_by("pk")
    assert [e.action for e in events] == ["create", "update"]
    assert "secret_hash" not in events[0].after and events[0].after["hostname"] == HOST
    assert list(events[1].after) == ["revoked_at"]


# --- scope: discovery reports ---------------------------------------------------------------------------


def test_a_rack_token_reports_for_every_tray_of_its_rack(rack_secret):
    for hostname in (HOST, NEIGHBOUR):
        response = agent(rack_secret).post(REPORTS, report(hostname), format="json")
        assert response.status_code == 200, response.content
        assert ComputeTray.objects.get(hostname=hostname).last_report_at is not None


def test_a_rack_token_may_not_report_for_another_racks_tray(rack_secret):
    before = snapshot()
    for dry_run in (False, True):
        response = agent(rack_secret).post(REPORTS, {**report(ELSEWHERE), "dry_run": dry_run}, format="json")
        assert response.status_code == 403, response.content
        assert response.json()["detail"].endswith(
            f"is for rack gb-r02; it may not report for host '{ELSEWHERE}'."
        )
    assert snapshot() == before


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_host_token_reports_for_its_host_only(host_secret):
    assert agent(host_secret).post(REPORTS, report(HOST), format="json").status_code == 200
    before = snapshot()
    response = agent(host_secret).post(REPORTS, report(NEIGHBOUR), format="json")
    assert response.status_code == 403
    assert f"is for host {HOST}; it may not report for host '{NEIGHBOUR}'" in response.json()["detail"]
    assert snapshot() == before


def test_scope_is_judged_on_the_host_as_written(host_secret):
    """The serializer trims the host: padding cannot smuggle a report past the check, nor spoil a good one."""
    padded = {**report(HOST), "host": f"  {HOST} "}
    assert agent(host_secret).post(REPORTS, padded, format="json").status_code == 200
    padded = {**report(NEIGHBOUR), "host": f" {NEIGHBOUR}"}
    assert agent(host_secret).post(REPORTS, padded, format="json").status_code == 403


def test_the_token_scheme_works_too(host_secret):
    assert agent(host_secret, "Token").post(REPORTS, report(HOST), format="json").status_code == 200


def test_an_agent_token_opens_no_other_endpoint(rack_secret):
    """A 403 saying what an agent token is for (core.tokens), in either scheme; nothing is listed."""
    for scheme in ("Bearer", "Token"):
        for path in ("/api/v1/racks/", "/api/v1/jobs/"):
            response = agent(rack_secret, scheme).get(path)
            assert response.status_code == 403, (scheme, path)
            assert response.json()["detail"].startswith(
                "An agent token may only send node reports and telemetry"
            )


# --- a GPU two hosts claim ------------------------------------------------------------------------------


def test_a_gpu_claimed_by_two_hosts_is_flagged_and_never_moves(demo_inventory):
    """HOST with its host token, the neighbour with its rack's token (whose scope covers both trays: a host
    token may not send the neighbour's GPU at all, test_agent_scope_content); the neighbour keeps reporting
    one of HOST's GPUs as its own."""
    ours, theirs = issue_by_command("--host", HOST), issue_by_command("--rack", "gb-r02")
    claimed = gpu_uuids(HOST)[0]
    assert agent(ours).post(REPORTS, report(HOST), format="json").status_code == 200
    for _ in range(3):
        stolen = agent(theirs).post(
            REPORTS, report(NEIGHBOUR, uuids=[claimed, *gpu_uuids(NEIGHBOUR)[1:]]), format="json"
        )
        assert stolen.status_code == 200
        assert any(claimed in p and HOST in p for p in stolen.json()["problems"]), stolen.json()
        assert agent(ours).post(REPORTS, report(HOST), format="json").status_code == 200
        assert Gpu.objects.get(uuid=claimed).tray.hostname == HOST
    assert stolen.json()["moved_gpus"] == []
    assert any(claimed in p for p in ComputeTray.objects.get(hostname=NEIGHBOUR).fabric_problems)


# --- revoked, unknown, last used ------------------------------------------------------------------------


def test_a_revoked_token_is_a_401_and_writes_nothing(host_secret):
    agent_tokens.revoke(AgentToken.objects.get())
    before = snapshot()
    for url, body, kind in ((REPORTS, report(HOST), "json"), (TELEMETRY, dcgm_page(gpu_uuids(HOST)), None)):
        client = agent(host_secret)
        if kind:
            response = client.post(url, body, format=kind)
        else:
            response = client.post(url, data=body, content_type="text/plain")
        assert response.status_code == 401, response.content
        assert "was revoked at" in response.json()["detail"]
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert snapshot() == before


def test_an_unknown_agent_token_is_a_401(demo_inventory):
    response = agent("rpa_" + "x" * 43).post(REPORTS, report(HOST), format="json")
    assert response.status_code == 401 and response.json()["detail"] == "Unknown agent token."


def test_no_credentials_is_a_401(demo_inventory):
    assert APIClient().post(REPORTS, report(HOST), format="json").status_code == 401


def test_last_used_is_recorded_at_most_once_a_minute(host_secret):
    token = AgentToken.objects.get()
    assert token.last_used_at is None
    agent(host_secret).post(REPORTS, report(HOST), format="json")
    token.refresh_from_db()
    first = token.last_used_at
    assert first is not None and timezone.now() - first < timedelta(seconds=10)

    recent = timezone.now() - timedelta(seconds=30)
    AgentToken.objects.filter(pk=token.pk).update(last_used_at=recent)
    agent(host_secret).post(REPORTS, report(HOST), format="json")
    token.refresh_from_db()
    assert token.last_used_at == recent  # no write: used within the minute

    AgentToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now() - timedelta(minutes=2))
    agent(host_secret).post(REPORTS, report(HOST), format="json")
    token.refresh_from_db()
    assert timezone.now() - token.last_used_at < timedelta(seconds=10)


# --- scope: telemetry pushes ----------------------------------------------------------------------------


def push(secret: str, text: str):
    return agent(secret).post(TELEMETRY, data=text, content_type="text/plain")


def test_a_host_token_pushes_telemetry_for_its_gpus(host_secret):
    response = push(host_secret, dcgm_page([*gpu_uuids(HOST), "GPU-00000000-0000-0000-0000-0000000000ff"]))
    assert response.status_code == 200, response.content
    assert response.json()["recorded"] == 4 and len(response.json()["unknown_gpus"]) == 1
    assert GpuActivity.objects.filter(gpu__tray__hostname=HOST).count() == 4


def test_telemetry_for_gpus_outside_the_scope_is_a_403_recording_nothing(host_secret, rack_secret):
    stray = gpu_uuids(NEIGHBOUR)[2]
    response = push(host_secret, dcgm_page([*gpu_uuids(HOST), stray]))
    assert response.status_code == 403
    assert (
        f"is for host {HOST}; these GPUs are not on its trays: {stray} ({NEIGHBOUR})"
        in response.json()["detail"]
    )
    assert not GpuActivity.objects.exists()

    # The rack token covers the neighbour, not another rack's GPU, nor a GPU removed from its tray.
    assert push(rack_secret, dcgm_page([*gpu_uuids(HOST), stray])).status_code == 200
    assert push(rack_secret, dcgm_page([gpu_uuids(ELSEWHERE)[0]])).status_code == 403
    Gpu.objects.filter(uuid=stray).update(tray=None, index=None)
    response = push(rack_secret, dcgm_page([stray]))
    assert response.status_code == 403 and "(on no tray)" in response.json()["detail"]


# --- the portal page ------------------------------------------------------------------------------------


def issued_url(token: AgentToken) -> str:
    return f"{PAGE}{token.pk}/issued/"


def test_an_admin_issues_a_token_on_the_page_and_sees_the_secret_once(
    client, platform_admin, demo_inventory, caplog
):
    caplog.set_level(logging.DEBUG)
    client.force_login(platform_admin)
    assert client.get(PAGE).status_code == 200
    response = client.post(PAGE, {"rack": "", "hostname": HOST, "description": "node agent"})
    token = AgentToken.objects.get()
    assert response.status_code == 303 and response["Location"] == issued_url(token)
    assert token.hostname == HOST and token.created_by == platform_admin

    shown = client.get(issued_url(token))
    assert shown.status_code == 200 and "no-store" in shown.headers["Cache-Control"]
    secret = shown.context["secret"]
    assert secret in shown.content.decode() and token.secret_hash == agent_tokens.hash_secret(secret)
    assert secret not in response.content.decode()
    assert views.NEW_SECRETS_SESSION_KEY not in client.session  # taken out as it was shown
    assert agent(secret).post(REPORTS, report(HOST), format="json").status_code == 200

    reloaded = client.get(issued_url(token))
    assert reloaded.status_code == 200 and "no-store" in reloaded.headers["Cache-Control"]
    assert secret not in reloaded.content.decode() and reloaded.context["secret"] is None
    assert "The token was shown once; make a new one if you lost it" in reloaded.content.decode()

    listing = client.get(PAGE).content.decode()
    assert token.prefix in listing and secret not in listing and f"host <code>{HOST}</code>" in listing
    assert secret not in caplog.text  # never logged


def test_reloading_after_issuing_issues_nothing(client, platform_admin, demo_inventory):
    client.force_login(platform_admin)
    client.post(PAGE, {"rack": "gb-r02", "hostname": "", "description": ""}, follow=True)
    token = AgentToken.objects.get()
    for _ in range(3):
        for url in (issued_url(token), PAGE):
            assert client.get(url).status_code == 200
    assert list(AgentToken.objects.values_list("pk", "revoked_at")) == [(token.pk, None)]
    assert AuditEvent.objects.filter(object_type="inventory.agenttoken").count() == 1


def test_two_tokens_issued_before_either_page_is_seen_each_show_their_own_secret(
    client, platform_admin, demo_inventory
):
    client.force_login(platform_admin)
    client.post(PAGE, {"rack": "gb-r02", "hostname": "", "description": ""})
    client.post(PAGE, {"rack": "", "hostname": HOST, "description": ""})
    first, second = AgentToken.objects.order_by("pk")
    for token in (second, first):
        secret = client.get(issued_url(token)).context["secret"]
        assert agent_tokens.hash_secret(secret) == token.secret_hash
    assert views.NEW_SECRETS_SESSION_KEY not in client.session
    assert client.get(issued_url(first)).context["secret"] is None


def test_a_new_secret_is_shown_only_in_the_session_that_issued_it(client, platform_admin, demo_inventory):
    other_admin = factories.make_user("platform-admin-2", staff=True)
    client.force_login(platform_admin)
    client.post(PAGE, {"rack": "gb-r02", "hostname": "", "description": ""})
    token = AgentToken.objects.get()
    other = Client()
    other.force_login(other_admin)
    assert other.get(issued_url(token)).context["secret"] is None
    assert client.get(issued_url(token)).context["secret"] is not None


def test_the_page_issues_a_rack_token(client, platform_admin, demo_inventory):
    client.force_login(platform_admin)
    response = client.post(PAGE, {"rack": "gb-r03", "hostname": "", "description": ""})
    assert response.status_code == 303 and AgentToken.objects.get().rack.name == "gb-r03"


@pytest.mark.parametrize(
    "data, words",
    [
        ({"rack": "gb-r02", "hostname": HOST}, "Choose a rack or type a host"),
        ({"rack": "", "hostname": ""}, "Choose a rack or type a host"),
        ({"rack": "", "hostname": "gb-r99-t01"}, "is not a compute tray"),
    ],
)
def test_the_page_refuses_a_token_without_one_scope(client, platform_admin, demo_inventory, data, words):
    client.force_login(platform_admin)
    response = client.post(PAGE, {**data, "description": ""})
    assert response.status_code == 400 and words in response.content.decode()
    assert not AgentToken.objects.exists()


def test_an_admin_revokes_a_token_after_confirming(client, platform_admin, host_secret):
    token = AgentToken.objects.get()
    client.force_login(platform_admin)
    url = f"{PAGE}{token.pk}/revoke/"
    confirm = client.get(url)
    assert confirm.status_code == 200 and b"Agents using it are refused" in confirm.content
    token.refresh_from_db()
    assert token.revoked_at is None  # asking is not revoking
    response = client.post(url, follow=True)
    assert response.redirect_chain[-1][0] == PAGE
    token.refresh_from_db()
    assert token.revoked_at is not None and "revoked" in response.content.decode()
    assert agent(host_secret).post(REPORTS, report(HOST), format="json").status_code == 401


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("persona", ["lead_a", "member_a", "outsider"])
def test_leads_and_members_may_not_see_issue_or_revoke_tokens(client_as, persona, host_secret):
    token = AgentToken.objects.get()
    client = client_as(persona)
    assert client.get(PAGE).status_code == 403
    assert client.post(PAGE, {"rack": "gb-r02", "hostname": "", "description": ""}).status_code == 403
    assert client.get(issued_url(token)).status_code == 403
    assert client.get(f"{PAGE}{token.pk}/revoke/").status_code == 403
    assert client.post(f"{PAGE}{token.pk}/revoke/").status_code == 403
    assert AgentToken.objects.count() == 1 and AgentToken.objects.get().revoked_at is None
