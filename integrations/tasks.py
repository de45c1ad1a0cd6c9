"""Tasks that act on the outside world. They take primary keys; the work and its rules live in
integrations.push_runs, integrations.dispatch and integrations.plans.service.

`push_config(pk)` claims a queued push, runs its target's adapter under the audit context of the user who
asked for it, and records the outcome. On a worker a transient error sends the task again after the
backoff; run eagerly (no broker) it never sleeps in the caller: the push stays queued with a "retrying"
note for `retry_stale_pushes` (beat, every minute) or the next `manage.py push_configs`.

Task names before the re-cut (`scheduling.tasks.*`, `inventory.tasks.*`) are still registered: a message
queued by the previous release is forwarded to the new name instead of crashing a worker.
"""

from __future__ import annotations

import contextlib
import logging
import threading

from celery import shared_task
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from core.audit import audit_context
from core.enqueue import one_at_a_time, send_now
from core.models import AuditSource
from core.retry import backoff
from core.task_names import (
    DISPATCH_JOB,
    FOLLOW_ACTIVE_PLANS,
    PUSH_CONFIG,
    RECARVE_RACK,
    REPORT_NODES,
    RETRY_STALE_PUSHES,
    RUN_PLAN_WINDOWS,
    SIGNAL_JOB,
    SYNC_JOBS,
    SYNC_TRAY,
    WATCH_REMOVALS,
)
from core.task_names import RENAMED as ALL_RENAMED
from integrations import dispatch as job_dispatch
from integrations import kept_rows, push_runs, removals, requeue, trays
from integrations.fabric import nodes as simulated_nodes
from integrations.models import ConfigPush, ConfigTarget, PushStatus
from integrations.plans import recarve, windows
from integrations.plans.service import follow
from inventory.choices import PlanStatus
from inventory.models import PartitionPlan
from scheduling.models import Job

logger = logging.getLogger(__name__)


def _can_schedule_retry(task) -> bool:
    """A worker can send the task again with a countdown; called directly or eagerly, nothing would wait."""
    request = task.request
    return not (request.called_directly or request.is_eager)


@contextlib.contextmanager
def push_lease(push_id: int):
    """Renew the lease of a running push while this worker runs it: a thread touches the row's updated_at
    every fifth of push_runs.STALE_RUNNING. A worker killed mid-push (SIGKILL, OOM, node lost) stops renewing,
    and `retry_stale_pushes` queues the push again once the lease ran out: another worker finishes it, once
    (the claim is one conditional UPDATE). Chosen over Celery's reject_on_worker_lost because it also covers
    a whole worker host lost (a message redelivered only after the broker's visibility timeout, an hour) and
    a redelivered message could not claim a push left running anyway; the row is the truth."""
    stop = threading.Event()
    every = max(0.5, push_runs.STALE_RUNNING.total_seconds() / 5)

    def renew() -> None:
        try:
            while not stop.wait(every):
                ConfigPush.objects.filter(pk=push_id, status=PushStatus.RUNNING).update(
                    updated_at=timezone.now()
                )
        except Exception:
            logger.warning("push %s: renewing its lease failed", push_id, exc_info=True)
        finally:
            connection.close()  # this thread's own connection

    thread = threading.Thread(target=renew, name=f"push-{push_id}-lease", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=every + 5)


@shared_task(bind=True, name=PUSH_CONFIG, acks_late=True)
def push_config(self, push_id: int) -> dict:
    """Run one queued push; a push that is not queued (running elsewhere, finished) is left alone.

    When the push of a partition plan finishes, the plan follows at once (the beat would, within 30 s)."""
    row = ConfigPush.objects.filter(pk=push_id).values("requested_by_id", "plan_id").first() or {}
    requested_by, plan_id = row.get("requested_by_id"), row.get("plan_id")
    actor = get_user_model().objects.filter(pk=requested_by).first() if requested_by else None
    retry = _can_schedule_retry(self)
    with audit_context(AuditSource.TASK, actor=actor), push_lease(push_id):
        outcome = push_runs.execute(push_id, can_schedule_retry=retry)
        if plan_id is not None and outcome.status in (PushStatus.SUCCEEDED, PushStatus.FAILED):
            for plan in PartitionPlan.objects.filter(pk=plan_id):
                follow(plan)
    if outcome.status == PushStatus.QUEUED and outcome.retry_in is not None and retry:
        send_now(PUSH_CONFIG, push_id, countdown=outcome.retry_in)
    return {"push": push_id, "status": outcome.status, "retry_in": outcome.retry_in}


@shared_task(name=WATCH_REMOVALS)
@one_at_a_time
def watch_removals() -> dict:
    """Beat, daily: tell the subscribers of removal_ahead once per target and removal that bites soon
    (integrations.versions: the dated table; integrations.removals)."""
    told = removals.notify_biting()
    if told:
        logger.info("removals ahead told: %s", ", ".join(told))
    return {"told": told}


@shared_task(name=RETRY_STALE_PUSHES)
@one_at_a_time
def retry_stale_pushes() -> dict:
    """Beat, every minute: requeue pushes whose worker was lost, send the retries that are due (and
    messages that never ran), and push requests that waited for a push that has finished. Keeps the render's
    change log bounded on a site that seldom renders (integrations.kept_rows.prune)."""
    requeued = push_runs.requeue_stale()
    due = push_runs.due_pushes()
    for push_id in due:
        send_now(PUSH_CONFIG, push_id)
    followed = 0
    for target_id in ConfigTarget.objects.filter(enabled=True, follow_up__isnull=False).values_list(
        "pk", flat=True
    ):
        followed += len(push_runs.run_follow_up(target_id))
    if requeued or due or followed:
        logger.info("pushes: %d requeued, %d sent, %d follow-ups", len(requeued), len(due), followed)
    pruned = kept_rows.prune()
    return {"requeued": requeued, "sent": due, "follow_ups": followed, "render_log_pruned": pruned}


@shared_task(bind=True, name=DISPATCH_JOB, acks_late=True)
def dispatch_job(self, job_id: int) -> dict:
    """Hand one placed job to its backend; an unreachable backend is retried with backoff."""
    with audit_context(AuditSource.TASK):
        outcome = job_dispatch.dispatch(job_id)
    if outcome == "retry" and _can_schedule_retry(self):
        attempts = Job.objects.filter(pk=job_id).values_list("dispatch_attempts", flat=True).first() or 1
        send_now(DISPATCH_JOB, job_id, countdown=backoff(attempts))
    return {"job": job_id, "outcome": outcome}


@shared_task(name=SYNC_JOBS)
@one_at_a_time
def sync_jobs() -> dict:
    """Beat, every 30 s: stop what must stop, send due dispatch retries, read running jobs' states."""
    with audit_context(AuditSource.TASK):
        requeued = requeue.requeue_due()  # checkpoint grace over: stopped below, placed again by the pass
        cancelled = job_dispatch.process_cancels()
        due = job_dispatch.due_dispatches()
        for job_id in due:
            send_now(DISPATCH_JOB, job_id)
        states = job_dispatch.sync_states()
    return {"requeued": requeued, "cancelled": cancelled, "dispatched": due, **states}


@shared_task(name=SIGNAL_JOB)
def signal_job(job_id: int, signal: str = "USR1") -> dict:
    """Ask a job whose tray was drained by a fault to checkpoint before its requeue (integrations.requeue)."""
    with audit_context(AuditSource.TASK):
        return {"job": job_id, "outcome": requeue.signal_job(job_id, signal)}


@shared_task(bind=True, name=SYNC_TRAY, acks_late=True)
def sync_tray_state(self, tray_id: int, owner: str = "rackplane", attempt: int = 1) -> dict:
    """Drain or resume the tray on every Slurm and Kubernetes target as its state says (integrations.trays);
    a target that did not answer is tried again with backoff."""
    with audit_context(AuditSource.TASK):
        result = trays.sync_tray(tray_id, owner=owner, attempt=attempt)
    if result["retry_in"] is not None and _can_schedule_retry(self):
        send_now(SYNC_TRAY, tray_id, owner, attempt + 1, countdown=result["retry_in"])
    return {"tray": tray_id, **result}


@shared_task(name=FOLLOW_ACTIVE_PLANS)
@one_at_a_time
def follow_active_plans() -> int:
    """Move draining plans on once their trays are free, and settle applying plans from their pushes."""
    moved = 0
    with audit_context(AuditSource.TASK):
        for plan in PartitionPlan.objects.filter(status__in=[PlanStatus.DRAINING, PlanStatus.APPLYING]):
            before = plan.status
            moved += follow(plan).status != before
    return moved


@shared_task(name=RUN_PLAN_WINDOWS)
@one_at_a_time
def run_plan_windows() -> dict:
    """Plans scheduled for a maintenance window: started at its start, applied once their trays are free,
    expired at its end when not applied (integrations.plans.windows)."""
    with audit_context(AuditSource.TASK):
        return windows.run_windows()


@shared_task(name=RECARVE_RACK)
def recarve_rack(proposal: dict) -> int | None:
    """A re-carve the scheduling pass proposed (integrations.plans.recarve): the scheduler's plan's id, or
    None when it was refused (logged). Not retried: the next pass proposes again from what it then sees."""
    plan = recarve.apply(proposal)
    return plan.pk if plan is not None else None


@shared_task(name=REPORT_NODES)
def report_simulated_nodes(reports: list[dict]) -> list[str]:
    """The simulated fabric's nodes report their settled cliques through discovery (fabric.nodes)."""
    with audit_context(AuditSource.TASK):
        return simulated_nodes.deliver(reports)


# --- names of the previous release: forward what is still queued under them -----------------------------

# The old names of this module's tasks (core.task_names.RENAMED; scheduling.tasks forwards its own).
RENAMED = {old: new for old, new in ALL_RENAMED.items() if new.startswith("integrations.tasks.")}


def _forwarder(old: str, new: str):
    def forward(*args, **kwargs):
        logger.info("task %s was renamed %s: forwarding", old, new)
        # The message's keyword arguments are the task's, not send options.
        return send_now(new, *args, kwargs=kwargs) if kwargs else send_now(new, *args)

    forward.__name__ = forward.__qualname__ = old.rsplit(".", 1)[-1] + "_renamed"
    return shared_task(name=old)(forward)


renamed_tasks = [_forwarder(old, new) for old, new in RENAMED.items()]
