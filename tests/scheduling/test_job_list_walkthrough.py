"""What a walkthrough of the jobs pages found, fixed: the jobs list's Project column (linking to the project's
row on its department page, sortable there and in the API: `?sort=project`), the short address `/jobs/`, the
fallback bound's documented default (form and API schema), a department slug in the wrong case named right,
and one set of topology words (the Topology choices' labels) on the job page and the resubmit page."""

import re

import pytest
from django.urls import reverse
from drf_spectacular.generators import SchemaGenerator

from scheduling.choices import JobState
from scheduling.models import Job
from tenancy.models import Project, ProjectMembership
from tests.factories import make_department, make_job, make_member, token_client

pytestmark = pytest.mark.django_db

JOBS = "/scheduling/jobs/"
SCRIPT = "#!/bin/bash\nsrun true\n"


@pytest.fixture
def project_jobs(department_a, member_a):
    zeta = Project.objects.create(department=department_a, name="Zeta", slug="zeta")
    beta = Project.objects.create(department=department_a, name="Beta team", slug="beta-team")
    for project in (zeta, beta):
        ProjectMembership.objects.create(user=member_a, project=project)
    make_job(department_a, "job-zeta", JobState.PENDING, project=zeta)
    make_job(department_a, "job-none", JobState.PENDING)
    make_job(department_a, "job-beta", JobState.PENDING, project=beta)
    return {"zeta": zeta, "beta": beta}


def rows(html: str) -> list[str]:
    """The job names in the jobs table, in order."""
    return re.findall(r'class="job-link" href="[^"]+">([^<]+)</a>', html)


def test_the_jobs_list_has_a_project_column_linking_to_the_projects_row(client, member_a, project_jobs):
    client.force_login(member_a)
    html = client.get(JOBS).content.decode()
    assert '<a href="?sort=project"' in html or "sort=project" in html  # a sortable header
    department_page = reverse("scheduling:department-detail", args=["alpha"])
    assert f'<td class="project phone-hide"><a href="{department_page}#project-zeta">Zeta</a></td>' in html
    assert (
        f'<td class="project phone-hide"><a href="{department_page}#project-beta-team">Beta team</a></td>'
        in html
    )
    assert '<td class="project phone-hide"></td>' in html  # job-none: blank
    # The row the link names is there on the department page for someone in the project.
    assert 'id="project-zeta"' in client.get(department_page).content.decode()


def test_the_jobs_list_sorts_by_project_name(client, member_a, project_jobs):
    client.force_login(member_a)
    ascending = rows(client.get(JOBS, {"sort": "project"}).content.decode())
    descending = rows(client.get(JOBS, {"sort": "-project"}).content.decode())
    named = [name for name in ascending if name != "job-none"]
    assert named == ["job-beta", "job-zeta"]  # Beta team before Zeta
    assert [name for name in descending if name != "job-none"] == ["job-zeta", "job-beta"]
    # Jobs without a project sort together at one end (where NULLs go depends on the database).
    assert ascending.index("job-none") in (0, 2) and descending == list(reversed(ascending))


def test_the_api_sorts_jobs_by_project_too(member_a, project_jobs):
    api = token_client(member_a)
    response = api.get("/api/v1/jobs/", {"sort": "project"})
    assert response.status_code == 200, response.content
    names = [job["name"] for job in response.json()["results"]]
    assert [name for name in names if name != "job-none"] == ["job-beta", "job-zeta"]
    names = [job["name"] for job in api.get("/api/v1/jobs/", {"sort": "-project"}).json()["results"]]
    assert [name for name in names if name != "job-none"] == ["job-zeta", "job-beta"]
    response = api.get("/api/v1/jobs/", {"sort": "projects"})
    assert response.status_code == 400 and "project" in response.json()["sort"][0]


def api_schema() -> dict:
    return SchemaGenerator().get_schema(request=None, public=True)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_api_schema_offers_the_project_sort():
    parameters = api_schema()["paths"]["/api/v1/jobs/"]["get"]["parameters"]
    sort = next(p for p in parameters if p["name"] == "sort")
    assert {"project", "-project"} <= set(sort["schema"]["enum"])


def test_the_short_jobs_address_redirects_to_the_list_keeping_the_query(client, member_a):
    client.force_login(member_a)
    response = client.get("/jobs/?state=pending&sort=-gpus")
    assert response.status_code == 302
    assert response["Location"] == "/scheduling/jobs/?state=pending&sort=-gpus"
    assert client.get("/jobs/").headers["Location"] == "/scheduling/jobs/"
    assert client.get(response["Location"]).status_code == 200


# --- the fallback bound's default ---------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_fallback_bounds_default_is_stated_in_the_form_and_the_api_schema(client, member_a):
    client.force_login(member_a)
    form = client.get("/scheduling/jobs/new/").content.decode()
    assert "Empty with a wider placement: 120 minutes (two hours)." in form
    schemas = api_schema()["components"]["schemas"]
    for name in ("SlurmJobSubmit", "KubernetesJobSubmit"):  # the submission body's shapes
        fields = schemas[name]["properties"]
        assert (
            "Absent or null with a fallback_topology: 120 (two hours)"
            in fields["fallback_after_minutes"]["description"]
        )
        assert "fallback_after_minutes (default 120)" in fields["fallback_topology"]["description"]


# --- words ----------------------------------------------------------------------------------------------


def test_a_department_slug_in_the_wrong_case_is_named_right(member_a, department_a):
    body = {"department": "Alpha", "name": "t", "gpus": 4, "work": {"script": SCRIPT}}
    response = token_client(member_a).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    assert response.json()["department"] == [
        "department slugs are case-sensitive: yours is 'alpha', not 'Alpha'"
    ]
    assert not Job.objects.exists()
    # Someone else's department in any case: the same answer as for one that does not exist (no probing).
    make_department("Gamma")
    response = token_client(member_a).post("/api/v1/jobs/", {**body, "department": "GAMMA"}, format="json")
    assert response.json()["department"] == ["you are not a member of a department 'GAMMA'"]


@pytest.mark.parametrize("slug", [" alpha", "alpha ", "alpha\n"])
def test_a_department_slug_with_spaces_around_is_refused_as_the_wrong_case_is(member_a, department_a, slug):
    # DRF trimmed it and took the job for 'alpha' while 'Alpha' was refused: a slug is taken as sent.
    body = {"department": slug, "name": "t", "gpus": 4, "work": {"script": SCRIPT}}
    response = token_client(member_a).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400
    assert "slug" in response.json()["department"][0]
    assert not Job.objects.exists()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"topology": "any"}, "Anywhere (strict)"),
        ({"topology": "rack"}, "One NVLink domain (rack) (strict)"),
        (
            {"topology": "partition", "fallback_topology": "rack", "fallback_after_minutes": 90},
            "One NVLink partition; One NVLink domain (rack) accepted after 90 min of waiting",
        ),
    ],
)
def test_the_job_page_and_the_resubmit_page_say_the_topology_alike(client, department_a, fields, words):
    member = make_member("resubmitter", department_a)
    job = make_job(department_a, "done", JobState.COMPLETED, submitted_by=member, gpus=8, **fields)
    client.force_login(member)
    detail = client.get(reverse("scheduling:job-detail", args=[job.pk])).content.decode()
    resubmit = client.get(reverse("scheduling:job-resubmit", args=[job.pk]))
    assert resubmit.status_code == 200
    assert f"<dd>{words}</dd>" in detail
    assert f"<dd>{words}</dd>" in resubmit.content.decode()
