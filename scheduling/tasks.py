"""Scheduling tasks: the pass (on request and on the beat) and the quota snapshots the dashboards chart.

The work lives in scheduling.services and scheduling.usage; tasks take no objects, only what to do.
"""

from __future__ import annotations

import logging

from celery import group, shared_task
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import OperationalError

from core.audit import audit_context
from core.enqueue import send_now
from core.models import AuditSource
from scheduling import whatif_runs
from scheduling.services import SCHEDULE_JOBS, request_pass, run_pass
from scheduling.usage import SNAPSHOT_FIELDS, department_positions
from tenancy.models import QuotaSnapshot

log = logging.getLogger(__name__)


@shared_task(name=SCHEDULE_JOBS)
def schedule_jobs() -> dict | None:
    """Run scheduling passes while requests wait (one pass at a time, guarded in the database)."""
    with audit_context(AuditSource.TASK):
        summary = run_pass(only_if_requested=True)
    return None if summary is None else summary.__dict__


@shared_task(name="scheduling.tasks.schedule_jobs_periodically")
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
    snapshots = [
        QuotaSnapshot(
            department=position.department,
            taken_at=taken_at,
            **position.figures(),
        )
        for position in department_positions(now)
    ]
    QuotaSnapshot.objects.bulk_create(
        snapshots,
        update_conflicts=True,
        unique_fields=["department", "taken_at"],
        update_fields=list(SNAPSHOT_FIELDS),
    )
    return len(snapshots)


@shared_task(name="scheduling.tasks.snapshot_quotas")
def snapshot_quotas() -> int:
    """Beat runs this every five minutes: the quota history the department dashboards chart."""
    return record_quota_snapshots()


@shared_task(name="tenancy.tasks.snapshot_quotas")
def snapshot_quotas_renamed() -> bool:
    """The previous release's name: a message still queued under it is forwarded."""
    return send_now("scheduling.tasks.snapshot_quotas")


@shared_task(name=whatif_runs.PREPARE)
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
    name=whatif_runs.REPLAY,
    soft_time_limit=whatif_runs.REPLAY_TIME_LIMIT_S,
    time_limit=whatif_runs.REPLAY_TIME_LIMIT_S + 60,
)
def whatif_replay(layout_id: int) -> str:
    """Replay one layout of a what-if (scheduling.whatif_runs.replay_layout)."""
    return whatif_runs.replay_layout(layout_id)
