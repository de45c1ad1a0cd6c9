"""Issue 30's what-if of a MIG layout, in the browser on `make run`'s own stack (the shared embedded stack:
its Celery worker runs the replays): an admin chooses a layout for an idle tray on its page, asks "What would
this do?", sees the run's progress on the what-if page, then the figures of the cluster now and of the tray
with the layout side by side. Nothing is applied: the tray keeps whole GPUs, so the demo's capacity is as it
was for the next test on the same stack."""

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.browser import DESKTOP, PHONE
from tests.e2e.test_mig_demo import shoot
from tests.e2e.test_truth import admin_login, sign_in
from tests.embedded_stack import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow(reason="the embedded make-run stack and a browser")]

LAYOUT = "all-1g.23gb"


@pytest.fixture
def stack(embedded_stack):
    return embedded_stack


def a_tray(stack) -> tuple[int, str, str]:
    """A tray in service of the demo with whole GPUs (none in MIG mode, no layout), outside gb-r08: a what-if
    needs no idle tray (it applies nothing), and on the shared stack the other tests' jobs may hold every
    idle one. (pk, hostname, rack)."""
    rows = stack.query(
        "SELECT t.id, t.hostname, r.name FROM inventory_computetray t "
        "JOIN inventory_rack r ON r.id = t.rack_id "
        "WHERE t.state = 'up' AND r.name != 'gb-r08' AND t.mig_layout = '' "
        "AND NOT EXISTS (SELECT 1 FROM inventory_gpu g WHERE g.tray_id = t.id AND g.mig_mode = 'enabled') "
        "ORDER BY r.name DESC, t.slot DESC LIMIT 1"
    )
    assert rows, "no tray with whole GPUs in service outside gb-r08"
    return rows[0]


def test_an_admin_asks_what_a_mig_layout_would_do_and_sees_progress_then_the_figures(stack, browser, shots):
    tray_pk, host, _rack = a_tray(stack)
    admin = browser.new_context(viewport=DESKTOP)
    page = admin.new_page()
    sign_in(page, stack, *admin_login(stack))

    # 1. The tray page's MIG layout form: the what-if beside "Apply layout".
    page.goto(f"http://{stack.address}/inventory/trays/{tray_pk}/")
    form = page.locator("form.mig-layout-form")
    expect(form.get_by_role("button", name="Apply layout")).to_be_visible()
    expect(form.get_by_role("button", name="What would this do?")).to_be_visible()
    page.select_option("select[name='mig-layout']", LAYOUT)
    form.scroll_into_view_if_needed()
    shoot(page, shots, "mig-whatif-1-tray-form")

    # 2. Asked: the what-if's page shows the run moving (queued, reading, replaying) and polls it.
    with page.expect_navigation():
        form.get_by_role("button", name="What would this do?").click()
    expect(page).to_have_url(re.compile(rf"http://{re.escape(stack.address)}/inventory/plans/whatif/\d+/$"))
    expect(page.locator("h1")).to_contain_text(f"a MIG layout for {host}")
    run = page.locator("#whatif-run")
    assert run.get_attribute("data-done") == "false", "the first view already had the figures"
    expect(run.locator(".spinner-text")).to_be_visible()
    shoot(page, shots, "mig-whatif-2-progress")

    # 3. Done: the figures side by side, the cluster now first.
    expect(run).to_have_attribute("data-state", "done", timeout=180_000)
    table = page.locator("table.whatif-table")
    headers = table.locator("thead th")
    expect(headers.nth(1)).to_contain_text("The cluster now")
    expect(headers.nth(2)).to_contain_text(f"{host} with {LAYOUT}")
    for figure in (
        "Average wait, jobs of 1 GPU or smaller",
        "Slice utilisation",
        "Stranded slices (average)",
        "Average wait, multi-tray jobs",
        "Multi-tray jobs in one partition",
    ):
        expect(table).to_contain_text(figure)
    # The candidate has MIG GPUs: its slice utilisation is a share ("n/a" only where no tray has a layout).
    utilisation = table.locator('tr[data-figure="slice_utilization"] td')
    expect(utilisation.nth(1)).to_contain_text("%")
    expect(page.locator(".whatif-chart .main-svg").first).to_be_attached(timeout=30_000)
    expect(page.get_by_role("link", name=f"Back to {host}'s MIG layout")).to_be_visible()
    page.screenshot(path=str(shots / "mig-whatif-3-figures-1400.png"), full_page=True)
    # On a phone the table scrolls in its box and the chart redraws at the phone's width (plotly resizes
    # after the window does): nothing wider than the screen once it has.
    page.set_viewport_size(PHONE)
    wait_for(
        "the page to fit the phone",
        lambda: page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"] + 1,
        timeout=15,
        interval=0.5,
    )
    assert_readable_on_a_phone(page)
    page.screenshot(path=str(shots / "mig-whatif-3-figures-390.png"), full_page=True)
    # In Japanese too (longer names, text that breaks anywhere): the same page, read on a phone.
    japanese = browser.new_context(viewport=PHONE, locale="ja-JP")
    ja_page = japanese.new_page()
    sign_in(ja_page, stack, *admin_login(stack))
    ja_page.goto(page.url)
    expect(ja_page.locator("html")).to_have_attribute("lang", "ja")
    assert_readable_on_a_phone(ja_page)
    ja_page.screenshot(path=str(shots / "mig-whatif-3-figures-390-ja.png"), full_page=True)
    japanese.close()

    [(runs,)] = stack.query("SELECT COUNT(*) FROM scheduling_whatifrun WHERE tray = ?", host)
    assert runs == 1
    # Nothing was applied.
    [(layout,)] = stack.query("SELECT mig_layout FROM inventory_computetray WHERE id = ?", tray_pk)
    assert layout == ""
    admin.close()


def _boxes(page, selector: str) -> list[dict]:
    return [box for box in (one.bounding_box() for one in page.locator(selector).all()) if box]


def _overlap(a: dict, b: dict) -> bool:
    return (
        a["x"] < b["x"] + b["width"] - 1
        and b["x"] < a["x"] + a["width"] - 1
        and a["y"] < b["y"] + b["height"] - 1
        and b["y"] < a["y"] + a["height"] - 1
    )


def assert_readable_on_a_phone(page, table_fits: bool = True) -> None:
    """At 390 px: each chart panel its own, stacked, its title clear of the others' and inside the screen;
    the figures table whole in its box (the candidate's column on screen) with a label column wide enough
    to read (the walkthrough's Japanese broke after every character). `table_fits`: two layouts fit the
    screen; more scroll in the table's box."""
    charts = page.locator(".whatif-chart")
    expect(charts).to_have_count(3)
    for index in range(3):
        expect(charts.nth(index).locator(".gtitle")).to_be_attached(timeout=30_000)
    wait_for(
        "the charts to redraw at the phone's width",
        lambda: all(box["width"] <= PHONE["width"] for box in _boxes(page, ".whatif-chart .main-svg")),
        timeout=15,
        interval=0.5,
    )
    for selector in (".whatif-chart", ".whatif-chart .gtitle", ".whatif-chart .g-ytitle"):
        boxes = _boxes(page, selector)
        assert len(boxes) == 3, (selector, boxes)
        for first, second in ((0, 1), (0, 2), (1, 2)):
            assert not _overlap(boxes[first], boxes[second]), (selector, boxes)
    for title in _boxes(page, ".whatif-chart .gtitle"):
        assert title["x"] >= 0 and title["x"] + title["width"] <= PHONE["width"], title
    # Stacked: one above the other, not side by side.
    charts_boxes = _boxes(page, ".whatif-chart")
    assert charts_boxes[0]["y"] + charts_boxes[0]["height"] <= charts_boxes[1]["y"] + 1, charts_boxes
    # No tick label drawn over another in a panel (laid flat, wrapped, given room).
    for index in range(3):
        ticks = _boxes(page, f".whatif-chart >> nth={index} >> .xtick text")
        for first in range(len(ticks)):
            for second in range(first + 1, len(ticks)):
                assert not _overlap(ticks[first], ticks[second]), (index, ticks)
    label = page.locator('.whatif-table tbody th[scope="row"]').first.bounding_box()
    assert label and label["width"] >= 120, f"the figures' label column is {label} wide"
    if table_fits:
        box = page.locator(".whatif-run .scroll-box")
        fits = box.evaluate("el => el.scrollWidth <= el.clientWidth + 1")
        assert fits, "the figures table is wider than the phone: its candidate column is off the screen"
        last = page.locator(".whatif-table thead th").last.bounding_box()
        assert last and last["x"] + last["width"] <= PHONE["width"], last
