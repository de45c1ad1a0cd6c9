#!/usr/bin/env python
"""Capacity benchmark: requests per second and latency (p50/p95) of job submission, hash-only node
heartbeats and the heaviest pages through gunicorn with 1, 2 and 4 worker processes, at 1,000 racks (or
10,000); prints one JSON object.

    BENCH_ARGS="--only capacity" make bench                (bench.sh runs this file for `--only capacity`)
    .venv/bin/python benchmarks/capacity.py --racks 1000 --workers 1,2,4 --seconds 10
    .venv/bin/python benchmarks/capacity.py --racks 10000 --endpoints hash_only_heartbeat

Node heartbeats (issue 32: 180,000 trays once a minute = 3,000 hash-only reports/s with at most 8 web
processes): HEARTBEAT_TRAYS trays get one full report reconciled when seeded (their hash known, as a node
has it after its first report), then clients post `{"host", "report_sha256", "agent"}` with per-rack agent
tokens. Each answered heartbeat is one message on the broker's rackplane.heartbeats queue; no beat runs
during the timed part, so after it the queue is drained by `flush_heartbeats` (what the beat's task runs in
a worker) here, timed, and its count compared with the heartbeats answered (none lost). The CPU time the web
processes spent per heartbeat (from /proc) gives the extrapolation: each web process on a core of its own
answers 1 / that many heartbeats a second.

The stack is real: a throwaway PostgreSQL and Redis (scripts/services.sh, or DATABASE_URL and REDIS_URL when
both are set: the database is flushed), `rackplane serve` (gunicorn, gthread workers with GUNICORN_THREADS
threads) and one Celery worker that runs the scheduling passes submissions ask for. For each worker count
and each endpoint, CLIENTS concurrent HTTP clients send requests for SECONDS seconds (closed loop: each sends
the next when its answer came): requests/s is what was answered in that time, p50/p95 the latencies seen.

The machine's load while it ran (load average before and after, its cores) is in the output: figures from a
machine shared with other work are lower bounds. Benchmarks never fail on a time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import secrets
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import stack  # noqa: E402  (after the path: runs as a script)
from portal.ops import cli  # noqa: E402

log = stack.log
RACKPLANE = str(Path(sys.executable).with_name("rackplane"))
ADMIN = ("capacity-admin", "capacity-admin-password-1")
ENDPOINTS = (
    "job_submission_api",
    "hash_only_heartbeat",
    "overview_page",
    "admin_dashboard_page",
    "rack_list_page",
    "gpu_list_api",
)
HEARTBEAT_TRAYS = 2000
HEARTBEAT_GOAL_PER_S = 3000  # 180,000 trays once a minute (issue 32)
HEARTBEAT_MAX_WEB_PROCESSES = 8
FLEET_FLUSH_TRAYS = 18_000  # one flush of this many trays' heartbeats is timed (a tenth of 10,000 racks)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--racks", type=int, default=1000)
    parser.add_argument("--workers", default="1,2,4", help="gunicorn worker counts to measure")
    parser.add_argument(
        "--threads", type=int, default=4, help="threads per gunicorn worker (GUNICORN_THREADS)"
    )
    parser.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each endpoint is measured")
    parser.add_argument(
        "--endpoints",
        default="",
        help=f"comma-separated endpoints to measure (default all: {', '.join(ENDPOINTS)})",
    )
    parser.add_argument(
        "--heartbeat-trays", type=int, default=HEARTBEAT_TRAYS, help="trays whose heartbeats are posted"
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="keep the database when it already holds --racks racks (no seeding)",
    )
    parser.add_argument("--only", default="", help=argparse.SUPPRESS)  # `--only capacity` from bench.sh
    return parser.parse_args(argv)


def heartbeat_senders(trays: int) -> list[tuple[str, str, str]]:
    """(agent token, host, report hash) of `trays` trays, each with one full report reconciled (its hash
    stored, as after a node's first report), with per-rack agent tokens as nodes authenticate."""
    import random as random_module

    from benchmarks import discovery
    from inventory import agent_tokens
    from inventory.discovery import health_report
    from inventory.discovery.nvidia_smi import parse_any, validate_report
    from inventory.ingest.reports import ingest_report
    from inventory.models import Rack
    from scheduling.services import pass_requests

    reports = discovery.bodies(discovery.sample_trays(random_module.Random(32), trays))
    # A changed report may ask for a scheduling pass; Celery is eager here (no broker in this process):
    # counted, not run (as benchmarks/discovery.py does).
    original = pass_requests.send_now
    pass_requests.send_now = lambda *args, **kwargs: True
    hashes = {}
    try:
        for body in reports:
            fmt, gpus = parse_any(body["nvidia_smi"])
            health, _ = health_report.validate_health(None, None, body["agent"])
            result = ingest_report(body["host"], fmt, validate_report(gpus), health)
            if result.health is not None and result.health.healthy:
                hashes[body["host"]] = result.report_sha256
    finally:
        pass_requests.send_now = original
    from inventory.models import ComputeTray

    rack_of = dict(ComputeTray.objects.filter(hostname__in=hashes).values_list("hostname", "rack_id"))
    tokens = {
        rack.pk: agent_tokens.issue(rack=rack, description="capacity benchmark")[1]
        for rack in Rack.objects.filter(pk__in=set(rack_of.values()))
    }
    return [(tokens[rack_of[host]], host, sha256) for host, sha256 in sorted(hashes.items())]


def seed(racks: int, heartbeat_trays: int = 0, reuse: bool = False, tenants: bool = True) -> dict:
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from rest_framework.authtoken.models import Token

    from inventory.demo import seed_datacenter
    from inventory.models import Gpu
    from portal.demo.seeding import seed_tenants
    from tenancy.models import Membership

    settings.DEBUG = False
    from inventory.models import Rack

    started = time.perf_counter()
    call_command("migrate", verbosity=0)
    if reuse and Rack.objects.count() == racks:
        log(f"reusing the {racks} racks already seeded (--reuse)")
    else:
        log("flushing the database")
        call_command("flush", interactive=False, verbosity=0)
        log(f"seeding {racks} racks" + (" and the demo departments" if tenants else ""))
        seed_datacenter(racks=racks)
        if tenants:
            seed_tenants()
    get_user_model().objects.filter(username=ADMIN[0]).delete()
    get_user_model().objects.create_superuser(ADMIN[0], "capacity@example.com", ADMIN[1])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    leads = (
        Membership.objects.filter(role="lead")
        .select_related("user", "department")
        .order_by("department__slug")
    )
    tokens = [(m.department.slug, Token.objects.get_or_create(user=m.user)[0].key) for m in leads]
    figures = {"racks": racks, "gpus": Gpu.objects.count(), "seed_s": round(time.perf_counter() - started, 1)}
    senders = []
    if heartbeat_trays:
        log(f"one full report reconciled for each of {heartbeat_trays} trays (their hashes known)")
        senders = heartbeat_senders(heartbeat_trays)
    connection.close()
    return {"tokens": tokens, "senders": senders, **figures}


def measure(name: str, request, clients: int, seconds: float) -> dict:
    """`clients` threads calling request(session, rng) -> status for `seconds`: answered/s and latencies."""
    import requests

    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)
    deadline = [0.0]

    def client(number: int) -> None:
        session = requests.Session()
        rng = random.Random(number)
        start.wait()
        while time.perf_counter() < deadline[0]:
            began = time.perf_counter()
            try:
                status = request(session, rng)
            except requests.RequestException:
                status = 0
            took = (time.perf_counter() - began) * 1000
            with lock:
                latencies.append(took)
                statuses[status] = statuses.get(status, 0) + 1

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    for thread in threads:
        thread.start()
    deadline[0] = time.perf_counter() + seconds
    began = time.perf_counter()
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    ok = sum(n for s, n in statuses.items() if 200 <= s < 300)
    return {
        "requests_per_s": round(ok / elapsed, 1),
        "p50_ms": round(statistics.median(latencies), 1) if latencies else None,
        "p95_ms": round(stack.percentile(latencies, 0.95), 1) if latencies else None,
        "statuses": {str(s): n for s, n in sorted(statuses.items())},
    }


def signed_in(url: str):
    import requests

    session = requests.Session()
    session.get(f"{url}/login/", timeout=60)
    session.post(
        f"{url}/login/",
        data={
            "username": ADMIN[0],
            "password": ADMIN[1],
            "csrfmiddlewaretoken": session.cookies["csrftoken"],
        },
        headers={"Referer": f"{url}/login/"},
        timeout=60,
    )
    return session.cookies


def endpoints(url: str, tokens: list[tuple[str, str]], gpu_pages: int, run: str, senders, wanted, heard):
    """The calls to measure; `heard` collects the hosts whose heartbeat was answered 200."""
    cookies = signed_in(url) if set(wanted) - {"job_submission_api", "hash_only_heartbeat"} else None
    counter = iter(range(10**9))

    def heartbeat(session, rng):
        token, host, sha256 = rng.choice(senders)
        body = {"host": host, "report_sha256": sha256, "agent": {"version": "0.1.0", "interval_s": 60}}
        headers = {"Authorization": f"Bearer {token}"}
        status = session.post(
            f"{url}/api/v1/discovery/reports/", json=body, headers=headers, timeout=120
        ).status_code
        if status == 200:
            heard.add(host)
        return status

    def submit(session, rng):
        department, token = rng.choice(tokens)
        body = {
            "department": department,
            "name": f"capacity-{run}-{next(counter)}",
            "gpus": rng.choice([1, 2, 4]),
            "topology": "any",
            "priority_class": "train",
            "backend": "slurm",
            "time_limit_minutes": 60,
            "work": {"script": "#!/bin/bash\nsrun python train.py\n"},
        }
        headers = {"Authorization": f"Token {token}"}
        return session.post(f"{url}/api/v1/jobs/", json=body, headers=headers, timeout=120).status_code

    def page(path):
        def get(session, rng):
            target = path(rng) if callable(path) else path
            return session.get(f"{url}{target}", cookies=cookies, timeout=120).status_code

        return get

    calls = {
        "job_submission_api": submit,
        "hash_only_heartbeat": heartbeat,
        "overview_page": page("/"),
        "admin_dashboard_page": page("/tenancy/dashboard/"),
        "rack_list_page": page(lambda rng: f"/inventory/racks/?page={rng.randrange(1, 20)}"),
        "gpu_list_api": page(lambda rng: f"/api/v1/gpus/?page={rng.randrange(1, gpu_pages + 1)}"),
    }
    return {name: call for name, call in calls.items() if name in wanted}


def group_cpu_s(group: int) -> float:
    """CPU time (user + system, s) of a process group (a gunicorn master and its workers), from /proc: its
    live processes' and their reaped children's (a worker replaced after GUNICORN_MAX_REQUESTS counts with
    its master, its start-up included)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group:  # pgrp
            total += sum(int(ticks_used) for ticks_used in fields[11:15])  # utime, stime, cutime, cstime
    return total / ticks


def drain_heartbeats(broker_url: str, heard: set[str], since) -> dict:
    """The queued heartbeats written as the beat's task writes them, timed; then every tray heard since
    `since` must show a last-seen time from then on (none lost)."""
    from django.conf import settings

    from inventory.ingest import heartbeats
    from inventory.models import ComputeTray

    settings.CELERY_BROKER_URL = broker_url
    settings.RACKPLANE_HEARTBEAT_BATCH_S = 5
    waiting = heartbeats.queued()
    started = time.perf_counter()
    trays = heartbeats.flush_heartbeats()
    elapsed = time.perf_counter() - started
    fresh = ComputeTray.objects.filter(hostname__in=heard, last_report_at__gte=since).count()
    return {
        "trays_heard": len(heard),
        "trays_queued": waiting,
        "trays_written": trays,
        "trays_fresh_after_flush": fresh,
        "none_lost": fresh == len(heard) and heartbeats.queued() == 0,
        "flush_ms": round(elapsed * 1000, 1),
        "note": "one flush in this process (what the beat's task runs in a worker): the batch taken from "
        "Redis, two UPDATEs per 5,000 trays",
    }


def fleet_flush(broker_url: str, trays: int = FLEET_FLUSH_TRAYS) -> dict:
    """One flush of `trays` trays' heartbeats (each heard once, put in the Redis hash as the web processes
    would), timed, and what a minute of the whole fleet's heartbeats costs at that rate."""
    import redis
    from django.conf import settings

    from inventory.ingest import heartbeats
    from inventory.models import ComputeTray

    settings.CELERY_BROKER_URL = broker_url
    client = redis.Redis.from_url(broker_url)
    at = repr(datetime.now(UTC).timestamp())
    fleet = ComputeTray.objects.count()
    pks = list(ComputeTray.objects.order_by("pk").values_list("pk", flat=True)[:trays])
    for start in range(0, len(pks), 10_000):
        client.hset(heartbeats.HASH, mapping=dict.fromkeys(pks[start : start + 10_000], at))
    started, cpu = time.perf_counter(), time.process_time()
    written = heartbeats.flush_heartbeats()
    elapsed = time.perf_counter() - started
    rate = written / elapsed if elapsed else 0
    return {
        "trays": len(pks),
        "trays_written": written,
        "flush_s": round(elapsed, 2),
        "flush_process_cpu_s": round(time.process_time() - cpu, 2),
        "trays_per_s": round(rate, 1),
        "fleet_trays": fleet,
        "fleet_minute_flush_s": round(fleet / rate, 1) if rate else None,
        "note": "one flush (the beat's task) in this process; its time is the database's (two UPDATEs per "
        "5,000 trays: trays and their 4 GPUs each); fleet_minute_flush_s: every tray once, at that rate",
    }


def heartbeat_capacity(results: dict) -> dict:
    """Web processes needed for HEARTBEAT_GOAL_PER_S, from the CPU each heartbeat cost the web processes."""
    measured = {
        name: figures["hash_only_heartbeat"]
        for name, figures in results.items()
        if "hash_only_heartbeat" in figures and figures["hash_only_heartbeat"].get("web_cpu_ms_per_request")
    }
    if not measured:
        return {}
    cpu_ms = statistics.median(f["web_cpu_ms_per_request"] for f in measured.values())
    per_process = 1000 / cpu_ms
    needed = math.ceil(HEARTBEAT_GOAL_PER_S / per_process)
    return {
        "goal_per_s": HEARTBEAT_GOAL_PER_S,
        "measured_per_s": {name: f["requests_per_s"] for name, f in measured.items()},
        # Each worker count's own figures: what it answered, its CPU per heartbeat, and the processes that
        # CPU gives for the goal (each on a core of its own).
        "by_worker_count": {
            name: {
                "heartbeats_per_s": f["requests_per_s"],
                "p50_ms": f["p50_ms"],
                "p95_ms": f["p95_ms"],
                "web_cpu_ms_per_heartbeat": f["web_cpu_ms_per_request"],
                "per_process_per_s": round(1000 / f["web_cpu_ms_per_request"], 1),
                "processes_needed": math.ceil(HEARTBEAT_GOAL_PER_S * f["web_cpu_ms_per_request"] / 1000),
            }
            for name, f in measured.items()
        },
        "web_cpu_ms_per_heartbeat": round(cpu_ms, 2),
        "per_web_process_on_its_own_core_per_s": round(per_process, 1),
        "web_processes_needed": needed,
        "goal_met_with_at_most_8": needed <= HEARTBEAT_MAX_WEB_PROCESSES,
        "goal": "met" if needed <= HEARTBEAT_MAX_WEB_PROCESSES else "missed",
        "note": "extrapolated from the web processes' CPU time per heartbeat (median of the worker counts): "
        "each process on a core of its own; the database and Redis need their own cores (not counted here)",
    }


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    counts = [int(n) for n in args.workers.split(",") if n.strip()]
    services = stack.Services()
    if os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"):
        env = {"DATABASE_URL": os.environ["DATABASE_URL"], "REDIS_URL": os.environ["REDIS_URL"]}
    else:
        env = services.start()
    scratch = Path(tempfile.mkdtemp(prefix="rackplane-capacity-"))
    processes: list[stack.Process] = []
    load_before = os.getloadavg()
    max_requests = os.environ.get("GUNICORN_MAX_REQUESTS") or cli.MAX_REQUESTS
    try:
        os.environ.update(
            DJANGO_SETTINGS_MODULE="portal.settings",
            DATABASE_URL=env["DATABASE_URL"],
            DEBUG="0",
            SECRET_KEY=os.environ.get("SECRET_KEY") or secrets.token_urlsafe(48),
            RACKPLANE_DEV_ENV="0",
            ALLOWED_HOSTS="127.0.0.1,localhost",
            RACKPLANE_RENDER_DIR=str(scratch / "rendered"),
        )
        wanted = [name.strip() for name in args.endpoints.split(",") if name.strip()] or list(ENDPOINTS)
        unknown = set(wanted) - set(ENDPOINTS)
        if unknown:
            raise SystemExit(f"unknown endpoints: {', '.join(sorted(unknown))}")
        seeded = seed(
            args.racks,
            args.heartbeat_trays if "hash_only_heartbeat" in wanted else 0,
            reuse=args.reuse,
            tenants=wanted != ["hash_only_heartbeat"],  # heartbeats need racks and agent tokens only
        )
        base = {
            **os.environ,
            "CELERY_BROKER_URL": env["REDIS_URL"],
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "LOG_LEVEL": "WARNING",
            "TMPDIR": str(scratch),
            # Capacity, not the rate limits: no sign-in lockout, no per-account API throttle (1,200/min).
            "RACKPLANE_LOGIN_FAILURE_LIMIT": "1000000",
            "RACKPLANE_THROTTLE_USER": "1000000/min",
        }
        log("starting one Celery worker (the passes submissions ask for)")
        worker = stack.spawn(
            "worker", [RACKPLANE, "worker"], {**base, "CELERY_CONCURRENCY": "1"}, scratch / "w.log"
        )
        processes.append(worker)
        results = {}
        gpu_pages = max(1, seeded["gpus"] // 100)
        for count in counts:
            port = stack.free_port()
            url = f"http://127.0.0.1:{port}"
            log(f"gunicorn with {count} worker(s) x {args.threads} threads on {url}")
            web = stack.spawn(
                f"web-{count}",
                [RACKPLANE, "serve"],
                {
                    **base,
                    "BIND": f"127.0.0.1:{port}",
                    "WEB_CONCURRENCY": str(count),
                    "GUNICORN_THREADS": str(args.threads),
                    "GUNICORN_TIMEOUT": "120",
                    "PROMETHEUS_MULTIPROC_DIR": str(scratch / f"prometheus-{count}"),
                },
                scratch / f"web-{count}.log",
            )
            processes.append(web)
            try:
                wait_ready(url, web)
                heard: set[str] = set()
                since = datetime.now(UTC)
                calls = endpoints(
                    url,
                    seeded["tokens"],
                    gpu_pages,
                    run=f"{count}-{secrets.token_hex(3)}",
                    senders=seeded["senders"],
                    wanted=wanted,
                    heard=heard,
                )
                for call in calls.values():  # every worker process loads its views before the timed part
                    measure("warm-up", call, max(args.clients, 2 * count), 3)
                figures = {}
                for name, call in calls.items():
                    cpu = group_cpu_s(web.popen.pid)
                    figures[name] = measure(name, call, args.clients, args.seconds)
                    ok = sum(n for s, n in figures[name]["statuses"].items() if s.startswith("2"))
                    if ok:
                        figures[name]["web_cpu_ms_per_request"] = round(
                            (group_cpu_s(web.popen.pid) - cpu) * 1000 / ok, 2
                        )
                if heard:
                    figures["heartbeat_flush"] = drain_heartbeats(env["REDIS_URL"], heard, since)
                results[f"{count}_workers"] = figures
                log(json.dumps(results[f"{count}_workers"]))
            finally:
                web.stop()
                processes.remove(web)
        print(
            json.dumps(
                {
                    "benchmark": "capacity",
                    "racks": seeded["racks"],
                    "gpus": seeded["gpus"],
                    "seed_s": seeded["seed_s"],
                    "web": f"rackplane serve (gunicorn gthread, {args.threads} threads a worker, each worker "
                    f"replaced after {max_requests} requests), DEBUG off",
                    "clients": args.clients,
                    "seconds_per_endpoint": args.seconds,
                    "machine": {
                        "cores": len(os.sched_getaffinity(0)),
                        "load_average_before": [round(x, 2) for x in load_before],
                        "load_average_after": [round(x, 2) for x in os.getloadavg()],
                        "note": "PostgreSQL, Redis, the Celery worker and the clients share these cores",
                    },
                    "results": results,
                    "heartbeats": {
                        **heartbeat_capacity(results),
                        "fleet_flush": fleet_flush(env["REDIS_URL"])
                        if "hash_only_heartbeat" in wanted
                        else None,
                    },
                },
                indent=2,
            ),
            flush=True,
        )
    finally:
        for process in processes:
            process.stop()
        services.stop()


def wait_ready(url: str, process: stack.Process, timeout: float = 120) -> None:
    import requests

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process.alive():
            raise SystemExit(f"{process.name} exited:\n{process.tail()}")
        try:
            if requests.get(f"{url}/healthz", timeout=5).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.3)
    raise SystemExit(f"{process.name} did not answer within {timeout:.0f}s:\n{process.tail()}")


if __name__ == "__main__":
    main(sys.argv[1:])
