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
* `cancel_job` stops a job; a backend job that must be stopped (cancelled or preempted) becomes a
  BackendCancel row that the sync task retries until the backend confirms.

Dispatch to Slurm/Kubernetes and the sync of their state are in integrations.dispatch.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count, Max, Q
from django.utils import timezone

from core.access import is_admin, leads
from core.audit import bulk_update_recorded, record_bulk_change
from core.enqueue import enqueue, send_now
from core.hardware import GPUS_PER_TRAY
from inventory.choices import TrayState
from inventory.models import ComputeTray, Gpu
from inventory.selectors import unsettled_fabric_trays
from scheduling.choices import FINISHED_STATES, HOLDING_STATES, JobEventKind, JobState, Topology
from scheduling.engine import placement as engine_placement
from scheduling.engine.cluster import Cluster, TraySpec
from scheduling.engine.scheduler import (
    PREEMPTIBLE_CLASSES,
    PassResult,
    PendingJob,
    RunningJob,
    Start,
    schedule,
)
from scheduling.engine.scheduler import Department as EngineDepartment
from scheduling.models import (
    Allocation,
    BackendCancel,
    Job,
    JobEvent,
    SchedulerState,
    SchedulingRequest,
)
from tenancy.models import Department, Membership
from tenancy.services import schedulable_gpus_q

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


def _event(job: Job, kind: str, message: str = "", placement=None) -> JobEvent:
    return JobEvent(job=job, kind=kind, message=message[:500], placement=placement or [])


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
) -> str:
    """sha256 of the canonical JSON of a validated submission: what makes two requests the same job.

    The migration that added Job.idempotency_fingerprint computes the same for older jobs; keep them equal.
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
) -> tuple[Job, bool]:
    """Make a pending job (validated) and ask for a pass; (job, created). With an idempotency key a second
    submission by the same user returns the first job, created False, if it is the same request (its
    submission_fingerprint), else raises IdempotencyKeyReused."""
    fingerprint = submission_fingerprint(
        department=department,
        name=name,
        gpus=gpus,
        topology=topology,
        priority_class=priority_class,
        backend=backend,
        time_limit_minutes=time_limit_minutes,
        work=work,
    )
    existing = submission(user, idempotency_key, fingerprint)
    if existing is not None:
        return existing, False
    if not submittable_departments(user).filter(pk=department.pk).exists():
        raise ValidationError({"department": f"you are not a member of {department.slug}"})
    errors = check_request(department, gpus, topology, priority_class)
    if errors:
        raise ValidationError(errors)
    job = Job(
        department=department,
        submitted_by=user,
        name=name,
        gpus=gpus,
        topology=topology,
        priority_class=priority_class,
        backend=backend,
        work=work,
        time_limit_minutes=time_limit_minutes,
        idempotency_key=idempotency_key,
        idempotency_fingerprint=fingerprint if idempotency_key else "",
        pending_reason="waiting for the scheduler",
    )
    job.full_clean(exclude=["submitted_by", "department"])
    try:
        with transaction.atomic():
            job.save()
            JobEvent.objects.create(job=job, kind=JobEventKind.SUBMITTED, message=f"{gpus} GPUs, {topology}")
            request_pass(f"submitted job {job.pk}")
    except IntegrityError:
        # A concurrent request with the same key won the race: its job if it was the same request.
        existing = submission(user, idempotency_key, fingerprint)
        if existing is not None:
            return existing, False
        raise
    return job, True


def may_cancel(user, job: Job) -> bool:
    """The job's submitter, its department's leads and platform admins may cancel it."""
    if job.submitted_by_id is not None and job.submitted_by_id == user.pk:
        return True
    return leads(user, job.department_id)


# --- cancel ------------------------------------------------------------------------------------------


def _free(job: Job) -> None:
    """Give the job's GPUs back. A partition plan waiting for a drained tray to empty moves on at once."""
    allocations = Allocation.objects.filter(job=job)
    if allocations.filter(gpu__tray__state=TrayState.DRAIN).exists():
        enqueue(FOLLOW_PLANS)
    allocations.delete()


def _stop_in_backend(job: Job, reason: str) -> None:
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
        _stop_in_backend(job, f"cancelled{who}")
        _free(job)
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


def _epoch(value) -> float:
    return value.timestamp() if value is not None else time.time()


def _load_cluster():
    """The engine's cluster from the database: trays in rack/partition/slot order, each with the GPUs that
    can run work (schedulable, or already allocated), whether its fabric is settled (inventory.selectors.
    unsettled_fabric_trays: multi-tray jobs avoid the others), and every holding job allocated on it."""
    trays = list(
        ComputeTray.objects.filter(partition__isnull=False)
        .order_by("rack__name", "partition__clique_id", "slot")
        .values_list(
            "pk", "hostname", "rack__name", "partition__name", "partition__dedication__department__slug"
        )
    )
    capacity = dict(
        Gpu.objects.filter(schedulable_gpus_q() | Q(allocations__isnull=False), tray__isnull=False)
        .values("tray_id")
        .annotate(n=Count("pk"))
        .values_list("tray_id", "n")
    )
    unsettled = set(unsettled_fabric_trays().values_list("pk", flat=True))
    cluster = Cluster(
        TraySpec(
            hostname, rack, partition, min(GPUS_PER_TRAY, capacity.get(pk, 0)), owner, pk not in unsettled
        )
        for pk, hostname, rack, partition, owner in trays
    )
    tray_index = {pk: cluster.host_index[hostname] for pk, hostname, *_ in trays}
    held: dict[int, list[tuple[int, int]]] = {}
    for job_id, tray_id, n in (
        Allocation.objects.filter(job__state__in=HOLDING_STATES, gpu__tray__isnull=False)
        .values("job_id", "gpu__tray_id")
        .annotate(n=Count("pk"))
        .values_list("job_id", "gpu__tray_id", "n")
    ):
        if tray_id in tray_index:
            held.setdefault(job_id, []).append((tray_index[tray_id], n))
    for job_id, placement in held.items():
        cluster.allocate(job_id, placement)
    return cluster, tray_index


# Fields a preemption and a start change on a Job (one bulk update each).
_PREEMPTED_FIELDS = [
    "state",
    "preemptions",
    "over_quota",
    "backend_id",
    "backend_message",
    "placed_at",
    "started_at",
    "next_dispatch_at",
    "pending_reason",
]
_STARTED_FIELDS = [
    "state",
    "placement",
    "placed_at",
    "over_quota",
    "pending_reason",
    "backend_message",
    "dispatch_attempts",
    "next_dispatch_at",
]


def _engine_departments(departments: list[Department]) -> list[EngineDepartment]:
    return [
        EngineDepartment(d.slug, d.guaranteed_gpus, float(d.over_quota_weight), d.limit_gpus, d.priority)
        for d in departments
    ]


def _running_jobs(cluster: Cluster, slug: dict[int, str]) -> tuple[list[RunningJob], dict[int, Job]]:
    """The holding jobs that hold GPUs on the cluster, as the engine sees them, and their rows by pk."""
    rows = {j.pk: j for j in Job.objects.filter(state__in=HOLDING_STATES) if j.pk in cluster.jobs}
    return [
        RunningJob(
            id=j.pk,
            department=slug[j.department_id],
            gpus=j.gpus,
            started_at=_epoch(j.placed_at or j.started_at),
            expected_end=_epoch(j.placed_at or j.started_at) + j.time_limit_minutes * 60,
            over_quota=j.over_quota,
            priority_class=j.priority_class,
        )
        for j in rows.values()
    ], rows


def _pending_jobs(pending_jobs: dict[int, Job], slug: dict[int, str]) -> list[PendingJob]:
    return [
        PendingJob(
            id=j.pk,
            department=slug[j.department_id],
            gpus=j.gpus,
            topology=j.topology,
            priority_class=j.priority_class,
            submitted_at=_epoch(j.created_at),
            time_limit_s=j.time_limit_minutes * 60,
        )
        for j in pending_jobs.values()
    ]


def _keep_decisions_still_valid(result: PassResult, pending_jobs: dict[int, Job]) -> dict[int, Job]:
    """Lock the jobs the decisions change and drop the decisions on jobs no longer as they were read.

    The decisions were made on rows read without locks: a job may have been cancelled, finished or handed
    to its backend meanwhile (a dispatch or cancel in flight holds the row lock; we wait for it and then
    see its outcome). Locked pending jobs replace their unlocked copies in `pending_jobs`; returns the
    locked holding jobs by pk (the victims)."""
    touched = [s.job_id for s in result.started] + list(result.preempted)
    current = {j.pk: j for j in Job.objects.select_for_update().filter(pk__in=touched).order_by("pk")}
    holding_by_pk = {pk: job for pk, job in current.items() if job.state in HOLDING_STATES}
    still_pending = {pk: job for pk, job in current.items() if job.state == JobState.PENDING}
    for pk, job in still_pending.items():
        if pk in pending_jobs:
            pending_jobs[pk] = job
    result.preempted = {v: j for v, j in result.preempted.items() if v in holding_by_pk}
    result.started = [s for s in result.started if s.job_id in still_pending]
    return holding_by_pk


def _requeue(victim: Job) -> None:
    victim.state = JobState.PENDING
    victim.preemptions += 1
    victim.over_quota = False
    victim.backend_id = ""
    victim.backend_message = ""
    victim.placed_at = victim.started_at = None
    victim.next_dispatch_at = None
    victim.pending_reason = "waiting: preempted; back in the queue"


def _preempt(
    preempted: dict[int, int], holding_by_pk: dict[int, Job], pending_jobs: dict[int, Job]
) -> list[JobEvent]:
    """Stop each victim in its backend, free its GPUs and put it back in the queue; its events."""
    events: list[JobEvent] = []
    for victim_id, for_job in preempted.items():
        victim = holding_by_pk[victim_id]
        _stop_in_backend(victim, f"preempted for job {for_job}")
        beneficiary = pending_jobs[for_job]
        events.append(
            _event(
                victim,
                JobEventKind.PREEMPTED,
                f"preempted: its GPUs were borrowed (over quota) and {beneficiary.department.slug} "
                f"reclaimed them for job #{for_job} within its guarantee; back in the queue",
                victim.placement,
            )
        )
        _requeue(victim)
    if preempted:
        Allocation.objects.filter(job_id__in=list(preempted)).delete()
        bulk_update_recorded([holding_by_pk[pk] for pk in preempted], _PREEMPTED_FIELDS)
    return events


def _free_gpus_on(tray_pks: set[int]) -> dict[int, list[int]]:
    """The free GPUs of these trays, in one query: tray -> GPU pks in index order. Each start takes from
    the front of its trays' lists, so two small jobs packed on one tray get different GPUs."""
    free_on: dict[int, list[int]] = {}
    for gpu_id, tray_id in (
        Gpu.objects.filter(schedulable_gpus_q(), tray_id__in=tray_pks, allocations__isnull=True)
        .order_by("tray_id", "index")
        .values_list("pk", "tray_id")
    ):
        free_on.setdefault(tray_id, []).append(gpu_id)
    return free_on


def _place(job: Job, start: Start, cluster: Cluster, now) -> JobEvent:
    """Mark the job placed on the start's trays (STARTING, for dispatch); its PLACED event."""
    hosts = [cluster.tray_host[t] for t, _ in start.placement]
    shape = engine_placement.describe(cluster, start.placement)
    where = ", ".join(sorted({cluster.partition_label(cluster.tray_part[t]) for t, _ in start.placement}))
    job.state = JobState.STARTING
    job.placement = hosts
    job.placed_at = now
    job.over_quota = start.over_quota
    job.pending_reason = ""
    job.backend_message = ""
    job.dispatch_attempts = 0
    job.next_dispatch_at = None
    quota = "over quota (borrowed, preemptible)" if start.over_quota else "in quota"
    return _event(
        job,
        JobEventKind.PLACED,
        f"placed {quota} on {len(hosts)} tray{'s' if len(hosts) != 1 else ''} in {where}"
        + (f" ({shape['partitions']} NVLink partitions)" if shape["partitions"] > 1 else ""),
        hosts,
    )


def _start(
    result: PassResult, cluster: Cluster, tray_pk: dict[int, int], pending_jobs: dict[int, Job], now
) -> tuple[list[Job], list[JobEvent]]:
    """Allocate each started job its GPUs and mark it placed; (started jobs, their events)."""
    free_on = _free_gpus_on({tray_pk[t] for start in result.started for t, _ in start.placement})
    allocations: list[Allocation] = []
    started_jobs: list[Job] = []
    events: list[JobEvent] = []
    for start in result.started:
        job = pending_jobs[start.job_id]
        for t, n in start.placement:
            gpus = free_on.get(tray_pk[t], [])
            allocations.extend(Allocation(job=job, gpu_id=gpu_id) for gpu_id in gpus[:n])
            del gpus[:n]
        events.append(_place(job, start, cluster, now))
        started_jobs.append(job)
    # The unique GPU constraint refuses a double allocation outright (the whole pass rolls back).
    Allocation.objects.bulk_create(allocations)
    bulk_update_recorded(started_jobs, _STARTED_FIELDS)
    return started_jobs, events


def _record_waiting_reasons(waiting: dict[int, str], pending_jobs: dict[int, Job]) -> None:
    """Store why each job still waits, writing only the reasons that changed."""
    changed = []
    for job_id, reason in waiting.items():
        job = pending_jobs.get(job_id)
        if job is not None and job.pending_reason != reason[:500]:
            job.pending_reason = reason[:500]
            changed.append(job)
    Job.objects.bulk_update(changed, ["pending_reason"], batch_size=500)


def _standing_words(
    job: Job, over_quota: bool, result: PassResult, departments: dict[int, Department]
) -> str:
    department = departments[job.department_id]
    share = result.in_quota_share.get(department.slug, 0)
    quota = f"{department.slug}'s guarantee is {department.guaranteed_gpus} GPUs (in-quota share now {share})"
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
    result: PassResult, rows: dict[int, Job], departments: dict[int, Department], skip: set[int]
) -> list[JobEvent]:
    """Write the pass's in-quota/borrowed standing of the running jobs whose standing changed (not those
    in `skip`: started or preempted by this pass), recorded in the audit; their QUOTA events."""
    changed = [
        pk
        for pk, over in result.over_quota.items()
        if pk in rows and pk not in skip and rows[pk].over_quota != over
    ]
    if not changed:
        return []
    jobs = list(
        Job.objects.select_for_update().filter(pk__in=changed, state__in=HOLDING_STATES).order_by("pk")
    )
    changes: dict[int, dict] = {}
    events: list[JobEvent] = []
    for job in jobs:
        over = result.over_quota[job.pk]
        if job.over_quota == over:
            continue
        changes[job.pk] = {"over_quota": (job.over_quota, over)}
        job.over_quota = over
        events.append(_event(job, JobEventKind.QUOTA, _standing_words(job, over, result, departments)))
    updated = [job for job in jobs if job.pk in changes]
    Job.objects.bulk_update(updated, ["over_quota"])
    record_bulk_change(Job, changes)
    return events


def _pass(now) -> PassSummary:
    """Read the cluster and the queue, let the engine decide, then apply what is still valid under lock."""
    started_clock = time.perf_counter()
    cluster, tray_index = _load_cluster()
    tray_pk = {index: pk for pk, index in tray_index.items()}
    departments = list(Department.objects.all())
    slug = {d.pk: d.slug for d in departments}
    running, running_rows = _running_jobs(cluster, slug)
    pending_jobs = {j.pk: j for j in Job.objects.filter(state=JobState.PENDING)}
    pending = _pending_jobs(pending_jobs, slug)
    result = schedule(cluster, _engine_departments(departments), running, pending, now.timestamp())

    holding_by_pk = _keep_decisions_still_valid(result, pending_jobs)
    events = _preempt(result.preempted, holding_by_pk, pending_jobs)
    started_jobs, start_events = _start(result, cluster, tray_pk, pending_jobs, now)
    events += start_events
    events += _restand(
        result,
        running_rows,
        {d.pk: d for d in departments},
        skip={s.job_id for s in result.started} | set(result.preempted),
    )
    _record_waiting_reasons(result.waiting, pending_jobs)
    JobEvent.objects.bulk_create(events)
    for job in started_jobs:
        enqueue(DISPATCH_JOB, job.pk)
    return PassSummary(
        started=len(result.started),
        preempted=len(result.preempted),
        waiting=len(result.waiting),
        decisions=result.decisions,
        ms=(time.perf_counter() - started_clock) * 1000,
    )


def run_pass(*, only_if_requested: bool = False) -> PassSummary | None:
    """Run passes while scheduling requests are waiting; None when another pass holds the lock (it will
    see our requests), or, with `only_if_requested` (the task), when no request is left: a pass that ran
    meanwhile answered it (eighteen node reports in a row ask eighteen times, and one or two passes run)."""
    with contextlib.suppress(IntegrityError):  # made by a concurrent pass just now
        SchedulerState.objects.get_or_create(pk=1)
    summary = None
    while True:
        with transaction.atomic():
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


def finish_job(job: Job, state: str, message: str = "", exit_code: int | None = None) -> None:
    """A holding job ended in its backend: record it, free its GPUs, ask for a pass. Caller holds the lock."""
    kind = {
        JobState.COMPLETED: JobEventKind.COMPLETED,
        JobState.FAILED: JobEventKind.FAILED,
        JobState.CANCELLED: JobEventKind.CANCELLED,
    }[state]
    _free(job)
    job.state = state
    job.finished_at = timezone.now()
    job.exit_code = exit_code
    job.backend_message = message[:500]
    job.next_dispatch_at = None
    job.save()
    JobEvent.objects.create(job=job, kind=kind, message=message)
    request_pass(f"job {job.pk} {state}")
