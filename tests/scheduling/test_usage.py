"""The dashboards' aggregate figures (GROUP BY per table, GPU counts from the unschedulable side, capacity
status from the loaded departments, charts serialized from plain dicts) against straightforward counts in
Python and against the queries they replaced, on a small world with every awkward case in it."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from inventory.choices import GpuHealth, TrayState
from inventory.models import Gpu
from scheduling import charts as dashboards
from scheduling import dashboard_data
from scheduling import usage as selectors
from scheduling.choices import HOLDING_STATES, JobState
from scheduling.models import Allocation, Job
from scheduling.usage import free_gpus_count, free_gpus_queryset, idle_gpus_queryset
from scheduling.views.departments import _set_urls
from tenancy.models import Department, GpuActivity, QuotaSnapshot, TenancySettings
from tenancy.services import schedulable_gpus, schedulable_gpus_q
from tests.factories import make_department, make_job, run_job

pytestmark = pytest.mark.django_db

LONG, SHORT = timedelta(hours=2), timedelta(minutes=10)  # the idle window is 30 minutes


def activity(gpus, utilization: float, low_for: timedelta | None) -> None:
    now = timezone.now()
    GpuActivity.objects.bulk_create(
        [
            GpuActivity(
                gpu=gpu,
                utilization=utilization,
                sampled_at=now,
                low_since=None if low_for is None else now - low_for,
            )
            for gpu in gpus
        ]
    )


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Alpha", guaranteed_gpus=16, priority=1)


@pytest.fixture
def datacenter(department_a):
    """Four departments on the three demo racks (a drained tray, two unhealthy GPUs), plus one GPU pulled
    out of its tray. Running and starting jobs, some holding GPUs that have since become unschedulable;
    pending jobs, one of them still holding GPUs; a cancelled job still holding one; idle GPUs, GPUs low
    for too short a time, low but above the threshold, low and free, low and held by a pending job."""
    alpha = department_a
    beta = make_department("Beta", guaranteed_gpus=8)
    gamma = make_department("Gamma", guaranteed_gpus=8)
    make_department("Delta", guaranteed_gpus=0)  # no jobs at all

    up = Gpu.objects.filter(tray__state=TrayState.UP).order_by("pk")
    schedulable = list(up.exclude(health=GpuHealth.UNHEALTHY))
    unhealthy = list(up.filter(health=GpuHealth.UNHEALTHY))
    drained = list(Gpu.objects.exclude(tray__state=TrayState.UP).filter(tray__isnull=False).order_by("pk"))
    assert len(unhealthy) == 2 and len(drained) == 4, "the demo inventory changed"
    pulled = schedulable.pop()
    Gpu.objects.filter(pk=pulled.pk).update(tray=None, index=None)

    # Alpha (guarantee 16): a 16-GPU job in quota, then an 8-GPU one and a starting 4-GPU one borrowing.
    train = run_job(alpha, schedulable[0:16], "alpha-train", started_at=timezone.now() - timedelta(hours=2))
    run_job(alpha, schedulable[16:24], "alpha-borrow", started_at=timezone.now() - timedelta(hours=1))
    run_job(alpha, [*schedulable[24:27], unhealthy[0]], "alpha-start", state=JobState.STARTING)
    serve = run_job(beta, [*schedulable[27:31], *drained], "beta-serve")
    run_job(gamma, schedulable[31:35], "gamma-eval")
    pending = JobState.PENDING
    run_job(gamma, schedulable[35:37], "gamma-requeued", state=pending)  # preempted, rows not yet gone
    run_job(beta, schedulable[37:38], "beta-cancelled", state=JobState.CANCELLED)
    make_job(beta, "beta-done", JobState.COMPLETED, gpus=16)
    for name, size in (("alpha-queued-1", 8), ("alpha-queued-2", 4)):
        make_job(alpha, name, pending, gpus=size)
    make_job(gamma, "gamma-queued", pending, gpus=36)

    activity([*schedulable[0:4], unhealthy[0], *drained[:2]], 1.5, LONG)  # idle
    activity(schedulable[4:6], 0.5, SHORT)  # low, not for the whole window yet
    activity(schedulable[27:29], 7.0, LONG)  # low since long ago, but over the 5% threshold
    activity(schedulable[35:38], 0.0, LONG)  # a pending and a cancelled job's GPUs: not idle
    activity(schedulable[40:42], 0.0, LONG)  # free: nobody wastes them
    activity(schedulable[31:35], 80.0, None)
    return {"alpha": alpha, "beta": beta, "gamma": gamma, "train": train, "serve": serve}


def straightforward(now) -> dict:
    """Every figure counted row by row in Python, following the definitions in scheduling.usage."""
    settings = TenancySettings.load()
    cutoff = now - timedelta(minutes=settings.idle_window_minutes)
    low = {
        a.gpu_id
        for a in GpuActivity.objects.all()
        if a.low_since is not None
        and a.low_since <= cutoff
        and a.utilization < settings.idle_threshold_percent
    }
    allocations = list(Allocation.objects.select_related("job"))
    jobs = list(Job.objects.all())
    figures = {}
    for department in Department.objects.all():
        held = [
            a for a in allocations if a.job.department_id == department.pk and a.job.state in HOLDING_STATES
        ]
        mine = [j for j in jobs if j.department_id == department.pk]
        pending = [j for j in mine if j.state == JobState.PENDING]
        in_use = len(held)
        borrowed = sum(1 for a in held if a.job.over_quota)  # the jobs' badges
        figures[department.slug] = {
            "in_use": in_use,
            "in_quota": in_use - borrowed,
            "borrowed": borrowed,
            "running_jobs": sum(1 for j in mine if j.state in HOLDING_STATES),
            "pending_jobs": len(pending),
            "pending_demand": sum(j.gpus for j in pending),
            "idle": sum(1 for a in held if a.gpu_id in low),
        }
    schedulable = [
        gpu
        for gpu in Gpu.objects.select_related("tray")
        if gpu.tray is not None and gpu.tray.state == TrayState.UP and gpu.health != GpuHealth.UNHEALTHY
    ]
    allocated = {a.gpu_id for a in allocations}
    return {
        "departments": figures,
        "capacity": len(schedulable),
        "free": sum(1 for gpu in schedulable if gpu.pk not in allocated),
    }


FIELDS = ("in_use", "in_quota", "borrowed", "running_jobs", "pending_jobs", "pending_demand", "idle")


def shown(positions) -> dict:
    return {p.department.slug: {field: getattr(p, field) for field in FIELDS} for p in positions}


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_positions_match_straightforward_counts(datacenter):
    now = timezone.now()
    expected = straightforward(now)
    positions = selectors.department_positions(now)
    assert shown(positions) == expected["departments"]
    assert positions.capacity == expected["capacity"]
    # The world has every case in it (not a vacuous comparison).
    assert expected["departments"]["alpha"] == {
        "in_use": 28,
        "in_quota": 16,
        "borrowed": 12,
        "running_jobs": 3,
        "pending_jobs": 2,
        "pending_demand": 12,
        "idle": 5,
    }
    assert expected["departments"]["beta"]["idle"] == 2 and expected["departments"]["beta"]["in_use"] == 8
    assert expected["departments"]["gamma"]["pending_demand"] == 38
    assert expected["departments"]["delta"] == dict.fromkeys(FIELDS, 0)
    assert expected["capacity"] == 216 - 4 - 2 - 1


def test_the_api_shows_the_positions_of_the_dashboards(datacenter, client_as, platform_admin):
    """The departments API's usage figures are department_positions' (one count for every screen), and
    those are the straightforward counts: no second way to count them."""
    now = timezone.now()
    expected = straightforward(now)["departments"]
    rows = client_as(platform_admin).get("/api/v1/departments/", {"page_size": 100}).json()["results"]
    api = {
        row["slug"]: {f: row[f] for f in ("in_use", "in_quota", "borrowed", "pending_demand")} for row in rows
    }
    assert api == {
        slug: {f: figures[f] for f in ("in_use", "in_quota", "borrowed", "pending_demand")}
        for slug, figures in expected.items()
    }
    assert api["alpha"]["borrowed"] > 0  # a department that borrows is among them
    for department in Department.objects.all():
        idle = idle_gpus_queryset(now=now, department=department).count()
        assert selectors.department_positions(now).of(department).idle == idle


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_gpu_counts_match_the_joins_they_replaced(datacenter):
    expected = straightforward(timezone.now())
    assert schedulable_gpus() == Gpu.objects.filter(schedulable_gpus_q()).count() == expected["capacity"]
    assert free_gpus_count() == free_gpus_queryset().count() == expected["free"]
    assert free_gpus_count(schedulable=expected["capacity"]) == expected["free"]
    assert dashboard_data.admin_dashboard().free == expected["free"]


def test_empty_inventory_counts_zero(db):
    assert schedulable_gpus() == 0 and free_gpus_count() == 0


def banner_figures(status) -> tuple:
    return status.capacity, status.guaranteed, status.shortfall, status.cut, status.affected


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("keep", [None, 30, 20, 5])
def test_capacity_status_from_positions_matches_the_query(datacenter, keep):
    # One computation of who is short (tenancy.quota.guarantee_positions): the dashboards' positions and
    # the banner's two queries say the same, and the owed figures are the positions' own.
    if keep is not None:
        doomed = Gpu.objects.filter(schedulable_gpus_q()).order_by("pk").values_list("pk", flat=True)[keep:]
        Gpu.objects.filter(pk__in=list(doomed)).update(health=GpuHealth.UNHEALTHY)
    positions = selectors.department_positions()
    status = positions.capacity_status()
    assert banner_figures(status) == banner_figures(selectors.guarantee_status())
    assert status.owed == [(p.department.name, p.starved) for p in positions if p.starved]
    if keep is not None:
        assert status.capacity == keep
        # Guarantees are scaled down in proportion, as the scheduler admits: the cut adds up to the shortfall.
        assert sum(gpus for _, gpus in status.cut) == status.shortfall


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_department_page_gives_admins_the_banner_from_its_own_figures(
    client_as, datacenter, platform_admin, lead_a
):
    Gpu.objects.update(health=GpuHealth.UNHEALTHY)
    client = client_as(platform_admin)
    response = client.get("/tenancy/departments/alpha/")
    assert banner_figures(response.context["capacity_status"]) == banner_figures(selectors.guarantee_status())
    assert 'class="capacity-banner"' in response.content.decode()
    client_as(lead_a)
    response = client.get("/tenancy/departments/alpha/")
    assert response.status_code == 200 and "capacity_status" not in response.context
    assert 'class="capacity-banner"' not in response.content.decode()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_charts_are_byte_identical_to_the_plotly_figures(datacenter, department_a):
    alpha = department_a
    now = timezone.now().replace(second=0, microsecond=0)
    QuotaSnapshot.objects.bulk_create(
        QuotaSnapshot(
            department=alpha,
            taken_at=now - timedelta(minutes=5 * step),
            guaranteed=16,
            in_use=step,
            in_quota=min(step, 16),
            borrowed=max(0, step - 16),
            fair_share=step + 1,
            pending_demand=3,
            idle=0,
        )
        for step in range(30)
    )
    history = QuotaSnapshot.objects.filter(department=alpha).order_by("taken_at").values()
    figure = dashboards.quota_history_figure(history)
    assert dashboards.quota_history_html(history, div_id="q") == dashboards.to_html(figure, div_id="q")

    positions = selectors.department_positions()
    figure = dashboards.departments_figure(positions)
    markup = dashboards.departments_html(positions, div_id="d", height=380)
    assert markup == dashboards.to_html(figure, div_id="d", height=380)


def test_row_urls_are_what_reverse_gives(datacenter):
    gpus = list(idle_gpus_queryset())
    gpus[0].job_id = None
    _set_urls(gpus, "inventory:gpu-detail", "pk", "url")
    _set_urls(gpus, "scheduling:job-detail", "job_id", "job_url")
    assert [g.url for g in gpus] == [reverse("inventory:gpu-detail", args=[g.pk]) for g in gpus]
    assert gpus[0].job_url is None
    assert [g.job_url for g in gpus[1:]] == [
        reverse("scheduling:job-detail", args=[g.job_id]) for g in gpus[1:]
    ]
