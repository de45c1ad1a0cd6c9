"""The language switch in a real browser (issue 31): on a desktop the header's select changes the page to
Japanese at once (static/portal/ux.js submits it), on a phone (390 px) it sits in the folded menu and does
the same once the menu is open; either way the choice (Django's language cookie) holds on the next page
and against a browser that asks for English. What needs no browser (the switch's POST, its refusals, the
browser's own language) is proven in tests/portal/test_i18n.py."""

import pytest
from playwright.sync_api import expect

from inventory.demo import seed_datacenter
from tests.e2e.browser import DESKTOP, PHONE, sign_in
from tests.factories import make_user

PASSWORD = "e2e-language-password-1"


@pytest.fixture
def admin(transactional_db):
    seed_datacenter(racks=1)
    return make_user("e2e-language-admin", staff=True, password=PASSWORD)


def _in_english(page) -> None:
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(page.locator("h1").first).to_have_text("Fleet overview")


def _switched_to_japanese_and_kept(page, live_server, shots, name: str) -> None:
    """Choose 日本語 in the header's switch: the same page comes back in Japanese, and so does the next."""
    switch = page.locator("#language-switch")
    with page.expect_navigation():
        switch.select_option("ja")
    expect(page.locator("html")).to_have_attribute("lang", "ja")
    expect(page.locator("h1").first).to_have_text("フリートの概要")
    expect(page.locator("#language-switch")).to_have_value("ja")
    page.screenshot(path=str(shots / f"language-{name}-home.png"), full_page=True)

    # The next page, reached through the menu (opened first on a phone; on a desktop the audit log is under
    # an admin's More) as a person would: still Japanese.
    toggle = page.locator("[data-menu-toggle]")
    if toggle.is_visible():
        toggle.click()
    more = page.get_by_role("button", name="その他")
    if more.is_visible():
        more.click()
    with page.expect_navigation():
        page.locator("header nav a", has_text="監査ログ").click()
    expect(page).to_have_url(f"{live_server.url}/audit/")
    expect(page.locator("html")).to_have_attribute("lang", "ja")
    expect(page.locator("h1").first).to_have_text("監査ログ")
    expect(page.get_by_role("button", name="絞り込み")).to_be_visible()
    page.screenshot(path=str(shots / f"language-{name}-audit.png"), full_page=True)


@pytest.mark.e2e
def test_the_switch_makes_the_desktop_page_japanese_and_it_stays(live_server, browser, admin, shots):
    context = browser.new_context(viewport=DESKTOP, locale="en-US")
    try:
        page = context.new_page()
        sign_in(page, live_server, admin.username, PASSWORD)
        _in_english(page)
        expect(page.locator("#language-switch")).to_be_visible()
        _switched_to_japanese_and_kept(page, live_server, shots, "desktop")
        # Back to English the same way: the cookie changes again.
        with page.expect_navigation():
            page.locator("#language-switch").select_option("en")
        expect(page.locator("h1").first).to_have_text("Audit log")
        page.goto(f"{live_server.url}/")
        _in_english(page)
    finally:
        context.close()


@pytest.mark.e2e
def test_the_switch_in_the_phone_menu_makes_the_page_japanese_and_it_stays(
    live_server, browser, admin, shots
):
    context = browser.new_context(viewport=PHONE, locale="en-US")
    try:
        page = context.new_page()
        sign_in(page, live_server, admin.username, PASSWORD)
        _in_english(page)
        toggle = page.locator("[data-menu-toggle]")
        expect(toggle).to_be_visible()
        expect(page.locator("#language-switch")).to_be_hidden()  # folded in the menu
        toggle.click()
        expect(toggle).to_have_attribute("aria-expanded", "true")
        expect(page.locator("#language-switch")).to_be_visible()
        _switched_to_japanese_and_kept(page, live_server, shots, "phone")
        expect(page.locator("[data-menu-toggle]")).to_contain_text("メニュー")
        width = page.evaluate("document.scrollingElement.scrollWidth")
        assert width <= PHONE["width"], f"the Japanese audit log is {width} px wide on a phone"
    finally:
        context.close()
