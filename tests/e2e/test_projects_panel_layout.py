"""The projects panel at 1400 and 390 px reads whole (walkthrough 12: at 1400 px the default row's note ran
under the next column and ended on a dangling "projects'", its Limit cell said "the department's", the
people picker was a bulleted list with each checkbox above its name and the target menu was cut to
"LLM pre")."""

import re

import pytest
from playwright.sync_api import expect

from core.access import Role
from inventory.demo import seed_datacenter
from tenancy.models import Project
from tests.e2e.browser import sign_in
from tests.factories import free_trays, make_department, make_job, make_member

pytestmark = pytest.mark.e2e

PASSWORD = "e2e-projects-layout-1"


@pytest.fixture
def research(transactional_db):
    """Research (16 GPUs) with a named project "LLM pretraining" guaranteed 12: the default project keeps 4
    and runs 8 in quota, 4 beyond its guarantee; two members are in no named project."""
    seed_datacenter(racks=1)
    department = make_department("Research", guaranteed_gpus=16)
    make_member("e2e-pl-lead", department, Role.LEAD, password=PASSWORD)
    make_member("bob", department)
    make_member("erin", department)
    Project.objects.create(
        department=department, name="LLM pretraining", slug="llm-pretraining", guaranteed_gpus=12
    )
    default = Project.objects.get(department=department, is_default=True)
    for name, tray in zip(("older", "newer"), free_trays(2), strict=True):
        make_job(department, name, trays=[tray], project=default, over_quota=False)
    return department


def box(locator) -> dict:
    return locator.bounding_box()


@pytest.mark.parametrize("width", [1400, 390])
def test_each_cell_of_the_projects_panel_reads_whole(live_server, browser, research, shots, width):
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    try:
        sign_in(page, live_server, "e2e-pl-lead", PASSWORD)
        expect(page).not_to_have_url(re.compile(r"/login/"))
        page.goto(f"{live_server.url}/tenancy/departments/research/#projects")
        page.wait_for_load_state()
        row = page.locator('#projects tr[data-project="default"]')

        # The note under In quota: a whole sentence, inside its own cell.
        cell = row.locator('[data-figure="in-quota"]')
        note = cell.locator(".small")
        expect(note).to_have_text("4 beyond its guarantee, on the named projects' unused guarantee")
        c, n = box(cell), box(note)
        assert n["x"] >= c["x"] - 1 and n["x"] + n["width"] <= c["x"] + c["width"] + 1

        # The Limit cell says whose limit.
        expect(row.locator('[data-figure="limit"]')).to_contain_text("the department's limit")

        # The people: no bullets, each checkbox on its name's line.
        for username in ("bob", "erin", "e2e-pl-lead"):
            item = row.locator(f'li[data-username="{username}"]')
            assert item.evaluate("el => getComputedStyle(el).listStyleType") == "none"
            tick, label = box(item.locator("input[type=checkbox]")), box(item.locator("label"))
            assert label["height"] < 2 * tick["height"] + 8, (username, tick, label)  # one line

        # The target menu is as wide as the project's name.
        menu = row.locator("#default-move-to")
        expect(menu.locator("option:checked")).to_have_text("LLM pretraining")
        fits = menu.evaluate(
            """el => {
                const probe = document.createElement("span");
                probe.style.font = getComputedStyle(el).font;
                probe.style.whiteSpace = "nowrap";
                probe.textContent = el.options[el.selectedIndex].text;
                document.body.appendChild(probe);
                const need = probe.getBoundingClientRect().width;
                probe.remove();
                return el.clientWidth >= need + 16;
            }"""
        )
        assert fits
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.locator("#projects").screenshot(path=str(shots / f"projects-panel-layout-{width}.png"))
    finally:
        context.close()
