"""Sending one notification by its channel: a signed webhook POST (core.notifications.signing) or an email
through Django's email backend. A failure raises DeliveryFailed, transient (retried) or not."""

from __future__ import annotations

import email.utils
import json
import smtplib
import time
from datetime import UTC, datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage

from core.destinations import check_destination, webhook_allows_private
from core.errors import ExternalError, Unreachable
from core.http import HttpClient
from core.models import Notification, NotificationSubscription
from core.notifications.signing import (
    EVENT_HEADER,
    ID_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    signature,
    webhook_body,
)

USER_AGENT = "Rackplane-Notifications/1"


RESPONSE_LIMIT_BYTES = 1024 * 1024  # a receiver's answer is not used: only so much is read


EXCERPT_LIMIT = 300  # characters of a receiver's answer quoted in a message


class DeliveryFailed(Exception):
    def __init__(
        self, message: str, *, transient: bool, http_status: int | None = None, retry_after: int | None = None
    ):
        super().__init__(message)
        self.transient = transient
        self.http_status = http_status
        self.retry_after = retry_after


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


def send_webhook(notification: Notification, subscription: NotificationSubscription) -> tuple[int, str]:
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


def send_email(notification: Notification, subscription: NotificationSubscription) -> tuple[None, str]:
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
