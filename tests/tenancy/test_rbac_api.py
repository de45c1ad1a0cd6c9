"""Who sees and does what on every tenant-scoped endpoint.

The shared personas (tests/conftest.py): the lead of department A, a member of department B, an outsider
with no membership, a platform admin. Lists show only visible rows, a detail that is not visible is a 404
(never a 403 that would confirm it exists), writes by anyone but platform admins (departments) or the
department's leads (members) are refused, and audit events follow `AuditEvent.objects.visible_to`.
"""

import pytest
from rest_framework.test import APIClient

from core.access import Role
from core.models import AuditEvent, AuditSource
from tenancy.models import Department, Membership
from tests.factories import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def newbie(lead_a, member_a, lead_b, member_b, outsider, platform_admin):
    """Every persona exists in every test (so lists have rows to hide; no inventory: guarantees stay 0), plus
    "newbie", an account without a department for leads to add. Clients use API tokens, as scripts do."""
    return make_user("newbie")


def slugs(response):
    assert response.status_code == 200, response.content
    return sorted(row["slug"] for row in response.json()["results"])


def usernames(response):
    assert response.status_code == 200, response.content
    return sorted(row["username"] for row in response.json()["results"])


# --- departments --------------------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    ("user", "visible"),
    [
        ("lead_a", ["alpha"]),
        ("member_b", ["beta"]),
        ("outsider", []),
        ("platform_admin", ["alpha", "beta"]),
    ],
)
def test_department_list_shows_only_visible_departments(api_as, user, visible):
    assert slugs(api_as(user).get("/api/v1/departments/")) == visible
    client = api_as(user)
    for slug in ("alpha", "beta"):
        expected = 200 if slug in visible else 404
        assert client.get(f"/api/v1/departments/{slug}/").status_code == expected, slug
        assert client.get(f"/api/v1/departments/{slug}/quota/").status_code == expected, slug


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("user", ["lead_a", "member_b", "outsider"])
def test_only_staff_write_departments(api_as, user):
    client = api_as(user)
    body = {"name": "Gamma", "slug": "gamma", "guaranteed_gpus": 0}
    assert client.post("/api/v1/departments/", body, format="json").status_code == 403
    for slug in ("alpha", "beta"):  # their own department and another: refused alike, nothing changes
        assert client.patch(f"/api/v1/departments/{slug}/", {"priority": 9}, format="json").status_code in (
            403,
            404,
        )
        assert client.put(
            f"/api/v1/departments/{slug}/", {**body, "slug": slug}, format="json"
        ).status_code in (
            403,
            404,
        )
        assert client.delete(f"/api/v1/departments/{slug}/").status_code in (403, 404)
    assert not Department.objects.filter(slug="gamma").exists()
    assert set(Department.objects.values_list("priority", flat=True)) == {0}
    assert Department.objects.count() == 2


def test_a_lead_is_told_why_a_department_write_is_refused(api_as):
    response = api_as("lead_a").patch("/api/v1/departments/alpha/", {"priority": 9}, format="json")
    assert response.status_code == 403
    assert response.json()["detail"] == "Only platform admins may create, change or delete departments."


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_staff_write_departments(api_as):
    staff = api_as("platform_admin")
    response = staff.post("/api/v1/departments/", {"name": "Gamma", "slug": "gamma"}, format="json")
    assert response.status_code == 201
    assert staff.patch("/api/v1/departments/gamma/", {"priority": 3}, format="json").status_code == 200
    assert staff.delete("/api/v1/departments/gamma/").status_code == 204


def test_anonymous_gets_nothing():
    client = APIClient()
    for url in [
        "/api/v1/departments/",
        "/api/v1/departments/alpha/",
        "/api/v1/departments/alpha/quota/",
        "/api/v1/departments/alpha/members/",
        "/api/v1/departments/alpha/members/lead-a/",
        "/api/v1/audit-events/",
    ]:
        response = client.get(url)
        assert response.status_code == 401, url
        assert "Location" not in response
    assert client.post("/api/v1/departments/", {"name": "X", "slug": "x"}).status_code == 401


# --- members ------------------------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    ("user", "alpha", "beta"),
    [
        # Leads see their department's members, and so do its members, read-only (Membership.visible_to);
        # nobody sees a department they are not in.
        ("lead_a", ["lead-a", "member-a"], None),
        ("member_b", None, ["lead-b", "member-b"]),
        ("outsider", None, None),
        ("platform_admin", ["lead-a", "member-a"], ["lead-b", "member-b"]),
    ],
)
def test_member_lists(api_as, user, alpha, beta):
    client = api_as(user)
    for slug, expected in (("alpha", alpha), ("beta", beta)):
        response = client.get(f"/api/v1/departments/{slug}/members/")
        if expected is None:
            assert response.status_code == 404, (slug, response.content)
        else:
            assert usernames(response) == expected, slug


def test_member_details_follow_visibility(api_as):
    member_b = api_as("member_b")
    assert member_b.get("/api/v1/departments/beta/members/member-b/").status_code == 200
    assert member_b.get("/api/v1/departments/beta/members/lead-b/").status_code == 200  # a colleague
    assert member_b.get("/api/v1/departments/alpha/members/lead-a/").status_code == 404
    lead_a = api_as("lead_a")
    assert lead_a.get("/api/v1/departments/alpha/members/member-a/").json()["role"] == "member"
    assert lead_a.get("/api/v1/departments/beta/members/member-b/").status_code == 404
    assert api_as("outsider").get("/api/v1/departments/alpha/members/lead-a/").status_code == 404


def test_a_lead_manages_their_departments_members_but_not_anothers(api_as, department_a, department_b):
    lead_a = api_as("lead_a")
    assert lead_a.post("/api/v1/departments/alpha/members/", {"username": "newbie"}).status_code == 201
    response = lead_a.patch("/api/v1/departments/alpha/members/newbie/", {"role": "lead"}, format="json")
    assert response.status_code == 200
    assert lead_a.delete("/api/v1/departments/alpha/members/member-a/").status_code == 204

    # Beta is not theirs: not found, and nothing changes.
    assert lead_a.post("/api/v1/departments/beta/members/", {"username": "newbie"}).status_code == 404
    assert lead_a.patch("/api/v1/departments/beta/members/member-b/", {"role": "lead"}).status_code == 404
    assert lead_a.delete("/api/v1/departments/beta/members/member-b/").status_code == 404
    assert list(Membership.objects.filter(department=department_b).values_list("user__username", "role")) == [
        ("lead-b", "lead"),
        ("member-b", "member"),
    ]
    alpha_members = Membership.objects.filter(department=department_a)
    assert set(alpha_members.values_list("user__username", flat=True)) == {"lead-a", "newbie"}


def test_a_lead_of_one_department_who_is_a_member_of_another_can_only_read_there(
    api_as, lead_a, department_b
):
    Membership.objects.create(user=lead_a, department=department_b, role=Role.MEMBER)
    lead_a = api_as(lead_a)
    # Beta's people, read-only (its members see them: Membership.visible_to).
    assert usernames(lead_a.get("/api/v1/departments/beta/members/")) == ["lead-a", "lead-b", "member-b"]
    response = lead_a.post("/api/v1/departments/beta/members/", {"username": "newbie"})
    assert response.status_code == 403
    assert "Only leads of Beta and platform admins may change its members." in response.json()["detail"]


def test_members_and_outsiders_cannot_change_members(api_as):
    member_b = api_as("member_b")
    assert member_b.post("/api/v1/departments/beta/members/", {"username": "newbie"}).status_code == 403
    assert member_b.patch("/api/v1/departments/beta/members/member-b/", {"role": "lead"}).status_code == 403
    assert member_b.delete("/api/v1/departments/beta/members/member-b/").status_code == 403
    assert member_b.post("/api/v1/departments/alpha/members/", {"username": "newbie"}).status_code == 404
    outsider = api_as("outsider")
    for slug in ("alpha", "beta"):
        assert (
            outsider.post(f"/api/v1/departments/{slug}/members/", {"username": "outsider"}).status_code == 404
        )
    assert Membership.objects.filter(user__username__in=["newbie", "outsider"]).count() == 0
    assert Membership.objects.get(user__username="member-b").role == Role.MEMBER


def test_staff_manage_any_departments_members(api_as):
    staff = api_as("platform_admin")
    assert (
        staff.post("/api/v1/departments/beta/members/", {"username": "newbie", "role": "lead"}).status_code
        == 201
    )
    assert staff.delete("/api/v1/departments/beta/members/lead-b/").status_code == 204  # newbie leads now
    assert staff.delete("/api/v1/departments/beta/members/newbie/").status_code == 400  # the last lead


# --- audit events -------------------------------------------------------------------------------------------


@pytest.fixture
def changes(api_as):
    """Changes in both departments, through the API, by a platform admin and by each lead."""
    api_as("platform_admin").patch("/api/v1/departments/alpha/", {"priority": 1}, format="json")
    api_as("platform_admin").patch("/api/v1/departments/beta/", {"priority": 2}, format="json")
    api_as("lead_a").post("/api/v1/departments/alpha/members/", {"username": "newbie"})
    api_as("lead_b").post("/api/v1/departments/beta/members/", {"username": "newbie"})


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_audit_events_by_user(changes, api_as, department_a, department_b):
    a, b = department_a.pk, department_b.pk
    lead_a_rows = api_as("lead_a").get("/api/v1/audit-events/", {"page_size": 1000}).json()["results"]
    assert lead_a_rows
    assert {row["department_id"] for row in lead_a_rows} == {a}
    assert len(lead_a_rows) == AuditEvent.objects.filter(department_id=a).count()

    for user in ("member_b", "outsider"):
        assert api_as(user).get("/api/v1/audit-events/").json()["results"] == [], user

    staff_rows = api_as("platform_admin").get("/api/v1/audit-events/", {"page_size": 1000}).json()["results"]
    assert len(staff_rows) == AuditEvent.objects.count()
    assert {a, b} <= {row["department_id"] for row in staff_rows}

    # Details follow the same rule: another department's event is not found.
    event_b = AuditEvent.objects.filter(department_id=b).first()
    event_a = AuditEvent.objects.filter(department_id=a).first()
    assert api_as("lead_a").get(f"/api/v1/audit-events/{event_b.pk}/").status_code == 404
    assert api_as("lead_a").get(f"/api/v1/audit-events/{event_a.pk}/").status_code == 200
    assert api_as("member_b").get(f"/api/v1/audit-events/{event_b.pk}/").status_code == 404
    assert api_as("outsider").get(f"/api/v1/audit-events/{event_a.pk}/").status_code == 404
    # Filtering by another department is no way around it.
    assert api_as("lead_a").get("/api/v1/audit-events/", {"department_id": b}).json()["results"] == []
    assert api_as("lead_a").get("/api/v1/audit-events/", {"department": "beta"}).status_code == 400


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_api_changes_record_actor_and_source(changes, department_a, department_b, platform_admin, newbie):
    staff_event = AuditEvent.objects.get(
        object_type="tenancy.department", action="update", department_id=department_a.pk
    )
    assert (staff_event.source, staff_event.actor, staff_event.actor_name) == (
        AuditSource.API,
        platform_admin,
        "platform-admin",
    )
    assert (staff_event.before, staff_event.after) == ({"priority": 0}, {"priority": 1})

    member_events = AuditEvent.objects.filter(object_type="tenancy.membership", action="create")
    assert {
        (e.actor_name, e.department_id, e.source) for e in member_events.filter(source=AuditSource.API)
    } == {
        ("lead-a", department_a.pk, AuditSource.API),
        ("lead-b", department_b.pk, AuditSource.API),
    }
    created = member_events.get(actor_name="lead-a", source=AuditSource.API)
    assert created.after["role"] == "member"
    assert created.after["user"] == newbie.pk
