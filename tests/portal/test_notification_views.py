"""The Notifications page: platform admins only; add, edit, disable, delete (audited, secret never recorded),
the webhook secret shown once, a test notification to a real local receiver, bad input refused."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from core.models import SUBSCRIBABLE_EVENTS, AuditEvent, Notification, NotificationSubscription
from core.notifications import recording
from core.notifications.subscriptions import create_subscription
from tests.core.notification_receiver import serve

pytestmark = pytest.mark.django_db

ALL_EVENTS = [value for value, _ in SUBSCRIBABLE_EVENTS]
LIST = reverse("notification-list")
NEW_WEBHOOK = reverse("notification-new", args=["webhook"])
NEW_EMAIL = reverse("notification-new", args=["email"])


@pytest.fixture
def receiver():
    """A real HTTP server on 127.0.0.1 that records what it is sent (tests/core/notification_receiver.py)."""
    with serve() as running:
        yield running


@pytest.fixture
def allow_private(settings):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = True


@pytest.fixture
def admin(client_as, platform_admin):
    return client_as(platform_admin)


@pytest.fixture
def email_subscription(db):
    subscription, _ = create_subscription(
        name="facilities", channel="email", email="facilities@example.com", events=ALL_EVENTS
    )
    return subscription


def audit_of(subscription_id):
    return list(
        AuditEvent.objects.filter(object_type="core.notificationsubscription", object_id=str(subscription_id))
        .order_by("pk")
        .values_list("action", "before", "after")
    )


# --- who may ---------------------------------------------------------------------------------------------


def pages(pk):
    return [
        ("get", LIST),
        ("get", NEW_WEBHOOK),
        ("post", NEW_EMAIL),
        ("get", reverse("notification-edit", args=[pk])),
        ("post", reverse("notification-edit", args=[pk])),
        ("get", reverse("notification-secret", args=[pk])),
        ("post", reverse("notification-toggle", args=[pk])),
        ("post", reverse("notification-delete", args=[pk])),
        ("post", reverse("notification-test", args=[pk])),
    ]


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("persona", ["lead_a", "member_a", "outsider"])
def test_only_platform_admins_may_use_the_page(client_as, persona, email_subscription):
    client = client_as(persona)
    for method, url in pages(email_subscription.pk):
        response = getattr(client, method)(url, {"name": "x", "email": "x@example.com", "events": ALL_EVENTS})
        assert response.status_code == 403, (method, url)
        assert "Only platform admins" in response.content.decode()
    email_subscription.refresh_from_db()
    assert email_subscription.enabled and email_subscription.name == "facilities"
    assert NotificationSubscription.objects.count() == 1 and not Notification.objects.exists()


def test_anonymous_visitors_are_sent_to_sign_in(client, email_subscription):
    for method, url in pages(email_subscription.pk):
        response = getattr(client, method)(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), (method, url)


def test_admins_see_the_page_and_its_menu_entry(admin, email_subscription):
    response = admin.get(LIST)
    assert response.status_code == 200
    page = response.content.decode()
    assert f'href="{LIST}" aria-current="page">Webhooks &amp; email</a>' in page
    # One name for one thing: the bell is the people's notifications, this page the admin's endpoints.
    assert "<title>Webhooks &amp; email" in page and "<h1>Webhooks &amp; email</h1>" in page
    assert ">Notifications</a>" not in page
    assert "facilities@example.com" in page


def test_the_menu_entry_is_for_admins_only(client_as, lead_a):
    assert b">Webhooks &amp; email</a>" not in client_as(lead_a).get(reverse("home")).content


# --- adding a webhook: the secret shown once -------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_adding_a_webhook_shows_its_secret_once_and_audits_without_it(
    admin, allow_private, receiver, demo_inventory
):
    response = admin.post(
        NEW_WEBHOOK,
        {
            "name": "on-call pager",
            "url": receiver.url,
            "events": ["tray_drained", "needs_service"],
            "scope": "rack:gb-r01",
            "enabled": "on",
        },
    )
    subscription = NotificationSubscription.objects.get()
    secret_page = reverse("notification-secret", args=[subscription.pk])
    assert response.status_code == 303 and response["Location"] == secret_page
    assert (subscription.channel, subscription.url, subscription.scope, subscription.enabled) == (
        "webhook",
        receiver.url,
        "rack:gb-r01",
        True,
    )
    assert subscription.events == ["tray_drained", "needs_service"]
    assert subscription.secret.startswith("rpwh_") and subscription.created_by.username == "platform-admin"

    first = admin.get(secret_page)
    assert subscription.secret in first.content.decode()
    assert "no-cache" in first["Cache-Control"]
    second = admin.get(secret_page)
    assert subscription.secret not in second.content.decode()
    assert "shown once" in second.content.decode()
    assert subscription.secret not in admin.get(LIST).content.decode()

    [(action, before, after)] = audit_of(subscription.pk)
    assert action == "create" and before is None
    assert after["url"] == receiver.url and "secret" not in after and after["secret_made_at"]
    assert subscription.secret not in json.dumps(after)


def test_adding_an_email_recipient_needs_no_secret(admin):
    response = admin.post(
        NEW_EMAIL, {"name": "facilities", "email": "fac@example.com", "events": ["needs_service"]}
    )
    assert response.status_code == 303 and response["Location"] == LIST
    subscription = NotificationSubscription.objects.get()
    assert (subscription.channel, subscription.email, subscription.secret, subscription.enabled) == (
        "email",
        "fac@example.com",
        "",
        False,  # an unticked box: added disabled
    )


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_new_secret_is_audited_as_its_time_and_shown_once(admin, allow_private, receiver):
    admin.post(NEW_WEBHOOK, {"name": "pager", "url": receiver.url, "events": ALL_EVENTS, "enabled": "on"})
    subscription = NotificationSubscription.objects.get()
    old_secret = subscription.secret
    admin.get(reverse("notification-secret", args=[subscription.pk]))  # shown

    response = admin.post(
        reverse("notification-edit", args=[subscription.pk]),
        {"name": "pager", "url": receiver.url, "events": ALL_EVENTS, "enabled": "on", "new_secret": "on"},
    )
    subscription.refresh_from_db()
    assert subscription.secret != old_secret
    assert response.status_code == 303 and response["Location"].endswith(f"/{subscription.pk}/secret/")
    assert subscription.secret in admin.get(response["Location"]).content.decode()
    (_, _, _), (action, before, after) = audit_of(subscription.pk)
    assert action == "update" and set(after) == {"secret_made_at"}
    assert old_secret not in json.dumps(before) and subscription.secret not in json.dumps(after)


# --- edit, disable, delete ---------------------------------------------------------------------------------


def test_edit_disable_enable_and_delete_are_audited(admin, email_subscription):
    pk = email_subscription.pk
    response = admin.post(
        reverse("notification-edit", args=[pk]),
        {"name": "facilities team", "email": "fac@example.com", "events": ["tray_returned"], "enabled": "on"},
    )
    assert response.status_code == 303
    email_subscription.refresh_from_db()
    assert (email_subscription.name, email_subscription.email, email_subscription.events) == (
        "facilities team",
        "fac@example.com",
        ["tray_returned"],
    )

    assert admin.post(reverse("notification-toggle", args=[pk])).status_code == 303
    email_subscription.refresh_from_db()
    assert not email_subscription.enabled
    admin.post(reverse("notification-toggle", args=[pk]))
    email_subscription.refresh_from_db()
    assert email_subscription.enabled

    confirm = admin.get(reverse("notification-delete", args=[pk]))
    assert confirm.status_code == 200 and NotificationSubscription.objects.filter(pk=pk).exists()
    assert admin.post(reverse("notification-delete", args=[pk])).status_code == 303
    assert not NotificationSubscription.objects.filter(pk=pk).exists()

    actions = [(action, sorted(after or before)) for action, before, after in audit_of(pk)]
    assert actions[1:] == [
        ("update", ["email", "events", "name"]),
        ("update", ["enabled"]),
        ("update", ["enabled"]),
        ("delete", sorted(actions[0][1])),
    ]


def test_the_toggle_does_not_answer_a_get(admin, email_subscription):
    assert admin.get(reverse("notification-toggle", args=[email_subscription.pk])).status_code == 405
    email_subscription.refresh_from_db()
    assert email_subscription.enabled


# --- a test notification --------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db(transaction=True)  # sent when the request's work commits, as in production
def test_send_a_test_notification_to_a_real_receiver(admin, allow_private, receiver):
    subscription, secret = create_subscription(
        name="pager", channel="webhook", url=receiver.url, events=ALL_EVENTS
    )
    response = admin.post(reverse("notification-test", args=[subscription.pk]), follow=True)
    [request] = receiver.requests
    assert json.loads(request.body)["event"] == "test"
    page = response.content.decode()
    assert f"Test notification delivered to {receiver.url}" in page
    assert 'data-status="delivered"' in page  # the recent deliveries list
    notification = Notification.objects.get()
    detail = admin.get(reverse("notification-delivery", args=[notification.pk])).content.decode()
    assert str(notification.uuid) in detail and "200" in detail and secret not in detail


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db(transaction=True)
def test_a_failed_test_notification_says_why(admin, allow_private, receiver):
    subscription, _ = create_subscription(
        name="pager", channel="webhook", url=receiver.url, events=ALL_EVENTS
    )
    receiver.answer(401, b"bad signature")
    response = admin.post(reverse("notification-test", args=[subscription.pk]), follow=True)
    page = response.content.decode()
    assert "failed" in page and "401" in page and "bad signature" in page


# --- bad input: form errors, nothing written -------------------------------------------------------------


@pytest.mark.slow(reason="15 cases, each a full request through the stack")
@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"url": "http://127.0.0.1:9/hook"}, "loopback"),
        ({"url": "http://169.254.169.254/latest/meta-data/"}, "link-local"),
        ({"url": "ftp://1.1.1.1/hook"}, "http:// or https://"),
        ({"url": "javascript:alert(1)"}, "Enter a valid URL"),
        ({"url": ""}, "This field is required"),
        ({"url": "https://1.1.1.1/" + "a" * 2100}, "at most 2000"),
        ({"url": "1.1.1.1:8799/hook"}, "with its scheme"),
        ({"events": ["tray_exploded"]}, "not one of the available choices"),
        ({"events": []}, "Choose at least one event"),
        ({"name": ""}, "Name it after"),
        ({"name": "x" * 100_000}, "at most 100 characters"),
        ({"scope": "rack gb-r01"}, "kind:name"),
        ({"scope": "rack:nope"}, "There is no rack named 'nope'"),
        ({"scope": "kind:x"}, "Unknown scope kind 'kind'"),
        ({"scope": "department:nope"}, "There is no department named 'nope'"),
    ],
)
def test_bad_input_is_a_form_error_and_writes_nothing(admin, settings, data, says):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = False  # production
    form = {"name": "pager", "url": "https://1.1.1.1/hook", "events": ALL_EVENTS, **data}
    response = admin.post(NEW_WEBHOOK, form)
    assert response.status_code == 400
    assert says in response.content.decode().replace("&#x27;", "'")
    assert not NotificationSubscription.objects.exists()
    # Nothing audited about a subscription (the events listed if one is: run in parallel, an unrelated row
    # was once seen here).
    events = list(AuditEvent.objects.values_list("object_type", "action", "object_repr"))
    assert not [event for event in events if event[0].endswith("notificationsubscription")], events


def test_a_second_subscription_to_the_same_address_is_refused(admin, email_subscription):
    response = admin.post(
        reverse("notification-new", args=["email"]),
        {"name": "facilities again", "email": "Facilities@Example.com", "events": ALL_EVENTS},
    )
    assert response.status_code == 400
    assert "“facilities” already sends to this address" in response.content.decode()
    assert NotificationSubscription.objects.count() == 1


def test_a_bad_edit_changes_nothing(admin, email_subscription):
    response = admin.post(
        reverse("notification-edit", args=[email_subscription.pk]),
        {"name": "renamed", "email": "not an address", "events": ALL_EVENTS},
    )
    assert response.status_code == 400 and "Enter a valid email address" in response.content.decode()
    email_subscription.refresh_from_db()
    assert email_subscription.name == "facilities" and email_subscription.email == "facilities@example.com"
    assert [action for action, _, _ in audit_of(email_subscription.pk)] == ["create"]


def test_an_unknown_channel_is_not_found(admin):
    assert admin.post(reverse("notification-new", args=["sms"]), {"name": "x"}).status_code == 404
    assert not NotificationSubscription.objects.exists()


def test_a_body_over_the_upload_limit_is_refused(admin, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
    response = admin.post(
        NEW_EMAIL, {"name": "x" * (70 * 1024), "email": "a@example.com", "events": ALL_EVENTS}
    )
    assert response.status_code == 400
    assert not NotificationSubscription.objects.exists()


def test_a_json_body_is_not_a_form(admin):
    response = admin.post(
        NEW_EMAIL,
        json.dumps({"name": "x", "email": "a@example.com", "events": ALL_EVENTS}),
        content_type="application/json",
    )
    assert response.status_code == 400
    assert not NotificationSubscription.objects.exists()


# --- a webhook to a private address: the admin ticks "Allow a private address" on this page -------------


def test_a_private_address_is_allowed_by_ticking_the_box_the_refusal_names(admin, settings):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = False  # production
    assert 'name="allow_private_address"' in admin.get(NEW_WEBHOOK).content.decode()
    assert 'name="allow_private_address"' not in admin.get(NEW_EMAIL).content.decode()
    form = {"name": "internal", "url": "http://10.20.0.5/hook", "events": ALL_EVENTS, "enabled": "on"}
    refused = admin.post(NEW_WEBHOOK, form)
    assert refused.status_code == 400
    page = refused.content.decode()
    # The advice names a box, and the box is on the page, unticked, beside the address.
    assert "tick “Allow a private address”" in page and 'id="id_allow_private_address"' in page
    assert not NotificationSubscription.objects.exists()

    response = admin.post(NEW_WEBHOOK, {**form, "allow_private_address": "on"})
    assert response.status_code == 303
    subscription = NotificationSubscription.objects.get()
    assert subscription.url == "http://10.20.0.5/hook" and subscription.allow_private_address
    [(action, _before, after)] = audit_of(subscription.pk)
    assert action == "create" and after["allow_private_address"] is True
    assert "private address allowed" in admin.get(LIST).content.decode()

    # Metadata addresses stay refused, ticked or not.
    metadata = admin.post(
        NEW_WEBHOOK,
        {**form, "name": "meta", "url": "http://169.254.169.254/x", "allow_private_address": "on"},
    )
    assert metadata.status_code == 400 and "No setting allows this address" in metadata.content.decode()
    assert NotificationSubscription.objects.count() == 1


def test_editing_a_webhook_that_allows_a_private_address_keeps_working(admin, settings):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = False  # production
    subscription, _ = create_subscription(
        name="internal",
        channel="webhook",
        url="http://10.20.0.5/hook",
        events=ALL_EVENTS,
        allow_private_address=True,  # e.g. set in the Django admin
    )
    edit = reverse("notification-edit", args=[subscription.pk])
    assert 'id="id_allow_private_address" checked' in admin.get(edit).content.decode()
    form = {
        "name": "internal pager",
        "url": "http://10.20.0.5/hook",
        "events": ALL_EVENTS,
        "allow_private_address": "on",
    }
    assert admin.post(edit, form).status_code == 303
    subscription.refresh_from_db()
    assert subscription.name == "internal pager" and subscription.allow_private_address
    # Unticked, the private address no longer goes: refused, nothing changed.
    del form["allow_private_address"]
    refused = admin.post(edit, {**form, "name": "renamed"})
    assert refused.status_code == 400 and "tick “Allow a private address”" in refused.content.decode()
    subscription.refresh_from_db()
    assert subscription.name == "internal pager" and subscription.allow_private_address


# --- the Django admin ------------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db(transaction=True)
def test_the_django_admin_shows_subscriptions_and_deliveries_never_the_secret(
    admin_client_logged_in, allow_private, receiver
):
    admin = admin_client_logged_in  # a superuser: the Django admin also checks model permissions
    subscription, secret = create_subscription(
        name="pager", channel="webhook", url=receiver.url, events=ALL_EVENTS
    )
    notification = recording.send_test(subscription)  # no transaction open: sent at once
    pages = [
        reverse("admin:core_notificationsubscription_changelist"),
        reverse("admin:core_notificationsubscription_change", args=[subscription.pk]),
        reverse("admin:core_notification_changelist"),
        reverse("admin:core_notification_change", args=[notification.pk]),
    ]
    for page in pages:
        response = admin.get(page)
        assert response.status_code == 200, page
        assert secret not in response.content.decode(), page
    assert admin.get(reverse("admin:core_notificationsubscription_add")).status_code == 403
    detail = admin.get(pages[3]).content.decode()
    assert "Delivered" in detail and "200" in detail  # the attempt, inline
