"""An admin previews carving gb-r01 into 2x9 on the demo (`manage.py seed_demo`: its running jobs and a
week of finished ones) and runs the what-if in a real Chromium: the last 7 days of the portal's own jobs
replayed under the cluster now, the plan and 3x6 (Celery eager: the tasks run in the live server), then
the comparison table and the plotly chart drawn from the portal's own plotly.js.

Screenshots are saved in the test's tmp_path (printed), or in $RACKPLANE_SCREENSHOTS."""

import re
from io import StringIO

import pytest
from django.core.management import call_command
from playwright.sync_api import expect

from scheduling.choices import JobState, WhatIfState
from scheduling.models import Job, WhatIfRun
from tests.e2e.browser import PHONE, sign_in
from tests.e2e.test_mig_whatif import assert_readable_on_a_phone

PASSWORD = "e2e-admin-password-1"


@pytest.fixture
def demo(transactional_db, settings, tmp_path):
    settings.VAR_DIR = tmp_path  # where seed_demo writes the demo logins
    out = StringIO()
    call_command("seed_demo", "--racks", "3", stdout=out)
    assert "finished jobs of the last 7 days" in out.getvalue()
    return out.getvalue()


@pytest.fixture
def admin(transactional_db, django_user_model):
    return django_user_model.objects.create_superuser("e2e-admin", "e2e-admin@example.com", PASSWORD)


@pytest.mark.e2e
def test_an_admin_replays_the_demo_history_under_a_plan_and_sees_the_comparison(
    live_server, page, demo, admin, shots
):
    finished = Job.objects.filter(state__in=(JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)).count()
    assert finished > 50  # the demo's week of history
    jobs_before = list(Job.objects.order_by("pk").values_list("pk", "state", "updated_at"))

    sign_in(page, live_server, admin.username, PASSWORD)

    page.goto(f"{live_server.url}/inventory/racks/gb-r01/plan/preview/?preset=2x9&drain_first=on")
    panel = page.locator("#whatif")
    expect(panel).to_contain_text("What-if: this plan on the cluster's own history")
    expect(page.locator("#whatif-days")).to_have_value("7")
    page.screenshot(path=str(shots / "whatif-1-preview.png"), full_page=True)

    # Too many days: the browser's own check is skipped here, so the portal's 400 says what to change, in
    # place (static/js/portal.js swaps it in), and nothing starts.
    page.locator("form.whatif-form").evaluate("form => { form.noValidate = true; }")
    page.fill("#whatif-days", "400")
    panel.get_by_role("button", name="Run the what-if").click()
    expect(page.locator("#whatif-result .whatif-errors")).to_contain_text("At most 30 days")
    assert not WhatIfRun.objects.exists()

    page.fill("#whatif-days", "7")
    page.locator("#whatif-also-3x6").check()

    panel.get_by_role("button", name="Run the what-if").click()
    run = page.locator("#whatif-run")
    expect(run).to_have_attribute("data-state", "done", timeout=60_000)
    expect(run).to_have_attribute("data-done", "true")
    table = run.locator("table.whatif-table")
    expect(table.locator("thead th")).to_have_count(4)  # the figure, then three layouts
    expect(table.locator("thead")).to_contain_text("The cluster now")
    expect(table.locator("thead")).to_contain_text("This plan")
    expect(table.locator("thead")).to_contain_text("gb-r01 as 3x6")
    for figure in ("Average wait", "p95 wait", "Average JCT", "Multi-tray jobs in one partition"):
        expect(table.locator("tbody")).to_contain_text(figure)
    expect(table.locator('tr[data-figure="avg_wait_s"] td').first).to_have_text(re.compile(r"^[\d,.]+ h$"))
    # plotly.js (served by the portal) drew the chart: its SVG is there, with one legend entry per layout.
    chart = run.locator("#whatif-chart")
    expect(chart).to_have_attribute("data-plotly-drawn", "")
    expect(chart.locator("svg.main-svg").first).to_be_visible()
    expect(chart.locator(".legend .traces")).to_have_count(3)
    run.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "whatif-2-comparison.png"), full_page=True)
    run.screenshot(path=str(shots / "whatif-3-panel.png"))

    saved = WhatIfRun.objects.get()
    assert saved.state == WhatIfState.DONE and saved.rack == "gb-r01" and saved.jobs >= finished - 10
    assert [(layout.label, layout.state) for layout in saved.layouts.all()] == [
        ("The cluster now", WhatIfState.DONE),
        ("This plan", WhatIfState.DONE),
        ("gb-r01 as 3x6", WhatIfState.DONE),
    ]
    # A what-if only replays: no job was touched.
    assert list(Job.objects.order_by("pk").values_list("pk", "state", "updated_at")) == jobs_before

    # Its own page shows the same comparison, drawn again.
    with page.expect_navigation():
        run.get_by_role("link", name="its own page").click()
    expect(page.locator("table.whatif-table")).to_contain_text("This plan")
    expect(page.locator("#whatif-chart svg.main-svg").first).to_be_visible()
    page.screenshot(path=str(shots / "whatif-4-page.png"), full_page=True)
    # On a phone: the three charts stacked, none drawn over another; three layouts' figures scroll in the
    # table's box, beside a label column wide enough to read.
    page.set_viewport_size(PHONE)
    assert_readable_on_a_phone(page, table_fits=False)
    page.screenshot(path=str(shots / "whatif-4-page-390.png"), full_page=True)
