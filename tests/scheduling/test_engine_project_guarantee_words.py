"""A non-preemptible job of a department shared among projects waits for its own project's share, and its
reason says so (scheduling.engine.scheduler, Projects): it once named the department's guarantee and the
department's GPUs ("build jobs run only within the department's guarantee (84 GPUs); it holds 75 and this job
needs 2"), which read as if the job fitted, while the default project's share, what the named projects'
guarantees leave, was what held it back (found by a walkthrough after a department's first project)."""

from django.utils import translation

from scheduling.engine.placement import ANY
from scheduling.engine.scheduler import Department, PendingJob, Project, RunningJob, schedule
from scheduling.words import translate
from tests.scheduling.test_engine import cluster_of


def shared_department():
    """Department a (guaranteed 84, its project chat 40 of it) runs 73 GPUs of inference without a named
    project (the default project's work) and 2 GPUs of build in chat; b is guaranteed nothing."""
    c = cluster_of({"r1": [9, 9], "r2": [9, 9]})
    trays = iter(range(36))
    running = []
    for job_id, gpus in ((10, 36), (11, 36)):
        c.allocate(job_id, [(next(trays), 4) for _ in range(gpus // 4)])
        running.append(
            RunningJob(job_id, "a", gpus, started_at=0, expected_end=90_000, priority_class="inference")
        )
    c.allocate(12, [(next(trays), 1)])
    running.append(RunningJob(12, "a", 1, started_at=0, expected_end=90_000, priority_class="inference"))
    c.allocate(13, [(next(trays), 2)])
    running.append(
        RunningJob(13, "a", 2, started_at=0, expected_end=90_000, priority_class="build", project="chat")
    )
    departments = [
        Department("a", guaranteed=84, projects=(Project("chat", guaranteed=40),)),
        Department("b", guaranteed=0),
    ]
    return c, running, departments


def test_the_default_projects_build_job_names_the_share_that_holds_it_back():
    c, running, departments = shared_department()
    build = PendingJob(1, "a", 2, ANY, priority_class="build", submitted_at=1000)
    result = schedule(c, departments, running, [build], 1000.0)
    assert result.started == []
    assert result.waiting[1] == (
        "waiting: build jobs run only within their project's guarantee (the default project: 44 GPUs, what "
        "the named projects' guarantees leave of the department's 84); it holds 73 and this job needs 2"
    )
    with translation.override("ja"):
        japanese = translate(result.waiting[1])
    assert "既定のプロジェクト: 44 基の GPU" in japanese and "73" in japanese


def test_a_named_projects_build_job_names_its_project_and_fits_within_it():
    c, running, departments = shared_department()
    inside = PendingJob(1, "a", 4, ANY, priority_class="build", submitted_at=1000, project="chat")
    beyond = PendingJob(2, "a", 40, ANY, priority_class="build", submitted_at=1000, project="chat")
    result = schedule(c, departments, running, [inside, beyond], 1000.0)
    assert [s.job_id for s in result.started] == [1]
    assert result.waiting[2] == (
        "waiting: build jobs run only within their project's guarantee (project a-chat: 40 GPUs); it holds 6 "
        "and this job needs 40"
    )


def test_a_department_without_projects_still_names_its_own_guarantee():
    c, running, departments = shared_department()
    departments[0] = Department("a", guaranteed=84)
    running[-1] = RunningJob(13, "a", 2, started_at=0, expected_end=90_000, priority_class="build")
    build = PendingJob(1, "a", 10, ANY, priority_class="build", submitted_at=1000)
    result = schedule(c, departments, running, [build], 1000.0)
    assert result.waiting[1] == (
        "waiting: build jobs run only within the department's guarantee (84 GPUs); it holds 75 and this job "
        "needs 10"
    )


def test_when_the_schedulable_gpus_fall_short_the_reason_names_the_smaller_in_quota_share():
    """Guarantees above what can be scheduled are scaled down (tenancy.quota.fair_share): the project is held
    to its in-quota share, and its reason names that figure, not a guarantee it cannot have now."""
    c, running, departments = shared_department()
    departments[1] = Department("b", guaranteed=200)  # 284 guaranteed on a 144-GPU cluster, b asking 144
    build = PendingJob(1, "a", 2, ANY, priority_class="build", submitted_at=1000)
    wide = PendingJob(2, "b", 144, ANY, submitted_at=900)
    result = schedule(c, departments, running, [build, wide], 1000.0)
    reason = result.waiting[1]
    assert (
        reason.startswith(
            "waiting: build jobs run only within their project's in-quota share (the default project: "
        )
        and "GPUs now, less than its guarantee while the schedulable GPUs fall short of the guarantees)"
        in reason
    )
