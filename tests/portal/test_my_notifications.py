"""Users' own notifications (portal.pages.my_notifications, core.inbox, core.notifications): subscriptions
only to
one's own jobs and led departments (other users' ids and other departments refused, nothing saved), events
emitted where they happen and heard only by those they are about, the bell's count, read by POST only."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from core import inbox
from core.models import (
    InboxItem,
    Notification,
    NotificationChannel,
    NotificationEvent,
    NotificationSubscription,
)
from core.notifications import recording, signing
from scheduling.choices import JobEventKind, JobState
from scheduling.services.actions import finish_job, notify_job
from tests.core.notification_receiver import serve

pytestmark = pytest.mark.django_db

PAGE = "/account/notifications/"


def subscribe(client, **data):
    data.setdefault("channel", "portal")
    return client.post(PAGE, data)


def make_job(department, user, name="train-1"):
    from scheduling.models import Job

    return Job.objects.create(department=department, submitted_by=user, name=name, gpus=4)


def test_a_member_subscribes_to_her_jobs_finished_and_hears_only_of_hers(
    client_as, member_a, member_b, department_a, department_b
):
    client = client_as(member_a)
    response = subscribe(client, events=["job_finished"], scope=f"user:{member_a.pk}")
    assert response.status_code == 302
    subscription = NotificationSubscription.objects.get(owner=member_a)
    assert (subscription.channel, subscription.scope, subscription.events) == (
        "portal",
        f"user:{member_a.pk}",
        ["job_finished"],
    )
    mine, theirs = make_job(department_a, member_a, "mine"), make_job(department_b, member_b, "theirs")
    notify_job(mine, JobEventKind.COMPLETED, "exit 0")
    notify_job(theirs, JobEventKind.COMPLETED, "exit 0")
    notify_job(mine, JobEventKind.STARTED)  # not subscribed
    items = list(InboxItem.objects.filter(user=member_a))
    assert [i.subject for i in items] == [f"Job mine (#{mine.pk}) finished: exit 0"]
    assert items[0].link == reverse("scheduling:job-detail", args=[mine.pk])
    assert not InboxItem.objects.filter(user=member_b).exists()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    "scope_of",
    [
        lambda users: f"user:{users['member_b'].pk}",  # another user's id
        lambda users: f"department:{users['department_b'].slug}",  # a department she does not lead
        lambda users: "",  # everything: admins only
        lambda users: "rack:gb-r01",
    ],
)
def test_other_users_ids_and_departments_are_refused(
    scope_of, client_as, member_a, member_b, department_b, lead_a
):
    users = {"member_b": member_b, "department_b": department_b}
    response = subscribe(client_as(member_a), events=["job_finished"], scope=scope_of(users))
    assert response.status_code == 400
    assert NotificationSubscription.objects.count() == 0


def test_a_member_may_not_choose_department_or_push_events(client_as, member_a):
    for event in ("guarantee_short", "push_failed"):
        response = subscribe(client_as(member_a), events=[event], scope=f"user:{member_a.pk}")
        assert response.status_code == 400
    assert NotificationSubscription.objects.count() == 0


def test_a_lead_subscribes_to_her_department_and_not_another(client_as, lead_a, department_a, department_b):
    client = client_as(lead_a)
    ok = subscribe(client, events=["guarantee_short", "job_failed"], scope=f"department:{department_a.slug}")
    assert ok.status_code == 302
    refused = subscribe(client, events=["guarantee_short"], scope=f"department:{department_b.slug}")
    assert refused.status_code == 400
    assert NotificationSubscription.objects.filter(owner=lead_a).count() == 1
    page = client.get(PAGE).content.decode()
    assert f'value="department:{department_a.slug}"' in page and department_b.slug not in page


def test_owned_subscription_without_scope_hears_nothing_unless_admin(member_a, platform_admin):
    for owner in (member_a, platform_admin):
        NotificationSubscription.objects.create(
            name="all", channel=NotificationChannel.PORTAL, events=["push_failed"], owner=owner
        )
    recording.notify(NotificationEvent.PUSH_FAILED, "Push #1 to local failed", scope=["target:local"])
    assert list(InboxItem.objects.values_list("user", flat=True)) == [platform_admin.pk]


def test_finishing_a_job_notifies_through_finish_job(member_a, department_a):
    NotificationSubscription.objects.create(
        name="mine",
        channel=NotificationChannel.PORTAL,
        events=["job_failed"],
        owner=member_a,
        scope=f"user:{member_a.pk}",
    )
    job = make_job(department_a, member_a)
    job.state = JobState.RUNNING
    job.save()
    finish_job(job, JobState.FAILED, "exit code 3", exit_code=3)
    assert InboxItem.objects.get(user=member_a).subject == f"Job train-1 (#{job.pk}) failed: exit code 3"


def test_a_job_cancelled_by_a_lead_is_heard_by_its_submitter_not_their_own_cancel(
    client_as, member_a, lead_a, department_a, django_capture_on_commit_callbacks
):
    from scheduling.services.actions import cancel_job

    NotificationSubscription.objects.create(
        name="mine",
        channel=NotificationChannel.PORTAL,
        events=["job_cancelled"],
        owner=member_a,
        scope=f"user:{member_a.pk}",
    )
    own = make_job(department_a, member_a)
    with django_capture_on_commit_callbacks(execute=True):
        cancel_job(own, member_a)
    assert not InboxItem.objects.filter(user=member_a).exists()  # their own cancel: no notice
    job = make_job(department_a, member_a, name="train-2")
    with django_capture_on_commit_callbacks(execute=True):
        cancel_job(job, lead_a)
    assert InboxItem.objects.get(user=member_a).subject == (
        f"Job train-2 (#{job.pk}) was cancelled: cancelled by lead-a while pending"
    )
    assert 'value="job_cancelled"' in client_as(member_a).get(PAGE).content.decode()


def test_idle_threshold_is_heard_when_crossed(lead_a, department_a):
    NotificationSubscription.objects.create(
        name="idle",
        channel=NotificationChannel.PORTAL,
        events=["idle_gpus"],
        owner=lead_a,
        scope=f"department:{department_a.slug}",
        threshold=8,
    )
    scope = f"department:{department_a.slug}"
    for idle, before in ((6, 0), (12, 6), (16, 12)):
        recording.notify(
            NotificationEvent.IDLE_GPUS,
            f"{idle} idle",
            {"idle_gpus": idle, "previous_idle_gpus": before},
            scope=scope,
        )
    assert list(InboxItem.objects.values_list("subject", flat=True)) == ["12 idle"]


@pytest.fixture
def receiver(settings):
    """A real HTTP server on 127.0.0.1 (tests/core/notification_receiver.py), allowed as in development."""
    settings.RACKPLANE_NOTIFICATION_ALLOW_PRIVATE_TARGETS = True
    with serve() as running:
        yield running


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_webhook_and_email_subscriptions_deliver_through_the_existing_mechanism(
    client_as, member_a, department_a, receiver, mailoutbox, django_capture_on_commit_callbacks
):
    client = client_as(member_a)
    response = subscribe(
        client, channel="email", email="a@example.org", events=["job_started"], scope=f"user:{member_a.pk}"
    )
    assert response.status_code == 302
    response = subscribe(
        client, channel="webhook", url=receiver.url, events=["job_started"], scope=f"user:{member_a.pk}"
    )
    assert response.status_code == 200
    secret = re.search(r"rpwh_[A-Za-z0-9_-]+", response.content.decode()).group(0)  # shown once
    job = make_job(department_a, member_a)
    with django_capture_on_commit_callbacks(execute=True):
        notify_job(job, JobEventKind.STARTED, "running on Slurm as 41")
    sent = Notification.objects.order_by("channel")
    assert [(n.channel, n.event, n.status) for n in sent] == [
        ("email", "job_started", "delivered"),
        ("webhook", "job_started", "delivered"),
    ]
    assert mailoutbox[0].to == ["a@example.org"] and "Job train-1" in mailoutbox[0].subject
    [request] = receiver.requests
    body = json.loads(request.body)
    assert body["event"] == "job_started" and body["payload"]["job"] == job.pk
    assert signing.verify_signature(
        secret, request.body, request.header("X-Rackplane-Timestamp"), request.header("X-Rackplane-Signature")
    )


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_bell_count_and_mark_read_by_post_only(client_as, member_a, member_b):
    NotificationSubscription.objects.create(
        name="mine",
        channel=NotificationChannel.PORTAL,
        events=["job_finished"],
        owner=member_a,
        scope=f"user:{member_a.pk}",
    )
    sub_b = NotificationSubscription.objects.create(
        name="b",
        channel=NotificationChannel.PORTAL,
        events=["job_finished"],
        owner=member_b,
        scope=f"user:{member_b.pk}",
    )
    for n in range(3):
        recording.notify("job_finished", f"job {n} finished", scope=[f"user:{member_a.pk}"])
    recording.notify("job_finished", "b's job finished", scope=[f"user:{member_b.pk}"])
    client = client_as(member_a)
    home = client.get("/").content.decode()
    assert 'hx-get="/account/inbox/bell/" hx-trigger="load, every 60s"' in home  # the count comes by itself
    bell = client.get("/account/inbox/bell/").content.decode()
    assert '<span class="bell-count" data-bell-count>3</span>' in bell and "has-unread" in bell
    page = client.get("/account/inbox/").content.decode()
    assert '<span class="bell-count" data-bell-count>3</span>' in page
    assert inbox.unread_count(member_a) == 3  # the GET marked nothing read
    assert client.get("/account/inbox/read/").status_code == 405
    theirs = InboxItem.objects.get(subscription=sub_b)
    first = InboxItem.objects.filter(user=member_a).order_by("pk").first()
    response = client.post("/account/inbox/read/", {"item": [first.pk, theirs.pk]})
    assert response.status_code == 302
    assert inbox.unread_count(member_a) == 2 and inbox.unread_count(member_b) == 1  # theirs untouched
    client.post("/account/inbox/read/", {"all": "1"})
    assert inbox.unread_count(member_a) == 0 and inbox.unread_count(member_b) == 1
    assert (
        '<span class="bell-count" data-bell-count>0</span>' in client.get("/account/inbox/").content.decode()
    )
    assert "b's job finished" not in client.get("/account/inbox/").content.decode()


def test_pages_need_sign_in(client):
    assert client.get(PAGE).status_code == 302
    assert client.get("/account/inbox/bell/").status_code == 302
    assert client.get("/account/inbox/").status_code == 302


def test_the_choice_groups_are_fieldsets_with_a_legend(client_as, member_a):
    """The walkthrough: the events and how groups had a <label for=""> (a group of inputs has no one id), so
    screen readers read no name for them; each group is now a fieldset named by its legend."""
    html = client_as(member_a).get(PAGE).content.decode()
    assert 'for=""' not in html
    for legend in ("How", "Events"):
        assert re.search(rf'<fieldset class="field choice-group">\s*<legend>{legend}</legend>', html), legend
    assert '<label for="id_scope">About</label>' in html


def test_the_subscriptions_list_names_events_as_the_form_does(client_as, member_a):
    """The walkthrough's bob: the list read "job_started, job_preempted, ..." (the codes)."""
    client = client_as(member_a)
    subscribe(client, events=["job_started", "job_cancelled"], scope=f"user:{member_a.pk}")
    html = client.get(PAGE).content.decode()
    cell = re.search(r'<span class="event-labels">(.*?)</span>', html).group(1)
    assert cell == "Job started, Job cancelled by someone else" and "job_started" not in cell
    ja = client.get(PAGE, HTTP_ACCEPT_LANGUAGE="ja").content.decode()
    assert "Job started" not in re.search(r'<span class="event-labels">(.*?)</span>', ja).group(1)
