"""Department pages: who sees and changes what (lead of A, member of B, outsider, admin), member management
through the services with audit events, and the admin's department form showing the services' errors."""

import html
import re

import pytest
from django.urls import reverse

from core.access import Role
from core.models import AuditAction, AuditEvent, AuditSource
from tenancy.models import Department, Membership
from tenancy.services import save_department, schedulable_gpus
from tests.forms import department_form

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
PASSWORD = "view-test-password-1"


def text(response) -> str:
    """The response's visible text, tags stripped and whitespace collapsed."""
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", response.content.decode())))


@pytest.fixture
def alpha(demo_inventory):
    return save_department(Department(name="Alpha", slug="alpha", guaranteed_gpus=40))


@pytest.fixture
def beta(demo_inventory):
    return save_department(Department(name="Beta", slug="beta", guaranteed_gpus=24, priority=1))


@pytest.fixture
def lead_a(django_user_model, alpha):
    user = django_user_model.objects.create_user("lead-a", "lead-a@example.com", PASSWORD)
    Membership.objects.create(user=user, department=alpha, role=Role.LEAD)
    return user


@pytest.fixture
def member_b(django_user_model, beta):
    user = django_user_model.objects.create_user("member-b", "member-b@example.com", PASSWORD)
    Membership.objects.create(user=user, department=beta, role=Role.MEMBER)
    return user


@pytest.fixture
def lead_b(django_user_model, beta):
    user = django_user_model.objects.create_user("lead-b", "lead-b@example.com", PASSWORD)
    Membership.objects.create(user=user, department=beta, role=Role.LEAD)
    return user


@pytest.fixture
def outsider(django_user_model, demo_inventory):
    return django_user_model.objects.create_user("outsider", "outsider@example.com", PASSWORD)


@pytest.fixture
def as_user(client):
    def login(user):
        client.force_login(user)
        return client

    return login


def detail(department) -> str:
    return reverse("tenancy:department-detail", args=[department.slug])


def member_set(department) -> str:
    return reverse("tenancy:member-set", args=[department.slug])


def member_remove(membership) -> str:
    return reverse("tenancy:member-remove", args=[membership.department.slug, membership.pk])


def edit(department) -> str:
    return reverse("tenancy:department-edit", args=[department.slug])


LIST = "/tenancy/departments/"
DASHBOARD = "/tenancy/dashboard/"


def test_url_names():
    assert reverse("tenancy:department-list") == LIST
    assert reverse("tenancy:admin-dashboard") == DASHBOARD
    assert detail(Department(slug="alpha")) == "/tenancy/departments/alpha/"


# ---------------------------------------------------------------------------------------------- anonymous


def test_anonymous_users_are_sent_to_log_in(client, alpha, lead_a):
    membership = Membership.objects.get(user=lead_a)
    for url in [LIST, DASHBOARD, detail(alpha), edit(alpha)]:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login")), url
    for url in [member_set(alpha), member_remove(membership), LIST]:
        response = client.post(url, {"username": "x", "role": "member"})
        assert response.status_code == 302, url
        assert Membership.objects.count() == 1


# ------------------------------------------------------------------------------------------ department list


def test_list_shows_only_visible_departments(as_user, alpha, beta, lead_a, member_b, outsider, admin_user):
    def slugs(response):
        return set(re.findall(r'data-department="([^"]+)"', response.content.decode()))

    response = as_user(lead_a).get(LIST)
    assert response.status_code == 200
    assert slugs(response) == {"alpha"}
    assert "New department" not in text(response)

    assert slugs(as_user(member_b).get(LIST)) == {"beta"}

    response = as_user(outsider).get(LIST)
    assert slugs(response) == set()
    assert "not a member of any department" in text(response)

    response = as_user(admin_user).get(LIST)
    assert slugs(response) == {"alpha", "beta"}
    assert "New department" in text(response)


def test_list_row_shows_quota_network_and_storage(as_user, alpha, lead_a):
    page = text(as_user(lead_a).get(LIST))
    assert "Alpha" in page
    assert f"VLAN {alpha.vlan_id}" in page
    assert f"VNI {alpha.vxlan_vni}" in page
    assert alpha.pkey_hex in page
    assert alpha.network_cidr in page
    assert alpha.export_path in page
    assert "10,240 GiB" in page


# ------------------------------------------------------------------------------------- department dashboard


def test_dashboard_of_a(as_user, alpha, lead_a, member_b, outsider, admin_user):
    response = as_user(lead_a).get(detail(alpha))
    assert response.status_code == 200
    assert 'id="id_member_username"' in response.content.decode()  # the lead manages members
    assert as_user(member_b).get(detail(alpha)).status_code == 404
    assert as_user(outsider).get(detail(alpha)).status_code == 404
    response = as_user(admin_user).get(detail(alpha))
    assert response.status_code == 200
    assert 'id="id_member_username"' in response.content.decode()
    assert "Edit department" in text(response)


def test_dashboard_of_b_is_read_only_for_its_member(as_user, beta, alpha, lead_a, lead_b, member_b, outsider):
    client = as_user(member_b)
    response = client.get(detail(beta))
    assert response.status_code == 200
    markup = response.content.decode()
    assert 'id="id_member_username"' not in markup
    assert "/remove/" not in markup
    assert "read-only" in text(response)
    assert "Edit department" not in text(response)

    lead_membership = Membership.objects.get(user=lead_b)
    # A member may not manage: 403. The department stays as it was.
    assert client.post(member_set(beta), {"username": "outsider", "role": "member"}).status_code == 403
    assert client.post(member_set(beta), {"username": "member-b", "role": "lead"}).status_code == 403
    assert client.post(member_remove(lead_membership)).status_code == 403
    # Another department's lead and an outsider cannot even see it: 404.
    for user in (lead_a, outsider):
        other = as_user(user)
        assert other.get(detail(beta)).status_code == 404
        assert other.post(member_set(beta), {"username": "outsider", "role": "member"}).status_code == 404
        assert other.post(member_remove(lead_membership)).status_code == 404
    assert set(Membership.objects.filter(department=beta).values_list("user__username", "role")) == {
        ("lead-b", Role.LEAD),
        ("member-b", Role.MEMBER),
    }


def test_member_sees_only_their_own_membership(as_user, beta, lead_b, member_b):
    page = text(as_user(member_b).get(detail(beta)))
    assert "Your membership" in page
    assert "member-b" in page
    assert "lead-b" not in page


def test_membership_urls_of_another_department_are_404(as_user, alpha, beta, lead_a, lead_b):
    """A lead of A cannot reach B's membership through A's URL."""
    b_membership = Membership.objects.get(user=lead_b)
    url = reverse("tenancy:member-remove", args=[alpha.slug, b_membership.pk])
    assert as_user(lead_a).post(url).status_code == 404
    assert Membership.objects.filter(pk=b_membership.pk).exists()


def test_member_actions_need_post(as_user, alpha, lead_a):
    membership = Membership.objects.get(user=lead_a)
    client = as_user(lead_a)
    assert client.get(member_set(alpha)).status_code == 405
    assert client.get(member_remove(membership)).status_code == 405


# ---------------------------------------------------------------------------------------- member management


def test_lead_adds_changes_and_removes_a_member_with_audit(as_user, alpha, lead_a, outsider):
    client = as_user(lead_a)
    AuditEvent.objects.all().delete()

    response = client.post(member_set(alpha), {"username": "outsider", "role": "member"}, headers=HTMX)
    assert response.status_code == 200
    markup = response.content.decode()
    assert 'id="members"' in markup and "<html" not in markup  # the partial only
    assert 'data-username="outsider"' in markup
    membership = Membership.objects.get(user=outsider, department=alpha)
    assert membership.role == Role.MEMBER
    created = AuditEvent.objects.get(object_type="tenancy.membership", action=AuditAction.CREATE)
    assert created.source == AuditSource.UI
    assert created.actor == lead_a
    assert created.department_id == alpha.pk

    response = client.post(member_set(alpha), {"username": "outsider", "role": "lead"}, headers=HTMX)
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


def test_member_management_without_htmx_redirects_with_a_message(as_user, alpha, lead_a, outsider):
    client = as_user(lead_a)
    response = client.post(member_set(alpha), {"username": "outsider", "role": "member"})
    assert response.status_code == 302
    assert response["Location"] == detail(alpha) + "#members"
    assert Membership.objects.filter(user=outsider, department=alpha).exists()
    page = text(client.get(response["Location"]))
    assert "outsider is now department member of Alpha" in page

    response = client.post(member_set(alpha), {"username": "nobody", "role": "member"}, follow=True)
    assert "no user named 'nobody'" in text(response)


def test_member_errors_in_plain_words(as_user, alpha, lead_a):
    client = as_user(lead_a)
    response = client.post(member_set(alpha), {"username": "nobody", "role": "member"}, headers=HTMX)
    assert response.status_code == 200
    assert "no user named 'nobody'" in text(response)

    response = client.post(member_set(alpha), {"username": "lead-a", "role": "owner"}, headers=HTMX)
    assert "Select a valid choice" in text(response)

    only_lead = Membership.objects.get(user=lead_a)
    response = client.post(member_remove(only_lead), headers=HTMX)
    assert "lead-a is the only lead of Alpha: name another first" in text(response)
    assert Membership.objects.filter(pk=only_lead.pk).exists()

    response = client.post(member_set(alpha), {"username": "lead-a", "role": "member"}, headers=HTMX)
    assert "lead-a is the only lead of Alpha: name another lead first" in text(response)
    only_lead.refresh_from_db()
    assert only_lead.role == Role.LEAD


def test_lead_removing_themselves_leaves_the_page(as_user, alpha, lead_a, outsider):
    client = as_user(lead_a)
    client.post(member_set(alpha), {"username": "outsider", "role": "lead"}, headers=HTMX)
    response = client.post(member_remove(Membership.objects.get(user=lead_a)), headers=HTMX)
    assert response.status_code == 200
    assert response["HX-Redirect"] == LIST
    assert client.get(detail(alpha)).status_code == 404


def test_admin_manages_any_department(as_user, beta, member_b, admin_user, outsider):
    client = as_user(admin_user)
    response = client.post(member_set(beta), {"username": "outsider", "role": "lead"}, headers=HTMX)
    assert response.status_code == 200
    assert Membership.objects.get(user=outsider, department=beta).role == Role.LEAD
    event = AuditEvent.objects.filter(object_type="tenancy.membership").latest("pk")
    assert (event.source, event.actor) == (AuditSource.UI, admin_user)


# --------------------------------------------------------------------------------------------- admin pages


def test_admin_only_pages(as_user, alpha, beta, lead_a, member_b, outsider, admin_user):
    for user in (lead_a, member_b, outsider):
        client = as_user(user)
        assert client.get(DASHBOARD).status_code == 403, user
        assert client.get(edit(alpha)).status_code == 403, user
        assert client.post(edit(alpha), {"name": "Taken over"}).status_code == 403, user
        assert client.post(LIST, {"name": "Gamma", "slug": "gamma"}).status_code == 403, user
    assert not Department.objects.filter(slug="gamma").exists()
    assert Department.objects.get(pk=alpha.pk).name == "Alpha"

    client = as_user(admin_user)
    assert client.get(DASHBOARD).status_code == 200
    assert client.get(edit(alpha)).status_code == 200
    assert client.get(edit(Department(slug="missing"))).status_code == 404


def test_nav_links(as_user, lead_a, admin_user):
    markup = as_user(lead_a).get("/").content.decode()
    assert f'href="{LIST}"' in markup
    assert f'href="{DASHBOARD}"' not in markup
    markup = as_user(admin_user).get("/").content.decode()
    assert f'href="{LIST}"' in markup and f'href="{DASHBOARD}"' in markup


def form_data(**values) -> dict:
    return department_form(**{"name": "Gamma", "slug": "gamma", "guaranteed_gpus": 16, **values})


def test_admin_creates_a_department_with_allocated_isolation(as_user, alpha, admin_user):
    client = as_user(admin_user)
    response = client.post(LIST, form_data())
    assert response.status_code == 302
    gamma = Department.objects.get(slug="gamma")
    assert response["Location"] == detail(gamma)
    assert gamma.guaranteed_gpus == 16
    # Allocated from the pools, next to Alpha's.
    assert gamma.vlan_id == alpha.vlan_id + 1
    assert gamma.ib_pkey == alpha.ib_pkey + 1
    assert gamma.network_cidr == "10.64.1.0/24"
    assert gamma.export_path == "/exports/tenants/gamma"
    assert gamma.storage_quota_gib == 10240
    event = AuditEvent.objects.get(object_type="tenancy.department", object_id=str(gamma.pk))
    assert (event.source, event.actor, event.action) == (AuditSource.UI, admin_user, AuditAction.CREATE)


def test_department_form_shows_the_guarantee_shortfall_on_its_field(as_user, alpha, beta, admin_user):
    capacity = schedulable_gpus()
    response = as_user(admin_user).post(LIST, form_data(guaranteed_gpus=capacity))
    assert response.status_code == 200
    form = response.context["form"]
    others = alpha.guaranteed_gpus + beta.guaranteed_gpus
    promised = others + capacity
    assert form.errors["guaranteed_gpus"] == [
        f"guarantees would total {promised} GPUs but only {capacity} schedulable healthy GPUs exist: "
        f"{promised - capacity} short ({others} already guaranteed to other departments)"
    ]
    assert 'id="id_guaranteed_gpus-error"' in response.content.decode()
    assert "<details" in response.content.decode() and " open>" in response.content.decode()
    assert not Department.objects.filter(slug="gamma").exists()


def test_department_form_shows_limit_below_guarantee_on_its_field(as_user, alpha, admin_user):
    client = as_user(admin_user)
    response = client.post(LIST, form_data(guaranteed_gpus=16, limit_gpus=8))
    assert response.context["form"].errors == {
        "limit_gpus": ["the limit (8) may not be below the guarantee (16)"]
    }
    response = client.post(
        edit(alpha), form_data(name="Alpha", slug="alpha", guaranteed_gpus=40, limit_gpus=10)
    )
    assert response.status_code == 200
    assert response.context["form"].errors == {
        "limit_gpus": ["the limit (10) may not be below the guarantee (40)"]
    }
    assert Department.objects.get(pk=alpha.pk).limit_gpus is None


def test_department_form_shows_isolation_and_uniqueness_errors(as_user, alpha, admin_user):
    client = as_user(admin_user)
    response = client.post(
        LIST, form_data(vlan_id=alpha.vlan_id, network_cidr="10.64.0.128/25", name="Alpha")
    )
    errors = response.context["form"].errors
    assert errors["vlan_id"] == [f"VLAN ID {alpha.vlan_id} is already assigned to Alpha"]
    assert errors["network_cidr"] == [f"10.64.0.128/25 overlaps Alpha's network {alpha.network_cidr}"]
    assert errors["name"] == ["a department with this name already exists"]
    assert Department.objects.count() == 1


def test_admin_edits_a_department(as_user, alpha, admin_user):
    client = as_user(admin_user)
    data = form_data(
        name="Alpha",
        slug="alpha",
        guaranteed_gpus=48,
        limit_gpus=96,
        priority=2,
        vlan_id=alpha.vlan_id,
        vxlan_vni=alpha.vxlan_vni,
        ib_pkey=alpha.ib_pkey,
        network_cidr=alpha.network_cidr,
        export_path=alpha.export_path,
        storage_quota_gib=20480,
    )
    response = client.post(edit(alpha), data)
    assert response.status_code == 302
    alpha.refresh_from_db()
    assert (alpha.guaranteed_gpus, alpha.limit_gpus, alpha.priority, alpha.storage_quota_gib) == (
        48,
        96,
        2,
        20480,
    )
    event = AuditEvent.objects.filter(object_type="tenancy.department", action=AuditAction.UPDATE).latest(
        "pk"
    )
    assert (event.source, event.actor) == (AuditSource.UI, admin_user)
    assert event.after["guaranteed_gpus"] == 48


def test_edit_form_is_prefilled(as_user, alpha, admin_user):
    response = as_user(admin_user).get(edit(alpha))
    markup = response.content.decode()
    assert f'value="{alpha.network_cidr}"' in markup
    assert f'value="{alpha.vlan_id}"' in markup
    assert "Leave empty to allocate from the pool." in markup
