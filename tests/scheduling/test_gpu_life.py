"""The GPUs' life (scheduling.views.gpu_life): the rack view's colour-by switch, time ranges, jobs that held
a GPU."""

import re
from datetime import UTC, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from inventory.models import ComputeTray, Gpu
from scheduling.views import gpu_life
from tenancy.activity import bucket_start, record_samples
from tenancy.choices import MetricsSourceKind
from tenancy.models import GpuActivity, GpuUtilization, MetricsSource
from tenancy.telemetry import Sample

pytestmark = pytest.mark.django_db


def _rack_gpus(rack="gb-r01"):
    return list(
        Gpu.objects.filter(tray__rack__name=rack).select_related("tray").order_by("tray__slot", "index")
    )


# ------------------------------------------------------------------------------------------ colour by


@pytest.mark.parametrize(
    ("value", "band"),
    [(None, "none"), (0.0, "0"), (4.9, "0"), (5.0, "1"), (30, "2"), (74.9, "3"), (100, "4")],
)
def test_utilization_bands(value, band):
    assert gpu_life.utilization_band(value) == band


def test_recent_utilization_direct_uses_the_last_five_minutes_of_buckets(demo_inventory):
    gpus = _rack_gpus()[:3]
    now = timezone.now()
    record_samples([Sample(gpus[0].uuid, "", 0, 80.0), Sample(gpus[1].uuid, "", 1, 2.0)], at=now)
    record_samples([Sample(gpus[0].uuid, "", 0, 60.0)], at=now)
    # An hour-old bucket is not "the last 5 minutes": the third GPU has no data.
    GpuUtilization.objects.create(
        gpu=gpus[2], bucket_start=bucket_start(now - timedelta(hours=1)), mean=90, peak=90
    )
    values = gpu_life.recent_utilization([gpu.pk for gpu in gpus], now=now)
    assert values == {gpus[0].pk: pytest.approx(70.0), gpus[1].pk: pytest.approx(2.0)}


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_recent_utilization_prometheus_uses_fresh_activity_rows(demo_inventory):
    MetricsSource.objects.update_or_create(
        pk=1, defaults={"kind": MetricsSourceKind.PROMETHEUS, "url": "http://prometheus.invalid:9090"}
    )
    gpus = _rack_gpus()[:2]
    now = timezone.now()
    GpuActivity.objects.create(gpu=gpus[0], utilization=42.0, sampled_at=now - timedelta(minutes=1))
    GpuActivity.objects.create(gpu=gpus[1], utilization=99.0, sampled_at=now - timedelta(hours=2))
    assert gpu_life.recent_utilization([gpu.pk for gpu in gpus], now=now) == {gpus[0].pk: 42.0}


def test_rack_view_colours_by_utilization_with_a_legend_and_no_data(
    client_as, platform_admin, demo_inventory
):
    gpus = _rack_gpus()
    record_samples([Sample(gpus[0].uuid, "", 0, 91.0), Sample(gpus[1].uuid, "", 1, 1.0)])
    client = client_as(platform_admin)
    url = reverse("scheduling:rack-detail", args=["gb-r01"])

    html = client.get(url).content.decode()
    assert 'class="rack-grid colour-by-partition"' in html
    assert "data-utilization" not in html  # no telemetry query unless asked

    response = client.get(url, {"colour": "utilization"})
    html = response.content.decode()
    assert 'class="rack-grid colour-by-utilization"' in html
    assert f'data-gpu-uuid="{gpus[0].uuid}" data-utilization="91"' in html
    assert f'data-gpu-uuid="{gpus[1].uuid}" data-utilization="1"' in html
    assert f'data-gpu-uuid="{gpus[2].uuid}" data-utilization="none"' in html
    assert "util-4" in html and "util-none" in html
    assert "75 % and over" in html and "no data" in html
    legend = response.context["utilization_legend"]
    assert legend["no_data"] == len(gpus) - 2
    assert dict((band, count) for band, _, count in legend["bands"]) == {
        "0": 1,
        "1": 0,
        "2": 0,
        "3": 0,
        "4": 1,
    }

    health = client.get(url, {"colour": "health"}).content.decode()
    assert 'class="rack-grid colour-by-health"' in health and "Unknown or not supported" in health


def test_rack_view_unknown_colour_is_partition_and_keeps_the_job_parameter(
    client_as, platform_admin, demo_inventory
):
    client = client_as(platform_admin)
    url = reverse("scheduling:rack-detail", args=["gb-r01"])
    response = client.get(url, {"colour": "<script>", "job": "7"})
    assert response.status_code == 200
    assert response.context["colour_by"] == "partition"
    links = {key: query for key, _, query, _ in response.context["colour_links"]}
    assert links["utilization"] == "?job=7&colour=utilization"
    assert links["partition"] == "?job=7"
    assert "<script>" not in response.content.decode().split("<main", 1)[1]


# --------------------------------------------------------------------------------------------- ranges


def test_parse_range_known_unknown_and_missing():
    now = timezone.now()
    week = gpu_life.parse_range("7d", now=now)
    assert (week.key, week.start, week.end, week.note) == ("7d", now - timedelta(days=7), now, "")
    missing = gpu_life.parse_range(None, now=now)
    assert missing.key == "24h" and missing.note == ""
    bad = gpu_life.parse_range("999y<b>", now=now)
    assert bad.key == "24h" and bad.start == now - timedelta(hours=24)
    assert "no time range" in bad.note and "1h, 24h, 7d, 30d" in bad.note
    assert [key for key, _, chosen in bad.choices if chosen] == ["24h"]


# ---------------------------------------------------------------------------------- jobs that held it


def test_jobs_that_held_a_tray_respect_range_and_visibility(
    demo_inventory, department_a, department_b, member_a
):
    from tests.factories import make_job

    tray = ComputeTray.objects.get(hostname="gb-r02-t01")
    now = timezone.now()
    mine = make_job(
        department_a,
        "mine",
        state="completed",
        trays=[tray],
        started_at=now - timedelta(hours=3),
        finished_at=now - timedelta(hours=1),
    )
    make_job(
        department_b,
        "theirs",
        state="completed",
        trays=[tray],
        started_at=now - timedelta(hours=5),
        finished_at=now - timedelta(hours=4),
    )
    make_job(
        department_a,
        "old",
        state="completed",
        trays=[tray],
        started_at=now - timedelta(days=3),
        finished_at=now - timedelta(days=2),
    )
    make_job(
        department_a,
        "elsewhere",
        state="completed",
        trays=["gb-r02-t02"],
        started_at=now - timedelta(hours=2),
        finished_at=now - timedelta(hours=1),
    )
    day = gpu_life.parse_range("24h", now=now)
    held = gpu_life.jobs_that_held(member_a, hostnames=[tray.hostname], start=day.start, end=day.end)
    assert [job.name for job in held["jobs"]] == ["mine"]
    assert held["hidden"] == 1 and held["more"] is False
    month = gpu_life.parse_range("30d", now=now)
    held = gpu_life.jobs_that_held(member_a, hostnames=[tray.hostname], start=month.start, end=month.end)
    assert [job.name for job in held["jobs"]] == ["mine", "old"]
    assert mine.pk == held["jobs"][0].pk


# ----------------------------------------------------------------------------- GPU and tray life pages


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_held_jobs_fragment_range_picker_and_bad_range(client_as, member_a, department_a, demo_inventory):
    from tests.factories import make_job

    tray = ComputeTray.objects.get(hostname="gb-r02-t03")
    gpu = tray.gpus.get(index=0)
    now = timezone.now()
    make_job(
        department_a,
        "week-old",
        state="completed",
        trays=[tray],
        started_at=now - timedelta(days=5),
        finished_at=now - timedelta(days=4),
        exit_code=0,
    )
    client = client_as(member_a)
    for url in (
        reverse("scheduling:gpu-held-jobs", args=[gpu.pk]),
        reverse("scheduling:tray-held-jobs", args=[tray.pk]),
    ):
        day = client.get(url)
        assert day.status_code == 200
        assert (
            "week-old" not in day.content.decode() and "No job you may see ran here" in day.content.decode()
        )
        week = client.get(url, {"range": "7d"}).content.decode()
        assert "week-old" in week and 'aria-current="true">7 days' in week
        bad = client.get(url, {"range": "<script>alert(1)</script>"})
        assert bad.status_code == 200
        html = bad.content.decode()
        assert "There is no time range" in html and "<script>alert" not in html and "&lt;script&gt;" in html
    # The page loads the fragments; a GPU of no visible tray is a 404.
    page = client.get(reverse("inventory:tray-detail", args=[tray.pk])).content.decode()
    assert (
        reverse("scheduling:tray-held-jobs", args=[tray.pk]) in page
        and reverse("scheduling:tray-utilization", args=[tray.pk]) in page
    )
    assert (
        reverse("scheduling:gpu-held-jobs", args=[gpu.pk])
        in client.get(reverse("inventory:gpu-detail", args=[gpu.pk])).content.decode()
    )
    assert client.get(reverse("scheduling:gpu-held-jobs", args=[999999])).status_code == 404


def test_tray_utilization_chart_from_buckets(client_as, platform_admin, demo_inventory):
    tray = ComputeTray.objects.get(hostname="gb-r01-t02")
    gpus = list(tray.gpus.order_by("index"))
    record_samples([Sample(gpu.uuid, "", gpu.index, 10.0 * (gpu.index + 1)) for gpu in gpus])
    html = (
        client_as(platform_admin)
        .get(reverse("scheduling:tray-utilization", args=[tray.pk]), {"range": "1h"})
        .content.decode()
    )
    assert 'id="utilization-chart-tray-' in html and "GPU 3" in html


def _figure(html):
    import html as html_lib
    import json
    import re

    return json.loads(html_lib.unescape(re.search(r'data-plotly-figure="([^"]+)"', html).group(1)))


def test_utilization_chart_ends_at_the_request_time_not_the_last_sample(
    client_as, platform_admin, demo_inventory
):
    tray = ComputeTray.objects.get(hostname="gb-r01-t02")
    gpu = tray.gpus.order_by("index").first()
    record_samples([Sample(gpu.uuid, "", gpu.index, 40.0)], at=timezone.now() - timedelta(minutes=20))
    before = timezone.now()
    html = (
        client_as(platform_admin)
        .get(reverse("scheduling:tray-utilization", args=[tray.pk]), {"range": "1h"})
        .content.decode()
    )
    # The chart's times are wall-clock times in the viewer's zone (UTC here), without an offset (plotly).
    start, end = (
        timezone.datetime.fromisoformat(moment).replace(tzinfo=UTC)
        for moment in _figure(html)["layout"]["xaxis"]["range"]
    )
    assert before <= end <= timezone.now() and end - start == timedelta(hours=1)
    [trace] = [trace for trace in _figure(html)["data"] if trace["name"] == f"GPU {gpu.index}"]
    assert timezone.datetime.fromisoformat(trace["x"][-1]).replace(tzinfo=UTC) < end - timedelta(minutes=15)


def test_a_job_that_started_inside_the_current_bucket_shows_its_first_sample(
    client_as, member_a, department_a, demo_inventory
):
    from tests.factories import make_job

    now = timezone.now()
    job = make_job(department_a, "fresh", state="running", trays=["gb-r02-t05"])
    gpus = list(Gpu.objects.filter(allocations__job=job).order_by("index"))
    record_samples([Sample(gpu.uuid, "", gpu.index, 77.0) for gpu in gpus], at=now)
    # The job started after the bucket holding its only sample began (up to five minutes ago).
    job.started_at = max(bucket_start(now) + timedelta(seconds=1), now - timedelta(seconds=1))
    job.save(update_fields=["started_at"])
    html = client_as(member_a).get(reverse("scheduling:job-utilization", args=[job.pk])).content.decode()
    assert "No utilization samples" not in html
    traces = _figure(html)["data"]
    assert len(traces) == len(gpus) == 4
    for trace in traces:
        assert trace["y"] == [77.0] and trace["mode"] == "lines+markers"
        assert timezone.datetime.fromisoformat(trace["x"][0]).replace(tzinfo=UTC) >= job.started_at


# ------------------------------------------------------------------------------------ a job's logs


def _dispatched(department, tray="gb-r02-t05", **fields):
    """A job placed on `tray` and handed to the embedded backend (no target enabled): rendered files."""
    from integrations.dispatch import dispatch
    from tests.factories import make_job

    fields.setdefault("work", {"script": "#!/bin/bash\nsrun python train.py\n"})
    job = make_job(department, "logs", state="starting", trays=[tray], **fields)
    assert dispatch(job.pk) == "submitted"
    job.refresh_from_db()
    assert job.backend_id.startswith("rendered/")
    return job


def test_embedded_job_logs_show_what_was_rendered(client_as, member_a, department_a, demo_inventory):
    job = _dispatched(department_a, work={"script": "#!/bin/bash\necho <b>hello</b>\n"})
    response = client_as(member_a).get(reverse("integrations:job-logs", args=[job.pk]))
    html = response.content.decode()
    assert response.status_code == 200
    assert "the embedded backend" in html
    assert "echo &lt;b&gt;hello&lt;/b&gt;" in html and "<b>hello</b>" not in html  # escaped in the <pre>
    page = client_as(member_a).get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    assert reverse("integrations:job-logs", args=[job.pk]) in page


def test_job_logs_are_bounded_and_download_gives_all(
    client_as, member_a, department_a, demo_inventory, settings
):
    from integrations.logs import DEFAULT_LIMIT

    job = _dispatched(department_a)
    (rendered,) = [
        path
        for path in (settings.RACKPLANE_RENDER_DIR / "jobs").glob(f"rp-{job.pk}.*")
        if path.suffix != ".ends"
    ]
    lines = [f"line {number:06d} <tag>\n" for number in range(20000)]  # ~400 KB
    rendered.write_text("".join(lines))
    client = client_as(member_a)
    html = client.get(reverse("integrations:job-logs", args=[job.pk])).content.decode()
    shown = html.split('<pre class="log" tabindex="0">', 1)[1].split("</pre>", 1)[0]
    assert len(shown.replace("&lt;", "<").replace("&gt;", ">").encode()) <= DEFAULT_LIMIT
    assert "line 019999 &lt;tag&gt;" in shown and "line 000000" not in shown
    assert shown.startswith("line ")  # cut at a line, not mid-line
    assert "data-truncated" in html and "Download all" in html
    download = client.get(reverse("integrations:job-logs", args=[job.pk]), {"download": "1"})
    assert download["Content-Type"].startswith("text/plain")
    assert download["Content-Disposition"] == f'attachment; filename="job-{job.pk}.log"'
    assert download.content.decode() == "".join(lines)


def test_job_logs_of_a_job_one_may_not_see_are_404(client_as, member_b, department_a, demo_inventory):
    job = _dispatched(department_a)
    client = client_as(member_b)
    assert client.get(reverse("integrations:job-logs", args=[job.pk])).status_code == 404
    assert client.get(reverse("integrations:job-logs", args=[job.pk]), {"download": "1"}).status_code == 404


# --------------------------------------------------------------------------------------------- resubmit


def test_resubmit_makes_the_same_job_audited_once(client_as, member_a, lead_a, department_a, demo_inventory):
    from core.models import AuditEvent
    from scheduling.models import Job
    from tests.factories import make_job

    old = make_job(
        department_a,
        "nightly",
        state="failed",
        trays=["gb-r02-t07"],
        submitted_by=lead_a,
        started_at=timezone.now() - timedelta(hours=2),
        finished_at=timezone.now(),
        exit_code=137,
        work={"script": "#!/bin/bash\nsrun train.py\n"},
        time_limit_minutes=90,
    )
    client = client_as(member_a)
    confirm = client.get(reverse("scheduling:job-resubmit", args=[old.pk]))
    assert confirm.status_code == 200 and "Resubmit job" in confirm.content.decode()
    assert Job.objects.count() == 1  # a GET never writes
    key = confirm.context["key"]
    response = client.post(reverse("scheduling:job-resubmit", args=[old.pk]), {"key": key})
    new = Job.objects.exclude(pk=old.pk).get()
    assert response.status_code == 302 and response["Location"] == reverse(
        "scheduling:job-detail", args=[new.pk]
    )
    assert (
        new.name,
        new.gpus,
        new.topology,
        new.backend,
        new.work,
        new.time_limit_minutes,
        new.department,
    ) == (old.name, old.gpus, old.topology, old.backend, old.work, old.time_limit_minutes, old.department)
    assert new.state == "pending" and new.submitted_by == member_a
    assert new.events.get(kind="submitted").message == f"Resubmitted from job #{old.pk} by member-a"
    # Stored in English, read in the viewer's language (the second walkthrough found it English in Japanese).
    japanese = client.get(reverse("scheduling:job-detail", args=[new.pk]), HTTP_ACCEPT_LANGUAGE="ja")
    assert f"member-a がジョブ #{old.pk} から再投入" in re.sub(r"<[^>]+>", "", japanese.content.decode())
    event = AuditEvent.objects.get(object_type="scheduling.job", object_id=str(new.pk), action="create")
    assert event.actor == member_a
    # The same form posted again (a double click, a retry) makes no second job.
    client.post(reverse("scheduling:job-resubmit", args=[old.pk]), {"key": key})
    assert Job.objects.count() == 2


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_resubmit_refused_for_jobs_one_may_not_see_or_submit(
    client_as, member_b, outsider, department_a, demo_inventory
):
    from scheduling.models import Job
    from tests.factories import make_job

    old = make_job(department_a, "nightly", state="completed", trays=["gb-r02-t08"])
    assert client_as(member_b).post(reverse("scheduling:job-resubmit", args=[old.pk])).status_code == 404
    assert client_as(outsider).get(reverse("scheduling:job-resubmit", args=[old.pk])).status_code == 404
    assert Job.objects.count() == 1


def test_resubmit_refused_by_the_service_says_why(client_as, platform_admin, department_a, demo_inventory):
    from scheduling.models import Job
    from tests.factories import make_job

    old = make_job(department_a, "huge", state="completed", trays=["gb-r02-t09"], gpus=4)
    Job.objects.filter(pk=old.pk).update(gpus=100000)  # more than the fleet has: check_request refuses it
    response = client_as(platform_admin).post(
        reverse("scheduling:job-resubmit", args=[old.pk]), {"key": "k-1"}
    )
    assert response.status_code == 400
    assert "Not submitted" in response.content.decode()
    assert Job.objects.count() == 1


def test_slurm_output_path_patterns():
    from integrations.slurm.logs import _expand_slurm_path

    assert _expand_slurm_path("/work/%x-%j.out", "4242", "rp-7", "rackplane") == "/work/rp-7-4242.out"
    assert _expand_slurm_path("/w/%u/%A_100%%.log", "9", "n", "alice") == "/w/alice/9_100%.log"
    assert _expand_slurm_path("/w/%N.out", "9", "n", "u") == "/w/%N.out"  # unknown patterns left as they are


def test_slurm_logs_read_only_inside_the_working_directory(tmp_path):
    from integrations.slurm import versions
    from integrations.slurm.logs import slurm_logs as _slurm_logs

    class FakeRecordBackend:  # stands in for slurmrestd's answer only: the file reading is what is tested
        workdir = str(tmp_path)
        dialect = versions.KNOWN["v0.0.42"]

        def __init__(self, stdout):
            self.stdout = stdout

        def _job(self, backend_id):
            return {
                "job_id": int(backend_id),
                "name": "rp-5",
                "user_name": "rackplane",
                "standard_output": self.stdout,
            }

    class Job:
        pk, preemptions, backend_id = 5, 0, "77"

    (tmp_path / "rp-5-77.out").write_text("step 1 <ok>\n")
    inside = _slurm_logs(FakeRecordBackend(f"{tmp_path}/%x-%j.out"), Job(), 1024)
    assert inside.parts[0].text == "step 1 <ok>\n" and inside.source.endswith(f"{tmp_path}/rp-5-77.out")
    outside = _slurm_logs(FakeRecordBackend("/etc/passwd"), Job(), 1024)
    assert outside.parts[0].text == "" and "outside the jobs' working directory" in outside.parts[0].error
    # v0.0.43 on: standard_output is the pattern as submitted, stdout_expanded Slurm's expansion.
    expanded = FakeRecordBackend(f"{tmp_path}/%x-%j.out")
    expanded.dialect = versions.KNOWN["v0.0.45"]
    expanded._job = lambda backend_id: {
        "standard_output": "/tmp/%j",
        "stdout_expanded": f"{tmp_path}/rp-5-77.out",
    }
    assert _slurm_logs(expanded, Job(), 1024).parts[0].text == "step 1 <ok>\n"
    missing = _slurm_logs(FakeRecordBackend(f"{tmp_path}/gone-%j.out"), Job(), 1024)
    assert (
        "does not exist" in missing.parts[0].error
        and "mount the jobs' working directory" in missing.parts[0].error
    )
