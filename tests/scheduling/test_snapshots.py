"""snapshot_quotas: one QuotaSnapshot per department per minute, with the dashboards' figures, idempotent."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from scheduling.choices import JobState
from scheduling.models import Allocation, Job
from scheduling.tasks import record_quota_snapshots, snapshot_quotas
from tenancy.models import GpuActivity, QuotaSnapshot
from tests.factories import healthy_gpus, make_department, make_job, run_job

pytestmark = pytest.mark.django_db

FIELDS = ("guaranteed", "in_use", "in_quota", "borrowed", "fair_share", "pending_demand", "idle")


def values(department, taken_at) -> dict:
    return QuotaSnapshot.objects.filter(department=department, taken_at=taken_at).values(*FIELDS).get()


@pytest.fixture
def departments(demo_inventory):
    """Alpha (guarantee 16, limit 28): 24 GPUs running (a 16-GPU job in quota, a newer 8-GPU one
    borrowing), 2 of them idle, 16 pending. Beta (guarantee 8): nothing running, 4 pending. Gamma: no
    guarantee, no work."""
    alpha = make_department("Alpha", guaranteed_gpus=16, limit_gpus=28)
    beta = make_department("Beta", guaranteed_gpus=8, priority=2)
    gamma = make_department("Gamma", guaranteed_gpus=0)
    gpus = healthy_gpus(24)
    run_job(alpha, gpus[:16], "alpha-train", started_at=timezone.now() - timedelta(hours=2))
    run_job(alpha, gpus[16:], "alpha-borrow", started_at=timezone.now() - timedelta(hours=1))
    now = timezone.now()
    GpuActivity.objects.bulk_create(
        [
            GpuActivity(gpu=gpu, utilization=0.5, sampled_at=now, low_since=now - timedelta(hours=1))
            for gpu in gpus[:2]
        ]
    )
    make_job(alpha, "alpha-queued", JobState.PENDING, gpus=16)
    make_job(beta, "beta-queued", JobState.PENDING, gpus=4)
    return alpha, beta, gamma


def test_snapshot_values(departments):
    alpha, beta, gamma = departments
    at = timezone.now().replace(second=56, microsecond=789)
    assert record_quota_snapshots(now=at) == 3
    minute = at.replace(second=0, microsecond=0)
    assert set(QuotaSnapshot.objects.values_list("taken_at", flat=True)) == {minute}
    # Alpha: demand 24 + 16 = 40, capped by its limit of 28: 16 in quota + 12 borrowed of the surplus.
    assert values(alpha, minute) == {
        "guaranteed": 16,
        "in_use": 24,
        "in_quota": 16,
        "borrowed": 8,
        "fair_share": 28,
        "pending_demand": 16,
        "idle": 2,
    }
    # Beta: its 4 pending GPUs are within its guarantee.
    assert values(beta, minute) == {
        "guaranteed": 8,
        "in_use": 0,
        "in_quota": 0,
        "borrowed": 0,
        "fair_share": 4,
        "pending_demand": 4,
        "idle": 0,
    }
    assert values(gamma, minute) == dict.fromkeys(FIELDS, 0)


def test_same_minute_twice_updates_the_same_rows(departments):
    alpha, beta, _ = departments
    first = timezone.now().replace(second=5, microsecond=0)
    record_quota_snapshots(now=first)
    ids = set(QuotaSnapshot.objects.values_list("pk", flat=True))
    # Beta's job starts within the same minute: the minute's row is brought up to date, not duplicated.
    job = Job.objects.get(name="beta-queued")
    job.state = JobState.RUNNING
    job.save()
    Allocation.objects.bulk_create([Allocation(job=job, gpu=gpu) for gpu in healthy_gpus(4, skip=24)])
    record_quota_snapshots(now=first + timedelta(seconds=50))
    assert QuotaSnapshot.objects.count() == 3
    assert set(QuotaSnapshot.objects.values_list("pk", flat=True)) == ids
    row = values(beta, first.replace(second=0))
    assert (row["in_use"], row["in_quota"], row["pending_demand"]) == (4, 4, 0)
    # Nothing changed: running again changes nothing.
    record_quota_snapshots(now=first + timedelta(seconds=55))
    assert values(beta, first.replace(second=0)) == row

    record_quota_snapshots(now=first + timedelta(minutes=1))
    assert QuotaSnapshot.objects.count() == 6
    assert QuotaSnapshot.objects.filter(department=alpha).count() == 2


def test_the_task_snapshots_now(departments):
    before = timezone.now().replace(second=0, microsecond=0)
    assert snapshot_quotas.delay().get() == 3
    assert snapshot_quotas() == 3  # the same minute (or the next one, if the clock just ticked over)
    taken = set(QuotaSnapshot.objects.values_list("taken_at", flat=True))
    assert all(at.second == 0 and at.microsecond == 0 and at >= before for at in taken)
    assert QuotaSnapshot.objects.count() == 3 * len(taken)


def test_snapshots_match_the_dashboard(client_as, departments, platform_admin):
    """The chart's last point is what the cards show."""
    alpha = departments[0]
    record_quota_snapshots()
    client = client_as(platform_admin)
    markup = client.get(f"/tenancy/departments/{alpha.slug}/").content.decode()
    latest = QuotaSnapshot.objects.filter(department=alpha).latest("taken_at")
    for name, field in [("in-use", "in_use"), ("borrowed", "borrowed"), ("fair-share", "fair_share")]:
        assert f'data-figure="{name}">{getattr(latest, field)}<' in markup


def test_beat_runs_it_every_five_minutes():
    entries = [
        entry for entry in settings.CELERY_BEAT_SCHEDULE.values() if entry["task"] == snapshot_quotas.name
    ]
    assert entries == [{"task": "scheduling.tasks.snapshot_quotas", "schedule": 300.0}]
