"""POST /api/v1/discovery/reports/: each field of a node report takes only the JSON type the schema gives it.

A walkthrough found `report_sha256` sent as a JSON integer read as text and `gpus[].index: "0"` read as 0.
Every typed field is tried with the wrong JSON type (a number for text, text for a number or a boolean, a
fraction where an integer is meant): each is a 400 naming the field, and nothing is written. The real formats
(structured, raw nvidia-smi output, the hash-only heartbeat) still work, and a dry run says nothing of health
(the rules did not run) instead of `"health": null`, as the OpenAPI document says.
"""

import pytest
from drf_spectacular.generators import SchemaGenerator

from core.models import AuditEvent
from inventory.models import ComputeTray, Gpu, HealthEvent, Rack
from tests.factories import node_report, token_client

pytestmark = pytest.mark.django_db
URL = "/api/v1/discovery/reports/"
HOST = "gb-r02-t10"


@pytest.fixture
def agent(node_agent, demo_inventory):
    return token_client(node_agent)


def tray() -> ComputeTray:
    return ComputeTray.objects.select_related("rack").get(hostname=HOST)


def report(**extra) -> dict:
    return node_report(
        tray(),
        gpu_fields=lambda gpu: {"pci_bus_id": f"00000008:0{gpu.index + 1}:00.0", "recovery_action": "NONE"},
        fabric_fields={"flags": []},
        **extra,
    )


def snapshot() -> tuple:
    return (
        list(Gpu.objects.order_by("pk").values()),
        list(ComputeTray.objects.order_by("pk").values()),
        list(Rack.objects.order_by("pk").values()),
        HealthEvent.objects.count(),
        AuditEvent.objects.count(),
    )


def at(body: dict, path: tuple):
    """The dict holding the last key of `path`, and that key."""
    *parents, last = path
    node = body
    for key in parents:
        node = node[key]
    return node, last


def error_at(errors, path: tuple):
    """DRF's answer for a nested field: {"gpus": {"0": {"fabric": {"clique_id": [...]}}}}."""
    node = errors
    for key in path:
        assert isinstance(node, dict), (path, errors)
        node = node[str(key)]
    return node


WRONG_TYPES = [
    # (path to the field, a wrong JSON value)
    (("gpus", 0, "index"), "0"),
    (("gpus", 0, "index"), 0.0),
    (("gpus", 0, "index"), True),
    (("gpus", 0, "memory_mib"), "189471"),
    (("gpus", 0, "memory_mib"), 189471.5),
    (("gpus", 0, "memory_mib"), 189471.0),
    (("gpus", 0, "uuid"), 12345),
    (("gpus", 0, "serial"), 1654123456789),
    (("gpus", 0, "product"), False),
    (("gpus", 0, "pci_bus_id"), 8),
    (("gpus", 0, "recovery_action"), 0),
    (("gpus", 0, "fabric", "clique_id"), "2"),
    (("gpus", 0, "fabric", "clique_id"), 2.0),
    (("gpus", 0, "fabric", "clique_id"), False),
    (("gpus", 0, "fabric", "cluster_uuid"), 292066443049530398837524004806244331128),
    (("gpus", 0, "fabric", "status"), 0),
    (("gpus", 0, "fabric", "state"), 3),
    (("gpus", 0, "fabric", "health"), 1),
    (("gpus", 0, "fabric", "flags", 0), 1),
    (("host",), 10),
    (("dry_run",), "true"),
    (("dry_run",), 1),
]


@pytest.mark.slow(reason="22 cases, each a full request through the stack")
@pytest.mark.parametrize(("path", "value"), WRONG_TYPES, ids=lambda v: repr(v))
def test_a_field_of_the_wrong_json_type_is_a_400_naming_it(agent, path, value):
    body = report()
    if path[-2:] == ("flags", 0):
        body["gpus"][0]["fabric"]["flags"] = [None]  # one entry, replaced below
    node, key = at(body, path)
    node[key] = value
    before = snapshot()
    response = agent.post(URL, body, format="json")
    assert response.status_code == 400, response.content
    assert error_at(response.json(), path), response.json()  # the answer names that very field
    assert snapshot() == before


def test_an_integer_report_hash_is_a_400_naming_it(agent):
    before = snapshot()
    response = agent.post(URL, {"host": HOST, "report_sha256": 10**63}, format="json")
    assert response.status_code == 400, response.content
    assert "string" in str(response.json()["report_sha256"]).lower()
    assert snapshot() == before


def test_a_string_index_is_refused_with_words_saying_what_to_send(agent):
    body = report()
    body["gpus"][0]["index"] = "0"
    response = agent.post(URL, body, format="json")
    assert response.status_code == 400
    assert error_at(response.json(), ("gpus", 0, "index")) == ['Must be a JSON integer (4, not "4" nor 4.0).']


def test_the_right_types_are_still_accepted_with_nulls_where_allowed(agent):
    body = report()
    body["gpus"][1].update(memory_mib=None, pci_bus_id=None, recovery_action=None, serial="", product="")
    body["gpus"][1]["fabric"].update(cluster_uuid=None, clique_id=None, status=None)
    response = agent.post(URL, body, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["applied"] is True


def test_raw_output_and_the_hash_heartbeat_still_work(agent):
    t = tray()
    csv = "".join(f"{gpu.uuid}, {t.rack.cluster_uuid}, 2\n" for gpu in t.gpus.order_by("index"))
    first = agent.post(URL, {"host": HOST, "nvidia_smi": csv, "agent": {"version": "1", "interval_s": 60}})
    assert first.status_code == 200, first.content
    sha256 = first.json()["report_sha256"]
    beat = agent.post(URL, {"host": HOST, "report_sha256": sha256}, format="json")
    assert beat.status_code == 200 and beat.json()["unchanged"] is True, beat.content


def test_a_dry_run_leaves_health_out_instead_of_null(agent):
    before = snapshot()
    response = agent.post(URL, report(dry_run=True), format="json")
    assert response.status_code == 200 and response.json()["applied"] is False
    assert "health" not in response.json()
    assert snapshot() == before
    full = agent.post(URL, report(), format="json").json()
    assert full["health"]["new_events"] == 0 and full["health"]["healthy"] is True


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_openapi_document_says_health_is_absent_for_a_dry_run(db):
    schemas = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    health = schemas["NodeReportAnswer"]["properties"]["health"]
    assert "health" not in schemas["NodeReportAnswer"].get("required", [])
    assert "absent for a dry run" in str(health) and "nullable" not in str(health)
    request = schemas["NodeReport"]["properties"]
    assert request["report_sha256"]["type"] == "string"
    gpu = schemas[request["gpus"]["items"]["$ref"].rsplit("/", 1)[-1]]["properties"]
    assert gpu["index"]["type"] == "integer"
