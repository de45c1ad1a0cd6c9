"""Each department's idle GPUs counted once a minute by the beat (scheduling.usage.keep_idle_counts, the
IdleCount rows) and read by every page while fresh (issue 32: the live count joined every idle GPU to its job
on every request); a page's count agrees with its list of idle GPUs."""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from scheduling import usage
from scheduling.models import IdleCount
from scheduling.tasks import keep_idle_counts_task
from tenancy.models import TenancySettings
from tests.scheduling.test_dashboards import department_a, department_b, figure, workload  # noqa: F401

postgresql = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="kept where the held figures are kept (PostgreSQL)"
)


def idle_by_department(now):
    held, _kept = usage.held_gpus_by_department(now, TenancySettings.load())
    return {pk: figures["idle"] for pk, figures in held.items() if figures["idle"]}


@postgresql
def test_the_beat_keeps_what_the_pages_would_count_and_they_read_it_while_fresh(workload, department_a):  # noqa: F811
    now = timezone.now()
    counted = idle_by_department(now)
    assert counted == {department_a.pk: 4}
    assert keep_idle_counts_task() == 2  # one row per department, 0 included
    kept = dict(IdleCount.objects.values_list("department_id", "idle"))
    assert kept.pop(department_a.pk) == 4 and set(kept.values()) == {0}
    assert idle_by_department(timezone.now()) == counted
    # Read, not counted again: a kept figure that differs from the live one is what the pages show.
    IdleCount.objects.filter(department=department_a).update(idle=3)
    assert idle_by_department(timezone.now()) == {department_a.pk: 3}
    # Older than IDLE_KEPT_FOR (the beat stopped): counted again; taken after the moment asked: not used.
    taken = IdleCount.objects.get(department=department_a).taken_at
    assert idle_by_department(taken + usage.IDLE_KEPT_FOR + timedelta(seconds=1)) == counted
    assert idle_by_department(taken - timedelta(seconds=1)) == counted
    # The beat again: the live figure.
    usage.keep_idle_counts()
    assert idle_by_department(timezone.now()) == counted


@postgresql
def test_the_beat_keeps_the_gpus_without_data_and_the_dashboard_reads_them(workload, department_a, lead_a):  # noqa: F811
    """Held GPUs without utilization data (held_without_data), kept beside the idle count: the positions carry
    them while fresh (Position.no_data), and the dashboard shows them without counting."""
    from scheduling import dashboard_data
    from tenancy.models import GpuActivity

    GpuActivity.objects.filter(gpu__in=workload["idle"][:2]).delete()  # two held GPUs never reported
    assert usage.held_without_data(department_a) == 2
    assert usage.department_positions().of(department_a).no_data is None  # nothing kept yet: counted
    usage.keep_idle_counts()
    assert IdleCount.objects.get(department=department_a).no_data == 2
    assert usage.department_positions().of(department_a).no_data == 2
    IdleCount.objects.filter(department=department_a).update(no_data=5)  # read, not counted again
    board = dashboard_data.department_dashboard(lead_a, department_a)
    assert (board.no_data_gpus, board.reporting_gpus) == (5, 24 - 5)
    IdleCount.objects.update(taken_at=timezone.now() - usage.IDLE_KEPT_FOR - timedelta(seconds=1))
    board = dashboard_data.department_dashboard(lead_a, department_a)
    assert (board.position.no_data, board.no_data_gpus) == (None, 2)


def test_the_gpus_without_data_of_every_department_are_those_of_each(workload, department_a, department_b):  # noqa: F811
    """The beat's count for every department at once is each department's own count: with a few rows stale
    (from the stale rows to their holders), then with GPUs that have no row (the anti-join)."""
    from tenancy.models import GpuActivity

    GpuActivity.objects.filter(gpu__in=workload["serve"].allocations.values("gpu")[:1]).update(
        sampled_at=timezone.now() - timedelta(hours=1)
    )
    GpuActivity.objects.filter(gpu__in=workload["idle"][:1]).update(
        sampled_at=timezone.now() - timedelta(hours=1)
    )
    for deleted, expected in ((0, (1, 1)), (2, (3, 1))):
        GpuActivity.objects.filter(gpu__in=workload["idle"][1 : 1 + deleted]).delete()
        now = timezone.now()
        every = usage.without_data_by_department(now)
        for department in (department_a, department_b):
            assert every.get(department.pk, 0) == usage.held_without_data(department, now)
        assert (every.get(department_a.pk, 0), every.get(department_b.pk, 0)) == expected


@postgresql
def test_a_page_whose_list_holds_every_idle_gpu_says_as_many(client_as, workload, department_a, lead_a):  # noqa: F811
    """The kept count may be up to a minute old where the list is read now: when the list holds them all,
    the page's figure is the list's (no "N more" for GPUs a job no longer holds)."""
    usage.keep_idle_counts()
    IdleCount.objects.filter(department=department_a).update(idle=7)  # e.g. three jobs ended since
    response = client_as(lead_a).get("/tenancy/departments/alpha/")
    assert figure(response, "idle") == 4
    assert "more, idle for less time" not in response.content.decode()


def test_a_cut_list_leaves_the_count_beyond_it_to_the_figure(workload, department_a, lead_a, monkeypatch):  # noqa: F811
    """Where the list is cut at its limit, the count is the figure's (kept or counted), beyond the list."""
    from scheduling import dashboard_data

    monkeypatch.setattr(dashboard_data, "IDLE_LIMIT", 2)
    board = dashboard_data.department_dashboard(lead_a, department_a)
    assert len(board.idle_gpus) == 2
    assert (board.position.idle, board.idle_more) == (4, 2)


@pytest.mark.skipif(connection.vendor == "postgresql", reason="elsewhere than PostgreSQL")
def test_elsewhere_nothing_is_kept_and_the_pages_count(workload, department_a):  # noqa: F811
    assert keep_idle_counts_task() == 0
    assert not IdleCount.objects.exists()
    assert idle_by_department(timezone.now()) == {department_a.pk: 4}
