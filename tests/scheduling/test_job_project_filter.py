"""Jobs filtered by project: `GET /api/v1/jobs/?project=<slug>` and the jobs page's Project filter.
The slug, the word a job's `project` shows (the id is no longer read). Strict, like the other filters: a
slug that is unknown, a number, or a project of a department whose jobs the user cannot see is a 400 naming
`project` (the same answer for all: no probing), as is a project of another department than the
`department` filter's."""

import json

import pytest

from scheduling.choices import JobState
from tenancy.models import Project, ProjectMembership
from tests.factories import make_job, token_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def projects(department_a, department_b, member_a):
    made = {
        "vision": Project.objects.create(department=department_a, name="Vision", slug="vision"),
        "speech": Project.objects.create(department=department_a, name="Speech", slug="speech"),
        "robotics": Project.objects.create(department=department_b, name="Robotics", slug="robotics"),
    }
    # A member filters by the projects they may see (Project.objects.visible_to): the ones they are in.
    for slug in ("vision", "speech"):
        ProjectMembership.objects.create(user=member_a, project=made[slug])
    return made


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
    assert names(api.get("/api/v1/jobs/?project=vision")) == [
        "train-vision-1",
        "train-vision-2",
    ]
    assert names(api.get("/api/v1/jobs/?project=speech&state=pending")) == ["train-speech"]
    assert names(api.get("/api/v1/jobs/?project=")) == [  # empty: no filter
        "train-alpha",
        "train-speech",
        "train-vision-1",
        "train-vision-2",
    ]


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("value", ["999999", "abc", "robotics", "id-of-vision"])
def test_an_unknown_project_or_one_of_a_department_out_of_sight_is_a_400_naming_it(
    member_a, projects, jobs, value
):
    # robotics: Beta's, member_a cannot see it; an id is not read (a job names its project by slug)
    value = {"id-of-vision": str(projects["vision"].pk)}.get(value, value)
    response = token_client(member_a).get(f"/api/v1/jobs/?project={value}")
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["project"]
    assert (
        f"No project with the slug {value!r} among the projects you can see" in response.json()["project"][0]
    )


def test_a_project_of_another_department_than_the_department_filter_is_a_400(platform_admin, projects, jobs):
    api = token_client(platform_admin)
    robotics = "robotics"
    assert names(api.get(f"/api/v1/jobs/?project={robotics}")) == ["train-robotics"]  # admins see all
    assert names(api.get(f"/api/v1/jobs/?project={robotics}&department=beta")) == ["train-robotics"]
    response = api.get(f"/api/v1/jobs/?project={robotics}&department=alpha")
    assert response.status_code == 400
    assert (
        "Project 'robotics' (Beta's Robotics) is not a project of the department 'alpha'"
        in (response.json()["project"][0])
    )


def test_the_jobs_page_offers_the_projects_and_filters_by_one(client, member_a, projects, jobs):
    client.force_login(member_a)
    page = client.get("/scheduling/jobs/").content.decode()
    assert '<select name="project" id="id_project">' in page
    assert '<option value="speech">Alpha / Speech</option>' in page
    assert "Robotics" not in page  # Beta's project: not member_a's to see

    page = client.get("/scheduling/jobs/?project=speech").content.decode()
    assert "train-speech" in page and "train-vision-1" not in page and "train-alpha" not in page
    assert '<option value="speech" selected>Alpha / Speech</option>' in page


def test_the_jobs_page_has_no_project_filter_where_there_are_no_projects(client, member_b, department_b):
    client.force_login(member_b)
    assert 'name="project"' not in client.get("/scheduling/jobs/").content.decode()


def test_a_slug_two_departments_use_matches_each_and_the_department_picks_one(
    platform_admin, department_b, projects, jobs
):
    beta_vision = Project.objects.create(department=department_b, name="Vision", slug="vision")
    make_job(department_b, "train-beta-vision", JobState.PENDING, project=beta_vision)
    api = token_client(platform_admin)
    assert names(api.get("/api/v1/jobs/?project=vision")) == [
        "train-beta-vision",
        "train-vision-1",
        "train-vision-2",
    ]
    assert names(api.get("/api/v1/jobs/?project=vision&department=beta")) == ["train-beta-vision"]
    assert names(api.get("/api/v1/jobs/?project=vision&department=alpha")) == [
        "train-vision-1",
        "train-vision-2",
    ]


def test_a_member_never_gets_another_departments_jobs_by_a_shared_slug(
    member_a, department_b, projects, jobs
):
    beta_vision = Project.objects.create(department=department_b, name="Vision", slug="vision")
    make_job(department_b, "train-beta-vision", JobState.PENDING, project=beta_vision)
    api = token_client(member_a)
    assert names(api.get("/api/v1/jobs/?project=vision")) == ["train-vision-1", "train-vision-2"]
    response = api.get("/api/v1/jobs/?project=vision&department=beta")
    assert response.status_code in (200, 400)
    assert "train-beta-vision" not in response.content.decode()


def test_the_project_slug_the_api_returns_filters_the_same_jobs(member_a, projects, jobs):
    api = token_client(member_a)
    listed = api.get("/api/v1/jobs/?name=train-speech").json()["results"]
    assert [job["project"] for job in listed] == ["speech"]
    assert names(api.get(f"/api/v1/jobs/?project={listed[0]['project']}")) == ["train-speech"]


def test_the_jobs_export_has_the_project_slug_blank_for_none(client, member_a, projects, jobs):
    client.force_login(member_a)
    rows = json.loads(b"".join(client.get("/scheduling/jobs/?export=json").streaming_content))
    assert {row["name"]: row["project"] for row in rows} == {
        "train-vision-1": "vision",
        "train-vision-2": "vision",
        "train-speech": "speech",
        "train-alpha": "",
    }
    csv_text = b"".join(client.get("/scheduling/jobs/?export=csv&project=speech").streaming_content).decode()
    header, *lines = csv_text.strip().splitlines()
    assert header.split(",")[:4] == ["id", "name", "department", "project"]
    assert len(lines) == 1 and lines[0].split(",")[1:4] == ["train-speech", "alpha", "speech"]


@pytest.mark.parametrize(
    ("query", "field_label", "message"),
    [
        ("project=robotics", "Project (slug)", "No project with the slug 'robotics' among the projects"),
        ("project=2", "Project (slug)", "No project with the slug '2' among the projects"),
        ("state=nonsense", "State", "Select a valid choice. nonsense is not one of the available choices."),
        ("backend=lsf", "Backend", "Select a valid choice. lsf is not one of the available choices."),
    ],
)
def test_the_jobs_page_reports_a_filter_value_it_refuses_and_shows_no_job(
    client, member_a, projects, jobs, query, field_label, message
):
    """The walkthrough: `?project=2` (another department's project's id) was silently dropped and the page
    said "223 jobs match the filter", every job of the member's. Now the filter's error is shown, the count
    claims nothing, no job is listed (nor another department's), and the answer is a 400."""
    client.force_login(member_a)
    response = client.get(f"/scheduling/jobs/?{query}")
    assert response.status_code == 400
    page = response.content.decode().replace("&#x27;", "'")
    errors = page[
        page.index('id="job-filter-errors"') : page.index("</div>", page.index('id="job-filter-errors"'))
    ]
    assert 'role="alert"' in page and f"{field_label}: {message}" in errors
    assert "match the filter" not in page
    assert "The filter holds a value that is not valid (below): no jobs are shown." in page
    for name in ("train-vision-1", "train-speech", "train-alpha", "train-robotics"):
        assert name not in page
    # An export with such a filter exports nothing either: the same page and 400.
    assert client.get(f"/scheduling/jobs/?{query}&export=csv").status_code == 400
    # A valid filter still counts its matches.
    assert "1 job match the filter" in client.get("/scheduling/jobs/?project=speech").content.decode()


def test_a_department_the_user_cannot_see_is_a_400_as_an_unknown_one(member_a, department_a, jobs):
    """The walkthrough's `rp ls -d inference` (bob, of Research): 200 and "No jobs.", while an unknown
    project was a 400. A department slug that is unknown, another department's or in the wrong case is a 400
    naming `department`, the same words for each (no probing); the member's own lists its jobs."""
    api = token_client(member_a)
    own = names(api.get(f"/api/v1/jobs/?department={department_a.slug}"))
    assert own == ["train-alpha", "train-speech", "train-vision-1", "train-vision-2"]
    answers = set()
    for slug in ("beta", "nope", department_a.slug.upper()):
        response = api.get(f"/api/v1/jobs/?department={slug}")
        assert response.status_code == 400, (slug, response.content)
        (message,) = response.json()["department"]
        answers.add(message.replace(repr(slug), "<slug>"))
    assert answers == {
        "No department with the slug <slug> among the departments you can see (your own): use a slug from "
        "/api/v1/departments/."
    }
