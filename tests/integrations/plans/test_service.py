"""The partition plan service (integrations.plans.service) on the 3-rack demo: apply, stale plans, drain
first, cancel, preview without writes, and two admins applying at once on PostgreSQL."""

import threading
import time

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, connections

from integrations.models import ConfigPush
from integrations.plans import service as plans
from inventory.choices import MigMode, PlanStatus, TrayState
from inventory.models import ComputeTray, NVLinkPartition, PartitionPlan, Rack
from inventory.planning import PlannedPartition, preset_layout
from scheduling.choices import JobState
from scheduling.models import Allocation, Job
from tenancy.models import DedicatedPartition, Department
from tenancy.services import dedicated_gpus, save_department
from tests.factories import make_department, run_job

# Plans push to the embedded `local` directory target (tests/conftest.py), writing into a temporary directory.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("local_target")]


@pytest.fixture
def rack(demo_inventory) -> Rack:
    return Rack.objects.get(name="gb-r01")


@pytest.fixture
def research(demo_inventory) -> Department:
    # Room for a 9-tray (36-GPU) dedicated partition in its guarantee.
    return save_department(Department(name="Research", slug="research", guaranteed_gpus=40))


def layout_of(rack: Rack) -> list[tuple[str, int, list[int]]]:
    return [
        (p.name, p.clique_id, list(p.trays.order_by("slot").values_list("slot", flat=True)))
        for p in NVLinkPartition.objects.filter(rack=rack).order_by("clique_id")
    ]


def halves(left="left", right="right") -> list[PlannedPartition]:
    """Another 9+9 layout than the 2x9 preset's (the demo's gb-r02 is 2x9: Slurm needs 9 x 2**k here)."""
    return [PlannedPartition(left, tuple(range(1, 10))), PlannedPartition(right, tuple(range(10, 19)))]


def busy(rack: Rack, *slots: int) -> Job:
    """A running job of department Ops on `rack`'s trays in `slots`."""
    trays = rack.trays.filter(slot__in=slots).order_by("slot")
    return run_job(make_department("Ops"), trays=trays, name="train-0001")


def finish(job: Job) -> None:
    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED)
    Allocation.objects.filter(job=job).delete()


def test_applying_2x9_replaces_the_partitions_moves_trays_dedicates_and_queues_pushes(
    rack, research, admin_user
):
    assert layout_of(rack) == [("default", 32766, list(range(1, 19)))]
    planned = [
        PlannedPartition("p1", tuple(range(1, 10)), department="research"),
        PlannedPartition("p2", tuple(range(10, 19)), slurm_partition="gpu_batch"),
    ]
    plan = plans.create_plan(rack, planned, drain=False, user=admin_user)
    assert plan.status == PlanStatus.DRAFT
    assert [p["clique_id"] for p in plan.layout] == [1, 2]
    # The seed's drained tray 7 is a warning in plain words, not an error.
    assert any("Tray 7 (gb-r01-t07) is in p1 although it is drain" in f["message"] for f in plan.findings)

    plan = plans.apply_plan(plan, user=admin_user)

    assert plan.status in (PlanStatus.APPLYING, PlanStatus.APPLIED)
    assert plan.applied_at is not None
    assert layout_of(rack) == [("p1", 1, list(range(1, 10))), ("p2", 2, list(range(10, 19)))]
    assert not ComputeTray.objects.filter(rack=rack, partition__isnull=True).exists()
    assert NVLinkPartition.objects.get(rack=rack, name="p2").service_tier == "gpu_batch"
    # The dedication counts in the department's guarantee.
    p1 = NVLinkPartition.objects.get(rack=rack, name="p1")
    assert DedicatedPartition.objects.get(partition=p1).department == research
    assert dedicated_gpus(research) == 36
    # A push per configured target, tagged with the plan.
    assert ConfigPush.objects.filter(plan_id=plan.pk).exists()
    # The other racks are untouched.
    assert layout_of(Rack.objects.get(name="gb-r02")) == [
        ("p1", 1, list(range(1, 10))),
        ("p2", 2, list(range(10, 19))),
    ]


def test_a_dedication_beyond_the_guarantee_is_refused_and_nothing_changes(rack, admin_user):
    small = save_department(Department(name="Small", slug="small", guaranteed_gpus=8))
    planned = [PlannedPartition("p1", tuple(range(1, 10)), department=small.slug)]
    plan = plans.create_plan(
        rack, [*planned, PlannedPartition("p2", tuple(range(10, 19)))], drain=False, user=None
    )
    with pytest.raises(ValidationError, match="more than its guarantee of 8"):
        plans.apply_plan(plan, user=admin_user)
    assert layout_of(rack) == [("default", 32766, list(range(1, 19)))]
    assert PartitionPlan.objects.get(pk=plan.pk).status == PlanStatus.DRAFT


def test_an_invalid_plan_is_refused_with_every_reason(rack, admin_user):
    overlapping = [PlannedPartition("p1", (1, 2, 3)), PlannedPartition("P 2", (3, 4))]
    with pytest.raises(ValidationError) as excinfo:
        plans.create_plan(rack, overlapping, drain=False, user=admin_user)
    text = " ".join(excinfo.value.messages)
    assert "Tray 3 (gb-r01-t03) is in both p1 and P 2" in text
    assert "'P 2' is not a usable partition name" in text
    assert not PartitionPlan.objects.exists()


def test_a_plan_whose_rack_changed_after_it_was_checked_is_stale(rack, admin_user):
    plan = plans.create_plan(rack, preset_layout("2x9"), drain=False, user=admin_user)
    ComputeTray.objects.filter(rack=rack, slot=18).update(partition=None)  # someone else moved a tray
    with pytest.raises(plans.PlanConflict, match=r"changed since plan #\d+ was checked: preview it again"):
        plans.apply_plan(plan, user=admin_user)
    assert PartitionPlan.objects.get(pk=plan.pk).status == PlanStatus.DRAFT


def test_a_second_plan_while_one_is_in_flight_is_a_conflict(rack, admin_user):
    job = busy(rack, 1)
    first = plans.create_plan(rack, preset_layout("2x9"), drain=True, user=admin_user)
    second = plans.create_plan(rack, halves(), drain=True, user=admin_user)
    assert plans.apply_plan(first, user=admin_user).status == PlanStatus.DRAINING
    with pytest.raises(plans.PlanConflict, match=f"Plan #{first.pk} by admin is being applied to gb-r01"):
        plans.apply_plan(second, user=admin_user)
    finish(job)


def test_drain_first_drains_busy_trays_then_applies_once_the_work_ends(rack, admin_user):
    job = busy(rack, 1, 2)
    with pytest.raises(ValidationError, match="choose 'drain first'"):
        plans.create_plan(rack, preset_layout("2x9"), drain=False, user=admin_user)

    plan = plans.apply_plan(plans.create_plan(rack, preset_layout("2x9"), drain=True, user=admin_user))
    assert plan.status == PlanStatus.DRAINING
    reason = plans.drain_reason(plan)
    drained = ComputeTray.objects.filter(rack=rack, state=TrayState.DRAIN, state_reason=reason)
    # Every tray the plan changes takes no new work while it waits, not only the busy ones (walkthrough:
    # the free ones got the requeued work); the seed's tray 7, out for a fault, keeps its own reason.
    assert sorted(drained.values_list("slot", flat=True)) == [s for s in range(1, 19) if s != 7]
    # Nothing is repartitioned and nothing pushed while the work runs.
    assert layout_of(rack) == [("default", 32766, list(range(1, 19)))]
    assert not ConfigPush.objects.filter(plan_id=plan.pk).exists()
    assert plans.continue_draining(plan) is False

    finish(job)
    assert plans.continue_draining(plan) is True
    plan.refresh_from_db()
    assert plan.status in (PlanStatus.APPLYING, PlanStatus.APPLIED)
    assert layout_of(rack) == [("p1", 1, list(range(1, 10))), ("p2", 2, list(range(10, 19)))]
    assert not ComputeTray.objects.filter(state_reason=reason).exists()
    assert ComputeTray.objects.get(rack=rack, slot=1).state == TrayState.UP
    # The seed's own drained tray keeps its reason: the plan only returns what it drained.
    assert ComputeTray.objects.get(rack=rack, slot=7).state == TrayState.DRAIN
    assert ConfigPush.objects.filter(plan_id=plan.pk).exists()


def test_cancelling_a_draining_plan_returns_its_trays(rack, admin_user):
    job = busy(rack, 3)
    plan = plans.apply_plan(plans.create_plan(rack, preset_layout("2x9"), drain=True, user=admin_user))
    assert ComputeTray.objects.get(rack=rack, slot=3).state == TrayState.DRAIN

    plan = plans.cancel_plan(plan)
    assert plan.status == PlanStatus.CANCELLED and plan.finished_at is not None
    tray = ComputeTray.objects.get(rack=rack, slot=3)
    assert (tray.state, tray.state_reason) == (TrayState.UP, "")
    assert layout_of(rack) == [("default", 32766, list(range(1, 19)))]
    assert plans.continue_draining(plan) is False
    with pytest.raises(plans.PlanConflict, match="can no longer be cancelled"):
        plans.cancel_plan(plan)
    finish(job)


def _snapshot():
    return (
        list(NVLinkPartition.objects.order_by("pk").values_list("pk", "rack_id", "name", "clique_id")),
        list(ComputeTray.objects.order_by("pk").values_list("pk", "partition_id", "state", "state_reason")),
        list(DedicatedPartition.objects.values_list("pk", "partition_id")),
        PartitionPlan.objects.count(),
        ConfigPush.objects.count(),
    )


def test_preview_writes_nothing_and_diffs_the_topology(rack, research):
    before = _snapshot()
    planned = [
        PlannedPartition("p1", tuple(range(1, 10)), department="research"),
        PlannedPartition("p2", tuple(range(10, 19))),
    ]
    result = plans.preview(rack, planned)
    assert _snapshot() == before
    assert result.check.ok, result.check.findings

    topology = result.diffs["slurm/topology.conf"]
    added = [
        line[1:] for line in topology.splitlines() if line.startswith("+") and not line.startswith("+++")
    ]
    assert "BlockName=r01p1 Nodes=gb-r01-t[01-09]" in added
    assert "BlockName=r01p2 Nodes=gb-r01-t[10-18]" in added
    assert topology.startswith("--- a/slurm/topology.conf\n+++ b/slurm/topology.conf\n")
    # Dedicating p1 makes a Slurm partition for the department: the Slurm partition lines change too.
    assert "research" in result.diffs["slurm/rackplane.conf"]


def test_preview_of_an_invalid_plan_has_findings_and_no_diffs(rack):
    result = plans.preview(rack, [PlannedPartition("p1", (1, 2, 19))])
    assert not result.check.ok and result.diffs == {}
    assert any("names tray 19, which gb-r01 does not have" in f.message for f in result.check.findings)


# --- concurrency (PostgreSQL) -------------------------------------------------------------------------------


def _require_postgresql():
    if connection.vendor != "postgresql":
        pytest.skip(
            f"needs PostgreSQL row locks and concurrent connections ({connection.vendor} serializes writers "
            "and its in-memory test database is not shared between threads); scripts/test.sh runs it"
        )


@pytest.mark.django_db(transaction=True)
def test_two_admins_applying_two_plans_at_once_get_one_plan_and_one_conflict(demo_inventory, monkeypatch):
    _require_postgresql()
    rack = Rack.objects.get(name="gb-r01")
    layouts = {"2x9": preset_layout("2x9"), "halves": halves()}
    drafts = {key: plans.create_plan(rack, layout, drain=False, user=None) for key, layout in layouts.items()}
    # Both threads are inside apply_plan at once: each re-checks its plan slowly, after taking (or waiting
    # for) the rack's row lock. Without the lock both would repartition and the rack would mix both plans.
    real_check = plans.check

    def slow_check(*args, **kwargs):
        time.sleep(0.3)
        return real_check(*args, **kwargs)

    monkeypatch.setattr(plans, "check", slow_check)
    barrier = threading.Barrier(len(drafts))
    outcome: dict[str, object] = {}

    def attempt(key, plan):
        try:
            barrier.wait(timeout=10)
            outcome[key] = plans.apply_plan(plan)
        except Exception as error:  # reported to the test thread
            outcome[key] = error
        finally:
            connections.close_all()

    threads = [threading.Thread(target=attempt, args=item) for item in drafts.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads), "an apply is stuck"

    applied = [key for key, result in outcome.items() if isinstance(result, PartitionPlan)]
    conflicts = [result for result in outcome.values() if isinstance(result, plans.PlanConflict)]
    assert len(applied) == 1 and len(conflicts) == 1, outcome
    winner = applied[0]
    expected = [(p.name, list(p.slots)) for p in layouts[winner]]
    assert [(name, slots) for name, _clique, slots in layout_of(rack)] == expected
    loser = drafts["halves" if winner == "2x9" else "2x9"]
    assert PartitionPlan.objects.get(pk=loser.pk).status == PlanStatus.DRAFT


def test_the_beat_task_moves_a_draining_plan_on_once_its_work_ends(
    rack, admin_user, django_capture_on_commit_callbacks
):
    from integrations.tasks import follow_active_plans

    job = busy(rack, 1)
    plan = plans.apply_plan(plans.create_plan(rack, preset_layout("2x9"), drain=True, user=admin_user))
    assert follow_active_plans() == 0
    finish(job)
    with django_capture_on_commit_callbacks(execute=True):  # the pushes run (eager Celery) on commit
        assert follow_active_plans() == 1  # draining -> applying
    plan.refresh_from_db()
    assert plan.status == PlanStatus.APPLIED  # the end of its last push settled it
    assert follow_active_plans() == 0
    assert layout_of(rack)[0] == ("p1", 1, list(range(1, 10)))


def test_a_failed_push_fails_the_plan_and_a_successful_retry_applies_it(
    rack, admin_user, django_capture_on_commit_callbacks
):
    from integrations.models import PushStatus
    from integrations.pushes import retry_now

    with django_capture_on_commit_callbacks(execute=True):
        plan = plans.apply_plan(plans.create_plan(rack, preset_layout("2x9"), drain=False, user=admin_user))
    push = ConfigPush.objects.get(plan_id=plan.pk)
    ConfigPush.objects.filter(pk=push.pk).update(status=PushStatus.FAILED, error="disk full")
    plan = plans.follow(plan)
    assert plan.status == PlanStatus.FAILED and "retry" in plan.error
    push.refresh_from_db()
    with django_capture_on_commit_callbacks(execute=True):
        retry_now(push, user=admin_user)
    plan = plans.follow(plan)
    assert plan.status == PlanStatus.APPLIED and plan.error == ""


def test_after_apply_nodes_still_reporting_the_old_partition_show_as_drift(rack, admin_user):
    from inventory.discovery.nvidia_smi import FabricState, GpuHealth, ReportedGpu
    from inventory.ingest.reports import ingest_report

    plans.apply_plan(plans.create_plan(rack, preset_layout("2x9"), drain=False, user=admin_user))

    def report(clique_id):
        tray = ComputeTray.objects.get(rack=rack, slot=1)
        return [
            ReportedGpu(
                uuid,
                index,
                str(rack.cluster_uuid),
                clique_id,
                FabricState.COMPLETED,
                "Success",
                GpuHealth.HEALTHY,
            )
            for uuid, index in tray.gpus.order_by("index").values_list("uuid", "index")
        ]

    stale = ingest_report("gb-r01-t01", "json", report(32766))
    assert stale.drift == ["drift: the node reports clique 32766, the inventory intends gb-r01 p1 (clique 1)"]
    assert ComputeTray.objects.get(rack=rack, slot=1).fabric_problems == stale.drift
    assert ingest_report("gb-r01-t01", "json", report(1)).drift == []


def test_a_plan_that_changes_nothing_is_refused_and_a_changed_dedication_is_not(rack, research, admin_user):
    """A plan made from the layout it asks for (the same plan sent twice, the second made after the first
    applied) would push the same configuration again: refused in words, nothing saved."""
    planned = [
        PlannedPartition("p1", tuple(range(1, 10)), department="research"),
        PlannedPartition("p2", tuple(range(10, 19)), slurm_partition="gpu_batch"),
    ]
    plans.apply_plan(plans.create_plan(rack, planned, drain=False, user=admin_user), user=admin_user)
    saved = PartitionPlan.objects.count()

    with pytest.raises(ValidationError, match="gb-r01 is already carved exactly like this"):
        plans.create_plan(rack, planned, drain=False, user=admin_user)
    assert PartitionPlan.objects.count() == saved
    assert not plans.check(rack, planned).ok

    # The same trays with another dedication, Slurm partition or name each change something.
    for changed in (
        [PlannedPartition("p1", tuple(range(1, 10))), planned[1]],
        [planned[0], PlannedPartition("p2", tuple(range(10, 19)))],
        [planned[0], PlannedPartition("p3", tuple(range(10, 19)), slurm_partition="gpu_batch")],
    ):
        assert plans.check(rack, changed).ok, (changed, plans.check(rack, changed).findings)
    # Trays left out of any partition change something too (Slurm's block rule refuses this one for its
    # own reason).
    findings = plans.check(rack, [planned[0]]).findings
    assert not any("already carved" in f.message for f in findings), findings


def test_the_check_warns_of_a_tray_whose_gpu_is_in_mig_mode_in_a_multi_tray_partition(rack):
    tray = ComputeTray.objects.get(rack=rack, slot=3)
    tray.gpus.filter(index__in=[0, 1]).update(mig_mode=MigMode.ENABLED)
    findings = plans.check(rack, preset_layout("2x9")).findings
    [warning] = [f.message for f in findings if "MIG" in f.message]
    assert warning.startswith(f"p1 holds tray 3 ({tray.hostname}, 2 GPUs) in MIG mode.")
    alone = [PlannedPartition("p1", (3,)), PlannedPartition("p2", tuple(s for s in range(1, 19) if s != 3))]
    assert not [f for f in plans.check(rack, alone).findings if "MIG" in f.message]
