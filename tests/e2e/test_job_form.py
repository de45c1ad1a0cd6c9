"""A member submits a job through the form in a real browser: the preview says where it would go, a bad value
is answered next to its field in the API's words, the job appears on the jobs list; "Clone" on its page
pre-fills the form. No page breaks the Content-Security-Policy on the way."""

import pytest
from playwright.sync_api import expect

from inventory.demo import seed_datacenter
from scheduling.models import Job
from tests.factories import make_department, make_member

pytestmark = pytest.mark.e2e

PASSWORD = "e2e-job-form-password-1"
SCRIPT = "#!/bin/bash\nsrun python train.py --epochs 3\n"


@pytest.fixture
def researcher(transactional_db):
    seed_datacenter(racks=3)
    department = make_department("Research", guaranteed_gpus=32)
    make_department("Other", guaranteed_gpus=8)
    return make_member("e2e-former", department, password=PASSWORD)


def sign_in(page, live_server, username: str) -> list[str]:
    """Sign in; the console messages that report a Content-Security-Policy violation, as they come."""
    refused: list[str] = []
    page.on("console", lambda message: refused.append(message.text) if "Refused to" in message.text else None)
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    with page.expect_navigation():
        page.locator("#id_password").press("Enter")
    return refused


def test_a_member_submits_a_job_through_the_form_and_clones_it(live_server, page, shots, researcher):
    refused = sign_in(page, live_server, "e2e-former")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Submit job").click()
    expect(page).to_have_url(f"{live_server.url}/scheduling/jobs/new/")
    expect(page.locator("#id_department option")).to_have_count(2)  # "Choose" and Research, not Other
    # Her one department is chosen for her.
    expect(page.locator("#job-preview")).to_contain_text("Fill in GPUs to see whether it fits")

    page.select_option("#id_department", "research")
    page.fill("#id_name", "llm-pretrain")
    page.fill("#id_gpus", "6")
    page.select_option("#id_topology", "partition")
    page.fill("#id_script", SCRIPT)
    preview = page.locator("#job-preview")
    # The engine's rule on sizes, before submitting.
    expect(preview).to_contain_text("6 GPUs: a job above one tray takes whole trays, so a multiple of 4")
    page.fill("#id_gpus", "8")
    page.locator("#id_gpus").dispatch_event("change")
    expect(preview.locator("[data-preview=fits]")).to_be_visible()
    expect(preview).to_contain_text("It fits now: it would start in quota on 2 trays")
    page.screenshot(path=str(shots / "01-job-form-preview-fits.png"), full_page=True)

    # Kubernetes: its inputs replace the script's (static/js/job_form.js).
    page.select_option("#id_backend", "kubernetes")
    expect(page.locator("#id_image")).to_be_visible()
    expect(page.locator("#id_script")).to_be_hidden()
    page.select_option("#id_backend", "slurm")
    expect(page.locator("#id_script")).to_be_visible()

    # A bad value: the API's words next to the field, nothing written, what was typed kept.
    page.fill("#id_time_limit_minutes", "0")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#id_time_limit_minutes_error")).to_have_text(
        "Ensure this value is greater than or equal to 1."
    )
    assert not Job.objects.exists()
    expect(page.locator("#id_name")).to_have_value("llm-pretrain")
    page.screenshot(path=str(shots / "02-job-form-error-next-to-field.png"), full_page=True)

    page.fill("#id_time_limit_minutes", "90")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(f"{live_server.url}/scheduling/jobs/")
    job = Job.objects.get()
    expect(page.locator(".message.success")).to_contain_text(f"Job #{job.pk} llm-pretrain submitted")
    expect(page.locator("table").get_by_text("llm-pretrain")).to_be_visible()
    assert (job.gpus, job.topology, job.time_limit_minutes, job.work) == (
        8,
        "partition",
        90,
        {"script": SCRIPT},
    )
    page.screenshot(path=str(shots / "03-job-on-the-list.png"), full_page=True)

    page.goto(f"{live_server.url}/scheduling/jobs/{job.pk}/")
    page.get_by_role("link", name="Clone").click()
    expect(page).to_have_url(f"{live_server.url}/scheduling/jobs/new/?clone={job.pk}")
    expect(page.locator("#id_name")).to_have_value("llm-pretrain")
    expect(page.locator("#id_gpus")).to_have_value("8")
    expect(page.locator("#id_time_limit_minutes")).to_have_value("90")
    expect(page.locator("#id_topology")).to_have_value("partition")
    expect(page.locator("#id_script")).to_have_value(SCRIPT)
    expect(page.locator("#job-preview [data-preview]")).to_be_visible()
    page.screenshot(path=str(shots / "04-clone-prefilled.png"), full_page=True)
    page.fill("#id_name", "llm-pretrain-2")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".message.success")).to_contain_text("llm-pretrain-2 submitted")
    assert Job.objects.count() == 2
    assert refused == []
