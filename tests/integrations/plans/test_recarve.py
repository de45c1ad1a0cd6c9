"""The scheduler's re-carves, carried out (integrations.plans.recarve): a proposal of the pass becomes a plan
marked as the scheduler's and applies through the wizard's path; everything the pass decided on is checked
again under the rack's lock, and anything off refuses the whole proposal with a log line and nothing written.

On the 3-rack demo: gb-r02 is carved p1 (slots 1-9) and p2 (slots 10-18)."""

import logging
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from core.hardware import DEFAULT_CLIQUE_ID
from core.models import AuditEvent, AuditSource
from integrations.models import ConfigPush
from integrations.plans import recarve
from integrations.tasks import recarve_rack
from inventory import recarving
from inventory.choices import PlanOrigin, PlanStatus
from inventory.models import ComputeTray, NVLinkPartition, PartitionPlan, Rack
from scheduling.choices import JobState, Topology
from scheduling.models import Job
from tenancy.services import dedicate_partition
from tests.factories import make_department, make_job, run_job, scheduler_plan

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("local_target")]
REASON = "job 41 (research, 48 GPUs in quota) has waited 12 min: merging idle partitions p1 and p2 of gb-r02"


@pytest.fixture
def rack(demo_inventory) -> Rack:
    rack = Rack.objects.get(name="gb-r02")
    recarving.set_policy(rack, enabled=True, smallest_trays=1, max_per_hour=2)
    waiting_gang()
    return rack


def waiting_gang() -> Job:
    """The in-quota gang the pass proposed for: 12 trays in one partition, pending."""
    research = make_department("Research", guaranteed_gpus=48)
    return make_job(research, "gang", state=JobState.PENDING, gpus=48, topology=Topology.PARTITION)


def hosts(rack: Rack, slots) -> list[str]:
    return [f"{rack.name}-t{slot:02d}" for slot in slots]


def merge(of: Rack, **changes) -> dict:
    """The pass's message: p1 and p2 of `of` merged into one partition of all 18 trays."""
    rack = of
    message = {
        "rack": rack.name,
        "removed": ["p1", "p2"],
        "created": [{"name": "rc1", "hostnames": hosts(rack, range(1, 19)), "owner": None}],
        "job_id": Job.objects.get(name="gang").pk,
        "gpus": 48,
        "reason": REASON,
    }
    return message | changes


def layout_of(rack: Rack) -> list[tuple[str, int, list[int]]]:
    return [
        (p.name, p.clique_id, list(p.trays.order_by("slot").values_list("slot", flat=True)))
        for p in NVLinkPartition.objects.filter(rack=rack).order_by("clique_id")
    ]


def test_a_proposal_becomes_the_schedulers_plan_through_the_wizards_path_and_is_audited(rack):
    plan_id = recarve_rack(merge(rack))  # the task, as the worker runs it

    plan = PartitionPlan.objects.get(pk=plan_id)
    assert (plan.origin, plan.reason, plan.for_job_id, plan.created_by) == (
        PlanOrigin.SCHEDULER,
        REASON,
        Job.objects.get(name="gang").pk,
        None,
    )
    assert plan.status in (PlanStatus.APPLYING, PlanStatus.APPLIED) and not plan.drain_first
    # The wizard's check ran (its findings kept), the inventory is re-carved and every target gets a push.
    assert any("Slurm block sizes valid" in f["message"] for f in plan.findings)
    assert layout_of(rack) == [("rc1", DEFAULT_CLIQUE_ID, list(range(1, 19)))]
    assert ConfigPush.objects.filter(plan_id=plan.pk).exists()
    created = AuditEvent.objects.get(object_type="inventory.partitionplan", action="create")
    assert (created.source, created.actor, created.after["origin"], created.after["reason"]) == (
        AuditSource.SCHEDULER,
        None,
        "scheduler",
        REASON,
    )
    moves = AuditEvent.objects.filter(object_type="inventory.computetray", source=AuditSource.SCHEDULER)
    assert moves.count() == 18


def test_the_other_partitions_of_the_rack_keep_their_rows_clique_ids_and_work(demo_inventory):
    """p1..p5 of 2, 2, 2, 4 and 8 trays; p2 and p3 merged into one of 4: p1, p4 and p5 (running work) are
    left as they are, clique IDs included (their fabric partitions are not renumbered)."""
    rack = Rack.objects.get(name="gb-r01")
    ComputeTray.objects.filter(rack=rack).update(partition=None)
    NVLinkPartition.objects.filter(rack=rack).delete()
    sizes = {"p1": (1, 2), "p2": (3, 4), "p3": (5, 6), "p4": (7, 10), "p5": (11, 18)}
    for clique, (name, (first, last)) in enumerate(sizes.items(), start=1):
        partition = NVLinkPartition.objects.create(rack=rack, name=name, clique_id=clique)
        ComputeTray.objects.filter(rack=rack, slot__range=(first, last)).update(partition=partition)
    # The other racks as 2-tray multiples too (Slurm's block sizes: the smallest partition times 2**k).
    for other in Rack.objects.exclude(pk=rack.pk):
        ComputeTray.objects.filter(rack=other).update(partition=None)
        NVLinkPartition.objects.filter(rack=other).delete()
    kept_before = dict(
        NVLinkPartition.objects.filter(rack=rack, name__in=["p1", "p4", "p5"]).values_list("name", "pk")
    )
    job = run_job(make_department("Ops"), trays=rack.trays.filter(slot__in=[11, 12]), name="train-0001")
    recarving.set_policy(rack, enabled=True, smallest_trays=2, max_per_hour=2)

    message = {
        "rack": rack.name,
        "removed": ["p2", "p3"],
        "created": [{"name": "rc1", "hostnames": hosts(rack, range(3, 7)), "owner": None}],
        "job_id": waiting_gang().pk,
        "gpus": 16,
        "reason": "job 7 (ops, 16 GPUs in quota) has waited 3 min: merging p2 and p3 of gb-r01",
    }
    plan = recarve.apply(message)

    assert plan is not None and plan.by_scheduler
    assert layout_of(rack) == [
        ("p1", 1, [1, 2]),
        ("rc1", 2, [3, 4, 5, 6]),
        ("p4", 4, [7, 8, 9, 10]),
        ("p5", 5, list(range(11, 19))),
    ]
    kept_after = dict(
        NVLinkPartition.objects.filter(rack=rack, name__in=["p1", "p4", "p5"]).values_list("name", "pk")
    )
    assert kept_after == kept_before
    job.refresh_from_db()
    assert job.state == "running"
    # Only the re-carved trays moved (the audit records no move for the others).
    moved = AuditEvent.objects.filter(object_type="inventory.computetray", before__has_key="partition")
    assert sorted(moved.values_list("object_repr", flat=True)) == hosts(rack, range(3, 7))


def refused(caplog, rack, message) -> str:
    """Apply `message`, refused: the log line that says why (nothing written: same layout, same plans)."""
    before, plans = layout_of(rack), PartitionPlan.objects.count()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="integrations.plans.recarve"):
        assert recarve.apply(message) is None
    assert (layout_of(rack), PartitionPlan.objects.count()) == (before, plans)
    [line] = [r.getMessage() for r in caplog.records if "not made" in r.getMessage()]
    return line


def test_a_tray_that_started_work_meanwhile_refuses_the_whole_recarve(rack, caplog):
    run_job(make_department("Ops"), trays=rack.trays.filter(slot=12), name="train-0001")
    assert "gb-r02-t12 runs train-0001 now" in refused(caplog, rack, merge(rack))


def test_a_policy_turned_off_meanwhile_refuses(rack, caplog):
    recarving.set_policy(rack, enabled=False, smallest_trays=1, max_per_hour=2)
    assert "re-carving is off" in refused(caplog, rack, merge(rack))


def test_the_hourly_bound_counts_only_the_schedulers_plans_of_the_last_hour(rack, caplog):
    scheduler_plan(rack)
    PartitionPlan.objects.create(
        rack=rack, layout=[], base_layout="", status=PlanStatus.APPLIED
    )  # an admin's
    old = scheduler_plan(rack, ago=recarving.RATE_WINDOW + timedelta(seconds=1))
    assert recarving.recarves_in_window(rack, timezone.now()) == 1
    scheduler_plan(rack)
    assert "2 re-carves in the last hour already" in refused(caplog, rack, merge(rack))
    assert old.created_at < timezone.now() - recarving.RATE_WINDOW


def test_a_second_proposal_for_the_same_job_is_refused(rack, caplog):
    assert recarve.apply(merge(rack)) is not None
    PartitionPlan.objects.update(status=PlanStatus.APPLIED)
    assert "a re-carve was made for the job already" in refused(caplog, rack, merge(rack))


def test_a_job_that_no_longer_waits_gets_no_recarve(rack, caplog):
    Job.objects.filter(name="gang").update(state=JobState.CANCELLED)
    assert "the job no longer waits" in refused(caplog, rack, merge(rack))


def test_another_plan_in_flight_refuses(rack, caplog):
    PartitionPlan.objects.create(rack=rack, layout=[], base_layout="", status=PlanStatus.APPLYING)
    assert "another plan is in flight" in refused(caplog, rack, merge(rack))


def test_trays_never_move_across_departments_dedicated_partitions(rack, caplog):
    vision = make_department("Vision", guaranteed_gpus=40)
    dedicate_partition(vision, NVLinkPartition.objects.get(rack=rack, name="p1"))
    assert "across departments" in refused(caplog, rack, merge(rack))
    # Nor into a partition of that department when the other trays are shared.
    owned = merge(rack, created=[{"name": "rc1", "hostnames": hosts(rack, range(1, 19)), "owner": "vision"}])
    assert "across departments" in refused(caplog, rack, owned)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"removed": ["p1", "p9"]}, "partition p9 is gone"),
        ({"rack": "gb-r99"}, "no such rack"),
        (
            {"created": [{"name": "rc1", "hostnames": ["gb-r01-t01"], "owner": None}]},
            "gb-r01-t01 is not a tray of the rack",
        ),
        (
            {
                "created": [
                    {"name": "rc1", "hostnames": [f"gb-r02-t{s:02d}" for s in range(1, 18)], "owner": None}
                ]
            },
            "do not cover the re-carved trays exactly once",
        ),
        ({"removed": ["p1"]}, "would take trays of partitions not re-carved"),
    ],
)
def test_a_proposal_that_no_longer_matches_the_rack_is_refused(rack, caplog, change, words):
    assert words in refused(caplog, rack, merge(rack, **change))


def split_16_2(rack: Rack) -> dict:
    """p1 and p2 re-carved into partitions of 16 and 2 trays."""
    return merge(
        rack,
        created=[
            {"name": "rc1", "hostnames": hosts(rack, range(1, 17)), "owner": None},
            {"name": "rc2", "hostnames": hosts(rack, range(17, 19)), "owner": None},
        ],
    )


def test_a_partition_under_the_policys_smallest_is_refused(rack, caplog):
    recarving.set_policy(rack, enabled=True, smallest_trays=4, max_per_hour=2)
    assert "rc2 would have 2 trays, under the policy's 4" in refused(caplog, rack, split_16_2(rack))


def test_a_layout_slurm_cannot_express_is_refused_by_the_wizards_check(rack, caplog):
    """16 + 2 on gb-r02 beside the other racks' 18-tray partitions: not the smallest (2) times 2**k."""
    assert "power of two" in refused(caplog, rack, split_16_2(rack))


@pytest.mark.slow(reason="three admin pages and the API rendered: over 0.3 s on 2 cores")
def test_the_plan_pages_say_the_scheduler_made_it_and_why(rack, client_as, platform_admin):
    plan = recarve.apply(merge(rack))
    client = client_as(platform_admin)
    listed = client.get(reverse("integrations:plan-list")).content.decode()
    assert 'data-origin="scheduler"' in listed and "the scheduler" in listed and REASON in listed
    page = client.get(reverse("integrations:plan-detail", args=[plan.pk])).content.decode()
    assert "Why the scheduler re-carved:" in page and REASON in page
    assert 'By <span class="badge scheduler-badge">the scheduler</span>' in page
    audit = client.get(reverse("audit-list")).content.decode()
    assert "The scheduler" in audit and REASON in audit
    api = client.get(f"/api/v1/partition-plans/{plan.pk}/").json()
    assert (api["origin"], api["reason"], api["for_job_id"]) == ("scheduler", REASON, plan.for_job_id)
    assert api["created_by"] is None
