"""The demo's jobs (portal.demo.seeding.seed_tenants): running work placed by the scheduler's own placement
engine on the seeded inventory, finished jobs of the last day, the queue, and each job's history of events.

The rules the demo keeps (tests/portal/test_demo_truth.py) are in portal.demo.seeding's docstring; the job
names, kinds, sizes and time limits here are also what `manage.py seed_demo` uses for its extra jobs.
"""

import copy
import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F, Q

from core.access import Role
from core.hardware import GPUS_PER_TRAY
from core.workloads import work_rule
from inventory.choices import FabricState
from inventory.models import ComputeTray, Gpu
from scheduling.choices import Backend, JobEventKind, JobState, PriorityClass
from scheduling.engine.cluster import Cluster, TraySpec
from scheduling.engine.placement import Request, explain, place
from scheduling.engine.words import say
from scheduling.models import Allocation, Job, JobEvent
from scheduling.services.admission import check_request, default_topology, submitted_words
from scheduling.services.pass_writes import placed_words
from scheduling.words import (
    CANCELLED_BY_SUBMITTER,
    CANCELLED_BY_SUBMITTER_PENDING,
    COMPLETED_EXIT_0,
    FAILED_EXIT_1,
    PLACED_ON_MANY,
    PLACED_ON_ONE,
    SEEDED_DEMO_JOB,
    STARTED_IN,
)
from tenancy.models import Department, Membership
from tenancy.projects import default_project
from tenancy.quota import in_quota_prefix
from tenancy.services import schedulable_gpus_q

BATCH = 5000  # rows per bulk_create and bulk_update (the demo's jobs, events, telemetry and history)

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


def submitter(department):
    """Who submitted a demo job: the department's lead (its jobs run as the lead's POSIX identity)."""
    cached = getattr(department, "_demo_submitter", None)
    if cached is None:
        membership = (
            Membership.objects.filter(department=department, role=Role.LEAD).select_related("user").first()
            or Membership.objects.filter(department=department).select_related("user").first()
        )
        cached = department._demo_submitter = membership.user if membership else None
    return cached


def demo_project(department):
    """The department's default project (made with it by save_department): the demo's jobs are its
    own work, as every job submitted without a named project is."""
    cached = getattr(department, "_demo_default_project", None)
    if cached is None:
        cached = department._demo_default_project = default_project(department)
    return cached


def _job(rng, numbers, department, priority_class, gpus, state, limit, kind=None, topology=None) -> Job:
    backend = _backend(rng)
    return Job(
        department=department,
        project=demo_project(department),
        submitted_by=submitter(department),
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


def seed_jobs(rng, now, departments) -> int:
    floor = _floor()
    numbers = _Numbers()
    jobs: list[Job] = []
    held: dict[int, list[int]] = {}  # index in jobs -> GPU pks
    created: dict[int, datetime] = {}  # index in jobs -> submission time
    why: dict[int, str] = {}  # index in jobs -> the engine's reason for its placement

    # Running: placed oldest first by the scheduler's placement, as the passes would have, each with the
    # engine's own sentence of why there (read on the cluster before the job is allocated, as a pass does).
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
        why[len(jobs)] = explain(floor.cluster, request, placement)
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
    JobEvent.objects.bulk_create(_events(jobs, floor, why), batch_size=BATCH)
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


def _events(jobs: list[Job], floor: _Floor, why: dict[int, str]) -> list[JobEvent]:
    """Each demo job's history: placements name the partitions, whether the job borrowed and, for the
    running jobs, why there (`why`: index in jobs -> scheduling.engine.placement.explain's sentence, after
    WHY_HERE as a pass writes it: the job page reads it back)."""
    where = {host: (floor.rack[t], floor.partition[t]) for host, t in floor.cluster.host_index.items()}
    reasons = {jobs[index].pk: sentence for index, sentence in why.items()}

    def placed(job: Job) -> str:
        partitions = ", ".join(sorted({" ".join(where[host]) for host in job.placement}))
        # Cut to the column's 500 characters as a pass cuts it (pass_writes): at 1,000 racks the rack names
        # and the why-here sentence run past it.
        return placed_words(job.over_quota, len(job.placement), partitions, why=reasons.get(job.pk) or "")[
            :500
        ]

    return job_story(jobs, placed, SEEDED_DEMO_JOB)


def placed_on(job: Job) -> str:
    """A seeded history job's placed event: on how many trays (a template of scheduling.words)."""
    trays = len(job.placement)
    return say(PLACED_ON_ONE if trays == 1 else PLACED_ON_MANY, trays=trays)


def job_story(jobs: list[Job], placed, note: str) -> list[JobEvent]:
    """Each job's history as the portal records it: submitted, placed (`placed(job)` says where), started
    (`note` says that no backend ran it), and how it ended (jobs with a finish time). Every message is a
    template of scheduling.words: a page reads it back in the viewer's language."""
    ended = {
        JobState.COMPLETED: (JobEventKind.COMPLETED, COMPLETED_EXIT_0),
        JobState.FAILED: (JobEventKind.FAILED, FAILED_EXIT_1),
        JobState.CANCELLED: (JobEventKind.CANCELLED, CANCELLED_BY_SUBMITTER),
    }
    events = []
    for job in jobs:
        events.append(
            JobEvent(
                job=job,
                kind=JobEventKind.SUBMITTED,
                message=submitted_words(job.gpus, job.topology),
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
                    message=say(STARTED_IN, backend_kind=Backend(job.backend).label, note=note),
                )
            )
        if job.finished_at is not None:
            kind, words = ended[job.state]
            if job.placed_at is None:
                words = CANCELLED_BY_SUBMITTER_PENDING
            events.append(JobEvent(job=job, kind=kind, message=words, at=job.finished_at))
    return events
