"""Department and project memberships share one shape and one visibility rule (tenancy.models.MembershipBase,
MembershipRuleQuerySet): admins see all, a department's leads see its people and its projects' people,
anyone else the people of the departments and projects they belong to (never another department's)."""

import pytest
from django.db import IntegrityError, transaction

from tenancy.choices import RoleOrigin
from tenancy.models import Membership, Project, ProjectMembership

pytestmark = pytest.mark.django_db


@pytest.fixture
def placed(department_a, department_b, lead_a, member_a, lead_b, member_b):
    vision = Project.objects.create(department=department_a, name="Vision", slug="vision")
    speech = Project.objects.create(department=department_b, name="Speech", slug="speech")
    return {
        "a": ProjectMembership.objects.create(user=member_a, project=vision),
        "lead_a": ProjectMembership.objects.create(user=lead_a, project=vision, role="lead"),
        "b": ProjectMembership.objects.create(user=member_b, project=speech),
    }


def usernames(queryset) -> set[str]:
    return {m.user.username for m in queryset}


def test_both_memberships_follow_one_rule(placed, platform_admin, lead_a, member_a, member_b, outsider):
    assert usernames(Membership.objects.visible_to(platform_admin)) == {
        "lead-a",
        "member-a",
        "lead-b",
        "member-b",
    }
    assert usernames(ProjectMembership.objects.visible_to(platform_admin)) == {
        "lead-a",
        "member-a",
        "member-b",
    }
    # A lead: their department's people, in it and in its projects; not another department's.
    assert usernames(Membership.objects.visible_to(lead_a)) == {"lead-a", "member-a"}
    assert usernames(ProjectMembership.objects.visible_to(lead_a)) == {"lead-a", "member-a"}
    # A member: the people of their own department and projects, not another department's.
    assert usernames(Membership.objects.visible_to(member_a)) == {"lead-a", "member-a"}
    assert usernames(Membership.objects.visible_to(member_b)) == {"lead-b", "member-b"}
    assert set(ProjectMembership.objects.visible_to(member_a)) == {placed["a"], placed["lead_a"]}
    assert list(ProjectMembership.objects.visible_to(member_b)) == [placed["b"]]
    assert not Membership.objects.visible_to(outsider).exists()
    assert not ProjectMembership.objects.visible_to(outsider).exists()


def test_the_shared_fields_read_and_constrain_as_before(placed, member_a, department_a):
    membership = Membership.objects.get(user=member_a)
    assert membership.origin == RoleOrigin.MANUAL and membership.created_at is not None
    assert str(membership) == f"member-a (Department member, {department_a})"
    assert str(placed["lead_a"]) == f"lead-a (Project lead, {placed['lead_a'].project})"
    assert placed["a"].origin == RoleOrigin.MANUAL and placed["a"].department_id == department_a.pk
    for model, field in (
        (Membership, "tenancy_membership_unique_member"),
        (ProjectMembership, "tenancy_projectmembership_unique_member"),
    ):
        assert [c.name for c in model._meta.constraints] == [field]
    with pytest.raises(IntegrityError), transaction.atomic():
        ProjectMembership.objects.create(user=member_a, project=placed["a"].project)
    with pytest.raises(IntegrityError), transaction.atomic():
        Membership.objects.create(user=member_a, department=department_a)
