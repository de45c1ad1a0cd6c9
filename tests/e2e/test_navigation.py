"""Navigation in a real browser, as each role: the menu offers exactly what the role may open (the audit log
and partition plans only to those who may see them), folds behind the Menu button on a phone and opens on a
tap, and the home fits a phone's width. Screenshots at desktop and phone width through `shots`.

What needs no browser is proven below it, in tests/portal/test_navigation.py: every menu link answers 200
for its role, the favicon is linked and served, a lead's and a member's home shows their department's work
(running and pending jobs, idle GPUs) and not other departments', an admin keeps the fleet's overview, a
page one may not open answers a styled 403 that says why with a way back, the admin is branded Rackplane."""

import pytest
from playwright.sync_api import expect

from core.access import Role
from inventory.demo import seed_datacenter
from tests.e2e.browser import DESKTOP, PHONE, sign_in
from tests.factories import free_trays, make_department, make_job, make_member, make_user

PASSWORD = "e2e-navigation-password-1"


@pytest.fixture
def people(transactional_db):
    seed_datacenter(racks=2)
    research = make_department("Research", guaranteed_gpus=16)
    other = make_department("Inference", guaranteed_gpus=8)
    lead = make_member("nav-lead", research, Role.LEAD, password=PASSWORD)
    member = make_member("nav-member", research, password=PASSWORD)
    admin = make_user("nav-admin", staff=True, password=PASSWORD)
    trays = free_trays(2)
    make_job(research, "research-running-job", trays=trays[:1], submitted_by=member)
    make_job(research, "research-waiting-job", state="pending", gpus=8, submitted_by=member)
    make_job(other, "inference-running-job", trays=trays[1:2])
    return {"admin": admin, "lead": lead, "member": member}


def menu_labels(page) -> list[str]:
    return [text.strip() for text in page.locator('nav[aria-label="Main"] a').all_inner_texts()]


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("persona", "offered", "withheld", "heading"),
    [
        ("admin", ["Audit log", "Partition plans", "Config pushes"], [], "Fleet overview"),
        ("lead", ["Audit log", "Jobs", "Departments"], ["Partition plans", "Config pushes"], "Your work"),
        ("member", ["Jobs", "Departments"], ["Audit log", "Partition plans", "Config pushes"], "Your work"),
    ],
)
def test_each_role_finds_what_it_may_use(
    live_server, page, people, shots, persona, offered, withheld, heading
):
    page.set_viewport_size(DESKTOP)
    sign_in(page, live_server, people[persona].username, PASSWORD)
    expect(page.locator("h1").first).to_contain_text(heading)
    labels = menu_labels(page)
    for label in offered:
        assert label in labels, f"{persona} is not offered {label}: {labels}"
    for label in withheld:
        assert label not in labels, f"{persona} is offered {label}"
    page.screenshot(path=str(shots / f"navigation-{persona}.png"), full_page=True)

    # On a phone the menu folds behind one button and opens on a tap, with the same links.
    page.set_viewport_size(PHONE)
    page.reload()
    toggle = page.locator("[data-menu-toggle]")
    expect(toggle).to_be_visible()
    expect(page.locator('nav[aria-label="Main"] a', has_text=offered[0]).first).to_be_hidden()
    toggle.click()
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(page.locator('nav[aria-label="Main"] a', has_text=offered[0]).first).to_be_visible()
    width = page.evaluate("document.scrollingElement.scrollWidth")
    assert width <= PHONE["width"], f"{persona}'s home is {width} px wide on a phone"
    page.screenshot(path=str(shots / f"navigation-{persona}-390.png"), full_page=True)
