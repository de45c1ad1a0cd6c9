"""The group-to-role rules (tenancy.identity), without a server: what a sign-in's groups give and take away,
what they leave alone (roles granted by hand, groups outside the prefix), how accounts are found and never
taken over, and that every change is audited with the provider as its source."""

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from core.access import Role, is_admin, leads
from core.models import AuditEvent
from tenancy.choices import GrantedRole, IdentityProvider, RoleOrigin
from tenancy.identity import SignInRefused, account_for, groups_in_scope, sync_roles
from tenancy.models import ExternalIdentity, GroupRoleRule, Membership
from tenancy.services import set_membership
from tests.factories import make_department, make_user

pytestmark = pytest.mark.django_db

OIDC = IdentityProvider.OIDC
LDAP = IdentityProvider.LDAP


@pytest.fixture
def rules(department_a, department_b):
    """rackplane-alpha-leads -> lead of Alpha, rackplane-alpha -> member of Alpha, rackplane-beta -> member of
    Beta, rackplane-admins -> platform admin."""
    made = [
        GroupRoleRule.objects.create(
            group="rackplane-alpha-leads", role=GrantedRole.LEAD, department=department_a
        ),
        GroupRoleRule.objects.create(
            group="rackplane-alpha", role=GrantedRole.MEMBER, department=department_a
        ),
        GroupRoleRule.objects.create(
            group="rackplane-beta", role=GrantedRole.MEMBER, department=department_b
        ),
        GroupRoleRule.objects.create(group="rackplane-admins", role=GrantedRole.PLATFORM_ADMIN),
    ]
    return made


def signed_in(username="ada", provider=OIDC, subject=None):
    return account_for(provider, subject or f"sub-{username}", username, email=f"{username}@example.org")


def roles_of(user) -> dict[str, tuple[str, str]]:
    return {
        m.department.slug: (m.role, m.origin)
        for m in Membership.objects.filter(user=user).select_related("department")
    }


def test_only_groups_with_the_prefix_are_considered():
    groups = ["payroll", "rackplane-alpha", "rackplane-admins", "rackplane-alpha", 42, None, "RACKPLANE-x"]
    assert groups_in_scope(groups, "rackplane-") == ["rackplane-admins", "rackplane-alpha"]
    assert groups_in_scope(["b", "a"], "") == ["a", "b"]


def test_groups_give_roles_and_the_highest_role_in_a_department_wins(rules, department_a, department_b):
    user = signed_in()
    result = sync_roles(
        user, ["rackplane-alpha", "rackplane-alpha-leads", "rackplane-beta"], OIDC, "rackplane-"
    )
    assert roles_of(user) == {"alpha": ("lead", "oidc"), "beta": ("member", "oidc")}
    assert leads(user, department_a) and not leads(user, department_b)
    assert not is_admin(user)
    assert sorted(result.added) == [
        "department lead of Alpha (group rackplane-alpha-leads)",
        "department member of Beta (group rackplane-beta)",
    ]


def test_a_group_outside_the_prefix_gives_nothing_even_with_a_rule(department_a):
    GroupRoleRule.objects.create(group="payroll", role=GrantedRole.MEMBER, department=department_a)
    user = signed_in()
    sync_roles(user, ["payroll"], OIDC, "rackplane-")
    assert roles_of(user) == {}
    sync_roles(user, ["payroll"], OIDC, "")  # no prefix: every group counts
    assert roles_of(user) == {"alpha": ("member", "oidc")}


def test_roles_follow_the_groups_at_each_sign_in_and_go_when_the_group_is_gone(rules):
    user = signed_in()
    sync_roles(user, ["rackplane-alpha", "rackplane-beta"], OIDC, "rackplane-")
    assert roles_of(user) == {"alpha": ("member", "oidc"), "beta": ("member", "oidc")}

    result = sync_roles(user, ["rackplane-alpha-leads"], OIDC, "rackplane-")  # promoted, left Beta
    assert roles_of(user) == {"alpha": ("lead", "oidc")}
    assert result.changed == ["department lead of Alpha (group rackplane-alpha-leads)"]
    assert result.removed == ["department member of Beta"]

    sync_roles(user, [], OIDC, "rackplane-")
    assert roles_of(user) == {}  # even the only lead of Alpha: the provider's groups decide


def test_a_role_granted_by_hand_stays_whatever_the_groups_say(rules, department_a, department_b):
    user = signed_in()
    set_membership(department_b, "ada", Role.LEAD)  # by hand
    sync_roles(user, ["rackplane-beta", "rackplane-alpha"], OIDC, "rackplane-")
    assert roles_of(user) == {"alpha": ("member", "oidc"), "beta": ("lead", "manual")}
    sync_roles(user, [], OIDC, "rackplane-")
    assert roles_of(user) == {"beta": ("lead", "manual")}


def test_a_change_by_hand_makes_a_provider_role_a_hand_grant(rules, department_a):
    user = signed_in()
    sync_roles(user, ["rackplane-alpha"], OIDC, "rackplane-")
    set_membership(department_a, "ada", Role.LEAD)  # a lead or admin changes it on the portal
    sync_roles(user, [], OIDC, "rackplane-")
    assert roles_of(user) == {"alpha": ("lead", "manual")}


def test_one_provider_leaves_the_roles_of_the_other_alone(rules):
    user = signed_in()
    ExternalIdentity.objects.create(provider=LDAP, subject="uid=ada,ou=people,dc=x", user=user)
    sync_roles(user, ["rackplane-alpha"], LDAP, "rackplane-")
    sync_roles(user, ["rackplane-beta"], OIDC, "rackplane-")
    assert roles_of(user) == {"alpha": ("member", "ldap"), "beta": ("member", "oidc")}
    sync_roles(user, [], OIDC, "rackplane-")
    assert roles_of(user) == {"alpha": ("member", "ldap")}


def test_platform_admin_from_a_group_is_granted_and_revoked_but_a_hand_made_admin_stays(rules):
    user = signed_in()
    assert sync_roles(user, ["rackplane-admins"], OIDC, "rackplane-").admin == "granted"
    user.refresh_from_db()
    assert is_admin(user) and user.is_superuser
    assert ExternalIdentity.objects.get(user=user).granted_admin
    assert sync_roles(user, ["rackplane-admins"], OIDC, "rackplane-").admin == "unchanged"
    assert sync_roles(user, [], OIDC, "rackplane-").admin == "revoked"
    user.refresh_from_db()
    assert not is_admin(user)

    boss = make_user("boss", staff=True)  # an admin by hand
    ExternalIdentity.objects.create(provider=OIDC, subject="sub-boss", user=boss)
    assert sync_roles(boss, ["rackplane-admins"], OIDC, "rackplane-").admin == "by hand"
    assert sync_roles(boss, [], OIDC, "rackplane-").admin == "unchanged"
    boss.refresh_from_db()
    assert is_admin(boss)


def test_every_change_is_audited_with_the_provider_as_source(rules):
    user = signed_in()
    sync_roles(user, ["rackplane-alpha-leads", "rackplane-admins"], OIDC, "rackplane-")
    sync_roles(user, [], OIDC, "rackplane-")
    events = list(
        AuditEvent.objects.order_by("pk").values_list("source", "action", "object_type", "actor_name")
    )
    membership = [e for e in events if e[2] == "tenancy.membership"]
    admin = [e for e in events if e[2] == "auth.user"]
    assert membership == [
        ("oidc", "create", "tenancy.membership", "ada"),
        ("oidc", "delete", "tenancy.membership", "ada"),
    ]
    assert admin == [("oidc", "update", "auth.user", "ada"), ("oidc", "update", "auth.user", "ada")]
    created = AuditEvent.objects.filter(object_type="tenancy.membership", action="create").get()
    assert created.after["origin"] == "oidc" and created.after["role"] == "lead"
    # A sign-in that changes nothing records nothing.
    before = AuditEvent.objects.count()
    sync_roles(user, [], OIDC, "rackplane-")
    assert AuditEvent.objects.count() == before


def test_the_groups_and_time_of_the_last_sign_in_are_kept(rules):
    user = signed_in()
    sync_roles(user, ["payroll", "rackplane-beta"], OIDC, "rackplane-")
    link = ExternalIdentity.objects.get(user=user)
    assert link.groups == ["rackplane-beta"] and link.last_sign_in_at is not None


def test_accounts_are_found_by_the_providers_identifier_not_by_name():
    first = account_for(OIDC, "sub-1", "ada", email="ada@example.org", first_name="Ada")
    assert first.has_usable_password() is False and first.first_name == "Ada"
    again = account_for(OIDC, "sub-1", "ada-renamed", email="ada@new.example.org")
    assert again == first
    again.refresh_from_db()
    assert again.username == "ada" and again.email == "ada@new.example.org"


def test_an_existing_account_of_the_same_name_is_never_taken_over():
    local = make_user("grace", staff=True)
    with pytest.raises(SignInRefused, match="already exists and is not linked"):
        account_for(OIDC, "sub-evil", "Grace")  # case-insensitive
    assert not ExternalIdentity.objects.exists()
    # A platform admin links them: then it is that account.
    ExternalIdentity.objects.create(provider=OIDC, subject="sub-grace", user=local)
    assert account_for(OIDC, "sub-grace", "grace") == local


def test_an_unusable_username_or_no_account_creation_refuses():
    with pytest.raises(SignInRefused, match="cannot be a Rackplane user name"):
        account_for(OIDC, "sub-x", "ada lovelace")
    with pytest.raises(SignInRefused, match="does not make them"):
        account_for(OIDC, "sub-y", "ada", create=False)
    assert not get_user_model().objects.exists()


def test_a_rule_names_a_department_exactly_when_it_gives_a_department_role(department_a):
    for rule in (
        GroupRoleRule(group="g", role=GrantedRole.PLATFORM_ADMIN, department=department_a),
        GroupRoleRule(group="g", role=GrantedRole.LEAD, department=None),
    ):
        with pytest.raises(ValidationError, match="platform admin rule names no department"):
            rule.full_clean()
    GroupRoleRule.objects.create(group="g", role=GrantedRole.MEMBER, department=department_a)
    with pytest.raises(ValidationError, match="already has a rule for this department"):
        GroupRoleRule(group="g", role=GrantedRole.LEAD, department=department_a).full_clean()
    with transaction.atomic(), pytest.raises(IntegrityError):
        GroupRoleRule.objects.create(group="g", role=GrantedRole.LEAD, department=department_a)
    other = make_department("Gamma")
    GroupRoleRule(group="g", role=GrantedRole.LEAD, department=other).full_clean()


def test_memberships_made_by_hand_are_recorded_as_such(department_a, member_a):
    membership = Membership.objects.get(user=member_a)
    assert membership.origin == RoleOrigin.MANUAL
    assert set_membership(department_a, "member-a", Role.LEAD).origin == RoleOrigin.MANUAL


def test_platform_admins_edit_the_rules_and_link_identities_in_the_django_admin(
    client_as, admin_user, department_a
):
    client = client_as(admin_user)
    response = client.post(
        "/admin/tenancy/grouprolerule/add/",
        {
            "group": "rackplane-alpha-leads",
            "role": "lead",
            "department": department_a.pk,
            "description": "leads",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    rule = GroupRoleRule.objects.get()
    assert str(rule) == "rackplane-alpha-leads -> department lead of Alpha"
    assert AuditEvent.objects.filter(
        object_type="tenancy.grouprolerule", action="create", source="admin"
    ).exists()
    refused = client.post(
        "/admin/tenancy/grouprolerule/add/",
        {"group": "g", "role": "platform_admin", "department": department_a.pk},
    )
    assert (
        refused.status_code == 200 and "A platform admin rule names no department" in refused.content.decode()
    )
    assert "rackplane-alpha-leads" in client.get("/admin/tenancy/grouprolerule/").content.decode()

    existing = make_user("grace")
    response = client.post(
        "/admin/tenancy/externalidentity/add/",
        {"provider": "oidc", "subject": "sub-grace", "user": existing.pk},
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    assert account_for(OIDC, "sub-grace", "grace") == existing
