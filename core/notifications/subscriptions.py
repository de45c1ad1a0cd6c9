"""Subscriptions: making them (a webhook's signing secret, shown once) and forgetting what tied a person to a
department they left."""

from __future__ import annotations

import logging
import secrets

from django.core.exceptions import ValidationError
from django.db.models import Q
from django.utils import timezone

from core import inbox
from core.access import is_admin
from core.models import NotificationChannel, NotificationSubscription
from core.notifications.recording import DEPARTMENT_SCOPE

logger = logging.getLogger(__name__)


SECRET_PREFIX = "rpwh_"


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
