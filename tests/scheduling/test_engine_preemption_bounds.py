"""The preemption bounds of the engine (scheduling.engine.scheduler.Options): a borrower is not reclaimed
before its class's minimum run time (KAI's reclaim-min-runtime, Slurm's PreemptExemptTime), and an in-quota
job preempts only once it has waited out the preemption grace; the pending reason says which and when."""

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine.placement import ANY
from scheduling.engine.scheduler import Department, PendingJob, RunningJob, schedule
from tests.scheduling.test_engine import cluster_of

DEPARTMENTS = [Department("a", guaranteed=36), Department("b", guaranteed=0)]


def borrowed_rack(started: tuple[float, float] = (0.0, 0.0)):
    """One rack of two 9-tray partitions, each filled by one of b's borrowed 36-GPU jobs (10, 11)."""
    c = cluster_of({"r1": [9, 9]})
    c.allocate(10, [(t, 4) for t in range(0, 9)])
    c.allocate(11, [(t, 4) for t in range(9, 18)])
    running = [
        RunningJob(10, "b", 36, started_at=started[0], expected_end=90_000, over_quota=True),
        RunningJob(11, "b", 36, started_at=started[1], expected_end=90_000, over_quota=True),
    ]
    return c, running


def run(cluster, running, pending, now, **options):
    return schedule(cluster, list(DEPARTMENTS), list(running), list(pending), now, **options)


def test_without_bounds_an_in_quota_job_reclaims_at_once():
    c, running = borrowed_rack(started=(900.0, 950.0))
    result = run(c, running, [PendingJob(1, "a", 4, ANY, submitted_at=1000.0)], now=1000.0)
    assert result.preempted == {11: 1}  # the most recent borrower
    assert result.may_preempt_at == {}
    # Even a job submitted after the pass read its clock (a submission racing the pass).
    c, running = borrowed_rack(started=(900.0, 950.0))
    result = run(c, running, [PendingJob(1, "a", 4, ANY, submitted_at=1000.5)], now=1000.0)
    assert result.preempted == {11: 1} and result.may_preempt_at == {}


def test_a_borrower_inside_its_minimum_run_time_is_not_reclaimed_and_the_reason_says_when():
    c, running = borrowed_rack(started=(900.0, 950.0))
    job = PendingJob(1, "a", 4, ANY, submitted_at=1000.0)
    result = run(c, running, [job], now=1000.0, min_runtime_s={"train": 600.0})
    assert result.started == [] and result.preempted == {}
    assert result.may_preempt_at == {1: 1500.0}  # job 10 ends its 10 minutes first
    assert result.waiting[1].endswith(
        "; borrowed work could make room, but that work has not run its minimum run time yet: it may "
        "preempt in about 8 min"
    )
    # Once it has: the oldest borrower, the only one past its minimum, is the one preempted.
    c, running = borrowed_rack(started=(900.0, 950.0))
    result = run(c, running, [job], now=1520.0, min_runtime_s={"train": 600.0})
    assert result.preempted == {10: 1}
    assert 11 in c.jobs


def test_a_minimum_run_time_of_another_class_changes_nothing():
    c, running = borrowed_rack(started=(900.0, 950.0))
    result = run(
        c,
        running,
        [PendingJob(1, "a", 4, ANY, submitted_at=1000.0)],
        now=1000.0,
        min_runtime_s={"build": 6e4},
    )
    assert result.preempted == {11: 1}


def test_an_in_quota_job_preempts_only_after_its_grace():
    c, running = borrowed_rack()
    job = PendingJob(1, "a", 4, ANY, submitted_at=1000.0)
    result = run(c, running, [job], now=1100.0, preempt_after_s=600.0)
    assert result.started == [] and result.preempted == {}
    assert result.may_preempt_at == {1: 1600.0}
    assert result.waiting[1].endswith(
        "; borrowed work could make room, but a job preempts only after waiting about 10 min (the preemption "
        "grace): it may preempt in about 8 min"
    )
    c, running = borrowed_rack()
    result = run(c, running, [job], now=1600.0, preempt_after_s=600.0)
    assert result.preempted == {11: 1} and result.started[0].job_id == 1


def test_the_grace_never_holds_back_a_job_that_fits_without_preempting():
    c, running = borrowed_rack()
    c.release(11)
    result = run(
        c, running[:1], [PendingJob(1, "a", 4, ANY, submitted_at=1000.0)], 1000.0, preempt_after_s=600
    )
    assert result.started[0].job_id == 1 and result.preempted == {}
    assert result.may_preempt_at == {}


def test_no_promise_of_preempting_when_nothing_borrowed_could_make_room():
    c, _ = borrowed_rack()
    in_quota = [
        RunningJob(10, "a", 36, started_at=0, expected_end=90_000, over_quota=False),
        RunningJob(11, "b", 36, started_at=0, expected_end=90_000, over_quota=False),
    ]
    departments = [Department("a", guaranteed=40), Department("b", guaranteed=36)]
    result = schedule(
        c,
        departments,
        in_quota,
        [PendingJob(1, "a", 4, ANY, submitted_at=1000.0)],
        1000.0,
        preempt_after_s=600,
    )
    assert result.may_preempt_at == {}
    assert "preempt" not in result.waiting[1]


@settings(max_examples=80, deadline=None)
@given(
    starts=st.tuples(st.floats(0, 5000), st.floats(0, 5000)),
    min_runtime=st.floats(0, 4000),
    now=st.floats(5000, 9000),
)
def test_no_job_younger_than_its_minimum_run_time_is_ever_preempted(starts, min_runtime, now):
    c, running = borrowed_rack(started=starts)
    result = run(
        c,
        running,
        [PendingJob(1, "a", 36, ANY, submitted_at=now)],
        now=now,
        min_runtime_s={"train": min_runtime},
    )
    for victim in result.preempted:
        started = starts[victim - 10]
        assert now - started >= min_runtime
    old_enough = [j for j in running if now - j.started_at >= min_runtime]
    assert bool(result.preempted) == bool(old_enough)  # one 36-GPU borrower makes room: taken if allowed
