"""Two replicas, one truth: two gunicorn replicas, two Celery workers and one beat on one PostgreSQL and one
Redis; concurrent submissions (some sent to both replicas at once with one Idempotency-Key), cancels sent
to both replicas at once, and partition plan applies sent to both replicas at once. Afterwards: each effect
on the outside world happened once (jobs handed to the backend once, pushes applied once), passes ran one
at a time, no GPU or tray allocated twice.

The job backend is the embedded rendered backend (no Slurm or Kubernetes target: each dispatched job is
written as the exact request a backend would get, RACKPLANE_RENDER_DIR/jobs); the pushes go to a directory
target (a versioned directory per push).
"""

from __future__ import annotations

import random
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.stack.checks import (
    PassSampler,
    allocation_problems,
    dispatch_counts,
    overlapping,
    push_versions,
    rendered_job_files,
    wait_drained,
)
from tests.stack.harness import api, job_body

pytestmark = [
    pytest.mark.slow(reason="the production stack: gunicorn, Celery, PostgreSQL and Redis processes"),
    pytest.mark.integration,
]

CLIENTS = 6
PER_CLIENT = 6
SIZES = (1, 2, 4, 4, 8, 16)


def both_at_once(calls):
    """Run the callables at the same moment (a barrier), each in its own thread; their results."""
    gate = threading.Barrier(len(calls))

    def run(call):
        gate.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


def test_two_replicas_two_workers_one_beat_do_each_thing_once(stack, services, seeded):
    replicas = [stack.web("web-a"), stack.web("web-b")]
    stack.worker("worker-1")
    stack.worker("worker-2")
    stack.beat()
    run = uuid.uuid4().hex[:6]
    tokens = seeded["tokens"]
    first_push = services.sql("SELECT coalesce(max(id), 0) FROM scheduling_configpush")[0][0]
    sampler = PassSampler(services)
    sampler.start()

    answers: list[tuple[str, int, int | None]] = []  # (what, status, job id)
    cancels: list[tuple[int, list[int]]] = []
    lock = threading.Lock()

    def client(number: int) -> None:
        rng = random.Random(number)
        department = seeded["departments"][number % 2]
        for index in range(PER_CLIENT):
            name = f"stack-{run}-{number}-{index}"
            body = job_body(department, name, gpus=rng.choice(SIZES))
            url = replicas[(number + index) % 2]
            if index % 3 == 0:  # the same keyed submission to both replicas at once
                key = f"{name}-key"
                got = both_at_once(
                    [
                        lambda u=u, body=body, key=key: api(
                            u, tokens[department], "POST", "/api/v1/jobs/", body, key
                        )
                        for u in replicas
                    ]
                )
            else:
                got = [api(url, tokens[department], "POST", "/api/v1/jobs/", body)]
            ids = {r.json().get("id") for r in got if r.status_code in (200, 201)}
            with lock:
                answers.extend((name, r.status_code, r.json().get("id")) for r in got)
            if index % 3 == 1 and ids:  # cancelled through both replicas at once
                job_id = ids.pop()
                statuses = both_at_once(
                    [
                        lambda u=u, path=f"/api/v1/jobs/{job_id}/cancel/": (
                            api(u, tokens[department], "POST", path).status_code
                        )
                        for u in replicas
                    ]
                )
                with lock:
                    cancels.append((job_id, statuses))

    plans: list[tuple[str, int]] = []
    refusals: list[str] = []  # the answers' words, for a failure's message

    def plan(rack: str, preset: str) -> None:
        body = {"rack": rack, "layout": {"preset": preset}}
        got = both_at_once(
            [lambda u=u: api(u, tokens["admin"], "POST", "/api/v1/partition-plans/", body) for u in replicas]
        )
        with lock:
            plans.extend((rack, r.status_code) for r in got)
            refusals.extend(f"{rack}: {r.text[:300]}" for r in got if r.status_code != 201)

    with ThreadPoolExecutor(CLIENTS + 2) as pool:
        # The plans are answered before the clients start: a job the pass placed on a planned rack first would
        # make its plan refuse (trays running work), and whether one did depended on the machine's load. The
        # plans' pushes and follow-ups still run while the clients submit, cancel and the passes start work.
        plans_sent = [
            pool.submit(plan, seeded["racks"][2], "2x9"),
            pool.submit(plan, seeded["racks"][3], "3x6"),
        ]
        for future in plans_sent:
            future.result()
        futures = [pool.submit(client, n) for n in range(CLIENTS)]
        for future in futures:
            future.result()

    wait_drained(services)
    passes = sampler.stop()

    # Every answer was an answer, never a server error.
    assert all(status in (200, 201) for _, status, _ in answers), answers
    # A cancel sent to both replicas at once: one cancels, the other is told the job is already cancelled.
    assert cancels and all(
        statuses.count(200) == 1 and set(statuses) <= {200, 400, 409} for _, statuses in cancels
    ), cancels
    assert {status for _, status in plans} <= {201, 400, 409}, plans
    # The same plan sent to both replicas at once applied at most once per rack, and some plan applied.
    for rack in seeded["racks"][2:4]:
        assert [status for r, status in plans if r == rack].count(201) <= 1, plans
    assert any(status == 201 for _, status in plans), (plans, refusals)

    # One job per submission: a keyed submission sent to both replicas made one job.
    by_name: dict[str, set[int]] = {}
    for name, _, job_id in answers:
        by_name.setdefault(name, set()).add(job_id)
    assert all(len(ids) == 1 for ids in by_name.values()), by_name
    names = list(by_name)
    rows = services.sql(
        "SELECT name, count(*) FROM scheduling_job WHERE name = ANY(%s) GROUP BY name", (names,)
    )
    assert len(rows) == len(names) == CLIENTS * PER_CLIENT and all(n == 1 for _, n in rows), rows
    job_ids = [next(iter(ids)) for ids in by_name.values()]

    # Cancelled once, through whichever replica came first.
    for job_id, _ in cancels:
        state, events = services.sql(
            "SELECT j.state, (SELECT count(*) FROM scheduling_jobevent e"
            " WHERE e.job_id = j.id AND e.kind = 'cancelled')"
            " FROM scheduling_job j WHERE j.id = %s",
            (job_id,),
        )[0]
        assert (state, events) == ("cancelled", 1), (job_id, state, events)

    # Handed to the backend once: one 'dispatched' event per started job, one rendered request per running
    # job.
    counts = dispatch_counts(services, job_ids)
    assert max(counts.values()) <= 1, counts
    running = [
        i
        for (i,) in services.sql(
            "SELECT id FROM scheduling_job WHERE id = ANY(%s) AND state = 'running'", (job_ids,)
        )
    ]
    assert running, "no job was placed and started"
    assert all(counts[i] == 1 and len(rendered_job_files(seeded["render_dir"], i)) == 1 for i in running)

    # No GPU or tray held twice, and the allocations match the jobs.
    assert allocation_problems(services) == dict.fromkeys(allocation_problems(services), 0)

    # Passes ran one at a time.
    assert len(passes) >= 2, passes
    assert not overlapping(passes), overlapping(passes)

    # Pushes: each one that succeeded ran once and wrote one version; none is left failed.
    pushes = services.sql(
        "SELECT id, status, attempts, log FROM scheduling_configpush WHERE id > %s ORDER BY id",
        (first_push,),
    )
    assert pushes, "no plan queued a push"
    assert {status for _, status, _, _ in pushes} <= {"succeeded", "superseded"}, pushes
    for push_id, status, attempts, log in pushes:
        if status == "succeeded":
            assert attempts == 1 and log.count("wrote ") == 1, (push_id, attempts, log)
            assert len(push_versions(push_id, seeded["target_dir"], seeded["render_dir"])) == 1, (
                push_id,
                log,
            )
