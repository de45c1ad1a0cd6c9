"""Carving that follows demand, from the pass (scheduling.services.recarving) to the plan: after the pass
decides, the in-quota multi-tray gangs it left waiting get re-carves of idle trays on the racks whose admin
turned re-carving on, and integrations makes them the scheduler's plans through the wizard's path.

On the 3-rack demo: gb-r01 and gb-r03 are one default partition each (Ops runs in quota on 8 trays of each,
so neither has 12 free), gb-r02 is carved p1 (slots 1-9) and p2 (10-18), all idle. Research's 12-tray
(48-GPU) `partition` gang fits no partition as carved: merging p1 and p2 would give it one."""

import pytest

from core.models import AuditEvent, AuditSource
from inventory import recarving
from inventory.choices import PlanOrigin, PlanStatus
from inventory.models import NVLinkPartition, PartitionPlan, Rack
from scheduling.choices import JobState, Topology
from scheduling.models import Job
from scheduling.services.passes import run_pass
from tenancy.models import DedicatedPartition
from tenancy.services import dedicate_partition
from tests.factories import (
    make_department,
    make_job,
    nodes_report_their_partitions,
    run_job,
    scheduler_plan,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("local_target")]


@pytest.fixture
def carved(demo_inventory) -> Rack:
    ops = make_department("Ops", guaranteed_gpus=64)
    for name in ("gb-r01", "gb-r03"):
        rack = Rack.objects.get(name=name)
        run_job(ops, trays=rack.trays.filter(slot__lte=8).order_by("slot"), name=f"train-{name}")
    return Rack.objects.get(name="gb-r02")


@pytest.fixture
def research(demo_inventory):
    return make_department("Research", guaranteed_gpus=48)


@pytest.fixture
def gang(carved, research) -> Job:
    return make_job(research, "gang", state=JobState.PENDING, gpus=48, topology=Topology.PARTITION)


def turn_on(rack: Rack, **bounds) -> None:
    recarving.set_policy(rack, **{"enabled": True, "smallest_trays": 1, "max_per_hour": 2} | bounds)


def scheduler_plans():
    return PartitionPlan.objects.filter(origin=PlanOrigin.SCHEDULER)


@pytest.mark.slow(reason="two passes, a plan's pushes and the nodes' reports: about 1 s on 2 cores")
def test_the_pass_recarves_idle_partitions_for_a_waiting_gang_which_then_starts_there(
    carved, gang, django_capture_on_commit_callbacks
):
    turn_on(carved)
    with django_capture_on_commit_callbacks(execute=True):
        summary = run_pass()
    assert summary.recarves == 1

    [plan] = scheduler_plans()
    assert (plan.rack, plan.for_job_id, plan.created_by) == (carved, gang.pk, None)
    assert f"job {gang.pk} (research, 48 GPUs in quota)" in plan.reason and "p1 and p2" in plan.reason
    assert plan.status == PlanStatus.APPLIED  # its push to the local target ran (eagerly, on commit)
    [partition] = NVLinkPartition.objects.filter(rack=carved)
    assert partition.trays.count() >= 12
    event = AuditEvent.objects.get(
        object_type="inventory.partitionplan", object_id=str(plan.pk), action="create"
    )
    assert (event.source, event.after["reason"]) == (AuditSource.SCHEDULER, plan.reason)
    gang.refresh_from_db()
    assert gang.state == JobState.PENDING  # the nodes have not reported the new clique yet

    # The nodes report their new partition (what the fabric manager's change looks like from discovery):
    # the pass they ask for starts the gang in it, and proposes nothing more.
    with django_capture_on_commit_callbacks(execute=True):
        nodes_report_their_partitions(carved)
    gang.refresh_from_db()
    # Placed there (its dispatch, run eagerly here with no backend for a job nobody submitted, ends it).
    assert gang.placed_at is not None, gang.pending_reason
    assert len(gang.placement) == 12 and all(host.startswith("gb-r02-") for host in gang.placement)
    assert scheduler_plans().count() == 1


def test_a_rack_without_re_carving_on_is_never_recarved(carved, gang):
    assert run_pass().recarves == 0
    recarving.set_policy(carved, enabled=False, smallest_trays=1, max_per_hour=60)
    assert run_pass().recarves == 0
    turn_on(carved)
    assert run_pass().recarves == 1


def test_the_pass_proposes_for_the_gang_and_sends_it_to_integrations(
    carved, gang, django_capture_on_commit_callbacks
):
    turn_on(carved)
    with django_capture_on_commit_callbacks() as sent:
        summary = run_pass()
    assert summary.recarves == 1
    assert not scheduler_plans().exists()  # nothing written by the pass: integrations makes the plan
    assert sent  # the task, on commit


def test_a_partition_with_work_on_one_tray_is_not_idle(carved, gang):
    turn_on(carved)
    small = run_job(make_department("Vision", guaranteed_gpus=4), trays=carved.trays.filter(slot=3))
    assert run_pass().recarves == 0
    small.allocations.all().delete()
    Job.objects.filter(pk=small.pk).update(state=JobState.COMPLETED)
    assert run_pass().recarves == 1


def test_the_hourly_bound_holds(carved, gang):
    turn_on(carved, max_per_hour=1)
    scheduler_plan(carved)
    assert run_pass().recarves == 0
    turn_on(carved, max_per_hour=2)
    assert run_pass().recarves == 1


def test_a_rack_with_another_plan_in_flight_is_left_alone(carved, gang):
    turn_on(carved)
    other = PartitionPlan.objects.create(rack=carved, layout=[], base_layout="", status=PlanStatus.APPLYING)
    assert run_pass().recarves == 0
    PartitionPlan.objects.filter(pk=other.pk).update(status=PlanStatus.APPLIED)
    assert run_pass().recarves == 1


def test_a_gang_a_recent_plan_was_made_for_waits_for_that_one(carved, gang):
    turn_on(carved, max_per_hour=5)
    scheduler_plan(carved, for_job_id=gang.pk)
    assert run_pass().recarves == 0
    PartitionPlan.objects.update(status=PlanStatus.FAILED)  # that plan failed: the gang may have another
    assert run_pass().recarves == 1


def test_dedicated_partitions_are_never_merged_across_departments(carved, research):
    """p1 dedicated to Vision, p2 shared: Research may use only p2 (9 trays), and Vision's own gang may not
    have p2's shared trays merged into its partition either."""
    vision = make_department("Vision", guaranteed_gpus=36 + 48)
    dedicate_partition(vision, NVLinkPartition.objects.get(rack=carved, name="p1"))
    turn_on(carved)
    make_job(research, "gang", state=JobState.PENDING, gpus=48, topology=Topology.PARTITION)
    make_job(vision, "vision-gang", state=JobState.PENDING, gpus=48, topology=Topology.PARTITION)
    assert run_pass().recarves == 0
    DedicatedPartition.objects.all().delete()
    assert run_pass().recarves == 1


def test_a_borrowing_gang_gets_no_recarve(carved, research):
    """Beyond its department's guarantee a gang borrows: re-carving serves in-quota work only."""
    turn_on(carved)
    big = make_job(research, "big", state=JobState.PENDING, gpus=52, topology=Topology.PARTITION)
    assert run_pass().recarves == 0
    Job.objects.filter(pk=big.pk).update(gpus=48)
    assert run_pass().recarves == 1
