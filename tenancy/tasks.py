"""Telemetry tasks: scrape the DCGM exporters the admin configured, and prune old history.

Beat runs `scrape_exporters` every minute (one `scrape_exporter` message per enabled endpoint) and
`prune_telemetry` hourly; see CELERY_BEAT_SCHEDULE in portal/settings.py. Tasks take primary keys.

A transient failure (`error.transient`: connection refused, timeout, HTTP 5xx/408/429) is retried after
core.retry.backoff; every failed attempt leaves a plain-words `last_error` on the endpoint, and the last
attempt records it and returns instead of raising, so a dead node costs one line on the exporter list, not a
failing task every minute (and, with Celery eager, never aborts the fan-out over the other exporters). A page
that is not Prometheus text, or an HTTP 4xx, is not retried: asking again gets the same answer.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from celery import shared_task
from django.utils import timezone

from core.audit import audit_context
from core.enqueue import send_now
from core.errors import ExternalError
from core.http import HttpClient
from core.models import AuditSource
from core.retry import backoff
from core.task_names import PRUNE_TELEMETRY, SCRAPE_EXPORTER, SCRAPE_EXPORTERS
from inventory.health.ingest import record_dcgm
from tenancy.activity import downsample_history, forget_stale_activity, prune_history, record_samples
from tenancy.metrics_source import poll
from tenancy.models import ExporterEndpoint, MetricsSource
from tenancy.quota_history import downsample_quota_snapshots
from tenancy.telemetry import UTILIZATION_METRIC, DcgmParseError, parse_dcgm

logger = logging.getLogger(__name__)

TIMEOUT_SECONDS = 5
MAX_BYTES = 16 * 1024 * 1024  # a GB200 tray's full DCP page is ~60 KB; anything near this is not an exporter
MAX_RETRIES = 3
# Prometheus text format 0.0.4 is what the exporter serves; asking for it keeps OpenMetrics out.
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"


class ScrapeError(ExternalError):
    """A scrape failed; the message is what the admin reads on the exporter list."""


class TransientScrapeError(ScrapeError):
    """The exporter could not be reached or answered 5xx/408/429: worth asking again shortly."""

    transient = True


def fetch(url: str, timeout: float = TIMEOUT_SECONDS) -> str:
    """GET an exporter page; raise ScrapeError (or TransientScrapeError) with a plain-words message."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ScrapeError(f"only http:// and https:// exporter URLs can be scraped, not {parts.scheme}://")
    client = HttpClient(
        headers={"Accept": ACCEPT, "User-Agent": "rackplane-scraper/1"},
        timeout=timeout,
        max_bytes=MAX_BYTES,
        # DCGM exporters run on the cluster's own nodes (private addresses by nature; only admins add
        # them): the outbound guard still refuses link-local/metadata ones and redirects elsewhere.
        allow_private=True,
    )
    try:
        response = client.request("GET", url)
    except ValueError as error:  # no host in the URL
        raise ScrapeError(str(error)) from error
    except ExternalError as error:
        raise (TransientScrapeError if error.transient else ScrapeError)(str(error)) from error
    if not response.ok:
        message = f"HTTP {response.status} {response.reason} from {parts.netloc}"
        raise (TransientScrapeError if response.transient_failure else ScrapeError)(message)
    return response.text


def _set_state(endpoint_id: int, **fields) -> None:
    # update(), not save(): an admin may be editing the URL while we scrape, and only these fields are ours.
    with audit_context(AuditSource.TASK):
        ExporterEndpoint.objects.filter(pk=endpoint_id).update(**fields)


def _can_retry(task) -> bool:
    """Whether raising for a retry gets a retry.

    Called directly there is no retry at all; run eagerly with task_eager_propagates (the embedded
    default), Celery raises its Retry into the caller instead of retrying, which would abort the fan-out.
    """
    request = task.request
    if request.called_directly:
        return False
    return not (request.is_eager and task.app.conf.task_eager_propagates)


@shared_task(bind=True, name=SCRAPE_EXPORTER, max_retries=MAX_RETRIES, acks_late=True)
def scrape_exporter(self, endpoint_id: int) -> dict:
    """Scrape one exporter and record its GPUs' utilization; returns what happened (also on failure)."""
    endpoint = ExporterEndpoint.objects.filter(pk=endpoint_id).values("url", "enabled").first()
    if endpoint is None or not endpoint["enabled"]:
        return {"endpoint": endpoint_id, "skipped": "deleted or disabled"}
    at = timezone.now()
    try:
        samples = parse_dcgm(fetch(endpoint["url"]))
    except DcgmParseError as error:
        _set_state(endpoint_id, last_error=str(error), last_sample_count=0)
        return {"endpoint": endpoint_id, "error": str(error)}
    except ScrapeError as error:
        attempt = self.request.retries or 0
        retry = error.transient and attempt < (self.max_retries or 0) and _can_retry(self)
        note = f" (retrying, attempt {attempt + 1} of {(self.max_retries or 0) + 1})" if retry else ""
        _set_state(endpoint_id, last_error=f"{error}{note}", last_sample_count=0)
        if not retry:
            if error.transient:
                # Recorded; nothing more a retry can do now. The next beat tick tries again.
                logger.warning("scraping %s failed: %s", endpoint["url"], error)
            return {"endpoint": endpoint_id, "error": str(error)}
        raise self.retry(exc=error, countdown=backoff(attempt + 1)) from error

    with audit_context(AuditSource.TASK):
        result = record_samples(samples, at=at)
        health = record_dcgm(samples.health, at=at)
    error = ""
    if not samples.has_utilization:
        error = (
            f"the exporter serves no {UTILIZATION_METRIC}: enable it in the exporter's counters CSV "
            "(some versions leave it out of the defaults; MIG instances never report it)"
        )
    elif result.unknown_gpus:
        shown = ", ".join(result.unknown_gpus[:4]) + (", ..." if len(result.unknown_gpus) > 4 else "")
        error = (
            f"{len(result.unknown_gpus)} GPU(s) not in the inventory, not recorded (report the node's "
            f"fabric first): {shown}"
        )
    _set_state(endpoint_id, last_scraped_at=at, last_sample_count=result.recorded, last_error=error)
    return {
        "endpoint": endpoint_id,
        **result.as_dict(),
        "skipped": samples.skipped + result.skipped,
        "health_events": health.new_events + health.repeated_events,
    }


@shared_task(name=SCRAPE_EXPORTERS)
def scrape_exporters() -> int | dict:
    """The telemetry tick. With the site's Prometheus as the metrics source: one cycle of a few PromQL
    queries for the whole fleet (tenancy.metrics_source.poll), returning what it found. Direct: queue one
    scrape per enabled exporter and return how many were queued (sent to the task queue); when exporters are
    configured, activity rows of GPUs not heard from for STALE_AFTER are dropped ("no data")."""
    if MetricsSource.load().is_prometheus:
        result = poll()
        record = result.record
        return {
            "source": "prometheus",
            "gpus": result.series,
            "recorded": record.recorded if record else 0,
            "forgotten": record.forgotten if record else 0,
            "queries": result.queries,
            "read": {"now": result.way_now, "low": result.way_low},  # recorded, or the raw metric chunked
            "seconds": round(result.seconds, 3),
            "error": result.error,
        }
    ids = list(ExporterEndpoint.objects.filter(enabled=True).order_by("pk").values_list("pk", flat=True))
    if ids:  # scraping is in use (not only pushes, or the demo's seeded activity): silence means no data
        with audit_context(AuditSource.TASK):
            forget_stale_activity()
    # A scrape still queued when the next tick comes is worthless: let the broker drop it.
    return sum(send_now(SCRAPE_EXPORTER, endpoint_id, expires=55) for endpoint_id in ids)


@shared_task(name=PRUNE_TELEMETRY)
def prune_telemetry() -> dict:
    """Delete utilization buckets and quota snapshots past their retention (TenancySettings), then merge
    5-minute buckets older than a day into hourly ones and cap the rows per GPU (downsample_history), and
    the quota snapshots older than a day into hourly ones (tenancy.quota_history)."""
    with audit_context(AuditSource.TASK):
        result = prune_history()
        downsampled = downsample_history()
        quota = downsample_quota_snapshots()  # hourly past a day: the dashboards' 30-day view
    return {
        "utilization_buckets": result.utilization_buckets,
        "quota_snapshots": result.quota_snapshots,
        "merged_into_hourly": downsampled.merged,
        "hourly_buckets": downsampled.hourly,
        "capped": downsampled.capped,
        "quota_snapshots_merged": quota.merged,
        "quota_snapshots_hourly": quota.hourly,
    }
