"""Leads add only active accounts that are not platform admins, and cannot tell an unknown username from an
ineligible one: the same status and the same words, on the page and in the API.
Platform admins may still add anyone."""

import pytest

from core.access import Role
from tenancy.models import Membership
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def accounts(platform_admin):
    """Usernames a lead might type: a platform admin, a superuser, a deactivated account, nobody."""
    superuser = factories.make_user("root-account")
    superuser.is_superuser = True
    superuser.save()
    inactive = factories.make_user("former-staffer")
    inactive.is_active = False
    inactive.save()
    return {"admin": "platform-admin", "superuser": "root-account", "inactive": "former-staffer"}


def members_url(department):
    return f"/api/v1/departments/{department.slug}/members/"


def refusal(response, username: str) -> tuple[int, dict]:
    """The answer with the username the lead typed taken out: what would tell the cases apart."""
    body = response.json()
    return response.status_code, {
        key: [message.replace(repr(username), "<username>") for message in messages]
        for key, messages in body.items()
    }


def test_api_answers_the_same_for_unknown_and_ineligible_usernames(api_as, lead_a, department_a, accounts):
    client = api_as(lead_a)
    unknown = client.post(members_url(department_a), {"username": "no-such-user"}, format="json")
    assert refusal(unknown, "no-such-user") == (
        400,
        {
            "username": [
                "no user named <username> can be added to Alpha: "
                "leads add active accounts that are not platform admins"
            ]
        },
    )
    for username in accounts.values():
        response = client.post(
            members_url(department_a), {"username": username, "role": "lead"}, format="json"
        )
        assert refusal(response, username) == refusal(unknown, "no-such-user"), username
    assert not Membership.objects.filter(
        department=department_a, user__username__in=accounts.values()
    ).exists()


def test_api_lead_adds_an_ordinary_account(api_as, lead_a, department_a, outsider):
    response = api_as(lead_a).post(members_url(department_a), {"username": "outsider"}, format="json")
    assert response.status_code == 201, response.content
    assert Membership.objects.get(department=department_a, user=outsider).role == Role.MEMBER


def test_api_admin_may_add_anyone(api_as, platform_admin, department_a, accounts):
    client = api_as(platform_admin)
    for username in accounts.values():
        response = client.post(members_url(department_a), {"username": username}, format="json")
        assert response.status_code == 201, (username, response.content)
    unknown = client.post(members_url(department_a), {"username": "no-such-user"}, format="json")
    assert unknown.status_code == 400
    assert unknown.json() == {"username": ["no user named 'no-such-user' can be added to Alpha"]}


def test_api_lead_changes_the_role_of_an_admin_already_in_the_department(
    api_as, platform_admin, lead_a, department_a
):
    """Someone the lead can already see in the list is no probe: their role stays the lead's to change."""
    Membership.objects.create(user=platform_admin, department=department_a, role=Role.MEMBER)
    response = api_as(lead_a).patch(
        f"{members_url(department_a)}platform-admin/", {"role": "lead"}, format="json"
    )
    assert response.status_code == 200, response.content
    assert Membership.objects.get(department=department_a, user=platform_admin).role == Role.LEAD


def member_page_post(client, department, username):
    return client.post(
        f"/tenancy/departments/{department.slug}/members/",
        {"username": username, "role": Role.MEMBER},
        HTTP_HX_REQUEST="true",
    )


def page_error(response, username: str) -> str:
    html = response.content.decode()
    start = html.index('class="field-error"')
    return html[start : html.index("</", start)].replace(username, "<username>")


def test_page_answers_the_same_for_unknown_and_ineligible_usernames(
    client_as, lead_a, department_a, accounts
):
    client = client_as(lead_a)
    unknown = member_page_post(client, department_a, "no-such-user")
    assert unknown.status_code == 200
    expected = page_error(unknown, "no-such-user")
    assert "can be added to Alpha: leads add active accounts that are not platform admins" in expected
    for username in accounts.values():
        response = member_page_post(client, department_a, username)
        assert response.status_code == unknown.status_code
        assert page_error(response, username) == expected, username
    assert not Membership.objects.filter(
        department=department_a, user__username__in=accounts.values()
    ).exists()


def test_page_lead_adds_an_ordinary_account_and_admin_adds_an_admin(
    client_as, lead_a, platform_admin, department_a, outsider
):
    member_page_post(client_as(lead_a), department_a, "outsider")
    assert Membership.objects.filter(department=department_a, user=outsider).exists()
    member_page_post(client_as(platform_admin), department_a, "platform-admin")
    assert Membership.objects.filter(department=department_a, user=platform_admin).exists()
