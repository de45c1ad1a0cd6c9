"""Telemetry at fleet scale: cycle time and database growth per day, Prometheus source and direct source.

Run by benchmarks/scale.py (`--only telemetry`) after it seeded the inventory, in its Django process:

    .venv/bin/python benchmarks/scale.py --racks 1000 --only telemetry

* **Prometheus source**: starts the real ``prometheus`` binary (Debian's package) scraping test DCGM
  exporters (Python HTTP servers, EXPORTERS of them) that serve every seeded GPU's
  ``DCGM_FI_DEV_GPU_UTIL`` (72,000 series at 1,000 racks), every SCRAPE_SECONDS
  (``--telemetry-scrape-seconds`` changes it: the tests use 1 s, so Prometheus has every series at once); lets
  it collect for
  ``--telemetry-seconds``, then times the cycle (tenancy.metrics_source.poll: its two fleet-wide figures, and
  the activity rows written) each way it can read them (tenancy.prometheus.Way): from the recording rules
  Rackplane ships (deploy/prometheus/rackplane-rules.yml, loaded into this Prometheus, evaluated every
  ``--telemetry-rule-seconds``), from the raw metric in chunks by GPU index, and in one raw query; each
  query's own time and the samples it read (the query API's ``stats=all``); Prometheus's series, memory and
  the rules' evaluation time (its /metrics); and a 24-hour chart range query for one job's 72 GPUs.
  What the portal stores: the activity rows (one per GPU, updated in place), so per-GPU storage does not
  grow with time.
* **Direct source**: every tray's exporter is scraped every minute (18,000 scrapes a minute at 1,000 racks).
  Times real scrapes (HTTP GET of a 4-GPU page from a local exporter, parse, record_samples into the
  buckets) over a sample of trays and scales to the fleet; measures the bytes of a bucket row in this
  database and the hourly downsampling task (tenancy.activity.downsample_history) over an hour of the
  fleet's buckets, then gives the rows and bytes a day adds, before and after downsampling.

Figures only; nothing here fails on a time.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

EXPORTERS = 8
SCRAPE_SECONDS = 15
RULE_SECONDS = 60  # the rules' evaluation interval: the cycle's period
RULES = Path(__file__).resolve().parents[1] / "deploy" / "prometheus" / "rackplane-rules.yml"
CYCLES = 3  # timed cycles per way
BUCKETS_PER_DAY = 288


def _log(message: str) -> None:
    print(f"[telemetry] {message}", file=sys.stderr, flush=True)


class _Pages:
    """Exporter pages, re-rendered with new values now and then (what a fleet's exporters serve)."""

    def __init__(self, groups: list[list[str]]):
        self.groups = groups
        self.pages = [b""] * len(groups)
        self.render(0)

    def render(self, tick: int) -> None:
        for number, uuids in enumerate(self.groups):
            lines = [
                "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
                "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
            ]
            for index, uuid in enumerate(uuids):
                value = (index * 7 + tick) % 100 if index % 5 else 1  # every fifth GPU idle
                lines.append(
                    f'DCGM_FI_DEV_GPU_UTIL{{gpu="{index % 4}",UUID="{uuid}",Hostname="node-{index // 4}",'
                    f'modelName="NVIDIA GB200"}} {value}'
                )
            self.pages[number] = ("\n".join(lines) + "\n").encode()


def _serve(handler_page) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = handler_page()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _address(server) -> str:
    host, port = server.server_address[:2]
    return f"{host}:{port}"


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _query_stats(url: str, promql: str, at: float) -> dict:
    """One instant query with the query API's statistics: wall seconds, series answered, samples read."""
    import json
    import urllib.error
    import urllib.parse
    import urllib.request

    body = urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}", "stats": "all"}).encode()
    cpu = _own_metrics(url)["cpu_s"]
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query", data=body, timeout=600) as answer:
            data = json.loads(answer.read())["data"]
    except urllib.error.HTTPError as error:  # Prometheus's own query timeout (2 minutes) at this size
        said = json.loads(error.read() or b"{}").get("error", str(error))
        return {
            "s": round(time.perf_counter() - started, 3),
            "error": said,
            "samples_read": None,
            "series": 0,
        }
    seconds = time.perf_counter() - started
    samples = data.get("stats", {}).get("samples", {})
    return {
        "s": round(seconds, 3),
        # Prometheus's CPU meanwhile (its scrapes and rule evaluations too, if any run then)
        "prometheus_cpu_s": round(_own_metrics(url)["cpu_s"] - cpu, 3),
        "series": len(data.get("result") or []),
        "samples_read": samples.get("totalQueryableSamples"),
        "peak_samples": samples.get("peakSamples"),
    }


def _own_metrics(url: str) -> dict:
    """Prometheus's own figures from its /metrics: series in memory, resident memory, the rules' last
    evaluation."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=60) as answer:
        text = answer.read().decode()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (
                "prometheus_tsdb_head_series",
                "process_resident_memory_bytes",
                "process_cpu_seconds_total",
            ):
                values[sample.name] = sample.value
            elif sample.name in (
                "prometheus_rule_group_last_duration_seconds",
                "prometheus_rule_group_last_evaluation_samples",
            ):
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return {
        "head_series": int(values.get("prometheus_tsdb_head_series", 0)),
        "cpu_s": values.get("process_cpu_seconds_total", 0.0),
        "resident_memory_mb": round(values.get("process_resident_memory_bytes", 0) / 2**20),
        "rules_last_evaluation_s": round(values.get("prometheus_rule_group_last_duration_seconds", 0), 3),
        "rules_last_evaluation_samples": int(values.get("prometheus_rule_group_last_evaluation_samples", 0)),
    }


def _ways(url: str, source, idle_minutes: int, at: float) -> dict:
    """Each way's queries for one cycle, timed one by one with the samples each read."""
    from tenancy.metrics_source import config_for

    config = config_for(source)
    window = source.window_seconds
    chunks = [
        {
            "now": _query_stats(url, config.utilization_now(window, shard), at),
            **dict(
                zip(
                    ("low_highest", "low_reporting"),
                    (_query_stats(url, q, at) for q in config.low_parts(idle_minutes, window, shard)),
                    strict=True,
                )
            ),
        }
        for shard in config.shards()
    ]
    return {
        "recorded": {
            "now": _query_stats(url, config.recorded(config.recorded_now(window)), at),
            "low": _query_stats(url, config.recorded(config.recorded_low(idle_minutes)), at),
        },
        "single": {
            "now": _query_stats(url, config.utilization_now(window), at),
            "low": _query_stats(url, config.low_for_window(idle_minutes, window), at),
        },
        "chunked": {
            "queries": 3 * len(chunks),
            "s": round(sum(query["s"] for chunk in chunks for query in chunk.values()), 3),
            "largest_query_series": max(query["series"] for chunk in chunks for query in chunk.values()),
            "largest_query_samples_read": max(
                query["samples_read"] or 0 for chunk in chunks for query in chunk.values()
            ),
            "samples_read": sum(query["samples_read"] or 0 for chunk in chunks for query in chunk.values()),
        },
    }


def measure_prometheus(
    scratch: Path,
    collect_seconds: float,
    scrape_seconds: float = SCRAPE_SECONDS,
    rule_seconds: float = RULE_SECONDS,
    cycle_count: int = CYCLES,
) -> dict:
    from django.db import connection
    from django.utils import timezone

    from inventory.models import Gpu
    from tenancy.choices import MetricsSourceKind
    from tenancy.metrics_source import client_for, config_for, poll, utilization_history
    from tenancy.models import GpuActivity, MetricsSource, TenancySettings
    from tenancy.prometheus import Way

    binary = shutil.which("prometheus")
    if binary is None:
        return {"skipped": "no prometheus binary: apt-get install -y --no-install-recommends prometheus"}
    uuids = list(Gpu.objects.order_by("pk").values_list("uuid", flat=True))
    size = -(-len(uuids) // EXPORTERS)
    pages = _Pages([uuids[start : start + size] for start in range(0, len(uuids), size)])
    servers = [_serve(lambda number=number: pages.pages[number]) for number in range(len(pages.groups))]
    directory = scratch / "prometheus"
    directory.mkdir()
    targets = ", ".join(f'"{_address(server)}"' for server in servers)
    (directory / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: {scrape_seconds:g}s\n  scrape_timeout: {min(10, scrape_seconds):g}s\n"
        f"  evaluation_interval: {rule_seconds:g}s\n"
        f"rule_files:\n  - {RULES}\n"
        f"scrape_configs:\n  - job_name: dcgm\n    static_configs:\n      - targets: [{targets}]\n"
    )
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = (directory / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    stop = threading.Event()

    def change_values():
        tick = 0
        while not stop.wait(scrape_seconds):
            tick += 1
            pages.render(tick)

    threading.Thread(target=change_values, daemon=True).start()
    try:
        source = MetricsSource.load()
        source.kind, source.url, source.timeout_seconds = MetricsSourceKind.PROMETHEUS, url, 600
        source.save()
        client, config = client_for(source), config_for(source)
        deadline = time.monotonic() + 300
        while True:
            try:
                rows = client.query(f"count({config.metric})")
                if rows and rows[0][1] >= len(uuids):
                    break
            except Exception:  # not up yet
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                return {"skipped": "prometheus did not scrape every GPU within 5 minutes"}
            time.sleep(1)
        _log(f"prometheus has {len(uuids)} series; collecting for {collect_seconds:.0f} s")
        time.sleep(collect_seconds)

        idle_minutes = TenancySettings.load().idle_window_minutes
        recorded = config.recorded(config.recorded_now(source.window_seconds))
        deadline = time.monotonic() + 3 * rule_seconds + 300
        while (client.query(f"count({recorded})") or [({}, 0)])[0][1] < len(uuids):  # rules evaluated
            if time.monotonic() > deadline:
                return {"skipped": "the recording rules did not answer for every GPU"}
            time.sleep(5)
        own = _own_metrics(url)
        queries = _ways(url, source, idle_minutes, time.time())
        cycles: dict[str, list[float]] = {}
        errors = {}
        for way in (Way.RECORDED, Way.CHUNKED, Way.SINGLE):
            for _ in range(cycle_count):
                result = poll(source=source, way=way)
                if result.error:  # one way failing (a timeout at this size) leaves the others measured
                    errors[way] = result.error
                    break
                cycles.setdefault(way, []).append(result.seconds)
        auto = poll(source=source)
        job = uuids[:72]
        end = timezone.now()
        started = time.perf_counter()
        series, step = utilization_history(job, end - timedelta(hours=24), end, source=source)
        chart_s = time.perf_counter() - started
        activity_bytes = None
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_total_relation_size('tenancy_gpuactivity')")
                activity_bytes = cursor.fetchone()[0]
        return {
            "gpus": len(uuids),
            "series_in_prometheus": int(rows[0][1]),
            "scrape_interval_s": scrape_seconds,
            "rule_evaluation_interval_s": rule_seconds,
            "collected_s": collect_seconds,
            "idle_window_minutes": idle_minutes,
            "prometheus": own,
            "read_by_default": {"now": auto.way_now, "low": auto.way_low, "queries": auto.queries},
            "cycle_s": {
                way: {"median": round(statistics.median(times), 3), "all": [round(t, 3) for t in times]}
                for way, times in cycles.items()
            },
            "queries": queries,
            "errors": errors,
            "activity_rows": GpuActivity.objects.count(),
            "activity_table_bytes": activity_bytes,
            "per_gpu_rows_added_per_day": 0,
            "job_chart_24h_72_gpus_s": round(chart_s, 3),
            "job_chart_step_s": step,
            "job_chart_points": sum(len(points) for points in series.values()),
        }
    finally:
        stop.set()
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
        for server in servers:
            server.shutdown()
            server.server_close()
        from tenancy.choices import MetricsSourceKind
        from tenancy.models import MetricsSource

        MetricsSource.objects.filter(pk=1).update(kind=MetricsSourceKind.DIRECT)


def measure_direct(scrapes: int) -> dict:
    from django.db import connection
    from django.utils import timezone

    from inventory.models import ComputeTray, Gpu
    from tenancy.activity import MAX_ROWS_PER_GPU, downsample_history, record_samples
    from tenancy.models import GpuUtilization
    from tenancy.tasks import fetch
    from tenancy.telemetry import parse_dcgm

    trays = list(ComputeTray.objects.order_by("pk").values_list("pk", flat=True))
    gpus_by_tray: dict[int, list[str]] = {}
    for tray_id, uuid in Gpu.objects.filter(tray__isnull=False).values_list("tray_id", "uuid"):
        gpus_by_tray.setdefault(tray_id, []).append(uuid)
    sample = [tray for tray in trays if tray in gpus_by_tray][:scrapes]
    current = {"tray": sample[0]}

    def page():
        lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
        for index, uuid in enumerate(gpus_by_tray[current["tray"]]):
            lines.append(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{index}",UUID="{uuid}",Hostname="n"}} {17 + index}')
        return ("\n".join(lines) + "\n").encode()

    server = _serve(page)
    try:
        times = []
        for tray in sample:
            current["tray"] = tray
            started = time.perf_counter()
            record_samples(parse_dcgm(fetch(f"http://{_address(server)}/metrics")))
            times.append(time.perf_counter() - started)
    finally:
        server.shutdown()
        server.server_close()
    per_scrape = statistics.mean(times)
    fleet_trays = len(gpus_by_tray)
    gpus = sum(len(uuids) for uuids in gpus_by_tray.values())

    # An hour of the fleet's 5-minute buckets, a day old: the bytes of a row, and what downsampling costs.
    gpu_ids = list(Gpu.objects.values_list("pk", flat=True))
    GpuUtilization.objects.all().delete()
    hour = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(days=2)
    started = time.perf_counter()
    for bucket in range(12):
        GpuUtilization.objects.bulk_create(
            (
                GpuUtilization(
                    gpu_id=gpu_id, bucket_start=hour + timedelta(minutes=5 * bucket), mean=40, peak=60
                )
                for gpu_id in gpu_ids
            ),
            batch_size=5000,
        )
    insert_hour_s = time.perf_counter() - started
    rows = GpuUtilization.objects.count()
    row_bytes = None
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_total_relation_size('tenancy_gpuutilization')")
            row_bytes = cursor.fetchone()[0] / rows
    started = time.perf_counter()
    result = downsample_history()
    downsample_s = time.perf_counter() - started
    GpuUtilization.objects.all().delete()

    rows_per_day = gpus * BUCKETS_PER_DAY
    steady_rows = gpus * (BUCKETS_PER_DAY + 24)  # a day of 5-minute buckets + the next day's hourly ones
    figures = {
        "gpus": gpus,
        "scrapes_per_minute": fleet_trays,
        "scrapes_timed": len(times),
        "scrape_ms": {
            "mean": round(per_scrape * 1000, 2),
            "p95": round(sorted(times)[int(0.95 * (len(times) - 1))] * 1000, 2),
        },
        "cycle_s_one_worker": round(per_scrape * fleet_trays, 1),
        "workers_needed_for_60_s": max(1, -(-int(per_scrape * fleet_trays) // 60)),
        "bucket_rows_added_per_day": rows_per_day,
        "insert_one_hour_of_buckets_s": round(insert_hour_s, 2),
        "downsample_one_hour_s": round(downsample_s, 2),
        "downsample_merged": result.merged,
        "downsample_hourly_rows": result.hourly,
        "rows_per_gpu_cap": MAX_ROWS_PER_GPU,
    }
    if row_bytes:
        figures["bucket_row_bytes"] = round(row_bytes, 1)
        figures["bytes_added_per_day_before_downsampling"] = int(rows_per_day * row_bytes)
        figures["bytes_kept_at_24h_retention"] = int(gpus * BUCKETS_PER_DAY * row_bytes)
        figures["bytes_kept_at_30d_retention"] = int(gpus * MAX_ROWS_PER_GPU * row_bytes)
        figures["bytes_kept_steady_2d"] = int(steady_rows * row_bytes)
    return figures


def measure_telemetry(
    scratch: Path,
    collect_seconds: float = 120,
    scrapes: int = 500,
    sources=("prometheus", "direct"),
    scrape_seconds: float = SCRAPE_SECONDS,
    rule_seconds: float = RULE_SECONDS,
    cycle_count: int = CYCLES,
) -> dict:
    """The figures of each source asked for (see the module docstring)."""
    figures = {}
    if "direct" in sources:
        _log("direct source: timed scrapes, bucket rows, downsampling")
        figures["direct"] = measure_direct(scrapes)
    if "prometheus" in sources:
        _log("prometheus source: a real Prometheus scraping the fleet's exporters")
        figures["prometheus"] = measure_prometheus(
            scratch, collect_seconds, scrape_seconds, rule_seconds, cycle_count
        )
    return figures


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit("run through benchmarks/scale.py --only telemetry (it seeds the inventory first)")
