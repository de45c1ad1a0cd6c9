"""A member submits a job through the form in a real browser: the preview says where it would go, a bad value
is answered next to its field in the API's words, the job appears on the jobs list; "Clone" on its page
pre-fills the form. No page breaks the Content-Security-Policy on the way.

A member in none of the department's projects gets a disabled Resubmit that says why, and the clone says it
over the project field: plain markup, proven in tests/scheduling/test_job_resubmit_projects.py."""

import pytest
from playwright.sync_api import expect

from inventory.demo import seed_datacenter
from scheduling.models import Job
from tests.e2e.browser import arrived
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
    arrived(page, f"{live_server.url}/scheduling/jobs/new/")
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


def test_the_preview_follows_typing_without_leaving_the_field(live_server, page, shots, researcher):
    """The preview refreshes on input (debounced, static/js/job_form.js marks it as updating meanwhile), not
    only on change/blur: typing 37, then 80, then 8 into GPUs without leaving it ends on 8's answer."""
    refused = sign_in(page, live_server, "e2e-former")
    page.goto(f"{live_server.url}/scheduling/jobs/new/")
    preview = page.locator("#job-preview")
    updating = page.locator("#job-preview-updating")
    expect(preview).to_contain_text("Fill in GPUs to see whether it fits")
    expect(updating).to_be_hidden()
    gpus = page.locator("#id_gpus")
    gpus.click()
    gpus.press_sequentially("37", delay=60)
    expect(updating).to_be_visible()  # from the keystroke until the answer
    expect(preview).to_have_attribute("aria-busy", "true")
    expect(preview).to_contain_text("37 GPUs: a job above one tray takes whole trays, so a multiple of 4")
    expect(updating).to_be_hidden()
    gpus.press("Control+a")
    gpus.press_sequentially("80", delay=60)
    expect(preview).not_to_contain_text("37 GPUs")
    expect(preview).to_contain_text("80")
    gpus.press("Control+a")
    gpus.press_sequentially("8", delay=60)
    assert page.evaluate("document.activeElement.id") == "id_gpus"  # never left the field
    expect(preview.locator("[data-preview=fits]")).to_be_visible()
    expect(preview).to_contain_text("It fits now: it would start in quota on 2 trays")
    expect(preview).not_to_contain_text("80")
    expect(updating).to_be_hidden()
    expect(preview).not_to_have_attribute("aria-busy", "true")
    assert page.evaluate("document.activeElement.id") == "id_gpus"
    page.screenshot(path=str(shots / "05-job-form-preview-while-typing.png"), full_page=True)
    # A value put in without keys (pasted, a phone's keyboard, autofill: an input event, no keyup and no
    # change until the field is left) is answered too.
    gpus.fill("12")
    expect(preview).to_contain_text("It fits now: it would start in quota on 3 trays")
    assert page.evaluate("document.activeElement.id") == "id_gpus"
    assert refused == []


@pytest.fixture
def before_projects(transactional_db):
    """A Research job from before the department had projects; then it shares its GPUs between Vision (the
    researcher is in it) and Speech; a second member is in neither."""
    from scheduling.choices import JobState
    from tenancy.models import Project, ProjectMembership
    from tests.factories import make_job

    seed_datacenter(racks=3)
    department = make_department("Research", guaranteed_gpus=32)
    researcher = make_member("e2e-vision", department, password=PASSWORD)
    job = make_job(
        department, "nightly-eval", JobState.FAILED, submitted_by=researcher, work={"script": SCRIPT}
    )
    vision = Project.objects.create(department=department, name="Vision", slug="vision")
    Project.objects.create(department=department, name="Speech", slug="speech")
    ProjectMembership.objects.create(user=researcher, project=vision)
    return job


def test_a_job_from_before_projects_is_resubmitted_under_a_chosen_project(
    live_server, page, shots, before_projects
):
    job = before_projects
    refused = sign_in(page, live_server, "e2e-vision")
    page.goto(f"{live_server.url}/scheduling/jobs/{job.pk}/")
    # The page says it before the click: Research now needs a project; resubmit asks which.
    why = page.locator("#resubmit-why")
    expect(why).to_have_text(
        "This job is in Research's default project, which is for its members in no named project: choose one "
        "of your projects to run it under."
    )
    resubmit = page.locator("[data-resubmit]")
    expect(resubmit).to_have_attribute("data-resubmit", "choose-project")
    expect(resubmit).to_be_enabled()
    page.screenshot(path=str(shots / "05-job-page-resubmit-needs-project.png"), full_page=True)

    # Clone: her one project is chosen, and the form says why.
    page.get_by_role("link", name="Clone").click()
    expect(page.locator("#id_project")).to_have_value("vision")
    expect(page.locator("#id_project_note")).to_contain_text("Vision, your one project there, is chosen")
    expect(page.locator("#job-preview [data-preview]")).to_be_visible()  # the preview takes the project
    page.screenshot(path=str(shots / "06-clone-project-chosen.png"), full_page=True)

    page.goto(f"{live_server.url}/scheduling/jobs/{job.pk}/")
    page.get_by_role("link", name="Resubmit").click()
    expect(page.locator("h1")).to_contain_text(f"Resubmit job #{job.pk}")
    expect(page.locator("#id_project")).to_have_value("vision")
    expect(page.locator("#id_project option")).to_have_count(1)  # Speech is not hers
    page.screenshot(path=str(shots / "07-resubmit-choose-project.png"), full_page=True)
    with page.expect_navigation():
        page.get_by_role("button", name="Resubmit").click()
    new = Job.objects.exclude(pk=job.pk).get()
    expect(page).to_have_url(f"{live_server.url}/scheduling/jobs/{new.pk}/")
    expect(page.locator(".page-head .facts")).to_contain_text("ProjectVision vision")
    assert new.project.slug == "vision" and new.work == job.work
    page.screenshot(path=str(shots / "08-resubmitted-under-vision.png"), full_page=True)
    assert refused == []
