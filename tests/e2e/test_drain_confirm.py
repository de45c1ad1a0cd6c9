"""The drain of a tray holding running work, in a real browser (issue 31): the tray page's Drain leads to a
confirmation naming the job and what happens to it, nothing changed until it is confirmed; on a phone
(390 px) nothing is wider than the screen."""

import pytest
from playwright.sync_api import expect

from inventory.choices import TrayState
from inventory.demo import seed_datacenter
from inventory.models import ComputeTray, HealthAction
from scheduling.choices import FaultAction, JobState, PriorityClass
from scheduling.models import FaultPolicy
from tests.e2e.browser import DESKTOP, PHONE, sign_in
from tests.factories import make_department, make_job, make_user

PASSWORD = "e2e-admin-password-1"


@pytest.fixture
def admin(transactional_db, django_user_model):
    seed_datacenter(racks=2)
    FaultPolicy.objects.update_or_create(
        priority_class=PriorityClass.TRAIN, defaults={"action": FaultAction.CHECKPOINT, "grace_s": 300}
    )
    research = make_department("Research", guaranteed_gpus=16)
    bob = make_user("bob")
    make_job(
        research,
        "a-very-long-pretraining-run-name-without-any-spaces-at-all-to-wrap-on-a-phone",
        trays=["gb-r02-t03", "gb-r02-t04"],
        submitted_by=bob,
        priority_class=PriorityClass.TRAIN,
        backend_id="4242",
    )
    return django_user_model.objects.create_user("e2e-admin", "e2e@example.com", PASSWORD, is_staff=True)


@pytest.mark.e2e
@pytest.mark.parametrize("size", [PHONE, DESKTOP], ids=["390", "1400"])
def test_a_busy_trays_drain_is_confirmed_first(live_server, page, admin, shots, size):
    page.set_viewport_size(size)
    sign_in(page, live_server, admin.username, PASSWORD)
    tray = ComputeTray.objects.get(hostname="gb-r02-t03")
    page.goto(f"{live_server.url}/inventory/trays/{tray.pk}/")
    page.fill("#id_drain-reason", "fan noise on slot 3")
    with page.expect_navigation():
        page.get_by_role("button", name="Drain", exact=True).click()

    expect(page.locator("h1")).to_have_text("Confirm the drain of gb-r02-t03")
    job = page.locator("li.confirm-job")
    expect(job).to_have_count(1)
    expect(job).to_contain_text("bob · department Research · 8 GPUs")
    expect(job).to_contain_text(
        "Asked to checkpoint (SIGUSR1), then requeued after 5 minutes unless it ends first."
    )
    assert page.evaluate("() => document.documentElement.scrollWidth") <= size["width"], (
        "wider than the screen"
    )
    page.screenshot(path=str(shots / f"drain-confirm-{size['width']}.png"), full_page=True)
    tray.refresh_from_db()
    assert tray.state == TrayState.UP and not HealthAction.objects.filter(tray=tray).exists()

    with page.expect_navigation():
        page.locator("form.confirm-form").get_by_role("button", name="Drain").click()
    expect(page.locator(".message.success")).to_contain_text("gb-r02-t03 drained")
    tray.refresh_from_db()
    assert tray.state == TrayState.DRAIN
    assert admin.__class__.objects.get(username="bob").jobs.get().state == JobState.RUNNING  # asked first
