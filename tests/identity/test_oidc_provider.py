"""Single sign-on against the real OpenID Provider of scripts/idp-testbed.sh (oidc-provider on Node.js): the
portal starts the authorization code flow with PKCE, the provider's real login page is filled in (over HTTP,
as a browser would; tests/e2e/test_sign_in.py does it in Chromium), the portal exchanges the code at the
provider's token endpoint, checks the ID token against its JWKS, reads userinfo and signs the person in with
the roles their groups give. Machine clients' bearer tokens of the provider open the API. Nothing is mocked:
every answer is the provider's."""

from urllib.parse import parse_qs, urlparse

import pytest
from rest_framework.test import APIClient

from core.access import is_admin
from core.models import AuditEvent
from tenancy.auth import oidc_setting
from tenancy.choices import GrantedRole
from tenancy.models import ExternalIdentity, GroupRoleRule, Membership
from tests.factories import make_user

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

CALLBACK = "http://testserver/oidc/callback/"
PASSWORD = "hedy-oidc-password-1"


@pytest.fixture
def rules(department_a, department_b):
    GroupRoleRule.objects.create(group="rackplane-alpha", role=GrantedRole.MEMBER, department=department_a)
    GroupRoleRule.objects.create(group="rackplane-beta-leads", role=GrantedRole.LEAD, department=department_b)
    GroupRoleRule.objects.create(group="rackplane-admins", role=GrantedRole.PLATFORM_ADMIN)


@pytest.fixture
def hedy(oidc_settings, oidc_provider):
    """An account at the provider: hedy, in rackplane-alpha (and a group outside the prefix)."""
    oidc_provider.allow_redirect(CALLBACK)
    oidc_provider.set_account(
        "hedy",
        PASSWORD,
        ["rackplane-alpha", "payroll"],
        sub="7c1e-hedy",
        email="hedy@rackplane.test",
        given_name="Hedy",
        family_name="Lamarr",
    )
    return oidc_provider


def sign_in(client, provider, username="hedy", password=PASSWORD):
    """The portal's button, the provider's login page, the provider's redirect back to the portal."""
    start = client.get("/oidc/authenticate/?next=/scheduling/jobs/")
    assert start.status_code == 302, start.content
    authorization = start["Location"]
    assert authorization.startswith(provider.endpoints()["authorization_endpoint"])
    query = parse_qs(urlparse(authorization).query)
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) == 43
    assert query["redirect_uri"] == [CALLBACK] and query["scope"] == ["openid email profile groups"]
    back = provider.follow_sign_in(authorization, username, password, CALLBACK)
    return client.get(back.removeprefix("http://testserver"))


def memberships(username):
    return {
        (m.department.slug, m.role, m.origin)
        for m in Membership.objects.filter(user__username=username).select_related("department")
    }


def test_the_login_page_offers_single_sign_on_only_when_configured(client, settings):
    settings.OIDC_RP_CLIENT_ID = ""
    page = client.get("/login/").content.decode()
    assert "Sign in with" not in page and 'name="password"' in page
    assert client.get("/oidc/authenticate/").status_code == 404

    settings.OIDC_RP_CLIENT_ID = "rackplane"
    settings.OIDC_PROVIDER_NAME = "Example SSO"
    page = client.get("/login/?next=/audit/").content.decode()
    assert "Sign in with Example SSO" in page and 'href="/oidc/authenticate/?next=/audit/"' in page
    assert 'name="password"' in page  # the local form stays


def test_signing_in_makes_the_account_with_the_roles_its_groups_give(client, hedy, rules):
    response = sign_in(client, hedy)
    assert response.status_code == 302 and response["Location"] == "/scheduling/jobs/"
    assert client.get("/scheduling/jobs/").status_code == 200  # signed in
    link = ExternalIdentity.objects.select_related("user").get(provider="oidc", subject="7c1e-hedy")
    user = link.user
    assert (user.username, user.email, user.first_name, user.last_name) == (
        "hedy",
        "hedy@rackplane.test",
        "Hedy",
        "Lamarr",
    )
    assert not user.has_usable_password()
    assert memberships("hedy") == {("alpha", "member", "oidc")}
    assert link.groups == ["rackplane-alpha"]  # payroll is outside the prefix
    assert AuditEvent.objects.filter(object_type="tenancy.membership", source="oidc", actor=user).count() == 1


def test_changed_groups_at_the_provider_change_the_roles_at_the_next_sign_in(client, hedy, rules):
    sign_in(client, hedy)
    client.post("/logout/")
    hedy.set_groups("hedy", ["rackplane-beta-leads", "rackplane-admins"])
    sign_in(client, hedy)
    assert memberships("hedy") == {("beta", "lead", "oidc")}
    user = ExternalIdentity.objects.get(subject="7c1e-hedy").user
    assert is_admin(user)
    assert client.get("/tenancy/dashboard/").status_code == 200  # an admin page

    client.post("/logout/")
    hedy.set_groups("hedy", [])
    sign_in(client, hedy)
    user.refresh_from_db()
    assert memberships("hedy") == set() and not is_admin(user)


def test_the_endpoints_come_from_the_providers_discovery_document(oidc_settings, oidc_provider):
    document = oidc_provider.endpoints()
    assert oidc_setting("OIDC_OP_TOKEN_ENDPOINT") == document["token_endpoint"]
    assert oidc_setting("OIDC_OP_JWKS_ENDPOINT") == document["jwks_uri"]
    oidc_settings.OIDC_OP_TOKEN_ENDPOINT = "http://127.0.0.1:1/explicit"
    assert oidc_setting("OIDC_OP_TOKEN_ENDPOINT") == "http://127.0.0.1:1/explicit"  # a setting wins


def test_a_wrong_password_stays_at_the_providers_login_page(client, hedy):
    start = client.get("/oidc/authenticate/")
    with pytest.raises(AssertionError, match="refused hedy's password"):
        hedy.follow_sign_in(start["Location"], "hedy", "not-the-password", CALLBACK)
    assert not ExternalIdentity.objects.exists()


def test_an_existing_account_of_that_name_is_not_taken_over(client, hedy, rules):
    local = make_user("hedy", password="local-password-1")
    response = sign_in(client, hedy)
    assert response.status_code == 302 and response["Location"] == "/login/"
    page = client.get("/login/").content.decode()
    assert "already exists and is not linked to your single sign-on identity" in page
    assert not ExternalIdentity.objects.exists() and memberships("hedy") == set()
    assert client.get("/scheduling/jobs/").status_code == 302  # not signed in
    local.refresh_from_db()
    assert local.check_password("local-password-1")


def test_a_refusal_at_the_provider_comes_back_to_the_login_page_with_the_reason(client, hedy):
    start = client.get("/oidc/authenticate/")
    state = parse_qs(urlparse(start["Location"]).query)["state"][0]
    response = client.get(f"/oidc/callback/?error=access_denied&error_description=user+said+no&state={state}")
    assert response.status_code == 302 and response["Location"] == "/login/"
    page = client.get("/login/").content.decode()
    assert "Signing in with Test IdP failed: the identity provider answered &#x27;user said no&#x27;" in page


def test_a_callback_with_a_state_the_portal_never_sent_is_refused(client, hedy):
    start = client.get("/oidc/authenticate/")
    back = hedy.follow_sign_in(start["Location"], "hedy", PASSWORD, CALLBACK)
    forged = back.replace("state=", "state=forged")
    response = client.get(forged.removeprefix("http://testserver"))
    assert response.status_code == 302 and response["Location"] == "/login/"
    assert "could not be verified" in client.get("/login/").content.decode()
    assert not ExternalIdentity.objects.exists()


def test_the_providers_access_token_opens_the_api_for_machine_clients(hedy, rules):
    token = hedy.access_token("hedy", PASSWORD, "http://127.0.0.1:9/machine-client/")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = api.get("/api/v1/departments/")
    assert response.status_code == 200, response.content
    assert [d["slug"] for d in response.json()["results"]] == ["alpha"]  # what a member of Alpha sees
    assert memberships("hedy") == {("alpha", "member", "oidc")}

    # Roles are re-synced at each request, as at each sign-in.
    hedy.set_groups("hedy", ["rackplane-beta-leads"])
    assert [d["slug"] for d in api.get("/api/v1/departments/").json()["results"]] == ["beta"]


def test_a_bearer_token_the_provider_does_not_know_is_a_401(oidc_settings, oidc_provider):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION="Bearer made-up-token-of-no-provider")
    response = api.get("/api/v1/departments/")
    assert response.status_code == 401
    assert response.json()["detail"]  # the provider's own words (invalid_token)
    assert not ExternalIdentity.objects.exists()


def test_bearer_tokens_are_ignored_while_single_sign_on_is_off(settings):
    settings.OIDC_RP_CLIENT_ID = ""
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION="Bearer anything")
    response = api.get("/api/v1/departments/")
    assert response.status_code == 401 and response.headers["WWW-Authenticate"] == "Token"
