"""Who holds a tray: the rack map's job line and the tray's "Jobs that held this tray" name the submitter
beside the department (a walkthrough saw job names and departments only), to whoever may see the job."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from inventory.models import ComputeTray
from tests.factories import make_department, make_member, run_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def held(demo_inventory):
    vision = make_department("Vision")
    erin = make_member("erin", vision)
    return run_job(
        vision,
        trays=["gb-r03-t02"],
        name="train-sweep-0019",
        submitted_by=erin,
        started_at=timezone.now(),
        over_quota=True,
    )


def test_the_rack_maps_job_line_names_the_submitter(held, client_as, platform_admin):
    page = client_as(platform_admin).get(reverse("scheduling:rack-detail", args=["gb-r03"])).content.decode()
    line = page[page.index(f'data-held-by="{held.pk}"') :][:600]
    assert "train-sweep-0019</a>" in line and "Vision" in line
    assert '<span class="muted held-submitter">erin</span>' in line


def test_the_rack_map_names_nobody_for_a_job_the_viewer_may_not_see(held, client_as, member_b):
    page = client_as(member_b).get(reverse("scheduling:rack-detail", args=["gb-r03"])).content.decode()
    assert "held-submitter" not in page and "erin" not in page


def test_the_jobs_that_held_a_tray_have_a_submitter_column(held, client_as, platform_admin):
    tray = ComputeTray.objects.get(hostname="gb-r03-t02")
    page = (
        client_as(platform_admin).get(reverse("scheduling:tray-held-jobs", args=[tray.pk])).content.decode()
    )
    assert '<th scope="col">Submitted by</th>' in page
    row = page[page.index(f'<tr data-job="{held.pk}">') :][:600]
    assert '<td class="submitter">erin</td>' in row
