"""Claimed work rows: one way to claim a row that is due, put it back for a later attempt, find the lost
ones and the ones due. Configuration pushes (integrations.push_runs) and notifications
(core.notifications.delivery) are such rows. Job dispatch (integrations.dispatch) shares the retry timing
and `due` only: it holds the job's row lock (SELECT ... FOR UPDATE OF the job) for the whole submission, as
the job's state, not a claim, says who may act on it.

A claimable row has `attempts` (a counter) and `next_attempt_at` (null: no retry scheduled). Every write is
one conditional UPDATE, never a read-then-write: two workers holding the same message race on the UPDATE and
only one of them matches the row (on PostgreSQL the second waits on the first's row lock, then re-checks
the WHERE clause against the committed row and matches nothing). A claimed row's `attempts` is the claim's
token: whoever settles or requeues it names the attempt it saw, so a worker that lost its claim (requeued
as lost, claimed again) changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F, Q, QuerySet

from core.retry import backoff

# A countdown message may arrive a moment before `next_attempt_at`: claimed all the same.
CLAIM_SLACK = timedelta(seconds=2)


def claim(row: QuerySet, now: datetime, **claimed: Any) -> bool:
    """Claim the one row of `row` (filtered to its pk and its claimable status) in one UPDATE: `claimed`
    written (the claimed status, its time), the scheduled retry cleared, `attempts` counted. False when the
    row does not match (someone else has it, it finished) or its retry is not due yet."""
    due_now = Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now + CLAIM_SLACK)
    return row.filter(due_now).update(next_attempt_at=None, attempts=F("attempts") + 1, **claimed) == 1


@dataclass(frozen=True)
class Retry:
    """When to try again: in `delay` seconds, at `at`."""

    delay: int
    at: datetime


def retry_later(
    attempts: int, now: datetime, *, retry_after: int | None = None, retry_after_cap: int | None = None
) -> Retry:
    """The next attempt after `attempts` failed ones, by core.retry's backoff; a receiver's Retry-After
    (seconds, at most `retry_after_cap`) makes it later, never sooner."""
    delay = backoff(attempts)
    if retry_after:
        delay = max(delay, retry_after if retry_after_cap is None else min(retry_after, retry_after_cap))
    return Retry(delay, now + timedelta(seconds=delay))


def requeue_lost(
    lost: QuerySet,
    *,
    max_attempts: int,
    requeue: Callable[[QuerySet], int],
    give_up: Callable[..., Any],
    values: tuple[str, ...] = (),
) -> list[int]:
    """Claimed rows whose worker was lost (`lost`: claimed, and stale): back for another attempt
    (`requeue(row)`, an UPDATE; its count says whether it matched), or, out of attempts, `give_up(row,
    attempts, *values)`. `row` is the one row, still lost and at the attempt seen. The pks requeued."""
    requeued = []
    for pk, attempts, *rest in lost.values_list("pk", "attempts", *values):
        row = lost.filter(pk=pk, attempts=attempts)
        if attempts >= max_attempts:
            give_up(row, attempts, *rest)
        elif requeue(row):
            requeued.append(pk)
    return requeued


def due(
    rows: QuerySet,
    now: datetime,
    *,
    lost_after: timedelta,
    next_attempt: str = "next_attempt_at",
    since: str = "created_at__lt",
) -> list[int]:
    """The pks of `rows` (filtered to the status waiting for an attempt) to send now, in pk order: a retry
    that is due, or a first message that never ran (no retry scheduled, `since` more than `lost_after`
    ago)."""
    is_due = Q(**{f"{next_attempt}__lte": now}) | Q(
        **{f"{next_attempt}__isnull": True, since: now - lost_after}
    )
    return list(rows.filter(is_due).order_by("pk").values_list("pk", flat=True))
