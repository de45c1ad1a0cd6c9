"""The projects panel's row for the work without a project (scheduling.views.projects): its guarantee is what
the
projects leave of the department's, and the rows add up to the department's figures, as the pass stands the
jobs (a department's guarantee holds for its work whatever its projects)."""

import pytest

from scheduling.choices import JobEventKind
from scheduling.models import Job, JobEvent
from scheduling.services.passes import run_pass
from scheduling.usage import department_positions
from tenancy.models import Project
from tests.factories import free_trays, make_department, make_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Research", guaranteed_gpus=16)


def _row(page: str, key: str) -> str:
    return page.split(f'data-project="{key}"')[1].split("</tr>")[0]


def test_work_without_a_project_keeps_the_departments_guarantee_and_the_rows_add_up(
    client_as, lead_a, department_a
):
    research = department_a
    Project.objects.create(department=research, name="LLM", slug="llm", guaranteed_gpus=8)
    trays = free_trays(5)
    # Five no-project jobs of 4 GPUs, stored as borrowed: the pass stands them again.
    jobs = [make_job(research, f"np-{n}", trays=[tray], over_quota=True) for n, tray in enumerate(trays)]
    run_pass()
    standing = [Job.objects.get(pk=j.pk).over_quota for j in jobs]
    assert standing == [False, False, False, False, True]  # 16 of the department's 16 in quota
    # The pass says why: np-2 and np-3 are in quota for Research, beyond the 8 LLM leaves to work without
    # a project (LLM's unused guarantee, which only LLM takes back).
    words = JobEvent.objects.filter(job=jobs[2], kind=JobEventKind.QUOTA).latest("pk").message
    assert words.startswith("now in quota: research's guarantee is 16 GPUs (in-quota share now 16)")
    assert "beyond what its projects leave to work without a project" in words
    position = department_positions().of(research)
    assert (position.in_use, position.in_quota, position.borrowed) == (20, 16, 4)

    page = client_as(lead_a).get("/tenancy/departments/research/").content.decode()
    row = _row(page, "default")  # the default project's row holds the work without a project
    assert "Default" in row and "default project" in row
    assert 'data-figure="guaranteed">8<' in row and 'data-figure="in-use">20<' in row
    assert 'data-figure="in-quota">16<' in row and 'data-figure="borrowed">4<' in row
    assert "8 beyond its guarantee" in row
    total = _row(page, "department-total")
    assert 'data-figure="guaranteed">16<' in total and 'data-figure="in-quota">16<' in total
    assert 'data-figure="borrowed">4<' in total
    assert 'data-figure="in-use">0<' in _row(page, "llm")


def test_a_lead_creating_the_first_project_is_told_the_default_project_keeps_the_rest(client_as, lead_a):
    page = client_as(lead_a).get("/tenancy/departments/research/").content.decode()
    form = page.split('class="add-project"')[1].split("</form>")[0]
    assert "the default project keeps what they leave" in form
    assert "Nobody loses the right to submit" in form
    assert "you see who and what changes and confirm it" in form
