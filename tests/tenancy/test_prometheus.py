"""The metrics source without a Prometheus: the PromQL built, the step chosen from the range, the direct
source's downsampled and bounded history, stale activity, the idle run dated back, the admin form (secrets
never shown back) and the chart fragments. The real-server tests are in test_prometheus_server.py."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from inventory.models import Gpu
from scheduling.charts import utilization_figure, utilization_html
from tenancy.activity import (
    STALE_AFTER,
    department_utilization,
    downsample_history,
    forget_stale_activity,
    record_activity,
    record_samples,
)
from tenancy.choices import MetricsSourceKind
from tenancy.metrics_source import poll, utilization_history
from tenancy.models import GpuActivity, GpuUtilization, MetricsSource, TenancySettings
from tenancy.prometheus import PrometheusClient, PrometheusError, QueryConfig, choose_step, labels_error
from tenancy.telemetry import Sample
from tests.factories import make_department, run_job, token_client
from tests.tenancy.prometheus_server import admin_form, free_port

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def gpus_of(hostname="gb-r01-t01") -> list[Gpu]:
    return list(Gpu.objects.filter(tray__hostname=hostname).order_by("index"))


# --- PromQL -------------------------------------------------------------------------------------------


def test_the_queries_are_by_uuid_with_the_configured_names():
    config = QueryConfig(uuid_label="gpu_uuid", selector='cluster="gb-east", job=~"dcgm.*"')
    assert config.utilization_now(300) == (
        'max by (gpu_uuid) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{cluster="gb-east",job=~"dcgm.*"}[300s]))'
    )
    assert config.low_for_window(30, 300) == (
        'max by (gpu_uuid) (max_over_time(DCGM_FI_DEV_GPU_UTIL{cluster="gb-east",job=~"dcgm.*"}[30m])) and '
        'max by (gpu_uuid) (last_over_time(DCGM_FI_DEV_GPU_UTIL{cluster="gb-east",job=~"dcgm.*"}[300s] '
        "offset 30m))"
    )
    history = QueryConfig().history(["GPU-b.1", "GPU-a"], 60)
    assert history == (
        'max by (UUID) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{UUID=~"GPU\\\\-a|GPU\\\\-b\\\\.1"}[60s]))'
    )
    assert QueryConfig().mean_history(["GPU-a"], 60).startswith("avg(max by (UUID) (")


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        (QueryConfig(metric="DCGM FI"), "'DCGM FI' is not a metric name"),
        (QueryConfig(uuid_label="gpu-uuid"), "the UUID label 'gpu-uuid' is not a label name"),
        (QueryConfig(selector='cluster="a" job="b"'), "the extra selector"),
        (QueryConfig(selector="cluster=a"), "the extra selector"),
    ],
)
def test_bad_names_are_said_before_asking(config, problem):
    assert any(text.startswith(problem) for text in config.problems())


def test_the_label_error_lists_the_labels_the_series_carry():
    assert labels_error(QueryConfig(), {"__name__", "uuid", "gpu", "job"}) == (
        "no series of DCGM_FI_DEV_GPU_UTIL with label UUID; the exporter's labels are gpu, job, uuid: "
        "set the UUID label name of the metrics source to the one holding the GPU UUID"
    )


@pytest.mark.parametrize(
    ("span", "min_step", "step"),
    [
        (timedelta(seconds=20), 1, 1),
        (timedelta(hours=1), 15, 15),
        (timedelta(hours=6), 15, 120),
        (timedelta(hours=24), 15, 300),
        (timedelta(days=7), 15, 3600),
        (timedelta(days=30), 15, 10800),
        (timedelta(days=400), 15, 115200),
    ],
)
def test_the_step_follows_the_range(span, min_step, step):
    assert choose_step(T0 - span, T0, min_step=min_step) == step
    assert (span.total_seconds() / step) <= 300


def test_an_address_that_is_not_http_is_refused():
    with pytest.raises(PrometheusError, match="is not an http:// or https:// address"):
        PrometheusClient("ftp://prometheus:9090")


def test_nothing_listening_is_a_transient_error_in_words():
    client = PrometheusClient(f"http://127.0.0.1:{free_port()}", timeout=2)
    with pytest.raises(PrometheusError, match="cannot be reached") as error:
        client.query("up")
    assert error.value.transient


# --- the source row -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_prometheus_source_needs_an_address_and_one_credential():
    source = MetricsSource.load()
    assert source.kind == MetricsSourceKind.DIRECT and not source.is_prometheus
    source.kind = MetricsSourceKind.PROMETHEUS
    with transaction.atomic(), pytest.raises(IntegrityError):
        source.save()
    source.url, source.bearer_token, source.username = "http://prom:9090", "t", "u"
    with transaction.atomic(), pytest.raises(IntegrityError):
        source.save()


@pytest.mark.django_db
def test_a_failed_cycle_is_recorded_and_changes_nothing(demo_inventory):
    gpu = gpus_of()[0]
    GpuActivity.objects.create(gpu=gpu, utilization=1.0, sampled_at=timezone.now())
    MetricsSource.objects.filter(pk=MetricsSource.load().pk).update(
        kind=MetricsSourceKind.PROMETHEUS, url=f"http://127.0.0.1:{free_port()}", timeout_seconds=2
    )
    result = poll()
    assert "cannot be reached" in result.error
    assert GpuActivity.objects.filter(gpu=gpu).exists()
    assert "cannot be reached" in MetricsSource.load().last_error


# --- derived activity -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_prometheus_activity_keeps_no_history_dates_a_low_window_back_and_forgets_the_rest(demo_inventory):
    TenancySettings.objects.filter(pk=TenancySettings.load().pk).update(
        idle_threshold_percent=5.0, idle_window_minutes=30
    )
    a, b, c, d = gpus_of()
    # a, b and c are held since long before the window; e since 10 minutes, f by nobody (a run of low
    # samples is kept only while a job holds the GPU, dated back no further than when it got it).
    e, f = gpus_of("gb-r01-t02")[:2]
    research = make_department("Research")
    run_job(research, [a, b, c], "long", placed_at=T0 - timedelta(hours=2))
    run_job(research, [e], "recent", placed_at=T0 - timedelta(minutes=10))
    GpuActivity.objects.create(gpu=d, utilization=1.0, sampled_at=T0 - timedelta(minutes=1), low_since=T0)
    result = record_activity(
        {a.uuid: 1.0, b.uuid: 1.0, c.uuid: 70.0, e.uuid: 1.0, f.uuid: 1.0, "GPU-unknown": 3.0},
        T0,
        # b reported only lately; c is busy now; e and f were low for the whole window
        low_for_window={a.uuid: 4.0, c.uuid: 2.0, e.uuid: 1.0, f.uuid: 1.0},
        forget_others=True,
    )
    assert (result.recorded, result.unknown_gpus, result.forgotten) == (5, ("GPU-unknown",), 1)
    rows = dict(GpuActivity.objects.values_list("gpu_id", "low_since"))
    assert rows == {
        a.pk: T0 - timedelta(minutes=30),
        b.pk: T0,
        c.pk: None,
        e.pk: T0 - timedelta(minutes=10),
        f.pk: None,
    }
    assert not GpuUtilization.objects.exists()


@pytest.mark.django_db
def test_direct_activity_not_refreshed_goes_stale(demo_inventory):
    a, b = gpus_of()[:2]
    record_samples([Sample(uuid=a.uuid, hostname="", gpu_index=0, value=1.0)], at=T0)
    record_samples([Sample(uuid=b.uuid, hostname="", gpu_index=1, value=1.0)], at=T0 + STALE_AFTER)
    assert forget_stale_activity(now=T0 + STALE_AFTER + timedelta(seconds=1)) == 1
    assert list(GpuActivity.objects.values_list("gpu_id", flat=True)) == [b.pk]


@pytest.mark.django_db
def test_department_utilization_is_the_mean_of_its_held_gpus(demo_inventory):
    research = make_department("Research")
    run_job(research, trays=["gb-r01-t01"])
    gpus = gpus_of()
    record_activity({gpu.uuid: value for gpu, value in zip(gpus, [10.0, 20.0, 30.0, 40.0], strict=True)}, T0)
    record_activity({gpus_of("gb-r01-t02")[0].uuid: 99.0}, T0)  # held by nobody: not counted
    assert department_utilization(now=T0) == {research.pk: {"mean": pytest.approx(25.0), "gpus_with_data": 4}}
    assert department_utilization(now=T0 + STALE_AFTER + timedelta(seconds=1)) == {}  # stale: no data


# --- the direct source's history: downsampled and bounded ------------------------------------------------


def _buckets(gpu, start: datetime, count: int, mean=lambda n: float(n % 12), samples=5):
    GpuUtilization.objects.bulk_create(
        GpuUtilization(
            gpu=gpu,
            bucket_start=start + timedelta(minutes=5 * n),
            mean=mean(n),
            peak=mean(n) + 1,
            samples=samples,
        )
        for n in range(count)
    )


@pytest.mark.django_db
def test_buckets_past_a_day_become_hourly_with_the_same_figures(demo_inventory):
    gpu = gpus_of()[0]
    now = T0 + timedelta(days=2)
    _buckets(gpu, T0, 2 * 288)  # two days of 5-minute buckets, means 0..11 each hour
    result = downsample_history(now=now)

    # Everything before now - 1 day (T0 + 1 day) is hourly: 24 hours of 12 buckets each.
    assert (result.merged, result.hourly, result.capped) == (288, 24, 0)
    hourly = GpuUtilization.objects.filter(seconds=3600).order_by("bucket_start")
    assert [row.bucket_start for row in hourly] == [T0 + timedelta(hours=h) for h in range(24)]
    first = hourly[0]
    assert (first.mean, first.peak, first.samples) == (pytest.approx(5.5), 12.0, 60)
    assert GpuUtilization.objects.filter(seconds=300).count() == 288
    assert GpuUtilization.objects.filter(seconds=300).order_by("bucket_start")[
        0
    ].bucket_start == T0 + timedelta(days=1)
    # Again: nothing more to merge.
    assert downsample_history(now=now) == type(result)(merged=0, hourly=0, capped=0)


@pytest.mark.django_db
def test_rows_per_gpu_are_capped_newest_kept(demo_inventory):
    a, b = gpus_of()[:2]
    now = T0 + timedelta(hours=2)
    _buckets(a, T0, 20)
    _buckets(b, T0, 5)
    result = downsample_history(now=now, max_rows_per_gpu=8)
    assert result.capped == 12
    kept = list(
        GpuUtilization.objects.filter(gpu=a).order_by("bucket_start").values_list("bucket_start", flat=True)
    )
    assert kept == [T0 + timedelta(minutes=5 * n) for n in range(12, 20)]
    assert GpuUtilization.objects.filter(gpu=b).count() == 5


@pytest.mark.django_db
def test_the_direct_source_charts_its_buckets(demo_inventory):
    a, b = gpus_of()[:2]
    _buckets(a, T0, 3, mean=lambda n: 10.0 * n)
    _buckets(b, T0, 3, mean=lambda n: 30.0)
    history, step = utilization_history([a.uuid, b.uuid], T0, T0 + timedelta(minutes=10))
    assert step == 300
    assert history[a.uuid] == [(T0 + timedelta(minutes=5 * n), 10.0 * n) for n in range(3)]
    mean, _ = utilization_history([a.uuid, b.uuid], T0, T0 + timedelta(minutes=10), mean=True)
    assert [value for _, value in mean["mean"]] == [15.0, 20.0, 25.0]


# --- charts and pages -----------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_chart_html_is_the_validated_figure():
    series = {"GPU-a": [(T0, 10.0), (T0 + timedelta(minutes=5), 55.5)]}
    html = utilization_html(series, div_id="u", names={"GPU-a": "GPU 0"}, height=360)
    figure = utilization_figure(series, names={"GPU-a": "GPU 0"})
    assert figure.data[0].name == "GPU 0" and list(figure.data[0].y) == [10.0, 55.5]
    assert figure.layout.yaxis.range == (0, 100)
    assert 'data-plotly-figure="' in html and "GPU 0" in html and "55.5" in html


def test_the_chart_draws_times_in_the_viewers_zone_and_names_it():
    """plotly.js draws an ISO time's wall clock whatever its offset: the chart gets the viewer's wall clock
    and names the zone, so a viewer in Tokyo sees the same times on the chart as on the page around it."""
    from django.utils import timezone as django_timezone

    series = {"GPU-a": [(T0, 10.0)]}
    with django_timezone.override("Asia/Tokyo"):
        figure = utilization_figure(series, x_range=(T0, T0 + timedelta(hours=1)))
    tokyo = T0.astimezone(ZoneInfo("Asia/Tokyo")).replace(tzinfo=None)
    assert list(figure.data[0].x) == [tokyo.isoformat()]
    assert figure.layout.xaxis.title.text == "Asia/Tokyo"
    assert figure.layout.xaxis.tickformat == "%m-%d %H:%M"  # numbers in every language, no month names
    assert figure.layout.xaxis.range[0] == tokyo.isoformat()
    assert utilization_figure(series).layout.xaxis.title.text == "UTC"


def test_a_run_minutes_old_has_ticks_that_differ():
    """A job that started two minutes ago: ticks a few seconds apart, so they read in seconds (they all read
    the same minute as %H:%M, found in the walkthrough); an hour's range keeps minutes."""
    series = {"GPU-a": [(T0, 10.0)]}
    short = utilization_figure(series, x_range=(T0, T0 + timedelta(minutes=2))).layout.xaxis
    assert (short.tickformat, short.hoverformat) == ("%H:%M:%S", "%Y-%m-%d %H:%M:%S")
    hour = utilization_figure(series, x_range=(T0, T0 + timedelta(hours=1))).layout.xaxis
    assert hour.tickformat == "%m-%d %H:%M"


@pytest.mark.django_db
def test_a_gpu_page_loads_its_chart_for_the_range_asked(demo_inventory, client_as):
    gpu = gpus_of()[0]
    now = timezone.now()
    _buckets(gpu, now - timedelta(minutes=30), 3, mean=lambda n: 42.0)
    client = client_as("platform_admin")
    page = client.get(reverse("inventory:gpu-detail", args=[gpu.pk]))
    url = reverse("scheduling:gpu-utilization", args=[gpu.pk])
    assert url in page.content.decode()

    answer = client.get(url, {"range": "1h"})
    text = answer.content.decode()
    assert answer.status_code == 200
    assert "data-plotly-figure" in text and "42.0" in text
    assert "From Rackplane&#x27;s own samples, one point every 5 min." in text
    assert 'aria-current="true">Last hour<' in text

    old = client.get(url, {"range": "nonsense"}).content.decode()
    assert 'aria-current="true">6 hours<' in old


@pytest.mark.django_db
def test_a_job_page_loads_its_chart_and_says_when_prometheus_cannot_answer(demo_inventory, client_as):
    research = make_department("Research")
    job = run_job(research, trays=["gb-r01-t01"], started_at=timezone.now() - timedelta(hours=1))
    client = client_as("platform_admin")
    url = reverse("scheduling:job-utilization", args=[job.pk])
    assert url in client.get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    empty = client.get(url).content.decode()
    assert "No utilization samples in this range" in empty and 'aria-current="true">Its run<' in empty

    MetricsSource.objects.filter(pk=MetricsSource.load().pk).update(
        kind=MetricsSourceKind.PROMETHEUS, url=f"http://127.0.0.1:{free_port()}", timeout_seconds=2
    )
    answer = client.get(url)
    assert answer.status_code == 200
    assert "Prometheus could not be asked: the Prometheus query API at 127.0.0.1:" in answer.content.decode()


@pytest.mark.django_db
def test_someone_outside_the_department_gets_no_job_chart(demo_inventory, client_as):
    job = run_job(make_department("Research"), trays=["gb-r01-t01"])
    assert client_as("outsider").get(reverse("scheduling:job-utilization", args=[job.pk])).status_code == 404


# --- the admin ------------------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_the_admin_keeps_secrets_unshown_and_tests_the_connection(admin_client):
    client = admin_client
    url = reverse("admin:tenancy_metricssource_change", args=[MetricsSource.load().pk])
    form = admin_form(bearer_token="s3cret-token-value")
    answer = client.post(url, {**form, "_test_connection": "1"}, follow=True)
    text = answer.content.decode()
    assert "Saved, but the test failed: the Prometheus query API at 127.0.0.1:" in text
    assert MetricsSource.load().bearer_token == "s3cret-token-value"
    page = client.get(url).content.decode()
    assert "s3cret-token-value" not in page and "A bearer token (not shown)." in page

    client.post(url, {**form, "bearer_token": ""})  # left empty: the saved one stays
    assert MetricsSource.load().bearer_token == "s3cret-token-value"
    client.post(url, {**form, "bearer_token": "", "clear_credentials": "on"})
    assert MetricsSource.load().bearer_token == ""

    bad = client.post(url, {**form, "uuid_label": "gpu-uuid", "ca_file": "ca.pem"}).content.decode()
    assert "The UUID label &#x27;gpu-uuid&#x27; is not a label name." in bad
    assert "Give the CA bundle&#x27;s absolute path" in bad


@pytest.mark.django_db
def test_with_prometheus_as_the_source_a_push_records_health_not_utilization(node_agent, demo_inventory):
    MetricsSource.objects.filter(pk=MetricsSource.load().pk).update(
        kind=MetricsSourceKind.PROMETHEUS, url="http://prometheus.invalid:9090"
    )
    gpus = gpus_of()
    page = "".join(
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu.index}",UUID="{gpu.uuid}"}} 3\n'
        f'DCGM_FI_DEV_XID_ERRORS{{gpu="{gpu.index}",UUID="{gpu.uuid}"}} 79\n'
        for gpu in gpus[:1]
    )
    answer = token_client(node_agent).post("/api/v1/telemetry/dcgm/", data=page, content_type="text/plain")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["recorded"], body["utilization_from"]) == (0, "prometheus")
    assert body["health_events"] == 1
    assert not GpuActivity.objects.exists() and not GpuUtilization.objects.exists()
