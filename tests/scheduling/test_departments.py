"""Department pages: who sees and changes what (lead of A, member of B, outsider, admin), member management
through the services with audit events, and the admin's department form showing the services' errors."""

import html
import re

import pytest
from django.urls import reverse

from core.access import Role
from core.models import AuditAction, AuditEvent, AuditSource
from tenancy.models import Department, Membership
from tenancy.services import schedulable_gpus
from tests.factories import make_department
from tests.forms import department_form

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def text(response) -> str:
    """The response's visible text, tags stripped and whitespace collapsed."""
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode())))


# The shared personas (tests/conftest.py), their departments with guarantees on the demo inventory.


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Alpha", guaranteed_gpus=40)


@pytest.fixture
def department_b(demo_inventory):
    return make_department("Beta", guaranteed_gpus=24, priority=1)


def detail(department) -> str:
    return reverse("scheduling:department-detail", args=[department.slug])


def member_set(department) -> str:
    return reverse("scheduling:member-set", args=[department.slug])


def member_remove(membership) -> str:
    return reverse("scheduling:member-remove", args=[membership.department.slug, membership.pk])


def edit(department) -> str:
    return reverse("integrations:department-edit", args=[department.slug])


LIST = "/tenancy/departments/"
DASHBOARD = "/tenancy/dashboard/"


def test_url_names():
    assert reverse("scheduling:department-list") == LIST
    assert reverse("scheduling:admin-dashboard") == DASHBOARD
    assert detail(Department(slug="alpha")) == "/tenancy/departments/alpha/"


# ---------------------------------------------------------------------------------------------- anonymous


def test_anonymous_users_are_sent_to_log_in(client, department_a, lead_a):
    membership = Membership.objects.get(user=lead_a)
    for url in [LIST, DASHBOARD, detail(department_a), edit(department_a)]:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login")), url
    for url in [member_set(department_a), member_remove(membership), LIST]:
        response = client.post(url, {"username": "x", "role": "member"})
        assert response.status_code == 302, url
        assert Membership.objects.count() == 1


# ------------------------------------------------------------------------------------------ department list


def test_list_shows_only_visible_departments(
    client_as, department_a, department_b, lead_a, member_b, outsider, platform_admin
):
    def slugs(response):
        return set(re.findall(r'data-department="([^"]+)"', response.content.decode()))

    response = client_as(lead_a).get(LIST)
    assert response.status_code == 200
    assert slugs(response) == {"alpha"}
    assert "New department" not in text(response)

    assert slugs(client_as(member_b).get(LIST)) == {"beta"}

    response = client_as(outsider).get(LIST)
    assert slugs(response) == set()
    assert "not a member of any department" in text(response)

    response = client_as(platform_admin).get(LIST)
    assert slugs(response) == {"alpha", "beta"}
    assert "New department" in text(response)


def test_list_row_shows_quota_network_and_storage(client_as, department_a, lead_a):
    page = text(client_as(lead_a).get(LIST))
    assert "Alpha" in page
    assert f"VLAN {department_a.vlan_id}" in page
    assert f"VNI {department_a.vxlan_vni}" in page
    assert department_a.pkey_hex in page
    assert department_a.network_cidr in page
    assert department_a.export_path in page
    assert "10,240 GiB" in page


# ------------------------------------------------------------------------------------- department dashboard


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_dashboard_of_a(client_as, department_a, lead_a, member_b, outsider, platform_admin):
    response = client_as(lead_a).get(detail(department_a))
    assert response.status_code == 200
    assert 'id="id_member_username"' in response.content.decode()  # the lead manages members
    assert client_as(member_b).get(detail(department_a)).status_code == 404
    assert client_as(outsider).get(detail(department_a)).status_code == 404
    response = client_as(platform_admin).get(detail(department_a))
    assert response.status_code == 200
    assert 'id="id_member_username"' in response.content.decode()
    assert "Edit department" in text(response)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_dashboard_of_b_is_read_only_for_its_member(
    client_as, department_b, department_a, lead_a, lead_b, member_b, outsider
):
    client = client_as(member_b)
    response = client.get(detail(department_b))
    assert response.status_code == 200
    markup = response.content.decode()
    assert 'id="id_member_username"' not in markup
    assert "/remove/" not in markup
    assert "read-only" in text(response)
    assert "Edit department" not in text(response)

    lead_membership = Membership.objects.get(user=lead_b)
    # A member may not manage: 403. The department stays as it was.
    assert (
        client.post(member_set(department_b), {"username": "outsider", "role": "member"}).status_code == 403
    )
    assert client.post(member_set(department_b), {"username": "member-b", "role": "lead"}).status_code == 403
    assert client.post(member_remove(lead_membership)).status_code == 403
    # Another department's lead and an outsider cannot even see it: 404.
    for user in (lead_a, outsider):
        other = client_as(user)
        assert other.get(detail(department_b)).status_code == 404
        assert (
            other.post(member_set(department_b), {"username": "outsider", "role": "member"}).status_code
            == 404
        )
        assert other.post(member_remove(lead_membership)).status_code == 404
    assert set(Membership.objects.filter(department=department_b).values_list("user__username", "role")) == {
        ("lead-b", Role.LEAD),
        ("member-b", Role.MEMBER),
    }


def test_member_sees_their_departments_people_read_only(client_as, lead_a, department_b, lead_b, member_b):
    page = text(client_as(member_b).get(detail(department_b)))
    assert "Members 2" in page and "Your membership" not in page
    assert "member-b" in page and "lead-b" in page  # a colleague, read-only (no form: see the test above)
    assert "lead-a" not in page  # never another department's


def test_membership_urls_of_another_department_are_404(client_as, department_a, department_b, lead_a, lead_b):
    """A lead of A cannot reach B's membership through A's URL."""
    b_membership = Membership.objects.get(user=lead_b)
    url = reverse("scheduling:member-remove", args=[department_a.slug, b_membership.pk])
    assert client_as(lead_a).post(url).status_code == 404
    assert Membership.objects.filter(pk=b_membership.pk).exists()


def test_member_actions_need_post(client_as, department_a, lead_a):
    membership = Membership.objects.get(user=lead_a)
    client = client_as(lead_a)
    assert client.get(member_set(department_a)).status_code == 405
    assert client.get(member_remove(membership)).status_code == 405


# ---------------------------------------------------------------------------------------- member management


def test_lead_adds_changes_and_removes_a_member_with_audit(client_as, department_a, lead_a, outsider):
    client = client_as(lead_a)
    AuditEvent.objects.all().delete()

    response = client.post(member_set(department_a), {"username": "outsider", "role": "member"}, headers=HTMX)
    assert response.status_code == 200
    markup = response.content.decode()
    assert 'id="members"' in markup and "<html" not in markup  # the partial only
    assert 'data-username="outsider"' in markup
    membership = Membership.objects.get(user=outsider, department=department_a)
    assert membership.role == Role.MEMBER
    created = AuditEvent.objects.get(object_type="tenancy.membership", action=AuditAction.CREATE)
    assert created.source == AuditSource.UI
    assert created.actor == lead_a
    assert created.department_id == department_a.pk

    response = client.post(member_set(department_a), {"username": "outsider", "role": "lead"}, headers=HTMX)
    assert response.status_code == 200
    membership.refresh_from_db()
    assert membership.role == Role.LEAD
    updated = AuditEvent.objects.get(object_type="tenancy.membership", action=AuditAction.UPDATE)
    assert (updated.source, updated.actor, updated.after) == (AuditSource.UI, lead_a, {"role": "lead"})

    response = client.post(member_remove(membership), headers=HTMX)
    assert response.status_code == 200
    assert 'data-username="outsider"' not in response.content.decode()
    assert not Membership.objects.filter(pk=membership.pk).exists()
    deleted = AuditEvent.objects.get(object_type="tenancy.membership", action=AuditAction.DELETE)
    assert (deleted.source, deleted.actor) == (AuditSource.UI, lead_a)


def test_removing_a_member_without_htmx_asks_first(client_as, department_a, lead_a, outsider):
    membership = Membership.objects.create(user=outsider, department=department_a, role=Role.MEMBER)
    client = client_as(lead_a)
    asked = client.post(member_remove(membership))
    assert asked.status_code == 200 and 'data-confirm="asked"' in asked.content.decode()
    assert "Remove outsider from Alpha?" in text(asked)
    assert Membership.objects.filter(pk=membership.pk).exists()
    response = client.post(member_remove(membership), {"confirmed": "yes"})
    assert response.status_code == 302 and response["Location"] == detail(department_a) + "#members"
    assert not Membership.objects.filter(pk=membership.pk).exists()
    assert "outsider removed from Alpha." in text(client.get(response["Location"]))


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_member_management_without_htmx_redirects_with_a_message(client_as, department_a, lead_a, outsider):
    client = client_as(lead_a)
    response = client.post(member_set(department_a), {"username": "outsider", "role": "member"})
    assert response.status_code == 302
    assert response["Location"] == detail(department_a) + "#members"
    assert Membership.objects.filter(user=outsider, department=department_a).exists()
    page = text(client.get(response["Location"]))
    assert "outsider is now department member of Alpha" in page

    response = client.post(member_set(department_a), {"username": "nobody", "role": "member"}, follow=True)
    assert "no user named 'nobody'" in text(response)


def test_member_errors_in_plain_words(client_as, department_a, lead_a):
    client = client_as(lead_a)
    response = client.post(member_set(department_a), {"username": "nobody", "role": "member"}, headers=HTMX)
    assert response.status_code == 200
    assert "no user named 'nobody'" in text(response)

    response = client.post(member_set(department_a), {"username": "lead-a", "role": "owner"}, headers=HTMX)
    assert "Select a valid choice" in text(response)

    only_lead = Membership.objects.get(user=lead_a)
    response = client.post(member_remove(only_lead), headers=HTMX)
    assert "lead-a is the only lead of Alpha: name another first" in text(response)
    assert Membership.objects.filter(pk=only_lead.pk).exists()

    response = client.post(member_set(department_a), {"username": "lead-a", "role": "member"}, headers=HTMX)
    assert "lead-a is the only lead of Alpha: name another lead first" in text(response)
    only_lead.refresh_from_db()
    assert only_lead.role == Role.LEAD


def test_lead_removing_themselves_leaves_the_page(client_as, department_a, lead_a, outsider):
    client = client_as(lead_a)
    client.post(member_set(department_a), {"username": "outsider", "role": "lead"}, headers=HTMX)
    response = client.post(member_remove(Membership.objects.get(user=lead_a)), headers=HTMX)
    assert response.status_code == 200
    assert response["HX-Redirect"] == LIST
    assert client.get(detail(department_a)).status_code == 404


def test_admin_manages_any_department(client_as, department_b, member_b, platform_admin, outsider):
    client = client_as(platform_admin)
    response = client.post(member_set(department_b), {"username": "outsider", "role": "lead"}, headers=HTMX)
    assert response.status_code == 200
    assert Membership.objects.get(user=outsider, department=department_b).role == Role.LEAD
    event = AuditEvent.objects.filter(object_type="tenancy.membership").latest("pk")
    assert (event.source, event.actor) == (AuditSource.UI, platform_admin)


# --------------------------------------------------------------------------------------------- admin pages


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_admin_only_pages(client_as, department_a, department_b, lead_a, member_b, outsider, platform_admin):
    for user in (lead_a, member_b, outsider):
        client = client_as(user)
        assert client.get(DASHBOARD).status_code == 403, user
        assert client.get(edit(department_a)).status_code == 403, user
        assert client.post(edit(department_a), {"name": "Taken over"}).status_code == 403, user
        assert client.post(LIST, {"name": "Gamma", "slug": "gamma"}).status_code == 403, user
    assert not Department.objects.filter(slug="gamma").exists()
    assert Department.objects.get(pk=department_a.pk).name == "Alpha"

    client = client_as(platform_admin)
    assert client.get(DASHBOARD).status_code == 200
    assert client.get(edit(department_a)).status_code == 200
    assert client.get(edit(Department(slug="missing"))).status_code == 404


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_nav_links(client_as, lead_a, platform_admin):
    markup = client_as(lead_a).get("/").content.decode()
    assert f'href="{LIST}"' in markup
    assert f'href="{DASHBOARD}"' not in markup
    markup = client_as(platform_admin).get("/").content.decode()
    assert f'href="{LIST}"' in markup and f'href="{DASHBOARD}"' in markup


def form_data(**values) -> dict:
    return department_form(**{"name": "Gamma", "slug": "gamma", "guaranteed_gpus": 16, **values})


def test_admin_creates_a_department_with_allocated_isolation(client_as, department_a, platform_admin):
    client = client_as(platform_admin)
    response = client.post(LIST, form_data())
    assert response.status_code == 302
    gamma = Department.objects.get(slug="gamma")
    assert response["Location"] == detail(gamma)
    assert gamma.guaranteed_gpus == 16
    # Allocated from the pools, next to Alpha's.
    assert gamma.vlan_id == department_a.vlan_id + 1
    assert gamma.ib_pkey == department_a.ib_pkey + 1
    assert gamma.network_cidr == "10.64.1.0/24"
    assert gamma.export_path == "/exports/tenants/gamma"
    assert gamma.storage_quota_gib == 10240
    event = AuditEvent.objects.get(object_type="tenancy.department", object_id=str(gamma.pk))
    assert (event.source, event.actor, event.action) == (AuditSource.UI, platform_admin, AuditAction.CREATE)


def test_department_form_shows_the_guarantee_shortfall_on_its_field(
    client_as, department_a, department_b, platform_admin
):
    capacity = schedulable_gpus()
    response = client_as(platform_admin).post(LIST, form_data(guaranteed_gpus=capacity))
    assert response.status_code == 200
    form = response.context["form"]
    others = department_a.guaranteed_gpus + department_b.guaranteed_gpus
    promised = others + capacity
    assert form.errors["guaranteed_gpus"] == [
        f"guarantees would total {promised} GPUs but only {capacity} schedulable healthy GPUs exist: "
        f"{promised - capacity} short ({others} already guaranteed to other departments)"
    ]
    # The error is the one the field's aria-describedby names (Django's `<id>_error`).
    html = response.content.decode()
    assert 'aria-describedby="id_guaranteed_gpus_helptext id_guaranteed_gpus_error"' in html
    assert 'id="id_guaranteed_gpus_error"' in html and 'id="id_guaranteed_gpus_helptext"' in html
    assert "<details" in response.content.decode() and " open>" in response.content.decode()
    assert not Department.objects.filter(slug="gamma").exists()


def test_department_form_shows_limit_below_guarantee_on_its_field(client_as, department_a, platform_admin):
    client = client_as(platform_admin)
    response = client.post(LIST, form_data(guaranteed_gpus=16, limit_gpus=8))
    assert response.context["form"].errors == {
        "limit_gpus": ["the limit (8) may not be below the guarantee (16)"]
    }
    response = client.post(
        edit(department_a), form_data(name="Alpha", slug="alpha", guaranteed_gpus=40, limit_gpus=10)
    )
    assert response.status_code == 200
    assert response.context["form"].errors == {
        "limit_gpus": ["the limit (10) may not be below the guarantee (40)"]
    }
    assert Department.objects.get(pk=department_a.pk).limit_gpus is None


def test_department_form_shows_isolation_and_uniqueness_errors(client_as, department_a, platform_admin):
    client = client_as(platform_admin)
    response = client.post(
        LIST, form_data(vlan_id=department_a.vlan_id, network_cidr="10.64.0.128/25", name="Alpha")
    )
    errors = response.context["form"].errors
    assert errors["vlan_id"] == [f"VLAN ID {department_a.vlan_id} is already assigned to Alpha"]
    assert errors["network_cidr"] == [f"10.64.0.128/25 overlaps Alpha's network {department_a.network_cidr}"]
    assert errors["name"] == ["a department with this name already exists"]
    assert Department.objects.count() == 1


def test_the_export_path_and_slug_fields_say_what_they_take(client_as, department_a, platform_admin):
    """Exports must lie inside the export root: the field says so before a path is refused, on the new
    department form and the edit form, with the root the installation has set; the slug's rules too."""
    from tenancy.models import TenancySettings

    client = client_as(platform_admin)
    response = client.get(LIST)
    says = "Leave empty to allocate /exports/tenants/<slug>. Otherwise a directory inside /exports/tenants."
    assert says in text(response)
    # The slug's help is for people: the rules and the reserved names, not a module's name.
    assert "starting with a letter. Names Kubernetes, Slurm or Rackplane use" in text(response)
    assert "tenancy.naming" not in text(response)
    refused = client.post(LIST, form_data(export_path="/etc/gamma"))
    assert refused.context["form"].errors["export_path"] == [
        "The export path '/etc/gamma' is not inside the export root /exports/tenants: departments' exports "
        "live under it."
    ]
    assert says in text(refused)
    TenancySettings.objects.update_or_create(pk=1, defaults={"export_root": "/srv/nfs"})
    edit_page = text(client.get(edit(department_a)))
    assert "Otherwise a directory inside /srv/nfs." in edit_page


def test_admin_edits_a_department(client_as, department_a, platform_admin):
    client = client_as(platform_admin)
    data = form_data(
        name="Alpha",
        slug="alpha",
        guaranteed_gpus=48,
        limit_gpus=96,
        priority=2,
        vlan_id=department_a.vlan_id,
        vxlan_vni=department_a.vxlan_vni,
        ib_pkey=department_a.ib_pkey,
        network_cidr=department_a.network_cidr,
        export_path=department_a.export_path,
        storage_quota_gib=20480,
    )
    response = client.post(edit(department_a), data)
    assert response.status_code == 302
    department_a.refresh_from_db()
    assert (
        department_a.guaranteed_gpus,
        department_a.limit_gpus,
        department_a.priority,
        department_a.storage_quota_gib,
    ) == (
        48,
        96,
        2,
        20480,
    )
    event = AuditEvent.objects.filter(object_type="tenancy.department", action=AuditAction.UPDATE).latest(
        "pk"
    )
    assert (event.source, event.actor) == (AuditSource.UI, platform_admin)
    assert event.after["guaranteed_gpus"] == 48


def test_edit_form_is_prefilled(client_as, department_a, platform_admin):
    response = client_as(platform_admin).get(edit(department_a))
    markup = response.content.decode()
    assert f'value="{department_a.network_cidr}"' in markup
    assert f'value="{department_a.vlan_id}"' in markup
    assert "Leave empty to allocate from the pool." in markup
