"""core.notifications: recording, signing, delivering (webhook against a real local HTTP server, email through
Django's backends), retries, on-commit sending and the SSRF guard."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from datetime import datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.destinations import check_webhook_url
from core.models import (
    SUBSCRIBABLE_EVENTS,
    AttemptOutcome,
    Notification,
    NotificationEvent,
    NotificationStatus,
    NotificationSubscription,
)
from core.notifications import delivery, recording, signing
from core.notifications.delivery import MAX_ATTEMPTS
from core.notifications.recording import notify
from core.notifications.subscriptions import create_subscription
from core.tasks import retry_notifications
from tests.core.notification_receiver import closed_port, serve

ALL_EVENTS = [value for value, _ in SUBSCRIBABLE_EVENTS]


@pytest.fixture
def receiver():
    """A real HTTP server on 127.0.0.1 that records what it is sent (tests/core/notification_receiver.py)."""
    with serve() as running:
        yield running


@pytest.fixture
def allow_private(settings):
    """The receiver listens on 127.0.0.1: allowed as in development (production refuses it by default)."""
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = True


def webhook(url, events=None, **fields):
    """A webhook subscription; a second one to the same receiver gets its own path (one owner's webhooks may
    not share an address, whatever their scopes: each signs with its own secret)."""
    name = fields.pop("name", "pager")
    taken = NotificationSubscription.objects.filter(url=url).exists()
    return create_subscription(
        name=name,
        channel="webhook",
        url=f"{url}/{name.replace(' ', '-')}" if taken else url,
        events=events or ALL_EVENTS,
        **fields,
    )


def drained(scope=None, **payload):
    return notify(
        NotificationEvent.TRAY_DRAINED,
        "gb-r01-t03 drained: XID 79 on GPU-1",
        {"tray": "gb-r01-t03", "xid": 79, **payload},
        scope=scope,
    )


def expected_signature(secret: str, timestamp: str, body: bytes) -> str:
    """Computed here from the documented rule, not with the code under test."""
    return "sha256=" + hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


# --- webhooks against a real HTTP server -----------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_a_webhook_is_a_signed_json_post_the_receiver_can_verify(
    receiver, allow_private, django_capture_on_commit_callbacks
):
    subscription, secret = webhook(receiver.url)
    assert secret.startswith("rpwh_") and subscription.secret == secret
    with django_capture_on_commit_callbacks(execute=True):
        [notification] = drained(scope="rack:gb-r01", since=timezone.now())

    [request] = receiver.requests
    assert request.path == "/hook"
    assert request.header("Content-Type") == "application/json"
    timestamp = request.header("X-Rackplane-Timestamp")
    assert abs(int(timestamp) - time.time()) < 60
    assert request.header("X-Rackplane-Signature") == expected_signature(secret, timestamp, request.body)
    assert request.header("X-Rackplane-Signature") != expected_signature(
        "another secret", timestamp, request.body
    )
    assert request.header("X-Rackplane-Event") == "tray_drained"
    assert request.header("X-Rackplane-Notification") == str(notification.uuid)
    body = json.loads(request.body)
    assert body["id"] == str(notification.uuid)
    assert body["event"] == "tray_drained"
    assert body["subject"] == "gb-r01-t03 drained: XID 79 on GPU-1"
    assert body["scope"] == ["rack:gb-r01"]
    assert body["payload"]["tray"] == "gb-r01-t03" and body["payload"]["xid"] == 79
    assert isinstance(body["payload"]["since"], str)  # a datetime, as JSON
    assert datetime.fromisoformat(body["time"]) == notification.created_at

    notification.refresh_from_db()
    assert notification.status == NotificationStatus.DELIVERED and notification.attempts == 1
    [attempt] = notification.attempt_log.all()
    assert (attempt.number, attempt.http_status, attempt.outcome) == (1, 200, AttemptOutcome.DELIVERED)

    # The reference check a receiver can copy: right secret and fresh timestamp only.
    assert signing.verify_signature(secret, request.body, timestamp, request.header("X-Rackplane-Signature"))
    assert not signing.verify_signature(
        secret, request.body + b" ", timestamp, request.header("X-Rackplane-Signature")
    )
    assert not signing.verify_signature(
        secret, request.body, timestamp, request.header("X-Rackplane-Signature"), now=int(timestamp) + 301
    )


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_a_503_is_retried_after_the_backoff_and_then_delivered_with_the_same_id(
    receiver, allow_private, django_capture_on_commit_callbacks
):
    _, secret = webhook(receiver.url)
    receiver.answer(503, b"busy, come back later")
    with django_capture_on_commit_callbacks(execute=True):
        [notification] = drained()

    notification.refresh_from_db()
    assert notification.status == NotificationStatus.PENDING and notification.attempts == 1
    assert "503" in notification.error and "busy, come back later" in notification.error
    wait = (notification.next_attempt_at - timezone.now()).total_seconds()
    assert 1 < wait <= 2  # core.retry: 2 s after the first failure

    # Not due yet: the beat sends nothing.
    retry_notifications()
    assert len(receiver.requests) == 1

    time.sleep(wait + 0.2)
    retry_notifications()  # eager Celery: the attempt runs here
    assert len(receiver.requests) == 2
    notification.refresh_from_db()
    assert notification.status == NotificationStatus.DELIVERED and notification.attempts == 2
    assert notification.delivered_at is not None and notification.error == ""
    attempts = list(notification.attempt_log.values_list("number", "http_status", "outcome"))
    assert attempts == [(1, 503, AttemptOutcome.RETRY), (2, 200, AttemptOutcome.DELIVERED)]
    first, second = receiver.requests
    assert json.loads(first.body)["id"] == json.loads(second.body)["id"] == str(notification.uuid)
    for request in receiver.requests:  # each attempt signed afresh
        timestamp = request.header("X-Rackplane-Timestamp")
        assert request.header("X-Rackplane-Signature") == expected_signature(secret, timestamp, request.body)

    # Delivered: nothing more is ever sent.
    assert delivery.due(now=timezone.now() + timedelta(days=1)) == []


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_a_429_waits_as_long_as_retry_after_asks(receiver, allow_private, django_capture_on_commit_callbacks):
    webhook(receiver.url)
    receiver.answer(429, b"slow down", Retry_After="120")
    with django_capture_on_commit_callbacks(execute=True):
        [notification] = drained()
    notification.refresh_from_db()
    assert notification.status == NotificationStatus.PENDING
    assert 115 < (notification.next_attempt_at - timezone.now()).total_seconds() <= 120
    assert notification.attempt_log.get().http_status == 429


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_a_400_is_not_retried(receiver, allow_private, django_capture_on_commit_callbacks):
    webhook(receiver.url)
    receiver.answer(400, b'{"error": "unknown event"}')
    with django_capture_on_commit_callbacks(execute=True):
        [notification] = drained()

    notification.refresh_from_db()
    assert notification.status == NotificationStatus.FAILED and notification.attempts == 1
    assert "400" in notification.error and "unknown event" in notification.error
    assert "not retried" in notification.error
    [attempt] = notification.attempt_log.all()
    assert (attempt.http_status, attempt.outcome) == (400, AttemptOutcome.FAILED)
    assert delivery.due(now=timezone.now() + timedelta(days=1)) == []
    retry_notifications()
    assert len(receiver.requests) == 1


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_a_redirect_is_not_followed(receiver, allow_private, django_capture_on_commit_callbacks):
    webhook(receiver.url)
    receiver.answer(302, Location=receiver.url + "/elsewhere")
    with django_capture_on_commit_callbacks(execute=True):
        [notification] = drained()
    notification.refresh_from_db()
    assert notification.status == NotificationStatus.FAILED
    assert "redirect" in notification.error and "/hook/elsewhere" in notification.error
    assert [request.path for request in receiver.requests] == ["/hook"]


@pytest.mark.django_db
def test_an_endpoint_that_refuses_connections_is_retried(allow_private, django_capture_on_commit_callbacks):
    webhook(f"http://127.0.0.1:{closed_port()}/hook")
    with django_capture_on_commit_callbacks(execute=True):
        [notification] = drained()
    notification.refresh_from_db()
    assert notification.status == NotificationStatus.PENDING and notification.next_attempt_at is not None
    assert "connection refused" in notification.error.lower()
    attempt = notification.attempt_log.get()
    assert attempt.http_status is None and attempt.outcome == AttemptOutcome.RETRY


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_it_gives_up_after_the_last_attempt(receiver, allow_private, django_capture_on_commit_callbacks):
    webhook(receiver.url)
    receiver.answer(503)
    with django_capture_on_commit_callbacks():
        [notification] = drained()
    # As if MAX_ATTEMPTS - 1 attempts had failed already.
    Notification.objects.filter(pk=notification.pk).update(attempts=MAX_ATTEMPTS - 1)
    outcome = delivery.deliver(notification.pk)
    assert outcome.status == NotificationStatus.FAILED
    notification.refresh_from_db()
    assert notification.attempts == MAX_ATTEMPTS
    assert notification.error.startswith(f"Gave up after {MAX_ATTEMPTS} attempts")


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db(transaction=True)
def test_nothing_is_sent_when_the_transaction_rolls_back(receiver, allow_private):
    webhook(receiver.url)

    class Abandon(Exception):
        pass

    with pytest.raises(Abandon), transaction.atomic():
        drained()
        assert Notification.objects.count() == 1
        raise Abandon
    assert Notification.objects.count() == 0
    assert receiver.requests == []

    with transaction.atomic():
        drained()
        assert receiver.requests == []  # not before the commit
    assert len(receiver.requests) == 1
    assert Notification.objects.get().status == NotificationStatus.DELIVERED


# --- who receives what -----------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_subscribers_get_their_events_and_scopes_only(receiver, allow_private):
    everything, _ = webhook(receiver.url, name="everything")
    rack, _ = webhook(receiver.url, name="rack r01", scope="rack:gb-r01")
    other_rack, _ = webhook(receiver.url, name="rack r02", scope="rack:gb-r02")
    breaker_only, _ = webhook(receiver.url, name="breaker", events=["breaker_tripped"])
    disabled, _ = webhook(receiver.url, name="off", enabled=False)

    rows = drained(scope=["rack:gb-r01", "tray:gb-r01-t03"])
    assert {row.subscription for row in rows} == {everything, rack}
    assert len({row.uuid for row in rows}) == 2  # one id per subscriber
    assert {row.subscription for row in drained()} == {everything}
    assert {row.subscription for row in notify(NotificationEvent.BREAKER_TRIPPED, "breaker tripped", {})} == {
        everything,
        breaker_only,
    }
    assert other_rack not in {row.subscription for row in Notification.objects.all()}
    assert disabled not in {row.subscription for row in Notification.objects.all()}


@pytest.mark.django_db
def test_callers_mistakes_are_refused():
    with pytest.raises(ValueError, match="unknown notification event"):
        notify("tray_exploded", "boom", {})
    with pytest.raises(TypeError, match="mapping"):
        notify(NotificationEvent.TRAY_DRAINED, "drained", ["not", "an", "object"])
    with pytest.raises(TypeError, match="scope"):
        notify(NotificationEvent.TRAY_DRAINED, "drained", {}, scope=[42])
    with pytest.raises(ValueError, match="at most"):
        notify(NotificationEvent.TRAY_DRAINED, "drained", {"log": "x" * (recording.MAX_PAYLOAD_BYTES + 1)})


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_a_subject_is_one_line(receiver, allow_private):
    webhook(receiver.url)
    [row] = notify(NotificationEvent.TRAY_DRAINED, "line one\nBcc: victim@example.com\r\n" + "x" * 300, {})
    assert "\n" not in row.subject and "\r" not in row.subject and len(row.subject) == 200


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_disabling_or_deleting_a_subscription_cancels_what_it_had_pending(
    receiver, allow_private, django_capture_on_commit_callbacks
):
    kept, _ = webhook(receiver.url, name="kept")
    gone, _ = webhook(receiver.url, name="gone")
    with django_capture_on_commit_callbacks() as callbacks:
        rows = drained()
    kept.enabled = False
    kept.save()
    gone.delete()
    for callback in callbacks:
        callback()
    assert receiver.requests == []
    for row in rows:
        row.refresh_from_db()
        assert row.status == NotificationStatus.CANCELLED
    assert {row.error for row in rows} == {
        "Not sent: its subscription is disabled.",
        "Not sent: its subscription was deleted.",
    }


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_a_test_notification_goes_to_one_subscription_even_disabled(
    receiver, allow_private, django_capture_on_commit_callbacks, platform_admin
):
    target, _ = webhook(receiver.url, name="target", enabled=False)
    webhook(receiver.url, name="bystander")
    with django_capture_on_commit_callbacks(execute=True):
        notification = recording.send_test(target, platform_admin)
    [request] = receiver.requests
    body = json.loads(request.body)
    assert body["event"] == "test" and body["payload"]["requested_by"] == "platform-admin"
    notification.refresh_from_db()
    assert notification.status == NotificationStatus.DELIVERED and notification.subscription == target


# --- at least once: lost workers and lost messages -------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_a_lost_worker_or_a_lost_message_is_picked_up_by_the_beat(
    receiver, allow_private, django_capture_on_commit_callbacks
):
    webhook(receiver.url)
    with django_capture_on_commit_callbacks():  # the messages are never sent: the broker was down
        lost, claimed = drained(), drained()
    lost, claimed = lost[0], claimed[0]
    assert delivery.due() == []  # a message may still be on its way
    long_ago = timezone.now() - timedelta(minutes=10)
    Notification.objects.filter(pk=lost.pk).update(created_at=long_ago)
    # A worker claimed this one and died.
    assert delivery.claim(claimed.pk)
    Notification.objects.filter(pk=claimed.pk).update(claimed_at=long_ago)

    result = retry_notifications()
    assert result["requeued"] == [claimed.pk] and set(result["sent"]) == {lost.pk, claimed.pk}
    assert len(receiver.requests) == 2
    assert Notification.objects.filter(status=NotificationStatus.DELIVERED).count() == 2
    claimed.refresh_from_db()
    assert claimed.attempts == 2  # the lost attempt counts


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_a_notification_is_claimed_once(receiver, allow_private, django_capture_on_commit_callbacks):
    webhook(receiver.url)
    with django_capture_on_commit_callbacks():
        [row] = drained()
    assert delivery.deliver(row.pk).status == NotificationStatus.DELIVERED
    again = delivery.deliver(row.pk)  # a duplicate message
    assert again.status == NotificationStatus.DELIVERED and "not claimed" in again.message
    assert len(receiver.requests) == 1


# --- SSRF ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:8080/hook", "loopback"),
        ("http://localhost/hook", "loopback"),
        ("http://[::1]/hook", "loopback"),
        ("http://[::ffff:127.0.0.1]/hook", "loopback"),
        ("http://2130706433/hook", "loopback"),  # 127.0.0.1 written as one number
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[fe80::1]/hook", "link-local"),
        ("http://10.0.0.5/hook", "private"),
        ("https://192.168.1.20/hook", "private"),
        ("http://172.16.0.1/hook", "private"),
        ("http://0.0.0.0/hook", "unspecified"),
    ],
)
def test_production_refuses_webhooks_into_its_own_network(settings, url, why):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = False
    with pytest.raises(ValidationError) as refused:
        check_webhook_url(url)
    message = " ".join(refused.value.messages)
    # core.outbound: what an allowance lifts names the allowance; link-local (metadata), unspecified and
    # numbers-written-otherwise addresses are refused whatever is allowed, and say so.
    if why in ("link-local", "unspecified"):
        assert why in message and "No setting allows" in message
    elif "2130706433" in url:
        assert why in message and "four decimal numbers" in message
    else:
        assert why in message and "RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS" in message


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://hooks.example.com/x", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("gopher://1.1.1.1/", "http:// or https://"),
        ("https://user:pw@1.1.1.1/hook", "no user name or password"),
        ("https://1.1.1.1:99999/hook", "port"),
        ("https:///hook", "no host"),
    ],
)
def test_only_plain_http_and_https_addresses_are_taken(settings, url, says):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = True  # refused even where private ones are not
    with pytest.raises(ValidationError, match=says):
        check_webhook_url(url)


def test_a_public_address_or_an_allowed_private_one_passes(settings):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = False
    check_webhook_url("https://1.1.1.1/hook")
    check_webhook_url("https://[2606:4700:4700::1111]/hook")
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = True
    check_webhook_url("http://127.0.0.1:8080/hook")


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_a_private_target_is_refused_on_save_and_again_before_sending(
    settings, receiver, django_capture_on_commit_callbacks
):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = False
    with pytest.raises(ValidationError) as refused:
        webhook(receiver.url)
    assert "loopback" in " ".join(refused.value.message_dict["url"])
    assert not NotificationSubscription.objects.exists()

    # Saved while allowed (or its name resolved elsewhere then): checked again at each attempt.
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = True
    webhook(receiver.url)
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = False
    with django_capture_on_commit_callbacks(execute=True):
        [row] = drained()
    row.refresh_from_db()
    assert row.status == NotificationStatus.FAILED and "loopback" in row.error
    assert receiver.requests == []


# --- email -----------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_email_goes_through_djangos_backend(mailoutbox, settings, django_capture_on_commit_callbacks):
    assert settings.EMAIL_BACKEND == "django.core.mail.backends.locmem.EmailBackend"
    settings.DEFAULT_FROM_EMAIL = "rackplane@ops.example.com"
    subscription, secret = create_subscription(
        name="facilities", channel="email", email="facilities@example.com", events=["tray_drained"]
    )
    assert secret == "" and subscription.secret == ""
    with django_capture_on_commit_callbacks(execute=True):
        [row] = drained(scope="rack:gb-r01", reason="XID 79: GPU has fallen off the bus")

    [message] = mailoutbox
    assert message.to == ["facilities@example.com"]
    assert message.from_email == "rackplane@ops.example.com"
    assert message.subject == "[Rackplane] gb-r01-t03 drained: XID 79 on GPU-1"
    assert "Event: Tray drained (tray_drained)" in message.body
    assert "About: rack:gb-r01" in message.body
    assert "  reason: XID 79: GPU has fallen off the bus" in message.body
    assert "  xid: 79" in message.body
    assert str(row.uuid) in message.body
    assert message.extra_headers["X-Rackplane-Notification"] == str(row.uuid)
    assert message.extra_headers["Message-ID"] == f"<{row.uuid}@ops.example.com>"
    row.refresh_from_db()
    assert row.status == NotificationStatus.DELIVERED
    assert row.attempt_log.get().outcome == AttemptOutcome.DELIVERED


@pytest.mark.django_db
def test_a_mail_server_that_cannot_be_reached_is_retried(settings, django_capture_on_commit_callbacks):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", closed_port(), 5
    create_subscription(name="facilities", channel="email", email="facilities@example.com", events=ALL_EVENTS)
    with django_capture_on_commit_callbacks(execute=True):
        [row] = drained()
    row.refresh_from_db()
    assert row.status == NotificationStatus.PENDING and "mail server" in row.error
    assert row.attempt_log.get().outcome == AttemptOutcome.RETRY


# --- subscriptions -----------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"channel": "webhook", "url": ""}, "url", "Give the address"),
        ({"channel": "webhook", "url": "https://1.1.1.1/", "email": "a@example.com"}, "email", "no email"),
        ({"channel": "email", "email": ""}, "email", "Give the address"),
        ({"channel": "email", "email": "a@example.com", "url": "https://1.1.1.1/"}, "url", "no webhook"),
        ({"channel": "email", "email": "a@example.com", "events": []}, "events", "at least one"),
        ({"channel": "email", "email": "a@example.com", "events": ["tray_exploded"]}, "events", "Unknown"),
        ({"channel": "email", "email": "a@example.com", "events": "tray_drained"}, "events", "a list"),
        ({"channel": "email", "email": "a@example.com", "events": ["test"]}, "events", "Unknown"),
        ({"channel": "email", "email": "a@example.com", "scope": "rack gb-r01"}, "scope", "kind:name"),
        ({"channel": "sms", "email": "a@example.com"}, "channel", "not a valid choice"),
    ],
)
def test_a_subscription_that_makes_no_sense_is_refused(fields, field, says):
    fields = {"name": "x", "events": ["tray_drained"], **fields}
    with pytest.raises(ValidationError) as refused:
        create_subscription(**fields)
    assert says in " ".join(refused.value.message_dict[field])
    assert not NotificationSubscription.objects.exists()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.django_db
def test_events_are_kept_in_catalog_order_and_uuid_is_unique(receiver, allow_private):
    subscription, _ = webhook(receiver.url, events=["needs_service", "tray_drained"])
    subscription.refresh_from_db()
    assert subscription.events == ["tray_drained", "needs_service"]
    [row] = drained()
    assert isinstance(row.uuid, uuid.UUID)
