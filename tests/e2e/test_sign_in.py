"""Signing in as people do, in Chromium, against the real identity providers of scripts/idp-testbed.sh:

* single sign-on: the portal's "Sign in with Test IdP" button, the OpenID Provider's own login page
  (oidc-provider on Node.js), back to the portal signed in with the role the person's groups give; their
  groups changed at the provider change the role at their next sign-in (also after the provider restarted);
* LDAP: the portal's ordinary login form, checked against OpenLDAP's slapd, with the role of the person's
  directory groups.

Nothing is mocked: the portal exchanges the code at the provider's token endpoint, checks the ID token
against its keys and reads userinfo, all from the live server."""

import re

import pytest
from playwright.sync_api import expect

from tenancy.choices import GrantedRole
from tenancy.models import GroupRoleRule
from tests.factories import make_department

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

PASSWORD = "hedy-oidc-password-1"


@pytest.fixture
def departments(transactional_db):
    alpha, beta = make_department("Alpha"), make_department("Beta")
    GroupRoleRule.objects.create(group="rackplane-alpha-members", role=GrantedRole.MEMBER, department=alpha)
    GroupRoleRule.objects.create(group="rackplane-alpha-leads", role=GrantedRole.LEAD, department=alpha)
    GroupRoleRule.objects.create(group="rackplane-beta", role=GrantedRole.MEMBER, department=beta)
    GroupRoleRule.objects.create(group="rackplane-admins", role=GrantedRole.PLATFORM_ADMIN)
    return alpha, beta


def expect_roles(page, live_server, username: str, roles: dict[str, str], admin: bool):
    """The portal as `username` sees it: signed in, the departments they belong to with their role, and
    the admin menu only for a platform admin."""
    expect(page.locator(".topbar .who")).to_have_text(username)
    # Folded under the header's More on a desktop (base.html): there, though not shown until it opens.
    admin_link = page.get_by_role("link", name="Admin", exact=True, include_hidden=True)
    expect(admin_link).to_have_count(1 if admin else 0)
    page.goto(f"{live_server.url}/tenancy/departments/")
    for slug, role in roles.items():
        expect(page.locator(f'tr[data-department="{slug}"] .badge')).to_have_text(role)
    if not admin:
        expect(page.locator("tr[data-department]")).to_have_count(len(roles))


def sign_in_with_sso(page, live_server, oidc_provider, username, password, *, login_page_expected=True):
    page.goto(f"{live_server.url}/login/?next=/scheduling/jobs/")
    page.get_by_role("link", name="Sign in with Test IdP").click()
    if login_page_expected:
        # The provider's own login page, on the provider's origin.
        expect(page).to_have_url(re.compile(rf"^{re.escape(oidc_provider.issuer)}/interaction/"))
        expect(page.locator("h1")).to_have_text("Test identity provider")
        page.fill("#username", username)
        page.fill("#password", password)
        page.locator("#submit").click()
    expect(page).to_have_url(f"{live_server.url}/scheduling/jobs/")


def test_single_sign_on_gives_the_role_of_the_groups_and_follows_them(
    live_server, page, shots, oidc_settings, oidc_provider, departments
):
    oidc_provider.allow_redirect(f"{live_server.url}/oidc/callback/")
    oidc_provider.set_account(
        "hedy", PASSWORD, ["rackplane-alpha-members", "payroll"], sub="2d9f-hedy", email="hedy@rackplane.test"
    )

    page.goto(f"{live_server.url}/login/")
    expect(page.get_by_role("link", name="Sign in with Test IdP")).to_be_visible()
    expect(page.locator("#id_username")).to_be_visible()  # the local form stays
    page.screenshot(path=str(shots / "01-login-page.png"), full_page=True)

    # A wrong password stays at the provider, which says so.
    page.get_by_role("link", name="Sign in with Test IdP").click()
    page.fill("#username", "hedy")
    page.fill("#password", "not-her-password")
    page.locator("#submit").click()
    expect(page.locator("#error")).to_have_text("Wrong username or password.")
    page.screenshot(path=str(shots / "02-provider-refuses.png"), full_page=True)

    sign_in_with_sso(page, live_server, oidc_provider, "hedy", PASSWORD)
    expect_roles(page, live_server, "hedy", {"alpha": "member"}, admin=False)
    page.screenshot(path=str(shots / "03-member-of-alpha.png"), full_page=True)

    # At the provider, hedy becomes a lead of Alpha, joins Beta and the admins: at her next sign-in (the
    # provider still knows her browser, so no login page) she has those roles.
    oidc_provider.set_groups("hedy", ["rackplane-alpha-leads", "rackplane-beta", "rackplane-admins"])
    page.get_by_role("button", name="Log out").click()
    sign_in_with_sso(page, live_server, oidc_provider, "hedy", PASSWORD, login_page_expected=False)
    expect_roles(page, live_server, "hedy", {"alpha": "lead", "beta": "member"}, admin=True)
    page.screenshot(path=str(shots / "04-lead-and-admin.png"), full_page=True)

    # Out of every group, after a restart of the provider (its sessions are gone: the login page again).
    oidc_provider.set_groups("hedy", ["payroll"])
    oidc_provider.restart()
    page.get_by_role("button", name="Log out").click()
    sign_in_with_sso(page, live_server, oidc_provider, "hedy", PASSWORD)
    expect_roles(page, live_server, "hedy", {}, admin=False)
    expect(page.locator("tr[data-department]")).to_have_count(0)


def test_a_directory_user_signs_in_through_the_login_form_with_the_role_of_their_groups(
    live_server, page, shots, ldap_settings, ldap_directory, departments
):
    ldap_directory.set_members("rackplane-alpha-leads", ["ada"])
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "ada")
    page.fill("#id_password", "ada-ldap-password-1")  # testbed/ldap/directory.ldif
    with page.expect_navigation():
        page.locator("#id_password").press("Enter")
    expect(page).not_to_have_url(re.compile(r"/login/"))
    # rackplane-alpha-members and rackplane-alpha-leads both hold her: the higher role wins.
    expect_roles(page, live_server, "ada", {"alpha": "lead"}, admin=False)
    page.screenshot(path=str(shots / "05-ldap-lead-of-alpha.png"), full_page=True)

    ldap_directory.set_members("rackplane-alpha-leads", [])
    ldap_directory.set_members("rackplane-alpha-members", [])
    ldap_directory.set_members("rackplane-beta", ["ada"])
    page.get_by_role("button", name="Log out").click()
    page.fill("#id_username", "ada")
    page.fill("#id_password", "ada-ldap-password-1")
    with page.expect_navigation():
        page.locator("#id_password").press("Enter")
    expect_roles(page, live_server, "ada", {"beta": "member"}, admin=False)
