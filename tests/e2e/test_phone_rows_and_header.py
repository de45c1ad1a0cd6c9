"""The header and the jobs list in both languages at a desktop's and a phone's width (issue 31), on the demo
(`seed_demo`: an admin's full menu, a busy jobs list) signed in as an admin, whose header is the longest.

At 1400 px the header is one row in English and Japanese (an admin's less daily links fold under More,
which opens, lists them and closes on Escape); at 390 px it is one row until the menu opens, the open menu
holds every link (More's too) in a column, and no page is wider than the screen. At both widths the search
box's placeholder is whole inside it (it once read "Search UUID, host, rack, j"), what it searches said in
its label and title. On a phone a job's row shows
its name on one readable line (a long one cut with an ellipsis, the whole name in its title), its GPUs and
its state, all inside the screen. Screenshots in `shots`."""

from io import StringIO

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from scheduling.models import Department
from tests.e2e.browser import DESKTOP, PHONE, sign_in
from tests.factories import make_job

PASSWORD = "e2e-header-password-1"
LONG_NAME = "llama-finetune-with-a-name-longer-than-a-phone-row"
LANGUAGES = {"en": "en-US", "ja": "ja"}
MORE = {"en": "More", "ja": "その他"}
CONFIG_PUSHES = {"en": "Config pushes", "ja": "設定の配信"}
PAGES = ("/", "/scheduling/jobs/", "/inventory/health/", "/audit/")
SEARCHES = {  # the search box's label and title
    "en": "Search GPUs, trays, racks, jobs, departments, projects and users by name, UUID, serial or "
    "hostname",
    "ja": "名前、UUID、シリアル番号、ホスト名で GPU、トレイ、ラック、ジョブ、部門、プロジェクト、"
    "ユーザーを検索",
}


@pytest.fixture
def demo(transactional_db, settings, tmp_path, django_user_model):
    settings.VAR_DIR = tmp_path  # where seed_demo writes the demo logins
    call_command("seed_demo", "--racks", "3", stdout=StringIO())
    # The newest job, so the first row of the list: a name no phone row holds whole.
    make_job(Department.objects.get(slug="research"), LONG_NAME, state="pending", gpus=8)
    return django_user_model.objects.create_superuser("e2e-header-admin", "e2e-header@example.com", PASSWORD)


def header_rows(page) -> int:
    """How many rows the header's visible parts take (the brand, the menu, search, bell, user, language)."""
    return page.evaluate(
        """() => {
            const parts = [...document.querySelectorAll("header.topbar > *")]
                .map((el) => el.getBoundingClientRect()).filter((box) => box.width > 0 && box.height > 0);
            const rows = [];
            for (const box of parts.sort((a, b) => a.top - b.top)) {
                const row = rows.find((r) => box.top < r.bottom && box.bottom > r.top);
                if (!row) { rows.push({ top: box.top, bottom: box.bottom }); continue; }
                row.top = Math.min(row.top, box.top);
                row.bottom = Math.max(row.bottom, box.bottom);
            }
            return rows.length;
        }"""
    )


def page_width(page) -> int:
    return page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)")


def inside(box, width: int) -> bool:
    return box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5


def placeholder_room(page) -> dict:
    """The header search box's placeholder: its text, how wide it is drawn in the box's font, and the room
    the box has for it (its width inside the padding)."""
    return page.evaluate(
        """() => {
            const box = document.querySelector("#header-search-q");
            const style = getComputedStyle(box);
            const context = document.createElement("canvas").getContext("2d");
            context.font = `${style.fontStyle} ${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
            return {
                text: box.placeholder,
                drawn: context.measureText(box.placeholder).width,
                room: box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight),
            };
        }"""
    )


def assert_the_placeholder_is_whole(page, language: str) -> None:
    placeholder = placeholder_room(page)
    assert placeholder["text"] and placeholder["drawn"] <= placeholder["room"], (language, placeholder)
    box = page.locator("#header-search-q")
    # What it searches is still said, to a screen reader (its label) and on hover (its title).
    expect(box).to_have_accessible_name(SEARCHES[language])
    expect(box).to_have_attribute("title", SEARCHES[language])


def walk_the_pages(page, live_server, language: str, width: int) -> None:
    """Each page of PAGES in `language`: the header one row (folded on a phone), none wider than `width`."""
    for path in PAGES:
        page.goto(f"{live_server.url}{path}")
        expect(page.locator("html")).to_have_attribute("lang", language)
        assert header_rows(page) == 1, f"the {language} header takes {header_rows(page)} rows on {path}"
        assert page.locator("header.topbar").bounding_box()["height"] <= 56, path
        assert page_width(page) <= width, f"{path} is {page_width(page)} px wide"


@pytest.mark.e2e
@pytest.mark.parametrize("language", ["en", "ja"])
def test_the_header_is_one_row_on_a_desktop(live_server, browser, demo, shots, language):
    context = browser.new_context(viewport=DESKTOP, locale=LANGUAGES[language])
    try:
        page = context.new_page()
        sign_in(page, live_server, demo.username, PASSWORD)
        walk_the_pages(page, live_server, language, DESKTOP["width"])
        assert_the_placeholder_is_whole(page, language)
        page.screenshot(path=str(shots / f"header-{language}-1400.png"))

        # More opens under its button, lists the folded links inside the screen, and closes on Escape.
        more = page.get_by_role("button", name=MORE[language])
        pushes = page.get_by_role("navigation").get_by_role("link", name=CONFIG_PUSHES[language])
        expect(pushes).to_be_hidden()
        more.click()
        expect(more).to_have_attribute("aria-expanded", "true")
        expect(pushes).to_be_visible()
        assert inside(page.locator("#nav-more-links").bounding_box(), DESKTOP["width"])
        page.screenshot(path=str(shots / f"header-{language}-1400-more.png"))
        page.keyboard.press("Escape")
        expect(pushes).to_be_hidden()
        expect(more).to_be_focused()
        more.click()
        with page.expect_navigation():
            pushes.click()
        expect(page).to_have_url(f"{live_server.url}/scheduling/pushes/")
        # The page it leads to is one of More's: the button shows where one is, and the header stays one row.
        assert page.locator(".nav-more [aria-current=page]").count() == 1
        assert header_rows(page) == 1

        # The jobs list's Department column is shown, so the phone's department line under a name is not.
        page.goto(f"{live_server.url}/scheduling/jobs/")
        expect(page.locator("table.jobs tbody tr").first).to_be_visible()
        assert page.locator("table.jobs .phone-only").count() > 0
        assert page.evaluate(
            """() => Array.from(document.querySelectorAll("table.jobs .phone-only")).every(
                (el) => getComputedStyle(el).display === "none")"""
        )
    finally:
        context.close()


@pytest.mark.e2e
@pytest.mark.parametrize("language", ["en", "ja"])
def test_the_phone_header_and_job_rows(live_server, browser, demo, shots, language):
    context = browser.new_context(viewport=PHONE, locale=LANGUAGES[language], is_mobile=True, has_touch=True)
    try:
        page = context.new_page()
        sign_in(page, live_server, demo.username, PASSWORD)
        walk_the_pages(page, live_server, language, PHONE["width"])
        assert_the_placeholder_is_whole(page, language)
        page.screenshot(path=str(shots / f"header-{language}-390.png"))

        # The open menu: a column of every link, More's among them (its button is not needed there).
        toggle = page.locator("[data-menu-toggle]")
        toggle.click()
        expect(toggle).to_have_attribute("aria-expanded", "true")
        nav = page.get_by_role("navigation")
        expect(nav.get_by_role("link", name=CONFIG_PUSHES[language])).to_be_visible()
        expect(page.get_by_role("button", name=MORE[language])).to_be_hidden()
        links = nav.get_by_role("link").all()
        assert len(links) >= 10
        for link in links:
            assert inside(link.bounding_box(), PHONE["width"]), link.inner_text()
        assert page_width(page) <= PHONE["width"]
        page.screenshot(path=str(shots / f"menu-{language}-390.png"), full_page=True)

        # The jobs list: each of the first rows shows its name wide enough to read (whole, wrapped when long:
        # tests/e2e/test_phone_job_list.py), its GPUs and its state, inside the screen.
        page.goto(f"{live_server.url}/scheduling/jobs/")
        rows = page.locator("table.jobs tbody tr")
        expect(rows.first).to_be_visible()
        # What scrolls sideways inside the table's box is cut at its edge: that edge is what a row shows.
        box = page.locator("#job-table .table-wrap").bounding_box()
        shown = box["x"] + box["width"]
        # Measured in one go: the list refreshes itself every few seconds (htmx), replacing its rows, so a
        # row located before a refresh is gone after it.
        measured = page.evaluate(
            """() => Array.from(document.querySelectorAll("table.jobs tbody tr")).slice(0, 6).map((row) => {
                const box = (el) => {
                    const r = el.getBoundingClientRect();
                    return {x: r.x, width: r.width, height: r.height};
                };
                const name = row.querySelector(".job-link");
                return {
                    text: name.textContent.trim(),
                    line: parseFloat(getComputedStyle(name).lineHeight),
                    name: box(name),
                    gpus: box(row.querySelectorAll("td.num")[1]),
                    state: box(row.querySelector(".badge")),
                };
            })"""
        )
        assert len(measured) == 6
        for index, row in enumerate(measured):
            line, box = row["line"], row["name"]
            assert box["width"] >= 100, f"row {index}: the name is {box['width']} px wide"
            assert box["height"] <= 4 * line + 1, f"row {index}: the name takes {box['height']} px"
            for cell in ("name", "gpus", "state"):
                assert inside(row[cell], shown), (index, row["text"], cell, shown)
            assert row["state"]["height"] <= line + 8  # the badge on one line
        # The Department column is left out on a phone: an admin, who sees every department's jobs, reads
        # each row's department under its name instead.
        departments = page.evaluate(
            """() => Array.from(document.querySelectorAll("table.jobs tbody tr")).slice(0, 6).map((row) => {
                const dept = row.querySelector(".job-name .dept");
                const column = row.querySelectorAll("td")[2];
                return {shown: dept ? dept.innerText.trim() : "",
                        visible: !!dept && dept.getBoundingClientRect().width > 0,
                        column: column.textContent.trim()};
            })"""
        )
        for row in departments:
            assert row["visible"] and row["shown"] == row["column"], row
        first = rows.first.locator(".job-link")
        expect(first).to_have_text(LONG_NAME)
        expect(first).to_have_attribute("title", LONG_NAME)
        assert first.evaluate("el => el.scrollWidth <= el.clientWidth")  # whole, never cut
        assert page_width(page) <= PHONE["width"]
        page.screenshot(path=str(shots / f"jobs-{language}-390.png"))
    finally:
        context.close()
