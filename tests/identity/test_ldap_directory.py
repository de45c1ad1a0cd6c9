"""LDAP sign-in against the real OpenLDAP slapd of scripts/idp-testbed.sh: the portal's ordinary login form
checks the password with a bind as the person (found by Rackplane's read-only service account), reads their
groups and gives the roles the rules say; a changed group changes the role at the next sign-in. The directory
is changed through the server itself, as its admin."""

import pytest

from core.access import is_admin
from core.models import AuditEvent
from tenancy.choices import GrantedRole
from tenancy.models import ExternalIdentity, GroupRoleRule, Membership
from tests.factories import make_user

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

PASSWORD = "ada-ldap-password-1"  # testbed/ldap/directory.ldif


@pytest.fixture
def rules(department_a, department_b):
    GroupRoleRule.objects.create(
        group="rackplane-alpha-members", role=GrantedRole.MEMBER, department=department_a
    )
    GroupRoleRule.objects.create(
        group="rackplane-alpha-leads", role=GrantedRole.LEAD, department=department_a
    )
    GroupRoleRule.objects.create(group="rackplane-admins", role=GrantedRole.PLATFORM_ADMIN)
    # A rule for a group outside the prefix never applies (payroll holds ada in the directory).
    GroupRoleRule.objects.create(group="payroll", role=GrantedRole.MEMBER, department=department_b)


def log_in(client, username, password):
    return client.post("/login/", {"username": username, "password": password})


def memberships(username):
    return {
        (m.department.slug, m.role, m.origin)
        for m in Membership.objects.filter(user__username=username).select_related("department")
    }


def test_the_login_form_signs_a_directory_user_in_with_the_roles_of_their_groups(
    client, ldap_settings, rules
):
    response = log_in(client, "ada", PASSWORD)
    assert response.status_code == 302 and response["Location"] == "/", response.content.decode()[:2000]
    link = ExternalIdentity.objects.select_related("user").get(provider="ldap")
    assert link.subject == "uid=ada,ou=people,dc=rackplane,dc=test"
    user = link.user
    assert (user.username, user.email, user.first_name, user.last_name) == (
        "ada",
        "ada@rackplane.test",
        "Ada",
        "Lovelace",
    )
    assert not user.has_usable_password()  # the directory checks it, Rackplane keeps none
    assert memberships("ada") == {("alpha", "member", "ldap")}
    assert link.groups == ["rackplane-alpha-members"]
    assert AuditEvent.objects.filter(object_type="tenancy.membership", source="ldap", actor=user).count() == 1


def test_changed_groups_in_the_directory_change_the_roles_at_the_next_sign_in(
    client, ldap_settings, ldap_directory, rules
):
    log_in(client, "ada", PASSWORD)
    client.post("/logout/")
    ldap_directory.set_members("rackplane-alpha-members", [])
    ldap_directory.set_members("rackplane-alpha-leads", ["ada"])
    ldap_directory.set_members("rackplane-admins", ["ada", "grace"])
    assert log_in(client, "ada", PASSWORD).status_code == 302
    user = ExternalIdentity.objects.get(provider="ldap").user
    assert memberships("ada") == {("alpha", "lead", "ldap")} and is_admin(user)

    client.post("/logout/")
    ldap_directory.set_members("rackplane-alpha-leads", [])
    ldap_directory.set_members("rackplane-admins", ["grace"])
    assert log_in(client, "ada", PASSWORD).status_code == 302
    user.refresh_from_db()
    assert memberships("ada") == set() and not is_admin(user)


def test_a_wrong_password_or_unknown_person_is_refused_like_any_other(client, ldap_settings, rules):
    for username, password in (("ada", "wrong-password"), ("nobody-here", "x")):
        response = log_in(client, username, password)
        assert response.status_code == 200
        assert "Please enter a correct username and password" in response.content.decode()
    assert not ExternalIdentity.objects.exists()


def test_a_person_added_to_the_directory_signs_in_at_once(client, ldap_settings, ldap_directory, rules):
    ldap_directory.add_person(
        "katherine", "katherine-ldap-password-1", given_name="Katherine", surname="Johnson"
    )
    ldap_directory.set_members("rackplane-alpha-leads", ["katherine"])
    assert log_in(client, "katherine", "katherine-ldap-password-1").status_code == 302
    assert memberships("katherine") == {("alpha", "lead", "ldap")}


def test_a_local_account_of_the_same_name_is_not_taken_over(client, ldap_settings, rules):
    local = make_user("ada", password="local-ada-password-1")
    response = log_in(client, "ada", PASSWORD)  # the directory's password
    assert response.status_code == 200  # refused
    assert not ExternalIdentity.objects.exists() and memberships("ada") == set()
    assert log_in(client, "ada", "local-ada-password-1").status_code == 302  # the local account still works
    local.refresh_from_db()
    assert local.check_password("local-ada-password-1")


def test_ldap_is_not_asked_while_it_is_not_configured(client, settings, rules):
    settings.AUTH_LDAP_SERVER_URI = ""
    assert log_in(client, "ada", PASSWORD).status_code == 200
    assert not ExternalIdentity.objects.exists()
