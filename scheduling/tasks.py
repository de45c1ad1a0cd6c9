"""Scheduling tasks: the pass (on request and on the beat) and the quota snapshots the dashboards chart.

The work lives in scheduling.services and scheduling.usage; tasks take no objects, only what to do.
"""

from __future__ import annotations

import logging

from celery import group, shared_task
from django.db import transaction
from django.urls import reverse
from django.utils import timezone
from kombu.exceptions import OperationalError

from core.audit import audit_context
from core.enqueue import one_at_a_time, send_now
from core.models import AuditSource, NotificationEvent
from core.notifications.recording import notify
from core.task_names import (
    KEEP_IDLE_COUNTS,
    OLD_SNAPSHOT_QUOTAS,
    SCHEDULE_JOBS,
    SCHEDULE_JOBS_PERIODICALLY,
    SNAPSHOT_QUOTAS,
    WHATIF_PREPARE,
    WHATIF_REPLAY,
)
from scheduling import whatif_runs
from scheduling.engine.words import plural, say
from scheduling.services.pass_requests import request_pass
from scheduling.services.passes import run_pass
from scheduling.usage import SNAPSHOT_FIELDS, department_positions, keep_idle_counts, roll_up_usage
from scheduling.words import IDLE_GPUS_MANY, IDLE_GPUS_ONE, SHORT_OF_GUARANTEE_MANY, SHORT_OF_GUARANTEE_ONE
from tenancy.models import QuotaSnapshot

log = logging.getLogger(__name__)


@shared_task(name=SCHEDULE_JOBS)
def schedule_jobs() -> dict | None:
    """Run scheduling passes while requests wait (one pass at a time, guarded in the database)."""
    with audit_context(AuditSource.TASK):
        summary = run_pass(only_if_requested=True)
    return None if summary is None else summary.__dict__


@shared_task(name=SCHEDULE_JOBS_PERIODICALLY)
@one_at_a_time
def schedule_jobs_periodically() -> dict | None:
    """Beat: a pass even when nothing was submitted (time limits move reservations, capacity changes)."""
    with transaction.atomic():
        request_pass("periodic")
    return {"requested": True}


def record_quota_snapshots(now=None) -> int:
    """Write one QuotaSnapshot per department at `now` truncated to the minute; returns how many.

    Running it twice in one minute updates the same rows. The figures are the cards' own
    (scheduling.usage.department_positions, `Position.figures`: borrowed is what the jobs flagged over quota
    hold), so the history and the live point the chart ends with are counted the same way.
    """
    now = now or timezone.now()
    taken_at = now.replace(second=0, microsecond=0)
    positions = list(department_positions(now))
    snapshots = [
        QuotaSnapshot(
            department=position.department,
            taken_at=taken_at,
            **position.figures(),
        )
        for position in positions
    ]
    with transaction.atomic():
        _notify_changes(snapshots, taken_at)
    QuotaSnapshot.objects.bulk_create(
        snapshots,
        update_conflicts=True,
        unique_fields=["department", "taken_at"],
        update_fields=list(SNAPSHOT_FIELDS),
    )
    return len(snapshots)


def _shortfall(row) -> int:
    """GPUs a department asks for within its guarantee and does not hold."""
    return min(max(row.guaranteed - row.in_quota, 0), row.pending_demand)


def _notify_changes(snapshots: list[QuotaSnapshot], taken_at) -> None:
    """Tell subscribers (core.notifications, scope department:<slug>) when a department falls short of its
    guarantee, or its idle GPUs rose, since the previous snapshot: once per change, not every five minutes.
    A threshold hears only of idle GPUs crossing it (NotificationSubscription.receives)."""
    before = (
        QuotaSnapshot.objects.filter(taken_at__lt=taken_at)
        .order_by("-taken_at")
        .values_list("taken_at", flat=True)
    ).first()
    previous = {}
    if before is not None:
        previous = {row.department_id: row for row in QuotaSnapshot.objects.filter(taken_at=before)}
    for row in snapshots:
        department, last = row.department, previous.get(row.department_id)
        scope = f"department:{department.slug}"
        link = reverse("scheduling:department-detail", args=[department.slug])
        short = _shortfall(row)
        if short and (last is None or not _shortfall(last)):
            notify(
                NotificationEvent.GUARANTEE_SHORT,
                say(
                    plural(short, SHORT_OF_GUARANTEE_ONE, SHORT_OF_GUARANTEE_MANY),
                    department_name=department.name,
                    count=short,
                    guaranteed=row.guaranteed,
                ),
                {"department": department.slug, "short_gpus": short, "guaranteed": row.guaranteed},
                scope=scope,
                link=link,
            )
        if row.idle and row.idle > (last.idle if last is not None else 0):
            notify(
                NotificationEvent.IDLE_GPUS,
                say(
                    plural(row.idle, IDLE_GPUS_ONE, IDLE_GPUS_MANY),
                    department_name=department.name,
                    count=row.idle,
                ),
                {
                    "department": department.slug,
                    "idle_gpus": row.idle,
                    "previous_idle_gpus": last.idle if last is not None else 0,
                },
                scope=scope,
                link=link,
            )


@shared_task(name=SNAPSHOT_QUOTAS)
@one_at_a_time
def snapshot_quotas() -> int:
    """Beat runs this every five minutes: the quota history the department dashboards chart, and the
    finished jobs' decayed usage rolled up (scheduling.usage.roll_up_usage) for the fair-share history and
    the pass."""
    recorded = record_quota_snapshots()
    roll_up_usage()
    return recorded


@shared_task(name=KEEP_IDLE_COUNTS)
def keep_idle_counts_task() -> int:
    """Beat runs this every minute: each department's idle GPUs counted once for every page that shows them
    (scheduling.usage.keep_idle_counts; PostgreSQL only: returns 0 elsewhere)."""
    return keep_idle_counts()


@shared_task(name=OLD_SNAPSHOT_QUOTAS)
def snapshot_quotas_renamed() -> bool:
    """The previous release's name: a message still queued under it is forwarded."""
    return send_now(SNAPSHOT_QUOTAS)


@shared_task(name=WHATIF_PREPARE)
def whatif_prepare(run_id: int) -> list[int]:
    """Read a what-if's job history once, then replay its layouts in parallel: a Celery group of one task
    per layout, so more workers finish a sweep sooner (with eager Celery they run here, one after another).
    No chord: nothing waits on a result backend; the last replay to finish settles the run
    (scheduling.whatif_runs.settle)."""
    layout_ids = whatif_runs.prepare(run_id)
    if layout_ids:
        try:
            group(whatif_replay.si(layout_id) for layout_id in layout_ids).apply_async()
        except (OperationalError, OSError) as error:  # the broker: the page says the layouts wait
            log.warning(
                "what-if #%s: replays not sent, the task queue could not be reached (%s)", run_id, error
            )
    return layout_ids


@shared_task(
    name=WHATIF_REPLAY,
    soft_time_limit=whatif_runs.REPLAY_TIME_LIMIT_S,
    time_limit=whatif_runs.REPLAY_TIME_LIMIT_S + 60,
)
def whatif_replay(layout_id: int) -> str:
    """Replay one layout of a what-if (scheduling.whatif_runs.replay_layout)."""
    return whatif_runs.replay_layout(layout_id)
