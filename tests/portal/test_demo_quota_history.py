"""The demo seeds 30 days of quota history (portal.demo.history.seed_history) the way the product keeps it
(tenancy.quota_history): five-minute rows for the last day, hourly rows before, within the retention; so
the department quota chart's 7-day and 30-day ranges show a week and a month, not one day."""

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from tenancy.activity import prune_history
from tenancy.models import Department, QuotaSnapshot
from tenancy.quota_history import FULL_RESOLUTION, downsample_quota_snapshots

pytestmark = pytest.mark.django_db

POINTS = re.compile(r"(\d+) stored points?")


@pytest.fixture
def seeded(settings, tmp_path):
    settings.VAR_DIR = tmp_path  # where seed_demo writes the demo logins
    call_command("seed_demo", "--racks", "3", stdout=StringIO())
    return timezone.now()


def stored_points(client, department, key: str) -> int:
    response = client.get(reverse("scheduling:quota-chart", args=[department.slug]), {"range": key})
    assert response.status_code == 200
    return int(POINTS.search(response.content.decode()).group(1))


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_30_day_chart_has_points_older_than_a_week(seeded, client_as, platform_admin):
    now = seeded
    client = client_as(platform_admin)
    for department in Department.objects.all():
        snapshots = department.quota_snapshots.order_by("taken_at")
        assert snapshots.filter(taken_at__lt=now - timedelta(days=7)).exists()
        assert snapshots.first().taken_at > now - timedelta(days=30)
        day, week, month = (stored_points(client, department, key) for key in ("24h", "7d", "30d"))
        assert 280 <= day < week < month
        assert month - week >= 22 * 24  # hourly rows for the 23 days before the week
        # The month drifts: neither flat nor the same as today all along.
        in_use = set(snapshots.values_list("in_use", flat=True))
        assert len(in_use) > 5, f"{department}: {sorted(in_use)}"


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_seeded_history_is_what_the_product_keeps(seeded):
    now = seeded
    cutoff = (now - FULL_RESOLUTION).replace(minute=0, second=0, microsecond=0)
    older = QuotaSnapshot.objects.filter(taken_at__lt=cutoff)
    assert older.exists()
    assert all(at.minute == 0 and at.second == 0 for at in older.values_list("taken_at", flat=True))
    per_department = Department.objects.count()
    assert QuotaSnapshot.objects.filter(taken_at__gte=cutoff).count() >= 280 * per_department
    # Already downsampled and within the retention: the product's own tasks find nothing to do.
    before = QuotaSnapshot.objects.count()
    assert downsample_quota_snapshots(now).merged == 0
    assert prune_history(now).quota_snapshots == 0
    assert QuotaSnapshot.objects.count() == before
