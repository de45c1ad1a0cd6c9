"""Partition plans see slice jobs (issue 30): a tray whose MIG slices run work is busy like one whose whole
GPUs do; a plan that changes its partition is refused without "drain first", names the slice job, and
"Requeue now" counts it among the jobs in the way (integrations.plans.service.holding_on)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from integrations.plans import requeue_now as busy
from integrations.plans import service as plans
from inventory.models import ComputeTray, MigDevice, Rack
from inventory.planning import Level, preset_layout
from scheduling.choices import JobState, PriorityClass
from scheduling.models import SliceAllocation
from tests.factories import make_department, make_job, mig_tray

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("local_target")]

TRAY = "gb-r01-t04"


@pytest.fixture
def slice_job(demo_inventory):
    """A training job holding two 1g.23gb devices of gb-r01-t04 (given all-balanced), as the pass places
    it."""
    mig_tray(TRAY)
    job = make_job(
        make_department("Ops"),
        "serve-slices",
        JobState.RUNNING,
        gpus=0,
        mig_profile="1g.23gb",
        mig_slices=2,
        mig_compute_slices=1,
        started_at=timezone.now(),
        time_limit_minutes=60,
        priority_class=PriorityClass.TRAIN,
        over_quota=True,
    )
    type(job).objects.filter(pk=job.pk).update(placement=[TRAY])
    for device in MigDevice.objects.filter(gpu__tray__hostname=TRAY, profile="1g.23gb").order_by("uuid")[:2]:
        SliceAllocation.objects.create(job=job, gpu=device.gpu, mig_uuid=device.uuid, profile=device.profile)
    return job


def test_a_plan_sees_the_slice_job_on_a_tray_it_changes_and_names_it(slice_job):
    rack = Rack.objects.get(name="gb-r01")
    slot = ComputeTray.objects.get(hostname=TRAY).slot
    (tray,) = [t for t in plans.rack_trays(rack) if t.slot == slot]
    assert tray.running_jobs == ("serve-slices",)
    assert 59 * 60 < tray.work_ends_in_s <= 60 * 60

    refused = plans.check(rack, preset_layout("2x9"))
    assert slot in [change.slot for change in refused.busy_trays]
    errors = [f.message for f in refused.findings if f.level == Level.ERROR]
    assert any("serve-slices" in message for message in errors), errors

    drained = plans.check(rack, preset_layout("2x9"), drain=True)
    summary = busy.summarize(rack, drained, timezone.now())
    assert [job.name for job in summary.requeued] == ["serve-slices"]
    assert summary.requeued[0].slots == (slot,)


def test_a_finished_slice_job_is_in_no_plans_way(slice_job):
    SliceAllocation.objects.filter(job=slice_job).delete()
    type(slice_job).objects.filter(pk=slice_job.pk).update(state=JobState.COMPLETED)
    rack = Rack.objects.get(name="gb-r01")
    assert not plans.check(rack, preset_layout("2x9")).busy_trays
