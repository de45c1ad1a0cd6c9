"""No serious or critical accessibility violations on the portal's main pages, as axe-core (Deque's rules
engine, the one browsers' audit tools run) finds them in Chromium, at desktop and phone width, light theme.

axe-core comes from the npm registry at a pinned version, fetched once with the machine's npm into the user's
cache directory (tests/e2e/axe.py) and injected by the test itself: the portal never serves it (its
Content-Security-Policy allows no inline script, so the test's browser context bypasses it for the
injection only)."""

import pytest

from tests.e2e.axe import axe_source, serious_violations
from tests.e2e.test_phone_dark import DESKTOP, PAGES, PHONE, sign_in
from tests.e2e.test_phone_dark import fleet as fleet  # the fixture

pytestmark = pytest.mark.slow(reason="every main page through axe-core in Chromium, twice")


@pytest.mark.parametrize("size", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_main_pages_have_no_serious_or_critical_axe_violations(live_server, browser, fleet, size):
    source = axe_source()
    context = browser.new_context(viewport=size, bypass_csp=True)
    page = context.new_page()
    found = {}
    try:
        sign_in(page, live_server)
        for name, path in PAGES.items():
            page.goto(f"{live_server.url}{path}")
            page.add_script_tag(content=source)
            violations = serious_violations(page)
            if violations:
                found[name] = violations
    finally:
        context.close()
    assert not found, "\n".join(f"{name}: {v}" for name, vs in found.items() for v in vs)
