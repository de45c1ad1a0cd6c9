"""A department's first named project in a real browser is no cliff: its lead sees who and what changes
before the project is made (the running work of the default project and its guarantee), confirms, and then
confirms putting a member in it; the member's job form chooses their only project, and before that the
department's default project, never "no project"."""

import re

import pytest
from playwright.sync_api import expect

from core.access import Role
from inventory.demo import seed_datacenter
from tenancy.models import Project, ProjectMembership
from tests.e2e.browser import arrived, sign_in
from tests.factories import free_trays, make_department, make_job, make_member

pytestmark = pytest.mark.e2e

PASSWORD = "e2e-default-projects-1"


@pytest.fixture
def research(transactional_db):
    seed_datacenter(racks=1)
    department = make_department("Research", guaranteed_gpus=16)
    lead = make_member("e2e-dp-lead", department, Role.LEAD, password=PASSWORD)
    member = make_member("e2e-dp-member", department, password=PASSWORD)
    default = Project.objects.get(department=department, is_default=True)
    trays = free_trays(2)
    for name, tray in (("older-train", trays[0]), ("newer-train", trays[1])):
        make_job(department, name, trays=[tray], project=default, submitted_by=member, over_quota=False)
    return {"department": department, "lead": lead, "member": member}


def project_choice(browser, live_server) -> str:
    """The project the member's job form chooses for them, in a browser of their own."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = context.new_page()
        sign_in(page, live_server, "e2e-dp-member", PASSWORD)
        page.goto(f"{live_server.url}/scheduling/jobs/new/")
        return page.locator("#id_project").input_value()
    finally:
        context.close()


def test_a_lead_confirms_the_first_named_project_and_the_form_chooses_the_members_project(
    live_server, page, browser, research, shots
):
    assert project_choice(browser, live_server) == "default"  # before any named project

    sign_in(page, live_server, "e2e-dp-lead", PASSWORD)
    expect(page).not_to_have_url(re.compile(r"/login/"))
    page.goto(f"{live_server.url}/tenancy/departments/research/")
    panel = page.locator("#projects")
    expect(panel.locator('[data-project="default-only"]')).to_contain_text("default project, Default")

    form = panel.locator("form.add-project")
    form.get_by_label("Name").fill("LLM")
    form.get_by_label("Guaranteed GPUs").fill("12")
    form.get_by_role("button", name="Create project").click()

    # The confirmation, before anything is made.
    expect(page).to_have_url(re.compile(r"/projects/confirm/\?"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Create project LLM in Research?")
    changes = page.locator("#project-changes")
    expect(changes.locator('[data-change="first"]')).to_contain_text("first named project")
    expect(changes.locator('[data-change="guarantee"]')).to_contain_text("16 GPUs now and 4 after it")
    expect(changes.locator('[data-change="beyond"]')).to_contain_text(
        "1 running job of the default project (4 GPUs in all) falls beyond its new guarantee"
    )
    expect(changes.locator("tr", has_text="newer-train")).to_contain_text(
        "may be reclaimed by the new project"
    )
    expect(changes.locator("tr", has_text="older-train")).to_contain_text("keeps its guarantee")
    page.screenshot(path=str(shots / "default-projects-confirm-first.png"), full_page=True)
    assert not Project.objects.named().exists()

    page.get_by_role("button", name="Create the project").click()
    arrived(page, re.compile(r"/tenancy/departments/research/#projects$"))
    expect(page.locator('#projects tr[data-project="llm"]')).to_be_visible()
    default_row = page.locator('#projects tr[data-project="default"]')
    expect(default_row.locator('[data-figure="guaranteed"]')).to_have_text("4")
    # Nobody lost the right to submit: the member is still in the default project, and its form says so.
    assert project_choice(browser, live_server) == "default"

    # Putting the member in LLM is confirmed too.
    default_row.get_by_label("e2e-dp-member").check()
    default_row.get_by_label("Put the chosen people in").select_option(label="LLM")
    default_row.get_by_role("button", name="Review the move").click()
    expect(page).to_have_url(re.compile(r"/project-people/confirm/\?"))
    person = page.locator('#people-changes tr[data-username="e2e-dp-member"]')
    expect(person).to_contain_text("no longer in Default: their next jobs go to LLM")
    expect(person).to_contain_text("2 running or pending jobs of theirs stay in the default project")
    page.screenshot(path=str(shots / "default-projects-confirm-people.png"), full_page=True)
    assert not ProjectMembership.objects.exists()
    page.get_by_role("button", name="Put them in the project").click()
    expect(page.locator('#projects tr[data-project="llm"] li[data-username="e2e-dp-member"]')).to_be_visible()

    # The member's form now chooses their only project.
    assert project_choice(browser, live_server) == "llm"


@pytest.fixture
def research_serving(transactional_db):
    """Research (16 GPUs) runs 8 GPUs of inference in its default project: room for 8 more GPUs of build
    or inference work now."""
    seed_datacenter(racks=1)
    department = make_department("Research", guaranteed_gpus=16)
    make_member("e2e-dp-lead", department, Role.LEAD, password=PASSWORD)
    member = make_member("e2e-dp-member", department, password=PASSWORD)
    default = Project.objects.get(department=department, is_default=True)
    for name, tray in zip(("serve-a", "serve-b"), free_trays(2), strict=True):
        make_job(
            department,
            name,
            trays=[tray],
            project=default,
            submitted_by=member,
            priority_class="inference",
            over_quota=False,
        )
    return department


def test_a_first_project_that_leaves_the_defaults_build_work_no_room_is_told_before_and_after(
    live_server, page, research_serving, shots
):
    """The confirmation says the default project's new build and inference jobs will wait (its running
    inference holds all it keeps); after it, a member's build job waits with a reason naming the default
    project's share and its GPUs, not the department's (which read as if the job fitted)."""
    from scheduling.models import Job
    from scheduling.services.passes import run_pass

    sign_in(page, live_server, "e2e-dp-lead", PASSWORD)
    page.goto(f"{live_server.url}/tenancy/departments/research/")
    form = page.locator("#projects form.add-project")
    form.get_by_label("Name").fill("LLM")
    form.get_by_label("Guaranteed GPUs").fill("12")
    form.get_by_role("button", name="Create project").click()
    expect(page).to_have_url(re.compile(r"/projects/confirm/\?"))
    expect(page.locator('#project-changes [data-change="firm-fills"]')).to_have_text(
        "New build, interactive and inference jobs in Default will wait until some of its running ones end: "
        "work that is not preemptible runs only within its project's guarantee, and Default's running work "
        "of those kinds holds 8 GPUs against the 4 it keeps."
    )
    page.screenshot(path=str(shots / "default-projects-confirm-firm-fills.png"), full_page=True)
    page.get_by_role("button", name="Create the project").click()
    arrived(page, re.compile(r"/tenancy/departments/research/#projects$"))

    page.context.clear_cookies()
    sign_in(page, live_server, "e2e-dp-member", PASSWORD)
    page.goto(f"{live_server.url}/scheduling/jobs/new/")
    expect(page.locator("#id_project")).to_have_value("default")
    page.fill("#id_name", "compile")
    page.fill("#id_gpus", "1")
    page.select_option("#id_priority_class", "build")
    page.fill("#id_script", "#!/bin/bash\nmake\n")
    page.get_by_role("button", name="Submit job").click()
    expect(page).to_have_url(f"{live_server.url}/scheduling/jobs/")
    job = Job.objects.get(name="compile")
    run_pass()
    page.goto(f"{live_server.url}/scheduling/jobs/{job.pk}/")
    expect(page.locator("main")).to_contain_text(
        "build jobs run only within their project's guarantee (the default project: 4 GPUs, what the named "
        "projects' guarantees leave of the department's 16); it holds 8 and this job needs 1"
    )
    page.screenshot(path=str(shots / "default-projects-build-waits-in-words.png"), full_page=True)
