"""Times in the viewer's zone, named, in a real Chromium in Tokyo (issue 31, "everyday polish"): a partition
plan's push log and a job's backend message read JST like the rest of their pages, and the lists' time toggle
says what it shows: the viewer's zone by name, "how long ago", or UTC on a page the server printed in UTC, in
English and Japanese. And Django's admin in Japanese: its apps', models' and columns' names.

Screenshots at desktop (1400 px) and phone (390 px) width through `shots`."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from playwright.sync_api import expect

from core.moments import utc_words
from core.sentences import say
from integrations.models import ConfigPush
from integrations.plans import service as plans
from integrations.pushes import log_lines
from integrations.words import EMBEDDED_RENDERED_UNTIL
from inventory.demo import seed_datacenter
from inventory.models import Rack
from inventory.planning import preset_layout
from tests.e2e.browser import sign_in
from tests.e2e.test_wizard_findings import DESKTOP, both_widths
from tests.factories import make_department, make_job
from tests.portal.test_viewer_timezone import audit_event_at

PASSWORD = "e2e-admin-password-1"
AT = datetime(2026, 11, 30, 1, 2, 3, tzinfo=UTC)  # 10:02:03 in Tokyo
ABSOLUTE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")


@pytest.fixture
def admin(transactional_db, django_user_model, local_target):
    seed_datacenter(racks=1)
    user = django_user_model.objects.create_superuser("e2e-admin", "e2e-admin@example.com", PASSWORD)
    audit_event_at(user, AT)
    return user


def tokyo(browser, locale: str = "en-US"):
    return browser.new_context(viewport=DESKTOP, timezone_id="Asia/Tokyo", locale=locale)


@pytest.mark.e2e
def test_a_plans_push_log_reads_in_tokyo_time(live_server, browser, admin, shots):
    plan = plans.apply_plan(
        plans.create_plan(Rack.objects.get(name="gb-r01"), preset_layout("2x9"), drain=False, user=admin)
    )
    push = ConfigPush.objects.filter(plan_id=plan.pk).order_by("pk").first()
    ConfigPush.objects.filter(pk=push.pk).update(log=log_lines(["pushing to the target", "done"], AT))
    context = tokyo(browser)
    page = context.new_page()
    try:
        sign_in(page, live_server, admin.username, PASSWORD)
        page.goto(f"{live_server.url}/inventory/plans/{plan.pk}/")
        tail = page.locator(f'li.push[data-target="{push.target}"] pre.log-tail').first
        expect(tail).to_contain_text("2026-11-30 10:02:03 JST pushing to the target")
        expect(tail).not_to_contain_text("01:02:03")
        expect(tail.locator("time").first).to_have_attribute("datetime", "2026-11-30T01:02:03+00:00")
        both_widths(page, shots, "plan-push-log-tokyo")
        assert page.evaluate("document.documentElement.scrollWidth") <= 1400
        page.goto(f"{live_server.url}/scheduling/pushes/{push.pk}/")
        expect(page.locator("details.raw pre")).to_contain_text("2026-11-30 10:02:03 JST done")
    finally:
        context.close()


@pytest.mark.e2e
def test_the_time_toggle_says_what_it_shows(live_server, browser, admin, shots):
    context = tokyo(browser)
    page = context.new_page()
    try:
        sign_in(page, live_server, admin.username, PASSWORD)  # sets the zone's cookie: Asia/Tokyo
        page.goto(f"{live_server.url}/audit/")
        toggle = page.locator("[data-time-toggle]")
        first = page.locator("table.audit td time").first
        expect(toggle).to_have_text("Times: your zone (Asia/Tokyo)")
        expect(first).to_have_text("2026-11-30 10:02:03 JST")
        page.screenshot(path=str(shots / "time-toggle-your-zone-1400.png"), full_page=True)
        toggle.click()
        expect(toggle).to_have_text("Times: how long ago")
        expect(first).to_have_text(re.compile(r"ago$"))
        toggle.click()
        expect(toggle).to_have_text("Times: your zone (Asia/Tokyo)")
        expect(first).to_have_text(ABSOLUTE)
        expect(first).to_have_attribute("title", re.compile(r"ago$"))  # the other reading, on hover

        # A page the server printed in UTC (the cookie not yet set): the toggle says UTC, not "as sent".
        page.evaluate("window.localStorage.clear()")
        context.add_cookies([{"name": "rackplane_tz", "value": "UTC", "url": live_server.url}])
        page.goto(f"{live_server.url}/audit/")
        expect(first).to_have_text("2026-11-30 01:02:03 UTC")
        expect(toggle).to_have_text("Times: UTC")
        expect(toggle).to_have_attribute("title", "Show the times in your time zone, Asia/Tokyo")
        page.set_viewport_size({"width": 390, "height": 844})
        page.screenshot(path=str(shots / "time-toggle-utc-390.png"), full_page=True)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        toggle.click()
        expect(toggle).to_have_text("Times: your zone (Asia/Tokyo)")
        expect(first).to_have_text("2026-11-30 10:02:03")
    finally:
        context.close()


@pytest.mark.e2e
def test_the_time_toggle_in_japanese(live_server, browser, admin, shots):
    context = tokyo(browser, "ja-JP")
    page = context.new_page()
    try:
        sign_in(page, live_server, admin.username, PASSWORD)
        page.goto(f"{live_server.url}/audit/")
        toggle = page.locator("[data-time-toggle]")
        expect(toggle).to_have_text("時刻: あなたのタイムゾーン（Asia/Tokyo）")  # noqa: RUF001
        expect(toggle).to_have_attribute("title", "各時刻を現在からの経過時間で表示します")
        toggle.click()
        expect(toggle).to_have_text("時刻: 現在からの経過時間")
        expect(toggle).to_have_attribute("title", "時刻をあなたのタイムゾーン（Asia/Tokyo）で表示します")  # noqa: RUF001
        both_widths(page, shots, "time-toggle-japanese")
    finally:
        context.close()


@pytest.mark.e2e
@pytest.mark.parametrize("locale", ["en-US", "ja-JP"])
def test_a_jobs_backend_message_reads_in_tokyo_time(live_server, browser, admin, shots, locale):
    message = say(
        EMBEDDED_RENDERED_UNTIL, rendered_file="t.sh", backend_kind="slurm", ends_at=utc_words(AT, False)
    )
    job = make_job(make_department("Ops"), name="train-ops", backend_message=message)
    context = tokyo(browser, locale)
    page = context.new_page()
    try:
        sign_in(page, live_server, admin.username, PASSWORD)
        page.goto(f"{live_server.url}/scheduling/jobs/{job.pk}/")
        said = page.locator("[data-backend-message]")
        expect(said.locator("time")).to_have_text("2026-11-30 10:02 JST")
        expect(said).not_to_contain_text("01:02")
        both_widths(page, shots, f"job-backend-message-tokyo-{locale}")
        page.set_viewport_size({"width": 390, "height": 844})
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
    finally:
        context.close()


@pytest.mark.e2e
def test_the_admin_reads_in_japanese(live_server, browser, admin, shots):
    make_department("Ops")
    context = tokyo(browser, "ja-JP")
    page = context.new_page()
    try:
        sign_in(page, live_server, admin.username, PASSWORD)
        page.goto(f"{live_server.url}/admin/")
        expect(page.locator("#site-name")).to_contain_text("Rackplane 管理")
        expect(page.locator("#content-main")).to_contain_text("ジョブ")
        expect(page.locator("#content-main")).not_to_contain_text("Jobs")
        both_widths(page, shots, "admin-index-japanese")
        page.goto(f"{live_server.url}/admin/tenancy/department/")
        expect(page.locator("#result_list thead")).to_contain_text("保証 GPU")
        both_widths(page, shots, "admin-departments-japanese")
    finally:
        context.close()
