"""Identity-provider groups give project roles (GroupRoleRule.project, tenancy.identity): a group mapped to a
project's lead or member role gives it at sign-in (with membership of the project's department), the role
goes when the group is gone, and project roles granted by hand stay. First without a server (sync_roles),
then through the real OpenID Provider and LDAP directory of scripts/idp-testbed.sh."""

from urllib.parse import urlparse

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from core.access import Role
from core.models import AuditEvent
from tenancy.choices import GrantedRole, IdentityProvider
from tenancy.identity import account_for, sync_roles
from tenancy.models import ExternalIdentity, GroupRoleRule, Membership, Project, ProjectMembership
from tenancy.projects import move_member, set_project_member
from tests.factories import make_user

OIDC = IdentityProvider.OIDC
LDAP = IdentityProvider.LDAP
CALLBACK = "http://testserver/oidc/callback/"
OIDC_PASSWORD = "hedy-oidc-password-1"
LDAP_PASSWORD = "ada-ldap-password-1"  # testbed/ldap/directory.ldif


@pytest.fixture
def projects(department_a, department_b):
    """Alpha's projects vision and speech, Beta's project robotics."""
    return {
        "vision": Project.objects.create(department=department_a, name="Vision", slug="vision"),
        "speech": Project.objects.create(department=department_a, name="Speech", slug="speech"),
        "robotics": Project.objects.create(department=department_b, name="Robotics", slug="robotics"),
    }


@pytest.fixture
def project_rules(projects, department_a):
    """rackplane-vision-leads -> project lead of Alpha / Vision, rackplane-speech -> project member of
    Alpha / Speech."""
    GroupRoleRule.objects.create(
        group="rackplane-vision-leads",
        role=GrantedRole.LEAD,
        department=department_a,
        project=projects["vision"],
    )
    GroupRoleRule.objects.create(
        group="rackplane-speech", role=GrantedRole.MEMBER, department=department_a, project=projects["speech"]
    )


def signed_in(username="ada", provider=OIDC):
    return account_for(provider, f"sub-{username}", username)


def department_roles(username) -> set[tuple[str, str, str]]:
    return {
        (m.department.slug, m.role, m.origin)
        for m in Membership.objects.filter(user__username=username).select_related("department")
    }


def project_roles(username) -> set[tuple[str, str, str]]:
    return {
        (m.project.slug, m.role, m.origin)
        for m in ProjectMembership.objects.filter(user__username=username).select_related("project")
    }


# --- the rule ---------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_project_rule_names_a_project_of_its_own_department(projects, department_a, department_b):
    rule = GroupRoleRule(
        group="rackplane-x", role=GrantedRole.LEAD, department=department_b, project=projects["vision"]
    )
    with pytest.raises(ValidationError) as refused:
        rule.full_clean()
    assert "is not a project of Beta" in str(refused.value.message_dict["project"])

    with pytest.raises(IntegrityError), transaction.atomic():  # the project without its department
        GroupRoleRule.objects.create(group="rackplane-x", role=GrantedRole.LEAD, project=projects["vision"])
    with pytest.raises(IntegrityError), transaction.atomic():  # no platform admin of a project
        GroupRoleRule.objects.create(
            group="rackplane-x", role=GrantedRole.PLATFORM_ADMIN, project=projects["vision"]
        )

    rule.department = department_a
    rule.full_clean()
    rule.save()
    assert str(rule) == "rackplane-x -> project lead of Alpha / Vision"
    # One rule per group and project; the same group may still give a department role beside it.
    with pytest.raises(ValidationError, match="already has a rule for this project"):
        GroupRoleRule(
            group="rackplane-x", role=GrantedRole.MEMBER, department=department_a, project=projects["vision"]
        ).full_clean()
    GroupRoleRule(group="rackplane-x", role=GrantedRole.MEMBER, department=department_a).full_clean()


# --- sync_roles, without a server ------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_project_group_gives_the_project_role_and_department_membership(project_rules):
    user = signed_in()
    result = sync_roles(user, ["rackplane-vision-leads", "rackplane-speech"], OIDC, "rackplane-")
    assert department_roles("ada") == {("alpha", Role.MEMBER, "oidc")}
    assert project_roles("ada") == {("vision", "lead", "oidc"), ("speech", "member", "oidc")}
    assert "project lead of Alpha / Vision (group rackplane-vision-leads)" in result.added
    assert (
        AuditEvent.objects.filter(object_type="tenancy.projectmembership", source="oidc", actor=user).count()
        == 2
    )

    # The lead group gone: that project role goes, the other stays; both gone: the department goes too.
    result = sync_roles(user, ["rackplane-speech"], OIDC, "rackplane-")
    assert project_roles("ada") == {("speech", "member", "oidc")}
    assert result.removed == ["project lead of Alpha / Vision"]
    sync_roles(user, [], OIDC, "rackplane-")
    assert project_roles("ada") == set() and department_roles("ada") == set()


@pytest.mark.django_db
def test_the_department_page_marks_project_roles_from_a_provider(client, project_rules, lead_a):
    sync_roles(signed_in(), ["rackplane-speech"], OIDC, "rackplane-")
    client.force_login(lead_a)
    page = client.get("/tenancy/departments/alpha/").content.decode()
    assert 'data-username="ada">ada <span class="muted role-origin"' in page
    assert "from OpenID Connect group" in page


@pytest.mark.django_db
def test_a_department_lead_group_beside_a_project_group_keeps_the_department_lead(
    project_rules, department_a
):
    GroupRoleRule.objects.create(
        group="rackplane-alpha-leads", role=GrantedRole.LEAD, department=department_a
    )
    user = signed_in()
    sync_roles(user, ["rackplane-alpha-leads", "rackplane-speech"], OIDC, "rackplane-")
    assert department_roles("ada") == {("alpha", "lead", "oidc")}
    assert project_roles("ada") == {("speech", "member", "oidc")}
    # The project's group changes role: member -> lead when a lead group is added for the same project.
    sync_roles(user, ["rackplane-alpha-leads", "rackplane-vision-leads"], OIDC, "rackplane-")
    assert project_roles("ada") == {("vision", "lead", "oidc")}


@pytest.mark.django_db
def test_project_roles_granted_by_hand_stay_whatever_the_groups_say(project_rules, projects, department_a):
    user = signed_in()
    Membership.objects.create(user=user, department=department_a, role=Role.MEMBER)  # by hand
    set_project_member(make_user("root", staff=True), projects["vision"], user, "member")  # by hand
    result = sync_roles(user, ["rackplane-vision-leads"], OIDC, "rackplane-")
    assert project_roles("ada") == {("vision", "member", "manual")}  # not raised to lead by the group
    assert "project member of Alpha / Vision" in result.kept_by_hand
    sync_roles(user, [], OIDC, "rackplane-")
    assert project_roles("ada") == {("vision", "member", "manual")}
    assert department_roles("ada") == {("alpha", "member", "manual")}


@pytest.mark.django_db
def test_a_change_by_hand_makes_a_provider_project_role_a_hand_grant(project_rules, projects):
    user = signed_in()
    sync_roles(user, ["rackplane-speech"], OIDC, "rackplane-")
    set_project_member(make_user("root", staff=True), projects["speech"], user, "lead")
    assert project_roles("ada") == {("speech", "lead", "manual")}
    # Still in Alpha through the vision group: the speech role, now by hand, stays without its group.
    sync_roles(user, ["rackplane-vision-leads"], OIDC, "rackplane-")
    assert project_roles("ada") == {("speech", "lead", "manual"), ("vision", "lead", "oidc")}


@pytest.mark.django_db
def test_a_provider_project_role_moved_by_hand_becomes_a_hand_grant(project_rules, projects):
    user = signed_in()
    sync_roles(user, ["rackplane-speech", "rackplane-vision-leads"], OIDC, "rackplane-")
    speech = ProjectMembership.objects.get(user=user, project=projects["speech"])
    admin = make_user("root", staff=True)
    ProjectMembership.objects.filter(user=user, project=projects["vision"]).delete()
    move_member(admin, speech, projects["vision"])
    assert project_roles("ada") == {("vision", "member", "manual")}
    sync_roles(user, ["rackplane-vision-leads"], OIDC, "rackplane-")  # speech's group gone: nothing to take
    assert project_roles("ada") == {("vision", "member", "manual")}


@pytest.mark.django_db
def test_one_provider_leaves_the_other_providers_project_roles_alone(project_rules):
    user = signed_in()
    ExternalIdentity.objects.create(provider=LDAP, subject="uid=ada,ou=people,dc=example", user=user)
    sync_roles(user, ["rackplane-speech"], OIDC, "rackplane-")
    sync_roles(user, [], LDAP, "rackplane-")
    assert project_roles("ada") == {("speech", "member", "oidc")}
    sync_roles(user, ["rackplane-vision-leads"], LDAP, "rackplane-")
    assert project_roles("ada") == {("speech", "member", "oidc"), ("vision", "lead", "ldap")}


# --- through the real OpenID Provider --------------------------------------------------------------------


def oidc_sign_in(client, provider, username="hedy", password=OIDC_PASSWORD):
    """The portal's button, the provider's real login page, the provider's redirect back to the portal."""
    start = client.get("/oidc/authenticate/?next=/scheduling/jobs/")
    assert start.status_code == 302, start.content
    back = provider.follow_sign_in(start["Location"], username, password, CALLBACK)
    response = client.get(back.removeprefix("http://testserver"))
    assert response.status_code == 302 and urlparse(response["Location"]).path == "/scheduling/jobs/"
    return response


@pytest.mark.integration
@pytest.mark.django_db
def test_a_providers_group_gives_the_project_lead_role_at_sign_in_and_takes_it_away(
    client, oidc_settings, oidc_provider, project_rules
):
    oidc_provider.allow_redirect(CALLBACK)
    oidc_provider.set_account("hedy", OIDC_PASSWORD, ["rackplane-vision-leads", "payroll"], sub="7c1e-hedy")
    oidc_sign_in(client, oidc_provider)
    assert project_roles("hedy") == {("vision", "lead", "oidc")}
    assert department_roles("hedy") == {("alpha", "member", "oidc")}
    user = ExternalIdentity.objects.get(provider="oidc", subject="7c1e-hedy").user
    # The portal treats them as the project's lead: the project is theirs to use.
    assert list(Project.objects.usable_by(user).values_list("slug", flat=True)) == ["vision"]

    client.post("/logout/")
    oidc_provider.set_groups("hedy", ["rackplane-speech"])
    oidc_sign_in(client, oidc_provider)
    assert project_roles("hedy") == {("speech", "member", "oidc")}

    client.post("/logout/")
    oidc_provider.set_groups("hedy", [])
    oidc_sign_in(client, oidc_provider)
    assert project_roles("hedy") == set() and department_roles("hedy") == set()


# --- through the real LDAP directory ---------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.django_db
def test_a_directory_group_gives_the_project_lead_role_at_sign_in_and_takes_it_away(
    client, ldap_settings, ldap_directory, project_rules
):
    ldap_directory.set_members("rackplane-vision-leads", ["ada"])
    response = client.post("/login/", {"username": "ada", "password": LDAP_PASSWORD})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert project_roles("ada") == {("vision", "lead", "ldap")}
    assert department_roles("ada") == {("alpha", "member", "ldap")}  # rackplane-alpha-members has no rule

    client.post("/logout/")
    ldap_directory.set_members("rackplane-vision-leads", [])
    assert client.post("/login/", {"username": "ada", "password": LDAP_PASSWORD}).status_code == 302
    assert project_roles("ada") == set() and department_roles("ada") == set()


@pytest.mark.django_db
def test_a_group_mapped_to_the_default_project_gives_department_membership_only(department_a):
    default = Project.objects.get(department=department_a, is_default=True)
    GroupRoleRule.objects.create(
        group="rackplane-general", role=GrantedRole.MEMBER, department=department_a, project=default
    )
    sync_roles(signed_in(), ["rackplane-general"], OIDC, "rackplane-")
    # Its people are the members in no named project: a membership makes ada one, no project row.
    assert department_roles("ada") == {("alpha", Role.MEMBER, "oidc")}
    assert project_roles("ada") == set()
