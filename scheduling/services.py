"""Jobs: submission, the scheduling pass, cancellation. Every change is a row first, a task second.

* `submit_job` validates against the inventory and the department, makes the Job (or returns the one a
  retried request with the same Idempotency-Key and body made; the key with another body is refused),
  records a scheduling request and, on commit, asks for a pass.
* `request_pass` asks for a pass on commit. Besides submissions and job ends, scheduling.signals asks for
  one whenever something a decision depends on changes (guarantees, trays, GPU health, fabric, partitions,
  dedications). Requests coalesce: one pass serves every request recorded before it started.
* `run_pass` runs the pure engine (scheduling.engine) on the database's state, and writes back every
  running job's in-quota/borrowed standing and every pending job's reason. Passes run one at a time:
  each holds the row lock of the single SchedulerState row (taken with SKIP LOCKED: a pass that finds it
  taken leaves; the holder runs again while scheduling requests newer than its start remain). Within the
  pass, Allocation's unique GPU constraint makes giving one GPU twice impossible whatever happens.
  A pass makes a fixed number of queries whatever the number of racks or jobs: one per table it reads,
  one statement per kind of change it writes (set-based, the audit and job events in bulk); the engine's
  cluster comes from scheduling.pass_inputs, which on PostgreSQL keeps it between passes and checks it
  against the database at each one.
* `cancel_job` stops a job; a backend job that must be stopped (cancelled or preempted) becomes a
  BackendCancel row that the sync task retries until the backend confirms.

Dispatch to Slurm/Kubernetes and the sync of their state are in integrations.dispatch.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import time
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F, Max, Q
from django.urls import reverse
from django.utils import timezone

from core import posix
from core.access import is_admin, leads
from core.audit import record_bulk_change
from core.enqueue import enqueue, send_now
from core.hardware import GPUS_PER_TRAY
from core.models import NotificationEvent
from core.notifications import enabled_subscriptions, notify
from inventory.choices import TrayState
from inventory.models import ComputeTray
from scheduling import pass_inputs
from scheduling.choices import FINISHED_STATES, HOLDING_STATES, Backend, JobEventKind, JobState, Topology
from scheduling.engine import placement as engine_placement
from scheduling.engine.cluster import Cluster
from scheduling.engine.scheduler import (
    PREEMPTIBLE_CLASSES,
    PassResult,
    Start,
    schedule,
)
from scheduling.models import (
    FALLBACK_AFTER_MAX_MINUTES,
    Allocation,
    BackendCancel,
    Job,
    JobEvent,
    SchedulerState,
    SchedulingRequest,
)
from tenancy.models import Department, Membership, Project, posix_identity_of
from tenancy.projects import check_job_project

# Tasks are started by name (core.enqueue): the pass is this layer's own; dispatch and the job sync belong
# to integrations, which this layer does not import.
SCHEDULE_JOBS = "scheduling.tasks.schedule_jobs"
DISPATCH_JOB = "integrations.tasks.dispatch_job"
SYNC_JOBS = "integrations.tasks.sync_jobs"
FOLLOW_PLANS = "integrations.tasks.follow_active_plans"

# --- submission --------------------------------------------------------------------------------------


def submittable_departments(user):
    """Departments `user` may submit jobs for: all for an admin, else those it belongs to."""
    if is_admin(user):
        return Department.objects.all()
    return Department.objects.filter(pk__in=Membership.objects.filter(user=user).values("department_id"))


@dataclass(frozen=True)
class Capacity:
    """The largest shapes the cluster can hold for one department (whole trays that can be schedulable)."""

    partition_trays: int
    rack_trays: int
    trays: int


def capacity_for(department: Department) -> Capacity:
    """Largest partition, rack and total of trays a job of `department` could use (ignoring what runs)."""
    rows = (
        ComputeTray.objects.filter(partition__isnull=False)
        .filter(Q(partition__dedication__isnull=True) | Q(partition__dedication__department=department))
        .values("partition_id", "rack_id")
        .annotate(n=Count("pk"))
    )
    per_partition: dict[int, int] = {}
    per_rack: dict[int, int] = {}
    for row in rows:
        per_partition[row["partition_id"]] = per_partition.get(row["partition_id"], 0) + row["n"]
        per_rack[row["rack_id"]] = per_rack.get(row["rack_id"], 0) + row["n"]
    return Capacity(
        partition_trays=max(per_partition.values(), default=0),
        rack_trays=max(per_rack.values(), default=0),
        trays=sum(per_partition.values()),
    )


def check_request(department: Department, gpus: int, topology: str, priority_class: str) -> dict[str, str]:
    """What is wrong with a job request, by field (empty when it can run some day)."""
    errors: dict[str, str] = {}
    try:
        engine_placement.check_gpus(gpus)
    except ValueError as error:
        return {"gpus": str(error)}
    if department.limit_gpus is not None and gpus > department.limit_gpus:
        errors["gpus"] = (
            f"{gpus} GPUs is over the department's limit of {department.limit_gpus} GPUs: it could never run"
        )
        return errors
    if priority_class not in PREEMPTIBLE_CLASSES and gpus > department.guaranteed_gpus:
        errors["priority_class"] = (
            f"{priority_class} jobs are not preemptible and run only within the department's guarantee "
            f"({department.guaranteed_gpus} GPUs); this job asks for {gpus}: submit it as train, or ask "
            "for a larger guarantee"
        )
        return errors
    trays = max(1, gpus // GPUS_PER_TRAY)
    capacity = capacity_for(department)
    if gpus > GPUS_PER_TRAY:
        if topology == Topology.PARTITION and trays > capacity.partition_trays:
            errors["gpus"] = (
                f"{gpus} GPUs is {trays} trays, more than any NVLink partition can hold (the largest has "
                f"{capacity.partition_trays} trays): ask for topology rack or any, or for fewer GPUs"
            )
        elif topology == Topology.RACK and trays > capacity.rack_trays:
            errors["gpus"] = (
                f"{gpus} GPUs is {trays} trays, more than any rack can hold (the largest has "
                f"{capacity.rack_trays} trays usable): ask for topology any, or for fewer GPUs"
            )
        elif trays > capacity.trays:
            errors["gpus"] = f"{gpus} GPUs is {trays} trays; the cluster has {capacity.trays}"
    elif capacity.trays == 0:
        errors["gpus"] = "the cluster has no tray this department may use"
    return errors


def default_topology(gpus: int) -> str:
    return Topology.PARTITION if gpus > GPUS_PER_TRAY else Topology.ANY


# Topologies from the strictest to the widest: a job's fallback must be wider than its topology.
TOPOLOGY_WIDTH = {Topology.PARTITION: 0, Topology.RACK: 1, Topology.ANY: 2}
DEFAULT_FALLBACK_AFTER_MINUTES = 120  # when a job gives a fallback topology but no bound


def check_fallback(
    topology: str, fallback_topology: str, fallback_after_minutes: int | None
) -> dict[str, str]:
    """What is wrong with a job's fallback opt-in, by field (empty when nothing). `fallback_topology` ""
    means none (the job's topology stays strict)."""
    if not fallback_topology:
        if fallback_after_minutes is not None:
            return {
                "fallback_after_minutes": "a wait bound needs a fallback_topology (the wider topology the "
                "job accepts after it): give one, or leave both out"
            }
        return {}
    if fallback_topology not in TOPOLOGY_WIDTH:
        return {"fallback_topology": f"{fallback_topology!r} is not a topology: partition, rack or any"}
    if TOPOLOGY_WIDTH[fallback_topology] <= TOPOLOGY_WIDTH.get(topology, 0):
        wider = [t.value for t in Topology if TOPOLOGY_WIDTH[t] > TOPOLOGY_WIDTH.get(topology, 0)]
        return {
            "fallback_topology": f"the fallback must be wider than the job's topology ({topology}): "
            + (f"give {' or '.join(wider)}, or leave it out" if wider else "nothing is wider; leave it out")
        }
    if fallback_after_minutes is not None and not 1 <= fallback_after_minutes <= FALLBACK_AFTER_MAX_MINUTES:
        return {
            "fallback_after_minutes": f"between 1 and {FALLBACK_AFTER_MAX_MINUTES} minutes (a week); "
            f"{fallback_after_minutes} is out of range"
        }
    return {}


def check_run_as(user, backend: str) -> dict[str, str]:
    """Whether `user` may have a job run on `backend` now, by field (empty when so): jobs run as their
    person's Unix user (integrations.dispatch), never as someone else's, so a live backend needs the person's
    POSIX identity. submit_job refuses with it, and the job form's preview says it too."""
    if posix.identity_required(backend) and posix_identity_of(user) is None:
        return {
            "backend": posix.no_identity_message(Backend(backend).label if backend in Backend else backend)
        }
    return {}


class IdempotencyKeyReused(Exception):
    """An Idempotency-Key already used by this user for a different submission (answered 422)."""

    def __init__(self, key: str, job: Job):
        self.key, self.job = key, job
        super().__init__(
            f"the Idempotency-Key {key!r} was used for job {job.pk} with a different request: send that "
            "request again to get the job, or use a new key for a new job"
        )


def submission_fingerprint(
    *,
    department: Department,
    name: str,
    gpus: int,
    topology: str,
    priority_class: str,
    backend: str,
    time_limit_minutes: int,
    work: dict,
    fallback_topology: str = "",
    fallback_after_minutes: int | None = None,
    project=None,
) -> str:
    """sha256 of the canonical JSON of a validated submission: what makes two requests the same job.

    The migration that added Job.idempotency_fingerprint computes the same for older jobs; keep them equal
    (the fallback opt-in counts only when given, so a job without one keeps its fingerprint).
    """
    canonical = {
        "department": department.pk,
        "name": name,
        "gpus": gpus,
        "topology": topology,
        "priority_class": priority_class,
        "backend": backend,
        "time_limit_minutes": time_limit_minutes,
        "work": work,
    }
    if fallback_topology:
        canonical["fallback"] = [fallback_topology, fallback_after_minutes]
    if project is not None:  # counts only when given, as the fallback: older jobs keep their fingerprint
        canonical["project"] = project.pk
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def submission(user, idempotency_key: str, fingerprint: str | None = None) -> Job | None:
    """The job an earlier submission by `user` with this Idempotency-Key made, if any.

    With `fingerprint` (submission_fingerprint of the request at hand), IdempotencyKeyReused if that job was
    submitted with a different request.
    """
    if not idempotency_key:
        return None
    job = Job.objects.filter(submitted_by=user, idempotency_key=idempotency_key).first()
    if job is not None and fingerprint is not None and job.idempotency_fingerprint != fingerprint:
        raise IdempotencyKeyReused(idempotency_key, job)
    return job


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


def submit_job(
    *,
    user,
    department: Department,
    name: str,
    gpus: int,
    topology: str,
    priority_class: str,
    backend: str,
    work: dict,
    time_limit_minutes: int,
    idempotency_key: str = "",
    fallback_topology: str | None = "",
    fallback_after_minutes: int | None = None,
    project: Project | None = None,
) -> tuple[Job, bool]:
    """Make a pending job (validated) and ask for a pass; (job, created). With an idempotency key a second
    submission by the same user returns the first job, created False, if it is the same request (its
    submission_fingerprint), else raises IdempotencyKeyReused. `fallback_topology` (wider than `topology`,
    "" or None for none) is what the job accepts once it has waited `fallback_after_minutes` (default
    DEFAULT_FALLBACK_AFTER_MINUTES) within its department's guarantee."""
    fallback_topology = fallback_topology or ""
    errors = check_fallback(topology, fallback_topology, fallback_after_minutes)
    if errors:
        raise ValidationError(errors)
    if fallback_topology and fallback_after_minutes is None:
        fallback_after_minutes = DEFAULT_FALLBACK_AFTER_MINUTES
    fingerprint = submission_fingerprint(
        department=department,
        name=name,
        gpus=gpus,
        topology=topology,
        priority_class=priority_class,
        backend=backend,
        time_limit_minutes=time_limit_minutes,
        work=work,
        fallback_topology=fallback_topology,
        fallback_after_minutes=fallback_after_minutes,
        project=project,
    )
    existing = submission(user, idempotency_key, fingerprint)
    if existing is not None:
        return existing, False
    if not submittable_departments(user).filter(pk=department.pk).exists():
        raise ValidationError({"department": f"you are not a member of {department.slug}"})
    errors = check_job_project(user, department, project, gpus)  # a department with projects requires one
    errors = {**errors, **check_request(department, gpus, topology, priority_class)}
    errors.update(check_run_as(user, backend))
    if errors:
        raise ValidationError(errors)
    job = Job(
        department=department,
        project=project,
        submitted_by=user,
        name=name,
        gpus=gpus,
        topology=topology,
        priority_class=priority_class,
        backend=backend,
        work=work,
        time_limit_minutes=time_limit_minutes,
        fallback_topology=fallback_topology,
        fallback_after_minutes=fallback_after_minutes,
        idempotency_key=idempotency_key,
        idempotency_fingerprint=fingerprint if idempotency_key else "",
        pending_reason="waiting for the scheduler",
    )
    job.full_clean(exclude=["submitted_by", "department", "project"])
    try:
        with transaction.atomic():
            job.save()
            JobEvent.objects.create(
                job=job, kind=JobEventKind.SUBMITTED, message=f"{gpus} GPUs, {topology}{_fallback_words(job)}"
            )
            request_pass(f"submitted job {job.pk}")
    except IntegrityError:
        # A concurrent request with the same key won the race: its job if it was the same request.
        existing = submission(user, idempotency_key, fingerprint)
        if existing is not None:
            return existing, False
        raise
    return job, True


def _fallback_words(job: Job) -> str:
    if not job.fallback_topology:
        return ""
    return f"; {job.fallback_topology} accepted after {_wait_words(job.fallback_after_minutes * 60)}"


def _wait_words(seconds: float) -> str:
    minutes = max(1, round(seconds / 60))
    if minutes < 120:
        return f"{minutes} min"
    hours = minutes / 60
    return f"{hours:.0f} h" if hours == int(hours) else f"{hours:.1f} h"


def may_cancel(user, job: Job) -> bool:
    """The job's submitter, its department's leads and platform admins may cancel it."""
    if job.submitted_by_id is not None and job.submitted_by_id == user.pk:
        return True
    return leads(user, job.department_id)


# --- cancel ------------------------------------------------------------------------------------------


def release_gpus(job: Job) -> None:
    """Give the job's GPUs back (its allocations deleted). A partition plan waiting for a drained tray to
    empty moves on at once."""
    allocations = Allocation.objects.filter(job=job)
    if allocations.filter(gpu__tray__state=TrayState.DRAIN).exists():
        enqueue(FOLLOW_PLANS)
    allocations.delete()


def stop_in_backend(job: Job, reason: str) -> None:
    """Ask the backend to stop the job, if it has a backend job: a BackendCancel row the sync task retries
    until the backend confirms (one per backend job; `reason` kept for the record)."""
    if job.backend_id:
        BackendCancel.objects.get_or_create(
            backend=job.backend, backend_id=job.backend_id, defaults={"job": job, "reason": reason[:200]}
        )
        enqueue(SYNC_JOBS)


def cancel_job(job: Job, user=None) -> Job:
    """Cancel a pending, starting or running job. Its GPUs are free at once; a backend job is stopped by
    the sync task (retried until the backend confirms)."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.state in FINISHED_STATES:
            raise ValidationError(f"job {job.pk} has already ended ({job.get_state_display().lower()})")
        who = f" by {user.get_username()}" if user is not None and user.is_authenticated else ""
        stop_in_backend(job, f"cancelled{who}")
        release_gpus(job)
        was = job.state
        job.state = JobState.CANCELLED
        job.finished_at = timezone.now()
        job.pending_reason = ""
        job.next_dispatch_at = None
        job.save()
        JobEvent.objects.create(job=job, kind=JobEventKind.CANCELLED, message=f"cancelled{who} while {was}")
        if was in HOLDING_STATES:
            request_pass(f"cancelled job {job.pk}")
    return job


# --- the scheduling pass -----------------------------------------------------------------------------


@dataclass
class PassSummary:
    started: int
    preempted: int
    waiting: int
    decisions: int
    ms: float
    cold: bool = True  # the cluster was read cold, not kept from this process's last pass (pass_inputs)


def _load_cluster():
    """The engine's cluster read cold from the database, and its tray index by ComputeTray pk."""
    return pass_inputs.load_cluster()


# The columns a pass reads of the jobs it decides about, under their row locks (the audit's before-values).
# What it reads of the running and pending jobs: pass_inputs (`gather`).
_LOCKED = (
    "pk",
    "name",
    "state",
    "department_id",
    "gpus",
    "priority_class",
    "backend",
    "backend_id",
    "placement",
    "placed_at",
    "started_at",
    "over_quota",
    "pending_reason",
    "backend_message",
    "dispatch_attempts",
    "next_dispatch_at",
    "project_id",
    "preemptions",
    "submitted_by_id",  # who hears of a preemption (notify_job)
)
# What a preemption sets on its victim (besides counting it), and a start on its job (besides where it
# goes and its standing).
_REQUEUED = {
    "state": JobState.PENDING,
    "over_quota": False,
    "backend_id": "",
    "backend_message": "",
    "placed_at": None,
    "started_at": None,
    "next_dispatch_at": None,
    "pending_reason": "waiting: preempted; back in the queue",
}


def _placed(now) -> dict:
    return {
        "state": JobState.STARTING,
        "placed_at": now,
        "pending_reason": "",
        "backend_message": "",
        "dispatch_attempts": 0,
        "next_dispatch_at": None,
    }


def _event(job_id: int, kind: str, message: str = "", placement=None) -> dict:
    """A JobEvent's values (`_insert_events` writes them all at once)."""
    return {"job_id": job_id, "kind": kind, "message": message[:500], "placement": placement or []}


def _recordset(model, rows: list[dict]) -> tuple[str, str]:
    """PostgreSQL: rows of column values as one JSON parameter and its `jsonb_to_recordset` column list.

    One string to quote: the driver quotes every element of an array parameter in Python (a regular
    expression per quote character), which costs more than the query for rows of text and JSON."""
    columns = {f.column: f for f in model._meta.concrete_fields}
    names = list(rows[0])
    typed = ", ".join(f'"{name}" {columns[name].db_type(connection)}' for name in names)
    return json.dumps(rows, cls=DjangoJSONEncoder), typed


def _insert_events(events: list[dict]) -> None:
    """The pass's job events, made now: one INSERT (PostgreSQL) or bulk_create."""
    if not events:
        return
    at = timezone.now()
    if connection.vendor != "postgresql":
        JobEvent.objects.bulk_create(JobEvent(**event, at=at) for event in events)
        return
    data, typed = _recordset(JobEvent, events)
    names = ", ".join(f'"{name}"' for name in events[0])
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {JobEvent._meta.db_table} ({names}, at) "
            f"SELECT {names}, %s FROM jsonb_to_recordset(%s::jsonb) AS v({typed})",
            [at, data],
        )


def _update_each(rows: dict[int, dict], common: dict | None = None) -> None:
    """Set `common` on the jobs `rows` names and each its own values ({pk: {field: value}}, the same fields
    in each). PostgreSQL: one UPDATE joined to the values (Django's bulk_update writes a CASE per row and
    field, which costs more to build than to run); elsewhere bulk_update."""
    if not rows:
        return
    common = common or {}
    names = list(next(iter(rows.values())))
    if connection.vendor != "postgresql":
        jobs = [Job(pk=pk, **common, **values) for pk, values in rows.items()]
        Job.objects.bulk_update(jobs, [*common, *names], batch_size=500)
        return
    meta = Job._meta
    sets, params = [], []
    for name, value in common.items():
        model_field = meta.get_field(name)
        sets.append(f'"{model_field.column}" = %s')
        params.append(model_field.get_db_prep_save(value, connection))
    columns = [meta.get_field(name).column for name in names]
    sets += [f'"{column}" = v."{column}"' for column in columns]
    data, typed = _recordset(
        Job,
        [{"id": pk, **dict(zip(columns, values.values(), strict=True))} for pk, values in rows.items()],
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {meta.db_table} SET {', '.join(sets)} FROM jsonb_to_recordset(%s::jsonb) AS v({typed}) "
            f"WHERE {meta.db_table}.id = v.id",
            [*params, data],
        )


def _int_array(values) -> str:
    """A PostgreSQL array literal of integers: one string to quote, not one parameter per element."""
    return "{" + ",".join(map(str, map(int, values))) + "}"


def _insert_allocations(allocations: list[tuple], now) -> dict[int, int]:
    """Allocation rows for (job, GPU, ...) tuples, made at `now`; each job's highest allocation id (the
    kept cluster's check, scheduling.pass_inputs). PostgreSQL: one INSERT from two arrays (no model
    instance per row); elsewhere bulk_create."""
    if not allocations:
        return {}
    if connection.vendor != "postgresql":
        made = Allocation.objects.bulk_create(Allocation(job_id=row[0], gpu_id=row[1]) for row in allocations)
        last: dict[int, int] = {}
        for allocation in made:
            last[allocation.job_id] = max(last.get(allocation.job_id, 0), allocation.pk or 0)
        return last
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH made AS (INSERT INTO {Allocation._meta.db_table} (job_id, gpu_id, created_at) "
            "SELECT job_id, gpu_id, %s FROM unnest(%s::bigint[], %s::bigint[]) AS v(job_id, gpu_id) "
            "RETURNING job_id, id) SELECT job_id, max(id) FROM made GROUP BY job_id",
            [now, _int_array(row[0] for row in allocations), _int_array(row[1] for row in allocations)],
        )
        return dict(cursor.fetchall())


def _changes(before: dict[int, tuple], after: dict[int, dict]) -> dict[int, dict]:
    """{pk: {field: (before, after)}} of the fields that change (for core.audit.record_bulk_change)."""
    changes = {}
    for pk, values in after.items():
        row = before[pk]
        diff = {
            name: (getattr(row, name), value) for name, value in values.items() if getattr(row, name) != value
        }
        if diff:
            changes[pk] = diff
    return changes


def _lock(result: PassResult, restand: dict[int, bool]) -> dict:
    """Lock the jobs the decisions change (in pk order, one query) and read them as they are now."""
    touched = {s.job_id for s in result.started} | set(result.preempted) | set(restand)
    if not touched:
        return {}
    return {
        row.pk: row
        for row in Job.objects.select_for_update()
        .filter(pk__in=touched)
        .order_by("pk")
        .values_list(*_LOCKED, named=True)
    }


def _keep_decisions_still_valid(result: PassResult, locked: dict) -> dict:
    """Drop the decisions on jobs no longer as they were read; the locked holding jobs by pk.

    The decisions were made on rows read without locks: a job may have been cancelled, finished or handed
    to its backend meanwhile (a dispatch or cancel in flight holds the row lock; `_lock` waited for it and
    reads its outcome)."""
    holding = {pk: row for pk, row in locked.items() if row.state in HOLDING_STATES}
    result.preempted = {v: j for v, j in result.preempted.items() if v in holding}
    result.started = [s for s in result.started if locked[s.job_id].state == JobState.PENDING]
    return holding


def _preempt(result: PassResult, holding: dict, pending: dict, slug: dict[int, str]):
    """Stop each victim in its backend, free its GPUs and put it back in the queue; (changes, events)."""
    victims = [holding[pk] for pk in result.preempted]
    if not victims:
        return {}, []
    cancels = [
        BackendCancel(
            job_id=victim.pk,
            backend=victim.backend,
            backend_id=victim.backend_id,
            reason=f"preempted for job {result.preempted[victim.pk]}"[:200],
        )
        for victim in victims
        if victim.backend_id
    ]
    if cancels:  # a cancel already asked for the same backend job stays as it is
        BackendCancel.objects.bulk_create(cancels, ignore_conflicts=True)
        enqueue(SYNC_JOBS)
    events = []
    subscriptions = enabled_subscriptions()  # once for every victim's notification
    for victim in victims:
        for_job = result.preempted[victim.pk]
        events.append(
            _event(
                victim.pk,
                JobEventKind.PREEMPTED,
                f"preempted: its GPUs were borrowed (over quota) and {slug[pending[for_job].department_id]} "
                f"reclaimed them for job #{for_job} within its guarantee; back in the queue",
                victim.placement,
            )
        )
        notify_job(
            victim,
            JobEventKind.PREEMPTED,
            f"department {slug[pending[for_job].department_id]} reclaimed its GPUs; back in the queue",
            department_slug=slug[victim.department_id],
            subscriptions=subscriptions,
        )
    pks = [victim.pk for victim in victims]
    Allocation.objects.filter(job_id__in=pks).delete()
    Job.objects.filter(pk__in=pks).update(**_REQUEUED, preemptions=F("preemptions") + 1)
    after = {victim.pk: {**_REQUEUED, "preemptions": victim.preemptions + 1} for victim in victims}
    return _changes(holding, after), events


_ONE = {Topology.PARTITION: "one NVLink partition", Topology.RACK: "one rack"}


def _placed_event(
    job_id: int, start: Start, cluster: Cluster, hosts: list[str], waited_s: float | None = None
) -> dict:
    shape = engine_placement.describe(cluster, start.placement)
    where = ", ".join(sorted({cluster.partition_label(cluster.tray_part[t]) for t, _ in start.placement}))
    quota = "over quota (borrowed, preemptible)" if start.over_quota else "in quota"
    fallback = ""
    if start.fell_back_from is not None:
        racks = sorted({cluster.rack_name[cluster.tray_rack[t]] for t, _ in start.placement})
        on = f"rack {racks[0]}" if len(racks) == 1 else f"racks {', '.join(racks)}"
        waited = f"waited {_wait_words(waited_s)}" if waited_s is not None else "waited"
        fallback = (
            f"{waited} for {_ONE.get(start.fell_back_from, start.fell_back_from)}; placed on {on} as its "
            "submitter allowed: "
        )
    return _event(
        job_id,
        JobEventKind.PLACED,
        fallback
        + f"placed {quota} on {len(hosts)} tray{'s' if len(hosts) != 1 else ''} in {where}"
        + (f" ({shape['partitions']} NVLink partitions)" if shape["partitions"] > 1 else ""),
        hosts,
    )


def _start(
    result: PassResult, state: pass_inputs.ClusterState, locked: dict, now, pending: dict | None = None
):
    """Allocate each started job its GPUs and mark it placed (STARTING, for dispatch); (changes, events).

    The free GPUs of the trays come from the cluster as it was read (with the preempted jobs' GPUs free);
    each start takes from the front of its trays' lists, so two small jobs packed on one tray get
    different GPUs."""
    if not result.started:
        return {}, []
    cluster = state.cluster
    freed = {gpu for victim in result.preempted if victim in state.held for gpu in state.held[victim].gpus}
    free_on = state.free_gpus({t for start in result.started for t, _ in start.placement}, freed)
    allocations: list[tuple[int, int, int]] = []  # (job, GPU, tray index)
    own: dict[int, dict] = {}
    events: list[dict] = []
    for start in result.started:
        for t, n in start.placement:
            gpus = free_on.get(t, [])
            allocations.extend((start.job_id, gpu_id, t) for gpu_id in gpus[:n])
            del gpus[:n]
        hosts = [cluster.tray_host[t] for t, _ in start.placement]
        own[start.job_id] = {"placement": hosts, "over_quota": start.over_quota}
        waited = None
        if start.fell_back_from is not None and pending and start.job_id in pending:
            waited = now.timestamp() - pass_inputs.epoch(pending[start.job_id].created_at)
        events.append(_placed_event(start.job_id, start, cluster, hosts, waited))
    # The unique GPU constraint refuses a double allocation outright (the whole pass rolls back).
    last = _insert_allocations(allocations, now)
    # The next pass of this process finds them here (if this one commits) instead of reading them; their
    # version is placed_at as pass_inputs.read_running gives it.
    state.record(now.timestamp(), allocations, last)
    common = _placed(now)
    _update_each(own, common)
    return _changes(locked, {pk: {**common, **values} for pk, values in own.items()}), events


def _standing_words(
    job,
    over_quota: bool,
    result: PassResult,
    departments: dict[int, Department],
    projects: dict | None = None,
) -> str:
    department = departments[job.department_id]
    share = result.in_quota_share.get(department.slug, 0)
    quota = f"{department.slug}'s guarantee is {department.guaranteed_gpus} GPUs (in-quota share now {share})"
    project = (projects or {}).get(getattr(job, "project_id", None))  # (pk, department, slug, guarantee, ...)
    key = (department.slug, project[2]) if project is not None else None
    if not over_quota and job.pk in result.sibling_borrowed:  # in quota for the department, not its leaf
        own = (
            f"project {key[0]}-{key[1]}'s own guarantee of {project[3]} GPUs"
            if project is not None
            else "what its projects leave to work without a project"
        )
        return (
            f"now in quota: {quota}; this job's {job.gpus} GPUs fit within it beyond {own}, in its sibling "
            "projects' unused guarantee, which their in-quota work may take back"
        )
    if key in result.project_in_quota_share and not over_quota:  # within its project's own share
        share = result.project_in_quota_share[key]
        quota = f"project {key[0]}-{key[1]}'s guarantee is {project[3]} GPUs (in-quota share now {share})"
    if not over_quota:
        return f"now in quota: {quota}; with its older running jobs this job's {job.gpus} GPUs fit within it"
    preemptible = " (preemptible)" if job.priority_class in PREEMPTIBLE_CLASSES else ""
    owner = result.on_dedicated.get(job.pk)
    if owner is not None:
        return (
            f"now borrowed{preemptible}: it runs on a partition dedicated to {owner}, whose in-quota work "
            "reclaims it first"
        )
    return f"now borrowed{preemptible}: {quota} and its older running jobs hold it"


def _restand(
    result: PassResult,
    restand: dict[int, bool],
    holding: dict,
    departments: dict[int, Department],
    projects: dict | None = None,
):
    """Write the pass's in-quota/borrowed standing of the running jobs whose standing changed (`restand`:
    not started or preempted by this pass); (changes, their QUOTA events)."""
    changed = {pk: over for pk, over in restand.items() if pk in holding and holding[pk].over_quota != over}
    events = []
    for over in (False, True):
        pks = [pk for pk, value in changed.items() if value == over]
        if pks:
            Job.objects.filter(pk__in=pks).update(over_quota=over)
    for pk, over in changed.items():
        words = _standing_words(holding[pk], over, result, departments, projects)
        events.append(_event(pk, JobEventKind.QUOTA, words))
    return _changes(holding, {pk: {"over_quota": over} for pk, over in changed.items()}), events


def _record_waiting_reasons(waiting: dict[int, str], reasons: dict[int, str]) -> None:
    """Store why each job still waits, writing only the reasons that changed."""
    _update_each(
        {
            job_id: {"pending_reason": reason[:500]}
            for job_id, reason in waiting.items()
            if job_id in reasons and reasons[job_id] != reason[:500]
        }
    )


def _pass(now) -> PassSummary:
    """Read the cluster and the queue, let the engine decide, then apply what is still valid under lock.

    A fixed number of queries whatever the number of racks, jobs or decisions: every read is one query
    per table, every write one statement per kind of change (tests/scheduling/test_pass_queries.py)."""
    started_clock = time.perf_counter()
    # The pass's inputs (the job form's dry run, scheduling.preview, reads the same through `gather`).
    inputs = pass_inputs.gather()
    state, departments, slug = inputs.state, inputs.departments, inputs.slug
    project_rows, running, pending = inputs.project_rows, inputs.running, inputs.pending
    result = schedule(*inputs.engine_args(now))

    decided = {s.job_id for s in result.started} | set(result.preempted)
    restand = {
        pk: over
        for pk, over in result.over_quota.items()
        if pk in running and pk not in decided and running[pk][pass_inputs.OVER_QUOTA] != over
    }
    locked = _lock(result, restand)
    holding = _keep_decisions_still_valid(result, locked)
    by_pk = {d.pk: d for d in departments}
    reasons = {pk: row.pending_reason for pk, row in pending.items()}
    reasons.update((pk, row.pending_reason) for pk, row in locked.items() if row.state == JobState.PENDING)
    changes, events = _preempt(result, holding, pending, slug)
    started_changes, started_events = _start(result, state, locked, now, pending)
    projects_by_pk = {row[0]: row for row in project_rows}
    standing_changes, standing_events = _restand(result, restand, holding, by_pk, projects_by_pk)
    record_bulk_change(
        Job,
        {**changes, **started_changes, **standing_changes},
        # The jobs as the audit names them (Job.__str__: name and department), from the rows locked above.
        described={
            pk: (f"{row.name} ({by_pk[row.department_id]})", row.department_id) for pk, row in locked.items()
        },
    )
    _record_waiting_reasons(result.waiting, reasons)
    _insert_events([*events, *started_events, *standing_events])
    for start in result.started:
        enqueue(DISPATCH_JOB, start.job_id)
    pass_inputs.keep(state)
    return PassSummary(
        started=len(result.started),
        preempted=len(result.preempted),
        waiting=len(result.waiting),
        decisions=result.decisions,
        ms=(time.perf_counter() - started_clock) * 1000,
        cold=state.cold,
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


def run_pass(*, only_if_requested: bool = False) -> PassSummary | None:
    """Run passes while scheduling requests are waiting; None when another pass holds the lock (it will
    see our requests), or, with `only_if_requested` (the task), when no request is left: a pass that ran
    meanwhile answered it (eighteen node reports in a row ask eighteen times, and one or two passes run)."""
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
            summary = _pass(now)
            if upto is not None:
                SchedulingRequest.objects.filter(pk__lte=upto).delete()
            state.last_pass_at = now
            state.last_pass_ms = summary.ms
            state.last_summary = {
                "started": summary.started,
                "preempted": summary.preempted,
                "waiting": summary.waiting,
                "decisions": summary.decisions,
            }
            state.save()
        # Checked after the lock is released: a request that came in meanwhile either is seen here or its
        # own task finds the lock free.
        if not SchedulingRequest.objects.exists():
            return summary


# Job events people subscribe to (core.notifications; portal.my_notifications): JobEventKind -> event.
JOB_NOTICES = {
    JobEventKind.STARTED: NotificationEvent.JOB_STARTED,
    JobEventKind.PREEMPTED: NotificationEvent.JOB_PREEMPTED,
    JobEventKind.COMPLETED: NotificationEvent.JOB_FINISHED,
    JobEventKind.FAILED: NotificationEvent.JOB_FAILED,
}


def notify_job(
    job: Job, kind: str, message: str = "", *, department_slug: str | None = None, subscriptions=None
) -> None:
    """Tell the job's subscribers (its submitter's own subscriptions: scope user:<id>; its department's:
    department:<slug>; this job's: job:<id>) that it started, was preempted, finished or failed. Recorded in
    the caller's transaction, sent after it commits."""
    event = JOB_NOTICES.get(kind)
    if event is None:
        return
    slug = (
        department_slug or Department.objects.filter(pk=job.department_id).values_list("slug", flat=True)[0]
    )
    verb = {
        NotificationEvent.JOB_STARTED: "started",
        NotificationEvent.JOB_PREEMPTED: "was preempted",
        NotificationEvent.JOB_FINISHED: "finished",
        NotificationEvent.JOB_FAILED: "failed",
    }[event]
    scope = [f"job:{job.pk}", f"department:{slug}"]
    if job.submitted_by_id:
        scope.insert(0, f"user:{job.submitted_by_id}")
    notify(
        event,
        f"Job {job.name} (#{job.pk}) {verb}" + (f": {message}" if message else ""),
        {"job": job.pk, "name": job.name, "department": slug, "event": event, "message": message[:500]},
        scope=scope,
        link=reverse("scheduling:job-detail", args=[job.pk]),
        subscriptions=subscriptions,
    )


def finish_job(job: Job, state: str, message: str = "", exit_code: int | None = None) -> None:
    """A holding job ended in its backend: record it, free its GPUs, ask for a pass. Caller holds the lock."""
    kind = {
        JobState.COMPLETED: JobEventKind.COMPLETED,
        JobState.FAILED: JobEventKind.FAILED,
        JobState.CANCELLED: JobEventKind.CANCELLED,
    }[state]
    release_gpus(job)
    job.state = state
    job.finished_at = timezone.now()
    job.exit_code = exit_code
    job.backend_message = message[:500]
    job.next_dispatch_at = None
    job.save()
    JobEvent.objects.create(job=job, kind=kind, message=message)
    notify_job(job, kind, message)
    request_pass(f"job {job.pk} {state}")
