"""GPU activity in the database: record utilization samples and prune history.

"Idle" and "free" (which need the jobs holding GPUs) are defined in scheduling.usage:

* An **idle** GPU is allocated to a running job and its utilization has stayed under
  ``TenancySettings.idle_threshold_percent`` for at least ``idle_window_minutes`` (``GpuActivity.low_since``
  marks the start of the current run of low samples).
* A **free** GPU is schedulable (tray up, not unhealthy) and allocated to no job. A free GPU is never idle,
  however low its utilization: nobody is wasting it.

Recording is bulk: a fixed handful of queries per call whatever the number of samples (one node's four
GPUs or a whole rack's 72), because the scrape runs every minute for every exporter.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.utils import timezone

from inventory.models import Gpu
from tenancy.models import GpuActivity, GpuUtilization, QuotaSnapshot, TenancySettings
from tenancy.telemetry import Sample

# Parameters per IN (...) list: far below SQLite's 32,766 host parameters, and a full rack is 72 GPUs.
CHUNK = 2000


@dataclass(frozen=True)
class RecordResult:
    recorded: int  # GPUs whose sample was stored
    unknown_gpus: tuple[str, ...] = ()  # UUIDs not in the inventory (reported, never created)
    skipped: int = 0  # samples dropped: a second sample of one GPU in the same call, folded into the first
    stale: int = 0  # recorded into history only: the GPU already has a newer latest sample

    def as_dict(self) -> dict:
        return {"recorded": self.recorded, "unknown_gpus": list(self.unknown_gpus), "skipped": self.skipped}


@dataclass(frozen=True)
class PruneResult:
    utilization_buckets: int
    quota_snapshots: int
    cutoffs: dict[str, datetime] = field(default_factory=dict)


def bucket_start(at: datetime) -> datetime:
    """The start of the 5-minute bucket `at` falls in (aligned to the epoch: :00, :05, :10 ...), in UTC."""
    epoch = int(at.timestamp())
    return datetime.fromtimestamp(epoch - epoch % GpuUtilization.BUCKET_SECONDS, tz=UTC)


def _chunks(values: list, size: int = CHUNK):
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _per_gpu(samples: Iterable[Sample]) -> tuple[dict[str, float], int]:
    """One value per UUID: the highest, so two rows for one GPU never make it look idler than it is."""
    values: dict[str, float] = {}
    duplicates = 0
    for sample in samples:
        if sample.uuid in values:
            duplicates += 1
            values[sample.uuid] = max(values[sample.uuid], sample.value)
        else:
            values[sample.uuid] = sample.value
    return values, duplicates


def record_samples(samples: Iterable[Sample], at: datetime | None = None) -> RecordResult:
    """Store utilization samples taken at `at` (default: now): latest value, low-since run, 5-minute bucket.

    Unknown UUIDs are counted and returned, never created: the inventory learns GPUs from discovery reports.
    Rows of existing GPUs are locked (PostgreSQL) so two exporters' pushes for one GPU cannot interleave
    their read-modify-write of the running mean.
    """
    values, duplicates = _per_gpu(samples)
    if not values:
        return RecordResult(recorded=0, skipped=duplicates)
    return _record(values, duplicates, at or timezone.now())


@transaction.atomic
def _record(values: dict[str, float], duplicates: int, at: datetime) -> RecordResult:
    threshold = TenancySettings.load().idle_threshold_percent

    gpu_of: dict[str, int] = {}
    for chunk in _chunks(sorted(values)):
        gpu_of.update(Gpu.objects.filter(uuid__in=chunk).values_list("uuid", "pk"))
    unknown = tuple(sorted(uuid for uuid in values if uuid not in gpu_of))
    by_gpu = {pk: values[uuid] for uuid, pk in gpu_of.items()}
    if not by_gpu:
        return RecordResult(recorded=0, unknown_gpus=unknown, skipped=duplicates)
    gpu_ids = sorted(by_gpu)  # a fixed lock order, so concurrent recorders cannot deadlock

    latest: dict[int, tuple[datetime, datetime | None]] = {}
    for chunk in _chunks(gpu_ids):
        rows = (
            GpuActivity.objects.select_for_update()
            .filter(gpu_id__in=chunk)
            .order_by("gpu_id")
            .values_list("gpu_id", "sampled_at", "low_since")
        )
        latest.update((gpu_id, (sampled_at, low_since)) for gpu_id, sampled_at, low_since in rows)

    activity, stale = [], 0
    for gpu_id in gpu_ids:
        value = by_gpu[gpu_id]
        sampled_at, low_since = latest.get(gpu_id, (None, None))
        if sampled_at is not None and sampled_at > at:
            stale += 1  # a late sample: history only, the latest value stays the newer one
            continue
        # Under the threshold: the run of low samples goes on (or starts now). At or above: it ends.
        low_since = (low_since or at) if value < threshold else None
        activity.append(GpuActivity(gpu_id=gpu_id, utilization=value, sampled_at=at, low_since=low_since))
    GpuActivity.objects.bulk_create(
        activity,
        batch_size=CHUNK,
        update_conflicts=True,
        unique_fields=["gpu"],
        update_fields=["utilization", "sampled_at", "low_since"],
    )

    start = bucket_start(at)
    existing: dict[int, tuple[float, float, int]] = {}
    for chunk in _chunks(gpu_ids):
        rows = (
            GpuUtilization.objects.select_for_update()
            .filter(bucket_start=start, gpu_id__in=chunk)
            .order_by("gpu_id")
            .values_list("gpu_id", "mean", "peak", "samples")
        )
        existing.update((gpu_id, (mean, peak, count)) for gpu_id, mean, peak, count in rows)
    buckets = []
    for gpu_id in gpu_ids:
        value = by_gpu[gpu_id]
        mean, peak, count = existing.get(gpu_id, (0.0, value, 0))
        buckets.append(
            GpuUtilization(
                gpu_id=gpu_id,
                bucket_start=start,
                mean=(mean * count + value) / (count + 1),
                peak=max(peak, value),
                samples=count + 1,
            )
        )
    GpuUtilization.objects.bulk_create(
        buckets,
        batch_size=CHUNK,
        update_conflicts=True,
        unique_fields=["gpu", "bucket_start"],
        update_fields=["mean", "peak", "samples"],
    )
    return RecordResult(recorded=len(gpu_ids), unknown_gpus=unknown, skipped=duplicates, stale=stale)


@transaction.atomic
def prune_history(now: datetime | None = None) -> PruneResult:
    """Delete utilization buckets and quota snapshots older than the configured retention."""
    now = now or timezone.now()
    settings = TenancySettings.load()
    buckets_before = now - timedelta(hours=settings.utilization_history_hours)
    snapshots_before = now - timedelta(days=settings.quota_history_days)
    return PruneResult(
        # Neither model has delete signals or dependants: Django issues one DELETE statement for each.
        utilization_buckets=GpuUtilization.objects.filter(bucket_start__lt=buckets_before).delete()[0],
        quota_snapshots=QuotaSnapshot.objects.filter(taken_at__lt=snapshots_before).delete()[0],
        cutoffs={"utilization_buckets": buckets_before, "quota_snapshots": snapshots_before},
    )
