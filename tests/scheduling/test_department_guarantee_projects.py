"""A department's guarantee holds for its work whatever its projects (scheduling.engine.scheduler, Projects):
towards other departments the department is judged against its own guarantee; inside it, a project (or the
work without a project) beyond its own share borrows only from its siblings, and only they reclaim it.
"""

from __future__ import annotations

from scheduling.engine.cluster import Cluster, TraySpec
from scheduling.engine.placement import ANY, Request, place
from scheduling.engine.scheduler import Department, PendingJob, Project, RunningJob, schedule

A = Department("a", 16, projects=(Project("p", 8),))
B = Department("b", 16)
PLAIN_A = Department("a", 16)


def cluster(trays: int) -> Cluster:
    return Cluster([TraySpec(f"r1-c{n:02d}", "r1", "p1") for n in range(1, trays + 1)])


def running_on(c: Cluster, job_id: int, department: str, gpus: int, started: float, project=None, over=False):
    c.allocate(job_id, place(c, Request(gpus, ANY, department)))
    return RunningJob(job_id, department, gpus, started, started + 10_000, over_quota=over, project=project)


def full_cluster():
    """8 trays (32 GPUs): a's no-project work holds 16 (four jobs), b's borrowing work the other 16."""
    c = cluster(8)
    running = [running_on(c, i, "a", 4, float(i)) for i in range(1, 5)]
    running += [running_on(c, i, "b", 4, float(i), over=True) for i in range(11, 15)]
    return c, running


def test_work_without_a_project_within_the_departments_guarantee_is_in_quota_and_kept():
    c, running = full_cluster()
    # b's new job is in quota (b's guarantee is 16 and its running work is flagged borrowed, so it counts
    # its 16 as its own again only after the pass): it must not preempt a's jobs, within a's 16.
    pending = [PendingJob(20, "b", 4, ANY, submitted_at=50.0)]
    result = schedule(c, [A, B], running, pending, 100.0)
    assert not result.preempted
    assert not result.started
    for job_id in (1, 2, 3, 4):
        assert result.over_quota[job_id] is False  # in quota for the department: 16 of its 16
    # Inside a, the no-project work's own share is 16 - 8 = 8: its two newest jobs borrow p's unused 8.
    assert result.sibling_borrowed == {3, 4}


def test_the_department_figures_are_the_same_with_or_without_a_project():
    c, running = full_cluster()
    with_project = schedule(c, [A, B], running, [], 100.0).over_quota
    c, running = full_cluster()
    without = schedule(c, [PLAIN_A, B], running, [], 100.0).over_quota
    assert with_project == without
    assert sum(4 for j in (1, 2, 3, 4) if with_project[j]) == 0  # 16 in quota, 0 borrowed


def test_another_departments_in_quota_job_reclaims_only_what_the_department_holds_beyond_its_guarantee():
    c = cluster(8)
    # a holds 20 (five no-project jobs): 4 beyond its 16. b holds 12, all in quota.
    running = [running_on(c, i, "a", 4, float(i)) for i in range(1, 6)]
    running += [running_on(c, i, "b", 4, float(i)) for i in range(11, 14)]
    result = schedule(c, [A, B], running, [PendingJob(20, "b", 4, ANY, submitted_at=50.0)], 100.0)
    assert [s.job_id for s in result.started] == [20]
    assert set(result.preempted) == {5}  # a's newest: the one beyond its department's guarantee
    assert all(result.over_quota[j] is False for j in (1, 2, 3, 4))


def test_a_projects_in_quota_job_reclaims_from_the_work_without_a_project():
    c, running = full_cluster()
    pending = [PendingJob(30, "a", 8, ANY, project="p", submitted_at=50.0)]
    result = schedule(c, [A, B], running, pending, 100.0)
    [start] = result.started
    assert start.job_id == 30 and start.over_quota is False
    assert set(result.preempted) == {3, 4}  # the no-project work's borrowing of p's unused guarantee
    assert all(result.over_quota[j] is False for j in (1, 2, 30))
    assert not result.sibling_borrowed
    assert not any(v in result.preempted for v in range(11, 15))  # b's work is not p's to reclaim


def test_sibling_borrowed_work_is_not_reclaimed_by_another_department_even_on_a_free_choice():
    # a's no-project work borrows p's share (in quota for a); b is below its guarantee and asks in quota:
    # b's job may not take a's sibling-borrowed jobs (only b's free GPUs, none here).
    c = cluster(8)
    running = [running_on(c, i, "a", 4, float(i)) for i in range(1, 5)]
    running += [running_on(c, i, "b", 4, float(i)) for i in range(11, 14)]
    running.append(running_on(c, 15, "a", 4, 15.0, over=True))  # a's fifth: beyond its 16
    result = schedule(c, [A, B], running, [PendingJob(20, "b", 8, ANY, submitted_at=50.0)], 100.0)
    assert not result.started and not result.preempted  # only 4 of a's GPUs are beyond its guarantee
    assert result.over_quota[15] is True
