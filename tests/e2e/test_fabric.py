"""The fabric in the browser (issue 33): an admin imports a site file (upload, preview, apply), and the fabric
page (spine groups, units, their racks, free GPUs per unit, a disagreeing source flagged) and the rack page's
place read at 1400 px and at 390 px. Screenshots in `shots`."""

import json

import pytest
from playwright.sync_api import expect

from inventory import fabric_import
from inventory.demo import demo_site_file, seed_datacenter
from inventory.discovery.fabric.read import read
from tests.e2e.test_phone_dark import DESKTOP, PHONE, assert_fits_the_phone, page_width
from tests.factories import make_department, make_member, make_user

PASSWORD = "e2e-fabric-password-1"


def sign_in(page, live_server, username):
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    with page.expect_navigation():
        page.locator("#id_password").press("Enter")


@pytest.fixture
def fleet(transactional_db):
    seed_datacenter(racks=8)
    make_user("e2e-fabric-admin", staff=True, password=PASSWORD)
    make_member("e2e-fabric-member", make_department("Research", guaranteed_gpus=8), password=PASSWORD)


@pytest.mark.e2e
def test_import_a_site_file_and_read_the_fabric_at_desktop_and_phone_width(
    live_server, browser, fleet, shots, tmp_path
):
    site = tmp_path / "site.yaml"
    site.write_text(demo_site_file([f"gb-r{n:02d}" for n in range(1, 9)]))
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    try:
        sign_in(page, live_server, "e2e-fabric-admin")
        page.goto(f"{live_server.url}/inventory/fabric/")
        expect(page.locator(".fabric-empty")).to_be_visible()
        page.get_by_role("link", name="Import a fabric…").click()
        page.select_option("#id_source", "site_file")
        page.set_input_files("#id_file", str(site))
        page.get_by_role("button", name="Preview").click()
        expect(page.locator(".fabric-preview")).to_contain_text("8 racks placed")
        page.screenshot(path=str(shots / "fabric-preview-desktop.png"), full_page=True)
        page.get_by_role("button", name="Apply").click()
        expect(page.locator('tr[data-unit="su-1"]')).to_contain_text("gb-r04")
        expect(page.locator('section[data-spine="spine-b"] tr[data-unit="su-2"]')).to_contain_text("gb-r08")
        expect(page.locator('tr[data-unit="su-2"] td[data-free]')).to_contain_text("/ 288")
        assert page_width(page) <= DESKTOP["width"]
        page.screenshot(path=str(shots / "fabric-desktop.png"), full_page=True)
    finally:
        context.close()

    # Topograph sees gb-r04 with the second unit: kept beside the site file, flagged, not applied.
    nodes = [
        {
            "metadata": {
                "name": f"gb-r{r:02d}-t{s:02d}",
                "labels": {"fabric.topograph.run/tier-0": "s1" if r < 4 else "s2"},
            }
        }
        for r in range(1, 9)
        for s in range(1, 19)
    ]
    fabric_import.apply(read("topograph", json.dumps({"items": nodes}).encode()))

    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = phone.new_page()
    try:
        sign_in(page, live_server, "e2e-fabric-member")
        page.goto(f"{live_server.url}/inventory/fabric/")
        expect(page.locator(".fabric-conflict-chip")).to_be_visible()
        expect(page.get_by_role("link", name="Import a fabric…")).to_have_count(0)  # members do not import
        assert_fits_the_phone(page, "/inventory/fabric/")
        page.screenshot(path=str(shots / "fabric-phone.png"), full_page=True)
        page.goto(f"{live_server.url}/inventory/racks/gb-r04/")
        expect(page.locator(".rack-fabric")).to_contain_text("su-1")
        expect(page.locator(".rack-fabric-conflict")).to_be_visible()
        assert_fits_the_phone(page, "/inventory/racks/gb-r04/")
        page.screenshot(path=str(shots / "fabric-rack-phone.png"), full_page=True)
    finally:
        phone.close()
