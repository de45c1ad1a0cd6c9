"""A member's own notifications in a real browser: she subscribes to "my job finished" in the portal, her
job finishes (its backend reports it: scheduling.services.actions.finish_job), the bell in the header counts
one unread, she opens the inbox, follows nothing yet, marks it read (a POST) and the bell goes back to 0.
Screenshots at desktop and phone width (390 px) through `shots`."""

import pytest
from playwright.sync_api import expect

from core.models import InboxItem, NotificationSubscription
from scheduling.choices import JobState
from scheduling.services.actions import finish_job
from tests import factories
from tests.e2e.browser import sign_in

PASSWORD = "e2e-member-password-1"


@pytest.fixture
def member(transactional_db):
    department = factories.make_department("Vision", guaranteed_gpus=0)
    return factories.make_member("e2e-member", department, password=PASSWORD)


@pytest.mark.e2e
def test_subscribe_finish_a_job_see_the_bell_and_read_it(live_server, page, member, shots):
    sign_in(page, live_server, member.username, PASSWORD)
    bell = page.locator("header a[data-bell]")
    expect(bell.locator("[data-bell-count]")).to_have_text("0")

    page.goto(f"{live_server.url}/account/notifications/")
    form = page.locator("form.my-subscription-form")
    expect(form.get_by_label("In the portal (bell)")).to_be_checked()
    form.get_by_label("Job finished").check()
    expect(form.get_by_label("About")).to_have_value(f"user:{member.pk}")
    # A member is offered her own jobs only: no department, no push events.
    expect(form.get_by_label("About").locator("option")).to_have_count(1)
    expect(form.get_by_label("Configuration push failed")).to_have_count(0)
    page.screenshot(path=str(shots / "notifications-subscribe.png"), full_page=True)
    with page.expect_navigation():
        form.get_by_role("button", name="Subscribe").click()
    expect(page.locator(".message.success")).to_contain_text("Subscribed: My jobs: job finished.")
    expect(page.locator("table.my-subscriptions tbody tr")).to_have_count(1)
    assert NotificationSubscription.objects.get(owner=member).scope == f"user:{member.pk}"

    # Her job finishes (the backend reports it).
    job = factories.make_job(member.memberships.get().department, "bert-large", submitted_by=member)
    finish_job(job, JobState.COMPLETED, "exit code 0", exit_code=0)

    page.reload()
    expect(bell.locator("[data-bell-count]")).to_have_text("1")
    expect(bell).to_have_class("bell has-unread")
    page.screenshot(path=str(shots / "notifications-bell.png"), full_page=False)
    with page.expect_navigation():
        bell.click()
    item = page.locator("li.inbox-item.unread")
    expect(item).to_contain_text(f"Job bert-large (#{job.pk}) finished: exit code 0")
    expect(item.get_by_role("link")).to_have_attribute("href", f"/scheduling/jobs/{job.pk}/")
    page.screenshot(path=str(shots / "notifications-inbox.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(shots / "notifications-inbox-390.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 1000})
    assert InboxItem.objects.get().read_at is None  # seeing it is not reading it: a GET writes nothing

    with page.expect_navigation():
        item.get_by_role("button", name="Mark read").click()
    expect(page.locator(".message.success")).to_contain_text("1 notification marked read.")
    expect(bell.locator("[data-bell-count]")).to_have_text("0")
    expect(page.locator("li.inbox-item.unread")).to_have_count(0)
    assert InboxItem.objects.get().read_at is not None
    page.screenshot(path=str(shots / "notifications-read.png"), full_page=True)
