"""The fabric page (scheduling.views.fabric) and the fabric on the rack page and in the rack API: site
topology everyone signed in reads, with free GPUs per unit and no tenant's jobs."""

import pytest
from django.urls import reverse

from inventory import fabric_import
from inventory.discovery.fabric.parsed import ParsedFabric
from inventory.models import Gpu
from tenancy.services import schedulable_gpus_q
from tests.factories import make_job

pytestmark = pytest.mark.django_db
FABRIC = reverse("scheduling:fabric")


def _import(source="site_file", units=None):
    parsed = ParsedFabric(source=source)
    for unit, (spine, racks) in (
        units or {"su-1": ("spine-a", ["gb-r01", "gb-r02"]), "su-2": ("spine-b", ["gb-r03"])}
    ).items():
        parsed.units[unit] = spine
        for rack in racks:
            parsed.racks[rack] = unit
    return fabric_import.apply(parsed)


def test_no_fabric_yet(client_as, member_a, demo_inventory):
    html = client_as(member_a).get(FABRIC).content.decode()
    assert "No fabric imported yet" in html
    assert reverse("inventory:fabric-import") not in html  # members may not import


@pytest.mark.parametrize("persona", ["platform_admin", "lead_a", "member_a", "member_b", "outsider"])
def test_everyone_signed_in_reads_the_units_and_free_gpus(client_as, persona, demo_inventory, department_a):
    _import()
    make_job(department_a, name="secret-training-run", trays=["gb-r03-t01"])
    response = client_as(persona).get(FABRIC)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-spine="spine-a"' in html and 'data-unit="su-1"' in html and 'data-unit="su-2"' in html
    assert "secret-training-run" not in html and department_a.name not in html  # no tenant's jobs
    assert 'data-source="site_file"' in html


def _free(html, unit):
    row = html[html.index(f'data-unit="{unit}"') :]
    start = row.index('data-free="') + len('data-free="')
    return int(row[start : row.index('"', start)])


def test_free_gpus_per_unit_count_what_jobs_hold(client_as, member_a, demo_inventory, department_a):
    _import()
    trays = ["gb-r03-t02", "gb-r03-t03"]
    schedulable = Gpu.objects.filter(schedulable_gpus_q(), tray__hostname__in=trays).count()
    assert schedulable > 0
    before = client_as(member_a).get(FABRIC).content.decode()
    assert (
        _free(before, "su-2") == Gpu.objects.filter(schedulable_gpus_q(), tray__rack__name="gb-r03").count()
    )
    make_job(department_a, trays=trays)
    after = client_as(member_a).get(FABRIC).content.decode()
    assert _free(after, "su-2") == _free(before, "su-2") - schedulable
    assert _free(after, "su-1") == _free(before, "su-1")


def test_anonymous_is_sent_to_sign_in(client, demo_inventory):
    assert client.get(FABRIC).status_code == 302


def test_conflicts_are_flagged_on_the_fabric_and_rack_pages(client_as, platform_admin, demo_inventory):
    _import()
    _import("topograph", {"x": ("s", ["gb-r01"]), "y": ("s", ["gb-r02", "gb-r03"])})
    html = client_as(platform_admin).get(FABRIC).content.decode()
    assert "fabric-conflict-chip" in html and "Sources that disagree" in html
    assert "Use Topograph node labels instead" in html
    rack = client_as(platform_admin).get(reverse("scheduling:rack-detail", args=["gb-r02"])).content.decode()
    assert "rack-fabric-conflict" in rack and 'data-unit="su-1"' in rack and 'data-spine="spine-a"' in rack


def test_rack_page_and_api_name_the_unit(client_as, api_as, member_b, demo_inventory):
    rack = client_as(member_b).get(reverse("scheduling:rack-detail", args=["gb-r01"])).content.decode()
    assert "rack-fabric" not in rack  # no fabric imported: nothing to say (the phone's grid stays in view)
    assert api_as(member_b).get("/api/v1/racks/gb-r01/").json()["fabric_unit"] is None
    _import()
    rack = client_as(member_b).get(reverse("scheduling:rack-detail", args=["gb-r03"])).content.decode()
    assert 'data-unit="su-2"' in rack and 'data-spine="spine-b"' in rack
    body = api_as(member_b).get("/api/v1/racks/gb-r03/").json()
    assert (body["fabric_unit"], body["fabric_spine_group"]) == ("su-2", "spine-b")
    listed = {r["name"]: r["fabric_unit"] for r in api_as(member_b).get("/api/v1/racks/").json()["results"]}
    assert listed == {"gb-r01": "su-1", "gb-r02": "su-1", "gb-r03": "su-2"}
