"""Operator actions on trays in the portal (integrations.views.tray_actions): drain, return to service,
maintenance, and
bulk drain/return from the rack view. Platform admins only; every change audited; bulk is all or nothing."""

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from core.models import AuditEvent
from integrations.views import tray_actions
from inventory.choices import ActionKind, HealthKind, HealthSource, TrayState
from inventory.models import ComputeTray, HealthAction, HealthEvent
from tests.i18n_check import shown_text

pytestmark = pytest.mark.django_db


@pytest.fixture
def rack(demo_inventory):
    return "gb-r02"


def _tray(hostname: str) -> ComputeTray:
    return ComputeTray.objects.select_related("rack").get(hostname=hostname)


def _url(name: str, tray: ComputeTray) -> str:
    namespace = (
        "inventory" if name == "detail" else "integrations"
    )  # the tray page is inventory's, its actions integrations'
    return reverse(f"{namespace}:tray-{name}", args=[tray.pk])


def _bulk(rack_name: str) -> str:
    return reverse("integrations:tray-bulk", args=[rack_name])


def _foreign_drain(hostname: str) -> ComputeTray:
    """A tray drained by another owner (an admin in Slurm): Rackplane keeps its reason."""
    ComputeTray.objects.filter(hostname=hostname).update(
        state=TrayState.DRAIN, state_reason="admin: PSU swap"
    )
    return _tray(hostname)


def _state(hostname: str) -> tuple[str, str]:
    tray = _tray(hostname)
    return tray.state, tray.state_reason


def _window(start_in: timedelta, length: timedelta) -> dict:
    start = timezone.now() + start_in
    return {
        "maintenance-start": start.strftime("%Y-%m-%dT%H:%M"),
        "maintenance-end": (start + length).strftime("%Y-%m-%dT%H:%M"),
    }


# ------------------------------------------------------------------------------------------------ access


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("persona", ["lead_a", "member_a", "outsider"])
def test_only_platform_admins_see_and_use_the_actions(client_as, persona, rack):
    tray = _tray("gb-r02-t03")
    client = client_as(persona)
    page = client.get(_url("detail", tray)).content.decode()
    assert "tray-actions" not in page and _url("drain", tray) not in page
    rack_page = client.get(reverse("scheduling:rack-detail", args=[rack])).content.decode()
    assert 'id="bulk-trays"' not in rack_page and "tray-select" not in rack_page
    for name, data in [
        ("drain", {"drain-reason": "fan noise"}),
        ("maintenance", {"maintenance-reason": "fan swap"}),
        ("return", {"return-force": "on"}),
    ]:
        response = client.post(_url(name, tray), data)
        assert response.status_code == 403, name
        assert b"Only platform admins" in response.content
    # A drain's and a maintenance window's GET is an admin's confirmation page (test_get_is_not_an_action), a
    # method these URLs take: to anyone else it is the access rule's 403, not a 405 (only POST-only URLs,
    # return and bulk, answer a GET with 405, before any permission check).
    for name, data in [
        ("drain", {"drain-reason": "fan noise"}),
        ("maintenance", {"maintenance-reason": "x"}),
    ]:
        assert client.get(_url(name, tray), data).status_code == 403, name
    response = client.post(_bulk(rack), {"action": "drain", "reason": "x", "tray": [tray.pk]})
    assert response.status_code == 403
    assert _state("gb-r02-t03") == (TrayState.UP, "")
    assert not HealthAction.objects.exists()


def test_admins_see_the_forms_and_the_bulk_selection(client_as, rack):
    client = client_as("platform_admin")
    tray = _tray("gb-r02-t03")
    page = client.get(_url("detail", tray)).content.decode()
    assert _url("drain", tray) in page and _url("maintenance", tray) in page
    assert _url("return", tray) not in page  # it is up: nothing to return
    # The rack view's panel (htmx) carries the same forms.
    partial = client.get(_url("detail", tray), headers={"HX-Request": "true"}).content.decode()
    assert _url("drain", tray) in partial and "<html" not in partial
    rack_page = client.get(reverse("scheduling:rack-detail", args=[rack])).content.decode()
    assert rack_page.count('class="tray-select"') == ComputeTray.objects.filter(rack__name=rack).count()
    assert f'value="{tray.pk}" form="bulk-trays"' in rack_page


def test_anonymous_posts_go_to_the_login_page(client, rack):
    tray = _tray("gb-r02-t03")
    response = client.post(_url("drain", tray), {"drain-reason": "x"})
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))
    assert _state("gb-r02-t03") == (TrayState.UP, "")


def test_posts_without_the_csrf_token_are_refused(platform_admin, rack):
    client = Client(enforce_csrf_checks=True)
    client.force_login(platform_admin)
    tray = _tray("gb-r02-t03")
    assert client.post(_url("drain", tray), {"drain-reason": "fan noise"}).status_code == 403
    response = client.post(_bulk(rack), {"action": "drain", "reason": "x", "tray": [tray.pk]})
    assert response.status_code == 403
    assert _state("gb-r02-t03") == (TrayState.UP, "")


def test_get_is_not_an_action(client_as, rack):
    client = client_as("platform_admin")
    tray = _tray("gb-r02-t03")
    # A drain's GET is its confirmation (the jobs it would handle), never the drain.
    response = client.get(_url("drain", tray), {"drain-reason": "fan noise"})
    assert response.status_code == 200 and "Confirm the drain of gb-r02-t03" in response.content.decode()
    assert client.get(_url("return", tray)).status_code == 405
    assert client.get(_bulk(rack)).status_code == 405
    assert _state("gb-r02-t03") == (TrayState.UP, "")


# ------------------------------------------------------------------------------------------------- drain


def test_drain_from_the_tray_page_records_who_and_why(client_as, platform_admin, rack):
    client = client_as("platform_admin")
    tray = _tray("gb-r02-t03")
    response = client.post(_url("drain", tray), {"drain-reason": "  fan noise on slot 3 "})
    assert response.status_code == 303 and response["Location"] == _url("detail", tray)
    expected = "rackplane: platform-admin: fan noise on slot 3"
    assert _state("gb-r02-t03") == (TrayState.DRAIN, expected)
    action = HealthAction.objects.get(tray=tray)
    assert (action.kind, action.actor, action.reason) == (ActionKind.DRAIN, platform_admin, expected)
    audit = AuditEvent.objects.filter(object_type="inventory.computetray", object_id=str(tray.pk)).latest(
        "pk"
    )
    assert audit.actor == platform_admin and audit.actor_name == "platform-admin"
    assert audit.after["state_reason"] == expected and audit.after["state"] == TrayState.DRAIN
    # The page after the redirect shows the new state, the reason and the return form.
    page = client.get(response["Location"]).content.decode()
    assert "state-drain" in page and expected in shown_text(page) and _url("return", tray) in page


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    "reason, message",
    [
        ("", "Say why the tray is drained"),
        ("   ", "Say why the tray is drained"),
        ("x" * 161, "At most 160 characters (Rackplane and your name go in front): this is 161."),
    ],
)
def test_drain_needs_a_reason_of_at_most_160_characters(client_as, rack, reason, message):
    client = client_as("platform_admin")
    tray = _tray("gb-r02-t03")
    response = client.post(_url("drain", tray), {"drain-reason": reason})
    assert response.status_code == 400
    assert message in response.content.decode()
    assert _state("gb-r02-t03") == (TrayState.UP, "")
    assert not HealthAction.objects.exists()


def test_the_longest_reason_is_kept_whole_within_the_slurm_limit(client_as, rack):
    """160 typed characters, Rackplane's prefix and the name in front: all of it fits Slurm's 255."""
    client = client_as("platform_admin")
    tray = _tray("gb-r02-t03")
    assert client.post(_url("drain", tray), {"drain-reason": "y" * 160}).status_code == 303
    state, reason = _state("gb-r02-t03")
    assert state == TrayState.DRAIN and reason == "rackplane: platform-admin: " + "y" * 160


def test_another_owners_drain_is_kept_and_the_form_says_so(client_as, rack):
    client = client_as("platform_admin")
    tray = _foreign_drain("gb-r02-t04")
    # A drained tray offers no drain form, but a stale page may still post one: back to the tray page (PRG).
    response = client.post(_url("drain", tray), {"drain-reason": "fan noise"})
    assert response.status_code == 303 and response["Location"] == _url("detail", tray)
    page = client.get(response["Location"]).content.decode()
    assert "that owner&#x27;s reason is kept" in page and 'role="alert"' in page
    assert _state("gb-r02-t04") == (TrayState.DRAIN, "admin: PSU swap")
    assert not HealthAction.objects.exists()
    # Returning it is refused too, and its page says whose drain it is.
    detail = client.get(_url("detail", tray)).content.decode()
    assert "Out for another owner" in detail and "return-note" not in detail  # no form that can only fail
    response = client.post(_url("return", tray), {"return-force": "on"}, follow=True)
    assert response.redirect_chain == [(_url("detail", tray), 303)]
    assert "Rackplane does not undo it" in response.content.decode()
    assert _state("gb-r02-t04") == (TrayState.DRAIN, "admin: PSU swap")


def test_unknown_tray_is_404(client_as, rack):
    client = client_as("platform_admin")
    last = ComputeTray.objects.order_by("-pk").first().pk
    assert (
        client.post(reverse("integrations:tray-drain", args=[last + 1000]), {"drain-reason": "x"}).status_code
        == 404
    )


# ------------------------------------------------------------------------------------------------ return


def test_return_says_why_not_and_needs_force(client_as, platform_admin, rack):
    client = client_as("platform_admin")
    tray = _tray("gb-r02-t03")
    client.post(_url("drain", tray), {"drain-reason": "fan noise"})
    now = timezone.now()
    HealthEvent.objects.create(
        tray=tray, source=HealthSource.AGENT, kind=HealthKind.XID, code="XID_79", xid=79,
        mnemonic="GPU_HAS_FALLEN_OFF_THE_BUS", first_seen=now, last_seen=now, drains=True,
    )  # fmt: skip
    page = client.get(_url("detail", tray)).content.decode()
    assert "Not eligible yet: a fault came while it was drained by hand (GPU_HAS_FALLEN_OFF_THE_BUS)" in page
    assert 'name="return-force"' in page
    response = client.post(_url("return", tray), {"return-note": "fans replaced"}, follow=True)
    assert response.redirect_chain == [(_url("detail", tray), 303)]
    assert "cannot return yet: a fault came while it was drained by hand" in response.content.decode()
    assert _state("gb-r02-t03")[0] == TrayState.DRAIN
    response = client.post(_url("return", tray), {"return-note": "fans replaced", "return-force": "on"})
    assert response.status_code == 303
    assert _state("gb-r02-t03") == (TrayState.UP, "")
    action = HealthAction.objects.filter(tray=tray, kind=ActionKind.RETURN).get()
    assert action.actor == platform_admin
    assert action.reason.startswith("platform-admin: returned to service: forced (a fault came while")
    assert action.reason.endswith("; fans replaced")
    audit = AuditEvent.objects.filter(object_type="inventory.computetray", object_id=str(tray.pk)).latest(
        "pk"
    )
    assert audit.actor == platform_admin and audit.after["state"] == TrayState.UP
    # Returning it again says it is in service already.
    response = client.post(_url("return", tray), {"return-force": "on"}, follow=True)
    assert response.redirect_chain == [(_url("detail", tray), 303)]
    assert "already in service" in response.content.decode()


def test_return_note_is_bounded(client_as, rack):
    client = client_as("platform_admin")
    tray = _tray("gb-r02-t03")
    client.post(_url("drain", tray), {"drain-reason": "fan noise"})
    response = client.post(_url("return", tray), {"return-note": "n" * 301, "return-force": "on"})
    assert response.status_code == 400 and "at most 300 characters" in response.content.decode()
    assert _state("gb-r02-t03")[0] == TrayState.DRAIN


# ------------------------------------------------------------------------------------------- maintenance


def test_maintenance_without_a_window_takes_it_out_for_maintenance_with_the_reason(client_as, rack):
    """Planned maintenance is its own state, not a health drain (the schedulers drain it all the same)."""
    client = client_as("platform_admin")
    tray = _tray("gb-r02-t03")
    response = client.post(_url("maintenance", tray), {"maintenance-reason": "fan swap"})
    assert response.status_code == 303
    assert _state("gb-r02-t03") == (TrayState.MAINTENANCE, "rackplane: platform-admin: maintenance: fan swap")
    assert tray_actions._open_windows(tray) == []


def test_maintenance_with_a_window_names_it_and_ends_it_on_return(client_as, rack):
    client = client_as("platform_admin")
    tray = _tray("gb-r02-t03")
    data = {"maintenance-reason": "fan swap", **_window(timedelta(hours=1), timedelta(hours=2))}
    response = client.post(_url("maintenance", tray), data)
    assert response.status_code == 303
    state, reason = _state("gb-r02-t03")
    start = data["maintenance-start"].replace("T", " ")
    end = data["maintenance-end"].replace("T", " ")
    assert state == TrayState.MAINTENANCE
    assert reason == f"rackplane: platform-admin: maintenance window {start} UTC to {end} UTC: fan swap"
    windows = tray_actions._open_windows(tray)
    assert [window.reason for window in windows] == [reason]
    client.post(_url("return", tray), {"return-force": "on"})
    assert _state("gb-r02-t03")[0] == TrayState.UP
    assert tray_actions._open_windows(tray) == []  # the window ended with the return


def test_a_maintenance_drain_returns_when_its_owner_says_unless_a_fault_came_since(client_as, rack):
    client = client_as("platform_admin")
    tray = _tray("gb-r02-t03")
    client.post(_url("maintenance", tray), {"maintenance-reason": "firmware update"})
    assert HealthAction.objects.filter(tray=tray).latest("pk").kind == ActionKind.MAINTENANCE
    page = client.get(_url("detail", tray)).content.decode()
    assert "it was out for maintenance, with no fault since" in page
    response = client.post(_url("return", tray), {"return-note": "firmware 1.2.3"})  # no force needed
    assert response.status_code == 303
    assert _state("gb-r02-t03") == (TrayState.UP, "")
    assert HealthAction.objects.filter(tray=tray).latest("pk").reason == (
        "platform-admin: returned to service: it was out for maintenance, with no fault since; firmware 1.2.3"
    )
    # A fault while it was out: then it waits like any drained tray (or an admin forces it).
    client.post(_url("maintenance", tray), {"maintenance-reason": "cable swap"})
    now = timezone.now()
    HealthEvent.objects.create(
        tray=tray, source=HealthSource.AGENT, kind=HealthKind.XID, code="XID_79", xid=79,
        mnemonic="GPU_HAS_FALLEN_OFF_THE_BUS",
        first_seen=now, last_seen=now, drains=True,
    )  # fmt: skip
    page = client.get(_url("detail", tray)).content.decode()
    assert "a fault came while it was out for maintenance (GPU_HAS_FALLEN_OFF_THE_BUS)" in page
    client.post(_url("return", tray), {"return-note": "cables"})
    assert _state("gb-r02-t03")[0] == TrayState.MAINTENANCE


@pytest.mark.slow(reason="7 cases, each a full request through the stack")
@pytest.mark.parametrize(
    "window, message",
    [
        (_window(timedelta(hours=2), -timedelta(hours=1)), "The window ends before it starts"),
        (_window(timedelta(hours=2), timedelta(0)), "The window ends before it starts"),
        (_window(-timedelta(hours=3), timedelta(hours=1)), "The window starts in the past"),
        (_window(timedelta(hours=1), timedelta(days=31)), "lasts at most 30 days"),
        (_window(timedelta(days=400), timedelta(hours=4)), "more than 365 days from now: check the year"),
        ({"maintenance-start": "2030-01-01T10:00"}, "Give both the start and the end"),
        ({"maintenance-start": "tomorrow", "maintenance-end": "2030-01-01T10:00"}, "Enter a valid date/time"),
    ],
)
def test_maintenance_window_errors_change_nothing(client_as, rack, window, message):
    client = client_as("platform_admin")
    tray = _tray("gb-r02-t03")
    response = client.post(_url("maintenance", tray), {"maintenance-reason": "fan swap", **window})
    assert response.status_code == 400
    assert message in response.content.decode()
    assert _state("gb-r02-t03") == (TrayState.UP, "")
    assert not HealthAction.objects.exists()


def test_maintenance_on_another_owners_drain_is_refused(client_as, rack):
    client = client_as("platform_admin")
    tray = _foreign_drain("gb-r02-t04")
    data = {"maintenance-reason": "fan swap", **_window(timedelta(hours=1), timedelta(hours=1))}
    response = client.post(_url("maintenance", tray), data, follow=True)
    assert response.redirect_chain == [(_url("detail", tray), 303)]
    assert "that owner&#x27;s reason is kept" in response.content.decode()
    assert _state("gb-r02-t04") == (TrayState.DRAIN, "admin: PSU swap")


# -------------------------------------------------------------------------------------------------- bulk


def _ids(*hostnames: str) -> list[int]:
    return [_tray(hostname).pk for hostname in hostnames]


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_bulk_drain_then_return(client_as, platform_admin, rack):
    client = client_as("platform_admin")
    hosts = ("gb-r02-t05", "gb-r02-t02", "gb-r02-t09")
    response = client.post(_bulk(rack), {"action": "drain", "reason": "rewiring", "tray": _ids(*hosts)})
    assert response.status_code == 303
    assert response["Location"] == reverse("integrations:tray-bulk-result", args=[rack])
    for host in hosts:
        assert _state(host) == (TrayState.DRAIN, "rackplane: platform-admin: rewiring")
    assert HealthAction.objects.filter(kind=ActionKind.DRAIN, actor=platform_admin).count() == 3
    audited = AuditEvent.objects.filter(object_type="inventory.computetray", actor=platform_admin)
    assert sorted(int(event.object_id) for event in audited) == sorted(_ids(*hosts))
    page = client.get(response["Location"]).content.decode()
    assert "3 trays drained" in page
    # In slot order, each with its outcome.
    assert page.index("gb-r02-t02") < page.index("gb-r02-t05") < page.index("gb-r02-t09")
    assert page.count("rackplane: platform-admin: rewiring") == 3

    response = client.post(
        _bulk(rack), {"action": "return", "force": "on", "note": "done", "tray": _ids(*hosts)}
    )
    assert response.status_code == 303
    assert all(_state(host) == (TrayState.UP, "") for host in hosts)
    assert "3 trays returned to service" in client.get(response["Location"]).content.decode()


def test_bulk_is_all_or_nothing(client_as, rack):
    client = client_as("platform_admin")
    _foreign_drain("gb-r02-t04")
    response = client.post(
        _bulk(rack), {"action": "drain", "reason": "rewiring", "tray": _ids("gb-r02-t03", "gb-r02-t04")}
    )
    assert response.status_code == 409
    page = response.content.decode()
    assert "Nothing was changed" in page
    assert (  # t03's outcome says why it was not changed
        "Not changed, although it could have been drained: gb-r02-t04 refused (see its row)" in page
    )
    assert "that owner&#x27;s reason is kept" in page  # t04's
    assert _state("gb-r02-t03") == (TrayState.UP, "")
    assert _state("gb-r02-t04") == (TrayState.DRAIN, "admin: PSU swap")
    assert not HealthAction.objects.exists()
    assert not AuditEvent.objects.filter(
        object_type="inventory.computetray", object_id=str(_ids("gb-r02-t03")[0])
    )


def test_bulk_return_without_force_rolls_back_every_tray(client_as, rack):
    client = client_as("platform_admin")
    client.post(
        _bulk(rack), {"action": "drain", "reason": "rewiring", "tray": _ids("gb-r02-t03", "gb-r02-t04")}
    )
    # t04 comes back by other means meanwhile: returning the pair refuses on t04, so t03 stays drained too.
    ComputeTray.objects.filter(hostname="gb-r02-t04").update(state=TrayState.UP, state_reason="")
    response = client.post(
        _bulk(rack), {"action": "return", "force": "on", "tray": _ids("gb-r02-t03", "gb-r02-t04")}
    )
    assert response.status_code == 409
    assert "gb-r02-t04 is already in service" in response.content.decode()
    assert _state("gb-r02-t03") == (TrayState.DRAIN, "rackplane: platform-admin: rewiring")
    assert HealthAction.objects.filter(kind=ActionKind.RETURN).count() == 0


@pytest.mark.slow(reason="12 cases, each a full request through the stack")
@pytest.mark.parametrize(
    "data, message",
    [
        ({"action": "drain", "reason": "x"}, "Select at least one tray."),
        ({"action": "drain", "reason": "x", "tray": ["abc"]}, "names trays by number only"),
        ({"action": "drain", "reason": "x", "tray": ["-1"]}, "names trays by number only"),
        ({"action": "drain", "reason": "x", "tray": ["9" * 40]}, "names trays by number only"),
        ({"action": "drain", "reason": "x", "tray": ["99999999"]}, "not in rack gb-r02"),
        ({"action": "drain", "reason": "x", "tray": "OTHER_RACK"}, "not in rack gb-r02"),
        ({"action": "drain", "reason": "x", "tray": "DUPLICATE"}, "selected twice"),
        ({"action": "drain", "reason": "x", "tray": "TOO_MANY"}, "at most 72 go in one request"),
        ({"action": "drain", "reason": "", "tray": "ONE"}, "Say why the trays are drained"),
        ({"action": "drain", "reason": "r" * 161, "tray": "ONE"}, "At most 160 characters"),
        ({"action": "explode", "reason": "x", "tray": "ONE"}, "Choose Drain or Return to service."),
        ({"reason": "x", "tray": "ONE"}, "Choose an action."),
    ],
)
def test_bulk_bad_input_changes_nothing(client_as, rack, data, message):
    client = client_as("platform_admin")
    mine = _ids("gb-r02-t03", "gb-r02-t04")
    other = _ids("gb-r03-t01")
    data = dict(data)
    named = {
        "OTHER_RACK": [mine[0], other[0]],
        "DUPLICATE": [mine[0], mine[1], mine[0]],
        "TOO_MANY": [str(n) for n in range(1, 74)],
        "ONE": [mine[0]],
    }
    tray = data.get("tray", [])
    data["tray"] = named[tray] if isinstance(tray, str) else tray
    response = client.post(_bulk(rack), data)
    assert response.status_code == 400
    page = response.content.decode()
    assert message in page and "Nothing was changed." in page
    assert ComputeTray.objects.filter(rack__name=rack).exclude(state=TrayState.UP).count() == 0
    assert not HealthAction.objects.exists()


def test_bulk_result_page_without_a_result(client_as, rack):
    client = client_as("platform_admin")
    page = client.get(reverse("integrations:tray-bulk-result", args=[rack])).content.decode()
    assert "No recent tray action to show" in page
    assert client_as("lead_a").get(reverse("integrations:tray-bulk-result", args=[rack])).status_code == 403
