"""What a lead reads before a project step, in a real browser: the first project's confirmation counts the
same jobs beyond the guarantee in its sentence as in its table (training ones may be reclaimed, a build
job keeps its guarantee: it holds it first), and a project's Delete button asks a question that names who
leaves it, at 1400 and 390 px."""

import re

import pytest
from playwright.sync_api import expect

from core.access import Role
from inventory.demo import seed_datacenter
from scheduling.choices import PriorityClass
from tenancy.models import Project, ProjectMembership
from tests.e2e.browser import sign_in
from tests.factories import free_trays, make_department, make_job, make_member

pytestmark = pytest.mark.e2e

PASSWORD = "e2e-project-counts-1"


@pytest.fixture
def research(transactional_db):
    """Research's default project runs, oldest first, a training job, then a training and a build job: a
    12-GPU project leaves it 4, which the build job holds (the scheduler stands work never preempted
    first), so both training jobs fall beyond it."""
    seed_datacenter(racks=1)
    department = make_department("Research", guaranteed_gpus=16)
    make_member("e2e-pc-lead", department, Role.LEAD, password=PASSWORD)
    default = Project.objects.get(department=department, is_default=True)
    trays = free_trays(3)
    for name, tray, cls in (
        ("older-train", trays[0], PriorityClass.TRAIN),
        ("newer-train", trays[1], PriorityClass.TRAIN),
        ("newer-build", trays[2], PriorityClass.BUILD),
    ):
        make_job(department, name, trays=[tray], project=default, over_quota=False, priority_class=cls)
    return department


@pytest.mark.parametrize("width", [1400, 390])
def test_the_lead_reads_one_count_and_a_delete_question_that_names_people(
    live_server, browser, research, shots, width
):
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    try:
        sign_in(page, live_server, "e2e-pc-lead", PASSWORD)
        expect(page).not_to_have_url(re.compile(r"/login/"))
        page.goto(
            f"{live_server.url}/tenancy/departments/research/projects/confirm/"
            "?name=LLM&guaranteed_gpus=12&over_quota_weight=1"
        )
        changes = page.locator("#project-changes")
        # The build job holds the guarantee first (never preempted, the scheduler stands it first): the
        # two training jobs fall beyond the 4 GPUs left, and the sentence counts the rows the table marks.
        expect(changes.locator('[data-change="beyond"]')).to_have_text(
            "2 running jobs of the default project (8 GPUs in all) fall beyond its new guarantee, and the "
            "new project's work may reclaim them."
        )
        expect(changes.locator("tr", has_text="newer-train")).to_contain_text("may be reclaimed")
        expect(changes.locator("tr", has_text="older-train")).to_contain_text("may be reclaimed")
        expect(changes.locator("tr", has_text="newer-build")).to_contain_text("keeps its guarantee")
        page.screenshot(path=str(shots / f"project-counts-confirm-{width}.png"), full_page=True)
        page.get_by_role("button", name="Create the project").click()
        expect(page).to_have_url(re.compile(r"/tenancy/departments/research/#projects$"))
        page.wait_for_load_state()

        llm = Project.objects.get(slug="llm")
        for name in ("erin", "bob", "dave", "alice", "carol"):
            ProjectMembership.objects.create(user=make_member(f"e2e-pc-{name}", research), project=llm)
        page.reload()
        page.wait_for_load_state()
        asked = []
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
        page.locator('tr[data-project-edit="llm"]').get_by_role("button", name="Delete").click()
        expect(page.locator('#projects tr[data-project="llm"]')).to_be_visible()
        assert asked == [
            "Delete project LLM? Its guarantee of 12 GPUs goes back to the default project. Its 5 members "
            "leave it (e2e-pc-alice, e2e-pc-bob, e2e-pc-carol and 2 more): each back in the default project "
            "unless in another named project. It has no jobs, running, waiting or finished."
        ]
        assert Project.objects.filter(slug="llm").exists()  # dismissed: nothing posted
        page.screenshot(path=str(shots / f"project-counts-panel-{width}.png"), full_page=True)
    finally:
        context.close()
