"""A GPU in MIG mode is not given whole, and its tray takes no job spanning trays (MIG instances have no
NVLink peer-to-peer): the pass, on the demo inventory (gb-r02 is carved p1/p2, 9 trays each)."""

import pytest

from inventory.choices import MigMode, TrayState
from inventory.models import ComputeTray, Gpu
from scheduling.choices import JobState
from scheduling.models import Allocation
from scheduling.services.passes import run_pass
from tenancy.services import schedulable_gpus_q, unschedulable_gpus
from tests.factories import make_department, make_job

pytestmark = pytest.mark.django_db


def test_a_mig_gpu_keeps_its_tray_out_of_gangs_and_is_never_given_whole(demo_inventory):
    research = make_department("Research", guaranteed_gpus=36)
    p1 = list(ComputeTray.objects.filter(rack__name="gb-r02", partition__name="p1").order_by("slot"))
    ComputeTray.objects.exclude(pk__in=[tray.pk for tray in p1]).update(
        state=TrayState.DRAIN, state_reason="maintenance"
    )
    mig_tray = p1[0]
    mig_gpu = Gpu.objects.get(tray=mig_tray, index=2)
    Gpu.objects.filter(pk=mig_gpu.pk).update(mig_mode=MigMode.ENABLED, mig_pending=MigMode.ENABLED)
    assert not Gpu.objects.filter(schedulable_gpus_q(), pk=mig_gpu.pk).exists()
    assert unschedulable_gpus().filter(pk=mig_gpu.pk).exists()

    # Nine trays of p1 are free but one holds a MIG GPU: a 9-tray gang does not fit; an 8-tray gang runs
    # on the other eight; a 3-GPU job may take the MIG tray's three whole GPUs, never the MIG one.
    nine = make_job(research, "nine", JobState.PENDING, gpus=36)
    run_pass()
    nine.refresh_from_db()
    assert nine.state == JobState.PENDING, nine.placement
    eight = make_job(research, "eight", JobState.PENDING, gpus=32)
    small = make_job(research, "small", JobState.PENDING, gpus=3)
    run_pass()
    for job in (eight, small):
        job.refresh_from_db()
        assert job.state in (JobState.STARTING, JobState.RUNNING), job.pending_reason
    assert mig_tray.hostname not in eight.placement
    assert small.placement == [mig_tray.hostname]
    assert not Allocation.objects.filter(gpu=mig_gpu).exists()
