"""Utilization from a real Prometheus (tests/tenancy/prometheus_server.py) scraping test DCGM exporters:
the cycle's PromQL, label mapping, staleness, missing series, errors, the lead's idle GPUs, a department's
utilization and a GPU's and a job's chart from range queries."""

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from inventory.models import Gpu
from scheduling.dashboard_data import department_dashboard
from scheduling.usage import department_positions, idle_gpus_queryset
from tenancy.activity import department_utilization, record_samples
from tenancy.choices import MetricsSourceKind
from tenancy.metrics_source import check_connection, client_for, poll, utilization_history
from tenancy.models import GpuActivity, GpuUtilization, MetricsSource, TenancySettings
from tenancy.prometheus import PrometheusError, Way
from tenancy.tasks import scrape_exporters
from tenancy.telemetry import Sample
from tests.factories import make_department, make_member, run_job
from tests.tenancy.prometheus_server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

WINDOW = 3  # seconds averaged per GPU (MetricsSource.window_seconds); scrapes come every second


def tray_gpus(hostname: str) -> list[Gpu]:
    return list(Gpu.objects.filter(tray__hostname=hostname).order_by("index"))


@pytest.fixture
def source(prometheus, demo_inventory):
    """The metrics source pointed at the test Prometheus; idle at once (window 0) under 5 %."""
    prometheus.reset(window=f"{WINDOW}s")
    TenancySettings.objects.filter(pk=TenancySettings.load().pk).update(
        idle_threshold_percent=5.0, idle_window_minutes=0
    )
    source = MetricsSource.load()
    source.kind = MetricsSourceKind.PROMETHEUS
    source.url = prometheus.url
    source.username, source.password = prometheus.username, prometheus.password
    source.window_seconds = WINDOW
    source.save()
    return source


def serve(prometheus, tray: int, values: dict[Gpu, float]) -> None:
    prometheus.exporters[tray].serve({gpu.uuid: value for gpu, value in values.items()})


def settle(prometheus, values: dict[Gpu, float]) -> None:
    """Until every GPU's mean over the cycle's window is the value it serves (older samples gone)."""
    prometheus.wait_for_values({gpu.uuid: value for gpu, value in values.items()}, window=f"{WINDOW}s")


def activity() -> dict[str, tuple[float, bool]]:
    return {
        uuid: (value, low_since is not None)
        for uuid, value, low_since in GpuActivity.objects.values_list("gpu__uuid", "utilization", "low_since")
    }


def hold(gpus) -> None:
    """`gpus` held by a running job placed two hours ago, before any history these tests write."""
    placed = timezone.now() - timedelta(hours=2)
    run_job(make_department("Holders", slug="holders"), gpus, "holding", placed_at=placed, started_at=placed)


def test_one_cycle_reads_the_whole_fleet_and_missing_gpus_have_no_data(prometheus, source):
    t1, t2, t3 = tray_gpus("gb-r01-t01"), tray_gpus("gb-r01-t02"), tray_gpus("gb-r01-t03")
    hold([*t1, *t2])  # a run of low samples is kept only while a job holds the GPU
    first = dict(zip(t1, [2.0, 3.0, 80.0, 95.0], strict=True))
    second = dict.fromkeys(t2, 50.0)
    serve(prometheus, 0, first)
    serve(prometheus, 1, second)
    # A row left by an earlier direct scrape of a GPU Prometheus has never seen: it has no data now.
    record_samples([Sample(uuid=t3[0].uuid, hostname="", gpu_index=0, value=1.0)])
    settle(prometheus, {**first, **second})

    result = poll()

    assert result.error == ""
    assert result.series == 8
    # No recording rule for a 3-second window: asked for (1 query), then the raw metric by GPU index (5).
    assert (result.way_now, result.way_low, result.queries) == (Way.CHUNKED, None, 6)  # idle window 0
    assert result.record.recorded == 8 and result.record.forgotten == 1
    rows = activity()
    assert rows == {
        t1[0].uuid: (2.0, True),
        t1[1].uuid: (3.0, True),
        t1[2].uuid: (80.0, False),
        t1[3].uuid: (95.0, False),
        **{gpu.uuid: (50.0, False) for gpu in t2},
    }
    assert not any(gpu.uuid in rows for gpu in t3)  # the missing series: no data, not idle
    assert GpuUtilization.objects.count() == 1  # only the direct scrape's bucket: no history from Prometheus
    source.refresh_from_db()
    assert (source.last_series_count, source.last_error) == (8, "")
    assert source.last_polled_at is not None


def test_the_beat_tick_polls_prometheus_instead_of_scraping(prometheus, source):
    gpus = tray_gpus("gb-r01-t01")
    values = dict.fromkeys(gpus, 42.0)
    serve(prometheus, 0, values)
    settle(prometheus, values)

    outcome = scrape_exporters()

    assert outcome["source"] == "prometheus" and outcome["gpus"] == 4 and outcome["error"] == ""
    assert outcome["read"] == {"now": "chunked", "low": None}  # no recording rule for a 3-second window
    assert {value for value, _ in activity().values()} == {42.0}


def test_the_leads_idle_gpus_and_department_utilization_come_from_promql(prometheus, source):
    research, physics = make_department("Research"), make_department("Physics")
    lead = make_member("research-lead", research, role="lead")
    idle_job = run_job(research, trays=["gb-r01-t01"], name="idle-train")
    busy_job = run_job(research, trays=["gb-r01-t02"], name="busy-train")
    other = run_job(physics, trays=["gb-r01-t03"], name="sim")
    values = {
        **dict.fromkeys(tray_gpus("gb-r01-t01"), 1.0),
        **dict.fromkeys(tray_gpus("gb-r01-t02"), 91.0),
    }
    serve(prometheus, 0, dict.fromkeys(tray_gpus("gb-r01-t01"), 1.0))
    serve(prometheus, 1, dict.fromkeys(tray_gpus("gb-r01-t02"), 91.0))
    serve(prometheus, 2, dict.fromkeys(tray_gpus("gb-r01-t03"), 2.0))
    settle(prometheus, {**values, **dict.fromkeys(tray_gpus("gb-r01-t03"), 2.0)})

    assert poll().error == ""

    idle = list(idle_gpus_queryset(department=research))
    assert {gpu.job_id for gpu in idle} == {idle_job.pk} and len(idle) == 4
    dashboard = department_dashboard(lead, research)
    assert dashboard.position.idle == 4
    assert {gpu.job_name for gpu in dashboard.idle_gpus} == {"idle-train"}
    positions = department_positions()
    assert (positions.of(research).idle, positions.of(physics).idle) == (4, 4)
    utilization = department_utilization()
    assert utilization[research.pk] == {"mean": pytest.approx(46.0), "gpus_with_data": 8}
    assert utilization[physics.pk] == {"mean": pytest.approx(2.0), "gpus_with_data": 4}
    assert busy_job.pk not in {gpu.job_id for gpu in idle} and other.pk not in {gpu.job_id for gpu in idle}


def test_a_gpu_that_stops_reporting_is_no_data_not_idle(prometheus, source):
    research = make_department("Research")
    run_job(research, trays=["gb-r01-t01"], name="idle-train")
    gpus = tray_gpus("gb-r01-t01")
    serve(prometheus, 0, dict.fromkeys(gpus, 1.0))
    settle(prometheus, dict.fromkeys(gpus, 1.0))
    assert poll().error == ""
    assert idle_gpus_queryset(department=research).count() == 4

    serve(prometheus, 0, dict.fromkeys(gpus[:2], 1.0))  # two GPUs fall off the exporter's page
    prometheus.wait_gone([gpu.uuid for gpu in gpus[2:]])
    # Until their last sample leaves the cycle's window they still count; then they have no data.
    prometheus.wait_for(
        f"avg_over_time(DCGM_FI_DEV_GPU_UTIL[{WINDOW}s])",
        lambda result: {item["metric"].get("UUID") for item in result} == {gpus[0].uuid, gpus[1].uuid},
    )
    result = poll()

    assert result.error == "" and result.series == 2 and result.record.forgotten == 2
    assert set(activity()) == {gpus[0].uuid, gpus[1].uuid}
    assert {gpu.pk for gpu in idle_gpus_queryset(department=research)} == {gpus[0].pk, gpus[1].pk}


def test_a_wrong_uuid_label_names_the_exporters_labels_and_the_right_one_maps(prometheus, source):
    gpus = tray_gpus("gb-r01-t04")
    prometheus.exporters[3].serve({gpu.uuid: 30.0 for gpu in gpus})  # an old exporter: lower-case labels
    prometheus.wait_for_values({gpu.uuid: 30.0 for gpu in gpus}, window=f"{WINDOW}s")
    GpuActivity.objects.create(gpu=gpus[0], utilization=1.0, sampled_at=timezone.now())
    source.selector = 'job="dcgm-lower"'
    source.save()

    result = poll()

    assert result.error == (
        "no series of DCGM_FI_DEV_GPU_UTIL with label UUID; the exporter's labels are "
        "DCGM_FI_DRIVER_VERSION, device, gpu, hostname, instance, job, modelName, uuid: set the UUID label "
        "name of the metrics source to the one holding the GPU UUID"
    )
    assert activity() == {gpus[0].uuid: (1.0, False)}  # a failed cycle changes nothing
    source.refresh_from_db()
    assert source.last_error == result.error

    source.uuid_label, source.hostname_label = "uuid", "hostname"
    source.save()
    result = poll()
    assert result.error == "" and result.series == 4
    assert activity() == {gpu.uuid: (30.0, False) for gpu in gpus}


def test_an_exporter_without_the_utilization_metric_is_said_so(prometheus, source):
    gpus = tray_gpus("gb-r01-t01")
    prometheus.exporters[0].serve({gpu.uuid: 0.0 for gpu in gpus}, with_utilization=False)
    prometheus.wait_for("DCGM_FI_DEV_SM_CLOCK", lambda result: len(result) == 4)
    prometheus.wait_for(f"avg_over_time(DCGM_FI_DEV_GPU_UTIL[{WINDOW}s])", lambda result: result == [])

    result = poll()

    assert result.error.startswith(
        f"Prometheus has no DCGM_FI_DEV_GPU_UTIL samples in the last {WINDOW} seconds"
    )
    with pytest.raises(PrometheusError, match="has no DCGM_FI_DEV_GPU_UTIL samples"):
        check_connection(source)


def test_errors_say_what_happened(prometheus, source):
    with pytest.raises(PrometheusError) as error:
        client_for(source).query("avg_over_time(DCGM_FI_DEV_GPU_UTIL[")
    assert (
        f"the Prometheus query API at 127.0.0.1:{prometheus.url.rsplit(':', 1)[1]} answered HTTP 400"
        in str(error.value)
    )
    assert "bad_data: " in str(error.value) and "parse error" in str(error.value)
    assert not error.value.transient

    source.password = "wrong"
    with pytest.raises(PrometheusError, match="answered HTTP 401 Unauthorized") as error:
        client_for(source).query("up")
    assert error.value.what_to_do == "check the metrics source's token or user name and password"

    source.url = f"http://127.0.0.1:{free_port()}"
    result = poll(source=source)
    assert "cannot be reached" in result.error
    with pytest.raises(PrometheusError) as error:
        client_for(source).query("up")
    assert error.value.transient


def test_test_connection_says_what_it_found(prometheus, source):
    gpus = tray_gpus("gb-r01-t01")
    unknown = {"GPU-00000000-0000-0000-0000-00000000beef": 10.0}
    prometheus.exporters[0].serve({**{gpu.uuid: 10.0 for gpu in gpus}, **unknown})
    prometheus.wait_for_values({**{gpu.uuid: 10.0 for gpu in gpus}, **unknown}, window=f"{WINDOW}s")

    message = check_connection(source)

    assert message.startswith("Prometheus answered in ")
    assert message.endswith(
        "5 GPU(s) report DCGM_FI_DEV_GPU_UTIL by UUID, 4 of them in the inventory (1 not in it: report their "
        "nodes' fabric first). Read from DCGM_FI_DEV_GPU_UTIL itself in 5 queries, one per gpu value: no "
        "recording rule UUID:DCGM_FI_DEV_GPU_UTIL:max_avg3s answered (deploy/prometheus/rackplane-rules.yml "
        "in Rackplane's source records it)."
    )


def test_a_gpu_chart_and_a_job_chart_read_the_range_from_prometheus(prometheus, source):
    gpus = tray_gpus("gb-r01-t01")
    start = timezone.now()
    serve(prometheus, 0, {gpus[0]: 10.0, gpus[1]: 30.0})
    settle(prometheus, {gpus[0]: 10.0, gpus[1]: 30.0})
    serve(prometheus, 0, {gpus[0]: 90.0, gpus[1]: 50.0})
    settle(prometheus, {gpus[0]: 90.0, gpus[1]: 50.0})
    end = timezone.now()

    history, step = utilization_history([gpus[0].uuid, gpus[1].uuid], start, end, min_step=1)

    assert step == 1  # a range of seconds: every second
    first = [value for _, value in history[gpus[0].uuid]]
    assert 10.0 in first and 90.0 in first and first.index(10.0) < first.index(90.0)
    times = [at for at, _ in history[gpus[0].uuid]]
    last = end.replace(microsecond=end.microsecond // 1000 * 1000)
    assert times == sorted(times) and start - timedelta(seconds=1) <= times[0] and times[-1] <= last
    # The points sit on the grid that ends at `end`. The point at `end` itself may be missing: a scrape that
    # failed on a loaded machine makes Prometheus mark the series stale until the next one (seen once in CI).
    assert all((last - at).total_seconds() % step == 0 for at in times)
    assert last - times[-1] <= timedelta(seconds=5)
    assert set(history[gpus[1].uuid]) and {30.0, 50.0} <= {value for _, value in history[gpus[1].uuid]}

    job, _ = utilization_history([gpus[0].uuid, gpus[1].uuid], start, end, mean=True, min_step=1)
    means = {value for _, value in job["mean"]}
    assert {20.0, 70.0} <= means  # (10 + 30) / 2 before, (90 + 50) / 2 after

    # A GPU with no series in the range: an empty line, not an error.
    missing, _ = utilization_history([gpus[3].uuid], start, end, min_step=1)
    assert missing == {gpus[3].uuid: []}
    # The screen's range picks the step: 30 days at three-hour points.
    _, step = utilization_history([gpus[0].uuid], end - timedelta(days=30), end)
    assert step == 10800


def test_a_gpu_low_for_the_whole_window_in_prometheus_is_idle_at_the_first_cycle(prometheus, source):
    """The look back: Rackplane has seen nothing yet (just started, or just switched source), but
    Prometheus has the GPU under the threshold for the whole idle window, so it is idle at once; a GPU that
    only began reporting inside the window is not."""
    TenancySettings.objects.filter(pk=TenancySettings.load().pk).update(idle_window_minutes=1)
    research = make_department("Research")
    # Trays no other test serves, so Prometheus holds only what this test sets for them.
    run_job(research, trays=["gb-r02-t01", "gb-r02-t02"], name="idle-train")
    early, late = tray_gpus("gb-r02-t01"), tray_gpus("gb-r02-t02")
    assert len(early) == len(late) == 4
    # The early GPUs' last 75 s, as tray 0's exporter would have had them scraped; then both trays serve.
    prometheus.history(0, {gpu.uuid: 1.0 for gpu in early}, seconds=75)
    serve(prometheus, 0, dict.fromkeys(early, 1.0))
    serve(prometheus, 1, dict.fromkeys(late, 1.0))
    selector = 'DCGM_FI_DEV_GPU_UTIL{{UUID=~"{}"}}'.format("|".join(gpu.uuid for gpu in early))
    # The early GPUs have a sample from before the window (1 minute) began; the late ones none.
    prometheus.wait_for(
        f"last_over_time({selector}[{WINDOW}s] offset 1m)", lambda result: len(result) == 4, 10
    )
    settle(prometheus, {**dict.fromkeys(early, 1.0), **dict.fromkeys(late, 1.0)})
    late_selector = 'DCGM_FI_DEV_GPU_UTIL{{UUID=~"{}"}}'.format("|".join(gpu.uuid for gpu in late))
    assert prometheus.query(f"last_over_time({late_selector}[{WINDOW}s] offset 1m)") == []

    result = poll()

    assert result.error == "" and result.series == 8
    # Each figure: its recording rule asked for (none for these windows), then 5 chunks (the low figure's
    # two halves each).
    assert (result.way_now, result.way_low, result.queries) == (Way.CHUNKED, Way.CHUNKED, 6 + 11)
    idle = {gpu.pk for gpu in idle_gpus_queryset(department=research)}
    assert idle == {gpu.pk for gpu in early}
    assert GpuActivity.objects.filter(gpu__in=late, low_since__isnull=False).count() == 4  # low, not long


def test_a_gpu_page_chart_comes_from_prometheus(prometheus, source, client_as):
    gpu = tray_gpus("gb-r01-t01")[0]
    serve(prometheus, 0, {gpu: 37.0})
    # An hour at 15-second points: each point is the mean of the 15 seconds before it.
    prometheus.wait_for_values({gpu.uuid: 37.0}, window="15s")

    answer = client_as("platform_admin").get(
        reverse("scheduling:gpu-utilization", args=[gpu.pk]), {"range": "1h"}
    )

    text = answer.content.decode()
    assert answer.status_code == 200
    assert "From the site&#x27;s Prometheus, one point every 15 s." in text
    assert "37.0" in text and "GPU 0" in text


def test_the_shipped_recording_rules_give_the_cycle_the_raw_queries_figures(prometheus, source):
    """The test Prometheus evaluates deploy/prometheus/rackplane-rules.yml. With the metrics source's default
    windows (5 minutes, idle window 30 minutes) the cycle reads the recorded series, and its activity rows are
    the ones the raw query gives in one query and in chunks, GPU by GPU, at the rules' evaluation time."""
    source.window_seconds = 300
    # Other tests' old-style exporter (no `UUID` label) may have reported in the last 5 minutes: left out
    # (a matcher the recorded series, all by UUID, satisfy too).
    source.selector = 'UUID!=""'
    source.save()
    TenancySettings.objects.filter(pk=TenancySettings.load().pk).update(idle_window_minutes=30)
    # Trays no other test serves; 36 minutes of history (a sample every 5 s), written at once.
    low, spike, late, busy = tray_gpus("gb-r03-t01")
    extra = tray_gpus("gb-r03-t02")[0]  # the fifth GPU of the page: gpu="4", read by the last chunk
    hold([low, spike, late, busy, extra])  # held since before the history (runs are kept only while held)
    written = prometheus.history(
        0,
        {
            low.uuid: lambda age: 1.0 + age % 3,  # 1-3 %: low the whole window
            spike.uuid: lambda age: 90.0 if 1200 <= age < 1260 else 2.0,  # busy for a minute 20 min ago
            busy.uuid: lambda age: 40.0 + age % 50,
            extra.uuid: lambda age: 3.0,
        },
        seconds=36 * 60,
        step=5,
    )
    prometheus.history(1, {late.uuid: 1.0}, seconds=10 * 60, step=5)  # reporting for 10 minutes only
    uuids = "|".join(gpu.uuid for gpu in (low, spike, late, busy, extra))
    # An evaluation of the rules that began after the writes: its timestamp is the moment compared at.
    answer = prometheus.wait_for(
        f'timestamp(UUID:DCGM_FI_DEV_GPU_UTIL:max_avg5m{{UUID=~"{uuids}"}})',
        lambda result: len(result) == 5 and min(float(item["value"][1]) for item in result) > written + 0.5,
    )
    at = datetime.fromtimestamp(min(float(item["value"][1]) for item in answer), tz=UTC)
    prometheus.wait_for(
        f'UUID:DCGM_FI_DEV_GPU_UTIL:max30m{{UUID=~"{uuids}"}}', lambda result: len(result) == 4
    )

    figures = {}
    for way in (None, Way.SINGLE, Way.CHUNKED):
        GpuActivity.objects.all().delete()
        result = poll(now=at, way=way)
        assert result.error == ""
        rows = GpuActivity.objects.values_list("gpu__uuid", "utilization", "low_since")
        figures[way] = (result.way_now, result.way_low, {uuid: (value, since) for uuid, value, since in rows})

    assert figures[None][:2] == (Way.RECORDED, Way.RECORDED)
    assert figures[Way.CHUNKED][:2] == (Way.CHUNKED, Way.CHUNKED)
    assert figures[None][2] == figures[Way.SINGLE][2] == figures[Way.CHUNKED][2]
    rows = figures[None][2]
    assert 1.0 <= rows[low.uuid][0] <= 3.0 and 40.0 <= rows[busy.uuid][0] < 90.0
    assert (rows[spike.uuid][0], rows[late.uuid][0], rows[extra.uuid][0]) == (2.0, 1.0, 3.0)
    # Idle for the whole window (low since 30 minutes before) only where the window's figure says so; low
    # only now where it was busy in the window or began reporting inside it; the busy GPU not low.
    window_start = at - timedelta(minutes=30)
    assert (rows[low.uuid][1], rows[extra.uuid][1]) == (window_start, window_start)
    assert (rows[spike.uuid][1], rows[late.uuid][1], rows[busy.uuid][1]) == (at, at, None)
