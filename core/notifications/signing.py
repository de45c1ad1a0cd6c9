"""Signing webhooks: the headers, the HMAC-SHA256 signature of "<timestamp>." + body, a receiver's check
(a reference; docs/notifications.md has it standalone) and the body itself."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from datetime import UTC

from core.models import Notification

SIGNATURE_HEADER = "X-Rackplane-Signature"
TIMESTAMP_HEADER = "X-Rackplane-Timestamp"
EVENT_HEADER = "X-Rackplane-Event"
ID_HEADER = "X-Rackplane-Notification"


SIGNATURE_TOLERANCE_SECONDS = 300


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
