#!/usr/bin/env python
"""Scale benchmark: prints one JSON object of figures for an inventory of N NVL72 racks.

    .venv/bin/python benchmarks/scale.py --racks 1000            (what `make bench` runs, via bench.sh)
    .venv/bin/python benchmarks/scale.py --racks 3 --no-stack    (embedded SQLite, no services)
    .venv/bin/python benchmarks/scale.py --only pass             (seed, then one part: here the pass)

Figures: seed time; page, dashboard and GPU list API latencies (through Django's full request stack
in-process: middleware, auth, views, templates, ORM, database; no HTTP server in front); discovery ingest
throughput (benchmarks/discovery.py: changed, unchanged and hash-only node reports, in-process and through
gunicorn with one web worker); placement decision p50/p99 on the engine's cluster built from the seeded
database at a steady ~65% fill, and the fleet's stranded NVLink capacity on that cluster against the requests
that did not fit (median of 20); the scheduling pass (`run_pass`, split into engine, database and the rest,
cold and with the cluster its process kept); config render time for the whole inventory; and, with the
stack (the default), job submission throughput through gunicorn + PostgreSQL + Redis + a Celery worker with
concurrent HTTP clients, checked for double allocations and lost jobs afterwards.

Databases (each part names the one it used in the output):
* with the stack: a throwaway PostgreSQL and Redis from `scripts/services.sh start`, stopped at the end,
  used for every part; or, when DATABASE_URL and REDIS_URL are both set, those (the database is flushed);
* `--no-stack`: a temporary SQLite file (the embedded default), or DATABASE_URL if set (flushed).
Never point DATABASE_URL at a database you care about.

Benchmarks print figures; they never fail on a time. `goals` in the output says whether the product's goal
figures were met (placement p99 under 1 ms at 72,000 GPUs, dashboards p95 under 300 ms and a scheduling
pass that starts ~200 jobs under 150 ms and the fleet's stranded capacity under 50 ms at 1,000 racks).
`--only PART[,PART...]` measures only some parts
(pages, search, estimates, placement, pass, render, recarve, ingest, fabric, submission, telemetry); seeding
always runs. `recarve` applies one-rack plans and times them until pushed (benchmarks/recarve_push.py);
`fabric`: ibnetdiscover output of a few hundred switches read and previewed (benchmarks/fabric_discovery.py;
the goal: read in under a second).
Search p95 is aimed under 100 ms at 1,000 racks (benchmarks/search.py); `estimates` replays a workload to
measure estimated starts against real ones (benchmarks/estimates.py; the ITP halves too with $ITP_TRACES).
"""

import argparse
import contextlib
import json
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import (  # noqa: E402  (after the path: runs as a script)
    discovery,
    estimates,
    fabric_discovery,
    growth,
    recarve_push,
    search,
    stack,
    telemetry,
)

PLACEMENT_GOAL_US = 1000
DASHBOARD_GOAL_MS = 300
PASS_GOAL_MS = 150
STRANDED_GOAL_MS = 50
STRANDED_RUNS = 20  # timed computations of the fleet's stranded capacity (the median is reported)
WARM_PASSES = 5  # timed passes with the cluster kept (the median is reported)
# What `--only` may pick; `submission` needs the stack (not --no-stack).
PARTS = (
    *("pages", "search", "estimates", "placement", "pass", "render", "recarve"),
    *("ingest", "fabric", "submission", "telemetry"),
)
# Request mix for placement decisions: (GPUs, weight); above one tray the topology is drawn from TOPOLOGY_MIX.
SIZE_MIX = ((1, 20), (2, 10), (4, 15), (8, 15), (16, 12), (32, 10), (36, 8), (64, 10))
TOPOLOGY_MIX = (("partition", 60), ("rack", 25), ("any", 15))

log = stack.log
percentile = stack.percentile


def python_loop_ms() -> float:
    """This machine's speed now: the best of three runs of a fixed pure-Python loop (3 million additions of
    squares), in ms. A shared machine's speed moves (by a third within an hour on the 2-core one the
    README's figures come from): the figures of two runs compare only at about the same loop time."""
    best = math.inf
    for _ in range(3):
        started = time.perf_counter()
        total = 0
        for i in range(3_000_000):
            total += i * i
        best = min(best, (time.perf_counter() - started) * 1000)
    return round(best, 1)


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        ram = 0
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu_model": cpu,
        "nproc": nproc,
        "ram_gib": round(ram / 2**30, 1),
        "arch": platform.machine(),
        "os": platform.platform(terse=True),
        "python": platform.python_version(),
        "python_loop_ms": python_loop_ms(),  # at the start; `python_loop_ms_after` at the end
    }


def database_label(origin: str) -> str:
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            version = cursor.fetchone()[0].split()[0]
        return f"PostgreSQL {version} ({origin})"
    if connection.vendor == "sqlite":
        import sqlite3

        return f"SQLite {sqlite3.sqlite_version} ({origin})"
    return f"{connection.vendor} ({origin})"


def latency(client, urls: list[str]) -> dict:
    """Wall-clock p50/p95 of GETs of `urls`, and their CPU time: this process's (the view, templates) plus
    the PostgreSQL backend's serving it (`backend_cpu_ms`; parallel query workers not counted), which on
    a shared machine says what a request costs when wall time is mostly waiting for a core."""
    client.get(urls[0])  # warm caches and templates once
    backend = backend_cpu_ms()
    samples, cpu = [], []
    for url in urls:
        started, process, database = time.perf_counter(), time.process_time(), backend()
        response = client.get(url)
        samples.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - process) * 1000 + max(0.0, backend() - database))
        if response.status_code != 200:
            raise SystemExit(f"GET {url} answered {response.status_code}")
    return {
        "p50_ms": round(statistics.median(samples), 2),
        "p95_ms": round(percentile(samples, 0.95), 2),
        "cpu_p50_ms": round(statistics.median(cpu), 2),
        "cpu_p95_ms": round(percentile(cpu, 0.95), 2),
        "requests": len(samples),
    }


# --- placement decisions ---------------------------------------------------------------------------------


def random_requests(rng: random.Random, departments: list[str], count: int) -> list:
    from scheduling.engine.placement import ANY, Request

    sizes = [size for size, _ in SIZE_MIX]
    size_weights = [weight for _, weight in SIZE_MIX]
    topologies = [topology for topology, _ in TOPOLOGY_MIX]
    topology_weights = [weight for _, weight in TOPOLOGY_MIX]
    requests = []
    for _ in range(count):
        gpus = rng.choices(sizes, size_weights)[0]
        topology = ANY if gpus <= 4 else rng.choices(topologies, topology_weights)[0]
        requests.append(Request(gpus, topology, rng.choice(departments)))
    return requests


def measure_placement(rng: random.Random, decisions: int, fill: float) -> dict:
    """Single `place()` decisions (rackplane policy) on the cluster the portal builds (read cold by
    `pass_cluster.load_cluster`), with the seeded running jobs allocated, brought to `fill` of its GPUs held
    and kept there: before each decision a random job ends while the cluster is above `fill`; every decision
    that fits is allocated."""
    from scheduling.engine.placement import PARTITION, RACKPLANE, Request, place
    from scheduling.engine.stranded import stranded
    from scheduling.pass_cluster import load_cluster
    from tenancy.models import Department

    started = time.perf_counter()
    cluster, _ = load_cluster()
    load_ms = (time.perf_counter() - started) * 1000
    departments = [*Department.objects.order_by("slug").values_list("slug", flat=True), None]

    def used() -> float:
        return (cluster.capacity - cluster.free_gpus) / cluster.capacity if cluster.capacity else 0.0

    seeded_fill = used()
    running = list(cluster.jobs)
    next_id = 10**9

    def end_one() -> None:
        index = rng.randrange(len(running))
        running[index], running[-1] = running[-1], running[index]
        cluster.release(running.pop())

    # Top up to the fill (untimed).
    misses = 0
    while used() < fill and misses < 500:
        for request in random_requests(rng, departments, 100):
            placement = place(cluster, request, RACKPLANE)
            if placement is None:
                misses += 1
                continue
            next_id += 1
            cluster.allocate(next_id, placement)
            running.append(next_id)
            if used() >= fill:
                break

    samples: list[int] = []
    by_size: dict[int, list[int]] = {}
    placed = 0
    fills = []
    waiting = []  # the requests that did not fit: the queue the stranded capacity is judged against
    for request in random_requests(rng, departments, decisions):
        while running and used() > fill:
            end_one()
        fills.append(used())
        started_ns = time.perf_counter_ns()
        placement = place(cluster, request, RACKPLANE)
        elapsed_ns = time.perf_counter_ns() - started_ns
        samples.append(elapsed_ns)
        by_size.setdefault(request.gpus, []).append(elapsed_ns)
        if placement is not None:
            placed += 1
            next_id += 1
            cluster.allocate(next_id, placement)
            running.append(next_id)
        else:
            waiting.append(request)
    samples_us = [ns / 1000 for ns in samples] or [0.0]
    return {
        "policy": RACKPLANE,
        "gpus": cluster.capacity,
        "trays": len(cluster),
        "load_cluster_ms": round(load_ms, 1),
        "seeded_fill": round(seeded_fill, 3),
        "target_fill": fill,
        "steady_fill_mean": round(statistics.fmean(fills), 3) if fills else 0.0,
        "decisions": len(samples),
        "placed": placed,
        "did_not_fit": len(samples) - placed,
        "p50_us": round(statistics.median(samples_us), 1),
        "p99_us": round(percentile(samples_us, 0.99), 1),
        "max_us": round(max(samples_us), 1),
        "p99_us_by_gpus": {
            str(size): round(percentile([ns / 1000 for ns in values], 0.99), 1)
            for size, values in sorted(by_size.items())
        },
        "jobs_running_at_end": len(cluster.jobs),
        # Stranded capacity against a queue: the requests that did not fit and 200 more of the same mix (a
        # pass's pending jobs); and against one 72-GPU gang for one partition, the costliest case (every
        # partition with free trays short of it is looked into, tray by tray).
        "stranded": {
            "queue": measure_stranded(cluster, waiting + random_requests(rng, departments, 200), stranded),
            "rack_gang_waiting": measure_stranded(cluster, [Request(72, PARTITION)], stranded),
        },
    }


def measure_stranded(cluster, waiting: list, stranded) -> dict:
    """The fleet's stranded NVLink capacity (scheduling.engine.stranded, what each pass computes) on the
    cluster as the placement decisions left it, against `waiting` (their distinct shapes are judged), timed
    `STRANDED_RUNS` times."""
    samples = []
    for _ in range(STRANDED_RUNS):
        started = time.perf_counter()
        result = stranded(cluster, waiting)
        samples.append((time.perf_counter() - started) * 1000)
    return {
        "waiting_requests": len(waiting),
        "waiting_shapes": result.waiting_shapes,
        "free_gpus": result.free_gpus,
        "stranded_gpus": result.stranded_gpus,
        "by_cause": result.by_cause,
        "largest_partition_gang": result.largest_partition_gang,
        "largest_rack_gang": result.largest_rack_gang,
        "p50_ms": round(statistics.median(samples), 2),
        "max_ms": round(max(samples), 2),
    }


# --- one scheduling pass ---------------------------------------------------------------------------------


def backend_cpu_ms():
    """A function giving the CPU time (user + system, ms) of the database backend process this connection
    talks to, -1 when it cannot be read (not PostgreSQL, or another host)."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return lambda: -1.0
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    ticks = os.sysconf("SC_CLK_TCK")

    def read() -> float:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return -1.0
        return (int(fields[11]) + int(fields[12])) * 1000 / ticks  # utime, stime

    return read


def _statement(sql: str) -> str:
    """A query's kind and table, for the per-query split: 'SELECT scheduling_job', 'INSERT ...'."""
    words = sql.split()
    head = words[0].upper() if words else "?"
    if head == "UPDATE" and len(words) > 1:
        return f"UPDATE {words[1].strip(chr(34))}"
    for keyword in ("INTO", "FROM"):
        for i, word in enumerate(words[:-1]):
            if word.upper() == keyword:
                return f"{head} {words[i + 1].strip(chr(34))}"
    return " ".join(words[:3])


BENCH_UNIT_RACKS = 4  # racks per scalable unit of the fabric the pass is measured on (as the demo's)
BENCH_SPINE_UNITS = 8  # units per spine group


def use_bench_fabric():
    """Import a fabric above the seeded racks and put it in use, as a site that imported one (issue 33) has:
    units of BENCH_UNIT_RACKS racks in name order, BENCH_SPINE_UNITS units per spine group; the pass places
    multi-rack jobs on it and reads it (a row per rack) when it reads its cluster. Returns the import (the
    caller deletes it), or None when a fabric is in use already (kept as it is)."""
    from inventory import fabric_import
    from inventory.discovery.fabric.site_file import parse
    from inventory.models import FabricImport, Rack

    if FabricImport.objects.filter(in_use=True).exists():
        return None
    lines = ["spine_group,unit,rack"]
    for n, rack in enumerate(Rack.objects.order_by("name").values_list("name", flat=True)):
        unit = n // BENCH_UNIT_RACKS
        lines.append(f"spine-{unit // BENCH_SPINE_UNITS + 1},su-{unit + 1},{rack}")
    fabric_import.apply(parse("\n".join(lines) + "\n", "bench-fabric.csv"), label="benchmark", use=True)
    return FabricImport.objects.get(in_use=True)


def measure_pass(rng: random.Random, pending: int, profile: str | None = None) -> dict:
    """`run_pass()` on the seeded database with `pending` more jobs waiting (mixed shapes, every department),
    right after another pass that started as many (whose starts a kept cluster catches up with, as in a
    worker where every pass follows one), both in a transaction that is rolled back: the database is
    unchanged afterwards and no dispatch task is sent. An untimed round warms the process up (lazy imports,
    as in a worker that has been running for a while). Then the timed passes: one that reads the cluster
    cold (a worker's first pass, or the first after the inventory changed), then WARM_PASSES that find the
    cluster their process kept (PostgreSQL: scheduling.pass_cache; on SQLite every pass reads cold), of
    which the median is reported. Each is split into the engine (`schedule()`), the database (time in the
    driver's execute, every query of the pass counted) and the rest (Python around them: the engine's
    inputs, the cluster read, the writes' objects), with the CPU time of this process and of the database
    backend. The foreign-key checks its commit would make are made (and counted) before the rollback; the
    dispatch messages sent after a commit are not (they leave after the scheduler's lock is released)."""
    from django.db import connection, transaction

    from scheduling import pass_cache, pass_inputs
    from scheduling.models import Job, SchedulingRequest
    from scheduling.services import passes as services
    from tenancy.models import Department

    by_slug = {d.slug: d for d in Department.objects.order_by("slug")}
    requests = random_requests(rng, list(by_slug), pending)
    # The engine is timed where the pass calls it (PassInputs.decide: scheduling.pass_inputs.schedule).
    originals = {"engine": pass_inputs.schedule, "read_cluster": pass_cache.read}

    def add_jobs(prefix: str) -> None:
        Job.objects.bulk_create(
            Job(
                department=by_slug[request.department],
                name=f"{prefix}-{number:04d}",
                gpus=request.gpus,
                topology=request.topology,
                pending_reason="waiting for the scheduler",
            )
            for number, request in enumerate(requests)
        )

    def immediate_checks() -> None:
        """Make the foreign-key checks a commit would (deferred until then): the passes are rolled back."""
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
                cursor.execute("SET CONSTRAINTS ALL DEFERRED")

    def one_pass(cold: bool = False, profiler=None, change: bool = False) -> tuple[dict, object, int]:
        """A pass after another one (its starts are what a kept cluster catches up with, as every pass
        of a worker does), timed."""
        timings = {"engine": 0.0, "read_cluster": 0.0, "database": 0.0, "queries": 0}
        statements: dict[str, float] = {}

        def timed(name):
            def wrapper(*args, **kwargs):
                started = time.perf_counter()
                try:
                    return originals[name](*args, **kwargs)
                finally:
                    timings[name] += (time.perf_counter() - started) * 1000

            return wrapper

        def database(execute, sql, params, many, context):
            started = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                spent = (time.perf_counter() - started) * 1000
                timings["database"] += spent
                timings["queries"] += 1
                kind = _statement(sql)
                statements[kind] = statements.get(kind, 0.0) + spent

        backend = backend_cpu_ms()
        with transaction.atomic():
            add_jobs("bench-before")
            services.run_pass()
            immediate_checks()
            if cold:
                pass_cache.forget()
            if change:  # a typical change: one GPU of one rack turns unhealthy (its rack is read again)
                from inventory.models import Gpu

                gpu = (
                    Gpu.objects.filter(tray__partition__isnull=False, health="healthy").order_by("pk").first()
                )
                if gpu is not None:
                    Gpu.objects.filter(pk=gpu.pk).update(health="unhealthy")
            add_jobs("bench-pass")
            waiting = Job.objects.filter(state="pending").count()
            SchedulingRequest.objects.create(reason="benchmark")
            pass_inputs.schedule, pass_cache.read = timed("engine"), timed("read_cluster")
            try:
                with connection.execute_wrapper(database):
                    database_cpu = backend()
                    cpu, started = time.process_time(), time.perf_counter()
                    if profiler is not None:
                        profiler.enable()
                    summary = services.run_pass()
                    immediate_checks()
                    if profiler is not None:
                        profiler.disable()
                    wall_ms = (time.perf_counter() - started) * 1000
                    cpu_ms = (time.process_time() - cpu) * 1000
                    database_cpu_ms = backend() - database_cpu
            finally:
                pass_inputs.schedule, pass_cache.read = originals["engine"], originals["read_cluster"]
            transaction.set_rollback(True)
        # The cluster read is partly database time: the engine and the database do not overlap it.
        figures = {
            "run_pass_ms": round(wall_ms, 1),
            "engine_ms": round(timings["engine"], 1),
            "database_ms": round(timings["database"], 1),
            "rest_ms": round(wall_ms - timings["engine"] - timings["database"], 1),
            "queries": timings["queries"],
            "read_cluster_ms": round(timings["read_cluster"], 1),
            # CPU time: what the pass costs on an idle machine (the benchmark's may be shared), this process
            # and the PostgreSQL backend serving it (read from /proc: same host only).
            "cpu_ms": round(cpu_ms, 1),
            "database_cpu_ms": round(database_cpu_ms, 1) if database_cpu_ms >= 0 else None,
            "cluster": "read cold" if summary is None or summary.cold else "kept from the last pass",
            # The database time by statement (kind and first table), slowest first.
            "query_ms": {
                kind: round(ms, 1) for kind, ms in sorted(statements.items(), key=lambda kv: -kv[1])
            },
        }
        return figures, summary, waiting

    fabric = use_bench_fabric()
    try:
        one_pass()  # warm-up, untimed
        cold, _, _ = one_pass(cold=True)
        changed, changed_summary, _ = one_pass(change=True)
        changed["racks_read_again"] = changed_summary.reread if changed_summary else None
        runs = [one_pass() for _ in range(WARM_PASSES)]
        if profile:  # one more warm pass under cProfile (not among the timed ones: the profiler slows it)
            import cProfile
            import io
            import pstats

            profiler = cProfile.Profile()
            one_pass(profiler=profiler)
            profiler.dump_stats(f"{profile}.pstats")  # for snakeviz or pstats
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(60)
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(40)
            Path(profile).write_text(out.getvalue())
            log(f"profile of one warm pass written to {profile}")
    finally:
        if fabric is not None:
            fabric.delete()
    # The median pass by wall time stands for all; CPU times are their own medians (the backend's is
    # counted in clock ticks, 10 ms each; a pass in which the garbage collector ran is an outlier).
    runs.sort(key=lambda run: run[0]["run_pass_ms"])
    warm, summary, waiting = runs[len(runs) // 2]
    for name in ("cpu_ms", "database_cpu_ms"):
        values = [run[0][name] for run in runs if run[0][name] is not None]
        warm[name] = round(statistics.median(values), 1) if values else None
    return {
        "pending_jobs": waiting,
        **warm,
        "passes_ms": [run[0]["run_pass_ms"] for run in runs],
        "started": summary.started if summary else None,
        "preempted": summary.preempted if summary else None,
        "waiting": summary.waiting if summary else None,
        "decisions": summary.decisions if summary else None,
        "cold": cold,
        # One pass after one GPU's health changed: the kept cluster re-reads that rack only (PostgreSQL;
        # scheduling.pass_cache), the "pass after a typical change".
        "after_one_rack_change": changed,
        "note": (
            f"the median of {WARM_PASSES} passes, each after a pass that started as many jobs, after one "
            "that read the cluster cold (under cold); all rolled back: the database stays as seeded"
        ),
    }


# --- configuration rendering -----------------------------------------------------------------------------


def measure_render() -> dict:
    """`render_current()` for the whole inventory, split into `build_state` (queries) and `render_files`."""
    from integrations.state import build_state, render_files

    started = time.perf_counter()
    state = build_state()
    built = time.perf_counter()
    files = render_files(state)
    rendered = time.perf_counter()
    sizes = {path: len(text.encode()) for path, text in files.items()}
    largest = max(sizes, key=sizes.get) if sizes else None
    return {
        "racks": state.rack_count,
        "build_state_ms": round((built - started) * 1000, 1),
        "render_files_ms": round((rendered - built) * 1000, 1),
        "total_ms": round((rendered - started) * 1000, 1),
        "files": len(files),
        "bytes": sum(sizes.values()),
        "largest_file": {"path": largest, "bytes": sizes[largest]} if largest else None,
    }


# --- main ------------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--racks", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=60, help="requests per measured page or endpoint")
    parser.add_argument("--reports", type=int, default=500, help="node reports to ingest")
    parser.add_argument(
        "--discovery-clients",
        type=int,
        default=4,
        help="HTTP clients posting node reports (benchmarks/discovery.py)",
    )
    parser.add_argument(
        "--telemetry-seconds", type=float, default=120, help="how long Prometheus collects before the cycle"
    )
    parser.add_argument("--telemetry-scrapes", type=int, default=500, help="direct scrapes timed")
    parser.add_argument(
        "--telemetry-scrape-seconds",
        type=float,
        default=telemetry.SCRAPE_SECONDS,
        help="Prometheus's scrape interval (15 s, as DCGM exporter sites use; the tests use 1)",
    )
    parser.add_argument(
        "--telemetry-rule-seconds",
        type=float,
        default=telemetry.RULE_SECONDS,
        help="the recording rules' evaluation interval (60 s, the cycle's period)",
    )
    parser.add_argument(
        "--telemetry-cycles", type=int, default=telemetry.CYCLES, help="timed telemetry cycles per way"
    )
    parser.add_argument(
        "--telemetry-sources", default="prometheus,direct", help="which metrics sources to measure"
    )
    parser.add_argument(
        "--search-history-jobs",
        type=int,
        metavar="N",
        help="finished jobs added before the pages and search parts, so that every later figure is taken "
        "with them present (default: a year at the fleet's rate, 2.1 million at 1,000 racks, 21 million at "
        "10,000)",
    )
    parser.add_argument("--decisions", type=int, default=20000, help="timed placement decisions")
    parser.add_argument("--fill", type=float, default=0.65, help="share of GPUs held during the decisions")
    parser.add_argument("--pass-jobs", type=int, default=200, help="extra pending jobs for the timed pass")
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=growth.RESULTS_DIR,
        help="where the figures are stored and the 1,000-rack ones read (benchmarks/growth.py)",
    )
    parser.add_argument(
        "--baseline", metavar="FILE", help="stored figures to compare with (default: the 1,000-rack run's)"
    )
    parser.add_argument(
        "--reuse-seed",
        action="store_true",
        help="with DATABASE_URL: keep the racks and tenants an earlier run seeded there when their number is "
        "--racks (no flush; seed times not measured); e.g. one part at a time at 10,000 racks",
    )
    parser.add_argument("--profile", metavar="FILE", help="write a cProfile of one more warm pass to FILE")
    parser.add_argument(
        "--no-stack", action="store_true", help="skip job submission through gunicorn + Celery + Redis"
    )
    parser.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients submitting jobs")
    parser.add_argument("--jobs-per-client", type=int, default=40)
    parser.add_argument("--web-workers", type=int, default=min(9, 2 * nproc + 1), help="gunicorn workers")
    parser.add_argument("--worker-concurrency", type=int, default=max(2, nproc), help="Celery processes")
    parser.add_argument("--drain-timeout", type=float, default=600, help="seconds to wait for the worker")
    parser.add_argument(
        "--only",
        type=_parts,
        default=PARTS,
        metavar="PART[,PART...]",
        help=f"measure only these parts (seeding always runs): {', '.join(PARTS)}; e.g. --only pass",
    )
    return parser.parse_args(argv)


def _parts(text: str) -> tuple[str, ...]:
    parts = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [part for part in parts if part not in PARTS]
    if unknown or not parts:
        raise argparse.ArgumentTypeError(f"unknown part {', '.join(unknown) or text!r}: choose from {PARTS}")
    return parts


def main(argv=None) -> None:
    args = parse_args(argv)
    wall_started = time.perf_counter()
    scratch = tempfile.TemporaryDirectory(prefix="rackplane-bench-")
    services = stack.Services()
    try:
        figures = run(args, Path(scratch.name), services)
    finally:
        from django.apps import apps

        if apps.ready:  # PostgreSQL stops with our connections closed
            from django.db import connections

            connections.close_all()
        services.stop()
        scratch.cleanup()
    figures["wall_s"] = round(time.perf_counter() - wall_started, 1)
    figures["machine"]["python_loop_ms_after"] = python_loop_ms()
    figures["goals_at_10000_racks"] = growth.goals_at_10000(figures)
    parts = None if set(args.only) == set(PARTS) else tuple(args.only)
    baseline = Path(args.baseline) if args.baseline else growth.find_baseline(parts, args.results_dir)
    if figures["racks"] == growth.BASELINE_RACKS and not args.baseline:
        figures["growth_from_1000_racks"] = {"skipped": "this is the 1,000-rack run"}
    elif baseline is None:
        figures["growth_from_1000_racks"] = {
            "skipped": f"no stored 1,000-rack figures in {args.results_dir}: run `make bench` first"
        }
    else:
        stored = json.loads(baseline.read_text())
        figures["growth_from_1000_racks"] = growth.growth(figures, stored, str(baseline))
    log(f"figures stored in {growth.store(figures, parts, args.results_dir)}")
    print(json.dumps(figures, indent=2))


def fresh_telemetry() -> float:
    """Every GPU's utilization row moved forward to now (its sample and the start of its low run by the time
    since the latest sample), as the exporters a live site scrapes keep them; returns the shift in seconds.
    The seed samples every GPU once, and the year of jobs loaded after it takes longer than
    tenancy.activity.STALE_AFTER: left as seeded, every row is stale by the time the pages are timed, no
    GPU is idle and every held one has "no data", which is a site whose telemetry stopped, not the usual."""
    from django.db.models import F, Max
    from django.utils import timezone

    from tenancy.models import GpuActivity

    latest = GpuActivity.objects.aggregate(latest=Max("sampled_at"))["latest"]
    if latest is None:
        return 0.0
    shift = timezone.now() - latest
    GpuActivity.objects.update(sampled_at=F("sampled_at") + shift, low_since=F("low_since") + shift)
    return round(shift.total_seconds(), 1)


def measure_pages(args: argparse.Namespace, rng: random.Random) -> dict:
    """Page, dashboard and API latencies as an admin and as the largest department's lead."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from inventory.models import ComputeTray, Gpu
    from tenancy.models import Department, Membership

    user = get_user_model().objects.filter(
        username="bench"
    ).first() or get_user_model().objects.create_superuser("bench", "bench@example.com", "bench-password-1")
    client = Client()
    client.force_login(user)
    rack_names = [f"gb-r{n:0{max(2, len(str(args.racks)))}d}" for n in range(1, args.racks + 1)]
    gpu_pages = max(1, Gpu.objects.count() // 100)
    tray_pages = max(1, ComputeTray.objects.count() // 100)
    gpu_ids = list(Gpu.objects.values_list("pk", flat=True))
    figures = {
        "overview_page": latency(client, ["/"] * args.requests),
        "rack_list_page": latency(
            client,
            [
                f"/inventory/racks/?page={rng.randrange(1, max(2, args.racks // 50))}"
                for _ in range(args.requests)
            ],
        ),
        "rack_page": latency(
            client, [f"/inventory/racks/{rng.choice(rack_names)}/" for _ in range(args.requests)]
        ),
        "gpu_list_api": latency(
            client, [f"/api/v1/gpus/?page={rng.randrange(1, gpu_pages + 1)}" for _ in range(args.requests)]
        ),
        "gpu_list_api_filtered": latency(
            client,
            [f"/api/v1/gpus/?rack={rng.choice(rack_names)}&health=healthy" for _ in range(args.requests)],
        ),
        # The default since issue 32: a page at a random depth by cursor (no count, no OFFSET), as a client
        # following `next` from the first page reaches it (core.pagination.CursorOrPagePagination).
        "gpu_list_api_cursor": latency(
            client, [f"/api/v1/gpus/?cursor={gpu_cursor(rng.choice(gpu_ids))}" for _ in range(args.requests)]
        ),
        "tray_list_api": latency(
            client,
            [f"/api/v1/trays/?page={rng.randrange(1, max(2, tray_pages + 1))}" for _ in range(args.requests)],
        ),
    }
    # Department dashboards: the admin's (every department, capacity, idle GPUs cluster-wide) and one lead's
    # (the largest department, as its lead sees it). Before each, the beat's count of idle GPUs
    # (scheduling.usage.keep_idle_counts, every minute on a site), its time a figure of its own.
    figures["idle_counts_beat_ms"] = keep_idle_counts_ms()
    figures["admin_dashboard_page"] = latency(client, ["/tenancy/dashboard/"] * args.requests)
    keep_idle_counts_ms()
    figures["department_list_page"] = latency(client, ["/tenancy/departments/"] * args.requests)
    keep_idle_counts_ms()
    largest = Department.objects.order_by("-guaranteed_gpus", "name").first()
    lead = Membership.objects.filter(department=largest, role="lead").select_related("user").first().user
    lead_client = Client()
    lead_client.force_login(lead)
    figures["lead_dashboard_page"] = latency(
        lead_client, [f"/tenancy/departments/{largest.slug}/"] * args.requests
    )
    return figures


def keep_idle_counts_ms() -> float:
    """What the beat does every minute on a site (scheduling.usage.keep_idle_counts), timed."""
    from scheduling.usage import keep_idle_counts

    started = time.perf_counter()
    keep_idle_counts()
    return round((time.perf_counter() - started) * 1000, 1)


def gpu_cursor(pk: int) -> str:
    """The cursor of the GPU list page after GPU `pk` (core.pagination: the list's tag and the position),
    quoted for a URL."""
    from core.pagination import cursor_tag, encode_cursor_text
    from inventory.models import Gpu

    return urllib.parse.quote(encode_cursor_text(cursor_tag(Gpu, "pk"), position=pk))


def measure_ingest(args: argparse.Namespace, rng: random.Random) -> float:
    """Node reports per second: each report is one node's four GPUs, consistent or drifting, reconciled in
    one transaction."""
    from inventory.discovery.nvidia_smi import FabricState, GpuHealth, ReportedGpu
    from inventory.ingest.reports import ingest_report
    from inventory.models import ComputeTray

    tray_ids = rng.sample(
        list(ComputeTray.objects.values_list("pk", flat=True)), k=min(args.reports, args.racks * 18)
    )
    reports = []
    for tray in ComputeTray.objects.filter(pk__in=tray_ids).select_related("rack", "partition"):
        clique = tray.partition.clique_id if rng.random() < 0.9 else 7
        reports.append(
            (
                tray.hostname,
                [
                    ReportedGpu(
                        uuid=gpu_uuid,
                        index=index,
                        cluster_uuid=str(tray.rack.cluster_uuid),
                        clique_id=clique,
                        state=FabricState.COMPLETED,
                        status="Success",
                        health=GpuHealth.HEALTHY,
                    )
                    for gpu_uuid, index in tray.gpus.order_by("index").values_list("uuid", "index")
                ],
            )
        )
    started = time.perf_counter()
    for host, gpus in reports:
        ingest_report(host, "json", gpus)
    elapsed = time.perf_counter() - started
    return round(len(reports) / elapsed, 1)


def run(args: argparse.Namespace, scratch: Path, services: "stack.Services") -> dict:
    use_stack = not args.no_stack
    if use_stack and os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"):
        origin = "DATABASE_URL from the environment, flushed"
        broker_url = os.environ["REDIS_URL"]
    elif use_stack:
        env = services.start()
        os.environ["DATABASE_URL"] = env["DATABASE_URL"]
        broker_url = env["REDIS_URL"]
        origin = "throwaway, scripts/services.sh"
    elif os.environ.get("DATABASE_URL"):
        origin = "DATABASE_URL from the environment, flushed"
    else:
        os.environ["DATABASE_URL"] = f"sqlite:///{scratch}/bench.sqlite3"
        origin = "embedded default: a temporary file"
    # In this process Celery stays eager (no broker): only the stack's processes get CELERY_BROKER_URL. Not
    # this clone's var/dev.env either (`make run` names its filesystem broker there, which no worker reads
    # during a benchmark: a re-carve's pushes were left queued and the next plan refused as still applying).
    os.environ.pop("CELERY_BROKER_URL", None)
    os.environ["RACKPLANE_DEV_ENV"] = "0"
    os.environ.setdefault("DEBUG", "1")
    os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ["RACKPLANE_RENDER_DIR"] = str(scratch / "rendered")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from benchmarks.seeding import copy_seeding
    from inventory.demo import seed_datacenter
    from inventory.models import Gpu, Rack
    from portal.demo.seeding import seed_tenants
    from scheduling.models import Job
    from tenancy.models import Department

    settings.DEBUG = False  # no query log growing through the run
    database = database_label(origin)
    log(f"database: {database}; migrating")
    call_command("migrate", verbosity=0)
    reuse = args.reuse_seed and Rack.objects.count() == args.racks and Department.objects.exists()
    if not reuse:
        call_command("flush", interactive=False, verbosity=0)

    # PostgreSQL: the seed's rows go through COPY (benchmarks/seeding.py), the same rows bulk_create writes.
    seeding = copy_seeding() if connection.vendor == "postgresql" else contextlib.nullcontext()
    if reuse:  # --reuse-seed: the racks and tenants an earlier run seeded into DATABASE_URL
        log(f"reusing the {args.racks} racks seeded before (--reuse-seed)")
        seed_s = seed_tenants_s = None
        tenants = SimpleNamespace(departments=Department.objects.count(), jobs=Job.objects.count())
    else:
        log(f"seeding {args.racks} racks")
        with seeding:
            started = time.perf_counter()
            seed_datacenter(racks=args.racks)
            seed_s = time.perf_counter() - started
            # Departments, leads, jobs, telemetry and a day of quota history: data for the dashboards. Their
            # jobs' ids start past room for the year of finished jobs loaded before the pages (older jobs,
            # smaller ids: benchmarks/search.py reserve_history_ids).
            search.reserve_history_ids(args.racks, args.search_history_jobs)
            started = time.perf_counter()
            tenants = seed_tenants()
            seed_tenants_s = time.perf_counter() - started
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")

    parts = set(args.only)
    figures = {
        "racks": args.racks,
        "gpus": Gpu.objects.count(),
        "machine": machine(),
        "database": database,
        "seed_s": None if seed_s is None else round(seed_s, 2),
        "seeded_through": "reused (--reuse-seed)"
        if reuse
        else ("COPY (psycopg)" if connection.vendor == "postgresql" else "bulk_create"),
        "seed_tenants_s": None if seed_tenants_s is None else round(seed_tenants_s, 2),
        "departments": tenants.departments,
        "jobs": tenants.jobs,
    }
    if set(PARTS) - parts:
        figures["only"] = list(args.only)

    def rng_for(part: str) -> random.Random:
        """Each part draws from its own generator: `--only` one part measures what the full run does."""
        return random.Random(f"rackplane-bench-{part}")

    history: dict | None = None
    if parts & {"pages", "search"}:
        # A year of finished jobs first: the pages, the search and the parts after them see the database a
        # site has after a year, not a fleet that never ran a job.
        log("a year of finished jobs (benchmarks/search.py seed_job_history)")
        history = search.add_job_history(args.search_history_jobs)
    if "pages" in parts:
        log("pages and API latencies")
        figures["telemetry_brought_to_now_s"] = fresh_telemetry()
        figures.update(measure_pages(args, rng_for("pages")))
        figures["job_history"] = history
    if "search" in parts:
        log("global search latencies (benchmarks/search.py)")
        figures["search"] = {
            "database": database,
            **search.measure_search(rng_for("search"), args.requests, history=history),
        }
    # Before the pass part: its extra jobs may leave no rack without running work in a small fleet, and a
    # re-carve measured here needs no drain.
    if "recarve" in parts:
        log("a one-rack re-carve applied, rendered and pushed (benchmarks/recarve_push.py)")
        figures["recarve"] = {"database": database, **recarve_push.measure_recarve(scratch)}
    if "estimates" in parts:
        log("estimated starts against real starts in a replay (benchmarks/estimates.py)")
        figures["estimates"] = estimates.measure_estimates(rng_for("estimates"), os.environ.get("ITP_TRACES"))
    if "placement" in parts:
        log(f"placement: {args.decisions} decisions at {args.fill:.0%} fill")
        figures["placement"] = {
            "database": database,
            **measure_placement(rng_for("placement"), args.decisions, args.fill),
        }
    if "pass" in parts:
        log(f"one scheduling pass with {args.pass_jobs} more pending jobs")
        measured = measure_pass(rng_for("pass"), args.pass_jobs, args.profile)
        figures["scheduling_pass"] = {"database": database, **measured}
    if "render" in parts:
        log("config render")
        figures["config_render"] = {"database": database, **measure_render()}
    if "ingest" in parts:
        log(f"ingest: {args.reports} node reports")
        figures["ingest_reports_per_s"] = measure_ingest(args, rng_for("ingest"))
        log("discovery: changed, unchanged and hash-only reports (benchmarks/discovery.py)")
        figures["discovery"] = discovery.measure(
            args,
            rng_for("discovery"),
            use_stack=use_stack,
            database_url=os.environ.get("DATABASE_URL"),
            broker_url=broker_url if use_stack else None,
            scratch=scratch,
        )
    if "fabric" in parts:
        log("fabric discovery: ibnetdiscover output, a few hundred switches (benchmarks/fabric_discovery.py)")
        figures["fabric_discovery"] = {"database": database, **fabric_discovery.measure()}
    if "telemetry" in parts:
        log("telemetry: both metrics sources (benchmarks/telemetry.py)")
        figures["telemetry"] = {
            "database": database,
            **telemetry.measure_telemetry(
                scratch,
                args.telemetry_seconds,
                args.telemetry_scrapes,
                args.telemetry_sources.split(","),
                scrape_seconds=args.telemetry_scrape_seconds,
                rule_seconds=args.telemetry_rule_seconds,
                cycle_count=args.telemetry_cycles,
            ),
        }

    if "submission" not in parts:
        figures["job_submission"] = {"skipped": "--only"}
    elif use_stack:
        if connection.vendor != "postgresql":
            log(f"warning: the stack runs on {connection.vendor}, not PostgreSQL")
        figures["job_submission"] = {
            "database": database,
            **stack.run(
                database_url=os.environ["DATABASE_URL"],
                broker_url=broker_url,
                scratch=scratch,
                clients=args.clients,
                per_client=args.jobs_per_client,
                web_workers=args.web_workers,
                concurrency=args.worker_concurrency,
                drain_timeout=args.drain_timeout,
                rng=rng_for("submission"),
            ),
        }
    else:
        figures["job_submission"] = {"skipped": "--no-stack"}

    goals: dict = {"at_goal_scale": args.racks >= 1000}
    if "placement" in parts:
        goals["placement_p99_us"] = figures["placement"]["p99_us"]
        goals["placement_p99_under_1ms"] = figures["placement"]["p99_us"] < PLACEMENT_GOAL_US
        stranded_ms = max(measured["p50_ms"] for measured in figures["placement"]["stranded"].values())
        goals["stranded_fleet_ms"] = stranded_ms
        goals["stranded_fleet_under_50ms"] = stranded_ms < STRANDED_GOAL_MS
    if "pages" in parts:
        dashboards = [figures[k]["p95_ms"] for k in ("admin_dashboard_page", "lead_dashboard_page")]
        goals["dashboards_p95_ms"] = max(dashboards)
        goals["dashboards_p95_under_300ms"] = max(dashboards) < DASHBOARD_GOAL_MS
    if "search" in parts:
        goals["search_p95_ms"] = figures["search"]["p95_ms"]
        goals["search_p95_under_100ms"] = figures["search"]["p95_ms"] < search.SEARCH_GOAL_MS
    if "pass" in parts:
        goals["scheduling_pass_ms"] = figures["scheduling_pass"]["run_pass_ms"]
        goals["scheduling_pass_under_150ms"] = figures["scheduling_pass"]["run_pass_ms"] < PASS_GOAL_MS
    if "fabric_discovery" in figures and "parse_s" in figures["fabric_discovery"]:
        goals["fabric_discovery_parse_s"] = figures["fabric_discovery"]["parse_s"]
        goals["fabric_discovery_under_1s"] = figures["fabric_discovery"]["goal_met"]
    figures["goals"] = goals
    if use_stack and "submission" in parts:
        submission = figures["job_submission"]
        figures["goals"]["no_double_allocations"] = submission["double_allocations"] == 0
        figures["goals"]["no_lost_jobs"] = submission["lost_jobs"] == 0
    return figures


if __name__ == "__main__":
    main()
