"""The real stack for tests/stack: its own PostgreSQL and Redis (scripts/services.sh, through
benchmarks.stack.Services), web replicas (`rackplane serve`: gunicorn), Celery workers (`rackplane worker`)
and the beat (`rackplane beat`), each its own process group, stopped by its own id, never by name.

The faults are the real ones: Redis shut down and started again on its port, PostgreSQL stopped and started
(pg_ctl), a worker's process group sent SIGSTOP/SIGKILL, the beat killed. Checks read the database with SQL
(psycopg): the test process has no Django database of its own here.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import requests

from benchmarks.stack import Process, Services, free_port, spawn

ROOT = Path(__file__).resolve().parents[2]
RACKPLANE = str(Path(sys.executable).with_name("rackplane"))
PG_OPTIONS = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
# Beat intervals x0.1 (a minute is 6 s), a push lease of 5 s, a never-tried dispatch lost after 4 s: the real
# mechanisms on a test's clock (portal.settings).
FAST_CLOCK = {
    "RACKPLANE_BEAT_INTERVAL_SCALE": "0.1",
    "RACKPLANE_PUSH_LEASE_SECONDS": "5",
    "RACKPLANE_DISPATCH_LOST_AFTER_SECONDS": "4",
}


def wait_until(what: str, check: Callable[[], object], timeout: float, every: float = 0.2):
    """Poll `check` until it returns something truthy (returned); AssertionError naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as error:  # a service being restarted: keep polling
            last_error = error
        time.sleep(every)
    raise AssertionError(
        f"{what}: not within {timeout:.0f}s" + (f" (last error: {last_error})" if last_error else "")
    )


def _as_postgres(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def pg_bindir() -> str:
    out = subprocess.run(
        ["bash", "-c", "source scripts/lib.sh && find_pg_bindir"], cwd=ROOT, capture_output=True, text=True
    )
    if out.returncode != 0 or not out.stdout.strip():
        raise RuntimeError(
            "PostgreSQL's server programs were not found (scripts/system-deps.sh installs them)"
        )
    return out.stdout.strip()


class StackServices(Services):
    """PostgreSQL + Redis in a directory of their own, with the faults the tests need."""

    @property
    def root(self) -> Path:
        return Path(self.dir)

    @property
    def pg_port(self) -> int:
        return int((self.root / "postgres.port").read_text())

    @property
    def redis_port(self) -> int:
        return int((self.root / "redis.port").read_text())

    def sql(self, query: str, params=(), database: str = "rackplane") -> list[tuple]:
        with psycopg.connect(
            host="127.0.0.1",
            port=self.pg_port,
            user="rackplane",
            dbname=database,
            connect_timeout=5,
            autocommit=True,
        ) as conn:
            cursor = conn.execute(query, params)
            return cursor.fetchall() if cursor.description else []

    def redis_up(self) -> bool:
        out = subprocess.run(
            ["redis-cli", "-h", "127.0.0.1", "-p", str(self.redis_port), "ping"],
            capture_output=True,
            text=True,
        )
        return out.stdout.strip() == "PONG"

    def flush_redis(self) -> None:
        """Drop every message left by an earlier test (as a Redis restarted empty would): the rows stay the
        truth and the beat's sweeps send what they say is waiting."""
        subprocess.run(
            ["redis-cli", "-h", "127.0.0.1", "-p", str(self.redis_port), "flushall"],
            check=True,
            capture_output=True,
        )

    def stop_redis(self) -> None:
        subprocess.run(
            ["redis-cli", "-h", "127.0.0.1", "-p", str(self.redis_port), "shutdown", "nosave"],
            capture_output=True,
        )
        wait_until("Redis stopped", lambda: not self.redis_up(), 15)

    def start_redis(self) -> None:
        subprocess.run(
            [
                "redis-server", "--bind", "127.0.0.1", "--port", str(self.redis_port), "--save", "",
                "--appendonly", "no", "--daemonize", "yes", "--dir", str(self.root / "redis"),
                "--pidfile", str(self.root / "redis.pid"), "--logfile", str(self.root / "redis.log"),
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip
        wait_until("Redis answering", self.redis_up, 15)

    def _pg_ctl(self, *args: str) -> None:
        subprocess.run(
            _as_postgres([f"{pg_bindir()}/pg_ctl", "-D", str(self.root / "pgdata"), *args]),
            cwd="/",
            check=True,
            capture_output=True,
        )

    def stop_postgres(self) -> None:
        self._pg_ctl("-m", "fast", "-w", "-t", "30", "stop")

    def start_postgres(self) -> None:
        options = f"-c listen_addresses=127.0.0.1 -p {self.pg_port} -k {self.root / 'pgsocket'} {PG_OPTIONS}"
        self._pg_ctl("-l", str(self.root / "postgres.log"), "-w", "-t", "60", "-o", options, "start")

    def create_database(self, name: str) -> str:
        self.sql(f'CREATE DATABASE "{name}" OWNER rackplane', database="postgres")
        return f"postgres://rackplane@127.0.0.1:{self.pg_port}/{name}"


class Stack:
    """Web replicas, workers and a beat on one database and one broker; stop() stops them all."""

    def __init__(self, services: StackServices, scratch: Path, **extra_env: str):
        self.services = services
        self.scratch = scratch
        self.processes: list[Process] = []
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "DATABASE_URL": services.env["DATABASE_URL"],
            "CELERY_BROKER_URL": services.env["REDIS_URL"],
            "DEBUG": "0",
            "SECRET_KEY": secrets.token_urlsafe(48),
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "RACKPLANE_DEV_ENV": "0",
            "RACKPLANE_RENDER_DIR": str(scratch / "rendered"),
            "LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
            "TMPDIR": str(scratch),
            # As the Helm chart runs it: a broker outage is reported by /readyz, not a reason to take the
            # replicas out of the load balancer (submissions keep working without the broker).
            "RACKPLANE_READY_REQUIRES_BROKER": "0",
            **FAST_CLOCK,
            **extra_env,
        }
        for name in ("CACHE_URL", "PROMETHEUS_MULTIPROC_DIR"):
            self.env.pop(name, None)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Process:
        process = spawn(name, argv, env, self.scratch / f"{name}.log")
        self.processes.append(process)
        return process

    def web(self, name: str, workers: int = 1, threads: int = 4) -> str:
        port = free_port()
        env = {
            **self.env,
            "BIND": f"127.0.0.1:{port}",
            "WEB_CONCURRENCY": str(workers),
            "GUNICORN_THREADS": str(threads),
            "GUNICORN_TIMEOUT": "60",
            "GUNICORN_GRACEFUL_TIMEOUT": "5",
            "PROMETHEUS_MULTIPROC_DIR": str(self.scratch / f"prometheus-{name}"),
        }
        process = self._spawn(name, [RACKPLANE, "serve"], env)
        url = f"http://127.0.0.1:{port}"
        wait_until(
            f"{name} answering /healthz",
            lambda: self._alive(process) and requests.get(f"{url}/healthz", timeout=5).status_code == 200,
            90,
        )
        return url

    def worker(self, name: str, concurrency: int = 1) -> Process:
        env = {**self.env, "CELERY_CONCURRENCY": str(concurrency)}
        process = self._spawn(
            name,
            [RACKPLANE, "worker", "--hostname", f"{name}@%h", "--without-gossip", "--without-mingle"],
            env,
        )
        wait_until(f"{name} ready", lambda: self._alive(process) and " ready." in _text(process.log_path), 90)
        return process

    def beat(self, name: str = "beat") -> Process:
        env = {**self.env, "CELERY_BEAT_SCHEDULE_FILENAME": str(self.scratch / "beat-schedule")}
        process = self._spawn(name, [RACKPLANE, "beat"], env)
        wait_until(
            f"{name} started",
            lambda: self._alive(process) and "Sending due task" in _text(process.log_path),
            60,
        )
        return process

    def _alive(self, process: Process) -> bool:
        if not process.alive():
            raise AssertionError(f"{process.name} exited ({process.popen.returncode}):\n{process.tail()}")
        return True

    def kill(self, process: Process, sig: int = signal.SIGKILL) -> None:
        """`sig` to the process group `process` leads (a worker: its main process and its pool children)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.popen.pid, sig)
        if sig == signal.SIGKILL:
            process.popen.wait(10)

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.popen.pid, signal.SIGCONT)
            process.stop(timeout=10)
        self.processes.clear()

    def django(self, *args: str, input_text: str | None = None) -> str:
        """`python -m tests.stack.seed ARGS` (or any module) in the stack's environment; its stdout."""
        out = subprocess.run(
            [sys.executable, *args], cwd=ROOT, env=self.env, capture_output=True, text=True, input=input_text
        )
        if out.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
        return out.stdout


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def api(url: str, token: str, method: str, path: str, body=None, key: str = "", timeout: float = 30):
    headers = {"Authorization": f"Token {token}"}
    if key:
        headers["Idempotency-Key"] = key
    return requests.request(method, f"{url}{path}", json=body, headers=headers, timeout=timeout)


def sign_in(url: str, username: str, password: str) -> requests.Session:
    """A browser-like session signed in through the login form."""
    session = requests.Session()
    session.get(f"{url}/login/", timeout=30)
    answer = session.post(
        f"{url}/login/",
        data={
            "username": username,
            "password": password,
            "csrfmiddlewaretoken": session.cookies["csrftoken"],
        },
        headers={"Referer": f"{url}/login/"},
        timeout=30,
        allow_redirects=False,
    )
    errors = re.findall(r'class="(?:form|field)-error"[^>]*>\s*(?:<p>)?([^<]+)', answer.text)
    assert answer.status_code == 302, errors or answer.text[:500]
    return session


def job_body(department: str, name: str, gpus: int = 4, topology: str = "any") -> dict:
    return {
        "department": department,
        "name": name,
        "gpus": gpus,
        "topology": topology,
        "priority_class": "train",
        "backend": "slurm",
        "time_limit_minutes": 60,
        "work": {"script": "#!/bin/bash\nsrun python train.py\n"},
    }


def seed(stack: Stack, target_dir: Path, racks: int = 4) -> dict:
    stack.env["STACK_TARGET_DIR"] = str(target_dir)
    stack.env["STACK_RACKS"] = str(racks)
    return json.loads(stack.django("-m", "tests.stack.seed").strip().splitlines()[-1])
