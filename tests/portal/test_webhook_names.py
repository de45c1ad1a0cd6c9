"""One name, one webhook (core.models.NotificationSubscription.clean): the portal's Webhooks & email page, its
edit page and the Django admin refuse a name another webhook of the same owner has, whatever its case, and
write nothing; people's own webhooks (portal.pages.my_notifications, named for them) get a number instead."""

from __future__ import annotations

import pytest
from django.urls import reverse

from core.models import AuditEvent, NotificationSubscription

pytestmark = pytest.mark.django_db

NEW_WEBHOOK = reverse("notification-new", args=["webhook"])


@pytest.fixture
def admin(client_as, platform_admin, settings):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = True
    return client_as(platform_admin)


@pytest.fixture
def hook1(db):
    return NotificationSubscription.objects.create(
        name="hook1", channel="webhook", url="http://127.0.0.1:8799/one", events=["tray_drained"]
    )


@pytest.mark.parametrize("name", ["hook1", "HOOK1", " Hook1 "])
def test_a_second_webhook_with_a_taken_name_is_refused(admin, hook1, name):
    before = AuditEvent.objects.count()
    response = admin.post(
        NEW_WEBHOOK, {"name": name, "url": "http://127.0.0.1:8799/two", "events": ["tray_drained"]}
    )
    assert response.status_code == 400
    assert "A webhook is already named “hook1”: give this one another name" in response.content.decode()
    assert NotificationSubscription.objects.count() == 1 and AuditEvent.objects.count() == before


def test_another_name_is_accepted_and_an_edit_keeps_its_own(admin, hook1):
    response = admin.post(
        NEW_WEBHOOK, {"name": "hook2", "url": "http://127.0.0.1:8799/two", "events": ["tray_drained"]}
    )
    assert response.status_code == 303
    hook2 = NotificationSubscription.objects.get(name="hook2")
    edit = reverse("notification-edit", args=[hook2.pk])
    form = {"name": "Hook1", "url": hook2.url, "events": ["tray_drained"], "enabled": "on"}
    renamed = admin.post(edit, form)
    assert renamed.status_code == 400 and "already named “hook1”" in renamed.content.decode()
    assert NotificationSubscription.objects.get(pk=hook2.pk).name == "hook2"
    # Saving a webhook under its own name (another case of it) is no clash with itself.
    assert admin.post(edit, {**form, "name": "HOOK2"}).status_code == 303
    assert NotificationSubscription.objects.get(pk=hook2.pk).name == "HOOK2"


def test_the_django_admin_refuses_the_name_too(client, admin_user, hook1, settings):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = True
    client.force_login(admin_user)
    other = NotificationSubscription.objects.create(
        name="other", channel="webhook", url="http://127.0.0.1:8799/two", events=["tray_drained"]
    )
    url = reverse("admin:core_notificationsubscription_change", args=[other.pk])
    response = client.post(url, {"name": "HOOK1", "events": '["tray_drained"]', "scope": "", "enabled": "on"})
    assert response.status_code == 200  # the form again, with the error
    assert "A webhook is already named “hook1”" in response.content.decode()
    assert NotificationSubscription.objects.get(pk=other.pk).name == "other"


def test_a_persons_own_webhooks_are_numbered_not_refused(client_as, member_a, settings):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = True
    client = client_as(member_a)
    for path in ("one", "two"):
        response = client.post(
            "/account/notifications/",
            {
                "channel": "webhook",
                "events": ["job_finished"],
                "scope": f"user:{member_a.pk}",
                "url": f"http://127.0.0.1:8799/{path}",
            },
        )
        assert response.status_code == 200  # the page showing the secret once
    names = list(
        NotificationSubscription.objects.filter(owner=member_a).order_by("pk").values_list("name", flat=True)
    )
    assert names == ["My jobs: job finished", "My jobs: job finished (2)"]


def test_a_fault_with_a_read_only_field_in_the_django_admin_is_a_message_not_a_500(
    client, admin_user, hook1, settings
):
    """The admin shows a webhook's URL read-only; the model's clean() finding fault with it (another endpoint
    already sends there, made before the rule) used to raise ValueError: a 500."""
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = True
    client.force_login(admin_user)
    client.raise_request_exception = False
    twin = NotificationSubscription.objects.create(
        name="twin", channel="webhook", url=hook1.url, events=["tray_drained"]
    )
    url = reverse("admin:core_notificationsubscription_change", args=[twin.pk])
    response = client.post(url, {"name": "twin", "events": '["tray_drained"]', "scope": "", "enabled": "on"})
    assert response.status_code == 200
    assert "already sends to this address" in response.content.decode()
