"""Core's tasks: delivering notifications (core.notifications holds the rules; these take primary keys).

`deliver_notification(pk)` claims a pending notification and makes one attempt. On a worker a failure worth
retrying sends the task again after the backoff; run eagerly (no broker) nothing sleeps in the caller: the
notification stays pending until `retry_notifications` (beat) finds it due.
"""

from __future__ import annotations

import logging

from celery import shared_task

from core.enqueue import one_at_a_time, send_now
from core.notifications import delivery
from core.task_names import DELIVER_NOTIFICATION, RETRY_NOTIFICATIONS

logger = logging.getLogger(__name__)


def _can_schedule_retry(task) -> bool:
    """A worker can send the task again with a countdown; called directly or eagerly, nothing would wait."""
    request = task.request
    return not (request.called_directly or request.is_eager)


@shared_task(bind=True, name=DELIVER_NOTIFICATION, acks_late=True)
def deliver_notification(self, notification_id: int) -> dict:
    retry = _can_schedule_retry(self)
    outcome = delivery.deliver(notification_id, can_schedule_retry=retry)
    if outcome.retry_in is not None and retry:
        send_now(DELIVER_NOTIFICATION, notification_id, countdown=outcome.retry_in)
    return {"notification": notification_id, "status": outcome.status, "retry_in": outcome.retry_in}


@shared_task(name=RETRY_NOTIFICATIONS)
@one_at_a_time
def retry_notifications() -> dict:
    """Beat: put back notifications whose worker was lost, and send those due (retries, lost messages)."""
    requeued = delivery.requeue_stale()
    due = delivery.due()
    for notification_id in due:
        send_now(DELIVER_NOTIFICATION, notification_id)
    if requeued or due:
        logger.info("notifications: %d requeued, %d sent", len(requeued), len(due))
    return {"requeued": requeued, "sent": due}
