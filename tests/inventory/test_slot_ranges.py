"""Partition-plan tray ranges are bounded by the rack before they are expanded.

`"1-200000"` used to be expanded into 200,000 slots (a 21.7 MB answer, 250 MB more server memory), through
the API and the wizard alike. Now a range outside the rack's 18 trays, or one that names a tray again, is a
400 naming it, whichever way it comes in, and nothing is saved.
"""

from urllib.parse import urlencode

import pytest
from django.urls import reverse

from inventory.models import NVLinkPartition, PartitionPlan
from inventory.planning import parse_ranges

# Plans push to the embedded `local` directory target (tests/conftest.py), writing into a temporary directory.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("local_target")]

PLANS = "/api/v1/partition-plans/"


def rows() -> tuple[int, int]:
    return PartitionPlan.objects.count(), NVLinkPartition.objects.count()


@pytest.fixture
def staff(api_as, platform_admin, demo_inventory):
    return api_as(platform_admin)


def plan(slots, **fields) -> dict:
    return {"rack": "gb-r01", "layout": {"partitions": [{"name": "p1", "slots": slots}]}, **fields}


@pytest.mark.slow(reason="14 cases, each a full request through the stack")
@pytest.mark.parametrize(
    ("slots", "reason"),
    [
        ("1-200000", "'1-200000' is outside the rack's trays 1-18"),
        ("0-4", "'0-4' is outside the rack's trays 1-18"),
        ("19", "'19' is outside the rack's trays 1-18"),
        ("1-18," * 100_000, "'1-18' names tray 1 again"),
        ("1-9,5", "'5' names tray 5 again"),
        ([1] * 100_000, "'1' names tray 1 again"),
        ([7, 200_000], "'200000' is outside the rack's trays 1-18"),
    ],
    ids=[
        "huge-range",
        "slot-0",
        "slot-19",
        "repeated-ranges",
        "overlap",
        "repeated-list",
        "list-out-of-rack",
    ],
)
@pytest.mark.parametrize("dry_run", [True, False])
def test_slots_outside_the_rack_or_named_twice_are_a_400_naming_them(staff, slots, reason, dry_run):
    before = rows()
    response = staff.post(PLANS, plan(slots, dry_run=dry_run), format="json")
    assert response.status_code == 400, response.content[:300]
    assert response.json() == {"layout": {"partitions": {"0": {"slots": [reason]}}}}
    assert len(response.content) < 200
    assert rows() == before


def test_more_partitions_than_the_rack_has_trays_is_a_400(staff):
    partitions = [{"name": f"p{n}", "slots": [n % 18 + 1]} for n in range(19)]
    before = rows()
    response = staff.post(PLANS, {"rack": "gb-r01", "layout": {"partitions": partitions}}, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "layout": {"partitions": {"non_field_errors": ["Ensure this field has no more than 18 elements."]}}
    }
    assert rows() == before


def test_the_whole_rack_as_a_range_is_still_a_plan(staff):
    response = staff.post(PLANS, plan("1-9,10-18", dry_run=True), format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["ok"] is True


def test_parse_ranges_checks_bounds_before_expanding():
    assert parse_ranges("1-3, 7,9-10") == (1, 2, 3, 7, 9, 10)
    assert parse_ranges("1-4", highest=4) == (1, 2, 3, 4)
    with pytest.raises(ValueError, match=r"'1-5' is outside the rack's trays 1-4"):
        parse_ranges("1-5", highest=4)
    with pytest.raises(ValueError, match="outside the rack's trays 1-18"):
        parse_ranges(f"1-{10**18}")  # refused at once: never a range of 10**18 slots


# --- the wizard: the same parser, the same words -----------------------------------------------------------


def wizard(view, **params) -> str:
    return reverse(f"integrations:{view}", args=["gb-r01"]) + "?" + urlencode(params, doseq=True)


@pytest.fixture
def admin(client_as, platform_admin, demo_inventory):
    return client_as(platform_admin)


def findings(response) -> list[str]:
    return [f.message for f in response.context["check"].findings]


def test_the_wizard_shows_a_range_outside_the_rack_as_a_finding(admin):
    response = admin.get(
        wizard("plan-layout", preset="custom", slots=["1-200000"]), headers={"HX-Request": "true"}
    )
    assert response.status_code == 200
    assert "Partition 1: '1-200000' is outside the rack's trays 1-18." in findings(response)
    assert not response.context["check"].ok
    assert len(response.content) < 200_000


def test_the_wizard_refuses_more_partitions_than_trays(admin):
    response = admin.get(
        wizard("plan-layout", preset="custom", slots=[str(n % 18 + 1) for n in range(19)]),
        headers={"HX-Request": "true"},
    )
    assert "19 partitions: a rack has 18 trays, so at most 18 partitions." in findings(response)


def test_the_wizard_does_not_apply_a_range_outside_the_rack(admin):
    before = rows()
    response = admin.post(wizard("plan-apply"), {"preset": "custom", "slots": ["1-200000"]})
    assert response.status_code == 400
    assert "&#x27;1-200000&#x27; is outside the rack&#x27;s trays 1-18" in response.content.decode()
    assert rows() == before
