"""Delivering notifications: claim one, make one attempt through its channel, record it, and retry with
core.retry's backoff up to MAX_ATTEMPTS; the beat's maintenance puts back lost ones and finds those due.
Claiming, retrying, requeueing and finding due rows are core.claims', as for configuration pushes."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from core import claims
from core.models import (
    AttemptOutcome,
    Notification,
    NotificationAttempt,
    NotificationChannel,
    NotificationEvent,
    NotificationStatus,
)
from core.notifications.channels import DeliveryFailed, send_email, send_webhook
from core.notifications.recording import owner_may_see

logger = logging.getLogger(__name__)


# Waits between attempts: 2, 4, 8, ... 256 s, then 300 s (core.retry): 1,410 s, about 24 minutes, from the
# first attempt to the last.
MAX_ATTEMPTS = 12
MAX_RETRY_AFTER_SECONDS = 3600


MESSAGE_LIMIT = 2000  # characters of an attempt's message kept


# A claimed notification whose worker has not finished it in this long was lost (killed, machine gone).
STALE_SENDING = timedelta(minutes=5)
# A pending notification with no retry scheduled whose message never ran (broker down at commit time).
LOST_PENDING = timedelta(minutes=2)


@dataclass(frozen=True)
class Outcome:
    """What one run of `deliver` did: `status` is the notification's afterwards; `retry_in` seconds when it
    waits for another attempt."""

    notification_id: int
    status: str
    retry_in: int | None = None
    message: str = ""


def claim(notification_id: int) -> bool:
    """pending -> sending in one UPDATE; False when it is not pending or its retry is not due yet."""
    now = timezone.now()
    return claims.claim(
        Notification.objects.filter(pk=notification_id, status=NotificationStatus.PENDING),
        now,
        status=NotificationStatus.SENDING,
        claimed_at=now,
    )


def deliver(notification_id: int, *, can_schedule_retry: bool = False) -> Outcome:
    """Claim one notification and make one attempt. Never raises for the receiver's errors (nor for its own
    bugs: a notification must never break the work that caused it); every outcome is recorded.

    `can_schedule_retry`: the caller (a task on a worker) sends itself again after `retry_in` seconds;
    otherwise (eager Celery) a notification to retry stays pending for the beat."""
    if not claim(notification_id):
        status = Notification.objects.filter(pk=notification_id).values_list("status", flat=True).first()
        return Outcome(notification_id, status or "missing", message="not claimed: not pending or not due")
    notification = Notification.objects.select_related("subscription__owner").get(pk=notification_id)
    subscription = notification.subscription
    if subscription is None or (not subscription.enabled and notification.event != NotificationEvent.TEST):
        why = "its subscription was deleted" if subscription is None else "its subscription is disabled"
        _settle(notification, NotificationStatus.CANCELLED, error=f"Not sent: {why}.")
        return Outcome(notification.pk, NotificationStatus.CANCELLED, message=why)
    if not owner_may_see(subscription, notification.scope or []):
        # Its owner left the department it is about (or no longer leads it) since it was recorded.
        why = "its subscriber may no longer see what it is about"
        _settle(notification, NotificationStatus.CANCELLED, error=f"Not sent: {why}.")
        return Outcome(notification.pk, NotificationStatus.CANCELLED, message=why)
    at, started = timezone.now(), time.monotonic()
    http_status: int | None  # an email has none
    try:
        if notification.channel == NotificationChannel.WEBHOOK:
            http_status, message = send_webhook(notification, subscription)
        else:
            http_status, message = send_email(notification, subscription)
    except DeliveryFailed as failure:
        return _failed(notification, failure, at, time.monotonic() - started, can_schedule_retry)
    except Exception as error:  # a bug here must not break the transaction's other work
        logger.exception("notification %s: unexpected error", notification.pk)
        unexpected = DeliveryFailed(f"Unexpected error in Rackplane: {error!r}.", transient=False)
        return _failed(notification, unexpected, at, time.monotonic() - started, can_schedule_retry)
    _attempt(notification, at, time.monotonic() - started, AttemptOutcome.DELIVERED, http_status, message)
    _settle(notification, NotificationStatus.DELIVERED, delivered_at=timezone.now())
    return Outcome(notification.pk, NotificationStatus.DELIVERED, message=message)


def _attempt(notification, at, seconds, outcome, http_status, message) -> None:
    NotificationAttempt.objects.create(
        notification=notification,
        number=notification.attempts,
        at=at,
        seconds=round(seconds, 3),
        http_status=http_status,
        outcome=outcome,
        message=message[:MESSAGE_LIMIT],
    )


def _settle(notification, status, *, error: str = "", **fields) -> int:
    """Write the outcome, if this worker still holds the claim (the attempt count is the claim's token)."""
    return Notification.objects.filter(
        pk=notification.pk, status=NotificationStatus.SENDING, attempts=notification.attempts
    ).update(status=status, error=error[:MESSAGE_LIMIT], claimed_at=None, **fields)


def _failed(notification, failure: DeliveryFailed, at, seconds, can_schedule_retry) -> Outcome:
    text = str(failure)
    if not failure.transient or notification.attempts >= MAX_ATTEMPTS:
        if failure.transient:
            text = f"Gave up after {notification.attempts} attempts. Last: {text}"
        _attempt(notification, at, seconds, AttemptOutcome.FAILED, failure.http_status, str(failure))
        _settle(notification, NotificationStatus.FAILED, error=text)
        return Outcome(notification.pk, NotificationStatus.FAILED, message=text)
    retry = claims.retry_later(
        notification.attempts,
        timezone.now(),
        retry_after=failure.retry_after,
        retry_after_cap=MAX_RETRY_AFTER_SECONDS,
    )
    note = f"attempt {notification.attempts + 1} of {MAX_ATTEMPTS} in {retry.delay} s"
    if not can_schedule_retry:
        note += " (no Celery worker: the beat or `manage.py` sends it once it is due)"
    _attempt(notification, at, seconds, AttemptOutcome.RETRY, failure.http_status, text)
    _settle(
        notification,
        NotificationStatus.PENDING,
        error=f"{text} Retrying: {note}.",
        next_attempt_at=retry.at,
    )
    return Outcome(notification.pk, NotificationStatus.PENDING, retry_in=retry.delay, message=text)


# --- maintenance (beat) ----------------------------------------------------------------------------------


def requeue_stale(now=None) -> list[int]:
    """Notifications claimed longer than STALE_SENDING ago lost their worker: back to pending (at least once:
    the receiver may have had it; it deduplicates by id). Out of attempts: failed."""
    now = now or timezone.now()
    stale = Notification.objects.filter(status=NotificationStatus.SENDING, claimed_at__lt=now - STALE_SENDING)

    def give_up(row, attempts: int) -> None:
        row.update(
            status=NotificationStatus.FAILED,
            claimed_at=None,
            error=f"The worker sending attempt {attempts} of {MAX_ATTEMPTS} was lost: check the Celery "
            "workers.",
        )

    def requeue(row) -> int:
        return row.update(status=NotificationStatus.PENDING, claimed_at=None, next_attempt_at=now)

    return claims.requeue_lost(stale, max_attempts=MAX_ATTEMPTS, requeue=requeue, give_up=give_up)


def due(now=None) -> list[int]:
    """Pending notifications to send now: a retry that is due, or a first message that never ran."""
    now = now or timezone.now()
    pending = Notification.objects.filter(status=NotificationStatus.PENDING)
    return claims.due(pending, now, lost_after=LOST_PENDING)
