"""Tray actions, defects a walkthrough found (integrations.views.tray_actions): the words of a hand drain's
eligibility, a
refused return answered Post/Redirect/Get (or in place for htmx), another owner's drain explained instead of
a return form, bulk rows that say why they were not changed, and the maintenance window's upper bound."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from inventory.choices import ActionKind, HealthKind, HealthSource, TrayState
from inventory.models import ComputeTray, HealthAction, HealthEvent
from inventory.views import tray_forms
from tests.factories import token_client
from tests.inventory.health_reports import URL as REPORTS
from tests.inventory.health_reports import report, xid

pytestmark = pytest.mark.django_db
HOST, OTHER = "gb-r02-t03", "gb-r02-t04"


@pytest.fixture
def admin(demo_inventory, client_as):
    return client_as("platform_admin")


def _tray(hostname: str = HOST) -> ComputeTray:
    return ComputeTray.objects.select_related("rack", "partition").get(hostname=hostname)


def _url(name: str, tray: ComputeTray) -> str:
    namespace = (
        "inventory" if name == "detail" else "integrations"
    )  # the tray page is inventory's, its actions integrations'
    return reverse(f"{namespace}:tray-{name}", args=[tray.pk])


def _actions(page: str) -> str:
    """The tray page's actions section."""
    start = page.index('<section class="tray-actions"')
    return page[start : page.index("</section>", start)]


def _fault(tray: ComputeTray) -> None:
    """A fault that drains, seen now (after the tray's drain by hand)."""
    now = timezone.now()
    HealthEvent.objects.create(
        tray=tray, source=HealthSource.AGENT, kind=HealthKind.XID, code="XID_79", xid=79,
        mnemonic="GPU_HAS_FALLEN_OFF_THE_BUS", first_seen=now, last_seen=now, drains=True,
    )  # fmt: skip


def test_a_hand_drain_returns_at_once_a_rules_drain_waits_since_the_fault(admin, node_agent):
    tray = _tray()
    admin.post(_url("drain", tray), {"drain-reason": "fan noise"})
    page = admin.get(_url("detail", tray)).content.decode()
    assert "Eligible: it was drained by hand, not by the health rules, with no fault since." in page
    assert "since the fault" not in page and 'name="return-force"' not in page

    # The health rules drain another tray for an XID 79 (fallen off the bus): that one has a fault.
    other = _tray(OTHER)
    answer = token_client(node_agent).post(REPORTS, report(other, xids=[xid(79)]), format="json")
    assert answer.status_code == 200, answer.content
    assert _tray(OTHER).state != TrayState.UP
    page = admin.get(_url("detail", other)).content.decode()
    assert "its agent has not reported it healthy since the fault" in page


def test_a_refused_return_redirects_to_the_tray_page_and_says_why_once(admin):
    tray = _tray()
    admin.post(_url("drain", tray), {"drain-reason": "fan noise"})
    _fault(tray)
    response = admin.post(_url("return", tray), {"return-note": "fans replaced"})
    assert response.status_code == 303 and response["Location"] == _url("detail", tray)  # a reload is a GET
    page = admin.get(response["Location"]).content.decode()
    assert page.count("cannot return yet") == 1, "the refusal shows in the actions, not twice"
    actions = _actions(page)
    assert 'class="form-error" role="alert"' in actions
    assert (
        "Nothing was changed: gb-r02-t03 cannot return yet: a fault came while it was drained by hand"
        in actions
    )
    assert _tray().state == TrayState.DRAIN and not HealthAction.objects.filter(kind=ActionKind.RETURN)
    assert "cannot return yet" not in admin.get(_url("detail", tray)).content.decode()  # said once only


def test_a_tray_returned_meanwhile_is_refused_in_words_on_the_tray_page(admin):
    """Two admins on the same drained tray: the second return finds it in service already."""
    tray = _tray()
    admin.post(_url("drain", tray), {"drain-reason": "fan noise"})
    admin.post(_url("return", tray), {"return-force": "on"})
    response = admin.post(_url("return", tray), {"return-force": "on"}, follow=True)
    assert response.redirect_chain == [(_url("detail", tray), 303)]
    page = response.content.decode()
    assert "<html" in page and "Nothing was changed: gb-r02-t03 is already in service." in _actions(page)
    assert HealthAction.objects.filter(kind=ActionKind.RETURN).count() == 1


def test_an_htmx_return_is_refused_in_place(admin):
    tray = _tray()
    admin.post(_url("drain", tray), {"drain-reason": "fan noise"})
    _fault(tray)
    response = admin.post(_url("return", tray), {"return-note": "x"}, headers={"HX-Request": "true"})
    assert response.status_code == 409
    page = response.content.decode()
    assert "<html" not in page and "cannot return yet" in _actions(page)
    assert _tray().state == TrayState.DRAIN


def test_another_owners_drain_says_whose_it_is_and_offers_no_return(admin):
    ComputeTray.objects.filter(hostname=OTHER).update(state=TrayState.DRAIN, state_reason="admin: PSU swap")
    actions = _actions(admin.get(_url("detail", _tray(OTHER))).content.decode())
    # The reason is data, kept as written: marked for translation tools and the Japanese page to leave alone.
    assert 'Out for another owner\'s reason: “<span translate="no">admin: PSU swap</span>”' in actions
    assert "cannot be returned here" in actions
    assert "return-note" not in actions and "return-force" not in actions
    # No form but the MIG layout's (which is not about the drain).
    assert actions.count("<form") == actions.count("mig-layout-form") == 1


def test_bulk_rows_not_changed_say_why(admin):
    rack = "gb-r02"
    ids = [str(_tray(host).pk) for host in (HOST, OTHER, "gb-r02-t05")]
    admin.post(
        reverse("integrations:tray-bulk", args=[rack]), {"action": "drain", "reason": "x", "tray": ids}
    )
    ComputeTray.objects.filter(hostname=OTHER).update(state=TrayState.UP, state_reason="")
    response = admin.post(
        reverse("integrations:tray-bulk", args=[rack]), {"action": "return", "force": "on", "tray": ids}
    )
    assert response.status_code == 409
    rows = response.content.decode().split("<tr")[2:]  # after the header row
    assert len(rows) == 3
    for host in (HOST, "gb-r02-t05"):
        (row,) = [row for row in rows if f">{host}<" in row]
        assert "Not changed, although it could have been returned to service: gb-r02-t04 refused" in row
        assert "Deselect the refused trays and try again." in row
    (refused,) = [row for row in rows if f">{OTHER}<" in row]
    assert "Refused" in refused and "gb-r02-t04 is already in service." in refused
    assert _tray().state == TrayState.DRAIN


def test_the_maintenance_window_bound_is_in_the_help_text_and_the_message(admin):
    tray = _tray()
    page = admin.get(_url("detail", tray)).content.decode()
    assert f"At most {tray_forms.MAX_WINDOW_DAYS} days after the start." in page
    start = timezone.now() + timedelta(hours=1)
    data = {
        "maintenance-reason": "fan swap",
        "maintenance-start": start.strftime("%Y-%m-%dT%H:%M"),
        "maintenance-end": (start + timedelta(days=30, minutes=1)).strftime("%Y-%m-%dT%H:%M"),
    }
    response = admin.post(_url("maintenance", tray), data)
    assert (
        response.status_code == 400
        and "A maintenance window lasts at most 30 days" in response.content.decode()
    )
    assert _tray().state == TrayState.UP
    data["maintenance-end"] = (start + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M")
    assert admin.post(_url("maintenance", tray), data).status_code == 303
    assert _tray().state == TrayState.MAINTENANCE
