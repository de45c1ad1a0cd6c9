"""GPU utilization from the configured metrics source (MetricsSource): the site's Prometheus, or the direct
scrape's own buckets.

With Prometheus the telemetry cycle (``poll``, run by the beat's scrape tick, tenancy.tasks) asks for two
figures of the whole fleet, whatever its size:

1. ``max by (UUID) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[300s]))``: each GPU's utilization now (the window is
   MetricsSource.window_seconds). A GPU without a sample in the window is not in the answer: its activity
   row goes ("no data", never idle).
2. ``max by (UUID) (max_over_time(...[Wm])) and max by (UUID) (last_over_time(...[300s] offset Wm))``: the
   highest utilization over the idle window W of GPUs that were reporting when it began; one under the
   threshold has been low the whole window (so idle GPUs show at once, not W minutes after a restart).

Each is read from the site's recording rule when it answers (deploy/prometheus/rackplane-rules.yml: one
sample per GPU), else from the raw metric in chunks, one query per GPU index (tenancy.prometheus.Way,
fleet_now, fleet_low): the same figures either way. The poll result and "Save and test connection" say which.

What the portal keeps is what it derives: GpuActivity (latest value, idle run), and from it the idle GPUs
and department figures of scheduling.usage and the quota snapshots. Charts ask for a GPU's or a job's
history over the range the screen shows (``utilization_history``): a range query, its step chosen from the
range (tenancy.prometheus.choose_step); with the direct source, the stored buckets.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone
from django.utils.translation import gettext as _

from core.audit import audit_context
from core.models import AuditSource
from inventory.models import Gpu
from tenancy.activity import RecordResult, bucket_history, record_activity
from tenancy.models import GpuUtilization, MetricsSource, TenancySettings
from tenancy.prometheus import (
    PrometheusClient,
    PrometheusError,
    QueryConfig,
    Way,
    choose_step,
    fleet_low,
    fleet_now,
    labels_error,
)

__all__ = ["PollResult", "check_connection", "client_for", "config_for", "poll", "utilization_history"]

MIN_STEP_SECONDS = 15  # dcgm-exporter's usual scrape interval; finer steps only repeat samples


def config_for(source: MetricsSource) -> QueryConfig:
    return QueryConfig(
        metric=source.metric.strip(),
        uuid_label=source.uuid_label.strip(),
        gpu_label=source.gpu_label.strip(),
        hostname_label=source.hostname_label.strip(),
        selector=source.selector.strip(),
    )


def client_for(source: MetricsSource) -> PrometheusClient:
    basic = (source.username, source.password) if source.username else None
    return PrometheusClient(
        source.url,
        bearer_token=source.bearer_token,
        basic_auth=basic,
        ca_file=source.ca_file,
        timeout=float(source.timeout_seconds or 10),
        allow_private=source.allow_private_address,
    )


@dataclass
class PollResult:
    series: int = 0  # GPUs Prometheus reported
    record: RecordResult | None = None
    queries: int = 0
    seconds: float = 0.0
    error: str = ""
    skipped: list[str] = field(default_factory=list)  # UUIDs with a value outside 0-100 %
    way_now: Way | None = None  # how each figure was read: recorded, chunked (or single, when asked)
    way_low: Way | None = None


@dataclass
class _Now:
    values: dict[str, float]
    skipped: list[str]
    way: Way
    queries: int


def _current(
    client: PrometheusClient, config: QueryConfig, at: datetime, window: int, way: Way | None = None
) -> _Now:
    """UUID -> utilization now; raises PrometheusError saying what is wrong when nothing usable came back."""
    problems = config.problems()
    if problems:
        raise PrometheusError("; ".join(problems), _("fix the metrics source's metric and label names"))
    rows, way, queries = fleet_now(client, config, at, window, way)
    values, skipped = {}, []
    for labels, value in rows:
        uuid = labels.get(config.uuid_label, "").strip()
        if not uuid:
            # `max by (UUID)` of series without that label folds them into one series with no labels.
            sample = client.sample_labels(config) or []
            raise PrometheusError(labels_error(config, {name for labels in sample for name in labels}))
        if 0.0 <= value <= 100.0:
            values[uuid] = value
        else:
            skipped.append(uuid)  # a DCGM blank sentinel or a wrong metric: not a utilization
    if not rows:
        # The text of a scheduled cycle is stored as the source's last error (in English: no request).
        missing = (
            _("Prometheus has no %(metric)s samples matching %(selector)s in the last %(window)s seconds")
            if config.selector
            else _("Prometheus has no %(metric)s samples in the last %(window)s seconds")
        )
        raise PrometheusError(
            missing % {"metric": config.metric, "selector": config.selector, "window": window},
            _(
                "check that it scrapes the DCGM exporters, that their counters include the metric, and the "
                "metric name and extra selector of the metrics source"
            ),
        )
    return _Now(values, skipped, way, queries)


def poll(
    now: datetime | None = None, source: MetricsSource | None = None, way: Way | None = None
) -> PollResult:
    """One telemetry cycle from Prometheus: every GPU's activity from two fleet-wide figures.

    `way` None reads each from its recording rule when that answers, else chunked; the benchmark and tests
    name one. Records the outcome on the MetricsSource (last_polled_at, last_series_count, last_error). On
    an error nothing is changed in the activity rows: one failed cycle does not make the fleet "no data".
    """
    source = source or MetricsSource.load()
    at = now or timezone.now()
    started = time.perf_counter()
    result = PollResult()
    try:
        client, config = client_for(source), config_for(source)
        now_figure = _current(client, config, at, source.window_seconds, way)
        values, result.skipped = now_figure.values, now_figure.skipped
        result.way_now, result.queries = now_figure.way, now_figure.queries
        window = TenancySettings.load().idle_window_minutes
        low: dict[str, float] = {}
        if window > 0:
            low, result.way_low, queries = fleet_low(client, config, at, window, source.window_seconds, way)
            result.queries += queries
    except PrometheusError as error:
        result.error = str(error)
        result.seconds = time.perf_counter() - started
        _set_state(last_polled_at=at, last_error=result.error, last_series_count=0)
        return result
    with audit_context(AuditSource.TASK):
        result.record = record_activity(values, at, low_for_window=low, forget_others=True)
    result.series = len(values)
    result.seconds = time.perf_counter() - started
    said = ""
    if result.record.unknown_gpus:
        unknown = result.record.unknown_gpus
        shown = ", ".join(unknown[:4]) + (", ..." if len(unknown) > 4 else "")
        said = f"{len(unknown)} GPU(s) Prometheus reports are not in the inventory, not recorded: {shown}"
    _set_state(last_polled_at=at, last_error=said, last_series_count=len(values))
    return result


def _set_state(**fields) -> None:
    # update(), not save(): an admin may be editing the source while a cycle runs.
    MetricsSource.objects.filter(pk=1).update(**fields)


def check_connection(source: MetricsSource) -> str:
    """Run the cycle's utilization query against `source` (saved or not) and say what it found.

    Raises PrometheusError with the plain-words reason when it cannot be used.
    """
    client, config = client_for(source), config_for(source)
    started = time.perf_counter()
    now_figure = _current(client, config, timezone.now(), source.window_seconds)
    values, skipped = now_figure.values, now_figure.skipped
    took = (time.perf_counter() - started) * 1000
    known = 0
    uuids = sorted(values)
    for start in range(0, len(uuids), 2000):
        known += Gpu.objects.filter(uuid__in=uuids[start : start + 2000]).count()
    facts = {
        "ms": f"{took:.0f}",
        "gpus": len(values),
        "metric": config.metric,
        "label": config.uuid_label,
        "known": known,
        "unknown": len(values) - known,
        "skipped": len(skipped),
    }
    # Whole sentences, one per case (word order differs between languages).
    if known < len(values) and skipped:
        message = _(
            "Prometheus answered in %(ms)s ms: %(gpus)s GPU(s) report %(metric)s by %(label)s, %(known)s of "
            "them in the inventory (%(unknown)s not in it: report their nodes' fabric first); %(skipped)s "
            "value(s) outside 0-100 %% left out."
        )
    elif known < len(values):
        message = _(
            "Prometheus answered in %(ms)s ms: %(gpus)s GPU(s) report %(metric)s by %(label)s, %(known)s of "
            "them in the inventory (%(unknown)s not in it: report their nodes' fabric first)."
        )
    elif skipped:
        message = _(
            "Prometheus answered in %(ms)s ms: %(gpus)s GPU(s) report %(metric)s by %(label)s, %(known)s of "
            "them in the inventory; %(skipped)s value(s) outside 0-100 %% left out."
        )
    else:
        message = _(
            "Prometheus answered in %(ms)s ms: %(gpus)s GPU(s) report %(metric)s by %(label)s, %(known)s of "
            "them in the inventory."
        )
    if now_figure.way is Way.RECORDED:
        how = _("Read from the recording rule %(rule)s, one sample per GPU.")
    else:
        how = _(
            "Read from %(metric)s itself in %(queries)s queries, one per %(gpu_label)s value: no recording "
            "rule %(rule)s answered (deploy/prometheus/rackplane-rules.yml in Rackplane's source records it)."
        )
    facts |= {
        "rule": config.recorded_now(source.window_seconds),
        "queries": now_figure.queries - 1,
        "gpu_label": config.gpu_label,
    }
    return f"{message % facts} {how % facts}"


def utilization_history(
    uuids: list[str],
    start: datetime,
    end: datetime,
    *,
    mean: bool = False,
    source: MetricsSource | None = None,
    min_step: int = MIN_STEP_SECONDS,
) -> tuple[dict[str, list[tuple[datetime, float]]], int]:
    """Utilization of these GPUs over start..end for a chart: ({UUID: [(time, percent)]}, step seconds).

    `mean`: one series, key "mean", the GPUs' average (a job's chart). Prometheus: one range query, the
    step chosen from the range; direct source: the stored buckets (5-minute, hourly past a day).
    Raises PrometheusError when Prometheus cannot answer.
    """
    source = source or MetricsSource.load()
    if not uuids:
        return {}, 0
    if not source.is_prometheus:
        # The bucket under way at `start` counts too (a job that started two minutes ago has one), its
        # point moved to `start` so the chart's first point is inside its range.
        bucket = timedelta(seconds=GpuUtilization.BUCKET_SECONDS)
        history = {
            uuid: [(max(at, start), value) for at, value in points]
            for uuid, points in bucket_history(uuids, start - bucket + timedelta(microseconds=1), end).items()
        }
        if mean:
            return {"mean": _mean_of(history)}, 300
        return history, 300
    client, config = client_for(source), config_for(source)
    step = choose_step(start, end, min_step=min_step)
    # Points fall at start + k * step: start is moved back so the last one is `end` itself (the latest value
    # always shows, however fresh the samples).
    start = end - timedelta(seconds=math.ceil((end - start).total_seconds() / step) * step)
    if mean:
        rows = client.query_range(config.mean_history(uuids, step), start, end, step)
        return {"mean": rows[0][1] if rows else []}, step
    rows = client.query_range(config.history(uuids, step), start, end, step)
    out: dict[str, list[tuple[datetime, float]]] = {uuid: [] for uuid in uuids}
    for labels, points in rows:
        uuid = labels.get(config.uuid_label, "")
        if uuid in out:
            out[uuid] = points
    return out, step


def _mean_of(history: dict[str, list[tuple[datetime, float]]]) -> list[tuple[datetime, float]]:
    by_time: dict[datetime, list[float]] = {}
    for points in history.values():
        for at, value in points:
            by_time.setdefault(at, []).append(value)
    return [(at, sum(values) / len(values)) for at, values in sorted(by_time.items())]
