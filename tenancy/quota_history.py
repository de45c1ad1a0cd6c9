"""Department quota history kept for the dashboards' 30-day view: downsampled, then read for a range.

Scheduling records a QuotaSnapshot per department every five minutes (scheduling.tasks); TenancySettings
``quota_history_days`` (30 by default) bounds how long they are kept (tenancy.activity.prune_history). Thirty
days of five-minute rows is 8,640 rows per department, so the hourly telemetry task (tenancy.tasks
prune_telemetry) merges the rows older than a day into one row per department and hour:
``downsample_quota_snapshots``. A day at full resolution and 29 days hourly is 984 rows per department,
whatever the range the chart asks for.

A merged row sits at the start of its hour and holds the hour's figures averaged (rounded to whole GPUs):
the chart shows the hour's typical position, not one arbitrary five-minute moment of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from tenancy.models import QuotaSnapshot

FIELDS = ("guaranteed", "in_use", "in_quota", "borrowed", "fair_share", "pending_demand", "idle")
FULL_RESOLUTION = timedelta(days=1)
BATCH = 2000


@dataclass(frozen=True)
class QuotaDownsample:
    merged: int  # five-minute rows folded into hourly ones
    hourly: int  # hourly rows written


def _hour(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


@transaction.atomic
def downsample_quota_snapshots(now: datetime | None = None) -> QuotaDownsample:
    """Merge the snapshots older than FULL_RESOLUTION (whole hours only) into one row per department and
    hour. Rows already merged (alone in their hour, at its start) are left as they are: running it again
    changes nothing."""
    now = now or timezone.now()
    cutoff = _hour(now - FULL_RESOLUTION)
    groups: dict[tuple[int, datetime], list[dict]] = {}
    rows = (
        QuotaSnapshot.objects.filter(taken_at__lt=cutoff)
        .order_by("department_id", "taken_at")
        .values("pk", "department_id", "taken_at", *FIELDS)
    )
    for row in rows.iterator(chunk_size=BATCH):
        groups.setdefault((row["department_id"], _hour(row["taken_at"])), []).append(row)
    merged_rows, replaced = [], []
    for (department_id, hour), members in groups.items():
        if len(members) == 1 and members[0]["taken_at"] == hour:
            continue  # already hourly
        replaced.extend(member["pk"] for member in members)
        merged_rows.append(
            QuotaSnapshot(
                department_id=department_id,
                taken_at=hour,
                **{name: round(sum(m[name] for m in members) / len(members)) for name in FIELDS},
            )
        )
    for start in range(0, len(replaced), BATCH):
        QuotaSnapshot.objects.filter(pk__in=replaced[start : start + BATCH]).delete()
    QuotaSnapshot.objects.bulk_create(merged_rows, batch_size=BATCH)
    return QuotaDownsample(merged=len(replaced), hourly=len(merged_rows))


def snapshot_rows(department, start: datetime, end: datetime) -> list[dict]:
    """The department's snapshots between start and end, oldest first, as the quota chart reads them."""
    return list(
        QuotaSnapshot.objects.filter(department=department, taken_at__gte=start, taken_at__lte=end)
        .order_by("taken_at")
        .values("taken_at", *FIELDS)
    )
