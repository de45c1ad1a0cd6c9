"""Running work on a failing tray (scheduling.requeue, wired by integrations.requeue): a tray drained by a
fault has its running jobs handled by their class's policy, as a whole gang; a degraded NVLink partition
takes no new job spanning trays; trays changed in bulk (a partition plan) are pushed to the schedulers.

The drains here go through the health rules (an XID 79 event recorded on the tray), as in production; the
backends are the embedded renderer (no outside server): tests/integration/test_fault_requeue_slurm.py and
tests/integrations/kubernetes/test_fault_requeue.py run the same against real Slurm and Kubernetes."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from core.audit import update_recorded
from core.models import AuditEvent, Notification, NotificationEvent
from core.notifications.subscriptions import create_subscription
from inventory.choices import TrayState
from inventory.health.actions import drain_tray
from inventory.health.ingest import record_admin_event
from inventory.models import ComputeTray, HealthSettings, NVLinkPartition
from scheduling import requeue
from scheduling.choices import FaultAction, JobEventKind, JobState, PriorityClass
from scheduling.models import Allocation, BackendCancel, FaultPolicy, Job
from scheduling.requeue import REQUEUE, SIGNAL, WAIT, decide
from scheduling.services.passes import run_pass
from tests.factories import free_trays, make_department, make_job

pytestmark = pytest.mark.django_db

GPU_UUID = "GPU-3f1c9a2e-0b7d-4c55-9e61-1a2b3c4d5e6f"
WORK = {"script": "#!/bin/bash\nsleep 60\n"}


# --- the pure policy ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "maintenance", "in_backend", "pending", "what"),
    [
        (FaultAction.STOP, False, True, False, REQUEUE),
        (FaultAction.CHECKPOINT, False, True, False, SIGNAL),
        (FaultAction.CHECKPOINT, False, False, False, REQUEUE),  # nothing to checkpoint yet
        (FaultAction.CHECKPOINT, False, True, True, WAIT),  # already asked: the first deadline stands
        (FaultAction.WAIT, False, True, False, WAIT),
        (FaultAction.STOP, True, True, False, WAIT),  # maintenance lets jobs finish, whatever the class
        (FaultAction.CHECKPOINT, True, True, False, WAIT),
    ],
)
def test_the_policy_decides_per_class_and_maintenance_always_waits(
    action, maintenance, in_backend, pending, what
):
    decision = decide(action, 300, maintenance=maintenance, in_backend=in_backend, signal_pending=pending)
    assert decision.what == what
    if what == SIGNAL:
        assert decision.grace_s == 300


def test_reasons_are_read_as_causes_and_maintenance():
    reason = f"rackplane: XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS) on {GPU_UUID} at 2026-11-24 10:00:00 UTC"
    assert requeue.cause(reason) == f"XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS) on {GPU_UUID}"
    assert requeue.is_maintenance("rackplane: alice: maintenance: fan swap")
    assert requeue.is_maintenance("rackplane: alice: maintenance (2026-11-25 10:00 to 12:00 UTC): fans")
    # The tray page's maintenance with a window (tray_actions.maintenance_reason) waits for jobs too.
    assert requeue.is_maintenance(
        "rackplane: alice: maintenance window 2026-11-25 10:00 to 2026-11-25 12:00 UTC: x"
    )
    assert not requeue.is_maintenance("rackplane: alice: the maintenance window slipped, GPU 2 ECC errors")
    assert not requeue.is_maintenance(reason)


# --- through the health rules ---------------------------------------------------------------------------


@pytest.fixture
def research(demo_inventory):
    return make_department("Research", guaranteed_gpus=200)


def up_trays(rack: str, count: int) -> list[ComputeTray]:
    return list(ComputeTray.objects.filter(rack__name=rack, state=TrayState.UP).order_by("slot")[:count])


def xid_79(tray: ComputeTray, capture) -> None:
    """An XID 79 on the tray's first GPU, judged by the default rules (drain), the commit's callbacks run."""
    uuid = tray.gpus.order_by("index").first().uuid
    with capture(execute=True):
        record_admin_event(tray, code="", xid=79, gpu_uuid=uuid, message="NVRM: Xid 79, fell off")
    tray.refresh_from_db()
    assert tray.state == TrayState.DRAIN, tray.state_reason


def set_policy(priority_class: str, action: str, grace_s: int = 300) -> None:
    FaultPolicy.objects.update_or_create(
        priority_class=priority_class, defaults={"action": action, "grace_s": grace_s}
    )


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_gang_on_a_failing_tray_is_requeued_whole_with_its_place_in_line_and_history(
    research, django_capture_on_commit_callbacks, admin_client
):
    set_policy(PriorityClass.TRAIN, FaultAction.STOP)
    create_subscription(name="on-call", channel="email", email="oncall@example.com", events=["job_requeued"])
    trays = up_trays("gb-r03", 2)
    job = make_job(
        research, "gang", trays=trays, priority_class=PriorityClass.TRAIN, backend_id="1234", work=WORK
    )
    submitted = job.created_at
    other = make_job(research, "elsewhere", trays=up_trays("gb-r03", 4)[2:3], work=WORK)

    xid_79(trays[1], django_capture_on_commit_callbacks)

    job.refresh_from_db()
    assert job.state in (
        JobState.PENDING,
        JobState.STARTING,
        JobState.RUNNING,
    )  # requeued, maybe placed again
    assert job.created_at == submitted  # its place in line
    assert job.preemptions == 1 and job.fault_requeues == 1
    requeued = job.events.get(kind=JobEventKind.REQUEUED)
    assert requeued.message == (
        f"requeued: XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS) on {trays[1].gpus.order_by('index').first().uuid} "
        f"drained {trays[1].hostname} (policy stop)"
    )
    assert requeued.placement == [t.hostname for t in trays]
    # The whole gang: its backend job is stopped and none of its old GPUs is held, not only the failed tray's.
    assert BackendCancel.objects.filter(job=job, backend_id="1234").exists()
    assert not Allocation.objects.filter(job=job, gpu__tray__in=trays).exists()
    if job.placement:  # the pass that followed placed it again: never on the drained tray
        assert trays[1].hostname not in job.placement
    [note] = Notification.objects.filter(event=NotificationEvent.JOB_REQUEUED)
    assert f"#{job.pk}" in note.subject and trays[1].hostname in note.subject
    assert note.payload["trays"] == [t.hostname for t in trays] and note.payload["requeues"] == 1
    # The requeue is in the audit log (as a pass's preemption is).
    audited = AuditEvent.objects.filter(object_type="scheduling.job", object_id=str(job.pk))
    assert any(
        (e.before or {}).get("state") == "running" and (e.after or {}).get("fault_requeues") == 1
        for e in audited
    )
    # Its page says what happened: the history, and (while it waits) that it kept its place.
    Job.objects.filter(pk=job.pk).update(state=JobState.PENDING)
    page = admin_client.get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    assert requeued.message in re.sub(r"<[^>]+>", "", page)  # its data may be marked translate="no"
    assert "It was requeued 1 time after a fault on its trays and kept its place in the queue" in page
    # A job on another tray runs on.
    other.refresh_from_db()
    assert other.state == JobState.RUNNING and other.preemptions == 0


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_checkpoint_signals_first_and_requeues_when_the_grace_period_ends(
    research, django_capture_on_commit_callbacks, admin_client
):
    set_policy(PriorityClass.TRAIN, FaultAction.CHECKPOINT, grace_s=300)
    [tray] = up_trays("gb-r03", 1)
    job = make_job(research, "ckpt", trays=[tray], priority_class=PriorityClass.TRAIN, backend_id="77")

    xid_79(tray, django_capture_on_commit_callbacks)

    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.requeue_at is not None
    assert timedelta(seconds=290) < job.requeue_at - timezone.now() <= timedelta(seconds=300)
    fault = job.events.get(kind=JobEventKind.FAULT)
    assert "asked to checkpoint (SIGUSR1)" in fault.message and tray.hostname in fault.message
    assert not job.events.filter(kind=JobEventKind.REQUEUED).exists()
    assert requeue.requeue_due() == []  # not yet
    # Its page says it runs on until the moment its history names (the backend still says "running").
    page = admin_client.get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    note = re.search(r'<p class="note note-warn" data-requeue-at="([^"]+)">(.*?)</p>', page, re.S)
    assert note and note.group(1) == job.requeue_at.isoformat(), page
    assert "Asked to checkpoint: it keeps running until" in note.group(2)

    with django_capture_on_commit_callbacks(execute=True):
        assert requeue.requeue_due(now=job.requeue_at + timedelta(seconds=1)) == [job.pk]
    job.refresh_from_db()
    assert job.fault_requeues == 1 and job.requeue_at is None
    assert (
        "data-requeue-at"
        not in admin_client.get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    )
    assert job.events.get(kind=JobEventKind.REQUEUED).message.endswith(
        f"drained {tray.hostname} (policy checkpoint, grace 5 min)"
    )


def test_a_job_that_ends_within_its_grace_period_is_not_requeued(
    research, django_capture_on_commit_callbacks
):
    set_policy(PriorityClass.TRAIN, FaultAction.CHECKPOINT, grace_s=60)
    [tray] = up_trays("gb-r03", 1)
    job = make_job(research, "ends", trays=[tray], priority_class=PriorityClass.TRAIN, backend_id="78")
    xid_79(tray, django_capture_on_commit_callbacks)
    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED)
    assert requeue.requeue_due(now=timezone.now() + timedelta(minutes=5)) == []
    job.refresh_from_db()
    assert job.fault_requeues == 0


def test_wait_and_maintenance_let_running_jobs_finish(
    research, django_capture_on_commit_callbacks, platform_admin
):
    set_policy(PriorityClass.INFERENCE, FaultAction.WAIT)
    first, second = up_trays("gb-r03", 2)
    serving = make_job(
        research, "serve", trays=[first], priority_class=PriorityClass.INFERENCE, backend_id="9"
    )
    built = make_job(research, "build", trays=[second], priority_class=PriorityClass.BUILD, backend_id="10")

    xid_79(first, django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):  # build's policy is stop, but this is maintenance
        drain_tray(second, "maintenance: fan swap", actor=platform_admin)

    for job in (serving, built):
        job.refresh_from_db()
        assert job.state == JobState.RUNNING and job.fault_requeues == 0
        assert Allocation.objects.filter(job=job).exists()
        assert "left to finish" in job.events.get(kind=JobEventKind.FAULT).message
    assert "maintenance lets running jobs finish" in built.events.get(kind=JobEventKind.FAULT).message


def test_an_admins_drain_for_a_fault_follows_the_policy(
    research, django_capture_on_commit_callbacks, platform_admin
):
    set_policy(PriorityClass.BUILD, FaultAction.STOP)
    [tray] = up_trays("gb-r03", 1)
    job = make_job(research, "build", trays=[tray], priority_class=PriorityClass.BUILD, backend_id="11")
    with django_capture_on_commit_callbacks(execute=True):
        drain_tray(tray, "GPU 2 ECC errors reported by the technician", actor=platform_admin)
    job.refresh_from_db()
    assert job.fault_requeues == 1
    assert "GPU 2 ECC errors reported by the technician drained" in job.events.get(kind="requeued").message


def test_the_policies_are_shown_on_the_health_settings_page(admin_client, db):
    HealthSettings.load()
    page = admin_client.get("/admin/inventory/healthsettings/1/change/").content.decode()
    assert "Running work on a failing tray" in page
    assert (
        "Training (preemptible): Signal it to checkpoint, requeue after a grace period (SIGUSR1, grace 5 min)"
        in page
    )
    assert "/admin/scheduling/faultpolicy/" in page


# --- degraded partitions in placement -------------------------------------------------------------------


def test_a_degraded_partition_takes_no_new_job_spanning_trays_and_the_reason_says_so(
    research, django_capture_on_commit_callbacks
):
    # Whole free trays: gb-r01 15, gb-r02 2x9, gb-r03 18. An NVLink fault (XID 149) on a gb-r03 tray drains
    # it and degrades gb-r03's partition: a 16-tray job would fit only there.
    rack3 = [t for t in free_trays(100) if t.rack.name == "gb-r03"]
    assert len(rack3) == 18
    uuid = rack3[4].gpus.order_by("index").first().uuid
    with django_capture_on_commit_callbacks(execute=True):
        record_admin_event(rack3[4], code="", xid=149, gpu_uuid=uuid)
    partition = NVLinkPartition.objects.get(pk=rack3[0].partition_id)
    assert partition.degraded_reason
    rack3 = [t for t in rack3 if ComputeTray.objects.get(pk=t.pk).state == TrayState.UP]
    job = make_job(research, "sixteen", state=JobState.PENDING, gpus=64, topology="partition", work=WORK)

    run_pass()
    job.refresh_from_db()
    assert job.state == JobState.PENDING
    assert "gb-r03 default has 17 free trays but is degraded (rackplane: XID 149" in job.pending_reason, (
        job.pending_reason
    )
    assert "until it recovers" in job.pending_reason

    NVLinkPartition.objects.filter(pk=partition.pk).update(degraded_reason="", degraded_since=None)
    run_pass()
    job.refresh_from_db()
    assert job.state in (JobState.STARTING, JobState.RUNNING), job.pending_reason
    assert len(job.placement) == 16 and set(job.placement) <= {t.hostname for t in rack3}


def test_a_smaller_partition_job_is_placed_outside_the_degraded_partition(
    research, django_capture_on_commit_callbacks
):
    # gb-r02 is carved 2x9: degrade its first partition; a 9-tray job goes to the second.
    r02 = list(ComputeTray.objects.filter(rack__name="gb-r02").order_by("slot"))
    first, second = r02[0].partition_id, r02[9].partition_id
    assert first != second
    NVLinkPartition.objects.filter(rack__name__in=["gb-r01", "gb-r03"]).update(
        degraded_reason="rackplane: NVLink fault (test)"
    )
    NVLinkPartition.objects.filter(pk=first).update(degraded_reason="rackplane: XID 149 on gb-r02-t01")
    job = make_job(research, "nine", state=JobState.PENDING, gpus=36, topology="partition", work=WORK)
    run_pass()
    job.refresh_from_db()
    assert job.state in (JobState.STARTING, JobState.RUNNING), job.pending_reason
    assert {t.partition_id for t in ComputeTray.objects.filter(hostname__in=job.placement)} == {second}


# --- bulk (partition plan) drains reach the schedulers ---------------------------------------------------


def test_trays_drained_in_bulk_are_pushed_to_the_schedulers_one_by_one(
    demo_inventory, django_capture_on_commit_callbacks
):
    trays = up_trays("gb-r02", 3)
    untouched = up_trays("gb-r02", 4)[3]
    with django_capture_on_commit_callbacks(execute=True):
        update_recorded(
            ComputeTray.objects.filter(pk__in=[t.pk for t in trays]),
            state=TrayState.DRAIN,
            state_reason="partition plan #4: re-carving gb-r02",
        )
    # integrations.trays.sync_tray ran for each (no scheduler target is enabled here: none answered).
    synced = ComputeTray.objects.filter(scheduler_state_at__isnull=False)
    assert sorted(synced.values_list("pk", flat=True)) == sorted(t.pk for t in trays)
    assert untouched.pk not in synced.values_list("pk", flat=True)
