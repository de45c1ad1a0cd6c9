"""The standing order a pass keeps for the next one (scheduling.engine.scheduler: `PassResult.standing`,
`schedule(standing=...)`): a pass whose sort starts from the last pass's order, after any change to the
running jobs (jobs gone, started, moved in time or standing, a guarantee changed), decides exactly what a
pass that sorts them fresh decides (issue 32: at 10,000 racks the 47,700 running jobs were sorted from
scratch twice a pass)."""

import copy
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine.scheduler import Department, PendingJob, RunningJob, schedule
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
        [job.id for job in result.standing],
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
    kept = [job.id for job in first.standing]
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
                by_id[job.id] = RunningJob(**{**vars(job), "started_at": float(rng.randint(1, 900))})
            else:
                by_id[job.id] = RunningJob(**{**vars(job), "over_quota": not job.over_quota})
    if rng.random() < 0.3:
        departments = [Department(d.name, guaranteed=rng.choice([0, 8, 64])) for d in departments]
    now_running = list(by_id.values())
    rng.shuffle(now_running)
    hints = [kept, rng.sample(kept, len(kept)), [*kept, 999_999_999], []]
    fresh = _decisions(schedule(copy.deepcopy(cluster), departments, now_running, pending, 2000.0))
    for hint in hints:
        assert (
            _decisions(
                schedule(copy.deepcopy(cluster), departments, now_running, pending, 2000.0, standing=hint)
            )
            == fresh
        )
