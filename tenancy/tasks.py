"""Telemetry tasks: scrape the DCGM exporters the admin configured, and prune old history.

Beat runs `scrape_exporters` every minute (one `scrape_exporter` message per enabled endpoint) and
`prune_telemetry` hourly; see CELERY_BEAT_SCHEDULE in portal/settings.py. Tasks take primary keys.

A network failure (connection refused, timeout, HTTP 5xx) is retried with exponential backoff; every failed
attempt leaves a plain-words `last_error` on the endpoint, and the last attempt records it and returns
instead of raising, so a dead node costs one line on the exporter list, not a failing task every minute
(and, with Celery eager, never aborts the fan-out over the other exporters). A page that is not Prometheus
text, or an HTTP 4xx, is not retried: asking again gets the same answer.
"""

from __future__ import annotations

import http.client
import logging
import socket
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from celery import shared_task
from django.utils import timezone

from core.audit import audit_context
from core.models import AuditSource
from tenancy.activity import prune_history, record_samples
from tenancy.models import ExporterEndpoint
from tenancy.telemetry import UTILIZATION_METRIC, DcgmParseError, parse_dcgm

logger = logging.getLogger(__name__)

TIMEOUT_SECONDS = 5
MAX_BYTES = 16 * 1024 * 1024  # a GB200 tray's full DCP page is ~60 KB; anything near this is not an exporter
MAX_RETRIES = 3
# Prometheus text format 0.0.4 is what the exporter serves; asking for it keeps OpenMetrics out.
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"


class ScrapeError(Exception):
    """A scrape failed; the message is what the admin reads on the exporter list."""


class TransientScrapeError(ScrapeError):
    """The exporter could not be reached or answered 5xx: worth asking again shortly."""


def fetch(url: str, timeout: float = TIMEOUT_SECONDS) -> str:
    """GET an exporter page; raise ScrapeError (or TransientScrapeError) with a plain-words message."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ScrapeError(f"only http:// and https:// exporter URLs can be scraped, not {parts.scheme}://")
    address = parts.netloc or url
    request = urllib.request.Request(url, headers={"Accept": ACCEPT, "User-Agent": "rackplane-scraper/1"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read(MAX_BYTES + 1)
            charset = response.headers.get_content_charset() or "utf-8"
    except urllib.error.HTTPError as error:
        message = f"HTTP {error.code} {error.reason} from {address}"
        if error.code >= 500:
            raise TransientScrapeError(message) from error
        raise ScrapeError(message) from error
    except urllib.error.URLError as error:
        reason = error.reason
        if isinstance(reason, ConnectionRefusedError):
            raise TransientScrapeError(f"connection refused by {address}") from error
        if isinstance(reason, TimeoutError):
            raise TransientScrapeError(f"no answer from {address} within {timeout:g} seconds") from error
        if isinstance(reason, socket.gaierror):
            raise TransientScrapeError(f"cannot resolve host {parts.hostname}") from error
        raise TransientScrapeError(f"cannot reach {address}: {reason}") from error
    except TimeoutError as error:  # a timeout while reading the body, after the headers came
        raise TransientScrapeError(f"no answer from {address} within {timeout:g} seconds") from error
    except (OSError, http.client.HTTPException) as error:  # reset, or the body cut off mid-way
        raise TransientScrapeError(f"connection to {address} failed: {error!r}") from error
    if len(body) > MAX_BYTES:
        raise ScrapeError(f"the page from {address} is larger than {MAX_BYTES // (1024 * 1024)} MiB")
    return body.decode(charset, errors="replace")


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


@shared_task(
    bind=True,
    name="tenancy.tasks.scrape_exporter",
    autoretry_for=(TransientScrapeError,),
    retry_backoff=2,
    retry_backoff_max=30,
    retry_jitter=True,
    max_retries=MAX_RETRIES,
    acks_late=True,
)
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
    except TransientScrapeError as error:
        attempt = self.request.retries or 0
        final = attempt >= (self.max_retries or 0) or not _can_retry(self)
        note = "" if final else f" (retrying, attempt {attempt + 1} of {(self.max_retries or 0) + 1})"
        _set_state(endpoint_id, last_error=f"{error}{note}", last_sample_count=0)
        if final:
            # Recorded; nothing more a retry can do now. The next beat tick tries again.
            logger.warning("scraping %s failed: %s", endpoint["url"], error)
            return {"endpoint": endpoint_id, "error": str(error)}
        raise  # autoretry_for schedules the retry with backoff
    except ScrapeError as error:
        _set_state(endpoint_id, last_error=str(error), last_sample_count=0)
        return {"endpoint": endpoint_id, "error": str(error)}

    with audit_context(AuditSource.TASK):
        result = record_samples(samples, at=at)
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
    return {"endpoint": endpoint_id, **result.as_dict(), "skipped": samples.skipped + result.skipped}


@shared_task(name="tenancy.tasks.scrape_exporters")
def scrape_exporters() -> int:
    """Queue one scrape per enabled exporter; returns how many were queued."""
    ids = list(ExporterEndpoint.objects.filter(enabled=True).order_by("pk").values_list("pk", flat=True))
    for endpoint_id in ids:
        # A scrape still queued when the next tick comes is worthless: let the broker drop it.
        scrape_exporter.apply_async((endpoint_id,), expires=55)
    return len(ids)


@shared_task(name="tenancy.tasks.prune_telemetry")
def prune_telemetry() -> dict:
    """Delete utilization buckets and quota snapshots past their retention (TenancySettings)."""
    with audit_context(AuditSource.TASK):
        result = prune_history()
    return {"utilization_buckets": result.utilization_buckets, "quota_snapshots": result.quota_snapshots}
