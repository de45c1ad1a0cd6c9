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
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.conf import settings

from tests.fresh_clone import free_port, make_clone, shell_env

pytestmark = pytest.mark.slow  # a clone, migrate + seed, three long-running processes


def wait_for(what: str, check, timeout: float, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


def processes_in(directory: Path) -> list[str]:
    """The processes whose working directory is `directory` (run.sh's server, worker and beat run there)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if Path(os.readlink(entry / "cwd")) == directory:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                found.append(f"{entry.name}: {command}")
        except OSError:  # gone meanwhile, or not ours to look at
            continue
    return found


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


class Stack:
    def __init__(self, clone: Path, address: str, run: subprocess.Popen, output: Path):
        self.clone, self.address, self.run, self.output = clone, address, run, output

    def query(self, sql: str, *params):
        with sqlite3.connect(self.clone / "var" / "rackplane.sqlite3", timeout=20) as database:
            return database.execute(sql, params).fetchall()

    def log(self, name: str) -> str:
        path = self.clone / "var" / "log" / name
        return path.read_text() if path.exists() else ""


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    clone = make_clone(tmp_path_factory.mktemp("embedded") / "rackplane")
    env = shell_env()
    prepared = subprocess.run(
        ["bash", "scripts/run.sh", "--prepare"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    # Forget what the seed did, so that whatever appears next is the stack's own work.
    with sqlite3.connect(clone / "var" / "rackplane.sqlite3") as database:
        database.execute("UPDATE scheduling_schedulerstate SET last_pass_at = NULL")
        database.execute(
            "DELETE FROM tenancy_quotasnapshot WHERE taken_at >= ?",
            [str(datetime.now(UTC) - timedelta(hours=1))],
        )

    address = f"127.0.0.1:{free_port()}"
    output = clone.parent / "run.out"
    started = time.monotonic()
    run = subprocess.Popen(
        ["bash", "scripts/run.sh"],
        cwd=clone,
        env={**env, "RACKPLANE_ADDR": address},
        stdout=output.open("w"),
        stderr=subprocess.STDOUT,
        # As from a terminal: SIGINT delivered (a shell started in the background would ignore it), and one
        # session to clean up if the test fails half-way.
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )

    def answers():
        try:
            with urllib.request.urlopen(f"http://{address}/login/", timeout=5) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError):
            if run.poll() is not None:
                pytest.fail(f"run.sh exited: {output.read_text()}")
            return False

    wait_for("the web server answers", answers, timeout=120)
    print(f"embedded stack answering {time.monotonic() - started:.1f} s after run.sh started")
    yield Stack(clone, address, run, output)
    if run.poll() is None:  # a failed test: stop it all the way the test would
        os.killpg(run.pid, signal.SIGINT)
        try:
            run.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
    for line in processes_in(clone):
        os.kill(int(line.split(":")[0]), signal.SIGKILL)


def test_the_beat_runs_a_scheduling_pass_and_a_quota_snapshot_by_itself(stack):
    wait_for(
        "a scheduling pass",
        lambda: stack.query(
            "SELECT last_pass_at FROM scheduling_schedulerstate WHERE last_pass_at IS NOT NULL"
        ),
        timeout=60,
    )

    def recent_snapshot():
        (latest,) = stack.query("SELECT max(taken_at) FROM tenancy_quotasnapshot")[0]
        return latest and datetime.now(UTC) - parse_time(latest) < timedelta(minutes=2)

    wait_for("a quota snapshot taken in the last 2 minutes", recent_snapshot, timeout=60)


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
    created = subprocess.run(
        [".venv/bin/python", "manage.py", "drf_create_token", "alice"],
        cwd=stack.clone,
        env=shell_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert created.returncode == 0, created.stderr
    token = created.stdout.split()[2]
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
    os.kill(stack.run.pid, signal.SIGINT)  # Ctrl-C reaches run.sh (the terminal's foreground process group)
    assert stack.run.wait(timeout=30) != 0
    print(f"stopped in {time.monotonic() - stopping:.1f} s")
    wait_for("no process left", lambda: not processes_in(stack.clone), timeout=5)
    output = stack.output.read_text()
    assert "logs in var/log/celery-worker.log and var/log/celery-beat.log" in output
    assert "stopping the server, the worker and the beat" in output
