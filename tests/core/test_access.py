"""The one access rule (core.access): who is an admin or a lead, in Python, templates, DRF and on every page
and endpoint that once wrote the rule its own way.

Platform admins are active staff users *or* active superusers: a superuser without `is_staff` gets in
everywhere an admin does (some pages once asked for `is_staff` alone). Leads and members are refused with
a 403 that says who may.
"""

import pytest
from django.contrib.auth.models import AnonymousUser, Permission
from django.template import Context, Template
from django.urls import reverse
from rest_framework.request import Request
from rest_framework.test import APIClient, APIRequestFactory

from core.access import IsAdmin, IsAdminOrReadOnly, Role, is_admin, leads, leads_any
from inventory.models import PartitionPlan, Rack
from scheduling.choices import JobState
from scheduling.models import Job
from scheduling.services.actions import may_cancel
from tenancy.api.telemetry import EXAMPLE as DCGM_PAGE
from tenancy.models import Department, Membership
from tenancy.services import save_department

pytestmark = pytest.mark.django_db

PERSONAS = ("anonymous", "member", "lead", "staff", "superuser", "inactive_staff", "inactive_lead")


@pytest.fixture
def world(django_user_model):
    alpha = save_department(Department(name="Alpha", slug="alpha"))
    beta = save_department(Department(name="Beta", slug="beta"))
    create = django_user_model.objects.create_user
    users = {
        "anonymous": AnonymousUser(),
        "member": create("member-a"),
        "lead": create("lead-a"),
        "staff": create("staff", is_staff=True),
        "superuser": create("root", is_superuser=True),  # not staff
        "inactive_staff": create("gone-staff", is_staff=True, is_superuser=True, is_active=False),
        "inactive_lead": create("gone-lead", is_active=False),
        "lead_b": create("lead-b"),
    }
    for name, role in [("member", Role.MEMBER), ("lead", Role.LEAD), ("inactive_lead", Role.LEAD)]:
        Membership.objects.create(user=users[name], department=alpha, role=role)
    Membership.objects.create(user=users["lead_b"], department=beta, role=Role.LEAD)
    return {"alpha": alpha, "beta": beta, **users}


# --- the rule ---------------------------------------------------------------------------------------------

EXPECTED = {
    # persona: (is_admin, leads Alpha, leads Beta, leads any)
    "anonymous": (False, False, False, False),
    "member": (False, False, False, False),
    "lead": (False, True, False, True),
    "staff": (True, True, True, True),
    "superuser": (True, True, True, True),
    "inactive_staff": (False, False, False, False),
    "inactive_lead": (False, False, False, False),
}


@pytest.mark.slow(reason="7 cases, each a full request through the stack")
@pytest.mark.parametrize("persona", PERSONAS)
def test_the_rule_for_every_persona(world, persona):
    user = world[persona]
    got = (is_admin(user), leads(user, world["alpha"]), leads(user, world["beta"].pk), leads_any(user))
    assert got == EXPECTED[persona]


@pytest.mark.slow(reason="7 cases, each a full request through the stack")
@pytest.mark.parametrize("persona", PERSONAS)
def test_visibility_follows_the_rule(world, persona):
    """visible_to stays per model, but asks the same rule: inactive accounts see nothing."""
    user = world[persona]
    seen = set(Department.objects.visible_to(user).values_list("slug", flat=True))
    led = set(Department.objects.led_by(user).values_list("slug", flat=True))
    expected_seen = {
        "anonymous": set(),
        "member": {"alpha"},
        "lead": {"alpha"},
        "staff": {"alpha", "beta"},
        "superuser": {"alpha", "beta"},
        "inactive_staff": set(),
        "inactive_lead": set(),
    }[persona]
    assert seen == expected_seen
    assert led == {
        slug for slug, ok in (("alpha", EXPECTED[persona][1]), ("beta", EXPECTED[persona][2])) if ok
    }


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_template_filters_ask_the_rule(world):
    template = Template(
        "{% load access %}{% if user|is_admin %}admin{% endif %}/"
        "{% if user|leads:department %}lead{% endif %}"
    )
    rendered = {
        persona: template.render(Context({"user": world[persona], "department": world["alpha"]}))
        for persona in PERSONAS
    }
    assert rendered == {
        "anonymous": "/",
        "member": "/",
        "lead": "/lead",
        "staff": "admin/lead",
        "superuser": "admin/lead",
        "inactive_staff": "/",
        "inactive_lead": "/",
    }


@pytest.mark.slow(reason="7 cases, each a full request through the stack")
@pytest.mark.parametrize("persona", PERSONAS)
def test_the_drf_permission_classes_ask_the_rule(world, persona):
    factory = APIRequestFactory()

    def allowed(permission, method: str) -> bool:
        request = Request(getattr(factory, method)("/api/v1/anything/"))
        request.user = world[persona]
        return permission().has_permission(request, view=None)

    admin = EXPECTED[persona][0]
    assert allowed(IsAdmin, "get") is admin and allowed(IsAdmin, "post") is admin
    assert allowed(IsAdminOrReadOnly, "get") is True
    assert allowed(IsAdminOrReadOnly, "patch") is admin


def test_who_may_cancel_a_job(world):
    job = Job.objects.create(
        department=world["alpha"], name="train", gpus=4, state=JobState.PENDING, submitted_by=world["member"]
    )
    other = Job.objects.create(department=world["alpha"], name="other", gpus=4, state=JobState.PENDING)
    assert may_cancel(world["member"], job) and not may_cancel(world["member"], other)
    assert may_cancel(world["lead"], other) and not may_cancel(world["lead_b"], other)
    assert may_cancel(world["superuser"], other) and not may_cancel(world["inactive_staff"], other)


# --- every page and endpoint that once wrote the rule its own way -------------------------------------------


@pytest.fixture
def browser(client, world):
    def log_in(persona: str):
        client.force_login(world[persona])
        return client

    return log_in


@pytest.fixture
def api(world):
    def log_in(persona: str) -> APIClient:
        client = APIClient()
        client.force_authenticate(world[persona])
        return client

    return log_in


def refused(response, reason: str) -> bool:
    text = response.content.decode()
    return response.status_code == 403 and reason in text


ADMIN_PAGES = [
    (reverse("integrations:plan-list"), "Only platform admins may use the NVLink partition wizard."),
    (reverse("integrations:plan-new"), "Only platform admins may use the NVLink partition wizard."),
    (reverse("integrations:push-list"), "Only platform admins may use configuration targets and pushes."),
    (reverse("integrations:target-list"), "Only platform admins may use configuration targets and pushes."),
    (
        reverse("integrations:department-edit", args=["alpha"]),
        "Only platform admins may use department settings.",
    ),
    (reverse("scheduling:admin-dashboard"), "Only platform admins may use the capacity dashboard."),
    (reverse("inventory:health-events"), "Only platform admins may use the health centre."),
    (reverse("inventory:health-offenders"), "Only platform admins may use the health centre."),
    (reverse("inventory:health-service"), "Only platform admins may use the health centre."),
    (reverse("inventory:fabric-import"), "Only platform admins may use fabric imports."),
]


@pytest.mark.slow(reason="10 cases, each a full request through the stack")
@pytest.mark.parametrize("page, reason", ADMIN_PAGES)
def test_admin_pages_refuse_leads_and_members_with_the_reason(browser, page, reason):
    assert refused(browser("lead").get(page), reason), page
    assert refused(browser("member").get(page), reason), page


@pytest.mark.slow(reason="20 cases, each a full request through the stack")
@pytest.mark.parametrize("page", [page for page, _reason in ADMIN_PAGES])
@pytest.mark.parametrize("persona", ["staff", "superuser"])
def test_admin_pages_let_in_staff_and_a_superuser_who_is_not_staff(browser, page, persona):
    assert browser(persona).get(page).status_code == 200, page


def test_a_lead_may_not_create_a_department(browser):
    response = browser("lead").post(reverse("scheduling:department-list"), {"name": "Gamma", "slug": "gamma"})
    assert refused(response, "Only platform admins may use department creation.")
    assert not Department.objects.filter(slug="gamma").exists()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_menu_and_the_django_admin_follow_the_rule(browser):
    pushes = f'href="{reverse("integrations:push-list")}"'
    assert pushes in browser("superuser").get(reverse("home")).content.decode()
    assert browser("superuser").get(reverse("admin:index")).status_code == 200
    assert pushes not in browser("lead").get(reverse("home")).content.decode()
    assert browser("lead").get(reverse("admin:index")).status_code == 302  # to the admin's login


def test_members_pages_leads_manage_members_refuse_with_the_reason(browser, world):
    url = reverse("scheduling:member-set", args=["alpha"])
    body = {"username": world["lead_b"].username, "role": Role.MEMBER}
    response = browser("member").post(url, body)
    assert refused(response, "Only leads of Alpha and platform admins may change its members.")
    assert not Membership.objects.filter(user=world["lead_b"], department=world["alpha"]).exists()
    assert browser("lead").post(url, body).status_code == 302
    assert Membership.objects.filter(user=world["lead_b"], department=world["alpha"]).exists()
    page = browser("lead").get(reverse("scheduling:department-detail", args=["alpha"])).content.decode()
    assert 'name="username"' in page  # the form is shown to whom may use it
    page = browser("member").get(reverse("scheduling:department-detail", args=["alpha"])).content.decode()
    assert 'name="username"' not in page


def test_the_members_api_asks_the_same_rule(api, world):
    url = "/api/v1/departments/alpha/members/"
    body = {"username": world["lead_b"].username, "role": "member"}
    response = api("member").post(url, body, format="json")
    assert response.status_code == 403
    assert response.json()["detail"] == "Only leads of Alpha and platform admins may change its members."
    assert api("lead").post(url, body, format="json").status_code == 201
    assert api("superuser").delete(f"{url}{world['lead_b'].username}/").status_code == 204


def test_the_departments_api_writes_are_for_admins(api):
    response = api("lead").patch("/api/v1/departments/alpha/", {"priority": 3}, format="json")
    assert response.status_code == 403
    assert response.json()["detail"] == "Only platform admins may create, change or delete departments."
    response = api("superuser").patch("/api/v1/departments/alpha/", {"priority": 3}, format="json")
    assert response.status_code == 200
    assert Department.objects.get(slug="alpha").priority == 3


def test_the_plan_api_and_pages_are_for_admins(api, browser):
    plan = PartitionPlan.objects.create(rack=Rack.objects.create(name="gb-r01"), layout=[], base_layout="")
    response = api("lead").get(f"/api/v1/partition-plans/{plan.pk}/")
    assert response.status_code == 403
    assert response.json()["detail"] == "Only platform admins may use this endpoint."
    # PartitionPlan.objects.visible_to asks the rule too: a superuser who is not staff sees the plan.
    assert api("superuser").get(f"/api/v1/partition-plans/{plan.pk}/").json()["id"] == plan.pk
    assert browser("superuser").get(reverse("integrations:plan-detail", args=[plan.pk])).status_code == 200


def test_the_config_targets_api_is_for_admins(api):
    response = api("lead").get("/api/v1/config-targets/")
    assert response.status_code == 403 and "platform admins" in response.json()["detail"]
    assert api("superuser").get("/api/v1/config-targets/").status_code == 200


def test_telemetry_push_takes_a_node_agent_or_an_admin(api, world):
    url = "/api/v1/telemetry/dcgm/"

    def push(persona):
        return api(persona).generic("POST", url, DCGM_PAGE, content_type="text/plain")

    response = push("lead")
    assert response.status_code == 403
    assert "'inventory.report_discovery' permission" in response.json()["detail"]
    assert push("superuser").status_code == 200
    world["member"].user_permissions.add(Permission.objects.get(codename="report_discovery"))
    assert push("member").status_code == 200  # a node agent's token user


def test_the_audit_log_is_for_admins_and_leads(browser):
    url = reverse("audit-list")
    assert refused(
        browser("member").get(url), "Only platform admins and department leads may use the audit log."
    )
    assert "the departments you lead" in browser("lead").get(url).content.decode()
    assert "every department and the fleet" in browser("superuser").get(url).content.decode()
