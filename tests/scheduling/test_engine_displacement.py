"""A department's own non-preemptible work (build, inference) within its guarantee displaces the department's
own borrowed training (scheduling.engine.scheduler, Standing and Reclaim): before, a 1-GPU build job waited
behind its department's borrowed jobs for as long as they ran."""

from scheduling.engine.placement import ANY
from scheduling.engine.scheduler import Department, PendingJob, RunningJob, schedule
from tests.scheduling.test_engine import cluster_of


def busy_rack():
    """One rack of two 9-tray partitions, all of it a's: 8 GPUs in quota (10, the oldest), 28 and 36 GPUs
    borrowed (11, then 12, the newest). a is guaranteed 8, b nothing."""
    c = cluster_of({"r1": [9, 9]})
    c.allocate(10, [(t, 4) for t in range(0, 2)])
    c.allocate(11, [(t, 4) for t in range(2, 9)])
    c.allocate(12, [(t, 4) for t in range(9, 18)])
    running = [
        RunningJob(10, "a", 8, started_at=0, expected_end=90_000, over_quota=False),
        RunningJob(11, "a", 28, started_at=100, expected_end=90_000, over_quota=True),
        RunningJob(12, "a", 36, started_at=200, expected_end=90_000, over_quota=True),
    ]
    return c, running, [Department("a", guaranteed=8), Department("b", guaranteed=0)]


def test_a_build_job_within_the_guarantee_preempts_its_departments_newest_borrowed_training():
    c, running, departments = busy_rack()
    build = PendingJob(1, "a", 1, ANY, priority_class="build", submitted_at=1000)
    result = schedule(c, departments, running, [build], 1000.0)
    assert [s.job_id for s in result.started] == [1] and not result.started[0].over_quota
    assert result.preempted == {12: 1}  # the newest borrower of its own; 11 keeps running
    assert 11 in c.jobs and 10 in c.jobs
    # Standing: the build job holds the share first, so the 8-GPU training no longer fits in it and borrows.
    assert result.over_quota == {10: True, 11: True, 1: False}


def test_training_over_its_quota_does_not_displace_its_own():
    c, running, departments = busy_rack()
    train = PendingJob(1, "a", 1, ANY, priority_class="train", submitted_at=1000)
    result = schedule(c, departments, running, [train], 1000.0)
    assert result.started == [] and result.preempted == {}


def test_a_build_job_beyond_the_guarantee_still_waits_with_the_reason():
    c, running, departments = busy_rack()
    build = PendingJob(1, "a", 12, ANY, priority_class="build", submitted_at=1000)
    result = schedule(c, departments, running, [build], 1000.0)
    assert result.started == [] and result.preempted == {}
    assert result.waiting[1] == (
        "waiting: build jobs run only within the department's guarantee (8 GPUs); it holds 72 and this job "
        "needs 12"
    )


def test_non_preemptible_work_already_running_counts_against_the_share():
    c, running, departments = busy_rack()
    c.release(10)
    c.allocate(10, [(0, 4), (1, 4)])
    running[0] = RunningJob(10, "a", 8, started_at=0, expected_end=90_000, priority_class="inference")
    build = PendingJob(1, "a", 1, ANY, priority_class="build", submitted_at=1000)
    result = schedule(c, departments, running, [build], 1000.0)  # 8 inference + 1 > 8: not in quota
    assert result.started == [] and result.preempted == {}


def test_a_displacing_job_takes_its_own_borrowed_training_before_other_departments():
    c = cluster_of({"r1": [9, 9]})
    c.allocate(11, [(t, 4) for t in range(0, 9)])
    c.allocate(20, [(t, 4) for t in range(9, 18)])
    running = [
        RunningJob(11, "a", 36, started_at=100, expected_end=90_000, over_quota=True),
        RunningJob(20, "b", 36, started_at=500, expected_end=90_000, over_quota=True),  # newer, b's
    ]
    departments = [Department("a", guaranteed=8), Department("b", guaranteed=0)]
    build = PendingJob(1, "a", 4, ANY, priority_class="build", submitted_at=1000)
    result = schedule(c, departments, running, [build], 1000.0)
    assert result.preempted == {11: 1} and 20 in c.jobs
