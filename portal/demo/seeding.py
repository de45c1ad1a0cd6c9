"""Demo tenants on top of the demo inventory: departments, leads and members, running, pending and finished
jobs, synthetic GPU telemetry and 30 days of quota history, so `make run` shows live dashboards.

Deterministic for a given seed. Scales with the inventory: guarantees are fractions of the schedulable
GPUs and about two thirds of them run jobs. The demo is a state the scheduler agrees with
(tests/portal/test_demo_truth.py):

* running jobs are placed by the scheduler's own placement engine, on schedulable GPUs of trays whose fabric
  is settled, each within its time limit; a department's oldest jobs hold its guarantee and the newer ones
  borrow (`tenancy.quota.in_quota_prefix`, the rule every pass applies), and only training borrows;
* partitions dedicated to a department hold only that department's jobs;
* every job was submitted before it was placed, placed before it started, and finished in the past;
  its name says its class (train-*, inference-*, build-*), never its state;
* pending jobs are ones the submission checks accept; the first pass (`manage.py seed_demo` runs it) starts
  those that fit and gives the others their true reason;
* the quota history ends with a snapshot taken by the real snapshot code.
"""

import copy
import random
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F, Max, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from core.access import Role
from core.hardware import GPUS_PER_TRAY
from core.workloads import work_rule
from inventory.choices import FabricState
from inventory.discovery import nvidia_smi
from inventory.ingest import heartbeats as inventory_heartbeats
from inventory.ingest import reports as inventory_reports
from inventory.models import ComputeTray, Gpu, NVLinkPartition
from portal.demo.telemetry import next_utilization
from scheduling.choices import HOLDING_STATES, Backend, JobEventKind, JobState, PriorityClass, Topology
from scheduling.engine.cluster import Cluster, TraySpec
from scheduling.engine.placement import Request, place
from scheduling.models import Allocation, Job, JobEvent
from scheduling.services.admission import check_request, default_topology
from scheduling.tasks import record_quota_snapshots
from tenancy.activity import RecordResult, record_samples
from tenancy.choices import PosixSource
from tenancy.models import (
    DedicatedPartition,
    Department,
    GpuActivity,
    GpuUtilization,
    Membership,
    PosixAccount,
    QuotaSnapshot,
    TenancySettings,
)
from tenancy.quota import DepartmentQuota, fair_share, in_quota_prefix
from tenancy.quota_history import FULL_RESOLUTION as QUOTA_FULL_RESOLUTION
from tenancy.services import save_department, schedulable_gpus, schedulable_gpus_q
from tenancy.telemetry import Sample

BATCH = 5000
SNAPSHOT_EVERY = timedelta(minutes=5)

TRAIN, INFERENCE, BUILD = PriorityClass.TRAIN, PriorityClass.INFERENCE, PriorityClass.BUILD
# A job's name starts with its class: train-*, inference-*, build-*.
NAME_PREFIX = {TRAIN: "train", INFERENCE: "inference", BUILD: "build"}
KINDS = {
    TRAIN: ("pretrain", "finetune", "sweep", "distill", "eval"),
    INFERENCE: ("serve-chat", "serve-embed", "batch-score"),
    BUILD: ("notebook", "compile", "profile"),
}
SIZES = {TRAIN: (4, 8, 8, 16, 16, 32, 36), INFERENCE: (2, 4, 4, 8, 16), BUILD: (1, 2, 4)}
TIME_LIMITS = {TRAIN: (720, 1440, 2880), INFERENCE: (10080,), BUILD: (480, 720)}  # minutes
# Borrowed work started after every in-quota job of its department (in-quota build jobs start >= 95 min ago).
BORROWED_AGE_MINUTES = (5, 90)


def demo_work(backend: str, priority_class: str) -> dict:
    """A demo job's work: the example of its backend's rule (core.workloads: each kind's WorkRule.example,
    the work the API documents), whatever its class; {} for a backend no integration runs."""
    rule = work_rule(backend)
    return copy.deepcopy(rule.example) if rule else {}


@dataclass(frozen=True)
class DemoDepartment:
    name: str
    slug: str
    share: float  # of schedulable GPUs, guaranteed
    weight: str
    limit_share: float | None
    priority: int
    lead: str
    members: tuple[str, ...]
    busy: float  # fraction of its guarantee its running jobs use (above 1 = borrowing)
    work: tuple[str, ...]  # classes of its in-quota jobs (repeats weigh); borrowed jobs are training
    queue: tuple[tuple[str, str, int, str], ...]  # pending jobs: (class, kind, GPUs, topology)


DEPARTMENTS = (
    DemoDepartment(
        "Research",
        "research",
        0.30,
        "2.00",
        None,
        1,
        "alice",
        ("bob", "erin"),
        1.35,
        (TRAIN, TRAIN, TRAIN, BUILD),
        (
            (TRAIN, "pretrain", 72, Topology.RACK),
            (TRAIN, "sweep", 8, Topology.PARTITION),
            (BUILD, "notebook", 1, Topology.ANY),
        ),
    ),
    DemoDepartment(
        "Inference",
        "inference",
        0.15,
        "1.00",
        0.25,
        3,
        "carol",
        ("frank",),
        0.85,
        (INFERENCE, INFERENCE, INFERENCE, BUILD),
        ((INFERENCE, "serve-chat", 16, Topology.PARTITION), (BUILD, "profile", 2, Topology.ANY)),
    ),
    DemoDepartment(
        "Vision",
        "vision",
        0.15,
        "1.00",
        0.30,
        2,
        "dave",
        ("grace",),
        0.70,
        (TRAIN, TRAIN, INFERENCE, BUILD),
        ((BUILD, "notebook", 1, Topology.ANY), (TRAIN, "finetune", 32, Topology.PARTITION)),
    ),
    DemoDepartment(
        "Platform",
        "platform",
        0.10,
        "0.50",
        0.15,
        0,
        "heidi",
        ("ivan",),
        0.40,
        (BUILD, BUILD, TRAIN),
        ((TRAIN, "burn-in", 72, Topology.RACK), (BUILD, "compile", 4, Topology.ANY)),
    ),
)


@dataclass(frozen=True)
class TenantSeedResult:
    departments: int
    users: dict[str, str]  # username -> role description
    password: str
    jobs: int


@transaction.atomic
def seed_tenants(seed: int = 7, password: str | None = None) -> TenantSeedResult:
    """Departments, people, jobs, telemetry and history on the seeded inventory. Expects no departments."""
    rng = random.Random(seed)
    now = timezone.now().replace(second=0, microsecond=0)
    TenancySettings.load()
    capacity = schedulable_gpus()
    password = password or secrets.token_urlsafe(12)
    users = {}
    departments = []
    for spec in DEPARTMENTS:
        guaranteed = int(capacity * spec.share) // 4 * 4
        department = save_department(
            Department(
                name=spec.name,
                slug=spec.slug,
                guaranteed_gpus=guaranteed,
                over_quota_weight=Decimal(spec.weight),
                limit_gpus=None
                if spec.limit_share is None
                else max(guaranteed, int(capacity * spec.limit_share)),
                priority=spec.priority,
            )
        )
        departments.append((spec, department))
        for username, role in [(spec.lead, Role.LEAD)] + [(member, Role.MEMBER) for member in spec.members]:
            user = get_user_model().objects.filter(username=username).first()
            if user is None:
                user = get_user_model().objects.create_user(username, f"{username}@example.com", password)
            else:  # seeded again after --reset: the password written to the logins file is the one that works
                user.set_password(password)
                user.save(update_fields=["password"])
            Membership.objects.create(user=user, department=department, role=role)
            users[username] = f"{role.label.lower()} of {spec.name}"
            _give_posix_account(user)

    # Inference owns the carved rack's second partition as a dedicated service tier.
    inference = departments[1][1]
    tier = NVLinkPartition.objects.filter(name="p2").order_by("rack__name").first()
    if tier is not None and tier.trays.count() * GPUS_PER_TRAY <= inference.guaranteed_gpus:
        DedicatedPartition.objects.create(department=inference, partition=tier)

    jobs = _seed_jobs(rng, now, departments)
    _seed_telemetry(rng, now)
    _seed_history(rng, now, departments)
    return TenantSeedResult(departments=len(departments), users=users, password=password, jobs=jobs)


# --- the cluster as the placement engine sees it -------------------------------------------------------


@dataclass
class _Floor:
    """The engine's cluster of the seeded inventory, and the schedulable GPUs of each of its trays."""

    cluster: Cluster
    gpus: list[list[int]]  # tray index -> free schedulable GPU pks, in GPU index order
    rack: list[str]  # tray index -> rack name
    partition: list[str]  # tray index -> NVLink partition name


def _floor() -> _Floor:
    """Trays in the pass's order (rack, partition, slot). A tray whose fabric is not settled (a GPU still
    registering, or reporting another clique) gets no demo job: the pass keeps multi-tray work off it."""
    trays = list(
        ComputeTray.objects.filter(partition__isnull=False)
        .order_by("rack__name", "partition__clique_id", "slot")
        .values_list(
            "pk",
            "hostname",
            "rack__name",
            "partition__name",
            "partition__dedication__department__slug",
        )
    )
    schedulable: dict[int, list[int]] = {}
    unsettled = set(
        Gpu.objects.filter(tray__partition__isnull=False)
        .filter(
            ~Q(fabric_state=FabricState.COMPLETED)
            | Q(reported_clique_id__isnull=True)
            | ~Q(reported_clique_id=F("tray__partition__clique_id"))
        )
        .values_list("tray_id", flat=True)
    )
    for pk, tray_id in (
        Gpu.objects.filter(schedulable_gpus_q(), tray__partition__isnull=False)
        .order_by("tray_id", "index")
        .values_list("pk", "tray_id")
    ):
        schedulable.setdefault(tray_id, []).append(pk)
    gpus = [[] if pk in unsettled else schedulable.get(pk, []) for pk, *_ in trays]
    cluster = Cluster(
        TraySpec(hostname, rack, partition, len(gpus[index]), owner)
        for index, (_, hostname, rack, partition, owner) in enumerate(trays)
    )
    return _Floor(
        cluster, gpus, [rack for _, _, rack, *_ in trays], [partition for _, _, _, partition, *_ in trays]
    )


# --- jobs ---------------------------------------------------------------------------------------------


@dataclass
class _Planned:
    """A running job before it is a row: what it asks for and when it started."""

    department: Department
    priority_class: str
    gpus: int
    started_at: datetime
    time_limit: int  # minutes


def _size(rng: random.Random, remaining: int, menu: tuple[int, ...]) -> int:
    """A job size from `menu` no larger than `remaining`, or `remaining` itself when it is below them all."""
    fitting = [size for size in menu if size <= remaining]
    return rng.choice(fitting) if fitting else remaining


def _sizes(rng: random.Random, total: int, menu: tuple[int, ...]) -> list[int]:
    """Job sizes from `menu` adding up to exactly `total`."""
    sizes = []
    while total > 0:
        sizes.append(_size(rng, total, menu))
        total -= sizes[-1]
    return sizes


def _age(rng: random.Random, priority_class: str, limit: int) -> timedelta:
    """How long ago an in-quota job started: before any borrowed job, and at most 60% into its time limit,
    so the demo keeps hours of running time left (nothing ends a seeded job at its limit)."""
    low = {TRAIN: 120, INFERENCE: 360, BUILD: 95}[priority_class]
    return timedelta(minutes=rng.uniform(low, min(limit * 0.6, 3 * 24 * 60)))


def _plan(rng: random.Random, now: datetime, departments) -> list[_Planned]:
    """Each department's running work: in-quota jobs of its classes up to min(busy, 1) of its guarantee,
    then borrowed training up to `busy`, started after all of them."""
    planned = []
    for spec, department in departments:
        guaranteed = department.guaranteed_gpus
        in_quota = int(guaranteed * min(spec.busy, 1.0))
        borrowed = int(guaranteed * max(spec.busy - 1.0, 0.0)) // GPUS_PER_TRAY * GPUS_PER_TRAY
        remaining = in_quota
        while remaining > 0:
            priority_class = rng.choice(spec.work)
            gpus = _size(rng, remaining, SIZES[priority_class])
            limit = rng.choice(TIME_LIMITS[priority_class])
            planned.append(
                _Planned(department, priority_class, gpus, now - _age(rng, priority_class, limit), limit)
            )
            remaining -= gpus
        for gpus in _sizes(rng, borrowed, SIZES[TRAIN]):
            age = timedelta(minutes=rng.uniform(*BORROWED_AGE_MINUTES))
            planned.append(_Planned(department, TRAIN, gpus, now - age, rng.choice(TIME_LIMITS[TRAIN])))
    return sorted(planned, key=lambda p: p.started_at)


def _smaller(gpus: int) -> int:
    """The next size to try when `gpus` does not fit: half as many trays, then one tray."""
    return max(GPUS_PER_TRAY, gpus // 2 // GPUS_PER_TRAY * GPUS_PER_TRAY) if gpus > GPUS_PER_TRAY else 0


class _Numbers:
    def __init__(self):
        self.last = 0

    def name(self, rng: random.Random, priority_class: str, kind: str | None = None) -> str:
        self.last += 1
        return f"{NAME_PREFIX[priority_class]}-{kind or rng.choice(KINDS[priority_class])}-{self.last:04d}"


def _backend(rng: random.Random) -> str:
    return Backend.KUBERNETES if rng.random() < 0.35 else Backend.SLURM


DEMO_FIRST_UID = (
    20001  # demo people's uids and gids, in the order they are made (ids a site leaves to people)
)


def _give_posix_account(user) -> None:
    """A demo person's POSIX identity, as an administrator maps it (login name = username): their jobs run
    as it on a live backend, and the rendered job files show it."""
    if PosixAccount.objects.filter(user=user).exists():
        return
    number = max(PosixAccount.objects.aggregate(top=Max("uid"))["top"] or 0, DEMO_FIRST_UID - 1) + 1
    PosixAccount.objects.create(
        user=user, name=user.get_username(), uid=number, gid=number, groups=[], source=PosixSource.ADMIN
    )


def _submitter(department):
    """Who submitted a demo job: the department's lead (its jobs run as the lead's POSIX identity)."""
    cached = getattr(department, "_demo_submitter", None)
    if cached is None:
        membership = (
            Membership.objects.filter(department=department, role=Role.LEAD).select_related("user").first()
            or Membership.objects.filter(department=department).select_related("user").first()
        )
        cached = department._demo_submitter = membership.user if membership else None
    return cached


def _job(rng, numbers, department, priority_class, gpus, state, limit, kind=None, topology=None) -> Job:
    backend = _backend(rng)
    return Job(
        department=department,
        submitted_by=_submitter(department),
        name=numbers.name(rng, priority_class, kind),
        gpus=gpus,
        topology=topology or default_topology(gpus),
        priority_class=priority_class,
        backend=backend,
        work=demo_work(backend, priority_class),
        time_limit_minutes=limit,
        state=state,
    )


def _seconds(rng: random.Random, low: float, high: float) -> timedelta:
    return timedelta(seconds=rng.uniform(low, high))


def _seed_jobs(rng, now, departments) -> int:
    floor = _floor()
    numbers = _Numbers()
    jobs: list[Job] = []
    held: dict[int, list[int]] = {}  # index in jobs -> GPU pks
    created: dict[int, datetime] = {}  # index in jobs -> submission time

    # Running: placed oldest first by the scheduler's placement, as the passes would have.
    for planned in _plan(rng, now, departments):
        gpus = planned.gpus
        placement = None
        while gpus and placement is None:
            request = Request(gpus, default_topology(gpus), planned.department.slug)
            placement = place(floor.cluster, request)
            if placement is None:
                gpus = _smaller(gpus) if gpus > GPUS_PER_TRAY else 0
        if placement is None:
            continue  # the cluster is full for this shape
        floor.cluster.allocate(len(jobs), placement)
        job = _job(
            rng,
            numbers,
            planned.department,
            planned.priority_class,
            gpus,
            JobState.RUNNING,
            planned.time_limit,
        )
        job.started_at = planned.started_at
        job.placed_at = planned.started_at - _seconds(rng, 2, 40)
        job.placement = [floor.cluster.tray_host[t] for t, _ in placement]
        held[len(jobs)] = [gpu for t, n in placement for gpu in floor.gpus[t][:n]]
        for t, n in placement:
            del floor.gpus[t][:n]
        created[len(jobs)] = job.placed_at - _seconds(rng, 5, 40 * 60)
        jobs.append(job)

    # Finished in the last day, where the department may run; and the queue, submitted minutes ago.
    for spec, department in departments:
        for state in (JobState.COMPLETED, JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED):
            priority_class = rng.choice(spec.work)
            job = _finished(rng, now, numbers, floor, department, priority_class, state)
            created[len(jobs)] = job.created_at
            jobs.append(job)
        for priority_class, kind, gpus, topology in spec.queue:
            if check_request(department, gpus, topology, priority_class):
                continue  # refused at submission in this inventory (too small for it): not in the queue
            job = _job(
                rng,
                numbers,
                department,
                priority_class,
                gpus,
                JobState.PENDING,
                rng.choice(TIME_LIMITS[priority_class]),
                kind,
                topology,
            )
            job.pending_reason = "waiting for the scheduler"
            created[len(jobs)] = now - _seconds(rng, 60, 45 * 60)
            jobs.append(job)

    Job.objects.bulk_create(jobs, batch_size=BATCH)
    for index, job in enumerate(jobs):  # auto_now_add set them to now
        job.created_at = created[index]
    Job.objects.bulk_update(jobs, ["created_at"], batch_size=BATCH)
    _flag_borrowers(jobs)
    Allocation.objects.bulk_create(
        [Allocation(job=jobs[index], gpu_id=gpu) for index, gpus in held.items() for gpu in gpus],
        batch_size=BATCH,
    )
    JobEvent.objects.bulk_create(_events(jobs, floor), batch_size=BATCH)
    return len(jobs)


def _finished(rng, now, numbers, floor: _Floor, department, priority_class, state) -> Job:
    """A job that ended in the last day on trays its department may use (they are free again now)."""
    limit = rng.choice(TIME_LIMITS[priority_class])
    gpus = rng.choice([size for size in SIZES[priority_class] if size <= max(department.guaranteed_gpus, 1)])
    job = _job(rng, numbers, department, priority_class, gpus, state, limit)
    job.finished_at = now - _seconds(rng, 15 * 60, 20 * 3600)
    if state == JobState.CANCELLED and rng.random() < 0.5:  # cancelled while it waited
        job.created_at = job.finished_at - _seconds(rng, 60, 3600)
        return job
    trays = max(1, gpus // GPUS_PER_TRAY)
    cluster = floor.cluster
    options = [
        p
        for p, members in enumerate(cluster.part_trays)
        if len(members) >= trays and cluster.part_owner[p] in (None, department.slug)
    ]
    if not options:
        job.state = JobState.CANCELLED  # nowhere it could have run: it was cancelled while it waited
        job.created_at = job.finished_at - _seconds(rng, 60, 3600)
        return job
    members = cluster.part_trays[rng.choice(options)]
    first = rng.randrange(len(members) - trays + 1)
    job.placement = [cluster.tray_host[t] for t in members[first : first + trays]]
    ran = {
        JobState.COMPLETED: rng.uniform(0.2, 0.9),
        JobState.FAILED: rng.uniform(0.01, 0.2),
        JobState.CANCELLED: rng.uniform(0.05, 0.5),
    }[state] * min(limit, 12 * 60)
    job.started_at = job.finished_at - timedelta(minutes=ran)
    job.placed_at = job.started_at - _seconds(rng, 2, 40)
    job.created_at = job.placed_at - _seconds(rng, 5, 40 * 60)
    job.exit_code = {JobState.COMPLETED: 0, JobState.FAILED: 1}.get(state)
    return job


def _flag_borrowers(jobs: list[Job]) -> None:
    """Per department, its running jobs oldest first hold its guarantee; the rest borrow (over quota).
    The same rule and order as every pass (`in_quota_prefix` on placed_at, then pk)."""
    running: dict[int, list[Job]] = {}
    for job in jobs:
        if job.state == JobState.RUNNING:
            running.setdefault(job.department_id, []).append(job)
    for department_jobs in running.values():
        department_jobs.sort(key=lambda j: (j.placed_at, j.pk))
        guaranteed = department_jobs[0].department.guaranteed_gpus
        in_quota = in_quota_prefix(guaranteed, [(j.pk, j.gpus) for j in department_jobs])
        for job in department_jobs:
            job.over_quota = job.pk not in in_quota
    Job.objects.bulk_update([j for j in jobs if j.over_quota], ["over_quota"], batch_size=BATCH)


def _events(jobs: list[Job], floor: _Floor) -> list[JobEvent]:
    """Each demo job's history: placements name the partitions and whether the job borrowed."""
    where = {host: (floor.rack[t], floor.partition[t]) for host, t in floor.cluster.host_index.items()}

    def placed(job: Job) -> str:
        partitions = ", ".join(sorted({" ".join(where[host]) for host in job.placement}))
        quota = "over quota (borrowed, preemptible)" if job.over_quota else "in quota"
        return f"placed {quota} on {trays_phrase(job)} in {partitions}"

    return job_story(jobs, placed, "seeded demo job: no backend runs it")


def trays_phrase(job: Job) -> str:
    return f"{len(job.placement)} tray{'s' if len(job.placement) != 1 else ''}"


def job_story(jobs: list[Job], placed, note: str) -> list[JobEvent]:
    """Each job's history as the portal records it: submitted, placed (`placed(job)` says where), started
    (`note` says that no backend ran it), and how it ended (jobs with a finish time)."""
    ended = {
        JobState.COMPLETED: (JobEventKind.COMPLETED, "completed, exit code 0"),
        JobState.FAILED: (JobEventKind.FAILED, "failed, exit code 1"),
        JobState.CANCELLED: (JobEventKind.CANCELLED, "cancelled by its submitter"),
    }
    events = []
    for job in jobs:
        events.append(
            JobEvent(
                job=job,
                kind=JobEventKind.SUBMITTED,
                message=f"{job.gpus} GPUs, {job.topology}",
                at=job.created_at,
            )
        )
        if job.placed_at is not None:
            events.append(
                JobEvent(
                    job=job,
                    kind=JobEventKind.PLACED,
                    message=placed(job),
                    placement=job.placement,
                    at=job.placed_at,
                )
            )
            events.append(
                JobEvent(
                    job=job,
                    kind=JobEventKind.DISPATCHED,
                    at=job.started_at,
                    message=f"started in {job.get_backend_display()} ({note})",
                )
            )
        if job.finished_at is not None:
            kind, words = ended[job.state]
            if job.placed_at is None:
                words = "cancelled by its submitter while pending"
            events.append(JobEvent(job=job, kind=kind, message=words, at=job.finished_at))
    return events


# --- telemetry and history -----------------------------------------------------------------------------


def _seed_telemetry(rng, now) -> None:
    """Latest utilization for every allocated GPU (some jobs idle for a while), and its 5-minute buckets
    since its job started; an idle job's GPUs went low after the job started."""
    allocated = list(Allocation.objects.order_by("gpu_id").values_list("gpu_id", "job_id", "job__started_at"))
    idle_jobs = {
        job
        for job, started in sorted({(job, started) for _, job, started in allocated})
        if now - started > timedelta(minutes=50) and rng.random() < 0.08
    }
    low_since_of = {}
    for job_id, started in sorted({(job, started) for _, job, started in allocated}):
        if job_id in idle_jobs:
            low_for = min(now - started, timedelta(minutes=240)).total_seconds()
            low_since_of[job_id] = now - timedelta(seconds=rng.uniform(45 * 60, max(45 * 60, low_for)))
    activity, buckets = [], []
    history = 24 if len(allocated) <= 5000 else 3  # buckets per GPU: 2 hours for a demo, 15 minutes at scale
    bucket = timedelta(seconds=GpuUtilization.BUCKET_SECONDS)
    start = now - timedelta(seconds=now.minute % 5 * 60)
    for gpu_id, job_id, started in allocated:
        low_since = low_since_of.get(job_id)
        busy = rng.uniform(55, 98)
        level = rng.uniform(0, 3) if low_since is not None else busy
        activity.append(
            GpuActivity(gpu_id=gpu_id, utilization=round(level, 1), sampled_at=now, low_since=low_since)
        )
        for step in range(history):
            at = start - step * bucket
            if at + bucket <= started:
                break  # before the job: the GPU was not its
            base = level if low_since is not None and at >= low_since else busy
            mean = max(0.0, min(100.0, base + rng.uniform(-8, 8) if base > 5 else base))
            buckets.append(
                GpuUtilization(
                    gpu_id=gpu_id,
                    bucket_start=at,
                    mean=round(mean, 1),
                    peak=round(min(100.0, mean + rng.uniform(0, 10)), 1),
                    samples=10,
                )
            )
    GpuActivity.objects.bulk_create(activity, batch_size=BATCH)
    GpuUtilization.objects.bulk_create(buckets, batch_size=BATCH)


def demo_nodes_report(now: datetime | None = None) -> dict:
    """One tick of the demo's simulated node agents: every tray that reported before sends its last report
    again (the GPUs as the inventory last heard them: clique, fabric state, health), as a real agent does
    every minute. Through the real path: inventory.ingest.heartbeats with the report's hash (one read per
    tray, last-seen times batched), or a full ingest_report when the tray's last report was not reconciled
    by one (the seed's trays, once). Repeating what was heard, never what the inventory intends, leaves a
    re-carved rack's drift to the simulated fabric's own reports (integrations.fabric.nodes)."""
    now = now or timezone.now()
    heard = (
        Gpu.objects.filter(tray__last_report_at__isnull=False)
        .exclude(fabric_state="")
        .select_related("tray")
        .order_by("tray__hostname", "index")
    )
    by_host: dict[str, list[nvidia_smi.ReportedGpu]] = {}
    for gpu in heard:
        by_host.setdefault(gpu.tray.hostname, []).append(
            nvidia_smi.ReportedGpu(
                gpu.uuid,
                gpu.index,
                str(gpu.reported_cluster_uuid) if gpu.reported_cluster_uuid else None,
                gpu.reported_clique_id,
                nvidia_smi.FabricState(gpu.fabric_state),
                gpu.fabric_status or None,
                nvidia_smi.GpuHealth(gpu.health),
            )
        )
    beats = ingested = 0
    for host, gpus in by_host.items():
        if inventory_heartbeats.heartbeat(host, inventory_reports.report_sha256("json", gpus, None), now):
            beats += 1
        else:
            inventory_reports.ingest_report(host, "json", gpus)
            ingested += 1
    inventory_heartbeats.flush_heartbeats()
    return {"trays": len(by_host), "heartbeats": beats, "full_reports": ingested}


def record_demo_telemetry(now: datetime | None = None, rng: random.Random | None = None) -> RecordResult:
    """One tick of the demo's simulated DCGM exporters (portal.tasks.simulate_demo_telemetry): a sample for
    every GPU a starting or running job holds, recorded by the direct scrape's own path
    (tenancy.activity.record_samples: the activity row and the 5-minute bucket).

    Each value follows the GPU's previous sample taken while its job held it (portal.demo.telemetry): the
    activity row, or when that aged out the GPU's last bucket since the job started. Two queries to read,
    record_samples' handful to write, whatever the number of GPUs.
    """
    now = now or timezone.now()
    rng = rng or random.Random()
    since = Coalesce(F("job__started_at"), F("job__placed_at"), F("job__created_at"))
    last_bucket = GpuUtilization.objects.filter(
        gpu=OuterRef("gpu"), bucket_start__gte=OuterRef("held_since"), bucket_start__lte=now
    ).order_by("-bucket_start")
    rows = (
        Allocation.objects.filter(job__state__in=HOLDING_STATES)
        .annotate(held_since=since)
        .annotate(last_mean=Subquery(last_bucket.values("mean")[:1]))
        .order_by("gpu_id")
        .values_list(
            "gpu_id",
            "gpu__uuid",
            "gpu__tray__hostname",
            "gpu__index",
            "job_id",
            "held_since",
            "gpu__activity__utilization",
            "gpu__activity__sampled_at",
            "last_mean",
        )
    )
    samples = []
    for gpu_id, uuid, hostname, index, job_id, held_since, value, sampled_at, last_mean in rows:
        previous = value if sampled_at is not None and held_since and sampled_at >= held_since else last_mean
        samples.append(
            Sample(
                uuid=uuid,
                hostname=hostname,
                gpu_index=index,
                value=next_utilization(previous, job_id, gpu_id, rng),
            )
        )
    return record_samples(samples, at=now)


def _history_times(now: datetime, days: int) -> list[datetime]:
    """When the product holds a snapshot after `days` of running (tenancy.quota_history): one at the start of
    each hour older than a day (downsample_quota_snapshots), then one every five minutes up to now."""
    cutoff = _hour(now - QUOTA_FULL_RESOLUTION)
    hour = _hour(now - timedelta(days=days)) + timedelta(hours=1)  # the oldest hour prune_history keeps
    times = []
    while hour < cutoff:
        times.append(hour)
        hour += timedelta(hours=1)
    steps = int((now - cutoff) / SNAPSHOT_EVERY)
    times += [now - step * SNAPSHOT_EVERY for step in range(steps, 0, -1)]
    return times


def _hour(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def _drift(rng, days: int) -> list[float]:
    """A department's busyness at each day's age (index 0: today, 1.0): half a day ago it ran about half of
    today's load, and before that a bounded random walk between a third and all of it."""
    levels = [1.0, 0.5]
    while len(levels) < days + 2:
        levels.append(min(0.95, max(0.3, levels[-1] + rng.uniform(-0.12, 0.12))))
    return levels


def _seed_history(rng, now, departments) -> None:
    """TenancySettings.quota_history_days (30) of quota snapshots kept the way the product keeps them
    (`_history_times`: hourly rows, then five-minute rows for the last day), each department drifting from
    day to day, busier in working hours than at night and on weekdays than at weekends, towards today's
    position; then today's taken by the snapshot task's own code (so the chart's last point is the cards'
    figures)."""
    capacity = schedulable_gpus()
    current = {}
    for _, department in departments:
        active = department.jobs.filter(state__in=(JobState.RUNNING, JobState.PENDING))
        running = sum(j.gpus for j in active if j.state == JobState.RUNNING)
        pending = sum(j.gpus for j in active if j.state == JobState.PENDING)
        current[department.pk] = (running, pending)
    days = TenancySettings.load().quota_history_days
    drift = {department.pk: _drift(rng, days) for _, department in departments}
    quotas = {
        department.pk: (department.slug, department.guaranteed_gpus, float(department.over_quota_weight))
        for _, department in departments
    }
    snapshots = []
    for at in _history_times(now, days):
        age = (now - at) / timedelta(days=1)  # in days
        day, part = int(age), age - int(age)
        # Working hours (08-20 UTC) and weekdays are busier; the pattern fades out as `at` nears now.
        rhythm = (0.12 if 8 <= at.hour < 20 else -0.12) - (0.15 if at.weekday() >= 5 else 0.0)
        fade = min(1.0, age)
        rows = []
        for _, department in departments:
            running, pending = current[department.pk]
            levels = drift[department.pk]
            level = levels[day] + (levels[day + 1] - levels[day]) * part
            wobble = 1 + fade * (rhythm + 0.1 * rng.uniform(-1, 1))
            in_use = max(0, int(running * level * wobble))
            waiting = max(0, int(pending * (level + fade * rng.uniform(-0.3, 0.3))))
            rows.append((department, in_use, in_use + waiting))
        shares = fair_share(
            capacity,
            [
                DepartmentQuota(
                    name=quotas[d.pk][0],
                    guaranteed=quotas[d.pk][1],
                    weight=quotas[d.pk][2],
                    limit=d.limit_gpus,
                    priority=d.priority,
                    demand=demand,
                    allocated=in_use,
                )
                for d, in_use, demand in rows
            ],
        ).shares
        for department, in_use, demand in rows:
            snapshots.append(
                QuotaSnapshot(
                    department=department,
                    taken_at=at,
                    guaranteed=department.guaranteed_gpus,
                    in_use=in_use,
                    in_quota=min(in_use, department.guaranteed_gpus),
                    borrowed=max(0, in_use - department.guaranteed_gpus),
                    fair_share=shares[department.slug].fair_share,
                    pending_demand=demand - in_use,
                    idle=int(in_use * rng.uniform(0, 0.1)),
                )
            )
    QuotaSnapshot.objects.bulk_create(snapshots, batch_size=BATCH)
    record_quota_snapshots(now)


def write_demo_logins(path: Path, result: TenantSeedResult) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"{username} ({role}): {result.password}" for username, role in result.users.items()]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
