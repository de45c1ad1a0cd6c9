"""Leaving revokes at once: a lead removed from a department (or demoted to member)
used to keep hearing of it. Now every path that removes or demotes a membership (the API, the services the
pages and the admin call, an identity provider's sync) removes, in its transaction and audited, the
person's subscriptions and bell items tied to the department; and a notification is checked again when it
is sent, so nothing about a department reaches someone no longer in it."""

import pytest
from django.core import mail

from core.access import Role
from core.audit import audit_context
from core.models import (
    AuditEvent,
    AuditSource,
    InboxItem,
    Notification,
    NotificationChannel,
    NotificationEvent,
    NotificationStatus,
    NotificationSubscription,
)
from core.notifications import delivery, recording, subscriptions
from scheduling.choices import JobEventKind, JobState
from scheduling.services.actions import notify_job
from tenancy.choices import GrantedRole, IdentityProvider
from tenancy.identity import account_for, sync_roles
from tenancy.models import GroupRoleRule, Membership
from tenancy.services import remove_membership, set_membership
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def second_lead(department_a):
    """Another lead of Alpha: lead-a may then be removed (a department keeps a lead)."""
    return factories.make_member("lead-a2", department_a, Role.LEAD)


def bell(owner, scope: str, events, name="bell") -> NotificationSubscription:
    subscription, _ = subscriptions.create_subscription(
        name=name, channel=NotificationChannel.PORTAL, owner=owner, events=list(events), scope=scope
    )
    return subscription


def short_of_guarantee(department) -> None:
    """What scheduling.tasks tells a department's leads (its scope and payload)."""
    recording.notify(
        NotificationEvent.GUARANTEE_SHORT,
        f"{department.name} is 4 GPUs short of its guarantee",
        {"department": department.slug, "short_gpus": 4, "guaranteed": 8},
        scope=f"department:{department.slug}",
    )


def items_of(user) -> list[str]:
    return list(InboxItem.objects.visible_to(user).values_list("subject", flat=True))


def test_a_lead_removed_through_the_api_hears_no_more_of_the_department(
    api_as, department_a, lead_a, second_lead
):
    subscription = bell(lead_a, f"department:{department_a.slug}", [NotificationEvent.GUARANTEE_SHORT])
    short_of_guarantee(department_a)
    assert len(items_of(lead_a)) == 1

    response = api_as(second_lead).delete(f"/api/v1/departments/{department_a.slug}/members/lead-a/")
    assert response.status_code == 204, response.content

    # Their subscription to the department is gone, audited as a deletion by who removed them.
    assert not NotificationSubscription.objects.filter(pk=subscription.pk).exists()
    deleted = AuditEvent.objects.get(
        object_type="core.notificationsubscription", object_id=str(subscription.pk), action="delete"
    )
    assert (deleted.actor, deleted.source) == (second_lead, AuditSource.API)
    # Their bell no longer shows the department's notifications; the removal is audited too.
    assert items_of(lead_a) == []
    forgotten = AuditEvent.objects.get(object_type="core.inboxitem", object_id=str(lead_a.pk))
    assert forgotten.before == {"items": 1, "scope": f"department:{department_a.slug}"}
    assert forgotten.department_id == department_a.pk
    # And the next notification of the department reaches the leads it still has, not them.
    bell(second_lead, f"department:{department_a.slug}", [NotificationEvent.GUARANTEE_SHORT])
    short_of_guarantee(department_a)
    assert items_of(lead_a) == []
    assert len(items_of(second_lead)) == 1


def test_a_lead_demoted_to_member_loses_what_only_leads_hear(department_a, lead_a, second_lead):
    department_scope = bell(lead_a, f"department:{department_a.slug}", [NotificationEvent.GUARANTEE_SHORT])
    own_jobs = bell(lead_a, f"user:{lead_a.pk}", [NotificationEvent.JOB_FINISHED], name="my jobs")
    job = factories.make_job(department_a, state=JobState.COMPLETED, submitted_by=lead_a)
    short_of_guarantee(department_a)
    notify_job(job, JobEventKind.COMPLETED)
    assert len(items_of(lead_a)) == 2

    with audit_context(AuditSource.UI, actor=second_lead):
        set_membership(department_a, "lead-a", Role.MEMBER, by=second_lead)

    assert not NotificationSubscription.objects.filter(pk=department_scope.pk).exists()
    assert NotificationSubscription.objects.filter(pk=own_jobs.pk).exists()  # still a member: their jobs
    assert items_of(lead_a) == [f"Job {job.name} (#{job.pk}) finished"]
    short_of_guarantee(department_a)
    assert len(items_of(lead_a)) == 1


def test_a_member_who_left_hears_nothing_more_of_their_jobs_there(department_a, member_a):
    own_jobs = bell(member_a, f"user:{member_a.pk}", [NotificationEvent.JOB_FINISHED], name="my jobs")
    job = factories.make_job(department_a, state=JobState.COMPLETED, submitted_by=member_a)
    notify_job(job, JobEventKind.COMPLETED)
    assert len(items_of(member_a)) == 1

    remove_membership(Membership.objects.get(user=member_a, department=department_a))

    # Jobs of a department are visible only to its members: what the bell said about them goes ...
    assert items_of(member_a) == []
    # ... and the subscription to their own jobs stays, but hears nothing about that department (checked
    # when the notification is made).
    assert NotificationSubscription.objects.filter(pk=own_jobs.pk).exists()
    notify_job(job, JobEventKind.COMPLETED)
    assert items_of(member_a) == []


def test_delivery_checks_again_when_it_sends(department_a, member_a, settings):
    """An email recorded while they were a member, sent after they left: cancelled, not sent."""
    subscriptions.create_subscription(
        name="my jobs by mail",
        channel=NotificationChannel.EMAIL,
        email="member-a@example.com",
        owner=member_a,
        events=[NotificationEvent.JOB_FINISHED],
        scope=f"user:{member_a.pk}",
    )
    job = factories.make_job(department_a, state=JobState.COMPLETED, submitted_by=member_a)
    notify_job(job, JobEventKind.COMPLETED)
    pending = Notification.objects.get()
    remove_membership(Membership.objects.get(user=member_a, department=department_a))

    outcome = delivery.deliver(pending.pk)
    pending.refresh_from_db()
    assert pending.status == NotificationStatus.CANCELLED == outcome.status
    assert "may no longer see" in pending.error
    assert mail.outbox == []


def test_an_identity_provider_sync_that_drops_the_lead_group_revokes_too(department_a, second_lead):
    GroupRoleRule.objects.create(group="alpha-leads", role=GrantedRole.LEAD, department=department_a)
    user = account_for(IdentityProvider.OIDC, "sub-hedy", "hedy")
    sync_roles(user, ["alpha-leads"], IdentityProvider.OIDC)
    assert Membership.objects.get(user=user, department=department_a).role == Role.LEAD
    subscription = bell(user, f"department:{department_a.slug}", [NotificationEvent.GUARANTEE_SHORT])
    short_of_guarantee(department_a)
    assert len(items_of(user)) == 1

    sync_roles(user, [], IdentityProvider.OIDC)

    assert not Membership.objects.filter(user=user).exists()
    assert not NotificationSubscription.objects.filter(pk=subscription.pk).exists()
    assert items_of(user) == []
    event = AuditEvent.objects.get(object_type="core.notificationsubscription", action="delete")
    assert event.source == IdentityProvider.OIDC
    short_of_guarantee(department_a)
    assert items_of(user) == []


def test_someone_added_back_starts_clean(department_a, lead_a, second_lead):
    bell(lead_a, f"department:{department_a.slug}", [NotificationEvent.GUARANTEE_SHORT])
    short_of_guarantee(department_a)
    remove_membership(Membership.objects.get(user=lead_a, department=department_a))
    short_of_guarantee(department_a)  # while they are away

    set_membership(department_a, "lead-a", Role.LEAD)

    assert not NotificationSubscription.objects.filter(owner=lead_a).exists()
    assert items_of(lead_a) == []
    short_of_guarantee(department_a)  # nothing until they subscribe again
    assert items_of(lead_a) == []


def test_a_platform_admin_keeps_what_they_may_see_anyway(department_a, second_lead):
    admin = factories.make_member("ops-admin", department_a, Role.LEAD, staff=True)
    subscription = bell(admin, f"department:{department_a.slug}", [NotificationEvent.GUARANTEE_SHORT])
    remove_membership(Membership.objects.get(user=admin, department=department_a))
    assert NotificationSubscription.objects.filter(pk=subscription.pk).exists()
    short_of_guarantee(department_a)
    assert len(items_of(admin)) == 1
