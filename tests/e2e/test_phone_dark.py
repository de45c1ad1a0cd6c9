"""Phones and dark rooms (static/portal/ux.js, static/css/portal.css): at 390 px wide the header collapses
into a menu that opens, and no page is wider than the screen (tables and the rack grid scroll inside their
box); the theme follows prefers-color-scheme; `/` focuses search, `j`/`k` and the arrow keys move between
trays on the rack view, `?` lists the shortcuts. Screenshots at desktop and phone width, light and dark, in
`shots`."""

import re

import pytest
from playwright.sync_api import expect

from inventory.demo import seed_datacenter
from tests.factories import make_department, make_job, make_user

PASSWORD = "e2e-phone-password-1"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1400, "height": 1000}
PAGES = {
    "home": "/",
    "racks": "/inventory/racks/",
    "rack": "/inventory/racks/gb-r02/",
    "departments": "/tenancy/departments/",
    "department": "/tenancy/departments/research/",  # with its projects and members panels
    "jobs": "/scheduling/jobs/",
    "audit": "/audit/",
    "plans": "/inventory/plans/",
    "search": "/search/?q=gb-r0",
}


@pytest.fixture
def fleet(transactional_db):
    seed_datacenter(racks=3)
    research = make_department("Research", guaranteed_gpus=8)
    make_job(research, "llama-finetune-with-a-long-name", state="pending", gpus=8)
    admin = make_user("e2e-phone-admin", staff=True, password=PASSWORD)
    from tenancy.projects import create_project

    create_project(admin, research, name="Large language model pretraining", guaranteed_gpus=4)
    return admin


def sign_in(page, live_server):
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "e2e-phone-admin")
    page.fill("#id_password", PASSWORD)
    with page.expect_navigation():
        page.locator("#id_password").press("Enter")
    expect(page).not_to_have_url(re.compile(r"/login/"))


def page_width(page) -> int:
    return page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)")


def luminance(page, selector: str, prop: str = "backgroundColor") -> float:
    """The relative luminance (0 black .. 1 white) of an element's computed colour."""
    return page.evaluate(
        """([selector, prop]) => {
            const value = getComputedStyle(document.querySelector(selector))[prop];
            const [r, g, b] = value.match(/[\\d.]+/g).slice(0, 3).map(Number).map((c) => {
                c /= 255;
                return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4);
            });
            return 0.2126 * r + 0.7152 * g + 0.0722 * b;
        }""",
        [selector, prop],
    )


@pytest.mark.e2e
def test_the_header_and_pages_fit_a_phone(live_server, browser, fleet, shots):
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    try:
        sign_in(page, live_server)
        toggle = page.get_by_role("button", name="Menu")
        nav = page.get_by_role("navigation", name="Main")
        expect(toggle).to_be_visible()
        expect(toggle).to_have_attribute("aria-expanded", "false")
        expect(nav).to_be_hidden()
        expect(page.get_by_role("searchbox", name=re.compile("Search GPUs"))).to_be_visible()
        assert page_width(page) <= PHONE["width"]
        toggle.click()
        expect(toggle).to_have_attribute("aria-expanded", "true")
        expect(nav).to_be_visible()
        expect(nav.get_by_role("link", name="Audit log")).to_be_visible()
        assert page_width(page) <= PHONE["width"]
        page.screenshot(path=str(shots / "menu-open-phone.png"), full_page=True)
        with page.expect_navigation():
            nav.get_by_role("link", name="Racks").click()
        expect(nav).to_be_hidden()  # a new page starts with the menu closed

        for name, path in PAGES.items():
            page.goto(f"{live_server.url}{path}")
            assert page_width(page) <= PHONE["width"], f"{path} is wider than the phone"
            page.screenshot(path=str(shots / f"{name}-phone.png"), full_page=True)

        # The whole rack fits the phone (4 GPUs a row); a tray's details come into view under it.
        page.goto(f"{live_server.url}/inventory/racks/gb-r02/")
        grid = page.locator(".rack-grid-wrap")
        assert grid.evaluate("el => el.scrollWidth <= el.clientWidth")
        expect(page.locator("#tray-1 button.gpu").nth(3)).to_be_in_viewport()
        page.locator("button.tray", has_text="gb-r02-t03").click()
        panel = page.locator("aside#detail")
        expect(panel).to_contain_text("gb-r02-t03")
        expect(panel).to_be_in_viewport()
        page.screenshot(path=str(shots / "rack-tray-selected-phone.png"))
    finally:
        context.close()


@pytest.mark.e2e
def test_dark_theme_follows_the_system(live_server, browser, fleet, shots):
    for viewport, suffix in ((DESKTOP, "desktop"), (PHONE, "phone")):
        context = browser.new_context(viewport=viewport, color_scheme="dark")
        page = context.new_page()
        try:
            sign_in(page, live_server)
            for name in ("home", "racks", "rack", "jobs", "departments"):
                page.goto(f"{live_server.url}{PAGES[name]}")
                assert luminance(page, "body") < 0.05, name
                assert luminance(page, "body", "color") > 0.6, name  # light text on the dark page
                page.screenshot(path=str(shots / f"{name}-dark-{suffix}.png"), full_page=True)
            page.goto(f"{live_server.url}/inventory/racks/")
            assert luminance(page, ".table-wrap") < 0.05
            assert luminance(page, "input[name=name]") < 0.05
        finally:
            context.close()
    light = browser.new_context(viewport=DESKTOP, color_scheme="light")
    page = light.new_page()
    try:
        sign_in(page, live_server)
        assert luminance(page, "body") > 0.8
    finally:
        light.close()


@pytest.mark.e2e
def test_keyboard_shortcuts(live_server, page, fleet, shots):
    sign_in(page, live_server)
    page.goto(f"{live_server.url}/inventory/racks/gb-r01/")
    page.keyboard.press("/")
    expect(page.locator("#header-search-q")).to_be_focused()
    page.keyboard.type("gb-r02-t1")  # the slash itself is not typed into the box
    expect(page.locator("#header-search-q")).to_have_value("gb-r02-t1")
    page.locator("#header-search-q").blur()

    panel = page.locator("aside#detail")
    page.keyboard.press("j")
    expect(page.locator("button.tray.is-selected")).to_have_text("gb-r01-t01")
    expect(panel).to_contain_text("gb-r01-t01")
    page.keyboard.press("j")
    expect(page.locator("button.tray.is-selected")).to_have_text("gb-r01-t02")
    expect(panel).to_contain_text("gb-r01-t02")
    page.keyboard.press("ArrowDown")
    expect(page.locator("button.tray.is-selected")).to_have_text("gb-r01-t03")
    page.keyboard.press("k")
    page.keyboard.press("ArrowUp")
    expect(page.locator("button.tray.is-selected")).to_have_text("gb-r01-t01")
    expect(panel).to_contain_text("gb-r01-t01")
    expect(page.locator("button.tray", has_text="gb-r01-t01")).to_be_focused()

    page.keyboard.press("?")
    dialog = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("Focus the search box")
    page.screenshot(path=str(shots / "shortcuts-desktop.png"))
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()

    # Typing in a form field is left alone.
    page.goto(f"{live_server.url}/inventory/racks/")
    page.locator("input[name=name]").type("j/k?")
    expect(page.locator("input[name=name]")).to_have_value("j/k?")
    expect(page.locator("#header-search-q")).not_to_be_focused()
