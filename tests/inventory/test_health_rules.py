"""The health rules: defaults from NVIDIA's XID catalog, drain with a reason that says who and why, degrade
the NVLink partition, the circuit breaker, dry run, repeat offenders, validated return to service."""

from datetime import timedelta

import pytest
from django.utils import timezone

from inventory import agent_tokens
from inventory.choices import ActionKind, HealthKind, RuleAction, TrayState
from inventory.discovery import faults, rule_defaults
from inventory.health.actions import HealthError, drain_tray, tray_health_changed
from inventory.health.returns import return_eligibility, return_to_service
from inventory.health.rules import breaker_tripped, reset_breaker
from inventory.health.timeline import timeline
from inventory.models import (
    ComputeTray,
    HealthAction,
    HealthEvent,
    HealthRule,
    HealthSettings,
    NVLinkPartition,
)
from scheduling.models import SchedulingRequest
from tenancy.services import schedulable_gpus_q
from tests.factories import token_client
from tests.inventory.health_reports import URL, nvidia_smi_xml, report, xid

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent(node_agent, demo_inventory):
    return token_client(node_agent)


def tray(hostname="gb-r02-t10") -> ComputeTray:
    return ComputeTray.objects.select_related("rack", "partition").get(hostname=hostname)


def settings(**fields) -> HealthSettings:
    HealthSettings.objects.update_or_create(pk=1, defaults=fields)
    return HealthSettings.load()


def post(agent, t, **extra):
    response = agent.post(URL, report(t, **extra), format="json")
    assert response.status_code == 200, response.content
    return response.json()["health"]


def kinds(t) -> list[str]:
    return list(
        HealthAction.objects.filter(tray=t).order_by("created_at", "pk").values_list("kind", flat=True)
    )


# --- defaults -----------------------------------------------------------------------------------------------


def test_the_seeded_rules_are_nvidias_catalog_defaults(db):
    rules = list(HealthRule.objects.all())
    assert {r.name for r in rules} == {r.name for r in rule_defaults.default_rules()}

    def action_for(number):
        matched = {r.action for r in rules if r.matches(HealthKind.XID, number, str(number), None)}
        return matched

    for number in (79, 48, 95, 119, 120, 140, 144, 145, 146, 147, 148, 149, 150, 155):
        assert RuleAction.DRAIN in action_for(number), number
    for number in (13, 31, 43, 45, 68):
        assert action_for(number) == {RuleAction.WARN}, number
    for number in (144, 150, 155):
        assert RuleAction.DEGRADE in action_for(number), number
    assert action_for(79) == {RuleAction.DRAIN}  # a GPU off the bus is the tray's fault, not the fabric's
    assert action_for(74) == set()  # NVLINK_ERROR never shows on GB200: no rule
    for action in ("GPU_RESET", "NODE_REBOOT", "DRAIN_P2P", "DRAIN_AND_RESET"):
        assert {r.action for r in rules if r.matches(HealthKind.RECOVERY_ACTION, None, action, None)} == {
            RuleAction.DRAIN
        }
    assert not [r for r in rules if r.matches(HealthKind.RECOVERY_ACTION, None, "NONE", None)]
    drain79 = next(r for r in rules if r.matches(HealthKind.XID, 79, "79", None))
    assert "GPU_HAS_FALLEN_OFF_THE_BUS" in drain79.note and "RESTART_BM" in drain79.note
    assert faults.XID_CATALOG[79].mnemonic == "GPU_HAS_FALLEN_OFF_THE_BUS"
    assert faults.XID_CATALOG[74].gb200 is False


def test_the_default_settings_are_safe(db):
    defaults = HealthSettings.load()
    assert defaults.dry_run is False and defaults.breaker_tripped_at is None
    assert 1 <= defaults.breaker_percent <= 20 and defaults.repeat_faults >= 2


# --- drain --------------------------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_xid_79_drains_the_tray_with_a_reason_saying_who_and_why(agent, django_capture_on_commit_callbacks):
    t = tray()
    gpu = t.gpus.get(index=1)
    SchedulingRequest.objects.all().delete()
    heard = []
    tray_health_changed.connect(lambda **kw: heard.append(kw), weak=False, dispatch_uid="test-heard")
    try:
        with django_capture_on_commit_callbacks() as callbacks:
            outcome = post(agent, t, xids=[xid(79, gpu_index=1)])
        # The scheduler stops placing on it at once: none of its GPUs is schedulable, and a pass was asked
        # for (the request row is written in the transaction; the pass, on commit, consumes it).
        assert SchedulingRequest.objects.filter(reason__contains=f"compute tray {t.hostname}: state").exists()
        assert heard == []  # nothing is told before the commit
        for callback in callbacks:
            callback()
    finally:
        tray_health_changed.disconnect(dispatch_uid="test-heard")
    t = tray()
    assert t.state == TrayState.DRAIN
    assert t.state_reason.startswith(f"rackplane: XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS) on {gpu.uuid} at ")
    assert t.state_reason.endswith(" UTC")
    action = HealthAction.objects.get(tray=t)
    assert (action.kind, action.rule_name, action.event.xid) == (ActionKind.DRAIN, "XID 79 drain", 79)
    assert outcome["actions"] == [f"Drained: {action.reason}"] and outcome["healthy"] is False
    assert not t.gpus.filter(schedulable_gpus_q()).exists()
    # Backends (Slurm, Kubernetes, notifications) hear of it once it committed.
    assert heard == [
        {
            "signal": tray_health_changed,
            "sender": ComputeTray,
            "tray_id": t.pk,
            "state": TrayState.DRAIN,
            "reason": t.state_reason,
            "source": "rules",
            "action": ActionKind.DRAIN,
            "actor": None,
        }
    ]


def test_a_recovery_action_drains_the_tray(agent):
    t = tray()
    text = nvidia_smi_xml(t, recovery={3: "Node Reboot Required"})
    agent.post(URL, {"host": t.hostname, "nvidia_smi": text}, format="json")
    t = tray()
    assert t.state == TrayState.DRAIN
    assert t.state_reason.startswith(f"rackplane: recovery action NODE_REBOOT on {t.gpus.get(index=3).uuid}")


def test_a_warning_xid_does_not_drain(agent):
    t = tray()
    outcome = post(agent, t, xids=[xid(13), xid(31, gpu_index=1)])
    assert tray().state == TrayState.UP
    assert kinds(t) == [ActionKind.WARN, ActionKind.WARN]
    assert outcome["healthy"] is True  # application faults leave the tray healthy


def test_another_owners_drain_is_left_alone(agent):
    t = tray()
    ComputeTray.objects.filter(pk=t.pk).update(state=TrayState.DRAIN, state_reason="admin: replacing a fan")
    post(agent, t, xids=[xid(79)])
    t = tray()
    assert (t.state, t.state_reason) == (TrayState.DRAIN, "admin: replacing a fan")
    assert kinds(t) == [ActionKind.NOT_OURS]
    assert "admin: replacing a fan" in HealthAction.objects.get(tray=t).reason


def test_a_disabled_rule_does_not_act(agent):
    HealthRule.objects.filter(name="XID 79 drain").update(enabled=False)
    t = tray()
    post(agent, t, xids=[xid(79)])
    assert tray().state == TrayState.UP and kinds(t) == []
    assert HealthEvent.objects.get().drains is False


# --- degrade the NVLink partition ---------------------------------------------------------------------------


def test_an_nvlink_fault_degrades_the_whole_partition_and_recovers(agent, outsider):
    t = tray()
    settings(return_after_s=600)
    outcome = post(agent, t, xids=[xid(149, gpu_index=2, text="NETIR_LINK_EVT link down")])
    t = tray()
    partition = NVLinkPartition.objects.get(pk=t.partition_id)
    assert partition.degraded_reason.startswith("rackplane: XID 149 (NVLINK_NETIR_ERROR) on gb-r02-t10")
    assert t.state == TrayState.DRAIN  # 149 also drains the tray itself
    degrade = HealthAction.objects.get(kind=ActionKind.DEGRADE)
    assert degrade.partition == partition
    for hostname in partition.trays.values_list("hostname", flat=True):
        assert hostname in degrade.reason
    assert any(a.startswith("Partition degraded:") for a in outcome["actions"])

    # Another tray of the partition sees the degrade in its timeline.
    neighbour = partition.trays.exclude(pk=t.pk).first()
    entries, _ = timeline(outsider, tray=neighbour)
    assert [entry.item for entry in entries] == [degrade]

    # Quiet for return_after_s on every tray of the partition: no longer degraded.
    quiet = timezone.now() - timedelta(seconds=700)
    HealthEvent.objects.update(first_seen=quiet, last_seen=quiet)
    NVLinkPartition.objects.filter(pk=partition.pk).update(
        degraded_since=timezone.now() - timedelta(seconds=700)
    )
    post(agent, neighbour)
    partition.refresh_from_db()
    assert partition.degraded_reason == "" and partition.degraded_since is None
    assert HealthAction.objects.filter(kind=ActionKind.RECOVER, partition=partition).count() == 1


def test_fabric_health_flags_degrade_the_partition(agent):
    t = tray()
    text = nvidia_smi_xml(t, health={0: {"route_unhealthy": "True", "summary": "Unhealthy"}})
    agent.post(URL, {"host": t.hostname, "nvidia_smi": text}, format="json")
    assert "fabric ROUTE_UNHEALTHY" in NVLinkPartition.objects.get(pk=t.partition_id).degraded_reason
    assert tray().state == TrayState.UP  # the fabric, not this tray's GPUs: it stays in service
    assert tray().healthy_since is None


# --- circuit breaker ----------------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_circuit_breaker_stops_draining_past_its_share_and_alerts(
    agent, django_capture_on_commit_callbacks
):
    settings(breaker_percent=5)  # 54 trays: at most 2 per window
    trays = [tray(f"gb-r03-t{slot:02d}") for slot in (1, 2, 3, 4)]
    alerts = []
    breaker_tripped.connect(lambda **kw: alerts.append(kw["note"]), weak=False, dispatch_uid="test-alerts")
    try:
        with django_capture_on_commit_callbacks(execute=True):
            for t in trays:
                post(agent, t, xids=[xid(79)])
    finally:
        breaker_tripped.disconnect(dispatch_uid="test-alerts")
    states = [tray(t.hostname).state for t in trays]
    assert states == [TrayState.DRAIN, TrayState.DRAIN, TrayState.UP, TrayState.UP]
    assert kinds(trays[2]) == [ActionKind.BREAKER_TRIPPED, ActionKind.BLOCKED]
    assert kinds(trays[3]) == [ActionKind.BLOCKED]
    tripped = HealthSettings.load()
    assert tripped.breaker_tripped_at is not None
    assert "allows 2 of 54 trays (5 %)" in tripped.breaker_note
    assert len(alerts) == 1 and alerts[0] == tripped.breaker_note
    assert "until a platform admin clears it" in HealthAction.objects.get(tray=trays[3]).reason

    # Cleared by an admin: the rules drain again (the window still counts two, so one more is too many only
    # once the window is over; here a quiet fleet lets it through).
    reset_breaker()
    HealthAction.objects.filter(kind=ActionKind.DRAIN).update(created_at=timezone.now() - timedelta(hours=2))
    post(agent, trays[3], xids=[xid(79, at=timezone.now())])
    assert tray(trays[3].hostname).state == TrayState.DRAIN


# --- dry run ------------------------------------------------------------------------------------------------


def test_dry_run_records_would_drain_and_changes_nothing(agent):
    settings(dry_run=True)
    t = tray()
    partition_before = NVLinkPartition.objects.values("degraded_reason").get(pk=t.partition_id)
    outcome = post(agent, t, xids=[xid(79), xid(149, gpu_index=1)])
    t = tray()
    assert (t.state, t.state_reason) == (TrayState.UP, "")
    assert NVLinkPartition.objects.values("degraded_reason").get(pk=t.partition_id) == partition_before
    assert set(kinds(t)) == {ActionKind.WOULD_DRAIN, ActionKind.WOULD_DEGRADE}
    assert all(action.dry_run for action in HealthAction.objects.all())
    assert outcome["actions"][0].startswith("Would drain (dry run): rackplane: XID 79")
    assert HealthSettings.load().breaker_tripped_at is None


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_dry_run_records_a_fault_the_tray_keeps_reporting_once(agent):
    settings(dry_run=True)
    t = tray()
    text = nvidia_smi_xml(t, recovery={0: "GPU Reset Required"})
    for _ in range(3):
        assert agent.post(URL, {"host": t.hostname, "nvidia_smi": text}, format="json").status_code == 200
    assert kinds(t) == [ActionKind.WOULD_DRAIN]
    assert tray().state == TrayState.UP and tray().healthy_since is None


def test_a_blocked_drain_is_recorded_once_per_fault(agent):
    settings(breaker_percent=1)  # 54 trays: one per window
    first, second = tray("gb-r03-t01"), tray("gb-r03-t02")
    post(agent, first, xids=[xid(79)])
    text = nvidia_smi_xml(second, recovery={0: "GPU Reset Required"})
    for _ in range(3):
        agent.post(URL, {"host": second.hostname, "nvidia_smi": text}, format="json")
    assert kinds(second) == [ActionKind.BREAKER_TRIPPED, ActionKind.BLOCKED]
    assert tray(second.hostname).state == TrayState.UP


# --- repeat offenders ---------------------------------------------------------------------------------------


def test_a_repeat_offender_goes_to_needs_service_and_never_returns_by_itself(agent):
    settings(repeat_faults=3, repeat_days=7, return_after_s=0)
    t = tray()
    for fault in range(3):
        post(agent, t, xids=[xid(79, at=timezone.now())])
        if fault < 2:
            assert tray().state == TrayState.DRAIN
            return_to_service(tray(), force=True)
    t = tray()
    assert t.state == TrayState.NEEDS_SERVICE
    assert t.state_reason.startswith("rackplane: needs service: 3 faults in 7 days, the last XID 79")
    assert kinds(t)[-1] == ActionKind.NEEDS_SERVICE
    assert not t.gpus.filter(schedulable_gpus_q()).exists()
    for _ in range(2):  # healthy reports do not bring it back
        post(agent, t)
    assert tray().state == TrayState.NEEDS_SERVICE
    assert "needs service" in return_eligibility(tray()).why


# --- return to service --------------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_drained_tray_returns_after_healthy_reports_for_the_configured_time(agent):
    settings(return_after_s=1800)
    t = tray()
    post(agent, t, xids=[xid(79)])
    assert tray().healthy_since is None
    post(agent, t)  # healthy, but not for long enough
    t = tray()
    assert t.state == TrayState.DRAIN and t.healthy_since is not None
    verdict = return_eligibility(t)
    assert not verdict.eligible and "more minutes" in verdict.why

    ComputeTray.objects.filter(pk=t.pk).update(healthy_since=timezone.now() - timedelta(minutes=31))
    outcome = post(agent, t)
    t = tray()
    assert (t.state, t.state_reason) == (TrayState.UP, "")
    assert kinds(t) == [ActionKind.DRAIN, ActionKind.RETURN]
    assert outcome["actions"][0].startswith("Returned to service: returned to service: healthy since")


def test_a_fault_in_between_restarts_the_healthy_time(agent):
    settings(return_after_s=1800)
    t = tray()
    post(agent, t, xids=[xid(79)])
    ComputeTray.objects.filter(pk=t.pk).update(healthy_since=timezone.now() - timedelta(minutes=20))
    post(agent, t, nvidia_smi=nvidia_smi_xml(t, recovery={0: "GPU Reset Required"}))
    assert tray().healthy_since is None
    assert not return_eligibility(tray()).eligible


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_return_needs_the_configured_check_to_pass_after_the_fault(agent):
    settings(return_after_s=0, return_check="dcgmi diag -r 2")
    t = tray()
    before = (timezone.now() - timedelta(minutes=5)).isoformat()
    check = {
        "name": "dcgmi diag -r 2",
        "exit_status": 0,
        "output": "Pass",
        "started": before,
        "seconds": 90.0,
    }
    post(agent, t, checks=[check])  # passed, but before the fault: does not count
    post(agent, t, xids=[xid(79)])
    post(agent, t)
    assert tray().state == TrayState.DRAIN
    assert "no 'dcgmi diag -r 2' check has run since it was drained" in return_eligibility(tray()).why

    failed = {**check, "exit_status": 1, "output": "Fail: memory", "started": timezone.now().isoformat()}
    post(agent, t, checks=[failed])
    assert tray().state == TrayState.DRAIN  # a failed check is a fault again (the default check rule drains)

    passed = {**check, "started": (timezone.now() + timedelta(seconds=1)).isoformat()}
    post(agent, t, checks=[passed])
    t = tray()
    assert t.state == TrayState.UP
    assert (
        "'dcgmi diag -r 2' passed" in HealthAction.objects.filter(tray=t, kind=ActionKind.RETURN).get().reason
    )


def test_auto_return_off_records_that_it_would_return(agent):
    settings(return_after_s=0, auto_return=False)
    t = tray()
    post(agent, t, xids=[xid(79)])
    post(agent, t)
    post(agent, t)
    assert tray().state == TrayState.DRAIN
    assert kinds(t) == [ActionKind.DRAIN, ActionKind.WOULD_RETURN]  # once, not per report


def test_drain_and_return_by_hand(platform_admin, demo_inventory):
    t = tray()
    action = drain_tray(t, "reseating GPU 2", actor=platform_admin)
    t = tray()
    assert t.state_reason == "rackplane: platform-admin: reseating GPU 2"
    assert (action.kind, action.actor) == (ActionKind.DRAIN, platform_admin)
    # A person's drain is theirs to end: it returns at once, without the healthy-time wait of a fault.
    verdict = return_eligibility(t)
    assert (
        verdict.eligible
        and verdict.why == "it was drained by hand, not by the health rules, with no fault since"
    )
    return_to_service(t, actor=platform_admin, note="reseated")
    t = tray()
    assert t.state == TrayState.UP
    last = HealthAction.objects.filter(tray=t).first()
    assert last.kind == ActionKind.RETURN and "forced" not in last.reason and "reseated" in last.reason

    ComputeTray.objects.filter(pk=t.pk).update(
        state=TrayState.MAINTENANCE, state_reason="slurm: maint window"
    )
    with pytest.raises(HealthError, match="another owner's reason"):
        return_to_service(tray(), force=True)
    with pytest.raises(HealthError, match="owner's reason is kept"):
        drain_tray(tray(), "x")
    with pytest.raises(HealthError, match="Say why"):
        drain_tray(tray("gb-r02-t11"), "  ")


def test_a_manual_drain_is_not_returned_by_the_rules(agent, platform_admin):
    settings(return_after_s=0)
    t = tray()
    drain_tray(t, "burn-in", actor=platform_admin)
    post(agent, t)
    post(agent, t)
    assert tray().state == TrayState.DRAIN


# --- DCGM ---------------------------------------------------------------------------------------------------


def _dcgm(uuid: str, lines: dict[str, float], xid_label: int | None = None) -> str:
    out = []
    for name, value in lines.items():
        extra = f',xid="{xid_label}"' if name == faults.DCGM_XID_COUNT else ""
        out += [f"# TYPE {name} gauge", f'{name}{{gpu="0",UUID="{uuid}",Hostname="n"{extra}}} {value}']
    return "\n".join(out) + "\n"


def test_dcgm_xid_and_nvlink_counters_are_events_the_rules_act_on(node_agent, demo_inventory):
    client = token_client(node_agent)
    t = tray()
    gpu = t.gpus.get(index=0)
    page = _dcgm(
        gpu.uuid,
        {
            faults.DCGM_XID: 48,
            "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 150,
            "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": 0,
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": 9223372036854775794,  # DCGM's blank: no value
        },
    )
    response = client.post("/api/v1/telemetry/dcgm/", page, content_type="text/plain")
    assert response.status_code == 200, response.content
    assert response.json()["health_events"] == 2
    events = {e.code: e for e in HealthEvent.objects.filter(tray=t)}
    assert set(events) == {"48", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"}
    assert events["48"].source == "dcgm" and events["48"].gpu == gpu and events["48"].drains
    assert events["DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"].warns
    t = tray()
    assert t.state == TrayState.DRAIN and t.state_reason.startswith("rackplane: XID 48 (GPU_ECC_DBE)")

    # The same gauge scraped again is the same fault; a counter that grew counts again.
    page = _dcgm(gpu.uuid, {faults.DCGM_XID: 48, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 180})
    client.post("/api/v1/telemetry/dcgm/", page, content_type="text/plain")
    events = {e.code: e for e in HealthEvent.objects.filter(tray=t)}
    assert events["48"].count == 1
    crc = events["DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"]
    assert (crc.count, crc.value) == (2, 180)


def test_dcgm_xid_counts_and_the_fabric_mask(node_agent, demo_inventory):
    t = tray()
    gpu = t.gpus.get(index=3)
    page = _dcgm(gpu.uuid, {faults.DCGM_XID_COUNT: 2}, xid_label=13) + _dcgm(
        gpu.uuid, {faults.DCGM_FABRIC_MASK: 0b01_0000}
    )
    response = token_client(node_agent).post("/api/v1/telemetry/dcgm/", page, content_type="text/plain")
    assert response.status_code == 200, response.content
    events = {(e.kind, e.code) for e in HealthEvent.objects.filter(gpu=gpu)}
    assert events == {(HealthKind.XID, "13"), (HealthKind.FABRIC, "ROUTE_UNHEALTHY")}
    assert "fabric ROUTE_UNHEALTHY" in NVLinkPartition.objects.get(pk=t.partition_id).degraded_reason


def test_a_dcgm_push_for_gpus_outside_the_tokens_trays_is_refused(demo_inventory, api_client):
    _, secret = agent_tokens.issue(hostname="gb-r01-t01")
    other = tray().gpus.get(index=0)
    client = api_client
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    response = client.post(
        "/api/v1/telemetry/dcgm/", _dcgm(other.uuid, {faults.DCGM_XID: 79}), content_type="text/plain"
    )
    assert response.status_code == 403
    assert not HealthEvent.objects.exists() and tray().state == TrayState.UP


# --- the admin: rules and settings are platform admins' to edit ---------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_platform_admins_edit_rules_and_settings_in_the_admin(client, platform_admin, demo_inventory):
    platform_admin.is_superuser = True
    platform_admin.save()
    client.force_login(platform_admin)
    for model in ("healthrule", "healthevent", "healthaction", "healthcheckresult", "healthsettings"):
        response = client.get(f"/admin/inventory/{model}/")
        assert response.status_code == 200, model
    assert "XID 79 drain" in client.get("/admin/inventory/healthrule/").content.decode()

    rule = HealthRule.objects.get(name="XID 13 warn")
    response = client.post(
        f"/admin/inventory/healthrule/{rule.pk}/change/",
        {
            "name": rule.name,
            "enabled": "on",
            "kind": "xid",
            "xid_first": 13,
            "xid_last": 13,
            "code": "",
            "threshold": "",
            "action": "drain",
            "note": "our jobs never raise 13",
        },
    )
    assert response.status_code == 302, response.content
    assert HealthRule.objects.get(pk=rule.pk).action == RuleAction.DRAIN

    bad = client.post(
        "/admin/inventory/healthrule/add/",
        {
            "name": "backwards",
            "enabled": "on",
            "kind": "xid",
            "xid_first": 150,
            "xid_last": 144,
            "code": "",
            "threshold": "",
            "action": "drain",
            "note": "",
        },
    )
    assert bad.status_code == 200 and "The last XID cannot come before the first." in bad.content.decode()

    t = tray()
    drain_tray(t, "burn-in", actor=platform_admin)
    response = client.post(
        "/admin/inventory/computetray/", {"action": "return_to_service", "_selected_action": [t.pk]}
    )
    assert response.status_code == 302
    assert tray().state == TrayState.UP
