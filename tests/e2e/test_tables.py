"""Tables as a person uses them (core.tables, static/portal/ux.js): sort the rack list by clicking a header,
change the rows per page, filter and download CSV and JSON (parsed here), switch times between absolute (in
the browser's time zone) and relative, and have the choice remembered. Screenshots of the lists at desktop
and phone width in `shots`.

Sorting the department list by a figure, and the rack list by a computed column both ways with its aria-sort,
need no browser (plain links): tests/portal/test_tables.py and tests/inventory/test_racks_sorting.py."""

import csv
import io
import json
import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from inventory.demo import seed_datacenter
from inventory.models import Rack
from scheduling.choices import JobState
from scheduling.models import Job
from tests.e2e.browser import sign_in
from tests.factories import make_department, make_job, make_user

PASSWORD = "e2e-tables-password-1"


@pytest.fixture
def fleet(transactional_db):
    seed_datacenter(racks=3)
    Rack.objects.bulk_create(Rack(name=f"zz-spare-{i:02}", location="hall B") for i in range(40))
    research = make_department("Research", guaranteed_gpus=8)
    for i, gpus in enumerate((1, 2, 4, 8, 12, 16)):
        job = make_job(research, f"sweep-{i}", state=JobState.PENDING, gpus=gpus)
        Job.objects.filter(pk=job.pk).update(created_at=timezone.now() - timedelta(hours=i + 1))
    make_job(research, "=cmd|' /C calc'!A0", state=JobState.PENDING, gpus=2)
    return make_user("e2e-tables-admin", staff=True, password=PASSWORD)


def sign_in_as_admin(page, live_server):
    sign_in(page, live_server, "e2e-tables-admin", PASSWORD)
    expect(page).not_to_have_url(re.compile(r"/login/"))


def rack_names(page) -> list[str]:
    return page.locator("table.racks a.rack-link").all_inner_texts()


def download(page, link) -> tuple[str, str]:
    with page.expect_download() as info:
        link.click()
    item = info.value
    return item.suggested_filename, open(item.path(), encoding="utf-8").read()


@pytest.mark.e2e
def test_sort_page_size_and_export_the_rack_list(live_server, page, fleet, shots):
    sign_in_as_admin(page, live_server)
    page.goto(f"{live_server.url}/inventory/racks/")
    expect(page.locator("table.racks tbody tr")).to_have_count(43)
    assert rack_names(page)[:3] == ["gb-r01", "gb-r02", "gb-r03"]
    header = page.locator("table.racks thead th", has_text="Rack")
    expect(header).to_have_attribute("aria-sort", "ascending")

    # Click the header: descending; click again: ascending.
    with page.expect_navigation():
        header.get_by_role("link").click()
    expect(page.locator("table.racks thead th", has_text="Rack")).to_have_attribute("aria-sort", "descending")
    assert rack_names(page)[:2] == ["zz-spare-39", "zz-spare-38"]
    with page.expect_navigation():
        page.locator("table.racks thead th", has_text="Location").get_by_role("link").click()
    expect(page.locator("table.racks thead th", has_text="Location")).to_have_attribute(
        "aria-sort", "ascending"
    )
    expect(page.locator("table.racks thead th", has_text="Rack")).not_to_have_attribute(
        "aria-sort", re.compile(".")
    )
    page.screenshot(path=str(shots / "racks-sorted-desktop.png"), full_page=True)

    # Rows per page: the menu applies at once, keeps the sort, and the pager follows.
    with page.expect_navigation():
        page.select_option("select[name=per_page]", "25")
    expect(page.locator("table.racks tbody tr")).to_have_count(25)
    assert "sort=location" in page.url and "per_page=25" in page.url
    expect(page.locator("nav.pager")).to_contain_text("Page 1 of 2")
    with page.expect_navigation():
        page.select_option("select[name=per_page]", "100")
    expect(page.locator("table.racks tbody tr")).to_have_count(43)

    # Filter, then export what the filter shows.
    page.fill("input[name=name]", "gb-r0")
    with page.expect_navigation():
        page.get_by_role("button", name="Filter").click()
    expect(page.locator("table.racks tbody tr")).to_have_count(3)
    name, body = download(page, page.get_by_role("link", name="CSV", exact=True))
    assert name == f"racks-{timezone.localdate().isoformat()}.csv"
    rows = list(csv.DictReader(io.StringIO(body)))
    assert sorted(row["name"] for row in rows) == ["gb-r01", "gb-r02", "gb-r03"]
    assert all(row["gpus_total"] == "72" for row in rows)
    name, body = download(page, page.get_by_role("link", name="GPUs JSON"))
    assert name == f"gpus-{timezone.localdate().isoformat()}.json"
    gpus = json.loads(body)
    assert len(gpus) == 216 and {gpu["rack"] for gpu in gpus} == {"gb-r01", "gb-r02", "gb-r03"}

    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(shots / "racks-filtered-phone.png"), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390


@pytest.mark.e2e
def test_export_jobs_and_toggle_times(live_server, page, fleet, shots):
    sign_in_as_admin(page, live_server)
    page.goto(f"{live_server.url}/scheduling/jobs/?sort=gpus")
    names = page.locator("table.jobs a.job-link").all_inner_texts()
    assert names[0] == "sweep-0" and names[-1] == "sweep-5"

    name, body = download(page, page.get_by_role("link", name="JSON", exact=True))
    assert name == f"jobs-{timezone.localdate().isoformat()}.json"
    jobs = json.loads(body)
    assert [job["gpus"] for job in jobs] == sorted(job["gpus"] for job in jobs)
    assert "=cmd|' /C calc'!A0" in [job["name"] for job in jobs]  # JSON keeps the name as it is
    _, body = download(page, page.get_by_role("link", name="CSV", exact=True))
    names = [row["name"] for row in csv.DictReader(io.StringIO(body))]
    assert "'=cmd|' /C calc'!A0" in names and "=cmd|' /C calc'!A0" not in names  # CSV defuses the formula

    # Times: how long ago (as sent on this page), then in the browser's zone, remembered, then how long ago.
    first = page.locator("table.jobs time").first
    toggle = page.locator("[data-time-toggle]")
    expect(toggle).to_have_text("Times: how long ago")
    toggle.click()
    expect(first).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$"))
    expect(toggle).to_have_text("Times: your zone (UTC)")
    page.screenshot(path=str(shots / "jobs-absolute-times-desktop.png"), full_page=True)
    page.reload()
    expect(page.locator("table.jobs time").first).to_have_text(
        re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")
    )
    page.locator("[data-time-toggle]").click()
    expect(page.locator("table.jobs time").first).to_have_text(re.compile(r"(ago|now)$"))
    page.goto(f"{live_server.url}/audit/")
    expect(page.locator("table.audit time").first).to_have_text(re.compile(r"(ago|now)$"))
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(shots / "audit-relative-phone.png"), full_page=True)
    page.goto(f"{live_server.url}/scheduling/jobs/")
    page.screenshot(path=str(shots / "jobs-phone.png"), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
