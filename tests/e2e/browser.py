"""What several browser tests do the same way."""

import contextlib

from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect

# The widths the browser tests look at a page in: a phone's (the menu folds) and a desktop's.
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1400, "height": 1000}


def sign_in(page, live_server, username: str, password: str) -> None:
    """Sign in through the portal's own login form and wait for the page it leads to."""
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    with page.expect_navigation():
        page.locator("#id_password").press("Enter")


def arrived(page, url) -> None:
    """After a click that navigates (a link, a plain form's button): until the page at `url` (a string or a
    compiled pattern, as `expect(page).to_have_url` takes) has loaded. The address changes as soon as the new
    page is committed, before its deferred scripts (htmx, portal.js, search.js) have run: a click then on a
    form htmx drives is a plain form post, and typing in the search box opens no typeahead. `page.goto` and
    `page.expect_navigation()` wait for the load themselves."""
    expect(page).to_have_url(url)
    page.wait_for_load_state()


def page_width_after_resize(page, width: int) -> int:
    """The page's width once it has fitted `width` (or the width it still has). A chart drawing when the
    window shrank can miss plotly's resize handler (seen in CI under load: a tray page's chart kept the
    desktop's 797 px): one more resize event, as a phone's next rotation or scroll gives, before judging."""
    fits = "width => document.documentElement.scrollWidth <= width"
    try:
        page.wait_for_function(fits, arg=width + 1, timeout=10_000)
    except PlaywrightTimeoutError:
        page.evaluate("window.dispatchEvent(new Event('resize'))")
        with contextlib.suppress(PlaywrightTimeoutError):
            page.wait_for_function(fits, arg=width + 1, timeout=10_000)
    return page.evaluate("document.documentElement.scrollWidth")
