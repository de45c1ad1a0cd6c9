"""The standing order a pass keeps for the next one (scheduling.engine.standing.StandingOrder,
`PassResult.standing`, `schedule(standing=...)`): a pass that starts from the last pass's order, after any
change to the running jobs (jobs gone, started, moved in time or standing, a guarantee changed), decides
exactly what a pass that sorts them fresh decides, and an order made from another one is the one sorted whole
(issue 32: at 10,000 racks the 47,700 running jobs were sorted from scratch twice a pass)."""

import copy
import dataclasses
import random
from unittest import mock

from hypothesis import example, given, settings
from hypothesis import strategies as st

from scheduling.engine import standing
from scheduling.engine.scheduler import Department, PendingJob, Project, RunningJob, schedule
from scheduling.engine.standing import StandingOrder
from tests.scheduling.test_engine import cluster_of

RACKS = 4  # 18 trays each, one partition per rack


def _running(rng: random.Random, count: int) -> tuple[object, list[RunningJob]]:
    """A cluster with `count` running jobs (1 to 4 GPUs on one tray each), some sharing a start time."""
    cluster = cluster_of({f"r{n}": [18] for n in range(RACKS)})
    jobs = []
    for job_id in range(1, count + 1):
        t = rng.randrange(len(cluster.tray_host))
        free = cluster.tray_free[t]
        if free == 0:
            continue
        gpus = rng.randint(1, free)
        cluster.allocate(job_id, [(t, gpus)])
        jobs.append(
            RunningJob(
                job_id,
                rng.choice("abc"),
                gpus,
                started_at=float(rng.choice([10, 20, 20, 30, rng.randint(1, 500)])),
                expected_end=9000.0,
                over_quota=rng.random() < 0.4,
                priority_class=rng.choice(["train", "train", "build", "serve"]),
            )
        )
    return cluster, jobs


def _decisions(result) -> tuple:
    return (
        [(s.job_id, s.placement, s.over_quota, s.why) for s in result.started],
        result.preempted,
        result.waiting,
        result.over_quota,
        result.in_quota_share,
        result.reservations,
        result.queue,
        [job.id for job in result.standing.in_order()],
    )


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), count=st.integers(0, 120), changes=st.integers(0, 40))
def test_a_kept_standing_order_decides_what_a_fresh_sort_decides(seed, count, changes):
    rng = random.Random(seed)
    cluster, running = _running(rng, count)
    departments = [Department(name, guaranteed=rng.choice([0, 16, 48, 96])) for name in "abc"]
    pending = [
        PendingJob(1000 + n, rng.choice("abc"), rng.choice([1, 2, 4, 8, 36]), submitted_at=float(n))
        for n in range(rng.randint(0, 12))
    ]
    first = schedule(copy.deepcopy(cluster), departments, running, pending, 1000.0)
    kept = first.standing
    # Changes since: jobs end, new ones start, a start time or a standing is rewritten, guarantees move.
    by_id = {job.id: job for job in running}
    for _ in range(changes):
        kind = rng.choice(["end", "start", "moved", "standing"])
        if kind == "end" and by_id:
            job_id = rng.choice(sorted(by_id))
            del by_id[job_id]
            cluster.release(job_id)
        elif kind == "start":
            t = rng.randrange(len(cluster.tray_host))
            if cluster.tray_free[t]:
                job_id = 5000 + len(by_id) + rng.randrange(10**6)
                if job_id not in by_id:
                    cluster.allocate(job_id, [(t, 1)])
                    by_id[job_id] = RunningJob(
                        job_id, rng.choice("abc"), 1, float(rng.randint(1, 900)), 9000.0
                    )
        elif by_id:
            job = by_id[rng.choice(sorted(by_id))]
            if kind == "moved":
                by_id[job.id] = dataclasses.replace(job, started_at=float(rng.randint(1, 900)))
            else:
                by_id[job.id] = dataclasses.replace(job, over_quota=not job.over_quota)
    if rng.random() < 0.3:
        departments = [Department(d.name, guaranteed=rng.choice([0, 8, 64])) for d in departments]
    now_running = list(by_id.values())
    rng.shuffle(now_running)
    # The last pass's order; one of the jobs before the changes; one of equal jobs that are other objects
    # (every one changed: sorted whole); one of other jobs altogether; none.
    hints = [
        kept,
        StandingOrder.of({job.id: job for job in running}),
        StandingOrder.of({job.id: dataclasses.replace(job) for job in now_running}),
        StandingOrder.of({job.id + 10**9: dataclasses.replace(job, id=job.id + 10**9) for job in running}),
        None,
    ]
    fresh = _decisions(schedule(copy.deepcopy(cluster), departments, now_running, pending, 2000.0))
    for hint in hints:
        assert (
            _decisions(
                schedule(copy.deepcopy(cluster), departments, now_running, pending, 2000.0, standing=hint)
            )
            == fresh
        )


def _lists(order: StandingOrder) -> dict:
    return {name: (list(keys), [id(job) for job in jobs]) for name, (keys, jobs) in order.lists.items()}


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**6), count=st.integers(0, 200), changes=st.integers(0, 60))
def test_an_order_made_from_another_is_the_one_sorted_whole_and_the_other_is_unchanged(seed, count, changes):
    rng = random.Random(seed)
    _cluster, jobs = _running(rng, count)
    running = {job.id: job for job in jobs}
    order = StandingOrder.of(running)
    before = _lists(order)
    for _ in range(changes):  # ends, starts, new standings, start times, departments and classes
        kind = rng.choice(["end", "start", "replace"])
        if kind == "end" and running:
            del running[rng.choice(sorted(running))]
        elif kind == "start":
            job_id = 10_000 + rng.randrange(10**6)
            running[job_id] = RunningJob(job_id, rng.choice("abcd"), 1, float(rng.randint(1, 40)), 9000.0)
        elif running:
            job = running[rng.choice(sorted(running))]
            running[job.id] = dataclasses.replace(
                job,
                **rng.choice(
                    [
                        {"over_quota": not job.over_quota},
                        {"started_at": float(rng.randint(1, 40))},
                        {"department": rng.choice("abcd")},
                        {"priority_class": rng.choice(["train", "serve", "build"])},
                        {},  # an equal job, another object
                    ]
                ),
            )
    made = order.updated(running)
    assert _lists(made) == _lists(StandingOrder.of(running))
    assert made.jobs == running and made.jobs is not running
    assert _lists(order) == before  # never changed: the pass's second look and the next pass start from it
    # Told which jobs moved (a pass's later looks), it looks at those only and makes the same order; the
    # moved ids may name jobs that did not move, or that came and went.
    moved = {
        job_id
        for job_id in running.keys() | order.jobs.keys()
        if running.get(job_id) is not order.jobs.get(job_id)
    }
    extra = set(rng.sample(sorted(running.keys() | {10**8}), min(3, len(running) + 1)))
    told = order.updated(running, moved | extra)
    assert _lists(told) == _lists(StandingOrder.of(running))
    assert told.jobs == running
    assert _lists(order) == before
    if not moved:
        assert order.updated(running, extra) is order


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10**6), count=st.integers(0, 120), projects=st.booleans())
@example(seed=17, count=120, projects=False)  # seven borrowers preempted, five jobs started
def test_the_standing_changes_are_the_running_jobs_whose_standing_the_pass_changed(seed, count, projects):
    """`PassResult.standing_changes` (what the portal writes and the simulator keeps) is `over_quota` less
    the jobs whose standing stayed as given and the ones the pass started, with projects or without."""
    rng = random.Random(seed)
    cluster, running = _running(rng, count)
    if projects:
        running = [dataclasses.replace(job, project=rng.choice(["p", "q", None])) for job in running]
    departments = [
        Department(
            name,
            guaranteed=(guaranteed := rng.choice([0, 16, 48, 96])),
            projects=(Project("p", guaranteed // 2), Project("q", guaranteed // 4)) if projects else (),
        )
        for name in "abc"
    ]
    pending = [
        PendingJob(1000 + n, rng.choice("abcd"), rng.choice([1, 2, 4, 8, 36]), submitted_at=float(n))
        for n in range(rng.randint(0, 12))
    ]
    given_standing = {job.id: job.over_quota for job in running}
    # Every look moves the jobs one by one (a few jobs among many, as at 10,000 racks), never sorts whole.
    with mock.patch.object(standing, "RESORT_SHARE", 1.0):
        result = schedule(cluster, departments, running, pending, 1000.0)
    started = {start.job_id for start in result.started}
    assert result.standing_changes == {
        job_id: over
        for job_id, over in result.over_quota.items()
        if job_id in given_standing and job_id not in started and over != given_standing[job_id]
    }
    assert set(result.over_quota) == (given_standing.keys() - result.preempted.keys()) | started
    if not projects:  # the order the next pass starts from: every job running after it, as it stands
        assert {job_id: job.over_quota for job_id, job in result.standing.jobs.items()} == result.over_quota
        assert _lists(result.standing) == _lists(StandingOrder.of(result.standing.jobs))


def test_a_few_changes_move_only_their_jobs_and_the_untouched_departments_lists_are_shared():
    jobs = {
        n: RunningJob(n, "ab"[n % 2], 1, float(n), 9000.0, priority_class=["train", "serve"][n % 3 == 0])
        for n in range(1, 41)
    }
    order = StandingOrder.of(jobs)
    running = dict(jobs)
    del running[2]  # department a
    running[3] = dataclasses.replace(jobs[3], started_at=100.0, over_quota=True)  # department b
    running[99] = RunningJob(99, "b", 4, 0.5, 9000.0)
    made = order.updated(running)
    assert _lists(made) == _lists(StandingOrder.of(running))
    only_a = dict(running)
    only_a[4] = dataclasses.replace(jobs[4], over_quota=True)  # a again: b untouched
    again = made.updated(only_a)
    assert again.lists["b"] is made.lists["b"] and again.lists["a"] is not made.lists["a"]
    assert _lists(again) == _lists(StandingOrder.of(only_a))
