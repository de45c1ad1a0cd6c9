"""Global search (portal.pages.search) finds projects (by name or slug, as `Project.objects.visible_to`
allows) and
jumps to a job by its whole name when one visible job has it; several jobs of one name are listed, those
first. The cost stays a fixed number of queries whatever the number of rows."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from portal.pages.search import exact_url, search
from scheduling.choices import JobState
from tenancy.models import Project, ProjectMembership
from tests.factories import make_department, make_job

pytestmark = pytest.mark.django_db

SEARCH = "/search/"


@pytest.fixture
def department_a(demo_inventory):
    return make_department("Alpha")


@pytest.fixture
def department_b(demo_inventory):
    return make_department("Beta")


@pytest.fixture
def vision(department_a, member_a):
    project = Project.objects.create(department=department_a, name="Computer Vision", slug="vision")
    ProjectMembership.objects.create(user=member_a, project=project)
    return project


def kinds(response) -> dict[str, list[str]]:
    assert response.status_code == 200, response.get("Location")
    return {g.kind: [h.title for h in g.hits] for g in response.context["results"].groups}


def project_url(project) -> str:
    return (
        reverse("scheduling:department-detail", args=[project.department.slug]) + f"#project-{project.slug}"
    )


# --- projects -----------------------------------------------------------------------------------------------


def test_projects_are_found_by_the_start_of_their_name_or_slug(client_as, vision, department_a):
    Project.objects.create(department=department_a, name="Vocoder", slug="voc")
    client = client_as("lead_a")  # a lead sees every project of the department
    response = client.get(SEARCH, {"q": "v"})
    assert kinds(response)["project"] == ["Alpha / Computer Vision", "Alpha / Vocoder"]
    assert f'href="{project_url(vision)}"' in response.content.decode()
    assert kinds(client.get(SEARCH, {"q": "COMP"}))["project"] == ["Alpha / Computer Vision"]
    assert kinds(client.get(SEARCH, {"q": "visi"}))["project"] == ["Alpha / Computer Vision"]


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_projects_whole_name_or_slug_jumps_to_it(client_as, vision):
    client = client_as("member_a")
    for q in ("vision", "VISION", "Computer Vision", "computer vision"):
        response = client.get(SEARCH, {"q": q})
        assert response.status_code == 302, q
        assert response["Location"] == project_url(vision)
    # The place it jumps to exists: the project's row on its department page.
    page = client.get(reverse("scheduling:department-detail", args=["alpha"])).content.decode()
    assert 'id="project-vision"' in page


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_projects_are_found_only_by_who_may_see_them(client_as, vision, department_a, department_b, member_b):
    Project.objects.create(department=department_a, name="Speech", slug="speech")  # member_a is not in it
    assert "project" not in kinds(client_as("member_a").get(SEARCH, {"q": "spe"}))
    assert client_as("member_a").get(SEARCH, {"q": "speech"}).status_code == 200  # no jump either
    # Another department's member finds neither.
    client = client_as(member_b)
    assert "project" not in kinds(client.get(SEARCH, {"q": "vis"}))
    assert client.get(SEARCH, {"q": "vision"}).status_code == 200
    assert exact_url(member_b, "vision") is None


def test_one_slug_in_two_departments_is_listed_not_jumped_to(client_as, vision, department_b, platform_admin):
    Project.objects.create(department=department_b, name="Vision B", slug="vision")
    response = client_as(platform_admin).get(SEARCH, {"q": "vision"})
    assert kinds(response)["project"] == ["Alpha / Computer Vision", "Beta / Vision B"]
    # The member of Alpha's sees one, and goes there.
    assert client_as("member_a").get(SEARCH, {"q": "vision"})["Location"] == project_url(vision)


# --- a job's whole name -------------------------------------------------------------------------------------


def test_a_unique_job_name_jumps_to_the_job(client_as, department_a, member_a):
    job = make_job(department_a, "llama-pretrain", JobState.PENDING)
    make_job(department_a, "llama-pretrain-2", JobState.PENDING)
    client = client_as(member_a)
    response = client.get(SEARCH, {"q": "llama-pretrain"})
    assert response.status_code == 302
    assert response["Location"] == reverse("scheduling:job-detail", args=[job.pk])
    # Only the whole name (case and all): a prefix or another case lists them.
    assert len(kinds(client.get(SEARCH, {"q": "llama-pre"}))["job"]) == 2
    assert len(kinds(client.get(SEARCH, {"q": "LLAMA-PRETRAIN"}))["job"]) == 2


def test_jobs_sharing_a_name_are_listed_those_first(client_as, department_a, member_a):
    first = make_job(department_a, "sweep", JobState.COMPLETED)
    second = make_job(department_a, "sweep", JobState.PENDING)
    for n in range(25):  # newer jobs whose names start the same: the two still come first
        make_job(department_a, f"sweep-{n}", JobState.PENDING)
    response = client_as(member_a).get(SEARCH, {"q": "sweep"})
    titles = kinds(response)["job"]
    assert titles[:2] == [f"#{second.pk} sweep", f"#{first.pk} sweep"]
    assert (
        "2 jobs are named &#x27;sweep&#x27;: they are listed first, newest first."
        in response.content.decode()
    )


def test_another_departments_job_of_that_name_neither_leaks_nor_blocks(
    client_as, department_a, department_b, member_a, platform_admin
):
    ours = make_job(department_a, "nightly", JobState.PENDING)
    theirs = make_job(department_b, "nightly-b", JobState.PENDING)
    make_job(department_b, "nightly", JobState.PENDING)
    # member_a sees one job named "nightly" (theirs is out of sight): it jumps to it.
    assert client_as(member_a).get(SEARCH, {"q": "nightly"})["Location"] == reverse(
        "scheduling:job-detail", args=[ours.pk]
    )
    assert client_as(member_a).get(SEARCH, {"q": "nightly-b"}).status_code == 200  # not Beta's job
    assert exact_url(member_a, "nightly-b") is None
    # An admin sees both "nightly": listed.
    assert exact_url(platform_admin, "nightly") is None
    assert exact_url(platform_admin, "nightly-b") == reverse("scheduling:job-detail", args=[theirs.pk])


def test_a_department_goes_before_a_project_and_a_job_of_the_same_name(
    client_as, department_a, member_a, vision
):
    Project.objects.create(department=department_a, name="Alpha Team", slug="alpha")
    make_job(department_a, "alpha", JobState.PENDING)
    assert client_as(member_a).get(SEARCH, {"q": "alpha"})["Location"] == reverse(
        "scheduling:department-detail", args=["alpha"]
    )


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_fast_path_and_the_full_search_agree(
    department_a, department_b, member_a, platform_admin, vision
):
    Project.objects.create(department=department_b, name="Vision B", slug="vision")
    make_job(department_a, "unique-run", JobState.PENDING)
    make_job(department_a, "twice", JobState.PENDING)
    make_job(department_a, "twice", JobState.PENDING)
    make_job(department_b, "beta-only", JobState.PENDING)
    for user in (platform_admin, member_a):
        for q in ("vision", "Computer Vision", "Vision B", "unique-run", "twice", "beta-only", "unique"):
            assert exact_url(user, q) == search(user, q).exact, (user, q)


# --- cost ---------------------------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_queries_per_search_do_not_grow_with_projects_or_jobs(client_as, department_a, lead_a):
    client = client_as(lead_a)
    client.get(SEARCH, {"q": "warm-up"})
    Project.objects.create(department=department_a, name="Proj 0", slug="proj-0")
    make_job(department_a, "proj-job", JobState.PENDING)
    with CaptureQueriesContext(connection) as few:
        assert client.get(SEARCH, {"q": "proj"}).status_code == 200
    with CaptureQueriesContext(connection) as jump_few:
        assert client.get(SEARCH, {"q": "proj-job"}).status_code == 302
    for n in range(1, 30):
        Project.objects.create(department=department_a, name=f"Proj {n}", slug=f"proj-{n}")
        make_job(department_a, f"proj-job-{n}", JobState.PENDING)
    with CaptureQueriesContext(connection) as many:
        response = client.get(SEARCH, {"q": "proj"})
    assert response.status_code == 200 and len(kinds(response)["project"]) == 20
    # The "and N more" counts of the two kinds that overflowed (projects, jobs), nothing per row.
    assert len(many) <= len(few) + 2
    with CaptureQueriesContext(connection) as jump_many:
        assert client.get(SEARCH, {"q": "proj-job"}).status_code == 302
    assert len(jump_many) == len(jump_few)
