"""The periodic quota snapshot tells leads when their department falls short of its guarantee or its idle GPUs
rise (core.notifications, scope department:<slug>): once per change, and only those subscribed to it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from core.access import Role
from core.models import InboxItem, NotificationChannel, NotificationSubscription
from scheduling.tasks import record_quota_snapshots
from tests.factories import make_member
from tests.scheduling.test_snapshots import departments  # noqa: F401  (Alpha 2 idle, Beta 4 GPUs short)

pytestmark = pytest.mark.django_db


def subscribe(owner, department, events, **extra):
    return NotificationSubscription.objects.create(
        name=f"{department.slug} {events}",
        channel=NotificationChannel.PORTAL,
        events=events,
        owner=owner,
        scope=f"department:{department.slug}",
        **extra,
    )


def test_shortfall_and_idle_are_told_once_to_the_departments_subscribers(departments, django_user_model):  # noqa: F811
    alpha, beta, _ = departments
    lead_alpha = make_member("lead-alpha", alpha, Role.LEAD)  # a department's notices go to its leads
    lead_beta = make_member("lead-beta", beta, Role.LEAD)
    subscribe(lead_alpha, alpha, ["guarantee_short", "idle_gpus"])
    subscribe(lead_beta, beta, ["guarantee_short", "idle_gpus"])
    now = timezone.now()
    record_quota_snapshots(now=now - timedelta(minutes=5))
    record_quota_snapshots(now=now)  # nothing changed: nothing told again
    assert list(InboxItem.objects.filter(user=lead_beta).values_list("subject", flat=True)) == [
        "Beta is 4 GPUs short of its guarantee of 8: its jobs wait while others hold those GPUs"
    ]
    assert list(InboxItem.objects.filter(user=lead_alpha).values_list("subject", flat=True)) == [
        "Alpha has 2 idle GPUs"
    ]
    item = InboxItem.objects.get(user=lead_beta)
    assert item.link == f"/tenancy/departments/{beta.slug}/" and item.payload["short_gpus"] == 4


def test_idle_threshold_not_crossed_is_not_told(departments, django_user_model):  # noqa: F811
    alpha, _, _ = departments
    lead = make_member("lead-alpha", alpha, Role.LEAD)
    subscribe(lead, alpha, ["idle_gpus"], threshold=4)
    record_quota_snapshots()
    assert not InboxItem.objects.exists()
