"""A browser in Tokyo sees the portal's times in Tokyo time, with the zone named: static/portal/ux.js keeps
the `rackplane_tz` cookie equal to the browser's zone and the server prints times there
(portal.web.middleware.ViewerTimezoneMiddleware)."""

import pytest

from tests.e2e.browser import sign_in
from tests.portal.test_viewer_timezone import AT, audit_event_at

PASSWORD = "e2e-admin-password-1"


@pytest.fixture
def admin(transactional_db, django_user_model):
    user = django_user_model.objects.create_superuser("e2e-admin", "e2e-admin@example.com", PASSWORD)
    audit_event_at(user, AT)
    return user


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_times_follow_the_browsers_zone_from_the_next_page_on(live_server, browser, admin, shots):
    context = browser.new_context(viewport={"width": 1400, "height": 900}, timezone_id="Asia/Tokyo")
    page = context.new_page()
    try:
        sign_in(page, live_server, "e2e-admin", PASSWORD)  # the login page's script sets the cookie
        cookies = {c["name"]: c["value"] for c in context.cookies()}
        assert cookies.get("rackplane_tz") == "Asia/Tokyo"
        page.goto(f"{live_server.url}/audit/")
        row = page.locator("td time").first
        assert row.get_attribute("data-server-text") == "2026-11-30 10:02:03 JST"
        page.screenshot(path=str(shots / "audit-tokyo-1400.png"), full_page=True)
    finally:
        context.close()
