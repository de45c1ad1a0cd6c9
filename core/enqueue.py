"""Start background work: the row is written first, the message is sent when the transaction commits.

`enqueue("integrations.tasks.push_config", push.pk)` never imports the task (so domain code does not depend
on the layer that holds it) and never turns a committed request into an error: when the broker cannot be
reached the message is dropped with a warning, and the beat task that scans for the row (queued pushes,
placed jobs not yet dispatched, pending jobs) sends it again once the broker is back.

A broker that is down costs a request little: one publish attempt and one reconnect, no back-off sleeps
(PUBLISH_RETRY_POLICY), each bounded by the socket timeouts portal.celery sets.

`one_at_a_time` wraps the beat's periodic tasks: a run starts only when no other run of the same task holds
its PostgreSQL advisory lock (a beat restarted with its schedule file behind, or a second beat by mistake,
sends an entry twice; the second run is skipped, not run beside the first). The lock belongs to the
worker's database session: a worker killed mid-run releases it with its connection.
"""

from __future__ import annotations

import functools
import logging
import zlib
from contextlib import contextmanager

from celery import current_app
from django.db import connection, transaction
from kombu.exceptions import OperationalError

log = logging.getLogger(__name__)

# One retry at once: enough for a pooled connection the broker closed (restarted), short when it is down.
# Celery's default (3 retries, 0.2 s apart) makes every request wait for a broker that is gone.
PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}


def send_now(task_name: str, *args, **options) -> bool:
    """Send `task_name(*args)` at once, `options` as for apply_async; False when it was not sent.

    Never raises for the broker (unreachable, refused, timed out) or for an unknown name: both are logged.
    With eager Celery (no broker) the task runs here and its own exceptions propagate.
    """
    if task_name not in current_app.tasks:
        # Outside a worker nothing has imported the apps' tasks modules yet: import them now (Celery's
        # autodiscovery, without the worker's start-up signal, which would set Django up again and run
        # its system checks in a web process).
        current_app.autodiscover_tasks(force=True)
    try:
        task = current_app.tasks[task_name]
    except KeyError:
        log.error("enqueue: no task named %s is registered; %r not sent", task_name, args)
        return False
    if task.app.conf.task_always_eager:  # runs now, in this process
        if options:
            task.apply_async(args, **options)
        else:
            task.delay(*args)
        return True
    options.setdefault("retry", True)
    options.setdefault("retry_policy", PUBLISH_RETRY_POLICY)
    try:
        task.apply_async(args, **options)
    except (OperationalError, OSError) as error:  # kombu wraps the transport's connection errors
        log.warning(
            "enqueue: %s%r not sent, the task queue could not be reached (%s); the beat picks the work up",
            task_name,
            args,
            error,
        )
        return False
    except Exception:
        # Not the broker's fault (e.g. arguments that cannot be serialized). The caller's transaction has
        # committed: say what failed rather than turn it into an error response.
        log.exception("enqueue: %s%r not sent", task_name, args)
        return False
    return True


def enqueue(task_name: str, *args, **options) -> None:
    """Send `task_name(*args)` after the current transaction commits (at once outside one)."""
    transaction.on_commit(lambda: send_now(task_name, *args, **options))


def advisory_key(name: str) -> int:
    """The PostgreSQL advisory lock key of `name` (stable across processes and releases)."""
    return zlib.crc32(f"rackplane:{name}".encode())


@contextmanager
def exclusive(name: str):
    """Yields True when this process holds `name`'s advisory lock for the block, False when another session
    holds it. Other databases (SQLite in development: one worker) always get True."""
    if connection.vendor != "postgresql":
        yield True
        return
    key = advisory_key(name)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        held = bool(cursor.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
            except Exception:  # the connection is gone: so is the lock
                log.warning("releasing the lock of %s failed", name, exc_info=True)


def one_at_a_time(task_function):
    """For periodic tasks: skip a run while another run of the same task is in progress anywhere."""
    name = f"{task_function.__module__}.{task_function.__name__}"

    @functools.wraps(task_function)
    def run(*args, **kwargs):
        with exclusive(f"task:{name}") as held:
            if not held:
                log.info("%s skipped: another run of it is in progress", name)
                return {"skipped": "another run is in progress"}
            return task_function(*args, **kwargs)

    return run
