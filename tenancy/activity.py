"""GPU activity in the database: record utilization samples and prune history.

"Idle" and "free" (which need the jobs holding GPUs) are defined in scheduling.usage:

* An **idle** GPU is allocated to a running job and its utilization has stayed under
  ``TenancySettings.idle_threshold_percent`` for at least ``idle_window_minutes`` while that job held it
  (``GpuActivity.low_since`` marks the start of the current run of low samples, the job's ``placed_at`` when
  it got the GPU: a GPU that sat free and low is not idle the minute a job is placed on it).
* A **free** GPU is schedulable (tray up, not unhealthy) and allocated to no job. A free GPU is never idle,
  however low its utilization: nobody is wasting it. So a run of low samples is kept only while a job holds
  the GPU (`held_gpus`, which the scheduling layer registers: tenancy sits below it): an exporter samples
  every GPU, and the free ones would otherwise fill the low runs (at 10,000 racks a third of the fleet).

Recording is bulk: a fixed handful of queries per call whatever the number of samples (one node's four
GPUs or a whole rack's 72), because the scrape runs every minute for every exporter.

Two sources (tenancy.metrics_source): the direct scrape or push records 5-minute buckets per GPU
(``record_samples``), downsampled to hourly past a day and capped per GPU (``downsample_history``); with the
site's Prometheus as the source the cycle records only the derived idle state (``record_activity`` with
``keep_history=False``) and per-GPU history is read from Prometheus when a chart asks.

**One staleness rule** (``STALE_AFTER``, ``fresh_since``, ``fresh_activity``): a GPU's utilization is known
only while its activity row was sampled within ``STALE_AFTER``; a stale row is "no data" on every screen,
never idle and never working: the idle lists and counts (scheduling.usage), the department page and a
person's home (``held_without_data``), the admin dashboard, the rack view's colour by utilization
(scheduling.views.gpu_life), the /metrics gauges and the idle-GPU notification (both from the same counts).
Nothing
else decides it: Prometheus's own window (``MetricsSource.window_seconds``, its 5-minute staleness) only
says which GPUs the cycle writes a row for, and the rack view's 5-minute mean only which buckets it averages.
Rows are dropped once stale too (``forget_stale_activity``, direct; ``forget_others``, Prometheus), but the
screens never rely on that having run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.db.models import Avg, Count, F, Max, QuerySet, Sum, Window
from django.db.models.functions import RowNumber, TruncHour
from django.utils import timezone

from inventory.models import Gpu
from tenancy.models import GpuActivity, GpuUtilization, QuotaSnapshot, TenancySettings
from tenancy.telemetry import Sample

# Parameters per IN (...) list: far below SQLite's 32,766 host parameters, and a full rack is 72 GPUs.
CHUNK = 2000
# The one staleness rule: an activity row not sampled for this long is "no data" everywhere, never idle and
# never working. Ten minutes: the scrape, push and Prometheus cycles run every minute, so several missed
# cycles in a row, and the rack view's 5-minute mean is always inside it.
STALE_AFTER = timedelta(minutes=10)
# 5-minute buckets older than this are merged into hourly ones.
FULL_RESOLUTION = timedelta(days=1)
HOUR_SECONDS = 3600
# Rows per GPU kept at most: a day of 5-minute buckets and 29 days of hourly ones.
MAX_ROWS_PER_GPU = 288 + 29 * 24


# The GPUs some job holds, each with when its job got it (None: not known), as a queryset of rows with the
# columns `gpu_id` and `since`: scheduling.usage.held_gpus, registered once by scheduling.apps (tenancy is a
# layer below scheduling). None before it is: every GPU is then taken as held since an unknown time.
_held_gpus: Callable[[], QuerySet] | None = None


def use_held_gpus(provider: Callable[[], QuerySet]) -> None:
    """Register the scheduling layer's held GPUs (`_held_gpus`)."""
    global _held_gpus
    _held_gpus = provider


def _held_since(gpu_ids: list[int]) -> dict[int, datetime | None] | None:
    """GPU -> when its job got it, for the held ones among `gpu_ids`; None: no provider (all count held)."""
    if _held_gpus is None:
        return None
    held: dict[int, datetime | None] = {}
    for chunk in _chunks(gpu_ids):
        held.update(_held_gpus().filter(gpu_id__in=chunk).values_list("gpu_id", "since"))
    return held


def _low_since(
    value: float,
    old: datetime | None,
    at: datetime,
    threshold: float,
    *,
    held: bool,
    dated_back: datetime | None,
) -> datetime | None:
    """The run of low samples after this one: it goes on (or starts now) under the threshold while a job
    holds the GPU, and ends at or above it or once nobody holds the GPU. `dated_back`: Prometheus saw it low
    for the whole window since then (the window's start, or the job's start when later)."""
    if value >= threshold or not held:
        return None
    low = old or at
    return min(low, dated_back) if dated_back is not None else low


@dataclass(frozen=True)
class RecordResult:
    recorded: int  # GPUs whose sample was stored
    unknown_gpus: tuple[str, ...] = ()  # UUIDs not in the inventory (reported, never created)
    skipped: int = 0  # samples dropped: a second sample of one GPU in the same call, folded into the first
    stale: int = 0  # recorded into history only: the GPU already has a newer latest sample
    forgotten: int = 0  # activity rows dropped: GPUs with no sample in the window ("no data")

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


def record_activity(
    values: dict[str, float],
    at: datetime,
    *,
    low_for_window: dict[str, float] | None = None,
    forget_others: bool = False,
) -> RecordResult:
    """Store each GPU's latest utilization (UUID -> percent) and its idle run, no history (Prometheus source).

    `low_for_window`: UUID -> the highest utilization over the whole idle window (tenancy.prometheus
    low_for_window); a GPU whose highest is under the threshold has been low at least since the window began,
    so its run is dated back to then (the portal may have just started, or the source just changed).
    `forget_others`: `values` is the whole fleet, so every GPU not in it has no data now: its row goes.
    """
    if not values:
        removed = GpuActivity.objects.all().delete()[0] if forget_others else 0
        return RecordResult(recorded=0, forgotten=removed)
    if connection.vendor == "postgresql":
        return _record_activity_postgresql(values, at, low_for_window or {}, forget_others)
    return _record(
        values, 0, at, keep_history=False, low_for_window=low_for_window or {}, forget_others=forget_others
    )


@transaction.atomic
def _record_activity_postgresql(
    values: dict[str, float], at: datetime, low_for_window: dict[str, float], forget_others: bool
) -> RecordResult:
    """`record_activity` as one INSERT ... ON CONFLICT for the whole fleet (72,000 GPUs: one statement
    instead of ~110 and no model objects), with the same rules as `_record`: the run of low samples goes
    on or starts now, ends at or above the threshold, is dated back to the window's start when Prometheus
    saw the GPU low for all of it (or since its job got it, when later), kept only while a job holds the GPU;
    a sample older than the stored one is left out (`stale`)."""
    settings = TenancySettings.load()
    threshold = settings.idle_threshold_percent
    window_start = at - timedelta(minutes=settings.idle_window_minutes)
    uuids = list(values)
    numbers = [values[uuid] for uuid in uuids]
    low_before = [low_for_window.get(uuid, threshold) < threshold for uuid in uuids]
    activity, gpu = GpuActivity._meta.db_table, Gpu._meta.db_table
    # The held GPUs (`_held_gpus`) and since when; without a provider every GPU is held since an unknown time.
    held_sql, held_params = ("SELECT NULL::bigint AS gpu_id, NULL::timestamptz AS since", [])
    if _held_gpus is not None:
        held_sql, held_params = _held_gpus().query.sql_with_params()
    held_test = "held.gpu_id IS NOT NULL" if _held_gpus is not None else "TRUE"
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH incoming (uuid, value, low_before) AS (
                SELECT * FROM unnest(%s::text[], %s::float8[], %s::bool[])
            )
            INSERT INTO {activity} AS old (gpu_id, utilization, sampled_at, low_since)
            SELECT gpu.id, incoming.value, %s,
                   CASE WHEN incoming.value < %s AND {held_test}
                        THEN CASE WHEN incoming.low_before THEN GREATEST(%s::timestamptz, held.since)
                                  ELSE %s::timestamptz END
                   END
            FROM incoming JOIN {gpu} AS gpu ON gpu.uuid = incoming.uuid
            LEFT JOIN ({held_sql}) AS held ON held.gpu_id = gpu.id
            ORDER BY gpu.id
            ON CONFLICT (gpu_id) DO UPDATE SET
                utilization = EXCLUDED.utilization,
                sampled_at = EXCLUDED.sampled_at,
                low_since = CASE WHEN EXCLUDED.low_since IS NULL THEN NULL
                                 ELSE LEAST(COALESCE(old.low_since, EXCLUDED.low_since), EXCLUDED.low_since)
                            END
            WHERE old.sampled_at <= EXCLUDED.sampled_at
            """,
            [uuids, numbers, low_before, at, threshold, window_start, at, *held_params],
        )
        recorded = cursor.rowcount
        cursor.execute(
            f"SELECT u FROM unnest(%s::text[]) AS u WHERE NOT EXISTS (SELECT 1 FROM {gpu} WHERE uuid = u)",
            [uuids],
        )
        unknown = tuple(sorted(row[0] for row in cursor.fetchall()))
    forgotten = GpuActivity.objects.filter(sampled_at__lt=at).delete()[0] if forget_others else 0
    return RecordResult(
        recorded=recorded,
        unknown_gpus=unknown,
        stale=len(uuids) - len(unknown) - recorded,
        forgotten=forgotten,
    )


@transaction.atomic
def _record(
    values: dict[str, float],
    duplicates: int,
    at: datetime,
    *,
    keep_history: bool = True,
    low_for_window: dict[str, float] | None = None,
    forget_others: bool = False,
) -> RecordResult:
    settings = TenancySettings.load()
    threshold = settings.idle_threshold_percent
    window_start = at - timedelta(minutes=settings.idle_window_minutes)

    gpu_of: dict[str, int] = {}
    for chunk in _chunks(sorted(values)):
        gpu_of.update(Gpu.objects.filter(uuid__in=chunk).values_list("uuid", "pk"))
    unknown = tuple(sorted(uuid for uuid in values if uuid not in gpu_of))
    by_gpu = {pk: values[uuid] for uuid, pk in gpu_of.items()}
    low_before = {
        pk for uuid, pk in gpu_of.items() if (low_for_window or {}).get(uuid, threshold) < threshold
    }
    if not by_gpu:
        removed = GpuActivity.objects.all().delete()[0] if forget_others else 0
        return RecordResult(recorded=0, unknown_gpus=unknown, skipped=duplicates, forgotten=removed)
    gpu_ids = sorted(by_gpu)  # a fixed lock order, so concurrent recorders cannot deadlock

    held_since = _held_since(gpu_ids)
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
        held, since = (True, None) if held_since is None else (gpu_id in held_since, held_since.get(gpu_id))
        dated_back = None
        if gpu_id in low_before:  # Prometheus saw it low for the whole window, since the job got it at most
            dated_back = window_start if since is None else max(window_start, since)
        low_since = _low_since(value, low_since, at, threshold, held=held, dated_back=dated_back)
        activity.append(GpuActivity(gpu_id=gpu_id, utilization=value, sampled_at=at, low_since=low_since))
    GpuActivity.objects.bulk_create(
        activity,
        batch_size=CHUNK,
        update_conflicts=True,
        unique_fields=["gpu"],
        update_fields=["utilization", "sampled_at", "low_since"],
    )
    forgotten = 0
    if forget_others:  # every row this cycle wrote has sampled_at == at: the rest had no sample
        forgotten = GpuActivity.objects.filter(sampled_at__lt=at).delete()[0]
    if not keep_history:
        return RecordResult(
            recorded=len(gpu_ids), unknown_gpus=unknown, skipped=duplicates, stale=stale, forgotten=forgotten
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


def fresh_since(now: datetime | None = None) -> datetime:
    """The oldest ``sampled_at`` an activity row may have and still count (the staleness rule)."""
    return (now or timezone.now()) - STALE_AFTER


def fresh_activity(now: datetime | None = None) -> QuerySet[GpuActivity]:
    """Activity rows whose utilization is known at `now`: sampled within STALE_AFTER. Every reader of the
    latest utilization starts here (or filters ``sampled_at__gte=fresh_since(now)`` on a join)."""
    return GpuActivity.objects.filter(sampled_at__gte=fresh_since(now))


def forget_stale_activity(now: datetime | None = None) -> int:
    """Drop activity rows not refreshed for STALE_AFTER (direct source): a GPU whose exporter stopped
    answering has no data, and is never idle on a months-old low sample. Returns how many went. The
    screens do not wait for this: they read only `fresh_activity`."""
    return GpuActivity.objects.filter(sampled_at__lt=fresh_since(now)).delete()[0]


@dataclass(frozen=True)
class DownsampleResult:
    merged: int  # 5-minute buckets folded into hourly ones
    hourly: int  # hourly buckets written
    capped: int  # buckets deleted past MAX_ROWS_PER_GPU


@transaction.atomic
def downsample_history(
    now: datetime | None = None, max_rows_per_gpu: int = MAX_ROWS_PER_GPU
) -> DownsampleResult:
    """Merge 5-minute buckets older than FULL_RESOLUTION into hourly ones, and keep at most
    `max_rows_per_gpu` rows per GPU (the newest).

    An hourly bucket's mean is the sample-weighted mean of its 5-minute ones, its peak their highest, its
    samples their sum: the same figures the 5-minute rows gave. Whole hours only, so an hour is never split
    between the two resolutions. A handful of statements whatever the fleet size.
    """
    now = now or timezone.now()
    cutoff = bucket_start(now - FULL_RESOLUTION)
    cutoff -= timedelta(seconds=int(cutoff.timestamp()) % HOUR_SECONDS)
    old = GpuUtilization.objects.filter(bucket_start__lt=cutoff, seconds__lt=HOUR_SECONDS)
    hours = list(
        old.annotate(hour=TruncHour("bucket_start"))
        .order_by()
        .values("gpu_id", "hour")
        .annotate(weighted=Sum(F("mean") * F("samples")), n=Sum("samples"), top=Max("peak"), rows=Count("pk"))
    )
    merged = old.delete()[0] if hours else 0
    rows = [
        GpuUtilization(
            gpu_id=row["gpu_id"],
            bucket_start=row["hour"],
            mean=row["weighted"] / row["n"] if row["n"] else 0.0,
            peak=row["top"],
            samples=row["n"],
            seconds=HOUR_SECONDS,
        )
        for row in hours
    ]
    GpuUtilization.objects.bulk_create(rows, batch_size=CHUNK)
    ranked = GpuUtilization.objects.annotate(
        rank=Window(RowNumber(), partition_by=[F("gpu_id")], order_by=F("bucket_start").desc())
    ).filter(rank__gt=max_rows_per_gpu)
    extra = list(ranked.values_list("pk", flat=True))
    capped = 0
    for chunk in _chunks(extra):
        capped += GpuUtilization.objects.filter(pk__in=chunk).delete()[0]
    return DownsampleResult(merged=merged, hourly=len(rows), capped=capped)


def bucket_history(
    uuids: list[str], start: datetime, end: datetime
) -> dict[str, list[tuple[datetime, float]]]:
    """Each GPU's stored buckets (direct source) between start and end: UUID -> [(bucket start, mean)]."""
    out: dict[str, list[tuple[datetime, float]]] = {uuid: [] for uuid in uuids}
    for chunk in _chunks(sorted(set(uuids))):
        rows = (
            GpuUtilization.objects.filter(gpu__uuid__in=chunk, bucket_start__gte=start, bucket_start__lte=end)
            .order_by("gpu__uuid", "bucket_start")
            .values_list("gpu__uuid", "bucket_start", "mean")
        )
        for uuid, at, mean in rows:
            out[uuid].append((at, mean))
    return out


def department_utilization(now: datetime | None = None) -> dict[int, dict]:
    """Each department's GPUs held by its running jobs: their mean latest utilization and how many have
    data, from the fresh activity rows (whichever source filled them). One GROUP BY query.

    An Allocation exists only while its job holds GPUs (scheduling), so "held" needs no job state here.
    """
    rows = (
        fresh_activity(now)
        .filter(gpu__allocations__isnull=False)
        .order_by()
        .values("gpu__allocations__job__department_id")
        .annotate(mean=Avg("utilization"), gpus=Count("gpu_id"))
    )
    return {
        row["gpu__allocations__job__department_id"]: {"mean": row["mean"], "gpus_with_data": row["gpus"]}
        for row in rows
    }
