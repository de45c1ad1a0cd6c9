"""Configuration push tasks. They take primary keys; the work and its rules are in scheduling.pushes.

`push_config(pk)` claims a queued push, runs its target's adapter under the audit context of the user who
asked for it, and records the outcome. On a worker a transient error sends the task again after 2**attempts
seconds; run eagerly (no broker: `make run`, commands, tests) it never sleeps in the caller: the push stays
queued with a "retrying" note for `retry_stale_pushes` (beat, every minute; see CELERY_BEAT_SCHEDULE) or the
next `manage.py push_configs`.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.contrib.auth import get_user_model

from portal.audit import audit_context
from portal.models import AuditSource
from scheduling import pushes
from scheduling.models import ConfigPush, ConfigTarget, Job, PushStatus

logger = logging.getLogger(__name__)


def _can_schedule_retry(task) -> bool:
    """A worker can send the task again with a countdown; called directly or eagerly, nothing would wait."""
    request = task.request
    return not (request.called_directly or request.is_eager)


@shared_task(bind=True, name="scheduling.tasks.push_config", acks_late=True)
def push_config(self, push_id: int) -> dict:
    """Run one queued push; a push that is not queued (running elsewhere, finished) is left alone."""
    requested_by = ConfigPush.objects.filter(pk=push_id).values_list("requested_by_id", flat=True).first()
    actor = get_user_model().objects.filter(pk=requested_by).first() if requested_by else None
    retry = _can_schedule_retry(self)
    with audit_context(AuditSource.TASK, actor=actor):
        outcome = pushes.execute(push_id, can_schedule_retry=retry)
    if outcome.status == PushStatus.QUEUED and outcome.retry_in is not None and retry:
        push_config.apply_async((push_id,), countdown=outcome.retry_in)
    return {"push": push_id, "status": outcome.status, "retry_in": outcome.retry_in}


@shared_task(name="scheduling.tasks.retry_stale_pushes")
def retry_stale_pushes() -> dict:
    """Beat, every minute: requeue pushes whose worker was lost, send the retries that are due (and
    messages that never ran), and push requests that waited for a push that has finished."""
    requeued = pushes.requeue_stale()
    due = pushes.due_pushes()
    for push_id in due:
        push_config.delay(push_id)
    followed = 0
    for target_id in ConfigTarget.objects.filter(enabled=True, follow_up__isnull=False).values_list(
        "pk", flat=True
    ):
        followed += len(pushes.run_follow_up(target_id))
    if requeued or due or followed:
        logger.info("pushes: %d requeued, %d sent, %d follow-ups", len(requeued), len(due), followed)
    return {"requeued": requeued, "sent": due, "follow_ups": followed}


# --- jobs ------------------------------------------------------------------------------------------------


@shared_task(name="scheduling.tasks.schedule_jobs")
def schedule_jobs() -> dict | None:
    """Run scheduling passes while requests wait (one pass at a time, guarded in the database)."""
    from scheduling.services import run_pass

    with audit_context(AuditSource.TASK):
        summary = run_pass()
    return None if summary is None else summary.__dict__


@shared_task(name="scheduling.tasks.schedule_jobs_periodically")
def schedule_jobs_periodically() -> dict | None:
    """Beat: a pass even when nothing was submitted (time limits move reservations, capacity changes)."""
    from django.db import transaction

    from scheduling.services import request_pass

    with transaction.atomic():
        request_pass("periodic")
    return {"requested": True}


@shared_task(bind=True, name="scheduling.tasks.dispatch_job", acks_late=True)
def dispatch_job(self, job_id: int) -> dict:
    """Hand one placed job to its backend; an unreachable backend is retried with backoff."""
    from scheduling.dispatch import backoff, dispatch

    with audit_context(AuditSource.TASK):
        outcome = dispatch(job_id)
    if outcome == "retry" and _can_schedule_retry(self):
        attempts = Job.objects.filter(pk=job_id).values_list("dispatch_attempts", flat=True).first() or 1
        dispatch_job.apply_async((job_id,), countdown=backoff(attempts))
    return {"job": job_id, "outcome": outcome}


@shared_task(name="scheduling.tasks.sync_jobs")
def sync_jobs() -> dict:
    """Beat, every 30 s: stop what must stop, send due dispatch retries, read running jobs' states."""
    from scheduling.dispatch import due_dispatches, process_cancels, sync_states

    with audit_context(AuditSource.TASK):
        cancelled = process_cancels()
        due = due_dispatches()
        for job_id in due:
            dispatch_job.delay(job_id)
        states = sync_states()
    return {"cancelled": cancelled, "dispatched": due, **states}
