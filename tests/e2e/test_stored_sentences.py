"""Stored English sentences read back in Japanese in a real Chromium (core.sentences_i18n): the wizard's
fabric-manager steps and a tray drained for a plan, at 1400 and 390 px. The names in them stay as written,
marked as data; the steps wrap inside their list on a phone. Screenshots in the test's tmp_path (printed) or
$RACKPLANE_SCREENSHOTS."""

import pytest
from playwright.sync_api import expect

from integrations.plans import service as plans
from inventory.demo import seed_datacenter
from inventory.models import ComputeTray, Rack
from inventory.planning import preset_layout
from tests.e2e.browser import DESKTOP, PHONE, sign_in
from tests.factories import make_department, run_job

PASSWORD = "e2e-stored-password-1"


@pytest.fixture
def admin(transactional_db, django_user_model):
    seed_datacenter(racks=2)
    return django_user_model.objects.create_superuser("e2e-stored", "e2e-stored@example.com", PASSWORD)


@pytest.mark.e2e
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1400", "390"])
def test_fabric_steps_and_a_plans_drain_reason_read_in_japanese(
    live_server, browser, admin, local_target, shots, viewport
):
    run_job(make_department("Ops"), trays=["gb-r02-t02"], name="ops-busy")
    plan = plans.create_and_apply(
        Rack.objects.get(name="gb-r02"), preset_layout("1x18"), drain=True, user=admin
    )
    context = browser.new_context(viewport=viewport, locale="ja-JP")
    try:
        page = context.new_page()
        sign_in(page, live_server, admin.username, PASSWORD)
        page.goto(f"{live_server.url}/inventory/racks/gb-r01/plan/preview/?preset=2x9")
        steps = page.locator("ol.fabric-ops li")
        expect(steps.nth(1)).to_have_text("パーティション p1 を作成: GPU 36 基")
        expect(steps.nth(1).locator('span[translate="no"]')).to_have_text("p1")
        box = page.locator("ol.fabric-ops").bounding_box()
        assert box is not None and box["x"] + box["width"] <= viewport["width"]  # no overflow on a phone
        page.locator("ol.fabric-ops").scroll_into_view_if_needed()
        page.screenshot(path=str(shots / f"fabric-steps-{viewport['width']}.png"), full_page=True)
        page.locator("section.fabric-steps").screenshot(
            path=str(shots / f"fabric-steps-{viewport['width']}-list.png")
        )

        tray = ComputeTray.objects.get(hostname="gb-r02-t02")
        page.goto(f"{live_server.url}/inventory/trays/{tray.pk}/")
        note = page.locator(".tray-detail .note").first
        expect(note).to_contain_text(
            f"Rackplane 計画 #{plan.pk}: gb-r02 のパーティション再構成の前にドレイン中"
        )
        page.screenshot(path=str(shots / f"drain-reason-{viewport['width']}.png"), full_page=True)
        note.screenshot(path=str(shots / f"drain-reason-{viewport['width']}-note.png"))
    finally:
        context.close()
