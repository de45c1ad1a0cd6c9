"""Tray actions in a real browser: a platform admin drains a tray from its page (the state badge and the
reason change), returns it (at once: a person's drain waits for no healthy time), and drains two trays at
once from the rack view; a tray taken out for maintenance is counted and labelled apart from a drain on the
home page (1400 and 390 px)."""

import pytest
from playwright.sync_api import expect

from inventory.choices import TrayState
from inventory.demo import seed_datacenter
from inventory.models import ComputeTray, HealthAction
from tests.e2e.browser import DESKTOP, PHONE, sign_in

PASSWORD = "e2e-admin-password-1"


@pytest.fixture
def admin(transactional_db, django_user_model):
    seed_datacenter(racks=2)
    return django_user_model.objects.create_user("e2e-admin", "e2e@example.com", PASSWORD, is_staff=True)


@pytest.mark.e2e
def test_drain_return_and_bulk_drain(live_server, page, admin, shots):
    sign_in(page, live_server, admin.username, PASSWORD)
    tray = ComputeTray.objects.get(hostname="gb-r02-t03")
    page.goto(f"{live_server.url}/inventory/trays/{tray.pk}/")
    head = page.locator("header.detail-head")
    expect(head.locator(".badge.state-up")).to_contain_text("Up")

    # A drain without a reason is refused in words; nothing changes.
    page.get_by_role("button", name="Drain", exact=True).click()
    expect(page.locator("form.drain-form")).to_be_visible()  # the browser's own "required" check holds it
    page.fill("#id_drain-reason", "fan noise on slot 3")
    page.screenshot(path=str(shots / "tray-actions-before.png"), full_page=True)
    with page.expect_navigation():
        page.get_by_role("button", name="Drain", exact=True).click()
    expect(head.locator(".badge.state-drain")).to_contain_text("Drain")
    reason = "rackplane: e2e-admin: fan noise on slot 3"
    expect(page.locator(".note", has_text="Drain:")).to_contain_text(reason)
    expect(page.locator(".message.success")).to_contain_text(f"gb-r02-t03 drained: {reason}")
    # A person's drain is theirs to end: it returns at once (the healthy-time wait is the rules' drains').
    expect(page.locator("form.return-form .eligibility")).to_contain_text(
        "Eligible: it was drained by hand, not by the health rules, with no fault since."
    )
    expect(page.locator("#id_return-force")).to_have_count(0)
    expect(page.locator("section.health-timeline tbody tr").first).to_contain_text("Drained")
    page.screenshot(path=str(shots / "tray-actions-drained.png"), full_page=True)

    page.fill("#id_return-note", "fans replaced")
    with page.expect_navigation():
        page.get_by_role("button", name="Return to service").click()
    expect(head.locator(".badge.state-up")).to_contain_text("Up")
    expect(page.locator(".note", has_text="Drain:")).to_have_count(0)
    expect(page.locator(".message.success")).to_contain_text("gb-r02-t03 is back in service")
    tray.refresh_from_db()
    assert (tray.state, tray.state_reason) == (TrayState.UP, "")

    # Bulk: two trays selected on the rack view, drained in one request.
    page.goto(f"{live_server.url}/inventory/racks/gb-r02/")
    page.get_by_label("Select gb-r02-t05").check()
    page.get_by_label("Select gb-r02-t07").check()
    page.fill("#bulk-reason", "rewiring the spine")
    page.screenshot(path=str(shots / "tray-actions-rack-selected.png"), full_page=True)
    with page.expect_navigation():
        page.get_by_role("button", name="Drain selected").click()
    expect(page.locator(".note", has_text="Done:")).to_contain_text("2 trays drained")
    rows = page.locator("table.bulk-outcomes tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("gb-r02-t05")
    expect(rows.nth(1)).to_contain_text("gb-r02-t07")
    expect(rows.nth(0)).to_contain_text("rackplane: e2e-admin: rewiring the spine")
    page.screenshot(path=str(shots / "tray-actions-bulk-result.png"), full_page=True)
    page.get_by_role("link", name="Back to gb-r02").click()
    for host in ("gb-r02-t05", "gb-r02-t07"):
        row = page.locator("li.tray-row", has=page.locator(f"button[data-tray-hostname='{host}']"))
        expect(row.locator(".badge.state-drain")).to_be_visible()
        expect(row.locator(".tray-notes")).to_contain_text("rackplane: e2e-admin: rewiring the spine")
    page.screenshot(path=str(shots / "tray-actions-rack-drained.png"), full_page=True)
    assert HealthAction.objects.filter(actor=admin).count() == 4


@pytest.mark.e2e
def test_maintenance_is_counted_apart_from_a_drain_on_the_home_page(live_server, page, admin, shots):
    tray = ComputeTray.objects.get(hostname="gb-r02-t03")
    page.set_viewport_size(DESKTOP)
    sign_in(page, live_server, admin.username, PASSWORD)
    page.goto(f"{live_server.url}/inventory/trays/{tray.pk}/")
    page.wait_for_load_state()
    page.fill("input[name='maintenance-reason']", "fan swap")
    with page.expect_navigation():
        page.get_by_role("button", name="Start maintenance").click()
    page.wait_for_load_state()
    expect(page.locator(".message.success")).to_contain_text("gb-r02-t03 is out for maintenance")

    page.goto(f"{live_server.url}/")
    counts = page.get_by_role("list", name="Trays out of service by state")
    expect(counts.locator("li")).to_have_text(["◒ Drain 1", "⚙ Maintenance 1"])
    states = page.locator("table.breakdown").first
    expect(states.locator("tr", has_text="Drain").locator("td.num").first).to_have_text("1")
    expect(states.locator("tr", has_text="Maintenance").locator("td.num").first).to_have_text("1")
    expect(page.locator("tr", has_text="gb-r02-t03").locator(".badge")).to_contain_text("Maintenance")
    page.locator("#not-up").scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "home-maintenance-1400.png"), full_page=True)

    page.set_viewport_size(PHONE)
    page.reload()
    page.wait_for_load_state("networkidle")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    expect(counts.locator("li")).to_have_count(2)
    page.screenshot(path=str(shots / "home-maintenance-390.png"), full_page=True)
