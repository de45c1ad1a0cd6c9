"""Start background work: the row is written first, the message is sent when the transaction commits.

`enqueue("integrations.tasks.push_config", push.pk)` never imports the task (so domain code does not depend
on the layer that holds it) and never turns a committed request into an error: when the broker cannot be
reached the message is dropped with a warning, and the beat task that scans for the row (queued pushes,
placed jobs not yet dispatched, pending jobs) sends it again once the broker is back.
"""

from __future__ import annotations

import logging

from celery import current_app
from django.db import transaction

log = logging.getLogger(__name__)


def send_now(task_name: str, *args, **options) -> bool:
    """Send the task at once (outside a transaction); False when the broker could not take it."""
    try:
        task = current_app.tasks[task_name]
    except KeyError:
        log.error("enqueue: no task named %s is registered", task_name)
        return False
    try:
        if options:
            task.apply_async(args, **options)
        else:
            task.delay(*args)
    except Exception as error:  # kombu/redis/amqp errors: the broker is down or refused the message
        if task.app.conf.task_always_eager:
            raise  # eager: this is the task's own error, not the broker's
        log.warning("enqueue: %s%r not sent (%s); the beat will pick the work up", task_name, args, error)
        return False
    return True


def enqueue(task_name: str, *args, **options) -> None:
    """Send `task_name(*args)` after the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: send_now(task_name, *args, **options))
