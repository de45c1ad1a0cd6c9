"""A scheduling pass makes a fixed number of queries: one per table it reads, one statement per kind of
change it writes, whatever the number of jobs it starts, preempts or leaves waiting (an N+1 must not come
back). And it still writes everything the per-row version wrote: allocations, job events, audit events.

Every pass here reads its cluster cold (scheduling.pass_cache.forget): the count of a cold pass does not
depend on what a kept cluster had to catch up with. tests/scheduling/test_pass_cache.py covers kept ones.
On the demo inventory: gb-r01 and gb-r03 have one default partition each, gb-r02 is carved p1/p2."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from core.models import AuditEvent
from scheduling import pass_cache
from scheduling.choices import JobEventKind, JobState, Topology
from scheduling.models import Allocation, BackendCancel, Job, JobEvent
from scheduling.services.passes import run_pass
from tests.factories import free_trays, make_department, make_job

pytestmark = pytest.mark.django_db


def counted_pass():
    """(the pass's summary, the queries it made, the SQL of each) for a pass that reads cold."""
    pass_cache.forget()
    with CaptureQueriesContext(connection) as queries:
        summary = run_pass()
    return summary, len(queries), [query["sql"][:120] for query in queries]


def in_a_rolled_back_block(make, count: int):
    """`make(count)` then a counted pass, in a savepoint rolled back afterwards (the next call starts from
    the same database)."""
    with transaction.atomic():
        jobs = make(count)
        outcome = counted_pass()
        started = Job.objects.filter(pk__in=[job.pk for job in jobs], state=JobState.STARTING).count()
        transaction.set_rollback(True)
    return (*outcome, started)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_starting_5_or_50_jobs_makes_the_same_queries(demo_inventory):
    research = make_department("Research", guaranteed_gpus=120)
    run_pass()  # a process's first pass looks up once whether the database logs inventory changes

    def pending(count: int) -> list[Job]:
        return Job.objects.bulk_create(
            Job(department=research, name=f"one-{n}", gpus=1, topology=Topology.ANY) for n in range(count)
        )

    few, few_queries, few_sql, few_started = in_a_rolled_back_block(pending, 5)
    many, many_queries, many_sql, many_started = in_a_rolled_back_block(pending, 50)
    assert (few.started, many.started) == (5, 50) == (few_started, many_started)
    assert few_queries == many_queries, (few_sql, many_sql)
    # One statement per table read or kind of change, not one per job.
    assert many_queries < 30, many_sql


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_preempting_2_or_10_jobs_makes_the_same_queries(demo_inventory):
    """Every whole tray holds a borrowed job of Vision; each of Research's in-quota 4-GPU jobs takes one
    back by preemption (its backend job stopped, its GPUs freed, it goes back in the queue)."""
    vision = make_department("Vision", guaranteed_gpus=0)
    research = make_department("Research", guaranteed_gpus=48)
    trays = free_trays(100)
    for number, tray in enumerate(trays):
        make_job(vision, f"borrower-{number}", trays=[tray], over_quota=True, backend_id=f"{900 + number}")

    def in_quota(count: int) -> list[Job]:
        return Job.objects.bulk_create(
            Job(department=research, name=f"four-{n}", gpus=4, topology=Topology.ANY) for n in range(count)
        )

    run_pass()  # a process's first pass looks up once whether the database logs inventory changes
    few, few_queries, few_sql, few_started = in_a_rolled_back_block(in_quota, 2)
    many, many_queries, many_sql, many_started = in_a_rolled_back_block(in_quota, 10)
    assert (few.preempted, many.preempted) == (2, 10)
    assert (few_started, many_started) == (2, 10)
    assert few_queries == many_queries, (few_sql, many_sql)


def test_a_pass_still_writes_every_row_the_jobs_need(demo_inventory):
    """Allocations (each GPU once), PLACED events, the audit of each placed job; and for each preempted one
    a PREEMPTED event, a BackendCancel for its backend job and the requeue in the audit; waiting reasons."""
    vision = make_department("Vision", guaranteed_gpus=0)
    research = make_department("Research", guaranteed_gpus=8)
    [victim_tray, *_] = trays = free_trays(100)
    borrowers = [
        make_job(vision, f"borrower-{n}", trays=[tray], over_quota=True, backend_id=f"7{n:02d}")
        for n, tray in enumerate(trays)
    ]
    placed = Job.objects.create(department=research, name="reclaim", gpus=4, topology=Topology.ANY)
    waiting = Job.objects.create(department=research, name="too-big", gpus=72, topology=Topology.PARTITION)

    summary = run_pass()

    assert (summary.started, summary.preempted) == (1, 1)
    placed.refresh_from_db()
    assert placed.state == JobState.STARTING and placed.over_quota is False
    gpus = list(Allocation.objects.filter(job=placed).values_list("gpu__tray__hostname", flat=True))
    assert len(gpus) == 4 and len(set(gpus)) == 1 and placed.placement == gpus[:1]
    [event] = JobEvent.objects.filter(job=placed, kind=JobEventKind.PLACED)
    assert event.message.startswith("placed in quota on 1 tray in ") and event.placement == placed.placement
    audit = AuditEvent.objects.get(object_type="scheduling.job", object_id=str(placed.pk), action="update")
    assert audit.object_repr == str(placed) == "reclaim (Research)" and audit.department_id == research.pk
    assert audit.before["state"] == "pending" and audit.after["state"] == "starting"
    assert audit.after["placement"] == placed.placement and "placed_at" in audit.after

    [victim] = Job.objects.filter(department=vision, state=JobState.PENDING)
    assert victim.preemptions == 1 and victim.backend_id == "" and victim.placed_at is None
    assert victim.pending_reason == "waiting: preempted; back in the queue"
    assert not Allocation.objects.filter(job=victim).exists()
    assert victim.placement == placed.placement  # it ran where the reclaiming job now runs
    [preempted] = JobEvent.objects.filter(job=victim, kind=JobEventKind.PREEMPTED)
    assert preempted.message == (
        "preempted: its GPUs were borrowed (over quota) and research reclaimed them for job "
        f"#{placed.pk} within its guarantee; back in the queue"
    )
    [cancel] = BackendCancel.objects.all()
    original = next(job for job in borrowers if job.pk == victim.pk)
    assert (cancel.job_id, cancel.backend_id) == (victim.pk, original.backend_id)
    assert cancel.reason == f"preempted for job {placed.pk}"
    requeued = AuditEvent.objects.filter(
        object_type="scheduling.job", object_id=str(victim.pk), action="update"
    ).latest("pk")
    # What changed (the factory's running job had no placed_at nor dispatch time to clear).
    assert requeued.before["state"] == "running" and requeued.after == {
        "state": "pending",
        "preemptions": 1,
        "over_quota": False,
        "backend_id": "",
        "started_at": None,
    }

    waiting.refresh_from_db()
    assert waiting.state == JobState.PENDING and waiting.pending_reason.startswith("waiting: ")
    # Each GPU is allocated once (the unique constraint), and only to jobs that hold GPUs.
    assert Allocation.objects.count() == Allocation.objects.values("gpu").distinct().count()
    assert not Allocation.objects.exclude(job__state__in=[JobState.STARTING, JobState.RUNNING]).exists()
    assert victim_tray.hostname in {tray.hostname for tray in trays}
