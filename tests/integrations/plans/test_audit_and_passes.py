"""A plan's changes to trays are in the audit with before and after (drain, partition move, undrain), a plan
that ends asks the scheduler for a pass, and a plan that ends a department's dedication says so."""

import pytest

from core.audit import audit_context
from core.models import AuditEvent, AuditSource
from integrations.models import ConfigPush, PushStatus
from integrations.plans import service as plans
from integrations.tasks import push_config
from inventory.choices import PlanStatus, TrayState
from inventory.models import ComputeTray, NVLinkPartition, Rack
from inventory.planning import Level, PlannedPartition, preset_layout
from scheduling.choices import JobState
from scheduling.models import Allocation, Job, SchedulingRequest
from tenancy.models import Department
from tenancy.services import save_department
from tests.factories import make_department, run_job

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("local_target")]


@pytest.fixture
def rack(demo_inventory) -> Rack:
    return Rack.objects.get(name="gb-r01")


def tray_events(rack: Rack) -> dict[str, list[AuditEvent]]:
    """Each tray's audit events (hostname -> events, oldest first)."""
    out: dict[str, list[AuditEvent]] = {}
    for event in AuditEvent.objects.filter(object_type="inventory.computetray").order_by("pk"):
        out.setdefault(event.object_repr, []).append(event)
    return out


def test_applying_a_plan_records_each_trays_drain_partition_move_and_undrain(rack, admin_user):
    ops = make_department("Ops")
    job = run_job(ops, trays=rack.trays.filter(slot__in=[1, 2]).order_by("slot"), name="train-0001")
    default = NVLinkPartition.objects.get(rack=rack, name="default").pk
    with audit_context(AuditSource.UI, actor=admin_user):
        plan = plans.apply_plan(plans.create_plan(rack, preset_layout("2x9"), drain=True, user=admin_user))
    assert plan.status == PlanStatus.DRAINING
    reason = plans.drain_reason(plan)

    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED)
    Allocation.objects.filter(job=job).delete()
    with audit_context(AuditSource.TASK):
        assert plans.continue_draining(plan) is True

    p1 = NVLinkPartition.objects.get(rack=rack, name="p1").pk
    p2 = NVLinkPartition.objects.get(rack=rack, name="p2").pk
    events = tray_events(rack)
    for slot in range(1, 19):
        host = f"gb-r01-t{slot:02d}"
        moves = [e for e in events[host] if "partition" in e.after]
        [move] = moves  # one event per tray: old partition -> new, not via "no partition"
        assert (move.before, move.after) == ({"partition": default}, {"partition": p1 if slot <= 9 else p2})
        assert (move.source, move.actor) == (AuditSource.TASK, None)
    # Every tray the plan changes is drained while it waits (the busy ones and the free ones alike).
    for host in ("gb-r01-t01", "gb-r01-t02", "gb-r01-t03"):
        drain, undrain = [e for e in events[host] if "state" in e.after]
        assert (drain.before, drain.after) == (
            {"state": "up", "state_reason": ""},
            {"state": "drain", "state_reason": reason},
        )
        assert (drain.source, drain.actor) == (AuditSource.UI, admin_user)
        assert (undrain.before, undrain.after) == (
            {"state": "drain", "state_reason": reason},
            {"state": "up", "state_reason": ""},
        )
    # The seed's tray out for a fault is not the plan's to drain or return: no state change from it.
    assert not [e for e in events["gb-r01-t07"] if reason in str(e.after) or reason in str(e.before)]
    assert ComputeTray.objects.get(rack=rack, slot=7).state == TrayState.DRAIN


def test_the_audit_page_shows_a_plans_tray_changes(rack, admin_user, client):
    with audit_context(AuditSource.UI, actor=admin_user):
        plans.apply_plan(plans.create_plan(rack, preset_layout("2x9"), drain=False, user=admin_user))
    client.force_login(admin_user)
    page = client.get("/audit/?object_type=inventory.computetray").content.decode()
    assert "gb-r01-t18" in page and "partition" in page


@pytest.fixture
def pass_reasons(monkeypatch) -> list[str]:
    """The reasons the plan service asks for a pass with (the real request_pass still runs: requests in
    one transaction are coalesced into one row, so the rows alone do not show every reason)."""
    reasons: list[str] = []
    real = plans.request_pass

    def request_pass(reason):
        reasons.append(reason)
        real(reason)

    monkeypatch.setattr(plans, "request_pass", request_pass)
    return reasons


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_plan_asks_for_a_pass_when_it_is_applied_fails_or_is_cancelled(
    rack, admin_user, pass_reasons, django_capture_on_commit_callbacks
):
    plan = plans.apply_plan(plans.create_plan(rack, preset_layout("2x9"), drain=False, user=admin_user))
    assert plan.status == PlanStatus.APPLYING  # its push is queued
    plans.refresh_status(plan)  # unchanged: still applying
    assert pass_reasons == []
    with django_capture_on_commit_callbacks(execute=True):
        push_config(ConfigPush.objects.get(plan_id=plan.pk).pk)  # the push ends, the plan follows
    plan.refresh_from_db()
    assert plan.status == PlanStatus.APPLIED
    assert pass_reasons == [f"plan #{plan.pk} applied"]

    other = Rack.objects.get(name="gb-r03")
    failed = plans.apply_plan(plans.create_plan(other, preset_layout("2x9"), drain=False, user=admin_user))
    ConfigPush.objects.filter(plan_id=failed.pk).update(status=PushStatus.FAILED, error="disk full")
    assert plans.follow(failed).status == PlanStatus.FAILED
    assert pass_reasons[-1] == f"plan #{failed.pk} failed"

    run_job(make_department("Ops"), trays=rack.trays.filter(slot=1), name="train-0002")
    draining = plans.apply_plan(plans.create_plan(rack, preset_layout("1x18"), drain=True, user=admin_user))
    assert draining.status == PlanStatus.DRAINING
    plans.cancel_plan(draining)
    assert pass_reasons[-1] == f"plan #{draining.pk} cancelled"
    # A draft cancelled before it changed anything asks for nothing.
    draft = plans.create_plan(rack, preset_layout("1x18"), drain=True, user=admin_user)
    plans.cancel_plan(draft)
    assert pass_reasons[-1] == f"plan #{draining.pk} cancelled"


def test_a_plan_that_ends_a_dedication_warns_in_its_preview(rack):
    inference = save_department(Department(name="Inference", slug="inference", guaranteed_gpus=72))
    plans.apply_plan(
        plans.create_plan(
            rack,
            [
                PlannedPartition("p1", tuple(range(1, 10)), department="inference"),
                PlannedPartition("p2", tuple(range(10, 19))),
            ],
            drain=False,
            user=None,
        )
    )
    assert NVLinkPartition.objects.get(rack=rack, name="p1").dedication.department == inference

    def warnings(partitions):
        return [f.message for f in plans.preview(rack, partitions).check.findings if f.level == Level.WARNING]

    lost = warnings([PlannedPartition("whole", tuple(range(1, 19)))])
    assert any(
        "9 of Inference's dedicated trays on gb-r01 (slots 1, 2, 3, 4, 5, 6, 7, 8, 9) lose their dedication"
        in m
        for m in lost
    ), lost
    # Dedicating the re-carved partition to Inference keeps its tier: no such warning.
    kept = warnings([PlannedPartition("whole", tuple(range(1, 19)), department="inference")])
    assert not any("lose their dedication" in m for m in kept), kept
    # A dedicated partition shrinking names only the trays that lose it.
    shrunk = warnings(
        [
            PlannedPartition("p1", tuple(range(1, 5)), department="inference"),
            PlannedPartition("p2", tuple(range(5, 19))),
        ]
    )
    assert any("5 of Inference's dedicated trays on gb-r01 (slots 5, 6, 7, 8, 9)" in m for m in shrunk), (
        shrunk
    )


def test_a_preview_writes_nothing_and_sends_nothing(rack, django_capture_on_commit_callbacks):
    """A preview applies the plan in a block it rolls back: no push queued, no pass asked for, no audit, and
    nothing left to run on commit (a walkthrough saw previews send real pushes)."""
    save_department(Department(name="Inference", slug="inference", guaranteed_gpus=72))
    mark = AuditEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    SchedulingRequest.objects.all().delete()
    layout = [
        PlannedPartition("p1", tuple(range(1, 10)), department="inference"),
        PlannedPartition("p2", tuple(range(10, 19))),
    ]
    with django_capture_on_commit_callbacks() as callbacks:
        result = plans.preview(rack, layout)
    assert result.check.ok and result.diffs  # it did see what would change
    assert callbacks == []
    assert not ConfigPush.objects.exists()
    assert not SchedulingRequest.objects.exists()
    assert not AuditEvent.objects.filter(pk__gt=mark).exists()
    assert list(NVLinkPartition.objects.filter(rack=rack).values_list("name", flat=True)) == ["default"]
