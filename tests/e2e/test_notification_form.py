"""The admin's webhook form in a real Chromium: each event is one row, its checkbox on the left of its label
(sentence case, not capitals) with a line saying when it is sent; a new endpoint starts with only the
rack-health events ticked; the intro names every kind of event; the endpoints list shows the events' labels,
not their codes. At desktop (1400 px) and phone (390 px) width."""

import pytest
from playwright.sync_api import expect

from core.models import SUBSCRIBABLE_EVENTS, NotificationSubscription
from portal.pages.notifications import EVENT_DESCRIPTIONS, HEALTH_EVENTS
from tests.e2e.browser import sign_in

PASSWORD = "e2e-admin-password-1"
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def admin(transactional_db, django_user_model, settings):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = True
    return django_user_model.objects.create_superuser("e2e-admin", "e2e-admin@example.com", PASSWORD)


def assert_checkbox_left_of_label(page) -> None:
    for index, (value, label) in enumerate(SUBSCRIBABLE_EVENTS):
        box = page.locator(f"#id_events_{index}")
        expect(box).to_have_attribute("value", value)
        text = page.locator(f'label[for="id_events_{index}"] .event-label')
        expect(text).to_have_text(str(label))
        assert text.evaluate("el => getComputedStyle(el).textTransform") == "none"
        assert text.evaluate("el => el.innerText") == str(label)  # as written: "Tray drained", not capitals
        expect(page.locator(f"#id_events_{index}_what")).to_have_text(str(EVENT_DESCRIPTIONS[value]))
        b, t = box.bounding_box(), text.bounding_box()
        assert b["x"] + b["width"] <= t["x"], (value, b, t)  # the box is on the left of its own label
        assert b["y"] < t["y"] + t["height"] and t["y"] < b["y"] + b["height"], (value, b, t)  # same row


@pytest.mark.e2e
def test_webhook_form_rows_defaults_and_the_list_shows_labels(live_server, page, admin, shots):
    sign_in(page, live_server, admin.username, PASSWORD)
    page.goto(f"{live_server.url}/notifications/new/webhook/")
    intro = page.locator(".page-head")
    for kind in ("rack health", "jobs", "quota", "idle GPUs", "configuration pushes"):
        expect(intro).to_contain_text(kind)
    expect(page.locator('input[name="events"]')).to_have_count(len(SUBSCRIBABLE_EVENTS))
    for value, _label in SUBSCRIBABLE_EVENTS:
        box = page.locator(f'input[name="events"][value="{value}"]')
        (expect(box).to_be_checked if value in HEALTH_EVENTS else expect(box).not_to_be_checked)()
    assert_checkbox_left_of_label(page)
    # Clicking a label's words ticks its own box.
    page.locator(".event-choice").filter(has_text="Job failed").locator(".event-label").click()
    expect(page.locator('input[name="events"][value="job_failed"]')).to_be_checked()
    page.screenshot(path=str(shots / "webhook-form-1400.png"), full_page=True)
    page.set_viewport_size(PHONE)
    assert_checkbox_left_of_label(page)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    page.screenshot(path=str(shots / "webhook-form-390.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 1000})

    page.fill("#id_name", "on-call pager")
    page.fill("#id_url", "http://127.0.0.1:9/hook")
    with page.expect_navigation():
        page.get_by_role("button", name="Add", exact=True).click()
    subscription = NotificationSubscription.objects.get(name="on-call pager")
    assert subscription.events == [*HEALTH_EVENTS, "job_failed"]

    page.goto(f"{live_server.url}/notifications/")
    events = page.locator(f'tr[data-subscription="{subscription.pk}"] td.event-labels')
    expect(events).to_have_text(
        "Tray drained, Circuit breaker tripped, Job requeued by a fault, Tray back in service, "
        "Tray needs service, Job failed"
    )
    expect(events).not_to_contain_text("tray_drained")
    page.screenshot(path=str(shots / "webhook-list-1400.png"), full_page=True)
