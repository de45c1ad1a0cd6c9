"""The pass acts on current facts: what asks for a pass (scheduling.signals), the in-quota/borrowed standing
every pass recomputes, and dedicated partitions lent only as borrowed work (the Inference case).

On the demo inventory: gb-r01 and gb-r03 have one default partition each, gb-r02 is carved p1/p2 (9 trays)."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from core.audit import bulk_changed
from core.models import AuditEvent
from inventory.choices import GpuHealth, MigMode, TrayState
from inventory.models import ComputeTray, Gpu, NVLinkPartition
from scheduling.choices import JobEventKind, JobState, PriorityClass
from scheduling.models import Job, JobEvent, SchedulerState, SchedulingRequest
from scheduling.services.passes import run_pass
from scheduling.tasks import schedule_jobs
from tenancy.models import DedicatedPartition
from tenancy.services import dedicate_partition
from tests.factories import free_trays, make_department, make_job

pytestmark = pytest.mark.django_db


def requests_made(change) -> list[str]:
    """The reasons of the pass requests `change()` made, in a block of its own (they coalesce per block)."""
    SchedulingRequest.objects.all().delete()
    with transaction.atomic():
        change()
    return list(SchedulingRequest.objects.values_list("reason", flat=True))


def test_only_changes_a_decision_depends_on_ask_for_a_pass(demo_inventory):
    department = make_department("Research", guaranteed_gpus=16)
    tray = ComputeTray.objects.filter(state=TrayState.UP).order_by("hostname").first()
    gpu = Gpu.objects.filter(tray=tray).order_by("index").first()

    def save(instance, update_fields=None, **values):
        def change():
            for name, value in values.items():
                setattr(instance, name, value)
            instance.save(update_fields=update_fields)

        return change

    # A discovery report that changes nothing the scheduler reads, and a no-op save: no pass.
    assert requests_made(save(tray, ["last_report_at"], last_report_at=timezone.now())) == []
    assert requests_made(save(tray)) == []
    assert requests_made(save(department, name="Research and Development")) == []
    assert requests_made(save(gpu, serial="1650924060001")) == []
    # Each decision input: one request naming what changed.
    assert requests_made(save(tray, state=TrayState.DRAIN, state_reason="XID 79")) == [
        f"compute tray {tray.hostname}: state"
    ]
    assert requests_made(save(tray, ["fabric_problems"], fabric_problems=["GPU 1 is registering"])) == [
        f"compute tray {tray.hostname}: fabric_problems"
    ]
    assert requests_made(save(gpu, health=GpuHealth.UNHEALTHY)) == [f"GPU {gpu.uuid}: health"]
    assert requests_made(save(gpu, reported_clique_id=7)) == [f"GPU {gpu.uuid}: reported_clique_id"]
    assert requests_made(save(gpu, mig_mode=MigMode.ENABLED)) == [f"GPU {gpu.uuid}: mig_mode"]
    assert requests_made(save(department, guaranteed_gpus=24, priority=2)) == [
        "department Research and Development: guaranteed_gpus, priority"
    ]
    tier = NVLinkPartition.objects.get(rack__name="gb-r02", name="p2")
    [added] = requests_made(lambda: DedicatedPartition.objects.create(department=department, partition=tier))
    assert added.endswith("added")
    [deleted] = requests_made(lambda: DedicatedPartition.objects.filter(partition=tier).delete())
    assert deleted.endswith("deleted")
    # Bulk changes (core.audit.bulk_changed): the same fields, the same rule.
    moved = {tray.pk: {"partition": (tier.pk, None)}}
    assert requests_made(lambda: bulk_changed.send(sender=ComputeTray, changes=moved)) == [
        "1 compute trays: partition"
    ]
    reported = {tray.pk: {"reported_clique": ("a.1", "a.2")}}
    assert requests_made(lambda: bulk_changed.send(sender=ComputeTray, changes=reported)) == []

    # Coalesced: a plan changing 18 trays in one transaction asks once.
    def drain_rack():
        for each in ComputeTray.objects.filter(rack__name="gb-r03"):
            each.state, each.state_reason = TrayState.DRAIN, "plan #1"
            each.save()

    assert len(requests_made(drain_rack)) == 1


def test_a_changed_guarantee_restands_the_running_jobs_at_the_pass_it_asks_for(
    demo_inventory, django_capture_on_commit_callbacks
):
    research = make_department("Research", guaranteed_gpus=8)
    trays = free_trays(6)
    now = timezone.now()
    old, mid, new = (
        make_job(research, name, trays=trays[2 * i : 2 * i + 2], started_at=now - timedelta(hours=3 - i))
        for i, name in enumerate(["old", "mid", "new"])
    )
    Job.objects.filter(pk__in=[mid.pk, new.pk]).update(over_quota=True)  # borrowed when they started

    with django_capture_on_commit_callbacks(execute=True):
        research.guaranteed_gpus = 16
        research.save()
    flags = dict(Job.objects.values_list("name", "over_quota"))
    assert flags == {"old": False, "mid": False, "new": True}
    [event] = JobEvent.objects.filter(job=mid, kind=JobEventKind.QUOTA)
    assert event.message.startswith("now in quota: research's guarantee is 16 GPUs (in-quota share now 16)")
    audit = AuditEvent.objects.get(object_type="scheduling.job", object_id=str(mid.pk), action="update")
    assert (audit.before, audit.after) == ({"over_quota": True}, {"over_quota": False})
    assert not JobEvent.objects.filter(job__in=[old, new], kind=JobEventKind.QUOTA).exists()

    with django_capture_on_commit_callbacks(execute=True):
        research.guaranteed_gpus = 8
        research.save()
    assert dict(Job.objects.values_list("name", "over_quota")) == {"old": False, "mid": True, "new": True}
    latest = JobEvent.objects.filter(job=mid, kind=JobEventKind.QUOTA).latest("pk")
    assert latest.message.startswith("now borrowed (preemptible): research's guarantee is 8 GPUs")


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_inference_reclaims_its_dedicated_partition_from_researchs_borrowed_job_first(demo_inventory):
    """The Inference case: Inference owns a dedicated partition; Research's 36-GPU training job may run there
    only as borrowed work; Inference's in-quota job then preempts it before any other borrower."""
    tier = NVLinkPartition.objects.get(rack__name="gb-r02", name="p2")  # 9 trays
    tier_trays = set(tier.trays.values_list("pk", flat=True))
    shared = [t for t in free_trays(100) if t.pk not in tier_trays]
    vision_trays, platform_trays = shared[:2], shared[2:]
    inference = make_department("Inference", guaranteed_gpus=36)
    dedicate_partition(inference, tier)
    platform = make_department("Platform", guaranteed_gpus=4 * len(platform_trays), priority=1)
    research = make_department("Research", guaranteed_gpus=0)
    vision = make_department("Vision", guaranteed_gpus=0, priority=-1)
    now = timezone.now()
    make_job(platform, "platform", trays=platform_trays, started_at=now - timedelta(hours=2))
    borrower = make_job(vision, "vision-borrower", trays=vision_trays, started_at=now, over_quota=True)

    # Beyond Research's guarantee (0): borrowed, and the only room left is Inference's partition.
    research_job = make_job(research, "research-train", state=JobState.PENDING, gpus=36, topology="partition")
    run_pass()
    research_job.refresh_from_db()
    assert research_job.state == JobState.STARTING and research_job.over_quota is True
    assert set(
        ComputeTray.objects.filter(hostname__in=research_job.placement).values_list("pk", flat=True)
    ) == (tier_trays)

    # Inference's in-quota work reclaims its partition: Research's job goes first, although Vision's
    # borrowed job has the lowest priority and started last.
    serving = make_job(
        inference,
        "inference-serve",
        state=JobState.PENDING,
        gpus=16,
        topology="partition",
        priority_class=PriorityClass.INFERENCE,
    )
    run_pass()
    research_job.refresh_from_db()
    serving.refresh_from_db()
    borrower.refresh_from_db()
    assert research_job.state == JobState.PENDING and research_job.preemptions == 1
    assert serving.state == JobState.STARTING and serving.over_quota is False
    assert borrower.state == JobState.RUNNING


def test_passes_asked_for_in_a_row_run_once_for_all_of_them(
    demo_inventory, django_capture_on_commit_callbacks
):
    """Eighteen node reports each ask for a pass in their own transaction; the first task's pass answers all
    of them, and the tasks after it find nothing left to do (no pass, no write)."""
    SchedulingRequest.objects.all().delete()
    trays = list(ComputeTray.objects.filter(rack__name="gb-r01").order_by("slot"))
    with django_capture_on_commit_callbacks() as asked:
        for tray in trays:
            with transaction.atomic():
                tray.fabric_problems = [f"GPU 0 of {tray.hostname} is registering"]
                tray.save()
    assert SchedulingRequest.objects.count() == len(trays) == 18
    assert len(asked) == 18  # one task message each

    first = schedule_jobs()
    assert first is not None and SchedulingRequest.objects.count() == 0
    state = SchedulerState.objects.get(pk=1)
    for _ in range(17):
        assert schedule_jobs() is None
    assert SchedulerState.objects.get(pk=1).last_pass_at == state.last_pass_at
