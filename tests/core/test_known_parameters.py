"""A query parameter an API endpoint does not read is a 400 naming it (core.filters.KnownParameters), not "no
filter" and the whole list: a member's `?submited_by=` typo, a parameter in the wrong case, a made-up one.
What the endpoints do read still works: their filters (a range's two ends), `sort`, both ways of paging,
`format`, and a parameter a view reads itself."""

import urllib.parse

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from scheduling.models import Job
from tests.factories import token_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(member_a):
    return token_client(member_a)


@pytest.mark.parametrize(
    "query",
    [
        "submited_by=carol",  # a typo of a filter
        "State=running",  # the right name in the wrong case
        "department=alpha&nonsense=1",  # a known one beside an unknown one
        "page_sise=2",
        "q=train",
    ],
)
def test_an_unknown_parameter_is_a_400_naming_it_and_nothing_is_listed(api, department_a, query):
    response = api.get(f"/api/v1/jobs/?{query}")
    assert response.status_code == 400
    unknown = [pair.split("=")[0] for pair in query.split("&") if pair.split("=")[0] not in {"department"}]
    body = response.json()
    assert sorted(body) == sorted(unknown)
    assert "this endpoint reads:" in body[unknown[0]][0] and "state" in body[unknown[0]][0]
    assert "results" not in body


def test_what_the_endpoints_read_still_works(api, admin_client, department_a, demo_inventory):
    assert api.get("/api/v1/jobs/?state=running&sort=-created&page_size=5&format=json").status_code == 200
    assert api.get("/api/v1/jobs/?page=1&page_size=5").status_code == 200
    assert api.get("/api/v1/gpus/?rack=gb-r01&page_size=3").status_code == 200
    first = api.get("/api/v1/gpus/?page_size=3").json()
    assert api.get(first["next"]).status_code == 200  # the cursor it gave
    assert api.get("/api/v1/audit-events/?date_after=2026-01-01&date_before=2026-12-31").status_code in (
        200,
        403,
    )
    assert api.get(f"/api/v1/projects/?department={department_a.slug}").status_code == 200  # read by the view


def test_an_object_refuses_them_too_and_a_cancel_with_one_cancels_nothing(
    api, member_a, department_a, demo_inventory
):
    job = Job.objects.create(department=department_a, name="alpha-wait", gpus=4, submitted_by=member_a)
    assert api.get(f"/api/v1/jobs/{job.pk}/").status_code == 200
    assert api.get(f"/api/v1/jobs/{job.pk}/?expand=events").status_code == 400
    response = api.post(f"/api/v1/jobs/{job.pk}/cancel/?force=1")
    assert response.status_code == 400 and "force" in response.json()
    job.refresh_from_db()
    assert job.state == "pending"  # nothing written
    assert api.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 200


# What the jobs list reads: its filters, `sort`, both ways of paging, `format`.
JOBS_READ = {"name", "department", "project", "state", "backend", "priority_class", "over_quota"}
JOBS_READ |= {"sort", "page", "page_size", "cursor", "format"}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(alphabet=st.characters(exclude_categories=("Cs",)), min_size=1, max_size=200))
def test_any_name_the_jobs_list_does_not_read_is_a_400_naming_it(api, name):
    """Control characters, other scripts, huge names, `&` and `=` (encoded): each a 400 with the name (cut
    to 80 characters) as the only key."""
    assume(name not in JOBS_READ)
    response = api.get("/api/v1/jobs/?" + urllib.parse.urlencode({name: "x"}))
    assert response.status_code == 400
    if "\x00" in name:  # refused before any view reads it (portal.web.middleware: no NUL in an address)
        assert list(response.json()) == ["detail"]
    else:
        assert list(response.json()) == [name[:80]]


@pytest.mark.parametrize("raw", ["%ED%A0%80=1", "%FF%FE=1", "a=1&" + "&".join(f"p{n}=1" for n in range(500))])
def test_undecodable_and_very_many_names_are_a_short_400(api, raw):
    response = api.get("/api/v1/jobs/?" + raw)
    assert response.status_code == 400
    assert len(response.json()) <= 10 and len(response.content) < 4000
