"""The simulated fabric closes the loop: after it re-carves a rack, the rack's nodes report through the
discovery service, "in progress" first (drift stays while the fabric changes), then their new cliques (the
drift clears by itself). Racks whose cliques did not change report nothing."""

import pytest

from core.audit import audit_context
from core.models import AuditEvent, AuditSource
from integrations.fabric import adapter
from integrations.fabric.nodes import REPORT_NODES, SETTLE_SECONDS
from integrations.models import ConfigPush, ConfigTarget, PushStatus
from integrations.plans import service as plans
from inventory.choices import FabricState, PlanStatus
from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack
from inventory.planning import preset_layout
from inventory.selectors import overview, rack_layout

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("local_target")]


@pytest.fixture
def fabric(demo_inventory, monkeypatch) -> ConfigTarget:
    monkeypatch.setattr(adapter, "_SIMULATED", {})  # a fresh in-memory fabric, as in a new process
    return ConfigTarget.objects.create(name="fabric", kind="fabric", settings={"kind": "simulated"})


def drift(user, rack: Rack) -> int:
    return rack_layout(user, rack).drift


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_drift_appears_while_the_simulated_fabric_changes_and_clears_when_its_nodes_report(
    fabric, admin_user, django_capture_on_commit_callbacks
):
    rack = Rack.objects.get(name="gb-r01")
    # The seed's GPU still registering (on gb-r03), whose node did not report again.
    registering = set(Gpu.objects.filter(fabric_state=FabricState.IN_PROGRESS).values_list("pk", flat=True))
    assert drift(admin_user, rack) == 0

    with django_capture_on_commit_callbacks() as plan_commit:
        plan = plans.apply_plan(plans.create_plan(rack, preset_layout("2x9"), drain=False, user=admin_user))
    # The inventory intends the new partitions; the nodes still report the default partition's clique.
    assert drift(admin_user, rack) == 72

    mark = AuditEvent.objects.order_by("-pk").values_list("pk", flat=True).first()
    # The plan's pushes run (eager Celery), the fabric's among them, as the admin's background task.
    with django_capture_on_commit_callbacks() as push_commit, audit_context(AuditSource.TASK, admin_user):
        for callback in plan_commit:
            callback()
    fabric_push = ConfigPush.objects.get(plan_id=plan.pk, target=fabric)
    assert fabric_push.status == PushStatus.SUCCEEDED, fabric_push.error
    assert "gb-r01: 18 node(s) report the fabric change in progress" in fabric_push.log
    # The fabric began as the nodes last reported it: the plan changed its own rack, no other.
    racks = Rack.objects.count()
    assert f"1 rack(s) changed, {racks - 1} already as planned" in fabric_push.log, fabric_push.log
    # While the fabric changes: every GPU of the rack registers, and keeps its old clique (still drift).
    assert drift(admin_user, rack) == 72
    assert overview(admin_user).gpus["fabric_incomplete"] == 72 + len(registering)
    tray = ComputeTray.objects.get(rack=rack, slot=1)
    assert tray.last_report["gpus"][0]["state"] == "in_progress"
    assert any("fabric registration is still in progress" in p for p in tray.fabric_problems)

    # The settled reports are one task message, sent SETTLE_SECONDS after the push's work committed.
    with django_capture_on_commit_callbacks(execute=True):
        for callback in push_commit:
            callback()
    assert drift(admin_user, rack) == 0
    assert overview(admin_user).gpus["drift"] == 0
    for partition in NVLinkPartition.objects.filter(rack=rack):
        gpus = Gpu.objects.filter(tray__partition=partition)
        assert gpus.count() == 36
        assert set(gpus.values_list("reported_clique_id", "fabric_state")) == {
            (partition.clique_id, FabricState.COMPLETED)
        }
    tray.refresh_from_db()
    assert tray.fabric_problems == []
    assert tray.reported_clique == f"{rack.cluster_uuid}.1"
    assert tray.last_report["tray_clique"] == f"{rack.cluster_uuid}.1"  # written by discovery's ingest
    # The discovery service's tray saves are audited as the task's.
    change = AuditEvent.objects.filter(object_repr="gb-r01-t01", after__reported_clique__isnull=False).last()
    assert change.source == AuditSource.TASK
    # Both rounds of node reports are the nodes' own, not the admin's who applied the plan.
    reports = [
        event
        for event in AuditEvent.objects.filter(pk__gt=mark, object_type="inventory.computetray")
        if "fabric_problems" in event.after
    ]
    assert len(reports) == 36  # each tray: in progress, then settled
    assert {(event.actor, event.source) for event in reports} == {(None, AuditSource.TASK)}
    assert change.after["reported_clique"] == f"{rack.cluster_uuid}.1"
    plan.refresh_from_db()
    assert plan.status == PlanStatus.APPLIED
    # The other racks' nodes did not report: the seed's registering GPU is still registering.
    assert set(Gpu.objects.filter(fabric_state=FabricState.IN_PROGRESS).values_list("pk", flat=True)) == (
        registering
    )


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_settled_reports_are_sent_to_arrive_later(
    fabric, admin_user, django_capture_on_commit_callbacks, monkeypatch
):
    sent = []  # what would go to the broker (a worker holds a message with a countdown until it is due)
    monkeypatch.setattr(
        "integrations.fabric.nodes.enqueue", lambda name, *args, **options: sent.append((name, options))
    )
    rack = Rack.objects.get(name="gb-r01")
    with django_capture_on_commit_callbacks(execute=True):
        plans.apply_plan(plans.create_plan(rack, preset_layout("2x9"), drain=False, user=admin_user))
    assert sent == [(REPORT_NODES, {"countdown": SETTLE_SECONDS})]
