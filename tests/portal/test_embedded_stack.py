"""`make run`'s embedded stack does the production machinery's work: scripts/run.sh, run in a fresh clone,
starts the web server, a real Celery worker and a real beat on the filesystem broker. With no request at all
the beat's scheduling pass runs and a quota snapshot is written; a job submitted through the API is placed and
dispatched by the worker with no further request; SIGINT (Ctrl-C) stops every process it started.

The state is read from the clone's SQLite file directly, not through the portal, so that nothing but the
stack itself acts.
"""

import json
import os
import re
import signal
import time
import urllib.request

import pytest
from django.conf import settings

from tests.embedded_stack import parse_time, processes_in, wait_for

pytestmark = pytest.mark.slow(reason="a clone, migrate + seed, three long-running processes")


@pytest.fixture
def stack(embedded_stack):
    return embedded_stack


def test_the_beat_runs_a_scheduling_pass_and_a_quota_snapshot_by_itself(stack):
    wait_for(
        "a scheduling pass",
        lambda: stack.query(
            "SELECT last_pass_at FROM scheduling_schedulerstate WHERE last_pass_at IS NOT NULL"
        ),
        timeout=60,
    )

    def snapshot_of_this_stack():
        # Not "in the last 2 minutes": the beat snapshots at its start, then every 5 minutes, and this test
        # may run minutes after the session's stack started (it once ran 2 min 8 s after the snapshot, and
        # failed). A snapshot is taken at its minute (scheduling.tasks.record_quota_snapshots); the stack's
        # start deleted the seed's last hour of them, so one from the start's minute on is the beat's.
        (latest,) = stack.query("SELECT max(taken_at) FROM tenancy_quotasnapshot")[0]
        return latest and parse_time(latest) >= stack.started.replace(second=0, microsecond=0)

    wait_for("a quota snapshot taken since the stack started", snapshot_of_this_stack, timeout=60)


def test_every_beat_entry_is_sent_by_the_beat_and_executed_by_the_worker(stack):
    tasks = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}

    def succeeded(task: str) -> bool:
        return re.search(rf"Task {re.escape(task)}\[[-0-9a-f]+\] succeeded", stack.log("celery-worker.log"))

    wait_for("every beat task run by the worker", lambda: all(succeeded(task) for task in tasks), timeout=60)
    beat_log, worker_log = stack.log("celery-beat.log"), stack.log("celery-worker.log")
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        assert f"Sending due task {name} ({entry['task']})" in beat_log
    assert " raised " not in worker_log, worker_log


def test_a_job_submitted_through_the_api_is_placed_and_started_by_the_worker(stack):
    token = stack.token("alice")
    request = urllib.request.Request(
        f"http://{stack.address}/api/v1/jobs/",
        method="POST",
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        data=json.dumps(
            {
                "department": "research",
                "name": "embedded-stack-check",
                "gpus": 1,
                "priority_class": "train",
                "backend": "slurm",
                "time_limit_minutes": 30,
                "work": {"script": "#!/bin/bash\nsrun hostname\n"},
            }
        ).encode(),
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 201
        job = json.load(response)
    # No other request from here on: the worker runs the pass the submission enqueued, then the dispatch.
    wait_for(
        "the job running",
        lambda: stack.query("SELECT 1 FROM scheduling_job WHERE id = ? AND state = 'running'", job["id"]),
        timeout=60,
    )
    assert stack.query("SELECT count(*) FROM scheduling_allocation WHERE job_id = ?", job["id"]) == [(1,)]


def test_sigint_stops_the_server_the_worker_and_the_beat(stack):
    assert len(processes_in(stack.clone)) >= 4, processes_in(
        stack.clone
    )  # run.sh, server (+ reloader), worker, beat
    stopping = time.monotonic()
    # Ctrl-C reaches run.sh (the terminal's foreground process group), and `make run` forwards a SIGTERM
    # right behind it: the second signal must not cut the stopping short.
    os.kill(stack.run.pid, signal.SIGINT)
    os.kill(stack.run.pid, signal.SIGTERM)
    assert stack.run.wait(timeout=30) != 0
    print(f"stopped in {time.monotonic() - stopping:.1f} s")
    wait_for("no process left", lambda: not processes_in(stack.clone), timeout=5)
    output = stack.output.read_text()
    assert "logs in var/log/celery-worker.log and var/log/celery-beat.log" in output
    assert "stopping the server, the worker and the beat" in output
