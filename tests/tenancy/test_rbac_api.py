"""Who sees and does what on every tenant-scoped endpoint.

Three users as DESIGN.md asks: the lead of department A, a member of department B, an outsider with no
membership; plus staff. Lists show only visible rows, a detail that is not visible is a 404 (never a 403
that would confirm it exists), writes by anyone but staff (departments) or the department's leads (members)
are refused, and audit events follow `AuditEvent.objects.visible_to`.
"""

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from core.access import Role
from core.models import AuditEvent, AuditSource
from tenancy.models import Department, Membership
from tenancy.services import save_department

pytestmark = pytest.mark.django_db

USERS = ("lead_a", "member_b", "outsider", "staff")


@pytest.fixture
def world(db, django_user_model):
    # No inventory: guarantees stay 0, which every capacity allows.
    a = save_department(Department(name="Alpha", slug="alpha"))
    b = save_department(Department(name="Beta", slug="beta"))
    users = {
        "lead_a": django_user_model.objects.create_user("lead-a"),
        "member_a": django_user_model.objects.create_user("member-a"),
        "lead_b": django_user_model.objects.create_user("lead-b"),
        "member_b": django_user_model.objects.create_user("member-b"),
        "outsider": django_user_model.objects.create_user("outsider"),
        "staff": django_user_model.objects.create_user("staff", is_staff=True),
        "newbie": django_user_model.objects.create_user("newbie"),
    }
    for user, department, role in [
        ("lead_a", a, Role.LEAD),
        ("member_a", a, Role.MEMBER),
        ("lead_b", b, Role.LEAD),
        ("member_b", b, Role.MEMBER),
    ]:
        Membership.objects.create(user=users[user], department=department, role=role)
    return {"a": a, "b": b, **users}


@pytest.fixture
def as_user(world):
    """A token-authenticated API client for one of the users (the way scripts use the API)."""

    def client_for(name: str) -> APIClient:
        client = APIClient()
        token, _ = Token.objects.get_or_create(user=world[name])
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    return client_for


def slugs(response):
    assert response.status_code == 200, response.content
    return sorted(row["slug"] for row in response.json()["results"])


def usernames(response):
    assert response.status_code == 200, response.content
    return sorted(row["username"] for row in response.json()["results"])


# --- departments --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "visible"),
    [("lead_a", ["alpha"]), ("member_b", ["beta"]), ("outsider", []), ("staff", ["alpha", "beta"])],
)
def test_department_list_shows_only_visible_departments(world, as_user, user, visible):
    assert slugs(as_user(user).get("/api/v1/departments/")) == visible
    client = as_user(user)
    for slug in ("alpha", "beta"):
        expected = 200 if slug in visible else 404
        assert client.get(f"/api/v1/departments/{slug}/").status_code == expected, slug
        assert client.get(f"/api/v1/departments/{slug}/quota/").status_code == expected, slug


@pytest.mark.parametrize("user", ["lead_a", "member_b", "outsider"])
def test_only_staff_write_departments(world, as_user, user):
    client = as_user(user)
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


def test_a_lead_is_told_why_a_department_write_is_refused(world, as_user):
    response = as_user("lead_a").patch("/api/v1/departments/alpha/", {"priority": 9}, format="json")
    assert response.status_code == 403
    assert response.json()["detail"] == "Only staff may create, change or delete departments."


def test_staff_write_departments(world, as_user):
    staff = as_user("staff")
    response = staff.post("/api/v1/departments/", {"name": "Gamma", "slug": "gamma"}, format="json")
    assert response.status_code == 201
    assert staff.patch("/api/v1/departments/gamma/", {"priority": 3}, format="json").status_code == 200
    assert staff.delete("/api/v1/departments/gamma/").status_code == 204


def test_anonymous_gets_nothing(world):
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


@pytest.mark.parametrize(
    ("user", "alpha", "beta"),
    [
        # Leads see their department's members; members see their own membership (Membership.visible_to).
        ("lead_a", ["lead-a", "member-a"], None),
        ("member_b", None, ["member-b"]),
        ("outsider", None, None),
        ("staff", ["lead-a", "member-a"], ["lead-b", "member-b"]),
    ],
)
def test_member_lists(world, as_user, user, alpha, beta):
    client = as_user(user)
    for slug, expected in (("alpha", alpha), ("beta", beta)):
        response = client.get(f"/api/v1/departments/{slug}/members/")
        if expected is None:
            assert response.status_code == 404, (slug, response.content)
        else:
            assert usernames(response) == expected, slug


def test_member_details_follow_visibility(world, as_user):
    member_b = as_user("member_b")
    assert member_b.get("/api/v1/departments/beta/members/member-b/").status_code == 200
    assert member_b.get("/api/v1/departments/beta/members/lead-b/").status_code == 404
    assert member_b.get("/api/v1/departments/alpha/members/lead-a/").status_code == 404
    lead_a = as_user("lead_a")
    assert lead_a.get("/api/v1/departments/alpha/members/member-a/").json()["role"] == "member"
    assert lead_a.get("/api/v1/departments/beta/members/member-b/").status_code == 404
    assert as_user("outsider").get("/api/v1/departments/alpha/members/lead-a/").status_code == 404


def test_a_lead_manages_their_departments_members_but_not_anothers(world, as_user):
    lead_a = as_user("lead_a")
    assert lead_a.post("/api/v1/departments/alpha/members/", {"username": "newbie"}).status_code == 201
    response = lead_a.patch("/api/v1/departments/alpha/members/newbie/", {"role": "lead"}, format="json")
    assert response.status_code == 200
    assert lead_a.delete("/api/v1/departments/alpha/members/member-a/").status_code == 204

    # Beta is not theirs: not found, and nothing changes.
    assert lead_a.post("/api/v1/departments/beta/members/", {"username": "newbie"}).status_code == 404
    assert lead_a.patch("/api/v1/departments/beta/members/member-b/", {"role": "lead"}).status_code == 404
    assert lead_a.delete("/api/v1/departments/beta/members/member-b/").status_code == 404
    assert list(Membership.objects.filter(department=world["b"]).values_list("user__username", "role")) == [
        ("lead-b", "lead"),
        ("member-b", "member"),
    ]
    assert set(Membership.objects.filter(department=world["a"]).values_list("user__username", flat=True)) == {
        "lead-a",
        "newbie",
    }


def test_a_lead_of_one_department_who_is_a_member_of_another_can_only_read_there(world, as_user):
    Membership.objects.create(user=world["lead_a"], department=world["b"], role=Role.MEMBER)
    lead_a = as_user("lead_a")
    assert usernames(lead_a.get("/api/v1/departments/beta/members/")) == ["lead-a"]
    response = lead_a.post("/api/v1/departments/beta/members/", {"username": "newbie"})
    assert response.status_code == 403
    assert "Only leads of Beta and staff" in response.json()["detail"]


def test_members_and_outsiders_cannot_change_members(world, as_user):
    member_b = as_user("member_b")
    assert member_b.post("/api/v1/departments/beta/members/", {"username": "newbie"}).status_code == 403
    assert member_b.patch("/api/v1/departments/beta/members/member-b/", {"role": "lead"}).status_code == 403
    assert member_b.delete("/api/v1/departments/beta/members/member-b/").status_code == 403
    assert member_b.post("/api/v1/departments/alpha/members/", {"username": "newbie"}).status_code == 404
    outsider = as_user("outsider")
    for slug in ("alpha", "beta"):
        assert (
            outsider.post(f"/api/v1/departments/{slug}/members/", {"username": "outsider"}).status_code == 404
        )
    assert Membership.objects.filter(user__username__in=["newbie", "outsider"]).count() == 0
    assert Membership.objects.get(user__username="member-b").role == Role.MEMBER


def test_staff_manage_any_departments_members(world, as_user):
    staff = as_user("staff")
    assert (
        staff.post("/api/v1/departments/beta/members/", {"username": "newbie", "role": "lead"}).status_code
        == 201
    )
    assert staff.delete("/api/v1/departments/beta/members/lead-b/").status_code == 204  # newbie leads now
    assert staff.delete("/api/v1/departments/beta/members/newbie/").status_code == 400  # the last lead


# --- audit events -------------------------------------------------------------------------------------------


@pytest.fixture
def changes(world, as_user):
    """Changes in both departments, through the API, by staff and by each lead."""
    as_user("staff").patch("/api/v1/departments/alpha/", {"priority": 1}, format="json")
    as_user("staff").patch("/api/v1/departments/beta/", {"priority": 2}, format="json")
    as_user("lead_a").post("/api/v1/departments/alpha/members/", {"username": "newbie"})
    as_user("lead_b").post("/api/v1/departments/beta/members/", {"username": "newbie"})
    return world


def test_audit_events_by_user(changes, as_user):
    a, b = changes["a"].pk, changes["b"].pk
    lead_a_rows = as_user("lead_a").get("/api/v1/audit-events/", {"page_size": 1000}).json()["results"]
    assert lead_a_rows
    assert {row["department_id"] for row in lead_a_rows} == {a}
    assert len(lead_a_rows) == AuditEvent.objects.filter(department_id=a).count()

    for user in ("member_b", "outsider"):
        assert as_user(user).get("/api/v1/audit-events/").json()["results"] == [], user

    staff_rows = as_user("staff").get("/api/v1/audit-events/", {"page_size": 1000}).json()["results"]
    assert len(staff_rows) == AuditEvent.objects.count()
    assert {a, b} <= {row["department_id"] for row in staff_rows}

    # Details follow the same rule: another department's event is not found.
    event_b = AuditEvent.objects.filter(department_id=b).first()
    event_a = AuditEvent.objects.filter(department_id=a).first()
    assert as_user("lead_a").get(f"/api/v1/audit-events/{event_b.pk}/").status_code == 404
    assert as_user("lead_a").get(f"/api/v1/audit-events/{event_a.pk}/").status_code == 200
    assert as_user("member_b").get(f"/api/v1/audit-events/{event_b.pk}/").status_code == 404
    assert as_user("outsider").get(f"/api/v1/audit-events/{event_a.pk}/").status_code == 404
    # Filtering by another department is no way around it.
    assert as_user("lead_a").get("/api/v1/audit-events/", {"department_id": b}).json()["results"] == []
    assert as_user("lead_a").get("/api/v1/audit-events/", {"department": "beta"}).status_code == 400


def test_api_changes_record_actor_and_source(changes):
    staff_event = AuditEvent.objects.get(
        object_type="tenancy.department", action="update", department_id=changes["a"].pk
    )
    assert (staff_event.source, staff_event.actor, staff_event.actor_name) == (
        AuditSource.API,
        changes["staff"],
        "staff",
    )
    assert (staff_event.before, staff_event.after) == ({"priority": 0}, {"priority": 1})

    member_events = AuditEvent.objects.filter(object_type="tenancy.membership", action="create")
    assert {
        (e.actor_name, e.department_id, e.source) for e in member_events.filter(source=AuditSource.API)
    } == {
        ("lead-a", changes["a"].pk, AuditSource.API),
        ("lead-b", changes["b"].pk, AuditSource.API),
    }
    created = member_events.get(actor_name="lead-a", source=AuditSource.API)
    assert created.after["role"] == "member"
    assert created.after["user"] == changes["newbie"].pk
