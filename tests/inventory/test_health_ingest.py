"""Health input through the discovery report: XIDs, active checks and the agent, validated once, recorded as
events (mapped to GPUs by PCI bus id), repeats folded into one event within the window."""

import xml.etree.ElementTree as ET
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from inventory.choices import HealthKind, HealthSource, TrayState
from inventory.discovery import faults, health_report
from inventory.discovery.nvidia_smi import FabricFlag, RecoveryAction, parse_xml
from inventory.models import ComputeTray, HealthAction, HealthCheckResult, HealthEvent, HealthSettings
from tests.factories import token_client
from tests.inventory.health_reports import BUS_IDS, URL, nvidia_smi_xml, report, xid, xid_line

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent(node_agent, demo_inventory):
    return token_client(node_agent)


def tray(hostname="gb-r02-t10") -> ComputeTray:
    return ComputeTray.objects.select_related("rack", "partition").get(hostname=hostname)


def snapshot():
    return (
        HealthEvent.objects.count(),
        HealthAction.objects.count(),
        HealthCheckResult.objects.count(),
        list(ComputeTray.objects.order_by("pk").values_list("state", "last_report_at", "agent_version")),
    )


# --- the parser reads the recovery action and the fabric health rows of nvidia-smi -q -x --------------------


def test_the_xml_parser_reads_the_recovery_action_fabric_flags_and_bus_ids(demo_inventory):
    t = tray()
    text = nvidia_smi_xml(
        t,
        recovery={1: "GPU Reset Required", 2: "Node Reboot Required"},
        health={
            3: {"route_unhealthy": "True", "bandwidth": "Degraded", "incorrect_configuration": "no_partition"}
        },
    )
    gpus = parse_xml(text)
    assert [g.pci_bus_id for g in gpus] == BUS_IDS
    assert [g.recovery_action for g in gpus] == [
        RecoveryAction.NONE,
        RecoveryAction.GPU_RESET,
        RecoveryAction.NODE_REBOOT,
        RecoveryAction.NONE,
    ]
    assert gpus[3].fabric_flags == (
        FabricFlag.DEGRADED_BANDWIDTH,
        FabricFlag.ROUTE_UNHEALTHY,
        FabricFlag.INCORRECT_CONFIGURATION,
    )
    assert [g.fabric_flags for g in gpus[:3]] == [(), (), ()]


def test_the_kernel_line_names_the_gpu_without_a_function_number():
    line = faults.parse_nvrm("[ 12.3] NVRM: Xid (PCI:0018:01:00): 149.2, pid=7, name=x, NETIR_LINK_EVT")
    assert line == faults.NvrmLine(pci=(0x18, 1, 0), xid=149, subcode=2)
    assert faults.pci_key(BUS_IDS[2]) == line.pci
    assert faults.fabric_flags_from_mask(0b01_00_10_01) == (
        FabricFlag.DEGRADED_BANDWIDTH,
        FabricFlag.ACCESS_TIMEOUT_RECOVERY,
    )


# --- ingest -------------------------------------------------------------------------------------------------


def test_an_xid_becomes_an_event_on_the_gpu_its_pci_id_names(agent):
    t = tray()
    gpu = t.gpus.get(index=2)
    at = timezone.now() - timedelta(seconds=30)
    response = agent.post(
        URL,
        report(t, xids=[xid(13, gpu_index=2, at=at)], agent={"version": "1.0.0", "interval_s": 60}),
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["health"]["new_events"] == 1
    event = HealthEvent.objects.get()
    assert (event.tray, event.gpu, event.gpu_uuid) == (t, gpu, gpu.uuid)
    assert (event.kind, event.xid, event.mnemonic, event.source) == (
        HealthKind.XID,
        13,
        "ROBUST_CHANNEL_GR_EXCEPTION",
        HealthSource.AGENT,
    )
    assert event.message == xid_line(13, 2)
    assert event.first_seen == event.last_seen == at
    assert event.warns and not event.drains  # application XID: warn only
    t.refresh_from_db()
    assert (t.agent_version, t.agent_interval_s, t.state) == ("1.0.0", 60, TrayState.UP)


def test_an_explicit_pci_bus_id_wins_and_an_unknown_one_keeps_the_event_on_the_tray(agent):
    t = tray()
    entries = [
        xid(31, gpu_index=0, pci_bus_id=BUS_IDS[3]),
        xid(43, text="NVRM: something without a PCI id", at=timezone.now() - timedelta(seconds=1)),
        xid(45, pci_bus_id="0000abcd:07:00.0"),
    ]
    response = agent.post(URL, report(t, xids=entries), format="json")
    assert response.status_code == 200, response.content
    assert response.json()["health"]["unmapped_xids"] == 2
    events = {e.xid: e for e in HealthEvent.objects.all()}
    assert events[31].gpu == t.gpus.get(index=3)
    assert events[43].gpu is None and events[43].gpu_uuid == ""
    assert events[45].gpu is None


def test_repeats_within_the_window_count_up_instead_of_adding_rows(agent):
    t = tray()
    start = timezone.now() - timedelta(minutes=50)
    agent.post(URL, report(t, xids=[xid(13, at=start)]), format="json")
    agent.post(
        URL,
        report(
            t, xids=[xid(13, at=start + timedelta(minutes=20)), xid(13, at=start + timedelta(minutes=40))]
        ),
        format="json",
    )
    event = HealthEvent.objects.get()
    assert event.count == 3
    assert (event.first_seen, event.last_seen) == (start, start + timedelta(minutes=40))
    assert HealthAction.objects.filter(kind="warn").count() == 1  # warned once, not per repeat

    # Another GPU, or the same GPU after the window (10 minutes later, with a 1-minute window): a new event.
    agent.post(URL, report(t, xids=[xid(13, gpu_index=1, at=start + timedelta(minutes=45))]), format="json")
    HealthSettings.objects.update_or_create(pk=1, defaults={"dedup_window_s": 60})
    agent.post(URL, report(t, xids=[xid(13, at=timezone.now())]), format="json")
    assert HealthEvent.objects.count() == 3
    assert sorted(HealthEvent.objects.values_list("count", flat=True)) == [1, 1, 3]


def test_a_condition_restated_every_report_refreshes_its_event_without_counting(agent):
    t = tray()
    text = nvidia_smi_xml(t, health={0: {"route_recovery_in_progress": "True"}})
    for _ in range(3):
        assert agent.post(URL, {"host": t.hostname, "nvidia_smi": text}, format="json").status_code == 200
    event = HealthEvent.objects.get()
    assert (event.kind, event.code, event.count) == (HealthKind.FABRIC, "ROUTE_RECOVERY", 1)
    assert event.last_seen > event.first_seen


def test_a_gpu_still_registering_with_the_fabric_is_an_event_no_rule_acts_on(agent, client_as):
    """A report whose GPU 1 is still registering with the NVLink fabric (State: In Progress): the tray's
    fabric problem says so, and the report records the GPU's fabric event (restated every report: one event,
    refreshed), which no default rule acts on and the health centre explains in words."""
    t = tray()
    root = ET.fromstring(nvidia_smi_xml(t))
    fabric = root.findall("gpu")[1].find("fabric")
    fabric.find("state").text = "In Progress"
    fabric.find("status").text = "N/A"
    fabric.find("cliqueId").text = "N/A"
    fabric.find("clusterUuid").text = "N/A"
    text = ET.tostring(root, encoding="unicode")
    for _ in range(2):
        assert agent.post(URL, {"host": t.hostname, "nvidia_smi": text}, format="json").status_code == 200
    gpu = t.gpus.get(index=1)
    assert any("fabric registration is still in progress" in p for p in tray().fabric_problems)
    event = HealthEvent.objects.get()
    assert (event.kind, event.code, event.gpu, event.count) == (
        HealthKind.FABRIC,
        "REGISTRATION_IN_PROGRESS",
        gpu,
        1,
    )
    assert not (event.drains or event.degrades or event.warns) and not HealthAction.objects.exists()
    assert tray().state == TrayState.UP
    html = client_as("platform_admin").get(reverse("inventory:health-events")).content.decode()
    assert "no action: the GPU is still registering with the NVLink fabric" in html
    # Registered: no new event (the one recorded stays as history).
    agent.post(URL, report(t), format="json")
    assert HealthEvent.objects.count() == 1 and not tray().fabric_problems


def test_checks_are_stored_per_tray_and_a_failure_is_an_event(agent):
    t = tray()
    started = timezone.now() - timedelta(minutes=3)
    checks = [
        {
            "name": "dcgmi diag -r 2",
            "exit_status": 0,
            "output": "Pass\n",
            "started": started.isoformat(),
            "seconds": 121.5,
        },
        {
            "name": "nvbandwidth",
            "exit_status": 1,
            "output": "FAIL: 612 GB/s < 700\n",
            "started": started.isoformat(),
            "seconds": 12,
        },
    ]
    response = agent.post(URL, report(t, checks=checks), format="json")
    assert response.status_code == 200, response.content
    stored = {c.name: c for c in HealthCheckResult.objects.filter(tray=t)}
    assert stored["dcgmi diag -r 2"].passed and stored["dcgmi diag -r 2"].seconds == 121.5
    assert not stored["nvbandwidth"].passed
    event = HealthEvent.objects.get()
    assert (event.kind, event.code, event.value) == (HealthKind.CHECK_FAILED, "nvbandwidth", 1.0)
    # The same run posted again (an agent retrying) is one result, not two.
    agent.post(URL, report(t, checks=checks[:1]), format="json")
    assert HealthCheckResult.objects.filter(tray=t, name="dcgmi diag -r 2").count() == 1


# --- one validation: bad input is a 400 naming it, and nothing is written -----------------------------------

NOW = "2025-10-14T11:20:09+00:00"
GOOD_XID = {
    "time": NOW,
    "xid": 79,
    "text": "NVRM: Xid (PCI:0008:01:00): 79, pid=1, name=p, GPU has fallen off the bus.",
}
GOOD_CHECK = {"name": "dcgmi diag -r 2", "exit_status": 0, "output": "", "started": NOW, "seconds": 1.0}


@pytest.mark.slow(reason="25 cases, each a full request through the stack")
@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ({"xids": {"xid": 79}}, "xids", "must be a list"),
        ({"xids": [GOOD_XID] * 2}, "xids", "repeats xids[0]"),
        (
            {
                "xids": [
                    {**GOOD_XID, "time": f"2025-10-14T11:{n // 60:02d}:{n % 60:02d}+00:00"}
                    for n in range(257)
                ]
            },
            "xids",
            "has 257 entries; at most 256",
        ),
        ({"xids": [{**GOOD_XID, "xid": 1000, "text": "x"}]}, "xids", "out of range (1-999)"),
        ({"xids": [{**GOOD_XID, "xid": 0, "text": "x"}]}, "xids", "out of range (1-999)"),
        ({"xids": [{**GOOD_XID, "xid": "79"}]}, "xids", "must be a whole number, not a string"),
        ({"xids": [{**GOOD_XID, "xid": True}]}, "xids", "not a boolean"),
        ({"xids": [{**GOOD_XID, "xid": 79.0}]}, "xids", "must be a whole number"),
        ({"xids": [{**GOOD_XID, "text": "x" * 513}]}, "xids", "at most 512"),
        ({"xids": [{**GOOD_XID, "gpu": 0}]}, "xids", "unknown keys gpu"),
        ({"xids": [{"xid": 79, "text": "x"}]}, "xids", "lacks time"),
        ({"xids": [{**GOOD_XID, "time": "2025-10-14T11:20:09"}]}, "xids", "has no time zone"),
        ({"xids": [{**GOOD_XID, "time": "yesterday"}]}, "xids", "not an ISO 8601 time"),
        ({"xids": [{**GOOD_XID, "pci_bus_id": "slot 3"}]}, "xids", "not a PCI bus id"),
        ({"xids": [{**GOOD_XID, "xid": 48}]}, "xids", "its kernel line says XID 79"),
        ({"xids": [{**GOOD_XID, "pid": -1}]}, "xids", "pid -1 is out of range"),
        ({"checks": [{**GOOD_CHECK, "output": "é" * 40000}]}, "checks", "at most 65536 are taken"),
        ({"checks": [{**GOOD_CHECK, "exit_status": "0"}]}, "checks", "exit_status must be a whole number"),
        ({"checks": [{**GOOD_CHECK, "seconds": -1}]}, "checks", "out of range"),
        ({"checks": [{**GOOD_CHECK, "name": " "}]}, "checks", "name is empty"),
        ({"checks": [GOOD_CHECK, GOOD_CHECK]}, "checks", "repeats checks[0]"),
        ({"checks": [{**GOOD_CHECK, "verdict": "pass"}]}, "checks", "unknown keys verdict"),
        ({"agent": {"version": "1", "interval_s": 0}}, "agent", "out of range"),
        ({"agent": {"version": "1", "interval_s": 60, "os": "linux"}}, "agent", "unknown keys os"),
        ({"agent": ["1", 60]}, "agent", "must be an object"),
    ],
)
def test_bad_health_input_is_a_400_that_writes_nothing(agent, extra, field, words):
    t = tray()
    before = snapshot()
    response = agent.post(URL, report(t, **extra), format="json")
    assert response.status_code == 400, response.content
    assert words in " ".join(response.json()[field]), response.json()
    assert snapshot() == before


def test_an_unknown_top_level_key_is_refused(agent):
    before = snapshot()
    response = agent.post(URL, report(tray(), xid=[GOOD_XID]), format="json")
    assert response.status_code == 400
    assert response.json()["xid"] == ['Unknown field: did you mean "xids"?']
    assert snapshot() == before


def test_a_bad_entry_refuses_the_whole_report_with_its_good_ones(agent):
    t = tray()
    before = snapshot()
    response = agent.post(URL, report(t, xids=[xid(79), {**GOOD_XID, "xid": 1000}]), format="json")
    assert response.status_code == 400 and "xids[1]" in response.json()["xids"][0]
    assert snapshot() == before
    assert tray().state == TrayState.UP


def test_a_dry_run_checks_health_input_and_writes_nothing(agent):
    t = tray()
    before = snapshot()
    response = agent.post(URL, report(t, xids=[xid(79)], dry_run=True), format="json")
    assert response.status_code == 200 and "health" not in response.json()  # nothing recorded: no outcome
    assert snapshot() == before


def test_the_validator_is_the_same_for_every_path():
    """The API, a command or a test calling the service pass the same check
    (health_report.validate_health)."""
    health, errors = health_report.validate_health(
        [GOOD_XID], [GOOD_CHECK], {"version": "2", "interval_s": 30}
    )
    assert errors == {} and health.xids[0].pci == (8, 1, 0) and health.checks[0].passed
    health, errors = health_report.validate_health("not a list", [{}], {"version": 2})
    assert set(errors) == {"xids", "checks", "agent"} and not health
