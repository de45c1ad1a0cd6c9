"""Asking for a scheduling pass. Every change a decision depends on records a SchedulingRequest row in its
own transaction and, on commit, sends the pass task (scheduling.tasks.schedule_jobs). Besides submissions
and job ends, scheduling.signals asks for one whenever something a decision depends on changes (guarantees,
trays, GPU health, fabric, partitions, dedications). Requests coalesce: one pass serves every request
recorded before it started (scheduling.services.passes).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from core.enqueue import send_now
from core.task_names import SCHEDULE_JOBS
from scheduling.models import SchedulingRequest

# Tasks are started by name (core.enqueue): the pass is this layer's own.


class _PassBatch:
    """The pass requests of one atomic block: one row, one task."""

    sent = False


@dataclass(frozen=True)
class _SendPass:
    """The on-commit callback of one request: the first of its batch to run sends the task."""

    batch: _PassBatch

    def __call__(self) -> None:
        if not self.batch.sent:
            self.batch.sent = True
            send_now(SCHEDULE_JOBS)


def request_pass(reason: str) -> None:
    """Record that something changed (a row, in the caller's transaction) and ask for a pass once it commits.

    Coalesced: within one atomic block only the first request writes a row, and only one task is sent (a
    plan that moves 18 trays asks once); the pass reads everything the transaction committed. A request
    made in a savepoint that rolls back is dropped with it, so the next request writes again.
    """
    connection = transaction.get_connection()
    batch = None
    if connection.in_atomic_block:
        # run_on_commit: Django's list of (savepoint ids, callback, robust) waiting for this transaction.
        block = set(connection.savepoint_ids)
        batch = next(
            (
                callback.batch
                for sids, callback, *_ in connection.run_on_commit
                if isinstance(callback, _SendPass) and sids == block and not callback.batch.sent
            ),
            None,
        )
    if batch is None:
        SchedulingRequest.objects.create(reason=reason[:100])
        batch = _PassBatch()
    transaction.on_commit(_SendPass(batch))
