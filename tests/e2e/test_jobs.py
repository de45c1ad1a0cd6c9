"""A researcher in a real browser: the job list, a running job's page (its trays, racks and history), the
placement on the rack view, then Cancel (the confirm dialog accepted) turns the page to cancelled in place,
without a reload. The job is submitted through the service, so the pass and the dispatch (Celery eager, the
embedded rendered backend) made its placement and events."""

import re

import pytest
from playwright.sync_api import expect

from inventory.demo import seed_datacenter
from scheduling.choices import JobState
from scheduling.models import Allocation, Job
from scheduling.services.admission import submit_job
from tests.factories import make_department, make_member

PASSWORD = "e2e-researcher-password-1"


@pytest.fixture
def running_job(transactional_db):
    seed_datacenter(racks=3)
    department = make_department("Research", guaranteed_gpus=32)
    user = make_member("e2e-researcher", department, password=PASSWORD)  # signs in through the form
    job, _ = submit_job(
        user=user,
        department=department,
        name="e2e-pretrain",
        gpus=8,
        topology="partition",
        priority_class="train",
        backend="slurm",
        work={"script": "#!/bin/bash\nsrun python train.py\n"},
        time_limit_minutes=60,
    )
    job.refresh_from_db()
    assert job.state == JobState.RUNNING, (job.state, job.pending_reason, job.backend_message)
    return job


@pytest.mark.e2e
def test_open_a_running_job_see_where_it_runs_and_cancel_it(live_server, page, running_job):
    job = running_job
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "e2e-researcher")
    page.fill("#id_password", PASSWORD)
    with page.expect_navigation():
        page.locator("#id_password").press("Enter")
    expect(page).not_to_have_url(re.compile(r"/login/"))

    # The list, from the navigation: the job runs, and the row says where.
    page.get_by_role("link", name="Jobs", exact=True).click()
    expect(page).to_have_url(re.compile(r"/scheduling/jobs/$"))
    row = page.locator(f'table.jobs tr[data-job="{job.pk}"]')
    expect(row.locator(".badge")).to_have_text("Running")
    expect(row.locator("code.hostlist")).to_have_text(re.compile(r"^gb-r02-t\[\d\d-\d\d\]$"))
    expect(page.locator("#job-table")).to_have_attribute("hx-trigger", "every 2s")

    # Its page: the trays, their rack and partition, the history.
    row.locator("a.job-link").click()
    expect(page).to_have_url(re.compile(rf"/scheduling/jobs/{job.pk}/$"))
    expect(page.locator("#job-state")).to_have_text("Running")
    for hostname in job.placement:
        expect(page.locator(f'table.placement tr[data-tray="{hostname}"]')).to_be_visible()
    expect(page.locator("table.placement a.rack-link")).to_have_text("gb-r02")
    kinds = page.locator("ol.job-events li")
    expect(kinds).to_have_count(3)
    expect(kinds.nth(1)).to_contain_text("placed in quota on 2 trays in gb-r02")
    expect(kinds.nth(2)).to_contain_text("Handed to its backend")

    # The rack view marks its two trays, and comes back to the job.
    page.locator("table.placement a.rack-link").click()
    expect(page).to_have_url(re.compile(rf"/inventory/racks/gb-r02/\?job={job.pk}$"))
    expect(page.locator(f'li.tray-row[data-job-tray="{job.pk}"]')).to_have_count(2)
    expect(page.locator(f'button.gpu[data-job-gpu="{job.pk}"]')).to_have_count(8)
    page.locator(".job-shown a", has_text="e2e-pretrain").click()
    expect(page).to_have_url(re.compile(rf"/scheduling/jobs/{job.pk}/$"))
    # htmx is a deferred script: a click before the page loaded is a plain post (asked on a page instead,
    # tests/scheduling/test_job_views.py); this test is about the in-place cancel.
    page.wait_for_load_state()

    # Cancel: the confirm dialog is accepted; the status turns to Cancelled in place (no page load).
    dialogs = []

    def accept(dialog):
        dialogs.append(dialog.message)
        dialog.accept()

    page.on("dialog", accept)
    page.evaluate("window.__same_page = true")
    page.get_by_role("button", name="Cancel job").click()
    expect(page.locator("#job-state")).to_have_text("Cancelled")
    expect(page.locator('[data-cancel="done"]')).to_have_text("Cancelled: its GPUs are free again.")
    expect(page.get_by_role("button", name="Cancel job")).to_have_count(0)
    expect(page.locator("ol.job-events li").last).to_contain_text("cancelled by e2e-researcher while running")
    assert page.evaluate("window.__same_page === true"), "cancelling reloaded the page"
    assert dialogs and dialogs[0].startswith(f"Cancel job #{job.pk} e2e-pretrain?")
    # The status stopped polling (HTTP 286): no hx-trigger is left on it.
    expect(page.locator("#job-status")).not_to_have_attribute("hx-trigger", re.compile(".*"))

    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert not Allocation.objects.filter(job=job).exists()
    assert Job.objects.filter(state=JobState.CANCELLED).count() == 1


@pytest.mark.e2e
def test_without_javascript_cancel_asks_on_a_page_first(live_server, browser, running_job, shots):
    """The Cancel button asks with hx-confirm, which only htmx shows: with JavaScript off (or a click before
    the deferred htmx script ran) the form posts plainly, and the portal asks the same question on a page
    before anything is cancelled."""
    job = running_job
    context = browser.new_context(viewport={"width": 390, "height": 844}, java_script_enabled=False)
    page = context.new_page()
    try:
        page.goto(f"{live_server.url}/login/")
        page.fill("#id_username", "e2e-researcher")
        page.fill("#id_password", PASSWORD)
        with page.expect_navigation():
            page.locator("#id_password").press("Enter")
        page.goto(f"{live_server.url}/scheduling/jobs/{job.pk}/")
        page.get_by_role("button", name="Cancel job").click()
        expect(page.locator('[data-confirm="asked"] h1')).to_have_text(f"Cancel job #{job.pk}?")
        expect(page.locator(".confirm-question")).to_have_text(
            f"Cancel job #{job.pk} e2e-pretrain? It is stopped and its 8 GPUs are freed."
        )
        page.screenshot(path=str(shots / "job-cancel-asked-390.png"), full_page=True)
        job.refresh_from_db()
        assert job.state == JobState.RUNNING  # asked, not done

        page.get_by_role("link", name="No, go back").click()
        expect(page).to_have_url(re.compile(rf"/scheduling/jobs/{job.pk}/$"))
        expect(page.locator("#job-state")).to_have_text("Running")

        page.get_by_role("button", name="Cancel job").click()
        page.locator('[data-confirm="asked"]').get_by_role("button", name="Cancel job").click()
        expect(page).to_have_url(re.compile(rf"/scheduling/jobs/{job.pk}/$"))
        expect(page.locator("#job-state")).to_have_text("Cancelled")
        expect(page.get_by_role("status").first).to_contain_text(f"Job #{job.pk} e2e-pretrain cancelled")
    finally:
        context.close()
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
