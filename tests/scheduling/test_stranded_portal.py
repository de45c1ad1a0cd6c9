"""Stranded NVLink capacity in the portal: the scheduling pass computes it on the cluster it decided on and
keeps it with its summary; the admin dashboard shows it (fleet and worst racks) to platform admins only, and
reading it writes nothing."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from inventory.models import ComputeTray
from scheduling.choices import JobState, StrandedCause
from scheduling.engine.stranded import CAUSES
from scheduling.models import SchedulerState
from scheduling.services.passes import run_pass
from tests.factories import make_department, make_job

pytestmark = pytest.mark.django_db

DASHBOARD = "/tenancy/dashboard/"


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Alpha", guaranteed_gpus=64)


@pytest.fixture
def stranding(department_a):
    """demo_inventory (gb-r01: 18 trays, t07 drained, t13 and t17 with an unhealthy GPU; gb-r02 carved 2x9;
    gb-r03: 18 trays) with 9 trays of gb-r03 running work and a 16-tray gang waiting for one partition.
    No partition has 16 whole free trays: every free GPU is stranded. gb-r02's 18 free trays are split
    9 + 9 (fragments); gb-r01 has 15 whole free trays and would fit with its drained and unhealthy trays
    back, whose free GPUs (3 + 3) are stranded too (unavailable); gb-r03 fits once its work ends (running)."""
    trays = ComputeTray.objects.filter(rack__name="gb-r03").order_by("slot")[:9]
    make_job(department_a, "running", trays=trays)
    make_job(department_a, "gang", JobState.PENDING, gpus=64)
    run_pass()


def figure(markup: str, name: str) -> int:
    match = re.search(rf'data-figure="{name}">([\d,]+)<', markup)
    assert match, name
    return int(match.group(1).replace(",", ""))


def test_the_cause_choices_are_the_engines():
    assert tuple(StrandedCause.values) == CAUSES


def test_the_pass_keeps_the_figures_of_the_cluster_it_decided_on(stranding):
    figures = SchedulerState.objects.get(pk=1).last_summary["stranded"]
    assert figures["free_gpus"] == 210 - 36
    assert figures["stranded_gpus"] == 174
    assert figures["by_cause"] == {"fragments": 72, "unavailable": 60 + 6, "running": 36, "dedicated": 0}
    assert figures["largest_partition_gang"] == 60  # gb-r01's 15 whole free trays
    assert figures["largest_rack_gang"] == 72  # gb-r02's two free partitions together
    assert figures["waiting_shapes"] == 1 and figures["racks_stranding"] == 3
    assert [r["rack"] for r in figures["worst_racks"]] == ["gb-r02", "gb-r01", "gb-r03"]


def test_a_gang_that_fits_starts_and_leaves_nothing_waiting_nothing_stranded(department_a):
    make_job(department_a, "fits", JobState.PENDING, gpus=32)
    run_pass()
    figures = SchedulerState.objects.get(pk=1).last_summary["stranded"]
    assert figures["waiting_shapes"] == 0 and figures["stranded_gpus"] == 0
    assert figures["free_gpus"] == 210 - 32
    # gb-r03's 17 whole free trays: the demo's gb-r03-t05 reports an unsettled fabric (small jobs only).
    assert figures["largest_partition_gang"] == 68


def test_the_admin_dashboard_shows_the_fleet_and_the_worst_racks(stranding, client_as):
    client = client_as("platform_admin")
    client.get(DASHBOARD)  # the session's first request
    with CaptureQueriesContext(connection) as captured:
        response = client.get(DASHBOARD)
    assert response.status_code == 200
    # A GET never writes: no statement but SELECT (and the savepoints of the test's transaction).
    writes = [q["sql"] for q in captured if not q["sql"].lstrip().upper().startswith(("SELECT", "SAVEPOINT"))]
    assert not [sql for sql in writes if not sql.upper().startswith("RELEASE SAVEPOINT")]
    markup = response.content.decode()
    assert figure(markup, "stranded") == 174
    assert figure(markup, "largest-partition-gang") == 60
    assert figure(markup, "largest-rack-gang") == 72
    assert re.findall(r'data-stranded-rack="([^"]+)"', markup) == ["gb-r02", "gb-r01", "gb-r03"]
    assert re.search(r'data-cause="fragments">Partition fragments: <b>72</b>', markup)
    assert re.search(r'data-cause="unavailable">Drained or unhealthy trays: <b>66</b>', markup)
    assert f'href="{reverse("scheduling:rack-detail", args=["gb-r02"])}"' in markup


def test_before_any_pass_the_dashboard_says_so(department_a, client_as):
    markup = client_as("platform_admin").get(DASHBOARD).content.decode()
    assert "No scheduling pass has computed it yet." in markup
    assert 'data-figure="stranded"' not in markup


@pytest.mark.parametrize("persona", ["lead_a", "member_a"])
def test_only_platform_admins_see_it(stranding, client_as, persona):
    assert client_as(persona).get(DASHBOARD).status_code == 403
