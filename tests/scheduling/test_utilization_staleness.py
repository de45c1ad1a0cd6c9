"""One staleness rule for utilization (tenancy.activity.STALE_AFTER, fresh_activity): a GPU whose activity row
was not sampled within STALE_AFTER is "no data" on every screen, never idle and never working: the idle
lists and counts, the department page, a person's home, the admin dashboard, the rack view's colour by
utilization and the /metrics gauges. And a GPU sampled a few minutes ago is known everywhere alike."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from inventory.models import Gpu
from portal.pages.home import work_home
from scheduling import dashboard_data, usage
from scheduling.choices import HOLDING_STATES
from scheduling.models import Allocation
from scheduling.views import gpu_life
from tenancy.activity import STALE_AFTER, bucket_start, fresh_activity, record_samples
from tenancy.models import GpuActivity
from tenancy.telemetry import Sample
from tests.factories import healthy_gpus, run_job

pytestmark = pytest.mark.django_db

WORKING = "every allocated GPU is working"
TOKEN = "staleness-test-token"


@pytest.fixture
def gpus(demo_inventory):
    return healthy_gpus(8)


@pytest.fixture
def held(department_a, gpus):
    run_job(department_a, gpus, "alpha-train", started_at=timezone.now() - timedelta(hours=3))
    return gpus


def low_row(gpu, age: timedelta, *, low_for=timedelta(hours=3), utilization=2.0):
    """The walkthrough's row: low for hours (well past the 30-minute idle window), last sampled `age` ago."""
    now = timezone.now()
    GpuActivity.objects.update_or_create(
        gpu=gpu,
        defaults={"utilization": utilization, "sampled_at": now - age, "low_since": now - low_for},
    )


def idle_panel(markup: str) -> str:
    start = markup.index('aria-labelledby="idle-gpus"')
    return markup[start : markup.index("</section>", start)]


def idle_gauge(client, settings, slug: str) -> float:
    settings.RACKPLANE_METRICS_TOKEN = TOKEN
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            if sample.name == "rackplane_department_idle_gpus" and sample.labels == {"department": slug}:
                return sample.value
    raise AssertionError("no rackplane_department_idle_gpus sample for " + slug)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_stale_low_row_is_idle_nowhere_and_no_data_everywhere(
    client, client_as, settings, platform_admin, lead_a, department_a, held
):
    """2 GPUs low for hours and freshly sampled are idle; 2 as low whose telemetry stopped STALE_AFTER + 1
    minute ago are "no data"; the other 4 never reported."""
    fresh, stale = held[:2], held[2:4]
    for gpu in fresh:
        low_row(gpu, timedelta(seconds=30))
    for gpu in stale:
        low_row(gpu, STALE_AFTER + timedelta(minutes=1))
    idle_uuids = {gpu.uuid for gpu in fresh}
    stale_ids = {gpu.pk for gpu in stale}

    assert not set(usage.idle_activity_queryset().values_list("gpu_id", flat=True)) & stale_ids
    assert {gpu.uuid for gpu in usage.idle_gpus_queryset()} == idle_uuids
    assert usage.department_positions().of(department_a).idle == 2
    assert usage.held_without_data(department_a) == 6  # 2 stale + 4 never reported
    assert {gpu.uuid for gpu in dashboard_data.admin_dashboard().idle_gpus} == idle_uuids
    dashboard = dashboard_data.department_dashboard(lead_a, department_a)
    assert {gpu.uuid for gpu in dashboard.idle_gpus} == idle_uuids and dashboard.no_data_gpus == 6

    home = work_home(lead_a)  # a person's home
    assert {gpu.uuid for gpu in home.idle_gpus} == idle_uuids and home.no_data == 6

    page = client_as(lead_a).get(reverse("scheduling:department-detail", args=[department_a.slug]))
    panel = idle_panel(page.content.decode())
    assert set(re.findall(r'<tr data-gpu-uuid="([^"]+)">', panel)) == idle_uuids
    assert 'data-no-data="6"' in panel and WORKING not in panel

    admin = client_as(platform_admin).get("/tenancy/dashboard/").content.decode()
    for gpu in stale:
        assert gpu.uuid not in admin

    assert gpu_life.recent_utilization([gpu.pk for gpu in held]) == {gpu.pk: 2.0 for gpu in fresh}
    assert idle_gauge(client, settings, department_a.slug) == 2


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_rack_view_and_the_department_page_agree_six_minutes_after_telemetry_stopped(
    client_as, platform_admin, lead_a, department_a, held
):
    """Direct source, the sample's 5-minute bucket already outside the rack view's last five minutes: the
    GPU is still known (the row is fresh) on both screens; STALE_AFTER later it is "no data" on both."""
    base = bucket_start(timezone.now()) - timedelta(hours=1)
    sampled, now = base + timedelta(minutes=4), base + timedelta(minutes=10)  # 6 minutes stale
    assert bucket_start(sampled) < bucket_start(now - gpu_life.RECENT)
    record_samples([Sample(gpu.uuid, "", gpu.index, 80.0) for gpu in held], at=sampled)
    ids = [gpu.pk for gpu in held]
    assert gpu_life.recent_utilization(ids, now=now) == {pk: 80.0 for pk in ids}
    assert usage.held_without_data(department_a, now=now) == 0
    later = sampled + STALE_AFTER + timedelta(seconds=1)
    assert gpu_life.recent_utilization(ids, now=later) == {}
    assert usage.held_without_data(department_a, now=later) == len(held)

    # The same through the pages, at the real clock: the rows 6 minutes old.
    GpuActivity.objects.update(sampled_at=timezone.now() - timedelta(minutes=6))
    rack = held[0].tray.rack.name
    response = client_as(platform_admin).get(
        reverse("scheduling:rack-detail", args=[rack]), {"colour": "utilization"}
    )
    markup = response.content.decode()
    for gpu in held:
        assert f'data-gpu-uuid="{gpu.uuid}" data-utilization="80"' in markup
    on_rack = sum(1 for row in response.context["layout"].rows for cell in row.cells if cell is not None)
    assert response.context["utilization_legend"]["no_data"] == on_rack - len(
        [gpu for gpu in held if gpu.tray.rack.name == rack]
    )
    assert "nothing reported for 10 minutes" in markup
    page = client_as(lead_a).get(reverse("scheduling:department-detail", args=[department_a.slug]))
    panel = idle_panel(page.content.decode())
    assert WORKING in panel and "data-no-data" not in panel

    # Past STALE_AFTER: "no data" on both.
    GpuActivity.objects.update(sampled_at=timezone.now() - STALE_AFTER - timedelta(minutes=1))
    response = client_as(platform_admin).get(
        reverse("scheduling:rack-detail", args=[rack]), {"colour": "utilization"}
    )
    markup = response.content.decode()
    for gpu in held:
        assert f'data-gpu-uuid="{gpu.uuid}" data-utilization="none"' in markup
    panel = idle_panel(
        client_as(lead_a)
        .get(reverse("scheduling:department-detail", args=[department_a.slug]))
        .content.decode()
    )
    assert WORKING not in panel and f'data-no-data="{len(held)}"' in panel


def test_fresh_activity_is_the_one_rule(gpus):
    now = timezone.now()
    GpuActivity.objects.create(gpu=gpus[0], utilization=1.0, sampled_at=now - STALE_AFTER)
    GpuActivity.objects.create(
        gpu=gpus[1], utilization=1.0, sampled_at=now - STALE_AFTER - timedelta(seconds=1)
    )
    assert list(fresh_activity(now).values_list("gpu_id", flat=True)) == [gpus[0].pk]


# --- every GPU sampled, held or not (a DCGM exporter reports them all) --------------------------------------


def expected_without_data(department, now) -> int:
    """The definition, row by row: GPUs its running jobs hold with no activity row or a stale one."""
    fresh = set(fresh_activity(now).values_list("gpu_id", flat=True))
    held = Allocation.objects.filter(job__department=department, job__state__in=HOLDING_STATES)
    return sum(1 for gpu_id in held.values_list("gpu_id", flat=True) if gpu_id not in fresh)


@pytest.mark.parametrize(
    "rows",
    [
        # (held GPUs: fresh, stale, none), (free GPUs: fresh, stale, none)
        ((8, 0, 0), (6, 0, 0)),  # every GPU sampled: nothing to join
        ((5, 3, 0), (6, 0, 0)),  # every GPU has a row, three held ones stale: only the stale rows joined
        ((5, 0, 0), (2, 4, 0)),  # stale rows, none of them held
        ((6, 1, 1), (6, 0, 0)),  # a held GPU with no row at all: the anti-join
        ((8, 0, 0), (4, 0, 2)),  # free GPUs never sampled: the anti-join, nothing held without data
        ((0, 0, 8), (0, 0, 6)),  # no telemetry at all
    ],
)
@pytest.mark.parametrize("few", [True, False], ids=["from-the-stale-rows", "from-the-held-gpus"])
def test_held_without_data_counts_the_same_whether_or_not_every_gpu_has_a_row(
    demo_inventory, department_a, department_b, rows, few, monkeypatch
):
    # Both ways of counting the held GPUs on stale rows, whatever share of them is stale (usage.STALE_FEW).
    monkeypatch.setattr(usage, "STALE_FEW", 0 if few else 10**9)
    now = timezone.now()
    (fresh, stale, none), (free_fresh, free_stale, free_none) = rows
    gpus = healthy_gpus(fresh + stale + none + free_fresh + free_stale + free_none)
    assert len(gpus) == sum(rows[0]) + sum(rows[1])
    held, free = gpus[: fresh + stale + none], gpus[fresh + stale + none :]
    for department, share in ((department_a, held[:5]), (department_b, held[5:])):
        if share:
            run_job(department, share, f"{department.slug}-train", started_at=now - timedelta(hours=3))
    # The inventory's other GPUs have rows, fresh, so that the rows given here decide which way it counts.
    others = [g for g in Gpu.objects.exclude(pk__in=[g.pk for g in gpus])]
    GpuActivity.objects.bulk_create(GpuActivity(gpu=g, utilization=50.0, sampled_at=now) for g in others)
    for group, (n_fresh, n_stale) in ((held, (fresh, stale)), (free, (free_fresh, free_stale))):
        for gpu in group[:n_fresh]:
            low_row(gpu, timedelta(minutes=1))
        for gpu in group[n_fresh : n_fresh + n_stale]:
            low_row(gpu, STALE_AFTER + timedelta(minutes=1))
    every_gpu_has_a_row = none + free_none == 0
    assert (usage._activity_gaps(now)[0] == 0) == every_gpu_has_a_row
    for department in (department_a, department_b):
        assert usage.held_without_data(department, now) == expected_without_data(department, now)
    both = usage.held_without_data([department_a, department_b], now)
    assert both == stale + none


def test_when_every_row_is_stale_every_held_gpu_is_without_data(demo_inventory, department_a, department_b):
    """The telemetry stopped: every GPU's row is stale, so every held GPU is without data, counted as the
    held GPUs are (not one probe of the activity rows per held GPU: 250 ms for 290,000 at 10,000 racks)."""
    now = timezone.now()
    gpus = healthy_gpus(10)
    run_job(department_a, gpus[:6], "a-train", started_at=now - timedelta(hours=3))
    run_job(department_b, gpus[6:8], "b-train", started_at=now - timedelta(hours=2))
    every = list(Gpu.objects.all())
    old = now - STALE_AFTER - timedelta(minutes=1)
    GpuActivity.objects.bulk_create(GpuActivity(gpu=g, utilization=50.0, sampled_at=old) for g in every)
    assert usage._activity_gaps(now) == (0, len(every), len(every))
    for department, held in ((department_a, 6), (department_b, 2)):
        assert usage.held_without_data(department, now) == expected_without_data(department, now) == held
    GpuActivity.objects.filter(gpu=gpus[0]).update(sampled_at=now)  # one fresh again: only the stale counted
    assert usage.held_without_data(department_a, now) == expected_without_data(department_a, now) == 5


def test_a_gpu_low_while_free_is_not_its_new_jobs_idle_gpu_until_the_window_passes_while_held(
    department_a, gpus, settings
):
    """An exporter samples every GPU: one that sat free at 1 % for hours is low since then. A job placed on it
    a minute ago is not idle (it has not had the window to start working); once it has held the GPU for the
    window and it is still low, it is, idle since the placement."""
    now = timezone.now()
    for gpu in gpus:
        low_row(gpu, timedelta(minutes=1), low_for=timedelta(hours=5), utilization=1.0)
    placed = now - timedelta(minutes=1)
    job = run_job(department_a, gpus[:4], "just-placed", placed_at=placed, started_at=placed)
    assert usage.idle_gpus_queryset(now=now).count() == 0
    positions = usage.department_positions(now)
    assert positions.of(department_a).idle == 0

    later = now + timedelta(minutes=31)  # the window (30 minutes) since the placement, still low
    GpuActivity.objects.filter(gpu__in=gpus).update(sampled_at=later - timedelta(minutes=1))
    idle = list(usage.idle_gpus_queryset(now=later))
    assert {gpu.pk for gpu in idle} == {gpu.pk for gpu in gpus[:4]}
    assert {gpu.job_id for gpu in idle} == {job.pk} and {gpu.idle_since for gpu in idle} == {placed}
    assert usage.department_positions(later).of(department_a).idle == 4


@pytest.mark.parametrize("limit", [1, 2, 3, 10])
def test_the_longest_idle_come_first_by_idle_since_not_by_the_runs_start(department_a, gpus, limit):
    """A GPU whose low run began five hours ago under an earlier job but whose job got it 40 minutes ago is
    idle since then, after one idle for two hours: the list's order is by idle_since whatever `limit` is,
    though the two queries read by the run's start."""
    now = timezone.now()
    long_run, two_hours, one_hour = gpus[:3]
    for gpu, run in (
        (long_run, timedelta(hours=5)),
        (two_hours, timedelta(hours=2)),
        (one_hour, timedelta(hours=1)),
    ):
        low_row(gpu, timedelta(minutes=1), low_for=run, utilization=1.0)
    run_job(department_a, [long_run], "re-placed", placed_at=now - timedelta(minutes=40))
    run_job(department_a, [two_hours, one_hour], "idle-train", placed_at=now - timedelta(hours=3))
    listed = usage.longest_idle(usage.idle_gpus_queryset(now=now), limit, "hostname", "index")
    expected = [two_hours.pk, one_hour.pk, long_run.pk][:limit]
    assert [gpu.pk for gpu in listed] == expected
    assert [gpu.idle_since for gpu in listed] == sorted(gpu.idle_since for gpu in listed)


@pytest.mark.parametrize("window", [1, 2, 100])
def test_the_longest_idle_are_found_beyond_the_oldest_low_runs(
    department_a, department_b, gpus, window, monkeypatch
):
    """The list looks for its GPUs among the oldest low runs first (usage.CANDIDATES_PER_ROW per GPU
    listed); a department whose idle GPUs' runs are all younger than other departments' (and than the free
    GPUs' low runs) still gets its longest idle, in order, whatever that window is."""
    monkeypatch.setattr(usage, "CANDIDATES_PER_ROW", window)
    now = timezone.now()
    older, free, mine = gpus[:3], gpus[3:5], gpus[5:8]
    for n, gpu in enumerate(older):
        low_row(gpu, timedelta(minutes=1), low_for=timedelta(hours=10 - n))
    for gpu in free:  # sampled by the exporter, held by nobody: a low run, no idle GPU
        low_row(gpu, timedelta(minutes=1), low_for=timedelta(hours=12))
    for n, gpu in enumerate(mine):
        low_row(gpu, timedelta(minutes=1), low_for=timedelta(hours=2 + n))
    run_job(department_b, older, "b-idle", placed_at=now - timedelta(hours=11))
    run_job(department_a, mine, "a-idle", placed_at=now - timedelta(hours=11))
    queryset = usage.idle_gpus_queryset(now=now, department=department_a)
    for limit in (1, 2, 3):
        listed = usage.longest_idle(queryset, limit, "hostname", "index")
        assert [gpu.pk for gpu in listed] == [mine[2].pk, mine[1].pk, mine[0].pk][:limit]
    everyone = usage.longest_idle(usage.idle_gpus_queryset(now=now), 6, "hostname", "index")
    assert [gpu.pk for gpu in everyone] == [
        older[0].pk,
        older[1].pk,
        older[2].pk,
        mine[2].pk,
        mine[1].pk,
        mine[0].pk,
    ]
