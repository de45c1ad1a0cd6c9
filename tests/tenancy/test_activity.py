"""GPU activity in the database: recording samples, bounded history, idle and free GPUs, the scrape task
against a real HTTP server, and the push endpoint."""

import socket
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from celery.signals import task_retry
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.retry import backoff
from inventory.models import Gpu
from scheduling.choices import JobState
from scheduling.usage import free_gpus_count, idle_gpus_queryset
from tenancy.activity import bucket_start, prune_history, record_samples
from tenancy.models import (
    ExporterEndpoint,
    GpuActivity,
    GpuUtilization,
    QuotaSnapshot,
    TenancySettings,
)
from tenancy.services import schedulable_gpus
from tenancy.tasks import prune_telemetry, scrape_exporter, scrape_exporters
from tenancy.telemetry import Sample
from tests.factories import healthy_gpus, make_department, run_job, token_client

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).parent / "fixtures" / "dcgm"
FIXTURE_UUIDS = [
    "GPU-4b8c1d2e-7f30-a9b1-c2d3-e4f5a6b7c8d9",
    "GPU-91e0f3a3-5c64-1d7b-8e2f-3a4b5c6d7e8f",
    "GPU-c7d2e9f3-0a83-6b4c-2d5e-9f0a1b2c3d4e",
    "GPU-2a5b8c10-e1f4-7a36-b9c2-d5e8f1a4b7c0",
]
URL = "/api/v1/telemetry/dcgm/"
T0 = datetime(2025, 3, 1, 10, 0, 10, tzinfo=UTC)


# --- helpers -------------------------------------------------------------------------------------------


def samples(gpus, value: float) -> list[Sample]:
    return [Sample(uuid=gpu.uuid, hostname="", gpu_index=gpu.index, value=value) for gpu in gpus]


def activity(gpu) -> GpuActivity:
    return GpuActivity.objects.get(gpu=gpu)


@pytest.fixture
def department(demo_inventory):
    return make_department("Research")


def tray_page(gpus: list[Gpu], name: str = "gb200_node.txt") -> str:
    """A fixture page with its four GPUs' UUIDs replaced by those of a seeded tray."""
    text = (FIXTURES / name).read_text()
    for fixture_uuid, gpu in zip(FIXTURE_UUIDS, gpus, strict=True):
        text = text.replace(fixture_uuid, gpu.uuid)
    return text


def tray_gpus(hostname="gb-r01-t01") -> list[Gpu]:
    return list(Gpu.objects.filter(tray__hostname=hostname).order_by("index"))


# --- record_samples: latest value and the low-since run ------------------------------------------------


def held(gpu, since=T0 - timedelta(hours=1)):
    """`gpu` held by a running job placed at `since` (a low run is kept only while a job holds the GPU)."""
    return run_job(
        make_department("Holders", slug="holders"), [gpu], "holding", placed_at=since, started_at=since
    )


def test_low_since_is_set_kept_and_cleared(demo_inventory):
    gpu = healthy_gpus(1)[0]
    held(gpu)
    record_samples(samples([gpu], 2.0), at=T0)
    assert activity(gpu).low_since == T0 and activity(gpu).utilization == 2.0

    record_samples(samples([gpu], 4.9), at=T0 + timedelta(minutes=1))
    row = activity(gpu)
    assert row.low_since == T0, "a run of low samples keeps its start"
    assert row.utilization == 4.9 and row.sampled_at == T0 + timedelta(minutes=1)

    record_samples(samples([gpu], 5.0), at=T0 + timedelta(minutes=2))
    assert activity(gpu).low_since is None, "at the threshold the run ends"

    record_samples(samples([gpu], 0.0), at=T0 + timedelta(minutes=3))
    assert activity(gpu).low_since == T0 + timedelta(minutes=3), "a new run starts"


def test_the_threshold_comes_from_the_tenancy_settings(demo_inventory):
    TenancySettings.objects.update_or_create(pk=1, defaults={"idle_threshold_percent": 20.0})
    gpu = healthy_gpus(1)[0]
    held(gpu)
    record_samples(samples([gpu], 15.0), at=T0)
    assert activity(gpu).low_since == T0


def test_a_free_gpu_keeps_no_run_of_low_samples_and_a_held_one_starts_its_run_when_sampled_held(
    demo_inventory,
):
    """An exporter samples every GPU. One nobody holds is low but has no run (a free GPU is never idle); once
    a job holds it the run starts at the next low sample, and it ends when the job lets it go."""
    gpu = healthy_gpus(1)[0]
    record_samples(samples([gpu], 1.0), at=T0)
    assert (activity(gpu).utilization, activity(gpu).low_since) == (1.0, None)
    job = held(gpu, since=T0 + timedelta(seconds=30))
    record_samples(samples([gpu], 1.0), at=T0 + timedelta(minutes=1))
    assert activity(gpu).low_since == T0 + timedelta(minutes=1)
    record_samples(samples([gpu], 1.0), at=T0 + timedelta(minutes=2))
    assert activity(gpu).low_since == T0 + timedelta(minutes=1), "the run goes on while held"
    job.allocations.all().delete()
    job.state = JobState.COMPLETED
    job.save(update_fields=["state"])
    record_samples(samples([gpu], 1.0), at=T0 + timedelta(minutes=3))
    assert activity(gpu).low_since is None, "freed: the run ends"


def test_a_late_sample_does_not_replace_a_newer_one(demo_inventory):
    gpu = healthy_gpus(1)[0]
    record_samples(samples([gpu], 90.0), at=T0 + timedelta(minutes=1))
    result = record_samples(samples([gpu], 1.0), at=T0)
    row = activity(gpu)
    assert (row.utilization, row.sampled_at, row.low_since) == (90.0, T0 + timedelta(minutes=1), None)
    assert result.stale == 1 and result.recorded == 1
    assert GpuUtilization.objects.get(gpu=gpu).samples == 2, "it still counts in the history"


# --- record_samples: 5-minute buckets ------------------------------------------------------------------


def test_samples_fold_into_a_five_minute_bucket_and_the_next_bucket_starts_after_five_minutes(demo_inventory):
    gpu = healthy_gpus(1)[0]
    start = datetime(2025, 3, 1, 10, 0, tzinfo=UTC)
    for offset, value in ((10, 10.0), (70, 40.0), (299, 70.0)):
        record_samples(samples([gpu], value), at=start + timedelta(seconds=offset))
    bucket = GpuUtilization.objects.get(gpu=gpu)
    assert bucket.bucket_start == start
    assert (bucket.mean, bucket.peak, bucket.samples) == (pytest.approx(40.0), 70.0, 3)

    record_samples(samples([gpu], 20.0), at=start + timedelta(minutes=5))
    buckets = list(GpuUtilization.objects.filter(gpu=gpu).order_by("bucket_start"))
    assert [b.bucket_start for b in buckets] == [start, start + timedelta(minutes=5)]
    assert (buckets[0].mean, buckets[0].samples) == (pytest.approx(40.0), 3), "the old bucket is untouched"
    assert (buckets[1].mean, buckets[1].peak, buckets[1].samples) == (20.0, 20.0, 1)


def test_bucket_start_is_aligned_to_five_minutes():
    assert bucket_start(datetime(2025, 3, 1, 10, 9, 59, 999, tzinfo=UTC)) == datetime(
        2025, 3, 1, 10, 5, tzinfo=UTC
    )
    assert bucket_start(datetime(2025, 3, 1, 10, 10, tzinfo=UTC)) == datetime(2025, 3, 1, 10, 10, tzinfo=UTC)


# --- record_samples: unknown GPUs, repeats, query count --------------------------------------------------


def test_unknown_uuids_are_counted_and_reported_not_created(demo_inventory):
    known = healthy_gpus(2)
    unknown = [Sample("GPU-00000000-dead-beef-0000-000000000002", "", 0, 50.0)]
    unknown.append(Sample("GPU-00000000-dead-beef-0000-000000000001", "", 1, 50.0))
    result = record_samples(samples(known, 50.0) + unknown, at=T0)
    assert result.recorded == 2
    assert result.unknown_gpus == (
        "GPU-00000000-dead-beef-0000-000000000001",
        "GPU-00000000-dead-beef-0000-000000000002",
    )
    assert GpuActivity.objects.count() == 2 and GpuUtilization.objects.count() == 2
    assert not Gpu.objects.filter(uuid__startswith="GPU-00000000-dead").exists()


def test_two_rows_for_one_gpu_in_one_call_keep_the_higher(demo_inventory):
    gpu = healthy_gpus(1)[0]
    result = record_samples(samples([gpu], 1.0) + samples([gpu], 60.0), at=T0)
    assert (result.recorded, result.skipped) == (1, 1)
    assert activity(gpu).utilization == 60.0 and activity(gpu).low_since is None
    assert GpuUtilization.objects.get(gpu=gpu).samples == 1


def test_nothing_to_record_makes_no_writes(demo_inventory, django_assert_max_num_queries):
    with django_assert_max_num_queries(0):
        assert record_samples([], at=T0).recorded == 0


def test_query_count_does_not_depend_on_the_number_of_samples(demo_inventory, django_assert_max_num_queries):
    """4 GPUs (one tray) and 72 (a rack) take the same queries, first insert and then update."""
    gpus = healthy_gpus(76)
    few, many = gpus[:4], gpus[4:76]
    TenancySettings.load()
    counts = {}
    for label, group in (("4", few), ("72", many)):
        for step in ("insert", "update"):
            at = T0 + timedelta(seconds=0 if step == "insert" else 30)
            with CaptureQueriesContext(connection) as queries, django_assert_max_num_queries(9):
                result = record_samples(samples(group, 3.0), at=at)
            assert result.recorded == len(group)
            counts[(label, step)] = len(queries.captured_queries)
    print(f"record_samples queries: {counts}")
    assert counts[("4", "insert")] == counts[("72", "insert")]
    assert counts[("4", "update")] == counts[("72", "update")]
    assert GpuActivity.objects.count() == 76 and GpuUtilization.objects.filter(samples=2).count() == 76


# --- prune_history ---------------------------------------------------------------------------------------


def test_prune_history_removes_only_rows_past_retention(department):
    now = timezone.now()
    gpu = healthy_gpus(1)[0]
    GpuUtilization.objects.bulk_create(
        [
            GpuUtilization(gpu=gpu, bucket_start=now - timedelta(hours=hours), mean=1, peak=1)
            for hours in (30, 24.5, 23.5, 1)
        ]
    )
    QuotaSnapshot.objects.bulk_create(
        [
            QuotaSnapshot(
                department=department,
                taken_at=now - timedelta(days=days),
                guaranteed=0,
                in_use=0,
                in_quota=0,
                borrowed=0,
                fair_share=0,
                pending_demand=0,
                idle=0,
            )
            for days in (40, 30.5, 29.5, 0)
        ]
    )
    result = prune_history(now=now)
    assert (result.utilization_buckets, result.quota_snapshots) == (2, 2)
    assert sorted(GpuUtilization.objects.values_list("bucket_start", flat=True)) == [
        now - timedelta(hours=23.5),
        now - timedelta(hours=1),
    ]
    assert sorted(QuotaSnapshot.objects.values_list("taken_at", flat=True)) == [
        now - timedelta(days=29.5),
        now,
    ]

    TenancySettings.objects.filter(pk=1).update(utilization_history_hours=2, quota_history_days=1)
    assert prune_telemetry() == {
        "utilization_buckets": 1,
        "quota_snapshots": 1,
        "merged_into_hourly": 0,
        "hourly_buckets": 0,
        "capped": 0,
        "quota_snapshots_merged": 0,
        "quota_snapshots_hourly": 0,
    }
    assert GpuUtilization.objects.count() == 1 and QuotaSnapshot.objects.count() == 1


# --- idle and free GPUs ----------------------------------------------------------------------------------


def test_idle_means_allocated_and_low_for_the_whole_window(department, django_assert_num_queries):
    now = timezone.now()
    gpus = healthy_gpus(6)
    job = run_job(department, gpus[:4], "pretrain-0001")
    long_low, exactly_window, short_low, busy = gpus[:4]
    free_low = gpus[4]
    record_samples(samples([long_low, free_low], 1.0), at=now - timedelta(hours=2))
    record_samples(samples([exactly_window], 2.0), at=now - timedelta(minutes=30))
    record_samples(samples([short_low], 0.0), at=now - timedelta(minutes=29))
    record_samples(samples([busy], 85.0), at=now - timedelta(hours=2))
    # The latest samples: all still low except the busy one.
    record_samples(samples([long_low, exactly_window, short_low, free_low], 3.0), at=now)
    record_samples(samples([busy], 2.0), at=now)  # just dipped: low for 0 minutes

    with django_assert_num_queries(2):  # the settings row, then the GPUs
        idle = list(idle_gpus_queryset(now=now))
    assert [gpu.pk for gpu in idle] == [long_low.pk, exactly_window.pk]
    first = idle[0]
    assert (first.job_id, first.job_name, first.department_id, first.department_name) == (
        job.pk,
        "pretrain-0001",
        department.pk,
        "Research",
    )
    assert first.hostname == long_low.tray.hostname and first.utilization == 3.0
    assert first.idle_since == now - timedelta(hours=2)

    # The free GPU is not idle (nobody holds it) but is counted as free.
    assert free_low.pk not in {gpu.pk for gpu in idle}
    assert free_gpus_count() == schedulable_gpus() - 4


def test_idle_follows_the_window_setting_and_the_department(department):
    now = timezone.now()
    gpus = healthy_gpus(8)
    run_job(department, gpus[:4], "pretrain-0001")
    other = make_department("Vision")
    run_job(other, gpus[4:8], "vision-eval-0002")
    record_samples(samples(gpus, 0.0), at=now - timedelta(minutes=45))
    record_samples(samples(gpus, 0.0), at=now)
    assert idle_gpus_queryset(now=now).count() == 8
    assert {g.job_name for g in idle_gpus_queryset(now=now, department=other)} == {"vision-eval-0002"}
    assert idle_gpus_queryset(now=now, department=department.pk).count() == 4

    TenancySettings.objects.filter(pk=1).update(idle_window_minutes=60)
    assert idle_gpus_queryset(now=now).count() == 0


def test_only_running_jobs_count_for_idle(department):
    now = timezone.now()
    gpus = healthy_gpus(4)
    run_job(department, gpus, "pretrain-0001", state=JobState.PENDING)
    record_samples(samples(gpus, 0.0), at=now - timedelta(hours=1))
    assert idle_gpus_queryset(now=now).count() == 0
    assert free_gpus_count() == schedulable_gpus() - 4, "allocated, so not free either"


def test_free_gpus_exclude_unschedulable_ones(demo_inventory):
    assert free_gpus_count() == schedulable_gpus() < Gpu.objects.count()


# --- the scrape task against a real HTTP server -----------------------------------------------------------


class Exporter:
    """A dcgm-exporter stand-in: a real HTTP server on 127.0.0.1 serving whatever the test sets."""

    def __init__(self):
        self.status, self.body, self.hits = 200, b"", 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                owner.hits += 1
                self.send_response(owner.status)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(owner.body)))
                self.end_headers()
                self.wfile.write(owner.body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        # A short poll interval: shutdown() waits for it, at the end of every test.
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def serve(self, text: str, status: int = 200):
        self.status, self.body, self.hits = status, text.encode(), 0

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def exporter():
    server = Exporter()
    yield server
    server.close()


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


def endpoint(url: str, **fields) -> ExporterEndpoint:
    return ExporterEndpoint.objects.create(url=url, **fields)


def test_a_scrape_records_the_trays_gpus(demo_inventory, exporter):
    gpus = tray_gpus()
    exporter.serve(tray_page(gpus))
    target = endpoint(exporter.url, last_error="HTTP 500 earlier")
    result = scrape_exporter.delay(target.pk).get()
    assert result == {
        "endpoint": target.pk,
        "recorded": 4,
        "unknown_gpus": [],
        "skipped": 0,
        "health_events": 0,  # no health fields on the page (inventory.health records them)
    }
    target.refresh_from_db()
    assert target.last_error == "" and target.last_sample_count == 4 and target.last_scraped_at is not None
    assert {a.gpu_id: a.utilization for a in GpuActivity.objects.all()} == {
        gpus[0].pk: 87.0,
        gpus[1].pk: 91.0,
        gpus[2].pk: 0.0,
        gpus[3].pk: 3.0,
    }
    assert GpuUtilization.objects.count() == 4 and exporter.hits == 1


@pytest.fixture
def worker_like_retries():
    """Like a worker: a retry is a new attempt, not an exception in the caller (eager runs skip backoff)."""
    from portal.celery import app

    previous = app.conf.task_eager_propagates
    app.conf.task_eager_propagates = False
    yield
    app.conf.task_eager_propagates = previous


def test_a_server_error_is_retried_then_recorded(demo_inventory, exporter, worker_like_retries):
    exporter.serve("oops", status=500)
    target = endpoint(exporter.url)
    result = scrape_exporter.delay(target.pk).get()
    port = exporter.url.split(":")[2].split("/")[0]
    assert result["error"] == f"HTTP 500 Internal Server Error from 127.0.0.1:{port}"
    assert exporter.hits == 4, "one try and three retries"
    target.refresh_from_db()
    assert target.last_error == result["error"] and target.last_scraped_at is None


def test_retries_wait_as_core_retry_backoff_says(demo_inventory, exporter, worker_like_retries):
    waits = []

    def record(reason=None, **kwargs):
        waits.append(reason.when)

    exporter.serve("busy", status=429)  # transient like a 5xx
    task_retry.connect(record, weak=False)
    try:
        scrape_exporter.delay(endpoint(exporter.url).pk).get()
    finally:
        task_retry.disconnect(record)
    assert waits == [backoff(1), backoff(2), backoff(3)] == [2, 4, 8]


def test_a_server_error_in_eager_mode_is_recorded_at_once(demo_inventory, exporter):
    exporter.serve("oops", status=500)
    target = endpoint(exporter.url)
    result = scrape_exporter.delay(target.pk).get()
    assert result["error"].startswith("HTTP 500 Internal Server Error") and exporter.hits == 1
    target.refresh_from_db()
    assert target.last_error == result["error"]


@pytest.mark.parametrize("retries", [False, True], ids=["eager", "worker-like"])
def test_a_closed_port_is_recorded_without_crashing(demo_inventory, request, retries):
    if retries:
        request.getfixturevalue("worker_like_retries")
    url = closed_port_url()
    target = endpoint(url)
    result = scrape_exporter.delay(target.pk).get()
    target.refresh_from_db()
    assert target.last_error == f"connection refused by {url.split('/')[2]}" == result["error"]
    assert target.last_sample_count == 0 and target.last_scraped_at is None


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (200, "<html><body>Grafana login</body></html>", "not Prometheus text: line 1: "),
        (404, "404 page not found", "HTTP 404 Not Found from 127.0.0.1:"),
    ],
    ids=["html", "404"],
)
def test_permanent_failures_are_not_retried(demo_inventory, exporter, status, body, error):
    exporter.serve(body, status=status)
    target = endpoint(exporter.url)
    scrape_exporter.delay(target.pk).get()
    target.refresh_from_db()
    assert target.last_error.startswith(error) and exporter.hits == 1


def test_an_exporter_without_utilization_or_with_unknown_gpus_says_so(demo_inventory, exporter):
    page = tray_page(tray_gpus())
    exporter.serve("".join(line for line in page.splitlines(True) if "DCGM_FI_DEV_GPU_UTIL" not in line))
    target = endpoint(exporter.url)
    scrape_exporter.delay(target.pk).get()
    target.refresh_from_db()
    assert "serves no DCGM_FI_DEV_GPU_UTIL" in target.last_error and target.last_scraped_at is not None

    exporter.serve((FIXTURES / "gb200_node.txt").read_text())  # UUIDs the inventory has never seen
    scrape_exporter.delay(target.pk).get()
    target.refresh_from_db()
    assert target.last_error.startswith("4 GPU(s) not in the inventory") and target.last_sample_count == 0


def test_the_fan_out_scrapes_enabled_exporters_and_survives_a_dead_one(demo_inventory, exporter):
    gpus = tray_gpus("gb-r02-t01")
    exporter.serve(tray_page(gpus, "gb200_node_k8s_dcp.txt"))
    dead = endpoint(closed_port_url())
    good = endpoint(exporter.url)
    disabled = endpoint("http://127.0.0.1:9/metrics", enabled=False)
    assert scrape_exporters() == 2
    good.refresh_from_db(), dead.refresh_from_db(), disabled.refresh_from_db()
    assert good.last_sample_count == 4 and good.last_error == ""
    assert dead.last_error.startswith("connection refused") and dead.last_scraped_at is None
    assert disabled.last_error == "" and disabled.last_scraped_at is None
    assert activity(gpus[1]).utilization == 96.0


def test_beat_runs_the_scrape_every_minute_and_the_prune_hourly():
    from portal.celery import app

    schedule = {entry["task"]: entry["schedule"] for entry in app.conf.beat_schedule.values()}
    assert schedule == {
        "tenancy.tasks.scrape_exporters": 60.0,
        "tenancy.tasks.prune_telemetry": 3600.0,
        "scheduling.tasks.snapshot_quotas": 300.0,
        "scheduling.tasks.keep_idle_counts": 60.0,  # each department's idle GPUs, for the pages
        "integrations.tasks.retry_stale_pushes": 60.0,
        "integrations.tasks.follow_active_plans": 30.0,
        "integrations.tasks.run_plan_windows": 30.0,
        "scheduling.tasks.schedule_jobs_periodically": 60.0,
        "integrations.tasks.sync_jobs": 30.0,
        "core.tasks.retry_notifications": 30.0,
        "integrations.tasks.watch_removals": 86400.0,
        "inventory.tasks.flush_heartbeats": 5.0,  # the node heartbeats held by the broker, written
    }
    app.loader.import_default_modules()
    assert {
        "tenancy.tasks.scrape_exporter",
        "tenancy.tasks.scrape_exporters",
        "scheduling.tasks.schedule_jobs_periodically",
        "integrations.tasks.sync_jobs",
        "integrations.tasks.watch_removals",
        "integrations.tasks.run_plan_windows",
        "inventory.tasks.flush_heartbeats",
    } <= set(app.tasks)


# --- the push endpoint -----------------------------------------------------------------------------------


@pytest.fixture
def agent(node_agent, demo_inventory):
    return token_client(node_agent)


def push(client, text: str, content_type: str = "text/plain"):
    return client.post(URL, data=text, content_type=content_type)


def test_a_node_agent_pushes_its_page(agent):
    gpus = tray_gpus()
    response = push(agent, tray_page(gpus), content_type="text/plain; version=0.0.4; charset=utf-8")
    assert response.status_code == 200, response.content
    assert response.json() == {
        "recorded": 4,
        "unknown_gpus": [],
        "skipped": 0,
        "health_events": 0,
        "health_actions": [],
        "utilization_from": "push",
    }
    assert activity(gpus[1]).utilization == 91.0


def test_the_push_reports_unknown_gpus_and_skipped_lines(agent):
    gpus = tray_gpus()
    text = tray_page(gpus).replace(gpus[3].uuid, "GPU-00000000-0000-0000-0000-00000000beef")
    text += 'DCGM_FI_DEV_GPU_UTIL{gpu="9"} 12\n'
    response = push(agent, text)
    assert response.json() == {
        "recorded": 3,
        "unknown_gpus": ["GPU-00000000-0000-0000-0000-00000000beef"],
        "skipped": 1,
        "health_events": 0,
        "health_actions": [],
        "utilization_from": "push",
    }


def test_a_bad_body_is_a_400_with_a_plain_message(agent):
    response = push(agent, (FIXTURES / "truncated.txt").read_text())
    assert response.status_code == 400
    assert response.json()["detail"].startswith("not Prometheus text: line 47: ")
    assert GpuActivity.objects.count() == 0

    response = push(agent, "")
    assert response.status_code == 400 and "the body is empty" in response.json()["detail"]

    response = agent.post(URL, data={"gpus": []}, format="json")
    assert response.status_code == 415


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_anonymous_is_refused(api_client, demo_inventory):
    response = push(api_client, tray_page(tray_gpus()))
    assert response.status_code == 401
    assert GpuActivity.objects.count() == 0


def test_a_token_without_the_node_agent_permission_is_refused(outsider, demo_inventory):
    response = push(token_client(outsider), tray_page(tray_gpus()))
    assert response.status_code == 403
    assert "inventory.report_discovery" in response.json()["detail"]

    outsider.user_permissions.add(Permission.objects.get(codename="report_discovery"))
    assert push(token_client(outsider), tray_page(tray_gpus())).status_code == 200


def test_a_platform_admin_may_push(platform_admin, demo_inventory):
    assert push(token_client(platform_admin), tray_page(tray_gpus())).status_code == 200
