"""Telemetry at fleet scale: cycle time and database growth per day, Prometheus source and direct source.

Run by benchmarks/scale.py (`--only telemetry`) after it seeded the inventory, in its Django process:

    .venv/bin/python benchmarks/scale.py --racks 1000 --only telemetry

* **Prometheus source**: starts the real ``prometheus`` binary (Debian's package) scraping test DCGM
  exporters (Python HTTP servers, EXPORTERS of them) that serve every seeded GPU's
  ``DCGM_FI_DEV_GPU_UTIL`` (72,000 series at 1,000 racks), every SCRAPE_SECONDS
  (``--telemetry-scrape-seconds`` changes it: the tests use 1 s, so Prometheus has every series at once); lets
  it collect for
  ``--telemetry-seconds``, then times the cycle (tenancy.metrics_source.poll: its two instant queries for
  the whole fleet, and the activity rows written) and a 24-hour chart range query for one job's 72 GPUs.
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


def measure_prometheus(scratch: Path, collect_seconds: float, scrape_seconds: float = SCRAPE_SECONDS) -> dict:
    from django.db import connection
    from django.utils import timezone

    from inventory.models import Gpu
    from tenancy.choices import MetricsSourceKind
    from tenancy.metrics_source import client_for, config_for, poll, utilization_history
    from tenancy.models import GpuActivity, MetricsSource

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
        source.kind, source.url, source.timeout_seconds = MetricsSourceKind.PROMETHEUS, url, 60
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

        started = time.perf_counter()
        client.query(config.utilization_now(source.window_seconds))
        query_now_s = time.perf_counter() - started
        started = time.perf_counter()
        client.query(config.low_for_window(30, source.window_seconds))
        query_window_s = time.perf_counter() - started
        cycles = []
        for _ in range(3):
            result = poll(source=source)
            if result.error:
                return {"error": result.error}
            cycles.append(result.seconds)
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
            "collected_s": collect_seconds,
            "queries_per_cycle": result.queries,
            "cycle_s": {"median": round(statistics.median(cycles), 3), "all": [round(c, 3) for c in cycles]},
            "query_utilization_now_s": round(query_now_s, 3),
            "query_idle_window_30m_s": round(query_window_s, 3),
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
) -> dict:
    """The figures of each source asked for (see the module docstring)."""
    figures = {}
    if "direct" in sources:
        _log("direct source: timed scrapes, bucket rows, downsampling")
        figures["direct"] = measure_direct(scrapes)
    if "prometheus" in sources:
        _log("prometheus source: a real Prometheus scraping the fleet's exporters")
        figures["prometheus"] = measure_prometheus(scratch, collect_seconds, scrape_seconds)
    return figures


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit("run through benchmarks/scale.py --only telemetry (it seeds the inventory first)")
