"""The bell: a person's own notifications in the portal, read or unread.

core.notifications.recording.notify() calls `deliver` for each enabled subscription of the portal channel that
receives the event: one InboxItem row for the subscription's owner, in the same transaction as the change
(a rolled-back change leaves no item). A person whose subscriptions match one notification twice gets one
item (notify() keeps count of the owners it rang; NotificationSubscription.clean refuses a second bell
subscription with the same scope and an event in common). The header shows `unread_count(user)`; the
inbox page lists them; a GET never marks anything read: `mark_read` runs on a POST, and only ever touches
the caller's own rows.

`forget` removes a person's items about a department they left (core.notifications.subscriptions.
forget_department, called by tenancy.services in the transaction that removes the membership), and says so
in the audit log.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from core import audit
from core.models import AuditAction, AuditEvent, InboxItem

KEEP_DAYS = 90  # read items older than this are deleted by prune()


def deliver(subscription, event: str, subject: str, payload: dict, link: str, now) -> InboxItem:
    return InboxItem.objects.create(
        user_id=subscription.owner_id,
        subscription=subscription,
        event=event,
        subject=subject,
        payload=payload,
        link=(link or "")[:300],
        created_at=now,
    )


def unread_count(user) -> int:
    if not getattr(user, "is_authenticated", False):
        return 0
    return InboxItem.objects.visible_to(user).unread().count()


def mark_read(user, ids: Iterable[int] | None = None) -> int:
    """Mark the user's unread items read: those of `ids`, or all of them (None). Ids of other people's
    items are ignored (nothing of theirs changes). Returns how many were marked."""
    items = InboxItem.objects.visible_to(user).unread()
    if ids is not None:
        items = items.filter(pk__in=list(ids))
    return items.update(read_at=timezone.now())


def forget(user, about: Q, *, scope: str, department_id=None) -> int:
    """Delete `user`'s items matching `about` (read or not), recorded as one audit event (how many, about
    which scope: the items themselves are no audited model). Returns how many."""
    deleted, _ = InboxItem.objects.filter(about, user=user).delete()
    if deleted:
        actor = audit.current_actor()
        AuditEvent.objects.create(
            actor=actor,
            actor_name=actor.get_username() if actor else "",
            source=audit._current().source,  # the request's, task's or sign-in's door, as every event's
            action=AuditAction.DELETE,
            object_type=InboxItem._meta.label_lower,
            object_id=str(user.pk),
            object_repr=f"{deleted} notification(s) of {user.get_username()} about {scope}"[:200],
            department_id=department_id,
            before={"items": deleted, "scope": scope},
            after=None,
        )
    return deleted


def prune(now=None) -> int:
    now = now or timezone.now()
    deleted, _ = InboxItem.objects.filter(
        read_at__isnull=False, created_at__lt=now - timedelta(days=KEEP_DAYS)
    ).delete()
    return deleted
