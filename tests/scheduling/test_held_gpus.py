"""Each department's (and project's) held and borrowed GPUs kept by the database (migration scheduling 0031,
PostgreSQL): after any sequence of allocation and job changes, made the ways the product makes them (the
pass's bulk statements, a job's end, cancel, requeue, preemption, a resize, a GPU moved between jobs, a job
moved between projects, slice jobs, raw SQL), the kept figures are the allocations counted, and the pages'
figures follow (department positions, the projects panel). Two transactions changing one job at once (an
allocation made while the job's flag changes) still leave them exact: the row locks the triggers take."""

from __future__ import annotations

import random
import threading

import pytest
from django.db import connection, connections, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inventory.choices import GpuHealth
from inventory.models import Gpu
from scheduling.choices import HOLDING_STATES, JobState
from scheduling.models import Allocation, Job
from scheduling.project_changes import running_figures
from scheduling.usage import (
    HELD_TABLE,
    JOB_FIGURES,
    counted_held,
    department_positions,
    departments_with_jobs,
    free_gpus_count,
    free_gpus_queryset,
    keeps_held,
    kept_held,
)
from tenancy.models import Project
from tenancy.services import schedulable_gpus_q
from tests.factories import make_department

postgresql = pytest.mark.skipif(connection.vendor != "postgresql", reason="kept where the triggers run")


class _Rollback(Exception):
    pass


def _free_gpus(rng, count: int) -> list[int]:
    free = list(Gpu.objects.filter(allocations__isnull=True).values_list("pk", flat=True))
    return rng.sample(free, min(count, len(free)))


def _holding(rng, n=1) -> list[Job]:
    jobs = list(Job.objects.filter(state__in=HOLDING_STATES).order_by("pk"))
    return rng.sample(jobs, min(n, len(jobs)))


def start(rng, departments, projects):
    """A pending job starts as the pass starts one: its state, then its GPUs (or the GPUs first)."""
    department = rng.choice(departments)
    job = Job.objects.create(
        department=department,
        project=rng.choice([None, *projects[department.pk]]),
        name="j",
        gpus=rng.randint(1, 6),
        state=JobState.PENDING,
    )
    gpus = _free_gpus(rng, job.gpus)
    state = rng.choice(HOLDING_STATES)
    over = rng.random() < 0.4
    if rng.random() < 0.5:
        Job.objects.filter(pk=job.pk).update(state=state, over_quota=over)
        Allocation.objects.bulk_create(Allocation(job=job, gpu_id=gpu) for gpu in gpus)
    else:
        Allocation.objects.bulk_create(Allocation(job=job, gpu_id=gpu) for gpu in gpus)
        Job.objects.filter(pk=job.pk).update(state=state, over_quota=over)


def end(rng, departments, projects):
    """A job ends, is cancelled or fails: its state and its allocations deleted, in either order."""
    for job in _holding(rng):
        state = rng.choice([JobState.COMPLETED, JobState.CANCELLED, JobState.FAILED])
        if rng.random() < 0.5:
            Job.objects.filter(pk=job.pk).update(state=state)
            Allocation.objects.filter(job=job).delete()
        else:
            Allocation.objects.filter(job=job).delete()
            Job.objects.filter(pk=job.pk).update(state=state)


def requeue(rng, departments, projects):
    """Requeued or preempted (several at once, as the pass does): back to pending, GPUs freed."""
    jobs = [job.pk for job in _holding(rng, rng.randint(1, 3))]
    Allocation.objects.filter(job_id__in=jobs).delete()
    Job.objects.filter(pk__in=jobs).update(state=JobState.PENDING, over_quota=False)


def restand(rng, departments, projects):
    """The pass flips the borrowing flag of several running jobs in one statement."""
    for job in _holding(rng, rng.randint(1, 4)):
        job.over_quota = not job.over_quota
        job.save(update_fields=["over_quota"])


def restand_bulk(rng, departments, projects):
    jobs = _holding(rng, rng.randint(1, 4))
    for job in jobs:
        job.over_quota = rng.random() < 0.5
    Job.objects.bulk_update(jobs, ["over_quota"])


def resize(rng, departments, projects):
    """A running job gains or loses a GPU."""
    for job in _holding(rng):
        if rng.random() < 0.5:
            Allocation.objects.bulk_create(Allocation(job=job, gpu_id=g) for g in _free_gpus(rng, 1))
        else:
            Allocation.objects.filter(pk__in=job.allocations.values("pk")[:1]).delete()


def move_gpu(rng, departments, projects):
    """An allocation changed in place to another job (the admin): an UPDATE of the allocation."""
    allocation = Allocation.objects.order_by("?").first()
    jobs = list(Job.objects.order_by("?")[:1])
    if allocation and jobs:
        Allocation.objects.filter(pk=allocation.pk).update(job=jobs[0])


def move_project(rng, departments, projects):
    for job in _holding(rng):
        Job.objects.filter(pk=job.pk).update(project=rng.choice([None, *projects[job.department_id]]))


def move_department(rng, departments, projects):
    for job in _holding(rng):
        Job.objects.filter(pk=job.pk).update(department=rng.choice(departments), project=None)


def slice_job(rng, departments, projects):
    """A slice job starts and holds MIG devices, no Allocation: in slices and GPU-equivalents, nothing
    whole-GPU changes; a running one ends or starts borrowing."""
    running = list(Job.objects.filter(state=JobState.RUNNING, mig_slices__gt=0).order_by("pk"))
    if running:
        Job.objects.filter(pk=rng.choice(running).pk).update(over_quota=rng.random() < 0.5)
        Job.objects.filter(pk=rng.choice(running).pk).update(state=JobState.COMPLETED)
    Job.objects.create(
        department=rng.choice(departments),
        name="s",
        gpus=0,
        mig_profile="1g.23gb",
        mig_slices=rng.randint(1, 3),
        mig_compute_slices=rng.choice([1, 2, 3]),
        state=JobState.RUNNING,
        over_quota=rng.random() < 0.5,
    )


def left_behind(rng, departments, projects):
    """A job stops holding but its rows are not cleaned up yet (a cancel in flight): still allocated, not
    held; a GPU goes out of service under a job (unschedulable: not free, not counted as free)."""
    for job in _holding(rng):
        Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)
    gpu = Gpu.objects.filter(allocations__isnull=False).order_by("?").first()
    if gpu is not None:
        Gpu.objects.filter(pk=gpu.pk).update(health=GpuHealth.UNHEALTHY)


def pending_changes(rng, departments, projects):
    """Jobs submitted, a waiting one asking for other GPUs, one withdrawn (deleted)."""
    for _ in range(rng.randint(1, 3)):
        Job.objects.create(department=rng.choice(departments), name="p", gpus=rng.randint(1, 8))
    waiting = list(Job.objects.filter(state=JobState.PENDING, mig_slices=0).order_by("pk"))
    if waiting:
        Job.objects.filter(pk=rng.choice(waiting).pk).update(gpus=rng.randint(1, 8))
        rng.choice(waiting).delete()


def raw_sql(rng, departments, projects):
    """Raw SQL, bypassing Django: a job's allocations deleted and its state changed in one statement each."""
    for job in _holding(rng):
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM scheduling_allocation WHERE job_id = %s", [job.pk])
            cursor.execute("UPDATE scheduling_job SET state = 'pending' WHERE id = %s", [job.pk])


CHANGES = [
    start,
    start,
    end,
    requeue,
    restand,
    restand_bulk,
    resize,
    move_gpu,
    move_project,
    move_department,
    slice_job,
    pending_changes,
    left_behind,
    raw_sql,
]


def folded() -> bool:
    """One kept row per department and project: every change folded what it added (one session: no
    other writer holds rows back)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT COUNT(*) FROM {HELD_TABLE} GROUP BY department_id, project_id HAVING COUNT(*) > 1"
        )
        return not cursor.fetchall()


def agree(departments) -> None:
    kept = kept_held()
    assert kept == counted_held()
    assert not keeps_held() or folded()
    free = Gpu.objects.filter(schedulable_gpus_q(), allocations__isnull=True).count()
    assert free_gpus_count() == free == free_gpus_queryset().count()
    positions = department_positions()
    counted_jobs = {department.pk: department for department in departments_with_jobs()}
    for position in positions:  # the job figures as departments_with_jobs counts them
        for name in JOB_FIGURES:
            assert getattr(position.department, name) == getattr(counted_jobs[position.department.pk], name)
    for department in departments:
        held = {p: f for (d, p), f in kept.items() if d == department.pk}
        position = positions.of(department)
        assert (position.in_use, position.borrowed) == (
            sum(f[0] for f in held.values()),
            sum(f[1] for f in held.values()),
        )
        use, _beyond = running_figures(department)
        shown = {p: (u["in_use"], u["borrowed"]) for p, u in use.items() if u["in_use"] or u["borrowed"]}
        assert shown == held


def setup():
    departments = [make_department("Alpha", guaranteed_gpus=16), make_department("Beta", guaranteed_gpus=8)]
    projects = {
        d.pk: [
            *Project.objects.filter(department=d),
            Project.objects.create(department=d, name=f"{d.name} P", slug=f"{d.slug}-p", guaranteed_gpus=4),
        ]
        for d in departments
    }
    return departments, projects


@postgresql
@pytest.mark.slow(reason="30 generated sequences of up to 14 changes, each compared with a count")
@pytest.mark.django_db
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from(CHANGES), st.integers(0, 2**32)), min_size=1, max_size=14))
def test_the_kept_figures_are_the_allocations_counted_after_every_change(demo_inventory, steps):
    try:
        with transaction.atomic():
            departments, projects = setup()
            for change, seed in steps:
                change(random.Random(seed), departments, projects)
                agree(departments)
            raise _Rollback
    except _Rollback:
        pass


@pytest.mark.django_db
def test_the_figures_are_counted_where_nothing_keeps_them(demo_inventory):
    """Any database: kept_held gives the count (SQLite counts it; PostgreSQL reads what its triggers kept)."""
    departments, projects = setup()
    rng = random.Random(32)
    for change in [*CHANGES, start, start]:
        change(rng, departments, projects)
        agree(departments)
    assert counted_held()  # the changes left some GPUs held: the comparison compared something


@postgresql
@pytest.mark.django_db(transaction=True)
def test_a_flag_changed_while_another_transaction_allocates_is_counted_once(demo_inventory):
    """Transaction A gives job J GPUs and has not committed; B flags J over quota meanwhile (the pass's
    restanding). B waits for A's lock on J and counts J's allocations after A commits: borrowed is all of
    J's GPUs, never the ones before A's."""
    department = make_department("Alpha", guaranteed_gpus=16)
    job = Job.objects.create(department=department, name="j", gpus=8, state=JobState.RUNNING)
    Allocation.objects.bulk_create(Allocation(job=job, gpu_id=g) for g in _free_gpus(random.Random(1), 4))
    more = _free_gpus(random.Random(2), 4)
    allocated, flagged = threading.Event(), threading.Event()

    def flag():
        try:
            allocated.wait(10)
            with transaction.atomic():
                Job.objects.filter(pk=job.pk).update(over_quota=True)  # waits for A's lock on J
            flagged.set()
        finally:
            connections.close_all()

    other = threading.Thread(target=flag)
    other.start()
    with transaction.atomic():
        Allocation.objects.bulk_create(Allocation(job=job, gpu_id=g) for g in more)
        allocated.set()
        assert not flagged.wait(1)  # B is waiting for this transaction
    other.join(10)
    assert flagged.is_set()
    assert kept_held() == counted_held() == {(department.pk, None): (8, 8)}
