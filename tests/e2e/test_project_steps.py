"""The projects panel on a phone (issue 31): a lead's Move, Add and Save controls fit 390 px without the
page or the panel scrolling sideways, and moving someone from there goes through its confirmation page
(which fits too) before anything changes."""

import re

import pytest
from playwright.sync_api import expect

from core.access import Role
from inventory.demo import seed_datacenter
from tenancy.models import Project, ProjectMembership
from tests.e2e.browser import DESKTOP, PHONE, sign_in
from tests.e2e.test_daily_findings import OFFENDERS
from tests.factories import make_department, make_member

pytestmark = pytest.mark.e2e

PASSWORD = "e2e-project-steps-1"
# What reaches past the screen's right edge inside `selector`, scrolling boxes or not: a panel that
# scrolls sideways inside itself is what the phone layout must not need.
PAST_THE_EDGE = """([selector, width]) => {
  const out = [];
  for (const el of document.querySelectorAll(`${selector}, ${selector} *`)) {
    const box = el.getBoundingClientRect();
    if (box.width <= 1 || el.closest(".visually-hidden")) continue;  // for screen readers only
    const what = `${el.tagName.toLowerCase()}.${el.className}`;
    if (box.width && box.right > width + 1) out.push(`${what} ${Math.round(box.right)}`);
    if (el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== "visible")
      out.push(`${what} scrolls ${el.scrollWidth}/${el.clientWidth}`);
  }
  return out.slice(0, 10);
}"""


@pytest.fixture
def research(transactional_db):
    seed_datacenter(racks=1)
    department = make_department("Research", guaranteed_gpus=32)
    make_member("e2e-steps-lead", department, Role.LEAD, password=PASSWORD)
    vision = Project.objects.create(
        department=department, name="Computer Vision Research", slug="vision", guaranteed_gpus=16
    )
    Project.objects.create(department=department, name="Natural Language Processing", slug="nlp")
    for name in ("e2e-a-rather-long-username-one", "e2e-a-rather-long-username-two"):
        ProjectMembership.objects.create(user=make_member(name, department), project=vision)
    make_member("e2e-in-no-project-with-a-long-name", department)
    return department


def fits(page, width: int) -> None:
    page.wait_for_function("w => document.documentElement.scrollWidth <= w", arg=width + 1, timeout=10_000)
    assert page.evaluate(OFFENDERS, width) == []


@pytest.mark.e2e
def test_the_projects_panel_fits_a_phone_and_a_move_is_confirmed_there(live_server, browser, research, shots):
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    try:
        sign_in(page, live_server, "e2e-steps-lead", PASSWORD)
        expect(page).not_to_have_url(re.compile(r"/login/"))
        page.goto(f"{live_server.url}/tenancy/departments/research/#projects")
        panel = page.locator("#projects")
        person = panel.locator('tr[data-project="vision"] li[data-username="e2e-a-rather-long-username-one"]')
        expect(person.get_by_role("button", name="Move")).to_be_visible()
        # Each figure keeps its heading on a phone, where the table's head row is not shown.
        expect(panel.locator('tr[data-project="vision"] [data-figure="guaranteed"]')).to_have_attribute(
            "data-label", "Guaranteed"
        )
        fits(page, PHONE["width"])
        assert page.evaluate(PAST_THE_EDGE, ["#projects", PHONE["width"]]) == []
        panel.screenshot(path=str(shots / "project-steps-panel-390.png"))

        person.get_by_label("Move e2e-a-rather-long-username-one to").select_option(
            label="Natural Language Processing"
        )
        person.get_by_role("button", name="Move").click()
        confirm = page.locator('[data-confirm="move"]')
        expect(confirm).to_contain_text("Their next jobs go to Natural Language Processing")
        fits(page, PHONE["width"])
        page.screenshot(path=str(shots / "project-steps-move-confirm-390.png"), full_page=True)
        assert ProjectMembership.objects.filter(project__slug="vision").count() == 2  # not yet
        page.get_by_role("button", name="Move them").click()
        nlp = page.locator('#projects tr[data-project="nlp"]')
        expect(nlp.locator('li[data-username="e2e-a-rather-long-username-one"]')).to_be_visible()
        fits(page, PHONE["width"])

        page.set_viewport_size(DESKTOP)
        fits(page, DESKTOP["width"])
        page.locator("#projects").screenshot(path=str(shots / "project-steps-panel-1400.png"))
    finally:
        context.close()
