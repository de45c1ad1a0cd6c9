"""One rule for who sees a project (`Project.objects.visible_to`: platform admins all, a department's leads
its projects, anyone else the projects they are in), followed alike by global search, the jobs list's
project filter, `GET /api/v1/jobs/?project=`, `/api/v1/projects/` and the department page's projects panel.
Search finds a project by its namespace / Slurm account (`<department>--<project>`) too."""

import pytest
from django.urls import reverse

from core.access import Role
from scheduling.choices import JobState
from tenancy.models import Project, ProjectMembership
from tests.factories import make_department, make_job, make_member, token_client

pytestmark = pytest.mark.django_db

SEARCH = "/search/"


@pytest.fixture
def research():
    """Research shares its GPUs between Speech (bob is in it) and LLM (bob is not); Ada leads Research."""
    department = make_department("Research")
    bob = make_member("bob", department)
    make_member("ada", department, Role.LEAD)
    speech = Project.objects.create(department=department, name="Speech", slug="speech")
    llm = Project.objects.create(department=department, name="LLM", slug="llm")
    ProjectMembership.objects.create(user=bob, project=speech)
    make_job(department, "speech-train", JobState.PENDING, project=speech)
    make_job(department, "llm-train", JobState.PENDING, project=llm)
    return department


def project_url(slug: str, department: str = "research") -> str:
    return reverse("scheduling:department-detail", args=[department]) + f"#project-{slug}"


def found_projects(client, q: str) -> list[str]:
    response = client.get(SEARCH, {"q": q})
    assert response.status_code == 200, response.get("Location")
    return [
        hit.title
        for group in response.context["results"].groups
        if group.kind == "project"
        for hit in group.hits
    ]


def seen_everywhere(client, username: str) -> dict[str, set[str]]:
    """The projects `username` is shown, surface by surface."""
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(username=username)
    client.force_login(user)
    api = token_client(user)
    seen = {
        "search": {
            title.split(" / ")[1] for title in found_projects(client, "l") + found_projects(client, "s")
        },
        "filter": set(),
        "jobs api": {
            name
            for slug, name in (("speech", "Speech"), ("llm", "LLM"))
            if api.get("/api/v1/jobs/", {"project": slug}).status_code == 200
        },
        "projects api": {
            project["name"]
            for project in api.get("/api/v1/projects/").json()["results"]
            if not project["is_default"]  # every member sees their department's default project
        },
        "department page": set(),
    }
    jobs_page = client.get("/scheduling/jobs/").content.decode()
    for slug, name in (("speech", "Speech"), ("llm", "LLM")):
        if f'<option value="{slug}">Research / {name}</option>' in jobs_page:
            seen["filter"].add(name)
    department_page = client.get(reverse("scheduling:department-detail", args=["research"])).content.decode()
    for slug, name in (("speech", "Speech"), ("llm", "LLM")):
        if f'id="project-{slug}"' in department_page:
            seen["department page"].add(name)
    return seen


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    ("username", "projects"),
    [("bob", {"Speech"}), ("ada", {"Speech", "LLM"})],
)
def test_search_filter_apis_and_page_agree_on_who_sees_a_project(client, research, username, projects):
    seen = seen_everywhere(client, username)
    assert seen == {surface: projects for surface in seen}, seen


def test_a_member_asking_for_a_project_he_is_not_in_is_told_alike(client, research):
    bob = research.memberships.get(user__username="bob").user
    api = token_client(bob)
    response = api.get("/api/v1/jobs/", {"project": "llm"})
    assert response.status_code == 400 and list(response.json()) == ["project"]
    assert "No project with the slug 'llm' among the projects you can see" in response.json()["project"][0]
    # ... as for one that does not exist (no probing), while the job list itself still shows the
    # department's jobs, LLM's among them (jobs are seen department-wide).
    assert api.get("/api/v1/jobs/", {"project": "nope"}).json() == {
        "project": [response.json()["project"][0].replace("'llm'", "'nope'")]
    }
    assert {job["name"] for job in api.get("/api/v1/jobs/").json()["results"]} == {
        "speech-train",
        "llm-train",
    }
    client.force_login(bob)
    assert found_projects(client, "llm") == []
    assert client.get(SEARCH, {"q": "llm"}).status_code == 200  # no jump to a project he cannot see


def test_search_finds_a_project_by_its_namespace_or_slurm_account(client, research):
    ada = research.memberships.get(user__username="ada").user
    client.force_login(ada)
    llm = Project.objects.get(slug="llm")
    assert llm.namespace == "research--llm" and llm.account == "research--llm"
    for q in ("research--llm", "RESEARCH--LLM"):
        response = client.get(SEARCH, {"q": q})
        assert response.status_code == 302, q
        assert response["Location"] == project_url("llm")
    assert found_projects(client, "research--") == ["Research / LLM", "Research / Speech"]
    assert found_projects(client, "research--sp") == ["Research / Speech"]
    assert found_projects(client, "research--x") == []
    # bob: his own project by its namespace; not the one he is not in.
    client.force_login(research.memberships.get(user__username="bob").user)
    assert client.get(SEARCH, {"q": "research--speech"})["Location"] == project_url("speech")
    assert found_projects(client, "research--") == ["Research / Speech"]
    assert client.get(SEARCH, {"q": "research--llm"}).status_code == 200


def test_a_namespace_search_handles_a_department_slug_with_dashes(client, platform_admin):
    deep = make_department("Deep Learning", slug="deep-learning")
    Project.objects.create(department=deep, name="Vision", slug="vision-2")
    client.force_login(platform_admin)
    response = client.get(SEARCH, {"q": "deep-learning--vision-2"})
    assert response.status_code == 302 and response["Location"] == project_url("vision-2", "deep-learning")
    assert found_projects(client, "deep-learning--vis") == ["Deep Learning / Vision"]
    assert found_projects(client, "deep--vision") == []
    assert found_projects(client, "deep-learning-vision-2") == []  # the old single-dash form is no name


def test_the_jobs_list_links_only_the_projects_one_may_see(client, research):
    """Jobs are seen department-wide, so bob's list shows LLM's job with its project's name, but links only
    his own project's row (LLM has none on his department page)."""
    client.force_login(research.memberships.get(user__username="bob").user)
    html = client.get("/scheduling/jobs/").content.decode()
    assert f'<td class="project phone-hide"><a href="{project_url("speech")}">Speech</a></td>' in html
    assert '<td class="project phone-hide">LLM</td>' in html
    client.force_login(research.memberships.get(user__username="ada").user)
    html = client.get("/scheduling/jobs/").content.decode()
    assert f'<td class="project phone-hide"><a href="{project_url("llm")}">LLM</a></td>' in html
