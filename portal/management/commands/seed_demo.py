import heapq
import random
import time
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from integrations.dispatch import backend_for, dispatch_request
from integrations.embedded import RenderedJobBackend
from integrations.models import ConfigTarget
from integrations.registry import clean_settings
from inventory.choices import FabricState, HealthKind, RuleAction, SystemModel
from inventory.demo import seed_datacenter, seed_fabric, seed_health_history, seed_mig_gpu
from inventory.models import ComputeTray, FabricImport, Gpu, HealthRule, NVLinkPartition, Rack
from portal.demo.jobs import (
    BATCH,
    KINDS,
    NAME_PREFIX,
    SIZES,
    TIME_LIMITS,
    TRAIN,
    demo_project,
    demo_work,
    job_story,
    placed_on,
    submitter,
)
from portal.demo.seeding import DEPARTMENTS, seed_tenants, write_demo_logins
from scheduling.choices import Backend, JobState
from scheduling.engine.cluster import Cluster, TraySpec
from scheduling.engine.placement import Request, place
from scheduling.models import Job, JobEvent
from scheduling.services.admission import check_request, default_topology
from scheduling.services.passes import run_pass
from scheduling.tasks import record_quota_snapshots
from scheduling.words import SEEDED_HISTORY
from tenancy.models import Department
from tenancy.services import schedulable_gpus_q

MODELS = {"gb200": SystemModel.GB200_NVL72, "gb300": SystemModel.GB300_NVL72}


DEMO_FABRIC = "fabric"


def adopt_running_jobs() -> int:
    """Give the seeded running jobs to the embedded job backend (files under RACKPLANE_RENDER_DIR/jobs), with
    their time limits counted from when they started, so the job sync ends each at its limit as Slurm would.
    Only where no live backend is configured: demo jobs are never sent to a real Slurm or Kubernetes."""
    adopted = []
    for job in Job.objects.filter(state=JobState.RUNNING, backend_id="").order_by("pk"):
        backend, _label, values = backend_for(job.backend)
        if isinstance(backend, RenderedJobBackend):
            request = dispatch_request(job, values, qos=backend.submits_qos)
            job.backend_id = backend.submit(request, started_at=job.started_at)
            job.qos = request.qos
            # One at a time: the next job's QOS counts what this one holds (integrations.dispatch.job_qos).
            # Seed data: recorded by nothing, like its creation.
            Job.objects.filter(pk=job.pk).update(backend_id=job.backend_id, qos=job.qos)
            adopted.append(job)
    return len(adopted)


def ensure_simulated_fabric() -> bool:
    """The demo's fabric manager: a simulated one (integrations.fabric), so that a plan applied in the wizard
    re-carves the fabric and the rack's nodes report their new cliques. True when it was added now; an
    existing target of that name (the operator's) is left as it is."""
    _, created = ConfigTarget.objects.get_or_create(
        name=DEMO_FABRIC,
        defaults={"kind": "fabric", "settings": clean_settings("fabric", {"kind": "simulated"})},
    )
    return created


# --- a week of finished jobs: the history the partition wizard's what-if replays -------------------------

HISTORY_DAYS = 7
HISTORY_LOAD = 0.75  # GPU-hours offered, as a share of the schedulable GPUs over the window
# Training in the history also has gangs larger than today's running jobs: the ones layouts differ on.
HISTORY_SIZES = {**SIZES, TRAIN: (*SIZES[TRAIN], 48, 64, 72)}
HISTORY_ENDS = (  # (state, share of its time limit it ran, weight)
    (JobState.COMPLETED, (0.15, 0.9), 8),
    (JobState.FAILED, (0.01, 0.2), 1),
    (JobState.CANCELLED, (0.05, 0.5), 1),
)
HISTORY_LONGEST = timedelta(hours=20)  # how long a history job ran at most
QUEUE_LOOKAHEAD = 30  # waiting jobs a step of the history tries to start (backfill behind the head)


def _history_cluster() -> Cluster:
    """The engine's cluster of the seeded trays: schedulable GPUs, settled fabric, dedications."""
    trays = list(
        ComputeTray.objects.filter(partition__isnull=False)
        .order_by("rack__name", "partition__clique_id", "slot")
        .values_list(
            "pk", "hostname", "rack__name", "partition__name", "partition__dedication__department__slug"
        )
    )
    capacity: dict[int, int] = {}
    for tray_id in Gpu.objects.filter(schedulable_gpus_q(), tray__partition__isnull=False).values_list(
        "tray_id", flat=True
    ):
        capacity[tray_id] = capacity.get(tray_id, 0) + 1
    unsettled = set(
        Gpu.objects.filter(tray__partition__isnull=False)
        .filter(
            ~Q(fabric_state=FabricState.COMPLETED)
            | Q(reported_clique_id__isnull=True)
            | ~Q(reported_clique_id=F("tray__partition__clique_id"))
        )
        .values_list("tray_id", flat=True)
    )
    return Cluster(
        TraySpec(host, rack, partition, capacity.get(pk, 0), owner, pk not in unsettled)
        for pk, host, rack, partition, owner in trays
    )


def seed_job_history(seed: int = 7, days: int = HISTORY_DAYS, now=None) -> int:
    """Finished jobs of the last `days` days, scheduled in virtual time by the placement engine around the
    seeded jobs (never on trays they held at the time, nor on a partition dedicated to another department),
    so the history is a schedule that could have happened; returns how many. Jobs that would still run
    now are left out: the seeded running jobs are the ones running."""
    rng = random.Random(seed * 7919 + days)
    now = now or timezone.now().replace(second=0, microsecond=0)
    start = now - timedelta(days=days)
    cluster = _history_cluster()
    if cluster.capacity == 0:
        return 0
    # Trays the seeded jobs held, and when: a history job never shares one with them.
    busy: list[tuple[int, float, float]] = []
    for placement, placed, finished in Job.objects.exclude(placed_at=None).values_list(
        "placement", "placed_at", "finished_at"
    ):
        for host in placement:
            if host in cluster.host_index:
                end = finished.timestamp() if finished else float("inf")
                busy.append((cluster.host_index[host], placed.timestamp(), end))
    departments = {d.slug: d for d in Department.objects.all()}
    specs = [(spec, departments[spec.slug]) for spec in DEPARTMENTS if spec.slug in departments]
    if not specs:
        return 0
    offered = HISTORY_LOAD * cluster.capacity * days * 24  # GPU-hours
    weights = [max(department.guaranteed_gpus, 1) for _spec, department in specs]
    wanted = []
    refused: dict[tuple, bool] = {}
    while offered > 0:
        spec, department = rng.choices(specs, weights)[0]
        priority_class = rng.choice((*spec.work, TRAIN))
        gpus = rng.choice(HISTORY_SIZES[priority_class])
        key = (department.slug, gpus, priority_class)
        if key not in refused:
            refused[key] = bool(check_request(department, gpus, default_topology(gpus), priority_class))
        if refused[key]:
            continue  # not a job this department could submit
        limit = rng.choice(TIME_LIMITS[priority_class])
        state = rng.choices([end for end, _, _ in HISTORY_ENDS], [w for _, _, w in HISTORY_ENDS])[0]
        low, high = next(share for end, share, _ in HISTORY_ENDS if end == state)
        ran = min(timedelta(minutes=limit * rng.uniform(low, high)), HISTORY_LONGEST * rng.uniform(0.3, 1))
        submitted = start + timedelta(seconds=rng.uniform(0, (now - start).total_seconds() - 3600))
        wanted.append(
            (submitted.timestamp(), department, priority_class, gpus, limit, state, ran.total_seconds())
        )
        offered -= gpus * ran.total_seconds() / 3600
    wanted.sort(key=lambda w: w[0])

    # Virtual time: at each submission or end, start what fits, oldest first (and backfill behind it).
    numbers = Job.objects.count()
    jobs: list[Job] = []
    queue: list[int] = []
    ends: list[tuple[float, int]] = []
    latest = now.timestamp() - 600  # finished ten minutes ago at the latest
    i, t = 0, wanted[0][0] if wanted else 0.0
    while i < len(wanted) or (queue and ends):
        t = min(wanted[i][0] if i < len(wanted) else float("inf"), ends[0][0] if ends else float("inf"))
        while ends and ends[0][0] <= t:
            cluster.release(heapq.heappop(ends)[1])
        while i < len(wanted) and wanted[i][0] <= t:
            queue.append(i)
            i += 1
        for index in list(queue[:QUEUE_LOOKAHEAD]):
            submitted, department, priority_class, gpus, limit, state, ran = wanted[index]
            placed = max(t, submitted) + rng.uniform(2, 40)
            if state == JobState.CANCELLED and placed - submitted > 3 * 3600:
                queue.remove(index)  # waited three hours, then its submitter gave up
                jobs.append(
                    _history_job(rng, numbers + len(jobs) + 1, department, priority_class, gpus, limit)
                )
                jobs[-1].state, jobs[-1].created_at = state, _at(submitted)
                jobs[-1].finished_at = _at(submitted + 3 * 3600)
                continue
            end = placed + 30 + ran
            if end > latest:
                queue.remove(index)  # it would still run now: not history
                continue
            held = [tray for tray, s, e in busy if s < end and e > t]
            cluster.hold(held)
            placement = place(cluster, Request(gpus, default_topology(gpus), department.slug))
            cluster.unhold(held)
            if placement is None:
                continue
            queue.remove(index)
            cluster.allocate(len(jobs), placement)
            heapq.heappush(ends, (end, len(jobs)))
            job = _history_job(rng, numbers + len(jobs) + 1, department, priority_class, gpus, limit)
            job.state, job.created_at, job.placed_at = state, _at(submitted), _at(placed)
            job.started_at, job.finished_at = _at(placed + 30), _at(end)
            job.placement = [cluster.tray_host[tray] for tray, _n in placement]
            job.exit_code = {JobState.COMPLETED: 0, JobState.FAILED: 1}.get(state)
            jobs.append(job)
        if i >= len(wanted) and not ends:
            break
    submitted = [job.created_at for job in jobs]
    Job.objects.bulk_create(jobs, batch_size=BATCH)
    for job, at in zip(jobs, submitted, strict=True):  # auto_now_add set them to now
        job.created_at = at
    Job.objects.bulk_update(jobs, ["created_at"], batch_size=BATCH)
    JobEvent.objects.bulk_create(_history_events(jobs), batch_size=BATCH)
    return len(jobs)


def _at(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


def _history_job(rng, number, department, priority_class, gpus, limit) -> Job:
    backend = Backend.KUBERNETES if rng.random() < 0.35 else Backend.SLURM
    return Job(
        department=department,
        project=demo_project(department),  # as every job submitted without a named project is
        submitted_by=submitter(department),
        name=f"{NAME_PREFIX[priority_class]}-{rng.choice(KINDS[priority_class])}-{number:04d}",
        gpus=gpus,
        topology=default_topology(gpus),
        priority_class=priority_class,
        backend=backend,
        work=demo_work(backend, priority_class),
        time_limit_minutes=limit,
    )


def _history_events(jobs: list[Job]) -> list[JobEvent]:
    """Each history job's story as the portal records it: submitted, placed, started, ended."""
    return job_story(jobs, placed_on, SEEDED_HISTORY)


def _demo_nodes_are_quiet() -> None:
    """The demo's simulated nodes report when seeded and when a plan re-carves their fabric, not every
    minute as real agents do: after node_silent_after_s every tray would read as silent and, under the
    default "hold" rule, take no new work. The demo's rule warns instead (the trays are shown silent, work
    is still placed); a real site keeps "hold" (Django admin: Health rules)."""
    HealthRule.objects.filter(kind=HealthKind.NODE_SILENT, action=RuleAction.HOLD).update(
        action=RuleAction.WARN,
        note="demo: the simulated nodes report only when seeded and after a partition plan, so silence is "
        "shown but holds no work (a real site keeps the hold)",
    )


class Command(BaseCommand):
    help = (
        "Seed a realistic, deterministic demo datacenter of NVL72 racks, its departments and jobs. "
        "Does nothing if racks exist, so running it again changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("--racks", type=int, default=8, help="number of NVL72 racks (default 8)")
        parser.add_argument("--model", choices=sorted(MODELS), default="gb200", help="system model")
        parser.add_argument("--seed", type=int, default=7, help="random seed (same seed, same datacenter)")
        parser.add_argument("--reset", action="store_true", help="delete the existing inventory first")
        parser.add_argument(
            "--no-tenants", action="store_true", help="inventory only: no departments or jobs"
        )

    def handle(self, *args, racks, model, seed, reset, no_tenants, **options):
        if racks < 1:
            raise CommandError("--racks must be at least 1")
        existing = Rack.objects.count()
        if existing and not reset:
            self.stdout.write(
                f"Inventory already has {existing} racks; nothing seeded (use --reset to replace)."
            )
            return
        started = time.perf_counter()
        with transaction.atomic():
            if reset:
                Job.objects.all().delete()
                Department.objects.all().delete()
                Gpu.objects.all().delete()
                ComputeTray.objects.all().delete()
                NVLinkPartition.objects.all().delete()
                FabricImport.objects.all().delete()
                Rack.objects.all().delete()
            result = seed_datacenter(racks=racks, system_model=MODELS[model], seed=seed)
            seed_mig_gpu(seed=seed)  # before the jobs: none is placed on it
            tenants = None if no_tenants else seed_tenants(seed=seed)
            seed_health_history()  # after them: the demo's placements stay as they were
            history = 0 if no_tenants else seed_job_history(seed=seed)
            fabric = ensure_simulated_fabric()
            adopt_running_jobs()
            _demo_nodes_are_quiet()
        if connection.vendor == "postgresql":
            # Fresh statistics after a bulk insert, or the planner scans all GPUs for the first pages.
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
        self.stdout.write(
            self.style.SUCCESS(
                f"Seeded {result.racks} racks, {result.trays} trays, {result.gpus} GPUs, "
                f"{result.partitions} NVLink partitions in {time.perf_counter() - started:.1f}s."
            )
        )
        if fabric:
            self.stdout.write(
                f"Added the configuration target {DEMO_FABRIC!r}: a simulated NVLink fabric manager whose "
                "nodes report their new cliques after a partition plan, as real node agents would."
            )
        if tenants is not None:
            # The queued demo jobs go through the real scheduler: they start, or wait with the true reason.
            summary = run_pass()
            if summary is not None:
                self.stdout.write(
                    f"First scheduling pass: {summary.started} jobs started, {summary.waiting} waiting."
                )
            record_quota_snapshots()  # the history's last point counts what the pass started
            logins = settings.VAR_DIR / "demo-logins.txt"
            write_demo_logins(logins, tenants)
            self.stdout.write(
                f"Seeded {tenants.departments} departments and {tenants.jobs} jobs, and {history} finished "
                f"jobs of the last {HISTORY_DAYS} days (what the partition wizard's what-if replays). Demo "
                "logins "
                f"({', '.join(tenants.users)}) share the password {tenants.password} (also in {logins.name})."
            )
        # The fabric above the racks (issue 33), through the site-file importer, after the first pass: the
        # demo's placements are the ones it always had.
        placed = seed_fabric()
        self.stdout.write(f"Imported the demo's fabric (a site file): {placed} racks in scalable units of 4.")
