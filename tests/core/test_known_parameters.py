"""A query parameter an API operation does not read is a 400 naming it before the view runs
(core.filters.unknown_parameters, portal.web.middleware.KnownQueryParameters), not "no filter" and the whole
list, nor a write done as if it had been read: a member's `?submited_by=` typo, a parameter in the wrong case,
a list's filter on one object or a cancel, `?dry_run=1` on a create. What the operations do read still works:
a list's filters (a range's two ends, not its bare name), `sort`, both ways of paging, `format`, and a
parameter a view reads itself."""

import urllib.parse

import pytest
from django.urls import resolve
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from core.filters import operation_parameters
from scheduling.models import Job
from tests.factories import make_job, token_client

pytestmark = pytest.mark.django_db

# What the jobs list reads: its filters, `sort`, both ways of paging, `format`.
JOBS_READ = {"name", "department", "project", "state", "backend", "priority_class", "over_quota"}
JOBS_READ |= {"sort", "page", "page_size", "format"}


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
    unknown = [pair.split("=")[0] for pair in query.split("&") if pair.split("=")[0] != "department"]
    body = response.json()
    assert sorted(body) == sorted(unknown)
    assert "this operation reads:" in body[unknown[0]][0] and "state" in body[unknown[0]][0]
    assert "results" not in body


def test_what_the_operations_read_still_works(api, admin_client, department_a, demo_inventory):
    assert api.get("/api/v1/jobs/?state=running&sort=-created&page_size=5&format=json").status_code == 200
    assert api.get("/api/v1/jobs/?page=1&page_size=5").status_code == 200
    assert api.get("/api/v1/gpus/?rack=gb-r01&page_size=3").status_code == 200
    first = api.get("/api/v1/gpus/?page_size=3").json()
    assert api.get(first["next"]).status_code == 200  # the cursor it gave
    dated = "/api/v1/audit-events/?date_after=2026-01-01&date_before=2026-12-31"
    assert admin_client.get(dated).status_code == 200
    assert api.get(f"/api/v1/projects/?department={department_a.slug}").status_code == 200  # read by the view


def test_an_object_refuses_them_too_and_a_cancel_with_one_cancels_nothing(
    api, member_a, department_a, demo_inventory
):
    job = Job.objects.create(department=department_a, name="alpha-wait", gpus=4, submitted_by=member_a)
    assert api.get(f"/api/v1/jobs/{job.pk}/").status_code == 200
    assert api.get(f"/api/v1/jobs/{job.pk}/?format=json").status_code == 200
    # A list's filters and paging are not an object's: refused, not read.
    for query in ("expand=events", "page_size=0&page=abc", "state=running", "sort=name"):
        assert api.get(f"/api/v1/jobs/{job.pk}/?{query}").status_code == 400, query
    for query in ("force=1", "state=running", "page_size=0"):
        response = api.post(f"/api/v1/jobs/{job.pk}/cancel/?{query}")
        assert response.status_code == 400 and query.split("=")[0] in response.json(), query
    job.refresh_from_db()
    assert job.state == "pending"  # nothing written
    assert api.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 200


def test_a_create_or_another_write_with_one_writes_nothing(api, member_a, department_a, demo_inventory):
    jobs = Job.objects.count()
    body = {"department": department_a.slug, "name": "alpha-dry", "gpus": 1}
    response = api.post("/api/v1/jobs/?dry_run=1", body, format="json")
    assert response.status_code == 400 and list(response.json()) == ["dry_run"]
    assert Job.objects.count() == jobs
    assert api.post("/api/v1/tokens/rotate/?dry_run=1").status_code == 400
    assert api.get("/api/v1/jobs/").status_code == 200  # the token was not rotated
    assert api.get("/api/v1/?x=1").status_code == 400


def test_a_ranges_bare_name_is_not_a_filter(admin_client):
    """`date` is read as `date_after` and `date_before` only: `?date=garbage` was the whole list."""
    assert admin_client.get("/api/v1/audit-events/?date_after=2026-01-01").status_code == 200
    response = admin_client.get("/api/v1/audit-events/?date=garbage")
    assert response.status_code == 400 and "date_after" in response.json()["date"][0]


def test_very_many_unknown_names_say_how_many_were_left_out(api):
    response = api.get("/api/v1/jobs/?" + "&".join(f"p{n:02d}=1" for n in range(30)))
    assert response.status_code == 400
    body = response.json()
    assert len(body) == 11 and "20 more" in body["detail"][0]


def test_an_operation_reads_only_what_it_declares():
    """The jobs list reads its filters, sort and paging; its object, its cancel and a create only `format`."""
    listing = resolve("/api/v1/jobs/").func
    one = resolve("/api/v1/jobs/1/").func
    assert operation_parameters(listing, "GET") == frozenset(JOBS_READ)
    assert operation_parameters(listing, "HEAD") == frozenset(JOBS_READ)
    assert operation_parameters(listing, "POST") == frozenset({"format"})
    assert operation_parameters(one, "GET") == frozenset({"format"})
    assert operation_parameters(resolve("/api/v1/projects/").func, "GET") >= {"department", "page"}


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
    assert len(response.json()) <= 11 and len(response.content) < 4000


def test_a_caller_without_credentials_gets_the_401_not_the_parameter_list(client, api):
    """No session and no Authorization header: the view's 401, which tells nothing of what it reads."""
    response = client.get("/api/v1/jobs/?submited_by=carol")
    assert response.status_code == 401
    assert "state" not in response.content.decode()
    assert api.get("/api/v1/jobs/?x=1").status_code == 400  # a token: told


@pytest.mark.parametrize(
    "path", ["/api/v1/jobs/?format=csv", "/api/v1/gpus/?format=yaml", "/api/v1/racks/?format=CSV"]
)
def test_a_format_the_operation_does_not_render_is_a_406_naming_its_formats(api, department_a, path):
    # DRF answered 404, as if there were no jobs or no such list.
    response = api.get(path)
    assert response.status_code == 406
    assert response["Content-Type"] == "application/json"
    detail = response.json()["detail"]
    assert "json" in detail and "api" in detail and path.rsplit("=", 1)[1] in detail


def test_a_suffix_in_the_path_names_no_resource(api, department_a):
    # `/jobs/0.5/` matched the job route as job 0 in format '5': it stays a 404 (the schema's fuzzer found a
    # 406 there), as a path naming nothing should.
    job = make_job(department_a, "suffixed")
    assert api.get(f"/api/v1/jobs/{job.pk}.5/").status_code == 404
    assert api.get(f"/api/v1/jobs/{job.pk}.json").status_code == 200
