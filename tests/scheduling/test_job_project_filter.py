"""Jobs filtered by project (issue 16): `GET /api/v1/jobs/?project=<id>` and the jobs page's Project filter.
Strict, like the other filters: an id that is unknown, not a number, or a project of a department whose jobs
the user cannot see is a 400 naming `project` (the same answer for all three: no probing), as is a project
of another department than the `department` filter's."""

import pytest

from scheduling.choices import JobState
from tenancy.models import Project
from tests.factories import make_job, token_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def projects(department_a, department_b):
    return {
        "vision": Project.objects.create(department=department_a, name="Vision", slug="vision"),
        "speech": Project.objects.create(department=department_a, name="Speech", slug="speech"),
        "robotics": Project.objects.create(department=department_b, name="Robotics", slug="robotics"),
    }


@pytest.fixture
def jobs(projects, department_a, department_b):
    make_job(department_a, "train-vision-1", JobState.PENDING, project=projects["vision"])
    make_job(department_a, "train-vision-2", JobState.COMPLETED, project=projects["vision"])
    make_job(department_a, "train-speech", JobState.PENDING, project=projects["speech"])
    make_job(department_a, "train-alpha", JobState.PENDING)  # the department's own work
    make_job(department_b, "train-robotics", JobState.PENDING, project=projects["robotics"])


def names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return sorted(job["name"] for job in response.json()["results"])


def test_the_api_lists_the_jobs_of_one_project(member_a, projects, jobs):
    api = token_client(member_a)
    assert names(api.get(f"/api/v1/jobs/?project={projects['vision'].pk}")) == [
        "train-vision-1",
        "train-vision-2",
    ]
    assert names(api.get(f"/api/v1/jobs/?project={projects['speech'].pk}&state=pending")) == ["train-speech"]
    assert names(api.get("/api/v1/jobs/?project=")) == [  # empty: no filter
        "train-alpha",
        "train-speech",
        "train-vision-1",
        "train-vision-2",
    ]


@pytest.mark.parametrize("value", ["999999", "abc", "robotics"])
def test_an_unknown_project_or_one_of_a_department_out_of_sight_is_a_400_naming_it(
    member_a, projects, jobs, value
):
    value = {"robotics": str(projects["robotics"].pk)}.get(value, value)  # Beta's: member_a cannot see it
    response = token_client(member_a).get(f"/api/v1/jobs/?project={value}")
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["project"]
    assert (
        "No project with this ID among the projects whose jobs you can see" in response.json()["project"][0]
    )


def test_a_project_of_another_department_than_the_department_filter_is_a_400(platform_admin, projects, jobs):
    api = token_client(platform_admin)
    robotics = projects["robotics"].pk
    assert names(api.get(f"/api/v1/jobs/?project={robotics}")) == ["train-robotics"]  # admins see all
    assert names(api.get(f"/api/v1/jobs/?project={robotics}&department=beta")) == ["train-robotics"]
    response = api.get(f"/api/v1/jobs/?project={robotics}&department=alpha")
    assert response.status_code == 400
    assert "is not a project of the department 'alpha'" in response.json()["project"][0]


def test_the_jobs_page_offers_the_projects_and_filters_by_one(client, member_a, projects, jobs):
    client.force_login(member_a)
    page = client.get("/scheduling/jobs/").content.decode()
    assert '<select name="project" id="id_project">' in page
    assert f'<option value="{projects["speech"].pk}">Alpha / Speech</option>' in page
    assert "Robotics" not in page  # Beta's project: not member_a's to see

    page = client.get(f"/scheduling/jobs/?project={projects['speech'].pk}").content.decode()
    assert "train-speech" in page and "train-vision-1" not in page and "train-alpha" not in page
    assert f'<option value="{projects["speech"].pk}" selected>Alpha / Speech</option>' in page


def test_the_jobs_page_has_no_project_filter_where_there_are_no_projects(client, member_b, department_b):
    client.force_login(member_b)
    assert 'name="project"' not in client.get("/scheduling/jobs/").content.decode()
