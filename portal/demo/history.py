"""The demo's telemetry and quota history (portal.demo.seeding.seed_tenants): synthetic utilization for every
GPU a seeded job holds and a low sample for every other GPU on a tray that is not down (a DCGM exporter
reports every GPU of its node, held or not), and TenancySettings.quota_history_days of quota snapshots kept
the way the product keeps them, ending with one taken by the real snapshot code.
"""

import random
from datetime import datetime, timedelta

from inventory.choices import TrayState
from inventory.models import Gpu
from portal.demo.jobs import BATCH
from portal.demo.telemetry import IDLE_RANGE
from scheduling.choices import JobState
from scheduling.models import Allocation
from scheduling.tasks import record_quota_snapshots
from tenancy.models import GpuActivity, GpuUtilization, QuotaSnapshot, TenancySettings
from tenancy.quota import DepartmentQuota, fair_share
from tenancy.quota_history import FULL_RESOLUTION as QUOTA_FULL_RESOLUTION
from tenancy.services import schedulable_gpus

SNAPSHOT_EVERY = timedelta(minutes=5)


def seed_telemetry(rng, now) -> None:
    """Latest utilization for every allocated GPU (some jobs idle for a while), and its 5-minute buckets
    since its job started; an idle job's GPUs went low after the job started. Every other GPU on a tray that
    is not down gets a low latest sample (`free_gpu_activity`)."""
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
    activity += free_gpu_activity(now)
    GpuActivity.objects.bulk_create(activity, batch_size=BATCH)
    GpuUtilization.objects.bulk_create(buckets, batch_size=BATCH)


def unheld_reporting_gpus():
    """The GPUs an exporter reports (on a tray that is not down) that no job holds, whole or as a MIG slice,
    in primary-key order: the seed's and the simulated exporters' (portal.demo.agents) free GPUs."""
    return (
        Gpu.objects.exclude(tray__state=TrayState.DOWN)
        .filter(allocations__isnull=True, slice_allocations__isnull=True)
        .order_by("pk")
    )


def free_gpu_activity(now: datetime) -> list[GpuActivity]:
    """A latest sample for each GPU no job holds on a tray that is not down (0-3 %; no run of low samples:
    tenancy.activity keeps one only while a job holds the GPU), from a generator of its own, so the seed's
    other draws stay as they were. No 5-minute buckets: the dashboards' history is the held GPUs'."""
    rng = random.Random("demo-free-gpus")
    free = unheld_reporting_gpus().values_list("pk", flat=True)
    return [
        GpuActivity(
            gpu_id=gpu_id,
            utilization=round(rng.uniform(*IDLE_RANGE), 1),
            sampled_at=now,
            low_since=None,
        )
        for gpu_id in free.iterator(chunk_size=BATCH)
    ]


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


def seed_history(rng, now, departments) -> None:
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
