"""Sorting the rack list by a computed column in a browser: click "Problems" once (fewest first), then again
(most first), and read the rows' order and the header's aria-sort. Screenshot in `shots`."""

import re

import pytest
from playwright.sync_api import expect

from inventory.choices import GpuHealth, TrayState
from inventory.demo import seed_datacenter
from inventory.models import ComputeTray, Gpu, Rack
from tests.e2e.browser import sign_in
from tests.factories import make_user

PASSWORD = "e2e-sorting-password-1"


@pytest.fixture
def racks_with_problems(transactional_db):
    """gb-r01: 3 GPUs unhealthy (3 problems); gb-r02: 1 tray with fabric problems (1); gb-r03 and aa-spare
    (no trays): none."""
    seed_datacenter(racks=3)
    Gpu.objects.update(health=GpuHealth.HEALTHY)
    ComputeTray.objects.update(state=TrayState.UP, state_reason="", fabric_problems=[])
    Rack.objects.create(name="aa-spare", location="hall B")
    unhealthy = list(
        Gpu.objects.filter(tray__rack__name="gb-r01", tray__slot=2).values_list("pk", flat=True)[:3]
    )
    Gpu.objects.filter(pk__in=unhealthy).update(health=GpuHealth.UNHEALTHY)
    ComputeTray.objects.filter(rack__name="gb-r02", slot=7).update(
        fabric_problems=[{"kind": "link_down", "detail": "NVLink 3 down"}]
    )
    return make_user("e2e-sorting-viewer", password=PASSWORD)


def _rows(page) -> list[tuple[str, str]]:
    """(rack name, problems cell) per row, top to bottom."""
    rows = page.locator("table.racks tbody tr")
    return [
        (
            row.locator("a.rack-link").inner_text(),
            row.locator("td").nth(7).inner_text().replace("⚠", "").strip(),
        )
        for row in rows.all()
    ]


@pytest.mark.e2e
def test_click_problems_twice_sorts_fewest_then_most(live_server, page, racks_with_problems, shots):
    sign_in(page, live_server, "e2e-sorting-viewer", PASSWORD)
    page.goto(f"{live_server.url}/inventory/racks/")
    assert [name for name, _ in _rows(page)] == ["aa-spare", "gb-r01", "gb-r02", "gb-r03"]
    problems = page.locator("table.racks thead th", has_text="Problems")
    expect(problems).not_to_have_attribute("aria-sort", re.compile("."))

    with page.expect_navigation():
        problems.get_by_role("link").click()
    expect(problems).to_have_attribute("aria-sort", "ascending")
    assert "sort=problems" in page.url
    assert _rows(page) == [("aa-spare", "0"), ("gb-r03", "0"), ("gb-r02", "1"), ("gb-r01", "3")]

    with page.expect_navigation():
        problems.get_by_role("link").click()
    expect(problems).to_have_attribute("aria-sort", "descending")
    assert "sort=-problems" in page.url
    assert _rows(page) == [("gb-r01", "3"), ("gb-r02", "1"), ("gb-r03", "0"), ("aa-spare", "0")]
    expect(page.locator("table.racks thead th", has_text="Rack")).not_to_have_attribute(
        "aria-sort", re.compile(".")
    )
    page.screenshot(path=str(shots / "racks-sorted-by-problems.png"), full_page=True)
