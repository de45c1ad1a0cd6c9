"""`make run`'s embedded stack: scripts/run.sh in a fresh clone (web server, Celery worker and beat on the
filesystem broker), its state read from the clone's SQLite file.

The suite starts one per session (the `embedded_stack` fixture, tests/conftest.py), for every test that needs
it; a test that stops it (the SIGINT test) leaves the next one a new stack.
"""

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.fresh_clone import copy_clone, free_port, shell_env


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
    def __init__(self, clone: Path, address: str, run: subprocess.Popen, output: Path, started: datetime):
        self.clone, self.address, self.run, self.output = clone, address, run, output
        self.started = started  # when run.sh was started (UTC): what the stack did since is its own work

    def query(self, sql: str, *params):
        with sqlite3.connect(self.clone / "var" / "rackplane.sqlite3", timeout=20) as database:
            return database.execute(sql, params).fetchall()

    def token(self, username: str) -> str:
        """An API token of `username`, made with the clone's manage.py (as an admin would)."""
        created = subprocess.run(
            [".venv/bin/python", "manage.py", "drf_create_token", username],
            cwd=self.clone,
            env=shell_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert created.returncode == 0, created.stderr
        return created.stdout.split()[2]

    def placement_once_running(self, job_id: int, timeout: float = 60) -> list[str]:
        """The hostnames job `job_id` runs on, once the stack has started it (within `timeout` seconds)."""
        wait_for(
            f"job {job_id} running",
            lambda: self.query("SELECT 1 FROM scheduling_job WHERE id = ? AND state = 'running'", job_id),
            timeout=timeout,
        )
        [(placement,)] = self.query("SELECT placement FROM scheduling_job WHERE id = ?", job_id)
        return json.loads(placement)

    def log(self, name: str) -> str:
        path = self.clone / "var" / "log" / name
        return path.read_text() if path.exists() else ""


@contextlib.contextmanager
def running_stack(clone: Path, **environment: str):
    """scripts/run.sh serving in `clone` (a copy of the session's prepared clone, tests/fresh_clone.py);
    stopped (SIGINT, as Ctrl-C) at the end, with anything left behind killed. `environment`: settings an
    operator would export before `make run` (e.g. RACKPLANE_PREEMPT_AFTER_MINUTES)."""
    env = shell_env(**environment)
    # Forget what the seed did, so that whatever appears next is the stack's own work.
    with sqlite3.connect(clone / "var" / "rackplane.sqlite3") as database:
        database.execute("UPDATE scheduling_schedulerstate SET last_pass_at = NULL")
        database.execute(
            "DELETE FROM tenancy_quotasnapshot WHERE taken_at >= ?",
            [str(datetime.now(UTC) - timedelta(hours=1))],
        )

    address = f"127.0.0.1:{free_port()}"
    output = clone.parent / "run.out"
    started_at = datetime.now(UTC)
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
                raise AssertionError(f"run.sh exited: {output.read_text()}") from None
            return False

    wait_for("the web server answers", answers, timeout=120)
    print(f"embedded stack answering {time.monotonic() - started:.1f} s after run.sh started")
    try:
        yield Stack(clone, address, run, output, started_at)
    finally:
        stop(run, clone)


def stop(run: subprocess.Popen, clone: Path) -> None:
    if run.poll() is None:  # a failed test: stop it all the way the test would
        os.killpg(run.pid, signal.SIGINT)
        try:
            run.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
    for line in processes_in(clone):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split(":")[0]), signal.SIGKILL)


class EmbeddedStacks:
    """The session's running stack: started at the first test that asks, kept for the next ones, started
    again when a test stopped it."""

    def __init__(self, template: Path, root: Path):
        self.template, self.root, self.started = template, root, 0
        self.current: Stack | None = None
        self.exits = contextlib.ExitStack()

    def running(self) -> Stack:
        if self.current is None or self.current.run.poll() is not None:
            self.close()
            self.started += 1
            clone = copy_clone(self.template, self.root / f"stack-{self.started}" / "rackplane")
            self.current = self.exits.enter_context(running_stack(clone))
        return self.current

    def close(self) -> None:
        self.exits.close()
        self.current = None


@pytest.fixture(scope="session")
def embedded_stacks(prepared_clone_template, tmp_path_factory):
    stacks = EmbeddedStacks(prepared_clone_template, tmp_path_factory.mktemp("embedded-stack"))
    try:
        yield stacks
    finally:
        stacks.close()


@pytest.fixture
def embedded_stack(embedded_stacks) -> Stack:
    """`make run`'s stack, serving (shared by the session's tests; read it, act as its users would)."""
    return embedded_stacks.running()
