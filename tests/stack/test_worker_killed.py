"""A Celery worker SIGKILLed in the middle of a push and in the middle of a dispatch: another worker finishes
the work, once.

How Rackplane makes it true (integrations.tasks.push_lease, integrations.dispatch): a running push holds a
lease in its row that its worker renews; once the lease runs out the beat's retry_stale_pushes queues the push
again and another worker claims it (one conditional UPDATE). A dispatch holds the job's row lock in a
transaction around the backend call: a killed worker's transaction rolls back, the job is still STARTING, and
the beat's sync_jobs sends it again once RACKPLANE_DISPATCH_LOST_AFTER_SECONDS passed; the backend adopts a
job it already made under the run's name, so a request that reached it once is not made twice.

"In the middle": the push is frozen (SIGSTOP to the worker's process group) while its version directory is
half written, then killed; the dispatch blocks writing the job's request (the embedded backend's file is a
named pipe nobody reads: a backend that does not answer), then the worker is killed.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.stack.checks import allocation_problems, dispatch_counts, push_versions, rendered_job_files
from tests.stack.harness import api, job_body, wait_until

pytestmark = [
    pytest.mark.slow(reason="the production stack: gunicorn, Celery, PostgreSQL and Redis processes"),
    pytest.mark.integration,
]

FILES = 6000  # about 2 s of writing (one fsync per file): long enough to be caught half-way


def push_row(services, push_id):
    return services.sql("SELECT status, attempts, log FROM scheduling_configpush WHERE id = %s", (push_id,))[
        0
    ]


def test_worker_killed_mid_push_another_worker_finishes_it_once(stack, services, seeded):
    stack.beat()
    first = stack.worker("worker-1")
    target = Path(seeded["target_dir"])
    push_id = int(stack.django("-m", "tests.stack.seed", "push", str(FILES)).split()[-1])

    def half_written():
        staging = list((target / "versions").glob(f".*-push{push_id:06d}.partial"))
        return staging and push_row(services, push_id)[0] == "running" and any(staging[0].iterdir())

    wait_until("the push running, its version half written", half_written, 60, every=0.02)
    stack.kill(first, signal.SIGSTOP)  # frozen where it was
    partial = next((target / "versions").glob(f".*-push{push_id:06d}.partial"))
    written = sum(1 for _ in partial.rglob("*.conf"))
    assert 0 < written < FILES, written
    assert not push_versions(push_id, str(target))

    stack.worker("worker-2")
    stack.kill(first, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until("the push finished by worker-2", lambda: push_row(services, push_id)[0] == "succeeded", 90)
    _, attempts, log = push_row(services, push_id)
    took = time.monotonic() - killed_at

    assert attempts == 2, log
    assert "(worker lost?): requeued" in log and log.count("succeeded") == 1, log
    versions = push_versions(push_id, str(target))
    assert len(versions) == 1, versions
    assert sum(1 for _ in versions[0].rglob("*.conf")) == FILES
    assert (target / "current").resolve() == versions[0].resolve()
    print(f"push {push_id}: finished by the other worker {took:.1f}s after the kill")


def next_job_id(services) -> int:
    last, called = services.sql("SELECT last_value, is_called FROM scheduling_job_id_seq")[0]
    return last + 1 if called else last


def test_worker_killed_mid_dispatch_another_worker_finishes_it_once(stack, services, seeded):
    web = stack.web("web-a")
    stack.beat()
    first = stack.worker("worker-1", concurrency=2)  # the pass and the beat's tasks beside the blocked one
    jobs = Path(seeded["render_dir"]) / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    job_id = next_job_id(services)
    pipe = jobs / f"rp-{job_id}.ends.tmp"  # where the embedded backend writes first: it blocks there
    os.mkfifo(pipe)
    try:
        answer = api(
            web, seeded["tokens"]["alpha"], "POST", "/api/v1/jobs/", job_body("alpha", "stack-dispatch-kill")
        )
        assert answer.status_code == 201 and answer.json()["id"] == job_id, answer.text

        def state():
            return services.sql("SELECT state FROM scheduling_job WHERE id = %s", (job_id,))[0][0]

        try:
            wait_until("the job placed and being dispatched", lambda: state() == "starting", 120)
        except AssertionError as error:
            why = services.sql(
                "SELECT state, pending_reason, (SELECT count(*) FROM scheduling_schedulingrequest),"
                " (SELECT count(*) FROM scheduling_allocation) FROM scheduling_job WHERE id = %s",
                (job_id,),
            )
            raise AssertionError(f"{error}: job, pending reason, requests, allocations: {why}") from None
        time.sleep(2)  # worker-1 is inside dispatch(), blocked writing to the backend
        assert state() == "starting" and dispatch_counts(services, [job_id]) == {job_id: 0}

        stack.worker("worker-2")
        pipe.unlink()  # the backend answers again; worker-1 stays blocked on the pipe it opened
        stack.kill(first, signal.SIGKILL)
    finally:
        pipe.unlink(missing_ok=True)
    wait_until("the job handed to its backend by worker-2", lambda: state() == "running", 60)

    assert dispatch_counts(services, [job_id]) == {job_id: 1}
    assert len(rendered_job_files(seeded["render_dir"], job_id)) == 1
    assert allocation_problems(services) == dict.fromkeys(allocation_problems(services), 0)
