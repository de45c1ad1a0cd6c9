"""The audit log: what is recorded (create, update, delete with before/after; through the API, the admin, a
task, a command), what is not (unchanged saves), the audit page (visibility, filters, diff, pagination), and
the admin registrations (the audit log read-only, every model registered, the tenancy settings a
singleton)."""

from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib import admin
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.access import Role
from core.audit import audit_context
from core.models import AuditAction, AuditEvent, AuditSource
from portal.pages.audit import EVENTS_PER_PAGE
from tenancy.models import Department, Membership, TenancySettings
from tenancy.services import save_department
from tests.forms import admin_department_form

pytestmark = pytest.mark.django_db


def events(**filters):
    return AuditEvent.objects.filter(object_type="tenancy.department", **filters).order_by("pk")


@pytest.fixture
def staff_api(api_client, admin_user):
    api_client.force_authenticate(admin_user)
    return api_client


@pytest.fixture
def staff_browser(client, admin_user):
    client.force_login(admin_user)
    return client


# --- recording ----------------------------------------------------------------------------------------------


def test_api_create_update_delete_are_recorded_with_before_and_after(staff_api, admin_user):
    response = staff_api.post("/api/v1/departments/", {"name": "Alpha", "slug": "alpha"}, format="json")
    assert response.status_code == 201
    pk = response.json()["id"]
    staff_api.patch("/api/v1/departments/alpha/", {"priority": 3, "name": "Alpha Team"}, format="json")
    staff_api.delete("/api/v1/departments/alpha/")

    create, update, delete = events(object_id=str(pk))
    for event in (create, update, delete):
        assert (event.source, event.actor, event.actor_name, event.department_id) == (
            AuditSource.API,
            admin_user,
            "admin",
            pk,
        )
    assert create.action == AuditAction.CREATE and create.before is None
    assert create.after["slug"] == "alpha" and create.after["vlan_id"] == TenancySettings.load().vlan_first
    assert "updated_at" not in create.after  # volatile fields are left out
    assert update.action == AuditAction.UPDATE
    assert (update.before, update.after) == (
        {"name": "Alpha", "priority": 0},
        {"name": "Alpha Team", "priority": 3},
    )
    assert update.object_repr == "Alpha Team"
    assert delete.action == AuditAction.DELETE and delete.after is None
    assert delete.before["name"] == "Alpha Team" and delete.before["network_cidr"] == "10.64.0.0/24"


def test_unchanged_saves_record_nothing(staff_api):
    department = save_department(Department(name="Alpha", slug="alpha"))
    count = AuditEvent.objects.count()
    save_department(department)  # updated_at moves; nothing an auditor cares about does
    response = staff_api.patch("/api/v1/departments/alpha/", {"priority": 0, "name": "Alpha"}, format="json")
    assert response.status_code == 200
    department.refresh_from_db()
    save_department(department)
    assert AuditEvent.objects.count() == count


def test_admin_changes_are_recorded_with_source_admin(staff_browser, admin_user):
    form = admin_department_form(name="Alpha", slug="alpha")
    assert staff_browser.post("/admin/tenancy/department/add/", form).status_code == 302
    department = Department.objects.get(slug="alpha")
    form.update(
        {
            "priority": "5",
            "vlan_id": department.vlan_id,
            "vxlan_vni": department.vxlan_vni,
            "ib_pkey": department.ib_pkey,
            "network_cidr": department.network_cidr,
            "export_path": department.export_path,
            "storage_quota_gib": department.storage_quota_gib,
        }
    )
    assert staff_browser.post(f"/admin/tenancy/department/{department.pk}/change/", form).status_code == 302
    response = staff_browser.post(f"/admin/tenancy/department/{department.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Department.objects.exists()

    create, update, delete = events(object_id=str(department.pk))
    assert [e.action for e in (create, update, delete)] == ["create", "update", "delete"]
    assert {(e.source, e.actor_id) for e in (create, update, delete)} == {(AuditSource.ADMIN, admin_user.pk)}
    assert (update.before, update.after) == ({"priority": 0}, {"priority": 5})


def test_task_context_records_source_task_without_an_actor():
    with audit_context(AuditSource.TASK):
        department = save_department(Department(name="Alpha", slug="alpha"))
        department.priority = 2
        save_department(department)
        department.delete()
    assert [(e.action, e.source, e.actor, e.actor_name) for e in events()] == [
        ("create", AuditSource.TASK, None, ""),
        ("update", AuditSource.TASK, None, ""),
        ("delete", AuditSource.TASK, None, ""),
    ]


def test_outside_any_context_a_change_is_a_command():
    save_department(Department(name="Alpha", slug="alpha"))
    assert events().get().source == AuditSource.COMMAND


def test_membership_changes_carry_their_department(django_user_model):
    department = save_department(Department(name="Alpha", slug="alpha"))
    user = django_user_model.objects.create_user("someone")
    membership = Membership.objects.create(user=user, department=department, role=Role.MEMBER)
    membership.role = Role.LEAD
    membership.save()
    rows = AuditEvent.objects.filter(object_type="tenancy.membership").order_by("pk")
    assert [(e.action, e.department_id) for e in rows] == [
        ("create", department.pk),
        ("update", department.pk),
    ]
    assert (rows[1].before, rows[1].after) == ({"role": "member"}, {"role": "lead"})


# --- the audit page -----------------------------------------------------------------------------------------


@pytest.fixture
def tenants(department_a, department_b, lead_a, member_b, outsider):
    """The shared personas (Alpha led by lead-a; Beta with member-b; an outsider) and changes in both
    departments."""
    with audit_context(AuditSource.API, actor=lead_a):
        department_a.priority = 4
        save_department(department_a)
    with audit_context(AuditSource.UI):
        department_b.over_quota_weight = 3
        save_department(department_b)


def page_for(client, user, **params):
    client.force_login(user)
    return client.get("/audit/", params)


def shown(response):
    assert response.status_code == 200
    return [row.event for row in response.context["page"].object_list]


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_page_is_for_staff_and_leads(
    client, tenants, admin_user, lead_a, member_b, outsider, department_a
):
    assert page_for(client, member_b).status_code == 403
    assert page_for(client, outsider).status_code == 403
    client.logout()
    response = client.get("/audit/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")

    staff_rows = shown(page_for(client, admin_user))
    assert len(staff_rows) == AuditEvent.objects.count()
    lead_rows = shown(page_for(client, lead_a))
    assert lead_rows and {e.department_id for e in lead_rows} == {department_a.pk}
    assert len(lead_rows) == AuditEvent.objects.filter(department_id=department_a.pk).count()


def test_the_page_shows_who_when_source_action_object_and_diff(client, tenants, admin_user):
    response = page_for(client, admin_user, object_type="tenancy.department", action="update")
    page = response.content.decode()
    assert [e.object_repr for e in shown(response)] == ["Beta", "Alpha"]
    assert "lead-a" in page and "REST API" in page and "Web UI" in page
    assert "Updated" in page and "Alpha" in page
    # The compact diff: field label, old value struck through, new value.
    assert "priority:</span> <del>0</del>" in page
    assert "<ins>4</ins>" in page
    assert "over quota weight:</span>" in page
    assert "<del>1.00</del>" in page
    # A created object lists what it was created with, folded.
    response = page_for(client, admin_user, object_type="tenancy.department", action="create")
    assert "created with" in response.content.decode()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_page_filters_with_the_shared_filterset(client, tenants, admin_user):
    def reprs(**params):
        return [e.object_repr for e in shown(page_for(client, admin_user, **params))]

    assert reprs(object_type="tenancy.department", source="api") == ["Alpha"]
    filtered = page_for(client, admin_user, source="api").content.decode()
    assert '<a class="button" href="/audit/">Clear</a>' in filtered
    assert ">Clear</a>" not in page_for(client, admin_user).content.decode()
    assert reprs(object_type="tenancy.department", source="ui") == ["Beta"]
    assert reprs(actor="lead-a") == ["Alpha"]
    assert reprs(object_type="tenancy.department", department="beta") == ["Beta", "Beta"]
    assert reprs(object_type="tenancy.membership") == [
        "member-b (Department member, Beta)",
        "lead-a (Department lead, Alpha)",
    ]
    assert reprs(object="alp", action="update") == ["Alpha"]
    today = timezone.localdate()
    assert (
        len(reprs(date_after=today.isoformat(), date_before=today.isoformat())) == AuditEvent.objects.count()
    )
    assert reprs(date_after=(today + timedelta(days=1)).isoformat()) == []
    # An invalid value is reported, not a server error; the page still shows the rest.
    response = page_for(client, admin_user, source="carrier-pigeon")
    assert response.status_code == 200
    assert "carrier-pigeon" in response.content.decode()
    assert response.context["filter"].form.errors


def test_a_lead_cannot_filter_their_way_into_another_department(client, tenants, lead_a, department_b):
    response = page_for(client, lead_a, department_id=department_b.pk)
    assert shown(response) == []
    # Beta is not even offered in the department choices.
    assert [d.slug for d in response.context["departments"]] == ["alpha"]


@pytest.mark.slow(reason="grows the data to compare query counts")
def test_the_page_is_paginated_with_a_constant_number_of_queries(client, admin_user):
    def queries(page: int) -> int:
        with CaptureQueriesContext(connection) as captured:
            response = client.get("/audit/", {"page": page})
        assert response.status_code == 200
        return len(captured)

    client.force_login(admin_user)
    for number in range(3):
        save_department(Department(name=f"Dept {number}", slug=f"dept-{number}"))
    few = queries(1)
    for number in range(3, EVENTS_PER_PAGE + 10):
        save_department(Department(name=f"Dept {number}", slug=f"dept-{number}"))
    assert queries(1) == few
    assert queries(2) == few
    response = client.get("/audit/", {"page": 2})
    total = AuditEvent.objects.count()  # a department's creation is recorded with its default project's
    pages = -(-total // EVENTS_PER_PAGE)
    assert len(response.context["page"].object_list) == min(EVENTS_PER_PAGE, total - EVENTS_PER_PAGE)
    assert f"Page 2 of {pages}" in response.content.decode()


# --- admin registrations ------------------------------------------------------------------------------------


def test_every_model_of_tenancy_scheduling_and_portal_is_in_the_admin():
    for app_label in ("tenancy", "scheduling", "portal"):
        for model in apps.get_app_config(app_label).get_models():
            assert model in admin.site._registry, model


@pytest.mark.slow(reason="every Django admin page, one by one")
def test_every_admin_page_renders(staff_browser, demo_inventory):
    from portal.demo.seeding import seed_tenants

    seed_tenants(password="demo-password-1")
    for app_label in ("tenancy", "scheduling", "portal"):
        for model in apps.get_app_config(app_label).get_models():
            name = model._meta.model_name
            response = staff_browser.get(f"/admin/{app_label}/{name}/", follow=True)
            assert response.status_code == 200, name
            obj = model._default_manager.first()
            if obj is not None:
                response = staff_browser.get(f"/admin/{app_label}/{name}/{obj.pk}/change/")
                assert response.status_code == 200, name
    assert staff_browser.get("/admin/tenancy/department/add/").status_code == 200


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_audit_log_is_read_only_in_the_admin(staff_browser):
    save_department(Department(name="Alpha", slug="alpha"))
    event = AuditEvent.objects.first()
    assert staff_browser.get("/admin/core/auditevent/").status_code == 200
    assert staff_browser.get("/admin/core/auditevent/add/").status_code == 403
    response = staff_browser.get(f"/admin/core/auditevent/{event.pk}/change/")
    assert response.status_code == 200
    assert 'name="_save"' not in response.content.decode()
    assert (
        staff_browser.post(f"/admin/core/auditevent/{event.pk}/delete/", {"post": "yes"}).status_code == 403
    )
    assert AuditEvent.objects.filter(pk=event.pk).exists()


def test_tenancy_settings_are_a_singleton_in_the_admin(staff_browser, admin_user):
    TenancySettings.objects.all().delete()
    assert staff_browser.get("/admin/tenancy/tenancysettings/add/").status_code == 200
    settings = TenancySettings.load()
    assert staff_browser.get("/admin/tenancy/tenancysettings/add/").status_code == 403
    response = staff_browser.get("/admin/tenancy/tenancysettings/")
    assert response.status_code == 302
    assert response["Location"] == f"/admin/tenancy/tenancysettings/{settings.pk}/change/"
    response = staff_browser.post(f"/admin/tenancy/tenancysettings/{settings.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    assert TenancySettings.objects.exists()

    # The pools are checked: a tenant network must fit in the supernet.
    data = {
        field.name: getattr(settings, field.name)
        for field in TenancySettings._meta.fields
        if field.name != "id"
    }
    response = staff_browser.post(
        f"/admin/tenancy/tenancysettings/{settings.pk}/change/",
        {**data, "tenant_supernet": "10.64.0.0/16", "tenant_prefix": 12},
    )
    assert response.status_code == 200
    assert "tenant_prefix" in response.context["adminform"].form.errors
    response = staff_browser.post(
        f"/admin/tenancy/tenancysettings/{settings.pk}/change/", {**data, "vlan_first": 200}
    )
    assert response.status_code == 302
    assert TenancySettings.load().vlan_first == 200
    change = AuditEvent.objects.get(object_type="tenancy.tenancysettings", action="update")
    assert (change.source, change.actor, change.after) == (AuditSource.ADMIN, admin_user, {"vlan_first": 200})


def test_tenancy_settings_can_be_added_when_missing(staff_browser):
    TenancySettings.objects.all().delete()
    data = {field.name: field.get_default() for field in TenancySettings._meta.fields if field.name != "id"}
    response = staff_browser.post("/admin/tenancy/tenancysettings/add/", data)
    assert response.status_code == 302
    assert TenancySettings.objects.get().pk == 1
