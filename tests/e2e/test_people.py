"""A lead manages their people in a real browser: finds an account by search and invites it, changes its
role, removes it; a role from the identity provider shows as such, without controls. Every change is
audited."""

import pytest
from playwright.sync_api import expect

from core.access import Role
from core.models import AuditAction, AuditEvent
from inventory.demo import seed_datacenter
from tenancy.choices import RoleOrigin
from tenancy.models import Membership
from tests.e2e.browser import sign_in
from tests.factories import make_department, make_member, make_user

pytestmark = pytest.mark.e2e

PASSWORD = "e2e-people-password-1"


@pytest.fixture
def department(transactional_db):
    seed_datacenter(racks=1)
    department = make_department("Research", guaranteed_gpus=8)
    make_member("e2e-lead", department, Role.LEAD, password=PASSWORD)
    synced = make_member("e2e-synced", department)
    Membership.objects.filter(user=synced).update(origin=RoleOrigin.OIDC)
    make_user("newcomer-ann")
    make_user("newcomer-admin", staff=True)
    return department


def test_a_lead_invites_by_search_changes_a_role_and_removes(live_server, page, shots, department):
    refused: list[str] = []
    page.on("console", lambda message: refused.append(message.text) if "Refused to" in message.text else None)
    sign_in(page, live_server, "e2e-lead", PASSWORD)
    page.goto(f"{live_server.url}/tenancy/departments/research/")

    synced = page.locator('tr[data-username="e2e-synced"]')
    expect(synced).to_contain_text("from OpenID Connect group")
    expect(synced).to_contain_text("Not editable here")
    expect(synced.locator("select")).to_have_count(0)
    expect(synced.get_by_role("button")).to_have_count(0)

    page.fill("#id_people_q", "ne")
    expect(page.locator("#people-results")).to_contain_text("Type at least 3 characters")
    page.fill("#id_people_q", "newcomer")
    results = page.locator("#people-results li")
    expect(results).to_have_count(1)  # not the platform admin
    expect(results.first).to_contain_text("newcomer-ann")
    page.screenshot(path=str(shots / "01-people-search.png"), full_page=True)
    page.get_by_role("button", name="Invite newcomer-ann").click()

    row = page.locator('tr[data-username="newcomer-ann"]')
    expect(row).to_contain_text("Department member")
    expect(page.locator("#people-results li")).to_have_count(0)
    page.screenshot(path=str(shots / "02-invited.png"), full_page=True)

    row.locator("select").select_option("lead")
    with page.expect_response(lambda response: response.url.endswith("/members/")) as answer:
        row.get_by_role("button", name="Change").click()
    assert answer.value.status == 200
    expect(page.locator('tr[data-username="newcomer-ann"] select')).to_have_value("lead")
    assert Membership.objects.get(user__username="newcomer-ann").role == Role.LEAD

    page.once("dialog", lambda dialog: dialog.accept())
    page.locator('tr[data-username="newcomer-ann"]').get_by_role("button", name="Remove").click()
    expect(page.locator('tr[data-username="newcomer-ann"]')).to_have_count(0)
    page.screenshot(path=str(shots / "03-removed.png"), full_page=True)

    events = AuditEvent.objects.filter(object_type="tenancy.membership", actor__username="e2e-lead")
    assert list(events.order_by("pk").values_list("action", flat=True)) == [
        AuditAction.CREATE,
        AuditAction.UPDATE,
        AuditAction.DELETE,
    ]
    assert refused == []
