"""Recording notifications: `notify` writes one row per subscription that hears it (or a bell item for the
portal channel) and sends each after the transaction commits (core.notifications.delivery)."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from core import inbox
from core.access import Role, is_admin
from core.enqueue import enqueue
from core.models import Notification, NotificationChannel, NotificationEvent, NotificationSubscription
from core.task_names import DELIVER_NOTIFICATION

logger = logging.getLogger(__name__)


MAX_PAYLOAD_BYTES = 64 * 1024


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
    (portal.pages.my_notifications checks it when saved); one without a scope hears nothing unless its owner
    is a
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
        if not owner_may_see(subscription, scopes, roles):
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


def owner_may_see(subscription, scopes, roles: dict | None = None) -> bool:
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
    enqueue(DELIVER_NOTIFICATION, notification.pk)
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
