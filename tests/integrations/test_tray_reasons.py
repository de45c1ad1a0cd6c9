"""Reasons people type on trays (integrations.views.tray_actions,
inventory.health.actions.typed_text_problem): a bidi override, other control or invisible characters and
Rackplane's own "rackplane:" prefix are refused with a 400 whose form error names the field, nothing
drained; sentences about a tray's state use words ("already drained", not "already drain"); another owner's
drain says what an admin can do in this portal."""

from __future__ import annotations

import pytest
from django.urls import reverse

from inventory.choices import TrayState
from inventory.health.actions import HealthError, drain_tray, owned_by_rules, state_words
from inventory.models import ComputeTray, HealthAction

pytestmark = pytest.mark.django_db

HOST = "gb-r02-t03"


@pytest.fixture
def admin(client_as, demo_inventory):
    return client_as("platform_admin")


def _tray(hostname=HOST) -> ComputeTray:
    return ComputeTray.objects.select_related("rack").get(hostname=hostname)


def _url(name, tray):
    namespace = (
        "inventory" if name == "detail" else "integrations"
    )  # the tray page is inventory's, its actions integrations'
    return reverse(f"{namespace}:tray-{name}", args=[tray.pk])


@pytest.mark.slow(reason="7 cases, each a full request through the stack")
@pytest.mark.parametrize(
    "typed, says",
    [
        ("fake XID 79 \u202eevil", "U+202E RIGHT-TO-LEFT OVERRIDE"),
        ("fan\u2066 swap", "U+2066 LEFT-TO-RIGHT ISOLATE"),
        ("fan\nswap", "U+000A"),
        ("fan\x1b[31m swap", "U+001B"),
        ("zero\u200bwidth", "U+200B ZERO WIDTH SPACE"),
        ("rackplane: fake XID 79", "starts with “rackplane:”: leave it out"),
        ("  RackPlane:fake", "starts with “rackplane:”: leave it out"),
    ],
)
def test_a_drain_reason_with_hidden_characters_or_our_prefix_is_refused(admin, typed, says):
    tray = _tray()
    response = admin.post(_url("drain", tray), {"drain-reason": typed})
    assert response.status_code == 400
    page = response.content.decode().replace("&#x27;", "'")
    assert says in page
    assert "The reason " in page  # the error names the field
    assert (_tray().state, _tray().state_reason) == (TrayState.UP, "")
    assert not HealthAction.objects.exists()


def test_maintenance_and_bulk_reasons_and_return_notes_are_checked_too(admin):
    tray = _tray()
    evil = "fan swap \u202eevil"
    response = admin.post(_url("maintenance", tray), {"maintenance-reason": evil})
    assert response.status_code == 400 and "U+202E" in response.content.decode()
    bulk = reverse("integrations:tray-bulk", args=[tray.rack.name])
    response = admin.post(bulk, {"action": "drain", "tray": [str(tray.pk)], "reason": "rackplane: x"})
    assert response.status_code == 400 and "leave it out" in response.content.decode()
    assert _tray().state == TrayState.UP and not HealthAction.objects.exists()
    assert admin.post(_url("drain", tray), {"drain-reason": "fan noise"}).status_code == 303
    response = admin.post(_url("return", tray), {"return-note": "done\u202e", "return-force": "on"})
    assert response.status_code == 400 and "The note contains" in response.content.decode()
    assert _tray().state == TrayState.DRAIN


def test_plain_words_from_any_language_are_kept_as_typed(admin):
    tray = _tray()
    typed = "Lüfter getauscht — ファン交換 (fan swap)"
    assert admin.post(_url("drain", tray), {"drain-reason": typed}).status_code == 303
    assert _tray().state_reason == f"rackplane: platform-admin: {typed}"


def test_the_service_refuses_them_whoever_calls_it(demo_inventory, platform_admin):
    tray = _tray()
    with pytest.raises(HealthError, match="U\\+202E"):
        drain_tray(tray, "x\u202ey", actor=platform_admin)
    with pytest.raises(HealthError, match="rackplane:"):
        drain_tray(tray, "rackplane: admin: fake XID 79", actor=platform_admin)
    assert _tray().state == TrayState.UP


def test_a_stale_drain_form_says_already_drained_not_already_drain(admin):
    tray = _tray()
    assert admin.post(_url("drain", tray), {"drain-reason": "fan noise"}).status_code == 303
    response = admin.post(_url("drain", tray), {"drain-reason": "again"}, follow=True)
    page = response.content.decode()
    assert f"{HOST} is already drained (rackplane: platform-admin: fan noise)" in page
    assert "already drain " not in page and "already drain (" not in page


@pytest.mark.parametrize(
    "state, words",
    [
        (TrayState.DRAIN, "drained"),
        (TrayState.MAINTENANCE, "in maintenance"),
        (TrayState.NEEDS_SERVICE, "waiting for service"),
        (TrayState.DOWN, "down"),
        (TrayState.UP, "in service"),
    ],
)
def test_state_words(state, words):
    assert state_words(state) == words


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_another_owners_drain_says_what_an_admin_can_do_here(admin):
    """The demo's seeded drain (gb-r01-t07) is no Slurm's: the page says how to clear it in this portal."""
    tray = _tray("gb-r01-t07")
    assert tray.state == TrayState.DRAIN and not owned_by_rules(tray)
    page = admin.get(_url("detail", tray)).content.decode()
    assert "Rackplane did not drain it, so it cannot be returned here." in page
    assert "(the demo's seeded one is) has no other owner" in page
    assert reverse("admin:inventory_computetray_change", args=[tray.pk]) in page
    assert "(in Slurm, Kubernetes or the partition plan)" not in page
