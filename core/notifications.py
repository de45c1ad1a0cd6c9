"""Notifications: one mechanism for the whole portal, by webhook (signed JSON POST) and by email.

Any part of the portal calls, inside the transaction that made the change worth telling:

    notify(NotificationEvent.TRAY_DRAINED, "gb-r08-t03 drained: XID 79 on GPU-…",
           {"tray": "gb-r08-t03", "reason": "…"}, scope=["rack:gb-r08", "tray:gb-r08-t03"])

It records one `Notification` row per enabled subscription whose events include `event` and whose scope is
empty or one of the notification's scopes, and sends each after the transaction commits (core.enqueue ->
`core.tasks.deliver_notification`): a rolled-back change notifies nobody, and a broker that is down leaves
the rows for the beat (`core.tasks.retry_notifications`). Scopes are "<kind>:<name>" strings:
`rack:<name>`, `tray:<hostname>`, `partition:<rack>/<name>`, `department:<slug>`; pass every one that applies.

Delivery is at least once: a worker lost mid-send, or a receiver that took the request but answered late,
leads to a second request with the same `id`; receivers deduplicate by it. Every attempt is recorded
(`NotificationAttempt`, with the HTTP status). Network errors, timeouts, 5xx, 408 and 429 are retried with
core.retry's backoff (a 429's or 503's Retry-After is honoured, up to an hour), up to MAX_ATTEMPTS attempts
(about 24 minutes); any other answer (a 4xx, a redirect) fails at once: asking again gets the same.

Webhooks. The body is JSON: {"id", "event", "time" (when it happened, ISO 8601 UTC), "subject", "scope",
"payload"}. Headers:

    X-Rackplane-Timestamp: <unix seconds when this attempt was signed>
    X-Rackplane-Signature: sha256=<hex HMAC-SHA256, key = the secret's UTF-8 bytes, of "<timestamp>." + body>
    X-Rackplane-Event: <event>        X-Rackplane-Notification: <id>

A receiver recomputes the HMAC over the timestamp, a dot and the raw body bytes, compares it in constant time,
refuses a timestamp more than 5 minutes from its clock (a replayed request), and ignores an id it has seen
(`verify_signature` below is a reference; docs/notifications.md has it standalone). Redirects are not
followed. Where webhooks may go (http(s) only; in production nothing inside the portal's own network) is
core.destinations, checked when an endpoint is saved and again before each attempt.

The signing secret is stored as given (NotificationSubscription says why) and shown once, when it is made.

Email goes through Django's email backend (EMAIL_URL, DEFAULT_FROM_EMAIL; the console backend in
development), one message per recipient, with the id as its Message-ID.
"""

from __future__ import annotations

import email.utils
import hashlib
import hmac
import json
import logging
import secrets
import smtplib
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import F, Q
from django.utils import timezone

from core import inbox
from core.access import Role, is_admin
from core.destinations import check_destination, webhook_allows_private
from core.enqueue import enqueue
from core.errors import ExternalError, Unreachable
from core.http import HttpClient
from core.models import (
    AttemptOutcome,
    Notification,
    NotificationAttempt,
    NotificationChannel,
    NotificationEvent,
    NotificationStatus,
    NotificationSubscription,
)
from core.retry import backoff

logger = logging.getLogger(__name__)

DELIVER_TASK = "core.tasks.deliver_notification"

SIGNATURE_HEADER = "X-Rackplane-Signature"
TIMESTAMP_HEADER = "X-Rackplane-Timestamp"
EVENT_HEADER = "X-Rackplane-Event"
ID_HEADER = "X-Rackplane-Notification"
USER_AGENT = "Rackplane-Notifications/1"
SIGNATURE_TOLERANCE_SECONDS = 300
SECRET_PREFIX = "rpwh_"

# Waits between attempts: 2, 4, 8, ... 256 s, then 300 s (core.retry): 1,410 s, about 24 minutes, from the
# first attempt to the last.
MAX_ATTEMPTS = 12
MAX_RETRY_AFTER_SECONDS = 3600
MAX_PAYLOAD_BYTES = 64 * 1024
RESPONSE_LIMIT_BYTES = 1024 * 1024  # a receiver's answer is not used: only so much is read
MESSAGE_LIMIT = 2000  # characters of an attempt's message kept
EXCERPT_LIMIT = 300  # characters of a receiver's answer quoted in a message
# A claimed notification whose worker has not finished it in this long was lost (killed, machine gone).
STALE_SENDING = timedelta(minutes=5)
# A pending notification with no retry scheduled whose message never ran (broker down at commit time).
LOST_PENDING = timedelta(minutes=2)
CLAIM_SLACK = timedelta(seconds=2)  # a countdown message may arrive a moment before next_attempt_at


# --- recording -------------------------------------------------------------------------------------------


def _scopes(scope: str | Iterable[str] | None) -> list[str]:
    if scope is None:
        return []
    values = [scope] if isinstance(scope, str) else list(scope)
    out: list[str] = []
    for value in values:
        if not isinstance(value, str):
            raise TypeError(f"a notification scope is a string like 'rack:gb-r08', not {value!r}")
        value = value.strip()
        if value and value not in out:
            out.append(value)
    return out


def _json_object(payload: Mapping[str, Any] | None) -> dict:
    if payload is None:
        return {}
    if not isinstance(payload, Mapping):
        raise TypeError(f"a notification payload is a mapping (a JSON object), not {type(payload).__name__}")
    text = json.dumps(payload, cls=DjangoJSONEncoder, default=str)
    if len(text.encode()) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"a notification payload is at most {MAX_PAYLOAD_BYTES} bytes of JSON")
    return json.loads(text)


def _one_line(text: str, limit: int = 200) -> str:
    """A subject: one line (a newline in a mail header is refused), at most `limit` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def notify(
    event: str,
    subject: str,
    payload: Mapping[str, Any] | None = None,
    *,
    scope: str | Iterable[str] | None = None,
    link: str = "",
    subscriptions: list[NotificationSubscription] | None = None,
) -> list[Notification]:
    """Record a notification of `event` for every subscriber and send them once the transaction commits.

    `subject` is one line for people; `payload` a JSON object for programs (datetimes and UUIDs become
    strings); `scope` the "<kind>:<name>" strings it is about. Returns the rows (none without subscribers).
    ValueError for an unknown event or a payload over MAX_PAYLOAD_BYTES, TypeError for a payload that is no
    mapping or a scope that is no string: all are the caller's mistakes, raised before anything is written.

    Users' own subscriptions (owner set) hear only what is about them: a scope they chose and may see
    (portal.my_notifications checks it when saved); one without a scope hears nothing unless its owner is a
    platform admin. Those of the portal channel become InboxItems for the bell (core.inbox; `link` says
    where in the portal the subject is) instead of deliveries: one item per person and notification, even
    when two of a person's subscriptions match it (one about their jobs, one about their department).

    A caller notifying of many things at once (a pass preempting jobs) reads `enabled_subscriptions()` once
    and passes them as `subscriptions`, so its queries do not grow with the number of notifications.
    """
    if event not in NotificationEvent.values:
        raise ValueError(f"unknown notification event {event!r}: add it to core.models.NotificationEvent")
    scopes = _scopes(scope)
    data = _json_object(payload)
    line = _one_line(subject)
    now = timezone.now()
    created = []
    rung: set[int] = set()  # owners whose bell already has this notification: one item per person
    roles: dict[int, dict[str, str]] = {}  # owner -> {department slug: role}, read once per notification
    for subscription in enabled_subscriptions() if subscriptions is None else subscriptions:
        if not subscription.receives(event, scopes, data) or not _owner_may_hear(subscription):
            continue
        if not _owner_may_see(subscription, scopes, roles):
            continue
        if subscription.channel == NotificationChannel.PORTAL:
            if subscription.owner_id in rung:
                continue
            rung.add(subscription.owner_id)
            inbox.deliver(subscription, event, line, data, link, now)
        else:
            created.append(_create(subscription, event, line, data, scopes, now))
    return created


def enabled_subscriptions() -> list[NotificationSubscription]:
    """Every enabled subscription with its owner (one query), in the order notify() serves them."""
    return list(NotificationSubscription.objects.filter(enabled=True).select_related("owner").order_by("pk"))


def _owner_may_hear(subscription: NotificationSubscription) -> bool:
    owner = subscription.owner
    if owner is None:
        return True
    if not owner.is_active:
        return False
    return bool(subscription.scope) or is_admin(owner)


DEPARTMENT_SCOPE = "department:"


def department_slugs(scopes: Iterable[str]) -> list[str]:
    """The departments a notification's scopes name ("department:<slug>")."""
    return [scope.removeprefix(DEPARTMENT_SCOPE) for scope in scopes if scope.startswith(DEPARTMENT_SCOPE)]


def _department_roles(owner, slugs: list[str]) -> dict[str, str]:
    """{slug: role} of `owner`'s memberships among the departments `slugs` (core.access reads roles through
    the user's `memberships` relation: core imports no tenancy module)."""
    if not slugs:
        return {}
    return dict(owner.memberships.filter(department__slug__in=slugs).values_list("department__slug", "role"))


def _owner_may_see(subscription, scopes, roles: dict | None = None) -> bool:
    """Whether a person's own subscription may still hear a notification about `scopes`, checked when it is
    sent (belt and braces: leaving a department removes what was tied to it, tenancy.services): nothing
    about a department reaches someone who is no longer in it, and what a department-scoped subscription
    hears (its lead's events) reaches only a lead of it. Platform subscriptions (no owner) and platform
    admins hear everything they subscribed to. `roles` caches {owner id: {slug: role}} over one notify()."""
    owner = subscription.owner
    if owner is None or is_admin(owner):
        return True
    slugs = department_slugs(scopes)
    led = department_slugs([subscription.scope]) if subscription.scope else []
    if not slugs and not led:
        return True
    if roles is not None and owner.pk in roles:
        held = roles[owner.pk]
    else:
        held = _department_roles(owner, sorted({*slugs, *led}))
        if roles is not None:
            roles[owner.pk] = held
    if any(slug not in held for slug in slugs):
        return False
    return all(held.get(slug) == Role.LEAD for slug in led)


def _create(subscription, event, subject, payload, scopes, now) -> Notification:
    notification = Notification.objects.create(
        uuid=uuid.uuid4(),
        subscription=subscription,
        channel=subscription.channel,
        destination=subscription.destination,
        event=event,
        subject=subject,
        payload=payload,
        scope=scopes,
        created_at=now,
    )
    enqueue(DELIVER_TASK, notification.pk)
    return notification


def send_test(subscription: NotificationSubscription, requested_by=None) -> Notification:
    """A test notification to `subscription` alone (enabled or not), sent after the transaction commits."""
    who = requested_by.get_username() if requested_by is not None else "someone"
    return _create(
        subscription,
        NotificationEvent.TEST,
        f"Test notification from Rackplane to {_one_line(subscription.name, 100)}",
        {"requested_by": who, "note": "Nothing happened: this checks that notifications reach you."},
        [],
        timezone.now(),
    )


# --- subscriptions ---------------------------------------------------------------------------------------


def make_secret() -> str:
    """A new webhook signing secret: "rpwh_" + 43 URL-safe characters (32 random bytes)."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def new_secret(subscription: NotificationSubscription) -> str:
    """Give a webhook (not saved yet) a new signing secret; returns it. The old one stops verifying once
    the subscription is saved."""
    if subscription.channel != NotificationChannel.WEBHOOK:
        raise ValidationError("Only webhooks have a signing secret.")
    subscription.secret = make_secret()
    subscription.secret_made_at = timezone.now()
    return subscription.secret


def create_subscription(*, created_by=None, **fields) -> tuple[NotificationSubscription, str]:
    """Save a subscription (fields as the model's); a webhook gets a new secret, returned (shown once).
    ValidationError (per field) when it is not valid."""
    subscription = NotificationSubscription(created_by=created_by, **fields)
    secret = new_secret(subscription) if subscription.channel == NotificationChannel.WEBHOOK else ""
    subscription.full_clean()
    subscription.save()
    return subscription, secret


def forget_department(user, department, *, still_member: bool) -> tuple[int, int]:
    """`user` left `department` (a tenancy Department: its pk and slug), or stays only as a member (no longer
    its lead): remove what tied them to it that they may no longer see, in the caller's transaction
    (tenancy.services, for every path that removes or demotes a membership: pages, API, admin, identity
    provider sync). Returns (subscriptions, inbox items) removed.

    - Their own subscriptions scoped to the department (`department:<slug>`, which only its leads may pick):
      deleted, each audited (core.audit); their pending deliveries are cancelled when sent (`deliver`).
    - Their bell's items heard through those subscriptions, and when they left the department altogether
      every item about it (the departments' notifications name it in their payload's `department`):
      deleted, the removal audited once (core.inbox.forget).

    A platform admin may see every department: nothing of theirs is removed. A person added back starts
    clean: nothing removed comes back."""
    if is_admin(user):
        return 0, 0
    scope = f"{DEPARTMENT_SCOPE}{department.slug}"
    subscriptions = NotificationSubscription.objects.filter(owner=user, scope=scope)
    heard_through = Q(subscription__in=list(subscriptions.values_list("pk", flat=True)))
    about = heard_through if still_member else heard_through | Q(payload__department=department.slug)
    items = inbox.forget(user, about, scope=scope, department_id=department.pk)
    removed = 0
    for subscription in subscriptions.order_by("pk"):
        subscription.delete()  # one by one: each audited by core.audit's signals
        removed += 1
    if removed or items:
        logger.info(
            "%s %s %s: %d subscription(s) and %d bell item(s) about it removed",
            user.get_username(),
            "is no longer a lead of" if still_member else "left",
            scope,
            removed,
            items,
        )
    return removed, items


# --- signing ---------------------------------------------------------------------------------------------


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The X-Rackplane-Signature value: "sha256=" + hex HMAC-SHA256 of "<timestamp>." + body."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify_signature(
    secret: str,
    body: bytes,
    timestamp: str,
    signature_header: str,
    *,
    tolerance: int = SIGNATURE_TOLERANCE_SECONDS,
    now: float | None = None,
) -> bool:
    """What a receiver does (a reference): the signature matches and the timestamp is recent."""
    try:
        signed_at = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs((time.time() if now is None else now) - signed_at) > tolerance:
        return False
    return hmac.compare_digest(signature(secret, timestamp, body), signature_header or "")


def webhook_body(notification: Notification) -> bytes:
    return json.dumps(
        {
            "id": str(notification.uuid),
            "event": notification.event,
            "time": notification.created_at.astimezone(UTC).isoformat(),
            "subject": notification.subject,
            "scope": notification.scope,
            "payload": notification.payload,
        },
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()


# --- delivering ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What one run of `deliver` did: `status` is the notification's afterwards; `retry_in` seconds when it
    waits for another attempt."""

    notification_id: int
    status: str
    retry_in: int | None = None
    message: str = ""


class DeliveryFailed(Exception):
    def __init__(
        self, message: str, *, transient: bool, http_status: int | None = None, retry_after: int | None = None
    ):
        super().__init__(message)
        self.transient = transient
        self.http_status = http_status
        self.retry_after = retry_after


def claim(notification_id: int) -> bool:
    """pending -> sending in one UPDATE; False when it is not pending or its retry is not due yet."""
    now = timezone.now()
    return (
        Notification.objects.filter(pk=notification_id, status=NotificationStatus.PENDING)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now + CLAIM_SLACK))
        .update(
            status=NotificationStatus.SENDING,
            claimed_at=now,
            next_attempt_at=None,
            attempts=F("attempts") + 1,
        )
        == 1
    )


def deliver(notification_id: int, *, can_schedule_retry: bool = False) -> Outcome:
    """Claim one notification and make one attempt. Never raises for the receiver's errors (nor for its own
    bugs: a notification must never break the work that caused it); every outcome is recorded.

    `can_schedule_retry`: the caller (a task on a worker) sends itself again after `retry_in` seconds;
    otherwise (eager Celery) a notification to retry stays pending for the beat."""
    if not claim(notification_id):
        status = Notification.objects.filter(pk=notification_id).values_list("status", flat=True).first()
        return Outcome(notification_id, status or "missing", message="not claimed: not pending or not due")
    notification = Notification.objects.select_related("subscription__owner").get(pk=notification_id)
    subscription = notification.subscription
    if subscription is None or (not subscription.enabled and notification.event != NotificationEvent.TEST):
        why = "its subscription was deleted" if subscription is None else "its subscription is disabled"
        _settle(notification, NotificationStatus.CANCELLED, error=f"Not sent: {why}.")
        return Outcome(notification.pk, NotificationStatus.CANCELLED, message=why)
    if not _owner_may_see(subscription, notification.scope or []):
        # Its owner left the department it is about (or no longer leads it) since it was recorded.
        why = "its subscriber may no longer see what it is about"
        _settle(notification, NotificationStatus.CANCELLED, error=f"Not sent: {why}.")
        return Outcome(notification.pk, NotificationStatus.CANCELLED, message=why)
    at, started = timezone.now(), time.monotonic()
    try:
        if notification.channel == NotificationChannel.WEBHOOK:
            http_status, message = _send_webhook(notification, subscription)
        else:
            http_status, message = _send_email(notification, subscription)
    except DeliveryFailed as failure:
        return _failed(notification, failure, at, time.monotonic() - started, can_schedule_retry)
    except Exception as error:  # a bug here must not break the transaction's other work
        logger.exception("notification %s: unexpected error", notification.pk)
        failure = DeliveryFailed(f"Unexpected error in Rackplane: {error!r}.", transient=False)
        return _failed(notification, failure, at, time.monotonic() - started, can_schedule_retry)
    _attempt(notification, at, time.monotonic() - started, AttemptOutcome.DELIVERED, http_status, message)
    _settle(notification, NotificationStatus.DELIVERED, delivered_at=timezone.now())
    return Outcome(notification.pk, NotificationStatus.DELIVERED, message=message)


def _attempt(notification, at, seconds, outcome, http_status, message) -> None:
    NotificationAttempt.objects.create(
        notification=notification,
        number=notification.attempts,
        at=at,
        seconds=round(seconds, 3),
        http_status=http_status,
        outcome=outcome,
        message=message[:MESSAGE_LIMIT],
    )


def _settle(notification, status, *, error: str = "", **fields) -> int:
    """Write the outcome, if this worker still holds the claim (the attempt count is the claim's token)."""
    return Notification.objects.filter(
        pk=notification.pk, status=NotificationStatus.SENDING, attempts=notification.attempts
    ).update(status=status, error=error[:MESSAGE_LIMIT], claimed_at=None, **fields)


def _failed(notification, failure: DeliveryFailed, at, seconds, can_schedule_retry) -> Outcome:
    text = str(failure)
    if not failure.transient or notification.attempts >= MAX_ATTEMPTS:
        if failure.transient:
            text = f"Gave up after {notification.attempts} attempts. Last: {text}"
        _attempt(notification, at, seconds, AttemptOutcome.FAILED, failure.http_status, str(failure))
        _settle(notification, NotificationStatus.FAILED, error=text)
        return Outcome(notification.pk, NotificationStatus.FAILED, message=text)
    delay = backoff(notification.attempts)
    if failure.retry_after:
        delay = max(delay, min(failure.retry_after, MAX_RETRY_AFTER_SECONDS))
    note = f"attempt {notification.attempts + 1} of {MAX_ATTEMPTS} in {delay} s"
    if not can_schedule_retry:
        note += " (no Celery worker: the beat or `manage.py` sends it once it is due)"
    _attempt(notification, at, seconds, AttemptOutcome.RETRY, failure.http_status, text)
    _settle(
        notification,
        NotificationStatus.PENDING,
        error=f"{text} Retrying: {note}.",
        next_attempt_at=timezone.now() + timedelta(seconds=delay),
    )
    return Outcome(notification.pk, NotificationStatus.PENDING, retry_in=delay, message=text)


def _retry_after(value: str | None) -> int | None:
    """A Retry-After header's seconds (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0, int((when - datetime.now(UTC)).total_seconds()))


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_LIMIT else text[: EXCERPT_LIMIT - 1] + "…"


def _send_webhook(notification: Notification, subscription: NotificationSubscription) -> tuple[int, str]:
    url = subscription.url
    allow_private = webhook_allows_private(subscription.allow_private_address)
    try:
        check_destination(url, allow_private=allow_private)
    except ValidationError as error:
        raise DeliveryFailed(" ".join(error.messages), transient=False) from error
    except Unreachable as error:
        raise DeliveryFailed(f"{str(error).capitalize()}.", transient=True) from error
    body = webhook_body(notification)
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        TIMESTAMP_HEADER: timestamp,
        SIGNATURE_HEADER: signature(subscription.secret, timestamp, body),
        EVENT_HEADER: notification.event,
        ID_HEADER: str(notification.uuid),
    }
    client = HttpClient(
        timeout=float(getattr(settings, "RACKPLANE_NOTIFICATION_TIMEOUT", 10)),
        max_bytes=RESPONSE_LIMIT_BYTES,
        follow_redirects=False,
        allow_private=allow_private,  # the connection is vetted again, to the address it connects to
    )
    try:
        response = client.request("POST", url, body, headers=headers)
    except ExternalError as error:
        advice = f" What to do: {error.what_to_do}." if error.what_to_do else ""
        raise DeliveryFailed(f"{str(error).capitalize()}.{advice}", transient=error.transient) from error
    status = f"{response.status} {response.reason}".strip()
    if response.ok:
        return response.status, f"The endpoint answered {status}."
    excerpt = _excerpt(response.text)
    said = f": {excerpt}" if excerpt else ""
    if 300 <= response.status < 400:
        location = response.headers.get("Location", "") if response.headers else ""
        where = f" to {location}" if location else ""
        raise DeliveryFailed(
            f"The endpoint answered {status}, a redirect{where}. Rackplane does "
            "not follow redirects (one could lead into the portal's own network): give the final address.",
            transient=False,
            http_status=response.status,
        )
    if response.transient_failure:
        raise DeliveryFailed(
            f"The endpoint answered {status}{said}.",
            transient=True,
            http_status=response.status,
            retry_after=_retry_after(response.headers.get("Retry-After") if response.headers else None),
        )
    raise DeliveryFailed(
        f"The endpoint refused it with {status}{said}. A refusal is not retried: fix the receiver or the "
        "address (check its signature secret), then send a test notification.",
        transient=False,
        http_status=response.status,
    )


def email_body(notification: Notification) -> str:
    lines = [
        notification.subject,
        "",
        f"Event: {notification.get_event_display()} ({notification.event})",
        f"Time: {notification.created_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC",
    ]
    if notification.scope:
        lines.append(f"About: {', '.join(notification.scope)}")
    if notification.payload:
        lines += ["", "Details:"]
        for key, value in notification.payload.items():
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            lines.append(f"  {key}: {shown}")
    lines += [
        "",
        f"Notification id: {notification.uuid}",
        "You receive this because a Rackplane platform admin subscribed this address to these events.",
    ]
    return "\n".join(lines) + "\n"


def _smtp_transient(error: smtplib.SMTPException) -> bool:
    """4xx SMTP replies are temporary; 5xx and refusals of the sender or recipient are not."""
    if isinstance(error, smtplib.SMTPRecipientsRefused):
        codes = [code for code, _ in error.recipients.values()]
        return bool(codes) and all(400 <= code < 500 for code in codes)
    if isinstance(error, smtplib.SMTPResponseException):
        return 400 <= error.smtp_code < 500
    # Not connected, disconnected, not supported: the server (or the path to it) failed.
    return not isinstance(error, smtplib.SMTPNotSupportedError)


def _send_email(notification: Notification, subscription: NotificationSubscription) -> tuple[None, str]:
    sender = settings.DEFAULT_FROM_EMAIL
    domain = sender.rsplit("@", 1)[-1].strip("> ") if "@" in sender else "rackplane.invalid"
    message = EmailMessage(
        subject=f"[Rackplane] {notification.subject}",
        body=email_body(notification),
        from_email=sender,
        to=[subscription.email],
        headers={
            "Message-ID": f"<{notification.uuid}@{domain}>",
            ID_HEADER: str(notification.uuid),
            EVENT_HEADER: notification.event,
        },
    )
    try:
        message.send(fail_silently=False)
    except smtplib.SMTPException as error:
        raise DeliveryFailed(
            f"The mail server refused or failed: {error}.", transient=_smtp_transient(error)
        ) from error
    except OSError as error:  # refused, timed out, DNS: the mail server could not be reached
        raise DeliveryFailed(
            f"Cannot reach the mail server ({getattr(settings, 'EMAIL_HOST', '')}): {error}.", transient=True
        ) from error
    return None, f"Handed to the mail server for {subscription.email}."


# --- maintenance (beat) ----------------------------------------------------------------------------------


def requeue_stale(now=None) -> list[int]:
    """Notifications claimed longer than STALE_SENDING ago lost their worker: back to pending (at least once:
    the receiver may have had it; it deduplicates by id). Out of attempts: failed."""
    now = now or timezone.now()
    stale = Notification.objects.filter(status=NotificationStatus.SENDING, claimed_at__lt=now - STALE_SENDING)
    requeued = []
    for pk, attempts in stale.values_list("pk", "attempts"):
        row = Notification.objects.filter(pk=pk, status=NotificationStatus.SENDING, attempts=attempts)
        if attempts >= MAX_ATTEMPTS:
            row.update(
                status=NotificationStatus.FAILED,
                claimed_at=None,
                error=f"The worker sending attempt {attempts} of {MAX_ATTEMPTS} was lost: check the Celery "
                "workers.",
            )
        elif row.update(status=NotificationStatus.PENDING, claimed_at=None, next_attempt_at=now):
            requeued.append(pk)
    return requeued


def due(now=None) -> list[int]:
    """Pending notifications to send now: a retry that is due, or a first message that never ran."""
    now = now or timezone.now()
    return list(
        Notification.objects.filter(status=NotificationStatus.PENDING)
        .filter(
            Q(next_attempt_at__lte=now) | Q(next_attempt_at__isnull=True, created_at__lt=now - LOST_PENDING)
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )
