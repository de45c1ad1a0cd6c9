"""Demo tenants on top of the demo inventory: departments, leads and members, running and pending jobs,
synthetic GPU telemetry and a day of quota history, so `make run` shows live dashboards.

Deterministic for a given seed. Scales with the inventory: guarantees are fractions of the schedulable
GPUs and about 60% of the GPUs run jobs.
"""

import random
import secrets
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from core.access import Role
from inventory.models import ComputeTray, Gpu, NVLinkPartition
from scheduling.choices import Backend, JobState, PriorityClass, Topology
from scheduling.models import Allocation, Job
from tenancy.models import (
    DedicatedPartition,
    Department,
    GpuActivity,
    GpuUtilization,
    Membership,
    QuotaSnapshot,
    TenancySettings,
)
from tenancy.quota import DepartmentQuota, fair_share
from tenancy.services import save_department, schedulable_gpus

BATCH = 5000
SNAPSHOT_EVERY = timedelta(minutes=5)
KINDS = ("pretrain", "finetune", "eval", "serve", "sweep")


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


DEPARTMENTS = (
    DemoDepartment("Research", "research", 0.30, "2.00", None, 1, "alice", ("bob", "erin"), 1.35),
    DemoDepartment("Inference", "inference", 0.15, "1.00", 0.25, 3, "carol", ("frank",), 0.85),
    DemoDepartment("Vision", "vision", 0.15, "1.00", 0.30, 2, "dave", ("grace",), 0.70),
    DemoDepartment("Platform", "platform", 0.10, "0.50", 0.15, 0, "heidi", ("ivan",), 0.40),
)


@dataclass(frozen=True)
class TenantSeedResult:
    departments: int
    users: dict[str, str]  # username -> role description
    password: str
    jobs: int


@transaction.atomic
def seed_tenants(seed: int = 7, password: str | None = None) -> TenantSeedResult:
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
            Membership.objects.create(user=user, department=department, role=role)
            users[username] = f"{role.label.lower()} of {spec.name}"

    # Inference owns the carved rack's second partition as a dedicated service tier.
    inference = departments[1][1]
    tier = NVLinkPartition.objects.filter(name="p2").order_by("rack__name").first()
    if tier is not None and tier.trays.count() * 4 <= inference.guaranteed_gpus:
        DedicatedPartition.objects.create(department=inference, partition=tier)

    jobs = _seed_jobs(rng, now, departments)
    _seed_telemetry(rng, now)
    _seed_history(rng, now, departments)
    return TenantSeedResult(departments=len(departments), users=users, password=password, jobs=jobs)


def _free_trays():
    """Trays that are up, grouped by partition, in rack order: the demo places jobs partition by partition."""
    trays = (
        ComputeTray.objects.filter(state="up")
        .order_by("rack__name", "partition__clique_id", "slot")
        .values_list("pk", "hostname", "partition_id")
    )
    by_partition: dict[int, list[tuple[int, str]]] = {}
    for pk, hostname, partition_id in trays:
        by_partition.setdefault(partition_id, []).append((pk, hostname))
    return by_partition


DEMO_WORK = {
    Backend.SLURM: {"script": "#!/bin/bash\nsrun python train.py --config demo.yaml\n"},
    Backend.KUBERNETES: {
        "image": "nvcr.io/nvidia/pytorch:24.10-py3",
        "command": ["torchrun", "train.py", "--config", "demo.yaml"],
    },
}


def _seed_jobs(rng, now, departments) -> int:
    gpus_of: dict[int, list[int]] = {}
    for tray_id, gpu_id in Gpu.objects.filter(tray__state="up").values_list("tray_id", "pk").order_by("pk"):
        gpus_of.setdefault(tray_id, []).append(gpu_id)
    free = _free_trays()
    partitions = list(free)
    cursor = 0
    jobs, allocations = [], []
    number = 0
    for spec, department in departments:
        wanted_trays = int(department.guaranteed_gpus * spec.busy) // 4
        while wanted_trays > 0 and cursor < len(partitions):
            pool = free[partitions[cursor]]
            if not pool:
                cursor += 1
                continue
            size = min(wanted_trays, len(pool), rng.choice([1, 2, 2, 4, 4, 8, 9]))
            taken, free[partitions[cursor]] = pool[:size], pool[size:]
            wanted_trays -= size
            number += 1
            job = Job(
                department=department,
                name=f"{spec.slug}-{rng.choice(KINDS)}-{number:04d}",
                gpus=size * 4,
                topology=Topology.PARTITION if size > 1 else Topology.ANY,
                priority_class=PriorityClass.INFERENCE if spec.slug == "inference" else PriorityClass.TRAIN,
                backend=Backend.KUBERNETES if number % 3 == 0 else Backend.SLURM,
                work=DEMO_WORK[Backend.KUBERNETES if number % 3 == 0 else Backend.SLURM],
                state=JobState.RUNNING,
                started_at=now - timedelta(minutes=rng.randrange(20, 600)),
                placement=[hostname for _, hostname in taken],
            )
            jobs.append(job)
            allocations.append((job, [gpu for tray_id, _ in taken for gpu in gpus_of.get(tray_id, [])]))
        for _ in range(rng.randrange(1, 4)):
            number += 1
            gpus = rng.choice([8, 16, 36])
            jobs.append(
                Job(
                    department=department,
                    name=f"{spec.slug}-queued-{number:04d}",
                    gpus=gpus,
                    work=DEMO_WORK[Backend.SLURM],
                    state=JobState.PENDING,
                    pending_reason=f"waiting: no NVLink partition has {gpus // 4} free trays",
                )
            )
    Job.objects.bulk_create(jobs, batch_size=BATCH)
    # Borrowing: GPUs beyond the guarantee are over quota (most recently started first).
    held: dict[int, int] = {}
    for job in sorted((j for j in jobs if j.state == JobState.RUNNING), key=lambda j: j.started_at):
        held[job.department_id] = held.get(job.department_id, 0) + job.gpus
        if held[job.department_id] > job.department.guaranteed_gpus:
            job.over_quota = True
    Job.objects.bulk_update([j for j in jobs if j.over_quota], ["over_quota"], batch_size=BATCH)
    Allocation.objects.bulk_create(
        [Allocation(job=job, gpu_id=gpu) for job, gpus in allocations for gpu in gpus], batch_size=BATCH
    )
    return len(jobs)


def _seed_telemetry(rng, now) -> None:
    """Latest utilization for every allocated GPU (some jobs idle for hours), and recent 5-minute buckets."""
    allocated = list(Allocation.objects.values_list("gpu_id", "job_id"))
    idle_jobs = {job for job in sorted({job for _, job in allocated}) if rng.random() < 0.08}
    activity, buckets = [], []
    history = 24 if len(allocated) <= 5000 else 3  # buckets per GPU: 2 hours for a demo, 15 minutes at scale
    start = now - timedelta(seconds=now.minute % 5 * 60)
    for gpu_id, job_id in allocated:
        idle = job_id in idle_jobs
        level = rng.uniform(0, 3) if idle else rng.uniform(55, 98)
        activity.append(
            GpuActivity(
                gpu_id=gpu_id,
                utilization=round(level, 1),
                sampled_at=now,
                low_since=now - timedelta(minutes=rng.randrange(45, 240)) if idle else None,
            )
        )
        for step in range(history):
            mean = max(0.0, min(100.0, level + rng.uniform(-8, 8)))
            buckets.append(
                GpuUtilization(
                    gpu_id=gpu_id,
                    bucket_start=start - step * timedelta(seconds=GpuUtilization.BUCKET_SECONDS),
                    mean=round(mean, 1),
                    peak=round(min(100.0, mean + rng.uniform(0, 10)), 1),
                    samples=10,
                )
            )
    GpuActivity.objects.bulk_create(activity, batch_size=BATCH)
    GpuUtilization.objects.bulk_create(buckets, batch_size=BATCH)


def _seed_history(rng, now, departments) -> None:
    """A day of quota snapshots every five minutes, drifting towards today's position."""
    capacity = schedulable_gpus()
    current = {}
    for _, department in departments:
        running = sum(j.gpus for j in department.jobs.filter(state=JobState.RUNNING))
        pending = sum(j.gpus for j in department.jobs.filter(state=JobState.PENDING))
        current[department.pk] = (running, pending)
    snapshots = []
    steps = int(timedelta(hours=24) / SNAPSHOT_EVERY)
    for step in range(steps, -1, -1):
        at = now - step * SNAPSHOT_EVERY
        phase = 1 - step / steps
        rows = []
        for _, department in departments:
            running, pending = current[department.pk]
            wobble = 1 + 0.15 * rng.uniform(-1, 1) * (1 - phase)
            in_use = max(0, int(running * (0.5 + 0.5 * phase) * wobble))
            demand = in_use + pending
            rows.append((department, in_use, demand))
        shares = fair_share(
            capacity,
            [
                DepartmentQuota(
                    name=d.slug,
                    guaranteed=d.guaranteed_gpus,
                    weight=float(d.over_quota_weight),
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
                    idle=int(in_use * 0.08) if step == 0 else int(in_use * rng.uniform(0, 0.1)),
                )
            )
    QuotaSnapshot.objects.bulk_create(snapshots, batch_size=BATCH)


def write_demo_logins(path: Path, result: TenantSeedResult) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"{username} ({role}): {result.password}" for username, role in result.users.items()]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
