"""The health centre in a real browser: a platform admin opens it from the menu (the events-over-time chart is
drawn by the portal's own plotly.js), filters the events by a rack, follows a tray's "Service / RMA" link and
marks it sent for RMA; the tray page then shows the mark and its timeline the step. At 1400 px and on a 390 px
phone, with screenshots."""

import re

import pytest
from playwright.sync_api import expect

from inventory.choices import ServiceStatus, TrayState
from inventory.demo import seed_datacenter, seed_health_history
from inventory.health.rules import seed_default_rules
from inventory.models import ComputeTray, ServiceRecord
from tests.e2e.browser import sign_in

PASSWORD = "e2e-health-admin-password-1"
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def admin(transactional_db, django_user_model):
    seed_datacenter(racks=2)
    seed_default_rules()  # a transactional test before this one may have flushed the seeded rules
    seed_health_history()
    return django_user_model.objects.create_user(
        "e2e-health-admin", "e2e@example.com", PASSWORD, is_staff=True
    )


def fits(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth") <= page.viewport_size["width"]


@pytest.mark.e2e
def test_filter_by_a_rack_and_mark_a_tray_for_rma(live_server, page, admin, shots):
    drained = ComputeTray.objects.get(state=TrayState.DRAIN)  # gb-r01-t07, its GPU 2 fell off the bus
    sign_in(page, live_server, admin.username, PASSWORD)
    with page.expect_navigation():
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Health").click()
    expect(page.get_by_role("heading", name="Health centre")).to_be_visible()
    expect(page.locator("#health-events-chart .main-svg").first).to_be_visible()  # plotly drew it
    rows = page.locator("table.health-events tbody tr")
    expect(rows.first).to_be_visible()
    assert {"gb-r01", "gb-r02"} <= {
        host.rsplit("-", 1)[0] for host in rows.locator("td:nth-child(2) a.mono").all_inner_texts()
    }
    page.screenshot(path=str(shots / "health-centre-1400.png"), full_page=True)

    page.fill("input[name=rack]", "gb-r01")
    with page.expect_navigation():
        page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"/inventory/health/\?rack=gb-r01"))
    hosts = rows.locator("td:nth-child(2) a.mono").all_inner_texts()
    assert hosts and all(host.startswith("gb-r01-") for host in hosts), hosts
    expect(rows.filter(has_text=drained.hostname).first).to_contain_text(
        "XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS)"
    )
    page.screenshot(path=str(shots / "health-centre-rack-1400.png"), full_page=True)

    with page.expect_navigation():
        page.get_by_role("link", name=f"Service or RMA of {drained.hostname}").first.click()
    expect(page.get_by_role("heading", name=f"Service of {drained.hostname}")).to_be_visible()
    expect(page.locator(".service-current")).to_contain_text("awaiting RMA")  # the demo's mark
    page.get_by_label("Sent for RMA").check()
    page.select_option("select[name=gpu]", "2")
    page.fill("input[name=note]", "RMA 4711: GPU 2 to the vendor")
    with page.expect_navigation():
        page.get_by_role("button", name="Record").click()
    expect(page.locator(".message.success")).to_contain_text(
        f"{drained.hostname}: sent for RMA by e2e-health-admin"
    )
    expect(page.locator(".service-current")).to_contain_text("RMA 4711: GPU 2 to the vendor")
    expect(page.locator("table.service-history tbody tr")).to_have_count(2)
    page.screenshot(path=str(shots / "health-service-rma-1400.png"), full_page=True)
    record = ServiceRecord.objects.latest("pk")
    assert (record.status, record.actor, record.gpu.index) == (ServiceStatus.RMA, admin, 2)

    # The tray page shows the mark and, in its timeline, the step.
    page.goto(f"{live_server.url}/inventory/trays/{drained.pk}/")
    expect(page.locator(".service-mark")).to_contain_text("Sent for RMA")
    expect(page.locator("section.health-timeline tr.timeline-service").first).to_contain_text("RMA 4711")
    page.screenshot(path=str(shots / "health-tray-page-1400.png"), full_page=True)

    # On a phone: the filtered list, the ranking and the service page fit the screen.
    page.set_viewport_size(PHONE)
    for name, path in [
        ("health-centre-rack-390", "/inventory/health/?rack=gb-r01"),
        ("health-offenders-390", "/inventory/health/offenders/"),
        ("health-service-390", f"/inventory/health/service/trays/{drained.pk}/"),
    ]:
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
        assert fits(page), f"{path} is wider than a phone"
        page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(f"{live_server.url}/inventory/health/offenders/")
    expect(page.locator("table.tray-offenders tbody tr").first).to_contain_text(drained.hostname)
    page.screenshot(path=str(shots / "health-offenders-1400.png"), full_page=True)


@pytest.fixture
def demo_admin(transactional_db, django_user_model):
    """The demo's first three racks (gb-r03-t05's GPU 1 still registering with the fabric) and their
    health history, as `seed_demo` records it."""
    seed_datacenter(racks=3)
    seed_default_rules()
    seed_health_history()
    return django_user_model.objects.create_user(
        "e2e-health-admin", "e2e@example.com", PASSWORD, is_staff=True
    )


@pytest.mark.e2e
def test_every_event_says_what_was_decided_and_the_registering_gpu_has_its_timeline(
    live_server, page, demo_admin, shots
):
    """The demo's XID 94 and 63 rows say in words why nothing was decided (no bare dash); the GPU still
    registering with the fabric has its event on the list and on its own page's timeline; at 1400 px and on
    a 390 px phone."""
    sign_in(page, live_server, demo_admin.username, PASSWORD)
    page.goto(f"{live_server.url}/inventory/health/")
    rows = page.locator("table.health-events tbody tr")
    expect(rows.first).to_be_visible()
    decisions = rows.locator("td:nth-child(6)")
    texts = decisions.all_inner_texts()
    assert texts and all(text.strip() and text.strip() != "—" for text in texts), texts
    expect(rows.filter(has_text="CONTAINED_ERROR").first.locator("td:nth-child(6)")).to_contain_text(
        "no action: XID 94 is a contained memory error"
    )
    expect(
        rows.filter(has_text="INFOROM_DRAM_RETIREMENT_EVENT").first.locator("td:nth-child(6)")
    ).to_contain_text("no action: XID 63 is a row-remap record")
    registering = rows.filter(has_text="gb-r03-t05").filter(has_text="fabric registration in progress")
    expect(registering).to_have_count(1)
    expect(registering.locator("td:nth-child(6)")).to_contain_text("still registering with the NVLink fabric")
    page.screenshot(path=str(shots / "health-centre-demo-1400.png"), full_page=True)

    with page.expect_navigation():
        registering.get_by_role("link", name="GPU 1").click()
    page.wait_for_load_state()
    expect(page.locator("section.health-timeline tr.timeline-event").first).to_contain_text(
        "fabric registration in progress"
    )
    page.screenshot(path=str(shots / "health-registering-gpu-1400.png"), full_page=True)

    page.set_viewport_size(PHONE)
    page.goto(f"{live_server.url}/inventory/health/")
    page.wait_for_load_state("networkidle")
    assert fits(page), "the health centre is wider than a phone"
    expect(
        page.locator("table.health-events tbody tr").filter(has_text="CONTAINED_ERROR").first
    ).to_contain_text("no action: XID 94")
    page.screenshot(path=str(shots / "health-centre-demo-390.png"), full_page=True)
    # The table scrolls sideways on a phone: its Decisions column, read there.
    page.locator(".table-wrap").evaluate("wrap => { wrap.scrollLeft = wrap.scrollWidth; }")
    page.screenshot(path=str(shots / "health-centre-demo-decisions-390.png"), full_page=True)


@pytest.mark.e2e
def test_the_drained_tray_and_the_decisions_read_japanese_in_tokyo(live_server, browser, admin, shots):
    drained = ComputeTray.objects.get(state=TrayState.DRAIN)  # gb-r01-t07, drained by the rules for XID 79
    desktop = {"width": 1400, "height": 1000}
    context = browser.new_context(viewport=desktop, timezone_id="Asia/Tokyo", locale="ja-JP")
    page = context.new_page()
    try:
        sign_in(page, live_server, admin.username, PASSWORD)
        page.goto(f"{live_server.url}/inventory/trays/{drained.pk}/")
        box = page.locator(".tray-actions .return-form")
        expect(box.locator(".service-held")).to_contain_text("まだ復帰できません")
        expect(box).not_to_contain_text("別の所有者")
        expect(box).to_contain_text("JST")  # when its mark was set, in the viewer's zone
        expect(box).not_to_contain_text("UTC")
        drain = page.locator("tr.timeline-action.action-drain")
        expect(drain).to_contain_text("JST")
        expect(drain).not_to_contain_text("UTC")
        expect(drain).to_contain_text("（ルール XID 79 drain）")  # noqa: RUF001 (the Japanese text's)
        reason = page.locator(".tray-detail .detail-head ~ .note").first  # the state's reason, up top
        expect(reason).to_contain_text("JST")
        expect(reason).not_to_contain_text("UTC")
        page.screenshot(path=str(shots / "drained-tray-ja-1400.png"), full_page=True)

        page.goto(f"{live_server.url}/inventory/health/")
        decisions = page.locator("table.health-events td.decisions")
        expect(
            decisions.filter(has_text="ヘルスルールがトレイをサービスから外しました").first
        ).to_be_visible()
        expect(decisions.filter(has_text="ヘルスルールがオペレーターに警告しました").first).to_be_visible()
        page.screenshot(path=str(shots / "health-centre-decisions-ja-1400.png"), full_page=True)
    finally:
        context.close()
