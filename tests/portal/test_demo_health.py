"""The demo's health tells no lies (issue 31's health centre): every GPU it shows unhealthy or limited and
every tray it shows out of service has the event that made it so, on the events page filtered by its tray,
with the decision the health rules take for it; the events table, the repeat offenders and the tray's
timeline agree on the drain of the demo's drained tray."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse

from inventory.choices import ActionKind, GpuHealth, TrayState
from inventory.health.centre import events_page, tray_offenders
from inventory.health.timeline import timeline
from inventory.models import ComputeTray, Gpu, HealthAction, HealthEvent
from tests.factories import seed_demo

pytestmark = pytest.mark.django_db
SHOWN_DEGRADED = (GpuHealth.UNHEALTHY, GpuHealth.LIMITED_CAPACITY)


@pytest.fixture
def demo(var_dir):
    seed_demo("--racks", "8")


def _rows(html: str) -> list[str]:
    body = html[html.index("<tbody") : html.rindex("</tbody>")]
    return re.findall(r"<tr\b.*?</tr>", body, re.S)


def test_every_degraded_gpu_and_drained_tray_has_its_event_on_the_events_page(
    demo, client_as, platform_admin
):
    admin = client_as(platform_admin)
    degraded = list(Gpu.objects.filter(health__in=SHOWN_DEGRADED).select_related("tray"))
    out = list(ComputeTray.objects.exclude(state=TrayState.UP))
    assert degraded and out, "the demo shows degraded GPUs and a drained tray"
    for gpu in degraded:
        event = HealthEvent.objects.filter(gpu=gpu).order_by("-last_seen").first()
        assert event is not None, f"{gpu.tray.hostname} GPU {gpu.index} is {gpu.health} with no event"
        page = admin.get(reverse("inventory:health-events"), {"tray": gpu.tray.hostname})
        assert page.status_code == 200
        html = page.content.decode()
        assert "No health events match" not in html, gpu.tray.hostname
        assert any(gpu.uuid in row and event.mnemonic in row for row in _rows(html)), (
            f"{gpu.tray.hostname}: no row for GPU {gpu.index}'s {event.title}"
        )
        if gpu.tray.state == TrayState.UP:
            # Kept in service, as the rules keep it: nothing they match drains or degrades for it.
            assert not (event.drains or event.degrades), f"{gpu.tray.hostname} stays up with {event.title}"
    for tray in out:
        events = HealthEvent.objects.filter(tray=tray, drains=True)
        assert events.exists(), f"{tray.hostname} is {tray.state} with no event that drains it"
        html = admin.get(reverse("inventory:health-events"), {"tray": tray.hostname}).content.decode()
        assert "No health events match" not in html
        detail = admin.get(reverse("inventory:tray-detail", args=[tray.pk])).content.decode()
        assert "No health events or decisions" not in detail


def test_the_events_table_offenders_and_timeline_agree_on_the_drain(demo, client_as, platform_admin):
    admin = client_as(platform_admin)
    tray = ComputeTray.objects.get(state=TrayState.DRAIN, state_reason__startswith="XID 79")
    event = HealthEvent.objects.get(tray=tray, xid=79)
    drain = HealthAction.objects.get(tray=tray, kind=ActionKind.DRAIN)
    assert drain.event == event and drain.rule is not None and drain.created_at == event.last_seen

    # The events table: the XID 79 row names its decision, not "—".
    (row,) = events_page(HealthEvent.objects.filter(pk=event.pk), None)[0]
    assert [action.kind for action in row.decisions] == [ActionKind.DRAIN]
    html = admin.get(reverse("inventory:health-events"), {"tray": tray.hostname}).content.decode()
    (xid_row,) = [r for r in _rows(html) if "GPU_HAS_FALLEN_OFF_THE_BUS" in r]
    assert "Drain" in xid_row and drain.rule_name in xid_row

    # The repeat offenders: taken out once (it is drained), not 0.
    since = event.first_seen - timedelta(days=1)
    (offender,) = [o for o in tray_offenders(HealthEvent.objects.all(), since) if o.tray == tray]
    assert offender.taken_out == 1 and offender.serious == 1
    html = admin.get(reverse("inventory:health-offenders")).content.decode()
    trays_table = html[: html.index("</table>")]  # the trays' ranking (the GPUs' follows)
    (offender_row,) = [r for r in _rows(trays_table + "</tbody>") if tray.hostname in r]
    cells = re.findall(r'<td class="num">\s*(\d+)\s*</td>', offender_row)
    assert cells[-1] == "1", offender_row  # serious, events, occurrences, taken out

    # The tray's timeline: the event and the drain decision about it.
    entries, _range = timeline(platform_admin, tray=tray)
    kinds = [getattr(entry.item, "kind", "") for entry in entries]
    assert ActionKind.DRAIN in kinds and any(getattr(entry.item, "xid", None) == 79 for entry in entries)


def test_the_fleet_warnings_carry_the_warn_decision(demo):
    warned = HealthEvent.objects.filter(warns=True)
    assert warned.exists()
    for event in warned:
        assert HealthAction.objects.filter(event=event, kind=ActionKind.WARN).count() == 1, event.title


def _decisions_cell(row: str) -> str:
    """The Decisions column of an events-table row (the second cell from the end)."""
    cells = re.findall(r"<td\b.*?</td>", row, re.S)
    return cells[-2]


def test_the_faults_no_rule_acts_on_were_reported_and_say_so_in_words(demo, client_as, platform_admin):
    """The demo's XID 94 and XID 63 went through a real report's path (the kernel's line on the GPU's PCI
    id, read into the event; the rules' judge, which decides nothing for them), and the events page says
    why nothing was decided, in words: never a bare dash."""
    admin = client_as(platform_admin)
    seen = set()
    for xid, words in (
        (94, "no action: XID 94 is a contained memory error"),
        (63, "no action: XID 63 is a row-remap record"),
    ):
        events = list(HealthEvent.objects.filter(xid=xid).select_related("gpu", "tray"))
        assert events, f"the demo seeds XID {xid}"
        for event in events:
            assert event.gpu is not None and event.message.startswith("NVRM: Xid (PCI:"), event.message
            assert not (event.drains or event.degrades or event.warns)
            assert not HealthAction.objects.filter(event=event).exists()
            html = admin.get(reverse("inventory:health-events"), {"tray": event.tray.hostname}).content
            (row,) = [r for r in _rows(html.decode()) if event.gpu_uuid in r and f"XID {xid} " in r]
            cell = _decisions_cell(row)
            assert words in cell and "—" not in cell, cell
            seen.add(xid)
    assert seen == {94, 63}
    # No row of the fleet's events page is left with a bare dash for its decisions.
    html = admin.get(reverse("inventory:health-events")).content.decode()
    for row in _rows(html):
        cell = _decisions_cell(row)
        assert "—" not in cell and re.sub(r"<[^>]+>", "", cell).strip(), row


def test_the_gpu_still_registering_with_the_fabric_has_its_event_and_timeline(
    demo, client_as, platform_admin
):
    """gb-r03-t05 GPU 1 is still registering with the NVLink fabric: the fabric problem its tray shows and
    the event its node's report records agree, and the GPU's timeline shows it."""
    admin = client_as(platform_admin)
    registering = list(Gpu.objects.filter(fabric_state="in_progress").select_related("tray"))
    assert [(gpu.tray.hostname, gpu.index) for gpu in registering] == [("gb-r03-t05", 1)]
    (gpu,) = registering
    assert any("fabric registration is still in progress" in p for p in gpu.tray.fabric_problems)
    (event,) = HealthEvent.objects.filter(gpu=gpu)
    assert (event.kind, event.code, event.tray) == ("fabric", "REGISTRATION_IN_PROGRESS", gpu.tray)
    html = admin.get(reverse("inventory:gpu-detail", args=[gpu.pk])).content.decode()
    timeline_html = html[html.index('class="health-timeline"') :]
    assert "fabric registration in progress" in timeline_html and "No health events" not in timeline_html
    html = admin.get(reverse("inventory:health-events"), {"gpu": gpu.uuid}).content.decode()
    (row,) = _rows(html)
    assert "no action: the GPU is still registering with the NVLink fabric" in _decisions_cell(row)
