"""The scheduling pass: `run_pass` runs the pure engine (scheduling.engine) on the database's state, and
writes back (scheduling.services.pass_writes) every running job's in-quota/borrowed standing and every
pending job's reason. Passes run one at a time: each holds the row lock of the single SchedulerState row
(taken with SKIP LOCKED: a pass that finds it taken leaves; the holder runs again while scheduling requests
newer than its start remain). A pass makes a fixed number of queries whatever the number of racks or jobs:
one per table it reads, one statement per kind of change it writes; the engine's cluster comes from
scheduling.pass_cluster, and on PostgreSQL scheduling.pass_cache keeps it between passes and checks it
against the database at each one.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from core.audit import record_bulk_change
from core.enqueue import enqueue
from core.fabric import Fabric
from core.task_names import DISPATCH_JOB
from scheduling import pass_cache, pass_inputs
from scheduling.choices import JobState
from scheduling.engine.stranded import stranded
from scheduling.models import Job, SchedulerState, SchedulingRequest
from scheduling.services.pass_writes import (
    insert_events,
    keep_decisions_still_valid,
    lock_decided,
    pipelined,
    preempt,
    record_waiting_reasons,
    start_jobs,
    write_standing,
)
from scheduling.services.recarving import propose_recarves
from scheduling.services.slices import place_slice_jobs

# Tasks are started by name (core.enqueue): dispatch and re-carving belong to integrations, which this layer
# does not import.


@dataclass
class PassSummary:
    started: int
    preempted: int
    waiting: int
    decisions: int
    ms: float
    cold: bool = True  # the cluster was read cold, not kept from this process's last pass (pass_cache)
    reread: int = 0  # racks a kept cluster read again (pass_cache): what changed since the last pass
    # Stranded NVLink capacity after the pass's decisions (scheduling.engine.stranded, `Stranded.as_dict`).
    stranded: dict | None = None
    recarves: int = 0  # re-carves proposed to integrations (scheduling.services.recarving)
    queue: list[int] = field(default_factory=list)  # the waiting jobs in the pass's order (PassResult.queue)
    estimated_starts: dict[str, str] = field(default_factory=dict)  # reserved job id -> ISO start estimate


def _pass(now, fabric: Fabric | None = None) -> PassSummary:
    """Read the cluster and the queue, let the engine decide, then apply what is still valid under lock.

    A fixed number of queries whatever the number of racks, jobs or decisions: every read is one query
    per table, every write one statement per kind of change (tests/scheduling/test_pass_queries.py)."""
    started_clock = time.perf_counter()
    # The pass's inputs (the job form's dry run, scheduling.preview, reads the same through `gather`).
    inputs = pass_inputs.gather(fabric=fabric)
    state, departments, slug = inputs.state, inputs.departments, inputs.slug
    project_rows, running, pending = inputs.project_rows, inputs.running, inputs.pending
    engine_args = inputs.engine_args(now)
    result = inputs.decide(now, args=engine_args)
    # Stranded capacity on the cluster as the engine left it (its starts and preemptions made), against the
    # jobs it left waiting: borrowing when they may (a preemptible job may borrow, so it may use any
    # partition). Read before `keep` puts the cluster back.
    _, _, _, engine_pending, _ = engine_args
    left_waiting = [job.request(borrow=job.preemptible) for job in engine_pending if job.id in result.waiting]
    # Carving that follows demand: re-carves of idle trays for the in-quota gangs left waiting, proposed on
    # the same cluster and sent to integrations on commit (scheduling.services.recarving).
    recarves = propose_recarves(inputs.cluster, result, engine_pending, now)

    decided = {s.job_id for s in result.started} | set(result.preempted)
    # The running jobs whose standing the engine changed (a few of 47,700 at 10,000 racks).
    restand = {
        pk: over
        for pk, over in result.standing_changes.items()
        if pk in running and pk not in decided and running[pk][pass_inputs.OVER_QUOTA] != over
    }
    locked = lock_decided(result, restand)
    holding = keep_decisions_still_valid(result, locked)
    by_pk = {d.pk: d for d in departments}
    # Each pending job's (reason, held for the fabric since) as read: what record_waiting_reasons changes.
    stored = {pk: (row.pending_reason, row.fabric_held_since) for pk, row in pending.items()}
    stored.update(
        (pk, (row.pending_reason, row.fabric_held_since))
        for pk, row in locked.items()
        if row.state == JobState.PENDING
    )
    # The writes are sent without waiting for each (PostgreSQL): the database makes them, and checks the
    # allocations' foreign keys, while the Python work below them goes on.
    with pipelined():
        changes, events = preempt(result, holding, pending, slug)
        started_changes, started_events, record = start_jobs(result, state, locked, now, pending)
        projects_by_pk = {row[0]: row for row in project_rows}
        standing_changes, standing_events = write_standing(result, restand, holding, by_pk, projects_by_pk)
        record_bulk_change(
            Job,
            {**changes, **started_changes, **standing_changes},
            # The jobs as the audit names them (Job.__str__: name and department), from the rows locked above.
            described={
                pk: (f"{row.name} ({by_pk[row.department_id]})", row.department_id)
                for pk, row in locked.items()
            },
        )
        record_waiting_reasons(result.waiting, stored, result.fabric_held_since)
        insert_events([*events, *started_events, *standing_events])
        for start in result.started:
            enqueue(DISPATCH_JOB, start.job_id)
        # Stranded capacity on the cluster as the engine left it (the writes do not change it).
        stranded_now = stranded(inputs.cluster, left_waiting).as_dict()
        # Kept before the writes are answered: a kept cluster is checked against the database at the next
        # pass, so it stays right if they fail (the pass rolls back) as if they were made.
        state.standing = result.standing  # where the next pass's standing order starts
        pass_cache.keep(state, decided)  # the jobs it started or preempted: the only ones the engine moved
        record()  # waits for the allocations' ids
    # Slice jobs on free MIG devices, which the engine never gives (scheduling.services.slices).
    slices_started, slices_waiting = place_slice_jobs(now)
    return PassSummary(
        started=len(result.started) + slices_started,
        preempted=len(result.preempted),
        waiting=len(result.waiting) + slices_waiting,
        decisions=result.decisions,
        ms=(time.perf_counter() - started_clock) * 1000,
        cold=state.cold,
        reread=state.reread,
        stranded=stranded_now,
        recarves=len(recarves),
        queue=result.queue,
        estimated_starts={
            str(r.job_id): datetime.fromtimestamp(r.start_at, tz=UTC).isoformat(timespec="seconds")
            for r in result.reservations
            if r.job_id in result.waiting and math.isfinite(r.start_at)
        },
    )


@contextlib.contextmanager
def _collection_deferred():
    """Python's cycle collector paused while a pass holds the scheduler's lock: a full collection walks every
    object of the process (the kept cluster's too: ~70 ms at 1,000 racks) and may fall in any pass. It runs
    once the lock is released instead; the pass's own garbage is freed by reference counting as before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def run_pass(*, only_if_requested: bool = False, fabric: Fabric | None = None) -> PassSummary | None:
    """Run passes while scheduling requests are waiting; None when another pass holds the lock (it will
    see our requests), or, with `only_if_requested` (the task), when no request is left: a pass that ran
    meanwhile answered it (eighteen node reports in a row ask eighteen times, and one or two passes run).
    `fabric`: the compute fabric above the racks multi-rack jobs are placed on (core.fabric; none: flat)."""
    with contextlib.suppress(IntegrityError):  # made by a concurrent pass just now
        SchedulerState.objects.get_or_create(pk=1)
    summary = None
    while True:
        with _collection_deferred(), transaction.atomic():
            state = SchedulerState.objects.select_for_update(skip_locked=True).filter(pk=1).first()
            if state is None:
                return summary
            upto = SchedulingRequest.objects.aggregate(last=Max("pk"))["last"]
            if upto is None and only_if_requested:
                return summary
            now = timezone.now()
            summary = _pass(now, fabric)
            if upto is not None:
                SchedulingRequest.objects.filter(pk__lte=upto).delete()
            state.last_pass_at = now
            state.last_pass_ms = summary.ms
            state.queue = summary.queue
            state.estimated_starts = summary.estimated_starts
            state.last_summary = {
                "started": summary.started,
                "preempted": summary.preempted,
                "waiting": summary.waiting,
                "decisions": summary.decisions,
                "stranded": summary.stranded,
            }
            state.save()
        # Checked after the lock is released: a request that came in meanwhile either is seen here or its
        # own task finds the lock free.
        if not SchedulingRequest.objects.exists():
            return summary
