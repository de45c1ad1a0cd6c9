"""Dashboards that are "now", in a real browser: the department dashboard's quota chart ends at the current
time, its range picker (1 h, 24 h, 7 d, 30 d) redraws it in place and puts the range in the address, it
refreshes itself every minute while the tab is shown (the browser's clock is moved on, the real server
answers), and plotly's bundle is fetched once, under its content-hashed name, whatever happens on the page.
Screenshots at desktop and phone width."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from core.access import Role
from inventory.demo import seed_datacenter
from tenancy.models import QuotaSnapshot
from tenancy.quota_history import downsample_quota_snapshots
from tests.factories import make_department, make_member

PASSWORD = "e2e-dashboard-now-password-1"


@pytest.fixture
def history(transactional_db):
    seed_datacenter(racks=1)
    department = make_department("Weather", guaranteed_gpus=16)
    make_member("e2e-weather-lead", department, Role.LEAD, password=PASSWORD)
    now = timezone.now().replace(second=0, microsecond=0)
    QuotaSnapshot.objects.bulk_create(
        QuotaSnapshot(
            department=department,
            taken_at=now - timedelta(minutes=5 * step),
            guaranteed=16,
            in_use=4 + step % 9,
            in_quota=4 + step % 9,
            borrowed=0,
            fair_share=16,
            pending_demand=2,
            idle=1,
        )
        for step in range(7 * 24 * 12)  # a week, every five minutes
    )
    downsample_quota_snapshots()  # what the hourly task does: five-minute rows for a day, hourly before
    return department


@pytest.mark.e2e
def test_dashboard_range_picker_refresh_and_one_plotly(live_server, page, history, shots):
    plotly, charts = [], []
    page.on("request", lambda r: plotly.append(r.url) if "/plotly/" in r.url else None)
    page.on("request", lambda r: charts.append(r.url) if "/quota-chart/" in r.url else None)
    console = []
    page.on("console", lambda message: console.append(message.text))
    page.clock.install()  # the browser's timers, so "a minute later" takes no minute

    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "e2e-weather-lead")
    page.fill("#id_password", PASSWORD)
    with page.expect_navigation():
        page.locator("#id_password").press("Enter")
    page.goto(f"{live_server.url}/tenancy/departments/{history.slug}/")

    panel = page.locator("#quota-chart-panel")
    expect(panel).to_have_attribute("data-range", "24h")
    expect(panel.locator("#quota-chart .main-svg").first).to_be_visible()
    end_24h = panel.locator("[data-chart-end]").get_attribute("datetime")
    assert abs((timezone.now() - _parse(end_24h)).total_seconds()) < 60  # it ends now

    panel.get_by_role("link", name="7 days").click()
    expect(panel).to_have_attribute("data-range", "7d")
    expect(page).to_have_url(re.compile(rf"/tenancy/departments/{history.slug}/\?range=7d$"))
    expect(panel.locator("h2")).to_contain_text("last 7 days")
    expect(panel.locator("#quota-chart .main-svg").first).to_be_visible()  # redrawn
    x_range = page.evaluate("document.getElementById('quota-chart').layout.xaxis.range")
    assert (_parse(x_range[1]) - _parse(x_range[0])) > timedelta(days=6)
    page.screenshot(path=str(shots / "dashboard-7d-desktop.png"), full_page=True)

    # A minute later, with the tab shown: the chart asks again by itself, and keeps its range.
    asked = len(charts)
    end_7d = panel.locator("[data-chart-end]").get_attribute("datetime")
    page.clock.fast_forward(61_000)
    expect(panel.locator("[data-chart-end]")).not_to_have_attribute("datetime", end_7d)
    assert len(charts) > asked and all("range=7d" in url for url in charts[asked:])
    expect(panel).to_have_attribute("data-range", "7d")
    expect(panel.locator("#quota-chart .main-svg").first).to_be_visible()

    # Hidden tab: no refresh.
    page.evaluate(
        "Object.defineProperty(document, 'visibilityState', {value: 'hidden', configurable: true});"
        "document.dispatchEvent(new Event('visibilitychange'))"
    )
    hidden_from = len(charts)
    page.clock.fast_forward(130_000)
    page.wait_for_timeout(300)
    assert len(charts) == hidden_from

    # One plotly bundle, under its hashed name, for the load, the range change and the refresh.
    assert len(plotly) == 1 and re.search(r"/static/plotly/plotly\.min\.[0-9a-f]{12}\.js$", plotly[0]), plotly
    assert not [text for text in console if "Content Security Policy" in text or "Refused" in text], console

    # At phone width (a fresh load: the chart is drawn for the screen it is on).
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    expect(panel).to_have_attribute("data-range", "7d")  # the range stayed in the address
    expect(panel.locator("#quota-chart .main-svg").first).to_be_visible()
    box = panel.bounding_box()
    chart_box = panel.locator("#quota-chart .main-svg").first.bounding_box()
    assert box["x"] + box["width"] <= 390 and chart_box["x"] + chart_box["width"] <= 390
    page.screenshot(path=str(shots / "dashboard-7d-390.png"), full_page=True)


def _parse(text):
    from datetime import datetime

    value = datetime.fromisoformat(text.replace(" ", "T").replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=timezone.get_current_timezone())
