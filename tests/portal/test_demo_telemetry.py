"""The demo's simulated DCGM exporters: the pure next-value rule (portal.demo.telemetry), the beat task that
records a sample for every allocated GPU through tenancy.activity.record_samples only when
RACKPLANE_DEMO_TELEMETRY is on (portal.tasks), and the seeded demo going on after the seed."""

import random
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from inventory.choices import TrayState
from inventory.models import ComputeTray, Gpu
from portal.demo.agents import record_demo_telemetry
from portal.demo.telemetry import (
    BUSY_FLOOR,
    IDLE_BELOW,
    IDLE_RANGE,
    IDLE_SHARE,
    busy_level,
    job_is_idle,
    next_utilization,
)
from portal.tasks import SIMULATE_DEMO_TELEMETRY, simulate_demo_telemetry
from scheduling.choices import HOLDING_STATES, JobState
from scheduling.models import Allocation, Job
from scheduling.usage import idle_gpus_queryset
from tenancy.activity import bucket_start
from tenancy.models import GpuActivity, GpuUtilization
from tests.embedded_stack import wait_for
from tests.factories import healthy_gpus, make_department, run_job, seed_demo
from tests.fresh_clone import REPO_ROOT, shell_env

# --- the pure rule ----------------------------------------------------------------------------------------


def walk(previous, job_id=7, gpu_id=3, steps=300, seed=1):
    rng = random.Random(seed)
    values = []
    for _ in range(steps):
        previous = next_utilization(previous, job_id, gpu_id, rng)
        values.append(previous)
    return values


def test_an_idle_gpu_stays_idle():
    values = walk(1.2)
    assert all(IDLE_RANGE[0] <= value <= IDLE_RANGE[1] for value in values)
    assert len(set(values)) > 10  # it still reports, with noise


def test_a_busy_gpu_varies_around_its_level_and_never_looks_idle():
    level = busy_level(7, 3)
    values = walk(92.0)
    assert min(values) >= BUSY_FLOOR and max(values) <= 100.0
    assert len(set(values)) > 50
    later = values[20:]  # after it has settled on its level
    assert abs(sum(later) / len(later) - level) < 3
    assert max(later) - min(later) > 5


def test_values_have_one_decimal_and_stay_in_range():
    rng = random.Random(5)
    for previous in (None, 0.0, 4.9, 5.0, 55.0, 100.0, 140.0):
        for job_id in range(40):
            value = next_utilization(previous, job_id, 1, rng)
            assert 0.0 <= value <= 100.0 and round(value, 1) == value


def test_a_new_job_is_idle_or_busy_once_for_all_its_gpus_with_the_seeds_odds():
    idle_jobs = [job_id for job_id in range(1, 4001) if job_is_idle(job_id)]
    assert abs(len(idle_jobs) / 4000 - IDLE_SHARE) < 0.02
    rng = random.Random(2)
    for job_id in (*idle_jobs[:5], *[j for j in range(1, 40) if not job_is_idle(j)][:5]):
        first = [next_utilization(None, job_id, gpu_id, rng) for gpu_id in range(8)]
        assert all((value < IDLE_BELOW) == job_is_idle(job_id) for value in first)
        assert job_is_idle(job_id) == job_is_idle(job_id)
        # The next tick follows the first sample: the character holds.
        following = [next_utilization(value, job_id, gpu_id, rng) for gpu_id, value in enumerate(first)]
        assert all((value < IDLE_BELOW) == job_is_idle(job_id) for value in following)


# --- the task ---------------------------------------------------------------------------------------------


@pytest.fixture
def held(demo_inventory):
    """Alpha holds 12 GPUs in three running jobs: one idle for an hour, one busy, one started after the
    seed with no sample yet. One more GPU has an activity row but no job; a finished job holds nothing."""
    alpha = make_department("Alpha", guaranteed_gpus=32)
    gpus = healthy_gpus(14)
    now = timezone.now()
    idle = run_job(alpha, gpus[:4], "train-idle", started_at=now - timedelta(hours=2))
    busy = run_job(alpha, gpus[4:8], "train-busy", started_at=now - timedelta(hours=2))
    new = run_job(alpha, gpus[8:12], "train-new", started_at=now - timedelta(minutes=1))
    Job.objects.create(department=alpha, name="build-done", gpus=4, state=JobState.COMPLETED)
    for gpu in gpus[:4]:
        GpuActivity.objects.create(
            gpu=gpu, utilization=1.0, sampled_at=now, low_since=now - timedelta(hours=1)
        )
    for gpu in gpus[4:8]:
        GpuActivity.objects.create(gpu=gpu, utilization=85.0, sampled_at=now)
    GpuActivity.objects.create(gpu=gpus[12], utilization=0.0, sampled_at=now - timedelta(hours=1))
    return {
        "idle": gpus[:4],
        "busy": gpus[4:8],
        "new": gpus[8:12],
        "free": gpus[12:],
        "jobs": (idle, busy, new),
    }


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_when_on_every_allocated_gpu_gets_a_fresh_sample_and_keeps_its_character(held, settings):
    settings.RACKPLANE_DEMO_TELEMETRY = True
    before = timezone.now()
    # A tray that is down reports nothing (its exporter with it): one holding none of the jobs' GPUs.
    down = ComputeTray.objects.exclude(gpus__in=[gpu.pk for gpu in held["idle"] + held["busy"] + held["new"]])
    down = down.exclude(gpus__in=held["free"]).order_by("hostname").first()
    ComputeTray.objects.filter(pk=down.pk).update(state=TrayState.DOWN, state_reason="powered off")
    reporting = set(Gpu.objects.exclude(tray__state=TrayState.DOWN).values_list("pk", flat=True))
    result = simulate_demo_telemetry()
    assert result["recorded"] == len(reporting) > 12 and result["unknown_gpus"] == []

    allocated = {gpu.pk for key in ("idle", "busy", "new") for gpu in held[key]}
    activity = {row.gpu_id: row for row in GpuActivity.objects.filter(gpu_id__in=allocated)}
    assert set(activity) == allocated
    assert all(row.sampled_at >= before for row in activity.values())
    assert all(activity[gpu.pk].utilization <= IDLE_RANGE[1] for gpu in held["idle"])
    assert all(activity[gpu.pk].utilization >= BUSY_FLOOR for gpu in held["busy"])
    new_job = held["jobs"][2]
    assert all((activity[gpu.pk].utilization < IDLE_BELOW) == job_is_idle(new_job.pk) for gpu in held["new"])
    # The idle job's run of low samples goes on: it is still on the idle list.
    assert {gpu.pk for gpu in idle_gpus_queryset()} == {gpu.pk for gpu in held["idle"]}

    # The 5-minute bucket of the sample, for every GPU that reported: the chart reaches "now" (the bucket of
    # when the cycle sampled, not of when the test looks: a slow machine crosses a bucket's end in between).
    sampled = set(GpuActivity.objects.filter(gpu__in=reporting).values_list("sampled_at", flat=True))
    buckets = GpuUtilization.objects.filter(bucket_start__in={bucket_start(at) for at in sampled})
    assert set(buckets.values_list("gpu_id", flat=True)) == reporting
    # A GPU nobody holds is sampled too, low (a DCGM exporter reports every GPU of its node), and stays off
    # the idle list (not held); the down tray's GPUs have no sample.
    free = GpuActivity.objects.filter(gpu__in=reporting - allocated)
    assert free.count() == len(reporting - allocated) and {g.pk for g in held["free"]} <= reporting
    assert all(row.sampled_at >= before and row.utilization <= IDLE_RANGE[1] for row in free)
    assert not GpuActivity.objects.filter(gpu__tray=down).exists()


@pytest.mark.django_db
def test_the_character_survives_an_aged_out_activity_row(held, settings):
    """The activity rows went (the demo was stopped for a while): the last bucket since the job started
    still says which GPUs were idle; a bucket from before the job does not count."""
    now = timezone.now()
    settings.RACKPLANE_DEMO_TELEMETRY = True
    GpuActivity.objects.all().delete()
    earlier = bucket_start(now - timedelta(minutes=30))
    for gpu in held["idle"]:
        GpuUtilization.objects.create(gpu=gpu, bucket_start=earlier, mean=1.0, peak=2.0, samples=5)
    for gpu in held["busy"]:
        GpuUtilization.objects.create(gpu=gpu, bucket_start=earlier, mean=80.0, peak=90.0, samples=5)
    for gpu in held["new"]:  # the GPUs' previous job was busy: not this job's character
        GpuUtilization.objects.create(gpu=gpu, bucket_start=earlier, mean=80.0, peak=90.0, samples=5)
    record_demo_telemetry(now, random.Random(3))
    values = dict(GpuActivity.objects.values_list("gpu_id", "utilization"))
    assert all(values[gpu.pk] < IDLE_BELOW for gpu in held["idle"])
    assert all(values[gpu.pk] >= BUSY_FLOOR for gpu in held["busy"])
    new_job = held["jobs"][2]
    assert all((values[gpu.pk] < IDLE_BELOW) == job_is_idle(new_job.pk) for gpu in held["new"])


@pytest.mark.django_db
def test_when_off_it_writes_nothing_and_asks_the_database_nothing(held, settings, django_assert_num_queries):
    settings.RACKPLANE_DEMO_TELEMETRY = False
    activity = sorted(GpuActivity.objects.values_list("gpu_id", "utilization", "sampled_at"))
    buckets = GpuUtilization.objects.count()
    with django_assert_num_queries(0):
        result = simulate_demo_telemetry()
    assert result == {"skipped": "RACKPLANE_DEMO_TELEMETRY is off"}
    assert sorted(GpuActivity.objects.values_list("gpu_id", "utilization", "sampled_at")) == activity
    assert GpuUtilization.objects.count() == buckets


def test_it_is_off_unless_the_demo_turns_it_on():
    assert django_settings.RACKPLANE_DEMO_TELEMETRY is False  # the test suite, like production


def test_the_task_is_registered_and_the_beat_sends_it_only_in_the_demo():
    from portal.celery import app

    assert "simulate-demo-telemetry" not in django_settings.CELERY_BEAT_SCHEDULE  # off: not sent at all
    app.loader.import_default_modules()
    assert app.tasks[SIMULATE_DEMO_TELEMETRY].name == SIMULATE_DEMO_TELEMETRY


@pytest.mark.slow(reason="a fresh Python per case: settings are read once per process")
@pytest.mark.parametrize(
    ("line", "expected"), [("RACKPLANE_DEMO_TELEMETRY=1\n", "True 60.0"), ("", "False None")]
)
def test_the_development_file_turns_it_on(tmp_path, line, expected):
    dev_env = tmp_path / "dev.env"
    dev_env.write_text("DEBUG=1\nCELERY_BROKER_URL=filesystem://\n" + line)
    env = shell_env(
        DJANGO_SETTINGS_MODULE="portal.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        RACKPLANE_DEV_ENV=str(dev_env),
    )
    script = (
        "import django; django.setup(); from django.conf import settings as s; "
        "entry = s.CELERY_BEAT_SCHEDULE.get('simulate-demo-telemetry'); "
        f"task = entry and entry['task'] == {SIMULATE_DEMO_TELEMETRY!r}; "
        "print(s.RACKPLANE_DEMO_TELEMETRY, entry and entry['schedule'], task)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected + (" True" if expected.startswith("True") else " None")


STALE_HELD = """
    SELECT count(*), sum(a.gpu_id IS NULL) FROM scheduling_allocation al
    JOIN scheduling_job j ON j.id = al.job_id
    LEFT JOIN tenancy_gpuactivity a ON a.gpu_id = al.gpu_id AND a.sampled_at >= ?
    WHERE j.state IN ('starting', 'running')
"""


@pytest.mark.slow(reason="a clone, migrate + seed, the three processes of `make run`")
def test_make_run_keeps_every_allocated_gpu_reporting(embedded_stack):
    """scripts/run.sh turns it on (var/dev.env), the real beat sends it, the real worker records: soon after
    start every GPU a job holds has a sample newer than the start, and its bucket of now. The start is the
    stack's (the shared stack may have served other tests first: then the beat has ticked already and the
    test does not wait out another minute for a tick of its own)."""
    stack = embedded_stack
    started = stack.started.strftime("%Y-%m-%d %H:%M:%S")
    assert "RACKPLANE_DEMO_TELEMETRY=1" in (stack.clone / "var" / "dev.env").read_text()

    def all_fresh():
        held, stale = stack.query(STALE_HELD, started)[0]
        return held > 0 and stale == 0

    # Jobs the first scheduling pass starts just after a tick are sampled by the next one, a minute on.
    wait_for("a fresh sample for every allocated GPU", all_fresh, timeout=150)

    def buckets_of_now() -> int:
        (buckets,) = stack.query(
            "SELECT count(*) FROM tenancy_gpuutilization WHERE bucket_start >= ?",
            str(bucket_start(datetime.now(UTC) - timedelta(minutes=1))).replace("+00:00", ""),
        )[0]
        return buckets

    # A waited condition, not a single read: the last tick may be a minute old when the samples were found.
    wait_for("the utilization bucket of now", lambda: buckets_of_now() > 0, timeout=90)
    # The tick goes on after the samples: the simulated nodes' reports (the first tick reconciles each
    # seeded tray once), then the worker logs its answer.
    succeeded = re.compile(
        r"Task portal.tasks.simulate_demo_telemetry\[[-0-9a-f]+\] succeeded in [0-9.]+s: "
        r"\{'recorded': [1-9].*'nodes': \{'trays': [1-9]"
    )
    wait_for("the tick's answer", lambda: succeeded.search(stack.log("celery-worker.log")), timeout=60)


# --- on the seeded demo -----------------------------------------------------------------------------------


def allocated_gpus() -> set[int]:
    return set(Allocation.objects.filter(job__state__in=HOLDING_STATES).values_list("gpu_id", flat=True))


@pytest.mark.slow(reason="seeds and reads a whole demo datacenter")
@pytest.mark.django_db
def test_the_seeded_demo_goes_on_reporting_and_seeding_again_neither_breaks_nor_duplicates(
    var_dir, settings, django_assert_max_num_queries
):
    settings.RACKPLANE_DEMO_TELEMETRY = True
    seed_demo("--racks", "3")
    idle_before = {gpu.pk for gpu in idle_gpus_queryset()}
    assert idle_before  # the seed leaves some jobs idle
    # The seed samples every GPU of a tray that is not down, held or not; a free one is low.
    reporting = set(Gpu.objects.exclude(tray__state=TrayState.DOWN).values_list("pk", flat=True))
    assert set(GpuActivity.objects.values_list("gpu_id", flat=True)) == reporting
    assert all(
        utilization <= IDLE_RANGE[1]
        for utilization in GpuActivity.objects.exclude(gpu__in=allocated_gpus()).values_list(
            "utilization", flat=True
        )
    )
    allocated = allocated_gpus()

    # Ten minutes of ticks: every allocated GPU stays fresh, the idle ones stay idle, no busy one goes idle.
    start = timezone.now()
    timings = []
    for minute in range(1, 11):
        at = start + timedelta(minutes=minute)
        began = time.perf_counter()
        with django_assert_max_num_queries(12):
            result = record_demo_telemetry(at)
        timings.append(time.perf_counter() - began)
        assert result.recorded == Gpu.objects.exclude(tray__state=TrayState.DOWN).count() > len(allocated)
    # Every GPU stays fresh, held or not (a tray that is up reports all of its GPUs).
    fresh = set(GpuActivity.objects.filter(sampled_at=at).values_list("gpu_id", flat=True))
    assert fresh == set(Gpu.objects.exclude(tray__state=TrayState.DOWN).values_list("pk", flat=True))
    assert allocated < fresh
    assert {gpu.pk for gpu in idle_gpus_queryset(now=at)} == idle_before
    assert max(timings) < 2.0, timings  # about 150 GPUs: milliseconds (SQLite, a shared 2-core machine)

    rows = GpuUtilization.objects.count()
    activity = GpuActivity.objects.count()
    assert "nothing seeded" in seed_demo()  # `make run` again
    assert (GpuUtilization.objects.count(), GpuActivity.objects.count()) == (rows, activity)
    assert allocated_gpus() == allocated

    seed_demo("--racks", "3", "--reset")
    result = record_demo_telemetry(timezone.now())
    assert result.recorded == Gpu.objects.exclude(tray__state=TrayState.DOWN).count()
    assert result.unknown_gpus == ()


@pytest.mark.slow(reason="seeds and reads a whole demo datacenter")
@pytest.mark.django_db
def test_the_demo_nodes_keep_reporting_what_they_last_said(var_dir, settings):
    """The walkthrough: five minutes after `make run` every tray of the demo showed "silent". The simulated
    node agents now send their last report again each tick (the real heartbeat path): no tray goes silent,
    and the inventory does not change (what was heard is repeated, never what the inventory intends)."""
    from inventory.models import ComputeTray, Gpu
    from inventory.staleness import silent_policy
    from portal.demo.agents import demo_nodes_report

    seed_demo("--racks", "3")
    heard = {
        row["uuid"]: row
        for row in Gpu.objects.values("uuid", "reported_clique_id", "fabric_state", "health", "tray_id")
    }
    reported = ComputeTray.objects.exclude(last_report_at=None)
    reported.update(last_report_at=timezone.now() - timedelta(minutes=6))  # the demo, six minutes on
    policy = silent_policy()
    assert all(policy.is_silent(tray.last_report_at, timezone.now()) for tray in reported)

    first = demo_nodes_report()
    second = demo_nodes_report()
    assert first["trays"] == second["trays"] == reported.count() > 0
    # The seed's trays are reconciled once; then heartbeats, but for trays with open health business (drained,
    # a degraded partition...), which are reconciled in full every time, as for a real agent.
    assert second["heartbeats"] + second["full_reports"] == second["trays"]
    assert second["heartbeats"] > first["heartbeats"] and second["heartbeats"] >= 0.8 * second["trays"]
    now = timezone.now()
    assert not [tray.hostname for tray in reported.all() if policy.is_silent(tray.last_report_at, now)]
    after = {
        row["uuid"]: row
        for row in Gpu.objects.values("uuid", "reported_clique_id", "fabric_state", "health", "tray_id")
    }
    assert after == heard
