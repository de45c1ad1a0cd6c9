"""The real stack for the scale benchmark: throwaway PostgreSQL + Redis (scripts/services.sh), gunicorn
serving `portal.wsgi`, a Celery worker on the same broker, and concurrent HTTP clients submitting jobs.

Everything started here is stopped in a `finally` (`Services.stop`, `Stack.stop`): each process runs in its
own session and is stopped by its own process group id, never by name.

Imported by benchmarks/scale.py after django.setup(): the checks after the run read the same PostgreSQL
through the ORM.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVICES = ROOT / "scripts" / "services.sh"

DISPATCH_BACKEND = (
    "embedded rendered backend (no Slurm or Kubernetes target configured): each dispatched job is written "
    "as the exact request a real backend would get under RACKPLANE_RENDER_DIR/jobs and reported running"
)

# Job shapes the clients submit: (GPUs, topology, weight).
SHAPES = (
    (1, "any", 14),
    (2, "any", 8),
    (4, "any", 12),
    (8, "partition", 14),
    (16, "partition", 10),
    (16, "rack", 4),
    (32, "partition", 8),
    (32, "any", 4),
    (36, "partition", 6),
    (64, "partition", 4),
    (64, "rack", 3),
    (64, "any", 3),
)


def log(message: str) -> None:
    print(f"[scale] {message}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


# --- services --------------------------------------------------------------------------------------------


class Services:
    """PostgreSQL and Redis from `scripts/services.sh start`; stop() stops them, removing their directory."""

    def __init__(self) -> None:
        self.dir: str | None = None
        self.env: dict[str, str] = {}

    def start(self) -> dict[str, str]:
        log("starting PostgreSQL and Redis (scripts/services.sh start)")
        result = subprocess.run(
            ["bash", str(SERVICES), "start"], cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False
        )
        lines = result.stdout.strip().splitlines()
        if lines:
            self.dir = lines[-1].strip()
        if result.returncode != 0 or not self.dir:
            raise SystemExit(f"scripts/services.sh start failed (exit {result.returncode})")
        # The environment it wrote, exactly as a shell that sources it would see it.
        dump = subprocess.run(
            ["bash", "-c", 'source "$1/env" && env -0', "_", self.dir],
            stdout=subprocess.PIPE,
            check=True,
        ).stdout.decode()
        wanted = {"DATABASE_URL", "REDIS_URL", "RACKPLANE_RUNTIME_DIR"}
        for item in dump.split("\0"):
            name, _, value = item.partition("=")
            if name in wanted:
                self.env[name] = value
        return self.env

    def stop(self) -> None:
        if self.dir is None:
            return
        log(f"stopping PostgreSQL and Redis (scripts/services.sh stop {self.dir})")
        subprocess.run(["bash", str(SERVICES), "stop", self.dir], cwd=ROOT, check=False)
        self.dir = None


# --- processes -------------------------------------------------------------------------------------------


@dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log_path: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM to the process group this process leads (its own session), SIGKILL after `timeout`."""
        group = self.popen.pid
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"{self.name} did not stop within {timeout:.0f}s: SIGKILL")
        # Children left behind by the leader (a worker process) go with the group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(5)


def spawn(name: str, argv: list[str], env: dict[str, str], log_path: Path) -> Process:
    with open(log_path, "wb") as out:
        popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Process(name, popen, log_path)


class Stack:
    """gunicorn (portal.wsgi) and a Celery worker against one database and one Redis broker."""

    def __init__(
        self, *, database_url: str, broker_url: str, scratch: Path, web_workers: int, concurrency: int
    ):
        self.scratch = scratch
        self.web_workers = web_workers
        self.concurrency = concurrency
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.processes: list[Process] = []
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "DATABASE_URL": database_url,
            "CELERY_BROKER_URL": broker_url,
            # Production mode, as a real deployment serves it.
            "DEBUG": "0",
            "SECRET_KEY": secrets.token_urlsafe(48),
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "RACKPLANE_RENDER_DIR": str(scratch / "rendered"),
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }

    def start(self, token: str) -> None:
        python = sys.executable
        log(f"starting gunicorn ({self.web_workers} workers) on {self.url}")
        self.processes.append(
            spawn(
                "gunicorn",
                [
                    python,
                    "-m",
                    "gunicorn",
                    "portal.wsgi:application",
                    "--bind",
                    f"127.0.0.1:{self.port}",
                    "--workers",
                    str(self.web_workers),
                    "--timeout",
                    "120",
                    "--graceful-timeout",
                    "10",
                    "--log-level",
                    "warning",
                ],
                self.env,
                self.scratch / "gunicorn.log",
            )
        )
        log(f"starting the Celery worker (concurrency {self.concurrency})")
        self.processes.append(
            spawn(
                "celery worker",
                [
                    python,
                    "-m",
                    "celery",
                    "-A",
                    "portal",
                    "worker",
                    "--concurrency",
                    str(self.concurrency),
                    "--pool",
                    "prefork",
                    "--loglevel",
                    "INFO",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                    "--hostname",
                    f"bench-{uuid.uuid4().hex[:8]}@%h",
                ],
                self.env,
                self.scratch / "celery.log",
            )
        )
        self._wait_web(token)
        self._wait_worker()
        self._warm_up(token)

    def _check_alive(self) -> None:
        for process in self.processes:
            if not process.alive():
                code = process.popen.returncode
                raise SystemExit(f"{process.name} exited (code {code}):\n{process.tail()}")

    def _wait_web(self, token: str, timeout: float = 90) -> None:
        import requests

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                response = requests.get(
                    f"{self.url}/api/v1/jobs/", headers={"Authorization": f"Token {token}"}, timeout=10
                )
                if response.status_code == 200:
                    return
                raise SystemExit(f"GET /api/v1/jobs/ answered {response.status_code}: {response.text[:300]}")
            except (requests.ConnectionError, requests.Timeout):
                # Not listening yet, or its first request (loading the app) is slow on a busy machine.
                time.sleep(0.2)
        raise SystemExit(f"gunicorn did not answer within {timeout:.0f}s:\n{self.processes[0].tail()}")

    def _warm_up(self, token: str, rounds: int = 6) -> None:
        """Each gunicorn worker loads the URLconf, views and serializers on its first request (seconds, all
        workers at once): send concurrent requests until a round is fast, so the timed run is steady state."""
        import requests

        def get(_):
            started = time.perf_counter()
            requests.get(f"{self.url}/api/v1/jobs/", headers={"Authorization": f"Token {token}"}, timeout=120)
            return time.perf_counter() - started

        with ThreadPoolExecutor(max_workers=2 * self.web_workers) as pool:
            for _ in range(rounds):
                if max(pool.map(get, range(4 * self.web_workers))) < 1.0:
                    break

    def _wait_worker(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        worker = self.processes[1]
        while time.monotonic() < deadline:
            self._check_alive()
            if " ready." in worker.log_path.read_text(errors="replace"):
                return
            time.sleep(0.2)
        raise SystemExit(f"the Celery worker was not ready within {timeout:.0f}s:\n{worker.tail()}")

    def stop(self) -> None:
        for process in reversed(self.processes):
            log(f"stopping {process.name}")
            process.stop()
        self.processes.clear()


# --- the clients -----------------------------------------------------------------------------------------


@dataclass
class Submission:
    name: str
    payload: dict
    key: str = ""
    mode: str = "plain"  # plain | retry (sent again after the answer) | race (sent twice at once)


@dataclass
class Answer:
    submission: Submission
    status: int
    ms: float
    job_id: int | None = None
    error: str = ""


@dataclass
class ClientPlan:
    token: str
    department: str
    submissions: list[Submission] = field(default_factory=list)


def plan_clients(
    rng, tokens: list[tuple[str, str]], clients: int, per_client: int, run: str
) -> list[ClientPlan]:
    """`clients` plans of `per_client` submissions each; tokens: (department slug, API token) to cycle over.

    About a third carry an Idempotency-Key; of those, some are retried after their answer (a client that
    lost the reply) and some are sent twice at the same moment (two retries racing).
    """
    shapes = [(gpus, topology) for gpus, topology, _ in SHAPES]
    weights = [weight for *_, weight in SHAPES]
    plans = []
    for number in range(clients):
        department, token = tokens[number % len(tokens)]
        plan = ClientPlan(token=token, department=department)
        for index in range(per_client):
            gpus, topology = rng.choices(shapes, weights)[0]
            backend = "kubernetes" if rng.random() < 0.3 else "slurm"
            work = (
                {"image": "nvcr.io/nvidia/pytorch:25.01-py3", "command": ["python", "train.py"]}
                if backend == "kubernetes"
                else {"script": "#!/bin/bash\nsrun python train.py\n"}
            )
            name = f"bench-{run}-c{number:02d}-{index:04d}"
            submission = Submission(
                name=name,
                payload={
                    "department": department,
                    "name": name,
                    "gpus": gpus,
                    "topology": topology,
                    "priority_class": "train",
                    "backend": backend,
                    "time_limit_minutes": rng.choice([30, 60, 240, 720]),
                    "work": work,
                },
            )
            roll = rng.random()
            if roll < 0.34:
                submission.key = f"{name}-{uuid.UUID(int=rng.getrandbits(128), version=4)}"
                submission.mode = "retry" if roll < 0.17 else ("race" if roll < 0.23 else "plain")
            plan.submissions.append(submission)
        plans.append(plan)
    return plans


def _post(url: str, token: str, submission: Submission) -> Answer:
    import requests

    headers = {"Authorization": f"Token {token}"}
    if submission.key:
        headers["Idempotency-Key"] = submission.key
    started = time.perf_counter()
    try:
        response = requests.post(f"{url}/api/v1/jobs/", json=submission.payload, headers=headers, timeout=120)
    except requests.RequestException as error:
        return Answer(submission, 0, (time.perf_counter() - started) * 1000, error=str(error)[:300])
    ms = (time.perf_counter() - started) * 1000
    job_id = None
    error = ""
    if response.status_code in (200, 201):
        job_id = response.json().get("id")
    else:
        error = response.text[:300]
    return Answer(submission, response.status_code, ms, job_id, error)


def _run_client(url: str, plan: ClientPlan, start: threading.Barrier) -> list[Answer]:
    answers: list[Answer] = []
    start.wait()
    for submission in plan.submissions:
        if submission.mode == "race":
            both: list[Answer | None] = [None, None]
            gate = threading.Barrier(2)

            def send(slot: int, submission=submission, both=both, gate=gate) -> None:
                gate.wait()
                both[slot] = _post(url, plan.token, submission)

            other = threading.Thread(target=send, args=(1,))
            other.start()
            send(0)
            other.join()
            answers.extend(a for a in both if a is not None)
            continue
        answers.append(_post(url, plan.token, submission))
        if submission.mode == "retry":
            answers.append(_post(url, plan.token, submission))
    return answers


def run_clients(url: str, plans: list[ClientPlan]) -> tuple[list[Answer], float]:
    start = threading.Barrier(len(plans) + 1)
    with ThreadPoolExecutor(max_workers=len(plans)) as pool:
        futures = [pool.submit(_run_client, url, plan, start) for plan in plans]
        start.wait()
        started = time.perf_counter()
        answers = [answer for future in futures for answer in future.result()]
        elapsed = time.perf_counter() - started
    return answers, elapsed


# --- after the run ---------------------------------------------------------------------------------------


def wait_drained(broker_url: str, stack: Stack, timeout: float) -> tuple[bool, float]:
    """Until no scheduling request, no job being handed to its backend and no Celery message is left (three
    looks in a row); (drained, seconds waited)."""
    import redis

    from scheduling.choices import JobState
    from scheduling.models import Job, SchedulingRequest

    broker = redis.Redis.from_url(broker_url)
    started = time.perf_counter()
    quiet = 0
    while time.perf_counter() - started < timeout:
        stack._check_alive()
        idle = (
            broker.llen("celery") == 0
            and broker.hlen("unacked") == 0
            and not SchedulingRequest.objects.exists()
            and not Job.objects.filter(state=JobState.STARTING).exists()
        )
        quiet = quiet + 1 if idle else 0
        if quiet >= 3:
            return True, time.perf_counter() - started
        time.sleep(0.3)
    return False, time.perf_counter() - started


def allocation_checks() -> dict:
    """Invariants of the allocations, read from the database (every one must be 0)."""
    from django.db.models import Count, F

    from core.hardware import GPUS_PER_TRAY
    from scheduling.choices import HOLDING_STATES
    from scheduling.models import Allocation, Job

    double = (
        Allocation.objects.values("gpu_id").annotate(n=Count("pk")).filter(n__gt=1).values("gpu_id").count()
    )
    # Overlap seen from the trays: more GPUs of a tray allocated than a tray has.
    overcommitted = (
        Allocation.objects.values("gpu__tray_id").annotate(n=Count("pk")).filter(n__gt=GPUS_PER_TRAY).count()
    )
    stale = Allocation.objects.exclude(job__state__in=HOLDING_STATES).count()
    counted = Job.objects.filter(state__in=HOLDING_STATES).annotate(n=Count("allocations"))
    short = counted.exclude(n=F("gpus")).count()
    return {
        "double_allocations": double,
        "overcommitted_trays": overcommitted,
        "allocations_of_jobs_not_holding": stale,
        "holding_jobs_with_wrong_gpu_count": short,
    }


def summarize(answers: list[Answer], elapsed: float, plans: list[ClientPlan]) -> dict:
    from django.db.models import Count

    from scheduling.choices import HOLDING_STATES, JobState
    from scheduling.models import Job

    latencies = [a.ms for a in answers]
    acknowledged = {a.job_id for a in answers if a.status == 201 and a.job_id is not None}
    first_id: dict[str, int] = {}
    key_mismatches = 0
    for answer in answers:
        if answer.job_id is None or not answer.submission.key:
            continue
        seen = first_id.setdefault(answer.submission.key, answer.job_id)
        if seen != answer.job_id:
            key_mismatches += 1
    ids = {a.job_id for a in answers if a.job_id is not None}
    states = dict(Job.objects.filter(pk__in=ids).values_list("state").annotate(n=Count("pk")).order_by())
    names = [s.name for plan in plans for s in plan.submissions]
    duplicated = (
        Job.objects.filter(name__in=names).values("name").annotate(n=Count("pk")).filter(n__gt=1).count()
    )
    statuses: dict[str, int] = {}
    for answer in answers:
        statuses[str(answer.status)] = statuses.get(str(answer.status), 0) + 1
    errors = [f"{a.status}: {a.error}" for a in answers if a.status not in (200, 201)]
    existing = set(Job.objects.filter(pk__in=acknowledged).values_list("pk", flat=True))
    return {
        "submissions": len(names),
        "requests": len(answers),
        "requests_per_s": round(len(answers) / elapsed, 1),
        "elapsed_s": round(elapsed, 2),
        "p50_ms": round(statistics.median(latencies), 1),
        "p95_ms": round(percentile(latencies, 0.95), 1),
        "max_ms": round(max(latencies), 1),
        "statuses": dict(sorted(statuses.items())),
        "created_201": len(acknowledged),
        "idempotent_replays_200": sum(1 for a in answers if a.status == 200),
        # Submissions refused by validation (e.g. over a small department's limit at a tiny scale).
        "rejected_submissions_400": len({a.submission.name for a in answers if a.status == 400}),
        "idempotency_key_mismatches": key_mismatches,
        "duplicate_jobs": duplicated,
        "first_errors": errors[:3],
        "jobs_placed": sum(states.get(s, 0) for s in HOLDING_STATES),
        "jobs_running": states.get(JobState.RUNNING, 0),
        "jobs_pending": states.get(JobState.PENDING, 0),
        "jobs_other": {s: n for s, n in states.items() if s not in (*HOLDING_STATES, JobState.PENDING)},
        "lost_jobs": len(acknowledged - existing),
    }


def run(
    *,
    database_url: str,
    broker_url: str,
    scratch: Path,
    clients: int,
    per_client: int,
    web_workers: int,
    concurrency: int,
    drain_timeout: float,
    rng,
) -> dict:
    """Submit jobs through gunicorn + Celery; the figures and the invariant checks."""
    from rest_framework.authtoken.models import Token

    from scheduling.models import Job
    from tenancy.models import Membership

    leads = list(
        Membership.objects.filter(role="lead")
        .select_related("user", "department")
        .order_by("department__slug")
    )
    if not leads:
        raise SystemExit("no department lead to submit jobs as (seed_tenants made none?)")
    tokens = [(m.department.slug, Token.objects.get_or_create(user=m.user)[0].key) for m in leads]
    plans = plan_clients(rng, tokens, clients, per_client, run=uuid.uuid4().hex[:6])
    jobs_before = Job.objects.count()

    stack = Stack(
        database_url=database_url,
        broker_url=broker_url,
        scratch=scratch,
        web_workers=web_workers,
        concurrency=concurrency,
    )
    try:
        stack.start(tokens[0][1])
        log(f"{clients} clients submitting {clients * per_client} jobs")
        answers, elapsed = run_clients(stack.url, plans)
        log(f"submitted in {elapsed:.1f}s; waiting for the worker to drain")
        drained, drain_s = wait_drained(broker_url, stack, drain_timeout)
        figures = summarize(answers, elapsed, plans)
        figures.update(allocation_checks())
    finally:
        stack.stop()
    return {
        "web": f"gunicorn portal.wsgi, {web_workers} sync workers, DEBUG off",
        "worker": f"celery worker, prefork concurrency {concurrency}",
        "broker": "Redis (scripts/services.sh)",
        "dispatch_backend": DISPATCH_BACKEND,
        "clients": clients,
        "jobs_before": jobs_before,
        **figures,
        "drained": drained,
        "drain_s": round(drain_s, 2),
    }
