"""Departments through the API, cases found by an outside test.

- A tenant network of the other IP version used to pass the overlap check (Python's `overlaps` is False for
  an IPv4 and an IPv6 network), so `::/0` or `::ffff:0:0/96` was saved and rendered into /etc/exports as
  `<export> ::/0(rw,...)`: every host, every other department's among them (in their IPv4-mapped form), could
  mount the department's data. Now networks are compared across versions (tenancy.renderers.networks_overlap),
  at save and at render.
- The isolation values and numbers took a JSON string ("100") or a 0 that silently meant "allocate one";
  now they are JSON integers (core.fields.JSONIntegerField) and a 0 is refused like any value out of range.
"""

from __future__ import annotations

import ipaddress

import pytest

from tenancy import renderers
from tenancy.models import Department
from tests.factories import make_department, token_client

pytestmark = pytest.mark.django_db

DEPARTMENTS = "/api/v1/departments/"


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Alpha")


@pytest.fixture
def staff(platform_admin):
    return token_client(platform_admin)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("cidr", ["::/0", "::ffff:0:0/96", "::ffff:10.64.0.0/112", "::/1"])
def test_a_network_holding_another_departments_hosts_in_ipv6_form_is_refused(staff, department_a, cidr):
    assert ipaddress.ip_network(department_a.network_cidr).version == 4
    body = {"name": "Gamma", "slug": "gamma", "guaranteed_gpus": 0, "network_cidr": cidr}
    response = staff.post(DEPARTMENTS, body, format="json")
    assert response.status_code == 400, response.content
    assert "overlaps Alpha's network" in response.json()["network_cidr"][0]
    assert not Department.objects.filter(slug="gamma").exists()


def test_an_ipv6_network_of_its_own_is_still_taken(staff, department_a):
    body = {"name": "Gamma", "slug": "gamma", "guaranteed_gpus": 0, "network_cidr": "fd00:42::/64"}
    response = staff.post(DEPARTMENTS, body, format="json")
    assert response.status_code == 201, response.content


def test_the_exports_renderer_refuses_an_overlap_across_ip_versions():
    def spec(slug, cidr, n):
        return renderers.TenantSpec(
            slug=slug,
            name=slug.title(),
            guaranteed_gpus=0,
            limit_gpus=None,
            port_guids=(),
            storage_quota_gib=100,
            pkey=0x0100 + n,
            vlan_id=100 + n,
            vxlan_vni=10000 + n,
            network_cidr=cidr,
            export_path=f"/exports/tenants/{slug}",
        )

    with pytest.raises(ValueError, match="overlaps"):
        renderers.render_nfs_exports([spec("alpha", "10.64.1.0/24", 1), spec("world", "::/0", 2)])
    rendered = renderers.render_nfs_exports(
        [spec("alpha", "10.64.1.0/24", 1), spec("six", "fd00:42::/64", 2)]
    )
    assert rendered.count("\n") == 2


@pytest.mark.slow(reason="9 cases, each a full request through the stack")
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("vlan_id", 0),
        ("vxlan_vni", 0),
        ("ib_pkey", 0),
        ("storage_quota_gib", 0),
        ("vlan_id", "3000"),
        ("guaranteed_gpus", "4"),
        ("priority", "5"),
        ("limit_gpus", 8.0),
        ("guaranteed_gpus", True),
    ],
)
def test_numbers_are_json_integers_in_range_or_a_400_naming_the_field(staff, department_a, field, value):
    body = {"name": "Gamma", "slug": "gamma", "guaranteed_gpus": 0, field: value}
    response = staff.post(DEPARTMENTS, body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()
    assert not Department.objects.filter(slug="gamma").exists()
