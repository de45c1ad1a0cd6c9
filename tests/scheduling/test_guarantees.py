"""Guarantees for gang jobs: the engine's rules for in-quota gangs, each checked on its own.

* in-quota work is never preempted, whatever the cluster holds (property);
* reclaim takes borrowers in order (least priority, most recently started first) and, of the placements
  those allow, the one that loses the least work;
* a reservation is held and backfill never delays the reserved gang (property, through the replay);
* measured options (off by default): reservations that count the borrowers an in-quota job may reclaim as
  gone, but not one that turns into in-quota work before it ends; backfill into any reservation that
  starts after the job ends;
* an in-quota gang that has waited past its bound takes its fallback topology, a borrower does not.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.hardware import GPUS_PER_TRAY
from scheduling import simulator
from scheduling.engine.cluster import Cluster, TraySpec
from scheduling.engine.placement import ANY, PARTITION, RACK, Request, place
from scheduling.engine.scheduler import Department, PendingJob, RunningJob, schedule
from tenancy.quota import in_quota_prefix


def cluster_of(layouts: dict[str, list[int]]) -> Cluster:
    """Racks named by key, each carved into partitions p1, p2... of the given tray counts."""
    specs = []
    for rack, sizes in layouts.items():
        slot = 0
        for number, size in enumerate(sizes, 1):
            for _ in range(size):
                slot += 1
                specs.append(TraySpec(f"{rack}-c{slot:02d}", rack, f"p{number}"))
    return Cluster(specs)


def trays(first: int, count: int, gpus: int = GPUS_PER_TRAY) -> list[tuple[int, int]]:
    return [(t, gpus) for t in range(first, first + count)]


def partition_of(c: Cluster, placement) -> set[str]:
    return {c.partition_label(c.tray_part[t]) for t, _ in placement}


# --- in-quota work is never preempted ----------------------------------------------------------------

DEPARTMENTS = ("a", "b", "c")


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=120, deadline=None)
@given(
    guarantees=st.tuples(*(st.integers(0, 48) for _ in DEPARTMENTS)),
    running=st.lists(
        st.tuples(st.sampled_from(DEPARTMENTS), st.sampled_from([1, 2, 4, 8, 16, 32]), st.integers(0, 900)),
        max_size=24,
    ),
    pending=st.lists(
        st.tuples(
            st.sampled_from(DEPARTMENTS),
            st.sampled_from([1, 4, 8, 16, 32, 36, 64]),
            st.sampled_from([PARTITION, RACK, ANY]),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_in_quota_work_is_never_preempted_whatever_the_cluster_holds(guarantees, running, pending):
    c = cluster_of({"r1": [9, 9], "r2": [9, 9]})  # 144 GPUs; guarantees add up to at most 144
    departments = [Department(name, g) for name, g in zip(DEPARTMENTS, guarantees, strict=True)]
    jobs = []
    for i, (department, gpus, started) in enumerate(running, 100):
        placement = place(c, Request(gpus, ANY, department))
        if placement is None:
            continue
        c.allocate(i, placement)
        jobs.append(RunningJob(i, department, gpus, float(started), started + 5000.0, over_quota=False))
    waiting = [
        PendingJob(i, department, gpus, topology, submitted_at=float(i))
        for i, (department, gpus, topology) in enumerate(pending, 1)
    ]
    # The rule, worked out apart from the engine: per department, its oldest jobs are in quota while
    # their GPUs stay within min(guarantee, demand) (guarantees fit the capacity, nothing has failed).
    in_quota: set[int] = set()
    for d in departments:
        own = sorted((j for j in jobs if j.department == d.name), key=lambda j: (j.started_at, j.id))
        demand = sum(j.gpus for j in own) + sum(p.gpus for p in waiting if p.department == d.name)
        in_quota |= in_quota_prefix(min(d.guaranteed, demand), [(j.id, j.gpus) for j in own])
    result = schedule(c, departments, jobs, waiting, now=1000.0)
    assert in_quota.isdisjoint(result.preempted)
    held = {d.name: sum(j.gpus for j in jobs if j.department == d.name) for d in departments}
    for victim, for_job in result.preempted.items():
        department = next(j.department for j in jobs if j.id == victim)
        assert held[department] > guarantees[DEPARTMENTS.index(department)]  # it borrowed
        assert next(p for p in waiting if p.id == for_job).department != department


# --- reclaim: in order, and of what that allows, the least lost work ---------------------------------


def test_reclaim_frees_the_partition_that_loses_the_least_work():
    # One rack 2x9; b borrows: eight 4-GPU jobs on trays 1-8 (p1), started at 3000, and one 8-GPU job V
    # on trays 9 and 10 (across p1 and p2), started at 100; p2's other eight trays are free. a's in-quota
    # 9-tray job needs a whole partition. In the reclaim order (most recent first) the eight small jobs
    # come first and V last; only with V gone does a partition fit, and then both do. p2 costs V alone,
    # p1 V and the eight others: the job goes to p2 and the eight keep running.
    def borrowed() -> tuple[Cluster, list[RunningJob]]:
        c = cluster_of({"r1": [9, 9]})
        running = []
        for i in range(8):
            c.allocate(20 + i, [(i, 4)])
            running.append(RunningJob(20 + i, "b", 4, started_at=3000, expected_end=9000, over_quota=True))
        c.allocate(10, [(8, 4), (9, 4)])
        running.append(RunningJob(10, "b", 8, started_at=100, expected_end=9000, over_quota=True))
        return c, running

    departments = [Department("a", guaranteed=36), Department("b", guaranteed=0)]
    c, running = borrowed()
    result = schedule(c, departments, running, [PendingJob(1, "a", 36)], now=3600.0)
    assert result.preempted == {10: 1}
    assert partition_of(c, result.started[0].placement) == {"r1 p2"}
    assert all(20 + i in c.jobs for i in range(8))
    # Without weighing the loss, best fit takes the first partition that fits, p1: nine jobs stopped.
    c, running = borrowed()
    result = schedule(c, departments, running, [PendingJob(1, "a", 36)], now=3600.0, least_loss_reclaim=False)
    assert len(result.preempted) == 9


def test_reclaim_waits_when_the_trays_free_up_sooner_than_the_work_it_would_lose():
    # b borrows the whole rack since 0. At 100, a's in-quota 8-GPU job could preempt it: b would lose
    # 100 s x 72 GPUs. If b's job ends at 1000, waiting costs 900 s x 8 GPUs, no more: a waits (with a
    # reservation). If it ends at 2000, waiting costs more: a reclaims.
    departments = [Department("a", guaranteed=36), Department("b", guaranteed=36)]
    for end, preempted in ((1000, {}), (2000, {10: 1})):
        c = cluster_of({"r1": [18]})
        c.allocate(10, trays(0, 18))
        running = [RunningJob(10, "b", 72, started_at=0, expected_end=end, over_quota=True)]
        pending = [PendingJob(1, "a", 8)]
        result = schedule(c, departments, running, pending, now=100.0, reclaim_when_cheaper=True)
        assert result.preempted == preempted
    assert result.reservations == [] and [s.job_id for s in result.started] == [1]
    # By default the guarantee comes first: it reclaims at once.
    c = cluster_of({"r1": [18]})
    c.allocate(10, trays(0, 18))
    running = [RunningJob(10, "b", 72, started_at=0, expected_end=1000, over_quota=True)]
    result = schedule(c, departments, running, [PendingJob(1, "a", 8)], now=100.0)
    assert result.preempted == {10: 1}


def test_reclaim_never_reaches_past_the_borrowers_it_needs_in_order():
    # Borrowers of the least-priority department go first, most recent first: c's job (priority 0) is
    # stopped although b's (priority 1) started later, and b's keeps running.
    c = cluster_of({"r1": [9, 9]})
    c.allocate(10, trays(0, 9))
    c.allocate(11, trays(9, 9))
    running = [
        RunningJob(10, "b", 36, started_at=500, expected_end=9000, over_quota=True),
        RunningJob(11, "c", 36, started_at=100, expected_end=9000, over_quota=True),
    ]
    departments = [
        Department("a", guaranteed=36),
        Department("b", guaranteed=0, priority=1),
        Department("c", guaranteed=0, priority=0),
    ]
    result = schedule(c, departments, running, [PendingJob(1, "a", 36)], now=1000.0)
    assert result.preempted == {11: 1}
    assert 10 in c.jobs


# --- reservations ------------------------------------------------------------------------------------


def test_a_reservation_counts_reclaimable_borrowers_as_gone_but_not_those_about_to_turn_in_quota():
    # Two racks 1x9 (one 9-tray partition each); a needs all 9 trays of one, in quota.
    #   r1: x's borrower X2 on 7 trays (ends at 20000) and y's in-quota job Y1 on 2 (ends at 600).
    #   r2: z's borrower Z2 on 7 trays (ends at 20000) and y's in-quota job Y2 on 2 (ends at 400).
    # Both borrowers may be reclaimed now, but z's older job Z1 (in r4 beside y's long job Y3; 32 GPUs,
    # z's whole guarantee) ends at 300: then Z2 is z's oldest job and in quota, so r2 is not free before
    # 20000. x's older job X1 (r3) runs past 20000: X2 borrows until it ends. The reservation: r1 at 600.
    c = cluster_of({"r1": [9], "r2": [9], "r3": [9], "r4": [9]})
    running = []

    def run(job_id, department, first, count, started, end, over):
        c.allocate(job_id, trays(first, count))
        running.append(RunningJob(job_id, department, count * 4, started, end, over_quota=over))

    run(20, "x", 0, 7, 500, 20000, True)  # X2
    run(30, "y", 7, 2, 0, 600, False)  # Y1
    run(21, "z", 9, 7, 500, 20000, True)  # Z2
    run(31, "y", 16, 2, 0, 400, False)  # Y2
    run(40, "x", 18, 9, 0, 30000, False)  # X1
    run(41, "z", 27, 8, 0, 300, False)  # Z1
    run(32, "y", 35, 1, 0, 30000, False)  # Y3
    departments = [
        Department("a", guaranteed=36),
        Department("x", guaranteed=36),
        Department("y", guaranteed=20),
        Department("z", guaranteed=32),
    ]
    options = {"reclaim_aware_reservations": True}
    result = schedule(c, departments, running, [PendingJob(1, "a", 36)], now=100.0, **options)
    assert result.started == [] and result.preempted == {}
    (reservation,) = result.reservations
    assert reservation.job_id == 1 and reservation.start_at == 600
    assert {c.tray_rack[t] for t in reservation.trays} == {0}
    # By default every borrower counts as staying to its end: the reservation waits for them (20000).
    result = schedule(c, departments, running, [PendingJob(1, "a", 36)], now=100.0)
    assert result.reservations[0].start_at == 20000


def _reservation_spy(monkeypatch):
    firsts: dict[int, float] = {}
    real = simulator.schedule

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        for reservation in result.reservations:
            firsts.setdefault(reservation.job_id, reservation.start_at)
        return result

    monkeypatch.setattr(simulator, "schedule", spy)
    return firsts


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=40, deadline=None)
@given(
    blockers=st.lists(st.tuples(st.integers(1, 4), st.integers(100, 5000)), min_size=2, max_size=6),
    later=st.lists(
        st.tuples(st.integers(2, 3000), st.integers(10, 6000), st.sampled_from([1, 4, 8, 16, 32])),
        max_size=25,
    ),
    per_reservation=st.booleans(),
)
def test_a_reserved_gang_is_never_delayed_by_backfill(tmp_path_factory, blockers, later, per_reservation):
    # One department on one rack 1x18, with no guarantee: every job borrows, so the queue is in
    # submission order and nothing is preempted. At t=0 blockers take trays; at t=1 the gang G asks for
    # 16 trays and must wait; later jobs of any size arrive while it waits and may backfill. Time limits
    # are exact in the replay: G starts no later than the start of the first reservation it was given.
    rows = [(f"b{i}", 0, duration, trays * 4) for i, (trays, duration) in enumerate(blockers)]
    rows.append(("G", 1, 1000, 64))
    rows += [(f"l{i}", at, duration, gpus) for i, (at, duration, gpus) in enumerate(later)]
    path = tmp_path_factory.mktemp("trace") / "d.csv"
    path.write_text(
        "job_id,submission_time,duration,num_gpu\n" + "".join(f"{','.join(map(str, r))}\n" for r in rows)
    )
    traces = simulator.load_traces([path])
    if sum(trays for trays, _ in blockers) <= 2:
        return  # G fits at once: nothing to reserve
    with pytest.MonkeyPatch.context() as monkeypatch:
        firsts = _reservation_spy(monkeypatch)
        options = {"per_reservation_backfill": per_reservation}
        run = simulator.simulate(traces, 1, "1x18", "rackplane", guarantees={"d": 0}, engine_options=options)
    g = next(job for job in traces[0].jobs if job.name == "G")
    order = sorted(traces[0].jobs, key=lambda j: (j.submitted_at, j.id))
    waits = dict(zip((j.id for j in order), run.waits, strict=True))
    assert g.id in firsts
    assert 1 + waits[g.id] <= firsts[g.id]


def test_in_quota_gangs_may_get_reservations_of_their_own_beyond_the_head_of_the_queue():
    # Two racks 2x9, every partition held by b's inference work (not preemptible) until 1000, 2000, 3000
    # and 4000. a's jobs are all in quota and none fits. With one reservation for the head and two more
    # for in-quota gangs, J1, J2 and J3 get one; the small J4 and the gang J5 after them do not.
    c = cluster_of({"r1": [9, 9], "r2": [9, 9]})
    running = []
    for i, end in enumerate((1000, 2000, 3000, 4000)):
        c.allocate(10 + i, trays(9 * i, 9))
        running.append(RunningJob(10 + i, "b", 36, 0, end, over_quota=True, priority_class="inference"))
    pending = [
        PendingJob(1, "a", 36, submitted_at=1),
        PendingJob(2, "a", 36, submitted_at=2),
        PendingJob(3, "a", 36, submitted_at=3),
        PendingJob(4, "a", 4, submitted_at=4),
        PendingJob(5, "a", 20, submitted_at=5),
    ]
    departments = [Department("a", guaranteed=144), Department("b", guaranteed=0)]
    result = schedule(c, departments, running, pending, now=10.0, max_reservations=1, in_quota_reservations=2)
    assert [(r.job_id, r.start_at) for r in result.reservations] == [(1, 1000), (2, 2000), (3, 3000)]
    result = schedule(c, departments, running, pending, now=10.0, max_reservations=1)
    assert [r.job_id for r in result.reservations] == [1]


def test_backfill_may_use_the_trays_of_a_reservation_that_starts_after_it_ends():
    # One rack 2x9, one department with no guarantee (all borrow: the queue is in submission order).
    # J1 reserves p1 (free at 2000), J2 p2 (free at 5000). J3 runs 3000 s from 1000: it would delay J1,
    # not J2, so it may take J2's free tray; a job that would delay both waits.
    c = cluster_of({"r1": [9, 9]})
    c.allocate(10, trays(0, 8))
    c.allocate(11, trays(9, 8))
    running = [
        RunningJob(10, "a", 32, started_at=0, expected_end=2000, over_quota=True),
        RunningJob(11, "a", 32, started_at=0, expected_end=5000, over_quota=True),
    ]
    pending = [
        PendingJob(1, "a", 36, submitted_at=1, time_limit_s=600),
        PendingJob(2, "a", 36, submitted_at=2, time_limit_s=600),
        PendingJob(3, "a", 1, submitted_at=3, time_limit_s=3000),
        PendingJob(4, "a", 1, submitted_at=4, time_limit_s=9000),
    ]
    departments = [Department("a", guaranteed=0)]
    result = schedule(c, departments, running, pending, now=1000.0, per_reservation_backfill=True)
    assert [(r.job_id, r.start_at) for r in result.reservations] == [(1, 2000), (2, 5000)]
    assert [(s.job_id, s.placement) for s in result.started] == [(3, ((17, 1),))]
    # By default the earliest reservation's start bounds every backfill: J3 waits too.
    c.release(3)
    result = schedule(c, departments, running, pending, now=1000.0)
    assert result.started == []


# --- fallback topology for in-quota gangs that waited --------------------------------------------------


def test_an_in_quota_gang_takes_its_fallback_topology_only_after_its_bound():
    # One rack 2x9 with 5 trays free in each partition; a's 8-tray job fits no partition.
    c = cluster_of({"r1": [9, 9]})
    c.allocate(10, trays(0, 4))
    c.allocate(11, trays(9, 4))
    running = [
        RunningJob(10, "b", 16, started_at=0, expected_end=9000),
        RunningJob(11, "b", 16, started_at=0, expected_end=9000),
    ]
    departments = [Department("a", guaranteed=40), Department("b", guaranteed=32)]
    job = PendingJob(1, "a", 32, PARTITION, submitted_at=0, fallback_topology=RACK, fallback_after_s=3600)
    early = schedule(c, departments, running, [job], now=3000.0)
    assert early.started == []
    late = schedule(c, departments, running, [job], now=3600.0)
    (start,) = late.started
    assert partition_of(c, start.placement) == {"r1 p1", "r1 p2"}
    c.release(1)
    strict = PendingJob(1, "a", 32, PARTITION, submitted_at=0)
    assert schedule(c, departments, running, [strict], now=99999.0).started == []


def test_a_borrower_keeps_its_topology_past_the_bound():
    c = cluster_of({"r1": [9, 9]})
    c.allocate(10, trays(0, 4))
    c.allocate(11, trays(9, 4))
    running = [
        RunningJob(10, "b", 16, started_at=0, expected_end=9000),
        RunningJob(11, "b", 16, started_at=0, expected_end=9000),
    ]
    departments = [Department("a", guaranteed=0), Department("b", guaranteed=72)]
    job = PendingJob(1, "a", 32, PARTITION, submitted_at=0, fallback_topology=RACK, fallback_after_s=60)
    assert schedule(c, departments, running, [job], now=9000.0 - 1).started == []
    # ... unless the pass is told borrowers may fall back too.
    result = schedule(c, departments, running, [job], now=9000.0 - 1, fallback_borrowers=True)
    assert [s.job_id for s in result.started] == [1]
