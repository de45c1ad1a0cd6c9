"""No notification twice in one person's bell (core.models.NotificationSubscription.clean, core.notifications
.notify): a second bell subscription with the same scope and an event in common is refused with a sentence
naming the first; a person whose two subscriptions both match one notification gets one inbox item."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from core.models import InboxItem, NotificationChannel, NotificationSubscription
from scheduling.choices import JobEventKind
from scheduling.models import Job
from scheduling.services.actions import notify_job

pytestmark = pytest.mark.django_db

PAGE = "/account/notifications/"


def test_the_same_event_twice_in_the_bell_is_refused_and_nothing_saved(client_as, member_a):
    client = client_as(member_a)
    scope = f"user:{member_a.pk}"
    first = client.post(PAGE, {"channel": "portal", "events": ["job_finished"], "scope": scope})
    assert first.status_code == 302
    again = client.post(
        PAGE, {"channel": "portal", "events": ["job_started", "job_finished"], "scope": scope}
    )
    assert again.status_code == 400
    page = again.content.decode()
    assert "You already hear of job finished about your jobs in the portal" in page
    assert "each notification shows twice" in page
    assert NotificationSubscription.objects.filter(owner=member_a).count() == 1


def test_other_events_or_another_scope_are_not_the_same(client_as, lead_a, department_a):
    client = client_as(lead_a)
    mine = f"user:{lead_a.pk}"
    assert (
        client.post(PAGE, {"channel": "portal", "events": ["job_finished"], "scope": mine}).status_code == 302
    )
    # Another event, same scope: a subscription of its own.
    assert (
        client.post(PAGE, {"channel": "portal", "events": ["job_started"], "scope": mine}).status_code == 302
    )
    # The same event about her department: another scope (notify() still rings the bell once per job).
    department = f"department:{department_a.slug}"
    response = client.post(PAGE, {"channel": "portal", "events": ["job_finished"], "scope": department})
    assert response.status_code == 302
    # Email to her address for the same event: another channel, not the bell.
    response = client.post(
        PAGE, {"channel": "email", "events": ["job_finished"], "scope": mine, "email": "lead@example.org"}
    )
    assert response.status_code == 302
    assert NotificationSubscription.objects.filter(owner=lead_a).count() == 4


def test_clean_refuses_a_twin_saved_any_other_way(member_a, member_b):
    scope = f"user:{member_a.pk}"
    NotificationSubscription.objects.create(
        name="mine", channel=NotificationChannel.PORTAL, events=["job_failed"], owner=member_a, scope=scope
    )
    twin = NotificationSubscription(
        name="again", channel=NotificationChannel.PORTAL, events=["job_failed"], owner=member_a, scope=scope
    )
    with pytest.raises(ValidationError) as refused:
        twin.full_clean()
    assert "“mine”" in refused.value.message_dict["events"][0]
    # Another person's subscription to the same event and an edit of the first are not twins.
    NotificationSubscription(
        name="hers", channel=NotificationChannel.PORTAL, events=["job_failed"], owner=member_b, scope=scope
    ).full_clean()
    NotificationSubscription.objects.get(name="mine").full_clean()


def test_two_matching_subscriptions_ring_the_bell_once(lead_a, department_a):
    """Her jobs and her department's jobs both match a job of hers: one item, not two."""
    for scope in (f"user:{lead_a.pk}", f"department:{department_a.slug}"):
        NotificationSubscription.objects.create(
            name=scope, channel=NotificationChannel.PORTAL, events=["job_finished"], owner=lead_a, scope=scope
        )
    job = Job.objects.create(department=department_a, submitted_by=lead_a, name="train", gpus=4)
    notify_job(job, JobEventKind.COMPLETED, "exit 0")
    assert list(InboxItem.objects.filter(user=lead_a).values_list("subject", flat=True)) == [
        f"Job train (#{job.pk}) finished: exit 0"
    ]
    notify_job(job, JobEventKind.COMPLETED, "exit 0")  # a second notification is a second item
    assert InboxItem.objects.filter(user=lead_a).count() == 2


def test_the_audit_label_of_a_bell_subscription_reads_once(member_a):
    subscription = NotificationSubscription(name="My jobs: job finished", channel=NotificationChannel.PORTAL)
    assert str(subscription) == "My jobs: job finished (in the portal, by the bell)"
    hook = NotificationSubscription(name="pager", channel="webhook", url="https://example.org/hook")
    assert str(hook) == "pager (webhook to https://example.org/hook)"


def test_the_scope_error_names_no_department_that_does_not_exist(client_as, platform_admin, settings):
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = True
    response = client_as(platform_admin).post(
        "/notifications/new/webhook/",
        {
            "name": "pager",
            "url": "http://127.0.0.1:8799/hook",
            "events": ["tray_drained"],
            "scope": "rack gb",
        },
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "department:&lt;slug&gt;" in page and "physics" not in page
    assert not NotificationSubscription.objects.exists()
