"""A rack's re-carving policy (carving that follows demand): its bounds, who may set it on the rack page and
in the API, and the audit of each change. Off by default; only platform admins change it."""

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.urls import reverse

from core.models import AuditEvent, AuditSource
from inventory import recarving
from inventory.models import Rack, RecarvePolicy

pytestmark = pytest.mark.django_db


@pytest.fixture
def rack(db):
    return Rack.objects.create(name="gb-r01")


def policy_url(rack):
    return reverse("inventory:recarve-policy", args=[rack.name])


def api_url(rack):
    return f"/api/v1/racks/{rack.name}/recarve-policy/"


# --- the model's bounds ----------------------------------------------------------------------------------


def test_a_rack_without_a_policy_is_off_with_the_defaults(rack):
    policy = RecarvePolicy.of(rack)
    assert (policy.pk, policy.enabled, policy.smallest_trays, policy.max_per_hour) == (None, False, 1, 2)


@pytest.mark.parametrize(
    ("field", "value"),
    [("smallest_trays", 0), ("smallest_trays", 19), ("max_per_hour", 0), ("max_per_hour", 61)],
)
def test_out_of_bounds_values_are_refused_by_the_service_and_the_database(rack, field, value):
    values = {"enabled": True, "smallest_trays": 2, "max_per_hour": 4, field: value}
    with pytest.raises(ValidationError) as refused:
        recarving.set_policy(rack, **values)
    assert field in refused.value.message_dict
    assert not RecarvePolicy.objects.exists()
    policy = recarving.set_policy(rack, enabled=True, smallest_trays=2, max_per_hour=4)
    with pytest.raises(IntegrityError, match=f"inventory_recarvepolicy_{field}_range"), transaction.atomic():
        RecarvePolicy.objects.filter(pk=policy.pk).update(**{field: value})


# --- the rack page and its form --------------------------------------------------------------------------


def test_the_admin_sees_the_form_on_the_rack_page_and_others_see_the_policy_only(
    rack, client_as, platform_admin, lead_a, member_a
):
    recarving.set_policy(rack, enabled=True, smallest_trays=2, max_per_hour=3)
    page = client_as(platform_admin).get(reverse("scheduling:rack-detail", args=[rack.name])).content.decode()
    assert 'data-recarving="on"' in page and f'action="{policy_url(rack)}"' in page
    assert "never re-carved into partitions of" in page or "never across departments" in page
    for persona in (lead_a, member_a):
        page = client_as(persona).get(reverse("scheduling:rack-detail", args=[rack.name])).content.decode()
        assert 'data-recarving="on"' in page and "2 trays" in page and "3 re-carves an hour" in page
        assert f'action="{policy_url(rack)}"' not in page  # no form they could not send


@pytest.mark.parametrize("persona", ["lead_a", "member_a", "outsider"])
def test_nobody_but_an_admin_may_open_or_post_the_policy(rack, client_as, persona):
    client = client_as(persona)
    assert client.get(policy_url(rack)).status_code == 403
    body = {"enabled": "on", "smallest_trays": "2", "max_per_hour": "3"}
    assert client.post(policy_url(rack), body).status_code == 403
    assert not RecarvePolicy.objects.exists()


def test_an_admin_turns_it_on_and_the_change_is_audited(rack, client_as, platform_admin):
    client = client_as(platform_admin)
    response = client.post(policy_url(rack), {"enabled": "on", "smallest_trays": "2", "max_per_hour": "3"})
    assert response.status_code == 303
    assert response["Location"] == reverse("scheduling:rack-detail", args=[rack.name])
    policy = RecarvePolicy.objects.get(rack=rack)
    assert (policy.enabled, policy.smallest_trays, policy.max_per_hour) == (True, 2, 3)
    event = AuditEvent.objects.get(object_type="inventory.recarvepolicy")
    assert (event.actor, event.source, event.after["enabled"]) == (platform_admin, AuditSource.UI, True)
    page = client.get(response["Location"]).content.decode()
    assert "Re-carving of gb-r01 is on" in page

    client.post(policy_url(rack), {"smallest_trays": "2", "max_per_hour": "3"})  # unchecked: off
    assert not RecarvePolicy.objects.get(rack=rack).enabled
    change = AuditEvent.objects.filter(object_type="inventory.recarvepolicy").first()
    assert (change.before, change.after) == ({"enabled": True}, {"enabled": False})


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"smallest_trays": "0", "max_per_hour": "2"}, "smallest_trays", "greater than or equal to 1"),
        ({"smallest_trays": "19", "max_per_hour": "2"}, "smallest_trays", "less than or equal to 18"),
        ({"smallest_trays": "2", "max_per_hour": "61"}, "max_per_hour", "less than or equal to 60"),
        ({"smallest_trays": "two", "max_per_hour": "2"}, "smallest_trays", "Enter a whole number"),
        ({"smallest_trays": "2.5", "max_per_hour": "2"}, "smallest_trays", "Enter a whole number"),
        ({"max_per_hour": "2"}, "smallest_trays", "This field is required"),
    ],
)
def test_a_wrong_value_shows_the_form_again_with_the_error(
    rack, client_as, platform_admin, body, field, words
):
    response = client_as(platform_admin).post(policy_url(rack), {"enabled": "on", **body})
    assert response.status_code == 400
    assert words in response.content.decode()
    assert field in response.context["form"].errors
    assert not RecarvePolicy.objects.exists()


def test_another_rack_name_is_a_404_not_another_rack(rack, client_as, platform_admin):
    client = client_as(platform_admin)
    assert client.post(reverse("inventory:recarve-policy", args=["gb-r99"]), {}).status_code == 404
    assert not RecarvePolicy.objects.exists()


# --- the API ---------------------------------------------------------------------------------------------


def test_everyone_reads_the_policy_in_the_api_and_only_an_admin_changes_it(
    rack, api_as, platform_admin, lead_a, member_a
):
    for persona in (lead_a, member_a):
        client = api_as(persona)
        read = client.get(api_url(rack))
        assert read.status_code == 200
        assert read.json() | {"updated_at": None} == {
            "rack": "gb-r01",
            "enabled": False,
            "smallest_trays": 1,
            "max_per_hour": 2,
            "updated_at": None,
            "recarves_last_hour": 0,
            "last_recarve": None,
        }
        for method in ("put", "patch"):
            refused = getattr(client, method)(api_url(rack), {"enabled": True}, format="json")
            assert refused.status_code == 403
            assert "Only platform admins" in refused.json()["detail"]
    assert not RecarvePolicy.objects.exists()

    admin = api_as(platform_admin)
    changed = admin.patch(api_url(rack), {"enabled": True, "max_per_hour": 5}, format="json")
    assert changed.status_code == 200, changed.json()
    assert (changed.json()["enabled"], changed.json()["max_per_hour"], changed.json()["smallest_trays"]) == (
        True,
        5,
        1,
    )
    event = AuditEvent.objects.get(object_type="inventory.recarvepolicy")
    assert (event.actor, event.source) == (platform_admin, AuditSource.API)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"smallest_trays": 0}, "smallest_trays"),
        ({"smallest_trays": 19}, "smallest_trays"),
        ({"max_per_hour": 61}, "max_per_hour"),
        ({"max_per_hour": -1}, "max_per_hour"),
        ({"smallest_trays": "many"}, "smallest_trays"),
        ({"smallest_trays": 2.5}, "smallest_trays"),
        ({"enabled": "perhaps"}, "enabled"),
        ({"max_per_hour": None}, "max_per_hour"),
    ],
)
def test_the_api_refuses_wrong_values_naming_the_field(rack, api_as, platform_admin, body, field):
    response = api_as(platform_admin).patch(api_url(rack), body, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not RecarvePolicy.objects.exists()


def test_a_put_needs_every_field_and_an_unknown_rack_is_a_404(rack, api_as, platform_admin):
    admin = api_as(platform_admin)
    assert admin.put(api_url(rack), {"enabled": True}, format="json").status_code == 400
    full = {"enabled": True, "smallest_trays": 4, "max_per_hour": 1}
    assert admin.put(api_url(rack), full, format="json").status_code == 200
    assert admin.put("/api/v1/racks/gb-r99/recarve-policy/", full, format="json").status_code == 404
    assert RecarvePolicy.objects.count() == 1


def test_unknown_and_read_only_fields_are_a_400_naming_them(rack, api_as, platform_admin):
    """The rack is the one in the path: a body naming another (or its counts) is refused, not half-read."""
    other = Rack.objects.create(name="gb-r02")
    for body in ({"rack": other.name}, {"recarves_last_hour": 9}, {"enable": True}):
        response = api_as(platform_admin).patch(api_url(rack), {**body, "max_per_hour": 3}, format="json")
        assert response.status_code == 400 and list(response.json()) == list(body)
    assert not RecarvePolicy.objects.exists()
