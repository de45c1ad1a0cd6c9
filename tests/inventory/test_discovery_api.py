"""POST /api/v1/discovery/reports/: node agents report fabric state with a token."""

import uuid

import pytest

from inventory.models import ComputeTray
from tests.factories import node_report, token_client

pytestmark = pytest.mark.django_db
URL = "/api/v1/discovery/reports/"


@pytest.fixture
def agent(node_agent, demo_inventory):
    """The node agent persona: `manage.py discovery_agent_token --fleet` made it and printed its token."""
    assert node_agent.username == "node-agent"
    return token_client(node_agent)


def body(tray: ComputeTray, clique_id: int, **extra) -> dict:
    return node_report(tray, clique_id, **extra)


def tray(hostname="gb-r02-t10") -> ComputeTray:
    return ComputeTray.objects.select_related("rack").get(hostname=hostname)


def test_a_structured_report_is_reconciled(agent):
    response = agent.post(URL, body(tray(), clique_id=2), format="json")
    assert response.status_code == 200, response.content
    data = response.json()
    assert data["format"] == "json" and data["applied"] is True
    assert (
        data["tray_clique"] == f"{tray().rack.cluster_uuid}.2"
        and data["problems"] == []
        and data["drift"] == []
    )
    assert tray().last_report_at is not None


def test_drift_in_a_report_is_flagged_on_the_tray(agent):
    response = agent.post(URL, body(tray(), clique_id=1), format="json")
    assert response.json()["drift"] == [
        "drift: the node reports clique 1, the inventory intends gb-r02 p2 (clique 2)"
    ]
    assert tray().fabric_problems == response.json()["drift"]


def test_dry_run_writes_nothing(agent):
    response = agent.post(URL, body(tray(), clique_id=1, dry_run=True), format="json")
    assert response.status_code == 200 and response.json()["applied"] is False
    assert tray().fabric_problems == []


def test_raw_nvidia_smi_output_is_accepted(agent):
    t = tray()
    csv = "".join(f"{gpu.uuid}, {t.rack.cluster_uuid}, 2\n" for gpu in t.gpus.order_by("index"))
    response = agent.post(URL, {"host": t.hostname, "nvidia_smi": csv}, format="json")
    assert response.status_code == 200 and response.json()["format"] == "csv"


def test_failed_registration_is_reported_without_a_clique(agent):
    payload = body(tray(), clique_id=2)
    payload["gpus"][1]["fabric"] = {
        "state": "completed",
        "status": "Insufficient Resources",
        "cluster_uuid": "00000000-0000-0000-0000-000000000000",
        "clique_id": 0,
        "health": "healthy",
    }
    data = agent.post(URL, payload, format="json").json()
    assert data["gpus"][1]["cluster_uuid"] is None and data["gpus"][1]["clique_id"] is None
    assert data["tray_clique"] is None
    assert any("Insufficient Resources" in problem for problem in data["problems"])


@pytest.mark.slow(reason="6 cases, each a full request through the stack")
@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda b: b.pop("gpus"), "non_field_errors"),
        (lambda b: b.update(nvidia_smi="x, y"), "non_field_errors"),
        (lambda b: b["gpus"][0].update(index=7), "gpus"),
        (lambda b: b["gpus"][0]["fabric"].update(state="done"), "gpus"),
        (lambda b: b["gpus"][1].update(index=0), "gpus"),
        (lambda b: b.update(host="gb-r77-t01"), "host"),
    ],
)
def test_bad_reports_get_a_400_naming_the_field(agent, mutate, field):
    payload = body(tray(), clique_id=2)
    mutate(payload)
    response = agent.post(URL, payload, format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()


def test_unparseable_raw_output_names_the_field(agent):
    response = agent.post(URL, {"host": "gb-r02-t10", "nvidia_smi": "<nvidia_smi_log><gpu>"}, format="json")
    assert response.status_code == 400 and "nvidia_smi" in response.json()


def test_a_token_without_the_permission_is_forbidden(outsider, demo_inventory):
    response = token_client(outsider).post(URL, body(tray(), clique_id=2), format="json")
    assert response.status_code == 403 and "report_discovery" in response.json()["detail"]


def test_anonymous_reports_are_refused(api_client, demo_inventory):
    response = api_client.post(URL, {"host": "gb-r01-t01", "gpus": []}, format="json")
    assert response.status_code in (401, 403)
    assert ComputeTray.objects.get(hostname="gb-r01-t01").last_report is None


def test_unknown_gpu_uuid_format_is_rejected(agent):
    payload = body(tray(), clique_id=2)
    payload["gpus"][0]["uuid"] = str(uuid.uuid4())
    assert agent.post(URL, payload, format="json").status_code == 400
