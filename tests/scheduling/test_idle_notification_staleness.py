"""The idle-GPU notification (scheduling.tasks record_quota_snapshots -> core.notifications) counts idle GPUs
by the one staleness rule (tenancy.activity.STALE_AFTER): GPUs whose telemetry stopped are "no data", so a
stale low row never makes a department's idle GPUs rise."""

from datetime import timedelta

import pytest
from django.utils import timezone

from core.access import Role
from core.models import InboxItem, NotificationChannel, NotificationEvent, NotificationSubscription
from scheduling.tasks import record_quota_snapshots
from tenancy.activity import STALE_AFTER
from tenancy.models import GpuActivity, QuotaSnapshot
from tests.factories import healthy_gpus, make_department, make_member, run_job

pytestmark = pytest.mark.django_db


def test_stale_low_rows_do_not_tell_of_idle_gpus(demo_inventory, django_user_model):
    alpha = make_department("Alpha", guaranteed_gpus=8)
    gpus = healthy_gpus(4)
    run_job(alpha, gpus, "alpha-train", started_at=timezone.now() - timedelta(hours=4))
    lead = make_member("lead-alpha", alpha, Role.LEAD)  # only a lead of Alpha is told of it
    NotificationSubscription.objects.create(
        name="alpha idle",
        channel=NotificationChannel.PORTAL,
        events=[NotificationEvent.IDLE_GPUS],
        owner=lead,
        scope=f"department:{alpha.slug}",
    )
    now = timezone.now()
    # Low for three hours, but the last sample is STALE_AFTER + 1 minute old: the exporter stopped.
    GpuActivity.objects.bulk_create(
        GpuActivity(
            gpu=gpu,
            utilization=2.0,
            sampled_at=now - STALE_AFTER - timedelta(minutes=1),
            low_since=now - timedelta(hours=3),
        )
        for gpu in gpus
    )
    record_quota_snapshots(now=now)
    assert QuotaSnapshot.objects.get(department=alpha).idle == 0
    assert not InboxItem.objects.exists()

    # The same rows freshly sampled: idle, and told once.
    GpuActivity.objects.filter(gpu__in=gpus[:3]).update(sampled_at=now + timedelta(minutes=4))
    record_quota_snapshots(now=now + timedelta(minutes=5))
    assert list(InboxItem.objects.filter(user=lead).values_list("subject", flat=True)) == [
        "Alpha has 3 idle GPUs"
    ]
