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
