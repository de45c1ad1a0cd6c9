"""Phones and dark rooms (static/portal/ux.js, static/css/portal.css): at 390 px wide the header collapses
into a menu that opens, and no page is wider than the screen (tables and the rack grid scroll inside their
box); the theme follows prefers-color-scheme; `/` focuses search, `j`/`k` and the arrow keys move between
trays on the rack view, `?` lists the shortcuts. Screenshots at desktop and phone width, light and dark, in
`shots`."""

import re

import pytest
from playwright.sync_api import expect

from inventory.demo import seed_datacenter
from tests.factories import make_department, make_job, make_member, make_user

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
    "job-form": "/scheduling/jobs/new/",
    "wizard-layout": "/inventory/racks/gb-r03/plan/",  # the rack drawing scrolls inside its box
    "health": "/inventory/health/",
    "health-offenders": "/inventory/health/offenders/",
    "health-service": "/inventory/health/service/",
    "fabric": "/inventory/fabric/",
    "fabric-import": "/inventory/fabric/import/",
}


@pytest.fixture
def fleet(transactional_db):
    seed_datacenter(racks=3)
    research = make_department("Research", guaranteed_gpus=8)
    make_job(research, "llama-finetune-with-a-long-name", state="pending", gpus=8)
    admin = make_user("e2e-phone-admin", staff=True, password=PASSWORD)
    from tenancy.projects import create_project, set_project_member

    project = create_project(admin, research, name="Large language model pretraining", guaranteed_gpus=4)
    # A project with a member: its members table once made the department page wider than a phone.
    set_project_member(admin, project, make_member("researcher-with-a-long-name", research))
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


def wider_than_the_screen(page) -> list[str]:
    """What sticks out past the right edge of the screen, for the failure message: elements not inside a
    box that scrolls sideways, and absolutely positioned ones (they escape such a box unless it is
    positioned)."""
    return page.evaluate(
        """(screen) => [...document.querySelectorAll("body *")].filter((el) => {
            const box = el.getBoundingClientRect();
            if (box.width === 0 || box.right <= screen + 0.5) return false;
            if (getComputedStyle(el).position === "absolute") return true;
            for (let up = el.parentElement; up && up !== document.body; up = up.parentElement) {
                if (getComputedStyle(up).overflowX !== "visible") return false;
            }
            return true;
        }).slice(0, 10).map((el) => {
            const right = Math.round(el.getBoundingClientRect().right);
            return `${el.tagName.toLowerCase()}.${el.className} (right ${right} px)`;
        })""",
        PHONE["width"],  # not innerWidth: a phone zooms out to a page wider than itself
    )


def assert_fits_the_phone(page, what: str) -> None:
    width = page_width(page)
    assert width <= PHONE["width"], f"{what} is {width} px wide: {wider_than_the_screen(page)}"


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
        expect(page.get_by_role("combobox", name=re.compile("Search GPUs"))).to_be_visible()
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
            assert_fits_the_phone(page, path)
            page.screenshot(path=str(shots / f"{name}-phone.png"), full_page=True)

        # The jobs list: a phone row shows the job's name, state and GPUs without scrolling sideways.
        page.goto(f"{live_server.url}/scheduling/jobs/")
        row = page.locator("table.jobs tbody tr").first
        row.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "jobs-rows-phone.png"))
        for cell in (
            row.locator(".job-link"),
            row.locator(".badge.job-pending"),
            row.locator("td.num").nth(1),
        ):
            box = cell.bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
        page.screenshot(path=str(shots / "jobs-rows-phone.png"))

        # The department's people search (an htmx fragment with a role choice and a button per person).
        page.goto(f"{live_server.url}/tenancy/departments/research/")
        page.fill("#id_people_q", "e2e-phone")
        expect(page.locator("#people-results")).to_contain_text("e2e-phone-admin")
        assert_fits_the_phone(page, "the people search")
        page.locator("#people-results").scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "people-search-phone.png"))

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


CHART_COLOURS = """(selector) => {
    const el = document.querySelector(selector);
    const luminance = (value) => {
        const hex = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(value);
        const parts = hex
            ? hex.slice(1).map((h) => parseInt(h, 16))
            : (value.match(/[\\d.]+/g) || []).map(Number);
        const [r, g, b] = parts.slice(0, 3).map((c) => {
            c /= 255;
            return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4);
        });
        return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const alpha = (value) => {
        const parts = (value.match(/[\\d.]+/g) || []).map(Number);
        return parts.length > 3 ? parts[3] : 1;
    };
    // What the eye sees: each background rect plotly drew (paper and plot area) with its fill and opacity.
    const backgrounds = [...el.querySelectorAll("rect.bg")].map((rect) => {
        const style = getComputedStyle(rect);
        return {
            luminance: luminance(style.fill),
            opacity: Number(style.fillOpacity) * alpha(style.fill),
        };
    });
    const ticks = [...el.querySelectorAll(".xtick text, .ytick text")];
    return {
        paper: el._fullLayout.paper_bgcolor,
        plot: el._fullLayout.plot_bgcolor,
        backgrounds,
        ticks: ticks.length,
        tickLuminance: Math.min(...ticks.map((t) => luminance(getComputedStyle(t).fill))),
        tickLuminanceMax: Math.max(...ticks.map((t) => luminance(getComputedStyle(t).fill))),
        legendLuminance: luminance(getComputedStyle(el.querySelector(".legendtext")).fill),
        grid: luminance(getComputedStyle(el.querySelector(".ygrid, .xgrid")).stroke),
        theme: el.getAttribute("data-chart-theme"),
        // The guarantee (dark slate on the light page) as drawn: its line or bar colour.
        guarantee: luminance(el._fullData.filter((t) => t.name.startsWith("Guarantee"))
            .map((t) => (t.type === "bar" ? t.marker.color : t.line.color))[0]),
    };
}"""


def chart_colours(page, selector: str) -> dict:
    return page.evaluate(CHART_COLOURS, selector)


def assert_no_light_box(colours: dict) -> None:
    """Every background plotly drew is transparent or dark: no white box on the dark page."""
    assert colours["backgrounds"], colours
    for background in colours["backgrounds"]:
        assert background["opacity"] < 0.05 or background["luminance"] < 0.05, colours


@pytest.mark.e2e
def test_the_charts_follow_the_dark_theme(live_server, browser, fleet, shots):
    from datetime import timedelta

    from django.utils import timezone

    from tenancy.models import Department, QuotaSnapshot

    research = Department.objects.get(slug="research")
    start = timezone.now().replace(second=0, microsecond=0)
    QuotaSnapshot.objects.bulk_create(
        QuotaSnapshot(
            department=research,
            taken_at=start - timedelta(minutes=5 * step),
            guaranteed=8,
            in_use=step % 10,
            in_quota=min(8, step % 10),
            borrowed=max(0, step % 10 - 8),
            fair_share=6,
            pending_demand=8,
            idle=0,
        )
        for step in range(36)
    )
    for viewport, suffix in ((DESKTOP, "desktop"), (PHONE, "phone")):
        context = browser.new_context(viewport=viewport, color_scheme="dark")
        page = context.new_page()
        try:
            sign_in(page, live_server)
            for path, chart in (
                ("/tenancy/departments/research/", "#quota-chart"),
                ("/tenancy/dashboard/", "#departments-chart"),
            ):
                page.goto(f"{live_server.url}{path}")
                expect(page.locator(f"{chart} .main-svg").first).to_be_visible()
                colours = chart_colours(page, chart)
                transparent = {"rgba(0,0,0,0)", "transparent"}
                assert {colours["paper"].replace(" ", ""), colours["plot"].replace(" ", "")} <= transparent, (
                    colours
                )
                assert_no_light_box(colours)
                assert colours["ticks"] > 0 and colours["tickLuminance"] > 0.6, colours  # light axis labels
                assert colours["legendLuminance"] > 0.6, colours
                assert colours["grid"] < 0.1, colours  # a grid line on the dark surface, not a white one
                assert colours["guarantee"] > 0.4, colours  # the guarantee stands out from the dark surface
                page.locator(chart).scroll_into_view_if_needed()
                page.screenshot(path=str(shots / f"chart-{chart[1:]}-dark-{suffix}.png"))

            # The system switches to light: the drawn chart follows without a reload.
            page.emulate_media(color_scheme="light")
            expect(page.locator("#departments-chart[data-chart-theme=light]")).to_have_count(1)
            colours = chart_colours(page, "#departments-chart")
            assert colours["tickLuminanceMax"] < 0.1, colours  # dark labels on the light page
            assert colours["grid"] > 0.6, colours
            assert colours["guarantee"] < 0.1, colours  # dark slate again
            page.screenshot(path=str(shots / f"chart-departments-chart-light-{suffix}.png"))
        finally:
            context.close()


# Site hostnames are longer than the demo's gb-rNN-tNN: the tray column shows them whole at desktop width.
LONG_HOSTNAMES = {1: "gb-r01-c01-node01.hall-a", 3: "gb-r01-c03-node03", 18: "gb-r01-c18-node18.hall-a"}


@pytest.mark.e2e
def test_the_rack_view_shows_whole_tray_hostnames(live_server, page, fleet, shots):
    from inventory.models import ComputeTray

    for slot, hostname in LONG_HOSTNAMES.items():
        ComputeTray.objects.filter(rack__name="gb-r01", slot=slot).update(hostname=hostname)
    sign_in(page, live_server)
    page.goto(f"{live_server.url}/inventory/racks/gb-r01/")
    assert page.viewport_size["width"] == DESKTOP["width"]
    trays = page.locator("button.tray")
    expect(trays).to_have_count(18)
    for hostname in LONG_HOSTNAMES.values():
        expect(page.locator("button.tray", has_text=hostname)).to_have_text(hostname)
    clipped = trays.evaluate_all(
        """(buttons) => buttons
            .filter((b) => b.scrollWidth > b.clientWidth
                || b.getBoundingClientRect().right
                    > b.closest('.tray-cell').getBoundingClientRect().right + 0.5)
            .map((b) => b.textContent.trim())"""
    )
    assert clipped == [], f"hostnames cut at {DESKTOP['width']} px: {clipped}"
    page.locator("#tray-1").scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "rack-long-hostnames-desktop.png"))
