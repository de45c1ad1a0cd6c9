"""Dashboards that are "now" (scheduling.views.gpu_life quota chart, tenancy.quota_history,
core.static_assets)."""

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from core.static_assets import SOURCE, plotly_name
from tenancy.models import QuotaSnapshot
from tenancy.quota_history import FIELDS, downsample_quota_snapshots

pytestmark = pytest.mark.django_db


def _snapshot(department, at, **values):
    figures = {name: 0 for name in FIELDS} | {"guaranteed": 16} | values
    return QuotaSnapshot.objects.create(department=department, taken_at=at, **figures)


def test_downsampling_keeps_a_day_of_five_minute_rows_and_hourly_before(department_a, department_b):
    now = datetime(2026, 11, 25, 12, 7, tzinfo=UTC)
    # Two days of five-minute snapshots for A, one old hour for B.
    for step in range(2 * 24 * 12):
        _snapshot(department_a, now - timedelta(minutes=5 * step), in_use=step % 12, borrowed=2)
    for minute in range(0, 60, 5):
        _snapshot(
            department_b, datetime(2026, 11, 20, 3, minute, tzinfo=UTC), in_use=10 if minute < 30 else 20
        )
    result = downsample_quota_snapshots(now=now)
    cutoff = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)  # a day back, at the hour
    recent = QuotaSnapshot.objects.filter(department=department_a, taken_at__gte=cutoff)
    old = QuotaSnapshot.objects.filter(department=department_a, taken_at__lt=cutoff).order_by("taken_at")
    assert recent.count() == 24 * 12 + 2  # untouched: 12:07 back to 12:02 yesterday, five minutes apart
    assert all(row.taken_at.minute == 0 and row.taken_at.second == 0 for row in old)
    assert old.count() == 24  # one per hour of the older day
    hour = old.get(taken_at=datetime(2026, 11, 24, 3, 0, tzinfo=UTC))
    assert (hour.borrowed, hour.guaranteed) == (2, 16)
    b_hour = QuotaSnapshot.objects.get(department=department_b)
    assert (b_hour.taken_at, b_hour.in_use) == (
        datetime(2026, 11, 20, 3, 0, tzinfo=UTC),
        15,
    )  # the hour's mean
    assert (result.merged, result.hourly) == (2 * 24 * 12 - (24 * 12 + 2) + 12, 24 + 1)
    # Again: nothing left to merge.
    again = downsample_quota_snapshots(now=now)
    assert (again.merged, again.hourly) == (0, 0)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_thirty_days_of_history_fit_a_bounded_number_of_rows(department_a):
    now = timezone.now().replace(second=0, microsecond=0)
    QuotaSnapshot.objects.bulk_create(
        QuotaSnapshot(
            department=department_a,
            taken_at=now - timedelta(minutes=5 * step),
            guaranteed=8,
            in_use=1,
            in_quota=1,
            borrowed=0,
            fair_share=8,
            pending_demand=0,
            idle=0,
        )
        for step in range(30 * 24 * 12)
    )
    downsample_quota_snapshots(now=now)
    assert QuotaSnapshot.objects.count() <= 24 * 12 + 1 + 30 * 24


def test_quota_chart_ranges_end_now_and_bad_range_says_so(client_as, lead_a, member_b, department_a):
    now = timezone.now()
    _snapshot(department_a, now - timedelta(days=6), in_use=3)
    _snapshot(department_a, now - timedelta(minutes=10), in_use=5)
    client = client_as(lead_a)
    url = reverse("scheduling:quota-chart", args=[department_a.slug])

    day = client.get(url)
    assert day.status_code == 200 and day["Cache-Control"] == "no-store"
    assert day.context["quota_points"] == 1 and day.context["quota_range"].key == "24h"
    week = client.get(url, {"range": "7d"})
    assert week.context["quota_points"] == 2
    html = week.content.decode()
    assert 'data-refresh-every="60"' in html and 'hx-trigger="refresh"' in html
    assert f'hx-get="{url}?range=7d"' in html  # the refresh keeps the range
    # The chart's last point is the live figures, at the time the page says it ends.
    end = week.context["quota_range"].end
    assert end >= now and f'datetime="{end.isoformat()}"' in html.replace("+00:00", "+00:00")
    assert end.isoformat()[:19] in html.split("data-plotly-figure=", 1)[1]

    bad = client.get(url, {"range": "1y"})
    assert bad.status_code == 200 and bad.context["quota_range"].key == "24h"
    assert "There is no time range" in bad.content.decode()
    # The dashboard page takes the same ?range=, and its links change it in the query string.
    page = client.get(reverse("scheduling:department-detail", args=[department_a.slug]), {"range": "30d"})
    assert page.context["quota_range"].key == "30d" and page.context["quota_points"] == 2
    assert f'hx-push-url="/tenancy/departments/{department_a.slug}/?range=7d"' in page.content.decode()
    assert client_as(member_b).get(url).status_code == 404


def test_plotly_is_served_under_a_hashed_name_and_cached_for_good(client_as, lead_a, department_a):
    _snapshot(department_a, timezone.now() - timedelta(minutes=3))
    page = (
        client_as(lead_a)
        .get(reverse("scheduling:department-detail", args=[department_a.slug]))
        .content.decode()
    )
    scripts = re.findall(r'<script src="([^"]*plotly[^"]*)"', page)
    assert scripts == [f"/static/{plotly_name()}"]  # once, and not the unhashed name
    assert re.fullmatch(r"plotly/plotly\.min\.[0-9a-f]{12}\.js", plotly_name())
    response = client_as(lead_a).get(f"/static/{plotly_name()}")
    assert response.status_code == 200
    assert "immutable" in response["Cache-Control"] and "max-age=315360000" in response["Cache-Control"]
    # The package's own file, byte for byte (collectstatic adds its gzip/Brotli forms in the image).
    assert int(response["Content-Length"]) == SOURCE.stat().st_size
    # The unhashed name is still served (other pages), but not for long.
    plain = client_as(lead_a).get("/static/plotly/plotly.min.js")
    assert plain.status_code == 200 and "immutable" not in plain["Cache-Control"]
