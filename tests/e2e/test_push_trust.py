"""Pushes you can trust, in a real browser: a platform admin pushes after a new department appeared and reads
the push's diff against the previous push (changed files open, unchanged ones collapsed), tests the local
directory target's connection, and pushes the previous version again (rollback, confirmed, audited).
Screenshots at desktop and phone width (390 px) through `shots`."""

import pytest
from playwright.sync_api import expect

from core.models import AuditEvent
from integrations import pushes
from integrations.contents import payload_of
from integrations.models import ConfigPush, PushStatus
from inventory.demo import seed_datacenter
from tenancy.models import Department
from tenancy.services import save_department
from tests import factories
from tests.e2e.browser import sign_in

PASSWORD = "e2e-admin-password-1"


@pytest.fixture
def admin(transactional_db, django_user_model, render_dir):
    seed_datacenter(racks=2)
    return django_user_model.objects.create_user("e2e-admin", "e2e@example.com", PASSWORD, is_staff=True)


@pytest.mark.e2e
def test_push_diff_test_connection_and_rollback(live_server, page, admin, shots, render_dir):
    target = factories.local_target()
    [first] = pushes.queue_pushes(reason="first", targets=[target])
    first.refresh_from_db()
    assert first.status == PushStatus.SUCCEEDED
    save_department(Department(name="Vision", slug="vision", guaranteed_gpus=4))
    sign_in(page, live_server, admin.username, PASSWORD)

    # Test connection on the targets page: the answer in words, in place.
    page.goto(f"{live_server.url}/scheduling/targets/")
    row = page.locator("tr[data-target='local']")
    row.get_by_role("button", name="Test connection").click()
    expect(row.locator(".target-check")).to_contain_text("Connection works.")
    expect(row.locator(".target-check")).to_contain_text("local answers:")
    page.screenshot(path=str(shots / "push-trust-test-connection.png"), full_page=True)

    # Adding the department pushed already (integrations.signals): its page, from the target's row, shows
    # what changed against the first push.
    second = ConfigPush.objects.order_by("-pk").first()
    assert second.pk > first.pk and second.status == PushStatus.SUCCEEDED
    with page.expect_navigation():
        row.get_by_role("link", name=f"#{second.pk}").click()
    diff = page.locator("section.push-diff")
    expect(diff.locator("h2")).to_contain_text(f"against push #{first.pk}")
    changed = diff.locator("details.diff-file-block[data-state='changed']").first
    expect(changed).to_have_attribute("open", "")
    expect(diff.locator("pre.diff .diff-add", has_text="vision").first).to_be_visible()
    unchanged = diff.locator("details.unchanged-items")
    expect(unchanged).not_to_have_attribute("open", "")
    page.screenshot(path=str(shots / "push-trust-diff.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(shots / "push-trust-diff-390.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 1000})

    # Roll back: the first push's page, "Push this version again", confirmed.
    page.goto(f"{live_server.url}/scheduling/pushes/{first.pk}/")
    page.locator("summary", has_text="Push this version again").click()
    confirm = page.get_by_role("button", name=f"Yes, push version #{first.pk} again")
    expect(confirm).to_be_visible()
    page.screenshot(path=str(shots / "push-trust-rollback-confirm.png"), full_page=True)
    with page.expect_navigation():
        confirm.click()
    again = ConfigPush.objects.order_by("-pk").first()
    assert again.pk > second.pk and again.payload_hash == first.payload_hash
    expect(page.locator(".message.success")).to_contain_text(
        f"The version of push #{first.pk} is being pushed again as push #{again.pk}."
    )
    expect(page.locator("#push-status h2 .badge")).to_contain_text("Succeeded")
    expect(page.locator("section.push-diff h2")).to_contain_text(f"against push #{second.pk}")
    expect(page.locator("section.push-diff pre.diff .diff-del", has_text="vision").first).to_be_visible()
    live = (render_dir / "current").resolve()
    for name, text in payload_of(first.payload)["files"].items():
        assert (live / name).read_text() == text
    assert AuditEvent.objects.filter(object_type="integrations.configpush", object_id=str(again.pk)).exists()
    page.screenshot(path=str(shots / "push-trust-rolled-back.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(shots / "push-trust-rolled-back-390.png"), full_page=True)

    # The target now runs an older version than the current configuration: the targets page and the rollback's
    # own page say so, and "Push the current configuration" brings the current one back as a normal push.
    expect(page.locator("#push-status .rollback-badge")).to_have_text("older version")
    expect(page.locator("#push-status .rolled-back")).to_contain_text(
        f"this push rolled back to the version of push #{first.pk}; the current one is push #{second.pk}"
    )
    page.set_viewport_size({"width": 1400, "height": 1000})
    page.goto(f"{live_server.url}/scheduling/targets/")
    row = page.locator("tr[data-target='local']")
    expect(row.locator(".rollback-badge")).to_have_text("older version")
    expect(row.locator(".rolled-back")).to_contain_text(
        f"runs push #{again.pk}, a rollback to the version of push #{first.pk}, not the current "
        f"configuration (push #{second.pk})"
    )
    page.screenshot(path=str(shots / "push-trust-targets-older-version.png"), full_page=True)
    with page.expect_navigation():
        row.get_by_role("button", name="Push the current configuration").click()
    current = ConfigPush.objects.order_by("-pk").first()
    assert current.pk > again.pk and current.payload_hash == second.payload_hash
    assert current.reason == f"current configuration pushed again after the rollback (push #{again.pk})"
    expect(page.locator("h1")).to_contain_text(f"Push #{current.pk} to local")
    expect(page.locator("#push-status h2 .badge")).to_contain_text("Succeeded")
    live = (render_dir / "current").resolve()
    for name, text in payload_of(second.payload)["files"].items():
        assert (live / name).read_text() == text
    page.goto(f"{live_server.url}/scheduling/targets/")
    expect(page.locator("tr[data-target='local'] .rollback-badge")).to_have_count(0)
    expect(page.locator("tr[data-target='local']")).to_contain_text(f"#{current.pk}")
