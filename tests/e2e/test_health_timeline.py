"""The health timeline in a real browser: a node's XID 79 report drains its tray; the tray page shows the
drain reason, the events and the decisions newest first, the range switch narrows it (htmx), and the GPU
page shows the GPU's own events."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from inventory.demo import seed_datacenter
from inventory.discovery import health_report
from inventory.discovery.nvidia_smi import parse_xml
from inventory.health.rules import seed_default_rules
from inventory.ingest.reports import ingest_report
from inventory.models import ComputeTray
from tests.e2e.browser import sign_in
from tests.inventory.health_reports import nvidia_smi_xml, xid

PASSWORD = "e2e-operator-password-1"


@pytest.fixture
def drained_tray(transactional_db):
    seed_datacenter(racks=2)
    seed_default_rules()  # a transactional test before this one may have flushed the seeded rules
    tray = ComputeTray.objects.select_related("rack", "partition").get(hostname="gb-r02-t10")
    now = timezone.now()
    old, _ = health_report.validate_health([xid(13, gpu_index=1, at=now - timedelta(days=3))])
    ingest_report(tray.hostname, "xml", parse_xml(nvidia_smi_xml(tray)), old)
    fault, errors = health_report.validate_health(
        [xid(79, gpu_index=2, at=now - timedelta(minutes=5))], agent={"version": "0.1.0", "interval_s": 60}
    )
    assert errors == {}
    ingest_report(tray.hostname, "xml", parse_xml(nvidia_smi_xml(tray)), fault)
    tray.refresh_from_db()
    assert tray.state == "drain"
    return tray


@pytest.fixture
def operator(transactional_db, django_user_model):
    return django_user_model.objects.create_user("e2e-operator", "e2e@example.com", PASSWORD)


@pytest.mark.e2e
def test_the_tray_and_gpu_health_timelines(live_server, page, drained_tray, operator, shots):
    sign_in(page, live_server, operator.username, PASSWORD)

    response = page.goto(f"{live_server.url}/inventory/trays/{drained_tray.pk}/")
    assert response is not None and response.ok
    gpu = drained_tray.gpus.get(index=2)
    note = page.locator(".note", has_text="Drain:")
    expect(note).to_contain_text(f"rackplane: XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS) on {gpu.uuid}")

    timeline = page.locator("section.health-timeline")
    expect(timeline.get_by_role("heading", name="Health timeline")).to_be_visible()
    rows = timeline.locator("tbody tr")
    # Default range, 7 days, newest first: the drain, the XID 79 five minutes ago, the XID 13 the kernel
    # logged three days ago (reported only now: recorded as history, no rule acts on a fault that old).
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text("Drained")
    expect(rows.nth(0)).to_contain_text("rule XID 79 drain")
    expect(rows.nth(1)).to_contain_text("XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS)")
    expect(rows.nth(1)).to_contain_text(gpu.uuid)
    expect(rows.nth(2)).to_contain_text("XID 13 (ROBUST_CHANNEL_GR_EXCEPTION)")
    # Kernel lines are for platform admins: an operator sees the event, not the process that hit it.
    expect(timeline).not_to_contain_text("pid=4242")
    expect(page.locator("p.agent")).to_contain_text("Node agent 0.1.0, reporting every 60 s")
    page.screenshot(path=str(shots / "health-timeline-tray.png"), full_page=True)

    # The range switch swaps the panel in place (htmx): 24 hours leave out the XID 13 of three days ago.
    timeline.get_by_role("link", name="24 hours").click()
    expect(page.locator("section.health-timeline .range-switch [aria-current]")).to_have_text("24 hours")
    expect(page.locator("section.health-timeline tbody tr")).to_have_count(2)
    events = page.locator("section.health-timeline tr.timeline-event")
    expect(events).to_have_count(1)
    expect(events).to_contain_text("XID 79")
    # On the tray's own page the range is a plain link: the whole page (chart, held jobs) comes with it.
    expect(page).to_have_url(re.compile(rf"/inventory/trays/{drained_tray.pk}/\?health=24h$"))
    expect(page.locator("section.utilization")).to_be_attached()
    page.screenshot(path=str(shots / "health-timeline-tray-24h.png"), full_page=True)

    page.goto(f"{live_server.url}/inventory/gpus/{gpu.pk}/")
    gpu_rows = page.locator("section.health-timeline tbody tr")
    expect(gpu_rows).to_have_count(2)
    expect(gpu_rows.nth(0)).to_contain_text("Drained")
    expect(gpu_rows.nth(1)).to_contain_text("XID 79")
    expect(page.locator("section.health-timeline")).not_to_contain_text("XID 13")
    page.screenshot(path=str(shots / "health-timeline-gpu.png"), full_page=True)
