"""Who holds which MIG slice (scheduling.slice_holders): the rack view's GPU cells and tray rows, the tray and
GPU pages' slice fragment, the admin dashboard's idle slices and per-department slices, agreeing with the
department page's GPU-equivalents. A member of another department sees that a slice is held, never by what
or whom. On the demo inventory with gb-r03-t02 given all-balanced (16 MIG devices on its 4 GPUs)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from inventory.models import ComputeTray, Gpu
from scheduling.models import Job, SliceAllocation
from scheduling.slice_holders import idle_slices
from tests.factories import mig_tray
from tests.scheduling.test_slice_jobs import SCRIPT, TRAY, department_a  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture
def held(api_as, member_a, django_capture_on_commit_callbacks, demo_inventory) -> Job:
    """A member's 1g.23gb job, placed by the pass on a slice of the MIG tray."""
    mig_tray(TRAY)
    body = {
        "department": "research",
        "name": "serve-chat",
        "work": {"script": SCRIPT},
        "mig_profile": "1g.23gb",
    }
    with django_capture_on_commit_callbacks(execute=True):
        response = api_as(member_a).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    assert SliceAllocation.objects.filter(job=job).count() == 1, job.pending_reason
    return job


def _rack(client, user) -> str:
    return client(user).get(reverse("scheduling:rack-detail", args=["gb-r03"])).content.decode()


def test_the_rack_view_shows_each_slice_held_or_idle_and_who_holds_it(held, client_as, member_a):
    page = _rack(client_as, member_a)
    # Every GPU of the MIG tray draws its four devices; one is held by the job.
    assert page.count('class="slice slice-held"') == 1
    assert page.count('class="slice slice-idle"') == 15
    assert f'data-slice-job="{held.pk}"' in page
    row = page[page.index(f'data-tray-slices="{TRAY}"') :]
    row = row[: row.index("</div>")]
    assert f'data-slice-held-by="{held.pk}"' in row and "serve-chat" in row and "member-a" in row
    assert "MIG 1 x 1g.23gb on GPU 0" in row
    assert "Idle MIG slices: 7 x 1g.23gb, 4 x 2g.47gb, 4 x 3g.93gb" in row
    # Trays without MIG devices show none.
    assert page.count("data-tray-slices=") == 1


def test_another_department_sees_a_slice_held_but_not_by_what_or_whom(held, client_as, member_b):
    page = _rack(client_as, member_b)
    assert page.count('class="slice slice-held"') == 1
    assert "serve-chat" not in page and "member-a" not in page and f'data-slice-job="{held.pk}"' not in page
    assert "a job of another department" in page
    tray = ComputeTray.objects.get(hostname=TRAY)
    fragment = client_as(member_b).get(reverse("scheduling:tray-slices", args=[tray.pk])).content.decode()
    assert "serve-chat" not in fragment and "member-a" not in fragment
    assert 'data-slices-held="1"' in fragment and "a job of another department" in fragment


def test_the_tray_and_gpu_pages_load_the_slices_and_their_holders(held, client_as, member_a):
    tray = ComputeTray.objects.get(hostname=TRAY)
    client = client_as(member_a)
    tray_page = client.get(reverse("inventory:tray-detail", args=[tray.pk])).content.decode()
    assert reverse("scheduling:tray-slices", args=[tray.pk]) in tray_page
    fragment = client.get(reverse("scheduling:tray-slices", args=[tray.pk])).content.decode()
    assert 'data-slices-held="1" data-slices-total="16"' in fragment
    [allocation] = SliceAllocation.objects.filter(job=held)
    row = re.search(
        rf'<tr data-slice="{allocation.mig_uuid}" data-slice-state="held">(.*?)</tr>', fragment, re.S
    )
    assert row, fragment
    assert (
        f"#{held.pk} serve-chat" in row.group(1) and "member-a" in row.group(1) and "1g.23gb" in row.group(1)
    )
    assert fragment.count('data-slice-state="idle"') == 15

    gpu = allocation.gpu
    gpu_page = client.get(reverse("inventory:gpu-detail", args=[gpu.pk])).content.decode()
    assert reverse("scheduling:gpu-slices", args=[gpu.pk]) in gpu_page
    fragment = client.get(reverse("scheduling:gpu-slices", args=[gpu.pk])).content.decode()
    assert 'data-slices-held="1" data-slices-total="4"' in fragment and allocation.mig_uuid in fragment
    other = Gpu.objects.filter(tray=gpu.tray).exclude(pk=gpu.pk).first()
    fragment = client.get(reverse("scheduling:gpu-slices", args=[other.pk])).content.decode()
    assert 'data-slices-held="0" data-slices-total="4"' in fragment


def test_a_tray_without_mig_loads_no_slices(demo_inventory, client_as, member_a):
    tray = ComputeTray.objects.get(hostname="gb-r03-t03")
    page = client_as(member_a).get(reverse("inventory:tray-detail", args=[tray.pk])).content.decode()
    assert reverse("scheduling:tray-slices", args=[tray.pk]) not in page
    fragment = client_as(member_a).get(reverse("scheduling:tray-slices", args=[tray.pk])).content.decode()
    assert 'data-slices-total="0"' in fragment


@pytest.mark.parametrize("path", ["/inventory/gpus/999999/slices/", "/inventory/trays/999999/slices/"])
def test_an_unknown_gpu_or_tray_is_a_404(demo_inventory, client_as, member_a, path):
    assert client_as(member_a).get(path).status_code == 404


def test_signed_out_is_sent_to_sign_in(held, client):
    tray = ComputeTray.objects.get(hostname=TRAY)
    response = client.get(reverse("scheduling:tray-slices", args=[tray.pk]))
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_the_dashboard_shows_slices_per_department_and_the_idle_ones(
    held, client_as, platform_admin, member_a
):
    figures = idle_slices()
    assert (figures.idle, figures.offered, figures.summary) == (
        15,
        16,
        "7 x 1g.23gb, 4 x 2g.47gb, 4 x 3g.93gb",
    )
    page = client_as(platform_admin).get(reverse("scheduling:admin-dashboard")).content.decode()
    assert re.search(r'data-figure="idle-slices">15<', page)
    assert "7 x 1g.23gb, 4 x 2g.47gb, 4 x 3g.93gb; of 16 on trays in service" in page
    row = page[page.index('<tr data-department="research">') :]
    row = row[: row.index("</tr>")]
    assert 'data-slices="1"' in row and "(0.14 GPU)" in row
    # The department page counts the same slice, in the same GPU-equivalents.
    department = client_as(member_a).get(reverse("scheduling:department-detail", args=["research"]))
    text = department.content.decode()
    assert re.search(r'data-figure="slices">1<', text) and 'data-figure="slice-equivalents">0.14<' in text


def _idle_card(page: str) -> tuple[int, str]:
    """The idle MIG slices card of a dashboard: its figure and its note."""
    card = page[page.index('data-figures="idle-slices"') :]
    card = card[: card.index("</div>")]
    figure = re.search(r'data-figure="idle-slices">([0-9,]+)<', card).group(1)
    return int(figure.replace(",", "")), re.search(r'class="card-note">([^<]*)<', card).group(1)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_leads_department_page_shows_the_idle_slices_the_admin_dashboard_counts(
    held,
    client_as,
    api_as,
    platform_admin,
    lead_a,
    member_b,
    department_b,
    django_capture_on_commit_callbacks,
):
    """The lead's page showed its slices in use but not the idle ones its slice jobs may take: now the
    admin dashboard's figure, the same number on both screens as jobs take and free slices."""

    def both() -> tuple[int, int]:
        admin = client_as(platform_admin).get(reverse("scheduling:admin-dashboard")).content.decode()
        lead = client_as(lead_a).get(reverse("scheduling:department-detail", args=["research"]))
        return _idle_card(admin)[0], _idle_card(lead.content.decode())[0]

    assert both() == (15, 15)
    lead_page = client_as(lead_a).get(reverse("scheduling:department-detail", args=["research"]))
    assert (
        "7 x 1g.23gb, 4 x 2g.47gb, 4 x 3g.93gb; of 16 on trays in service"
        in _idle_card(lead_page.content.decode())[1]
    )
    # Another department's slice job takes one more: both screens count 14.
    department_b.guaranteed_gpus = 8
    department_b.save(update_fields=["guaranteed_gpus"])
    body = {"department": "beta", "name": "other", "work": {"script": SCRIPT}, "mig_profile": "3g.93gb"}
    with django_capture_on_commit_callbacks(execute=True):
        response = api_as(member_b).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    assert SliceAllocation.objects.count() == 2, Job.objects.get(pk=response.json()["id"]).pending_reason
    assert both() == (14, 14) == (idle_slices().idle,) * 2
    held.slice_allocations.all().delete()  # the first job's end frees its slice
    assert both() == (15, 15)


def test_a_slice_freed_when_its_job_ends_is_idle_again(held, client_as, member_a):
    held.slice_allocations.all().delete()  # as the job's end deletes them (scheduling.services.jobs)
    page = _rack(client_as, member_a)
    assert page.count('class="slice slice-held"') == 0 and page.count('class="slice slice-idle"') == 16
    assert idle_slices().idle == 16
