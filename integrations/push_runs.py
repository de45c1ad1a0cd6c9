"""Running configuration pushes: the task's side of integrations.pushes.

The task `claim`s the row (an atomic UPDATE from queued to running: whoever else holds the same message does
nothing), runs the target's adapter, appends timestamped lines to the push's log as it goes (committed at
most every second, so the progress page can follow it) and records the outcome; then a request that waited
for the push (`follow_up`) is pushed. The beat requeues pushes whose worker was lost and sends the ones due.

* Transient errors (`error.transient`, core.errors: the target did not answer, a refused or timed-out
  connection) put the push back to queued with `next_attempt_at` = now + core.retry.backoff(attempts)
  seconds, up to MAX_ATTEMPTS attempts. With a worker the task schedules itself again; with eager Celery
  (no broker: `make run`) nothing sleeps in the request: the push stays queued with a "retrying" note and
  the next `retry_stale_pushes` (beat) or `manage.py push_configs` run retries it.
* Permanent errors (refused configuration, bad target settings, a state the scheduler cannot express)
  fail the push with the error and a "What to do:" sentence. Every adapter leaves the previous live
  configuration in place when it fails (Slurm rolls back; the directory target switches versions only
  when every file is written); Kubernetes and the fabric have no transactions: a failure part-way is
  logged with what was done, and the next push only does what is missing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from core import claims
from core.errors import ExternalError, with_advice
from core.models import NotificationEvent
from core.notifications.recording import notify
from core.sentences import CLAUSES, say
from integrations import contents, words
from integrations.models import ConfigPush, ConfigTarget, PushStatus
from integrations.pushes import (
    adapter_for,
    concat_log,
    error_text,
    log_lines,
    prune_payloads,
    queue_pushes,
    remember,
)

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
# A running push whose row has not moved for this long lost its worker (killed, machine gone): requeued.
# The worker running it renews it (integrations.tasks.push_lease) every fifth of it, so a slow single step
# (an NMX-M operation may take up to 15 minutes) keeps its push; RACKPLANE_PUSH_LEASE_SECONDS, 5 minutes.
STALE_RUNNING = timedelta(seconds=settings.RACKPLANE_PUSH_LEASE_SECONDS)
# A queued push with no retry scheduled whose message never ran (broker down at commit time): sent again.
LOST_QUEUED = timedelta(minutes=5)


def is_transient(error: BaseException) -> bool:
    """What retry logic reads: the outside system's error says so (core.errors), or the OS could not
    connect at all."""
    return bool(getattr(error, "transient", False)) or isinstance(error, ConnectionError | TimeoutError)


# --- running ------------------------------------------------------------------------------------------


def claim(push_id: int) -> bool:
    """queued -> running in one UPDATE; False when the push is not queued (someone else has it, it finished,
    or its retry is not due yet)."""
    now = timezone.now()
    return claims.claim(
        ConfigPush.objects.filter(pk=push_id, status=PushStatus.QUEUED),
        now,
        status=PushStatus.RUNNING,
        started_at=now,
        updated_at=now,
        finished_at=None,
    )


@dataclass(frozen=True)
class Outcome:
    """What one run of a push did: `status` is the push's status after it; `retry_in` seconds when queued
    again after a transient error."""

    push_id: int
    status: str
    retry_in: int | None = None
    message: str = ""


def execute(push_id: int, *, can_schedule_retry: bool = False) -> Outcome:
    """Claim and run one push. Never raises for the target's errors: they are recorded on the row.

    `can_schedule_retry`: the caller (a task on a worker) will send itself again after `retry_in` seconds;
    otherwise (eager Celery, a command) a transient failure leaves the push queued for retry_stale_pushes.
    """
    if not claim(push_id):
        status = ConfigPush.objects.filter(pk=push_id).values_list("status", flat=True).first()
        return Outcome(
            push_id, status or "missing", message="not claimed: not queued (or its retry is not due)"
        )
    push = ConfigPush.objects.select_related("target").get(pk=push_id)
    target = push.target
    log = _Log(push.pk)
    log(f"attempt {push.attempts} of {MAX_ATTEMPTS}: pushing to {target.kind} target {target.name}")
    try:
        adapter = adapter_for(target)
        summary = adapter.apply(contents.payload_of(push.payload), log, push)
        remember(target, adapter)
    except Exception as error:
        if is_transient(error):
            return _transient(push, error, log, can_schedule_retry)
        if not isinstance(error, ExternalError | ValueError | OSError):
            logger.exception("push %s to %s failed unexpectedly", push.pk, target.name)
        return _finish(push, PushStatus.FAILED, log, error=error_text(error, target.kind))
    return _finish(push, PushStatus.SUCCEEDED, log, summary=summary)


class _Log:
    """Callable that appends timestamped lines to the push's log, committed at most every FLUSH_SECONDS
    (the progress page polls every 2 s) and always before the push's status changes. One UPDATE per line
    would rewrite the row thousands of times for a 1,000-rack fabric push (on SQLite, with its payload)."""

    FLUSH_SECONDS = 1.0

    def __init__(self, push_id: int):
        self.push_id = push_id
        self._pending: list[str] = []
        self._flushed_at = float("-inf")  # the first line goes out at once: the page shows it started

    def __call__(self, *messages: Any) -> None:
        self._pending.append(log_lines(messages))
        if time.monotonic() - self._flushed_at >= self.FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            now = timezone.now()
            text = "".join(self._pending)
            self._pending = []
            ConfigPush.objects.filter(pk=self.push_id).update(log=concat_log(text), updated_at=now)
        self._flushed_at = time.monotonic()


def _transient(push: ConfigPush, error: BaseException, log: _Log, can_schedule_retry: bool) -> Outcome:
    text = error_text(error, push.target.kind)
    if push.attempts >= MAX_ATTEMPTS:
        return _finish(
            push,
            PushStatus.FAILED,
            log,
            error=CLAUSES.join(
                [say(words.PUSH_GAVE_UP, count=push.attempts), say(words.PUSH_NO_ANSWER, output=text)]
            ),
        )
    now = timezone.now()
    retry = claims.retry_later(push.attempts, now)
    delay = retry.delay
    if can_schedule_retry:
        note = f"retrying in {delay}s (attempt {push.attempts + 1} of {MAX_ATTEMPTS})"
    else:
        note = (
            f"retrying: attempt {push.attempts + 1} of {MAX_ATTEMPTS} is due in {delay}s; with no Celery "
            "worker (eager mode) it runs at the next retry_stale_pushes or `manage.py push_configs`"
        )
    log(f"transient error: {text}", note)
    log.flush()
    ConfigPush.objects.filter(pk=push.pk, status=PushStatus.RUNNING).update(
        status=PushStatus.QUEUED,
        error=f"{text}\n({note})",
        next_attempt_at=retry.at,
        updated_at=now,
    )
    return Outcome(push.pk, PushStatus.QUEUED, retry_in=delay, message=str(error))


def _finish(push: ConfigPush, status: str, log: _Log, *, error: str = "", summary: str = "") -> Outcome:
    now = timezone.now()
    if status == PushStatus.SUCCEEDED:
        log(f"succeeded: {summary}" if summary else "succeeded")
    else:
        log(f"failed: {error}")
    log.flush()
    ConfigPush.objects.filter(pk=push.pk, status=PushStatus.RUNNING).update(
        status=status, error=error, finished_at=now, updated_at=now, next_attempt_at=None
    )
    if status == PushStatus.FAILED:
        target = push.target
        notify(
            NotificationEvent.PUSH_FAILED,
            say(
                words.PUSH_FAILED,
                push=push.pk,
                target=target.name,
                error=error.splitlines()[0] if error else words.SEE_ITS_LOG,
            ),
            {"push": push.pk, "target": target.name, "kind": target.kind, "error": error[:2000]},
            scope=[f"target:{target.name}"],
            link=reverse("integrations:push-detail", args=[push.pk]),
        )
    # Pieces become garbage only when a payload naming them is let go (push rows are never deleted: their
    # target is PROTECTed): reading every kept payload's pieces after each push cost ~0.3 s at 10,000 racks.
    if (
        prune_payloads(push.target_id)
        and ConfigPush.objects.filter(target_id=push.target_id, has_pieces=True).exists()
    ):
        contents.collect_garbage()
    run_follow_up(push.target_id)
    return Outcome(push.pk, status, message=summary or error)


def run_follow_up(target_id: int) -> list[ConfigPush]:
    """Push a request that waited for this target's running push (if it is idle now)."""
    with transaction.atomic():
        target = ConfigTarget.objects.select_for_update().filter(pk=target_id).first()
        if target is None or not target.follow_up or not target.enabled:
            return []
        if ConfigPush.objects.filter(target=target).active().exists():
            return []
        waiting = target.follow_up
        user = get_user_model().objects.filter(pk=waiting.get("requested_by")).first()
        target.follow_up = None
        target.save(update_fields=["follow_up", "updated_at"])
        return queue_pushes(
            reason=say(words.PUSH_WAITED, reason=waiting.get("reason") or words.PUSH_CHANGE),
            user=user,
            plan_id=waiting.get("plan_id"),
            targets=[target],
        )


# --- maintenance (beat) ------------------------------------------------------------------------------


def requeue_stale(now=None) -> list[int]:
    """Running pushes whose log has not moved for STALE_RUNNING lost their worker: back to queued."""
    now = now or timezone.now()
    cutoff = now - STALE_RUNNING
    seconds = int(STALE_RUNNING.total_seconds())
    minutes = f"{seconds // 60} minutes" if seconds % 60 == 0 else f"{seconds} seconds"
    stale = ConfigPush.objects.filter(status=PushStatus.RUNNING, updated_at__lt=cutoff)

    def give_up(row, attempts: int, target_id: int) -> None:
        error = with_advice(
            f"no progress for {minutes} during the last of {attempts} attempts (worker lost?)",
            "check the Celery worker and the target, then retry the push",
        )
        if row.update(
            status=PushStatus.FAILED,
            error=error,
            finished_at=now,
            updated_at=now,
            log=concat_log(log_lines([f"failed: {error}"], now)),
        ):
            run_follow_up(target_id)

    def requeue(row) -> int:
        note = log_lines([f"no progress for {minutes} (worker lost?): requeued"], now)
        return row.update(status=PushStatus.QUEUED, next_attempt_at=now, updated_at=now, log=concat_log(note))

    return claims.requeue_lost(
        stale, max_attempts=MAX_ATTEMPTS, requeue=requeue, give_up=give_up, values=("target_id",)
    )


def due_pushes(now=None) -> list[int]:
    """Queued pushes to send now: a retry that is due, or a message that never ran (lost)."""
    now = now or timezone.now()
    queued = ConfigPush.objects.filter(status=PushStatus.QUEUED, target__enabled=True)
    return claims.due(queued, now, lost_after=LOST_QUEUED)
