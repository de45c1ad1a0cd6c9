"""The rack page and the admin dashboard agree on the scheduler's re-carves (inventory.recarving counts both:
the scheduler's plans of the last 24 h), and the rack page shows the last one with its reason."""

from datetime import timedelta

import pytest
from django.urls import reverse

from inventory import recarving
from inventory.choices import PlanStatus
from inventory.models import PartitionPlan, Rack
from tests.factories import scheduler_plan

pytestmark = pytest.mark.django_db


@pytest.mark.slow(reason="the admin dashboard (its chart) and two rack pages: over 1 s on 2 cores")
def test_the_rack_page_and_the_dashboard_count_the_same_recarves(client_as, platform_admin):
    r1, r2 = Rack.objects.create(name="gb-r01"), Rack.objects.create(name="gb-r02")
    recarving.set_policy(r2, enabled=True, smallest_trays=2, max_per_hour=4)
    scheduler_plan(r2, "long ago", ago=timedelta(hours=25))  # outside both windows
    scheduler_plan(r2, "an hour ago", ago=timedelta(hours=1))
    last = scheduler_plan(r2, "job 9 waited: merging p1 and p2", status=PlanStatus.APPLYING)
    scheduler_plan(r1, "job 3 waited: splitting default", ago=timedelta(hours=2))
    PartitionPlan.objects.create(rack=r1, layout=[], base_layout="", status=PlanStatus.APPLIED)  # an admin's

    client = client_as(platform_admin)
    dashboard = client.get(reverse("scheduling:admin-dashboard")).content.decode()
    assert '<span data-figure="recarves">3</span>' in dashboard
    assert 'data-recarved-rack="gb-r02">gb-r02</a> 2' in dashboard
    assert 'data-recarved-rack="gb-r01">gb-r01</a> 1' in dashboard
    assert "1 rack lets the scheduler re-carve" in dashboard

    page = client.get(reverse("scheduling:rack-detail", args=["gb-r02"])).content.decode()
    assert '<dd data-policy="recent">2</dd>' in page
    assert f"plan #{last.pk}</a>" in page and "job 9 waited: merging p1 and p2" in page
    other = client.get(reverse("scheduling:rack-detail", args=["gb-r01"])).content.decode()
    assert '<dd data-policy="recent">1</dd>' in other and 'data-recarving="off"' in other


def test_a_member_sees_the_last_recarve_without_a_link_to_the_admins_plan_page(client_as, member_a):
    rack = Rack.objects.create(name="gb-r01")
    plan = scheduler_plan(rack, "job 3 waited: splitting default")
    page = client_as(member_a).get(reverse("scheduling:rack-detail", args=["gb-r01"])).content.decode()
    assert f"plan #{plan.pk}," in page and "job 3 waited: splitting default" in page
    assert reverse("integrations:plan-detail", args=[plan.pk]) not in page  # a page they may not open
