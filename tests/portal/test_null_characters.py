"""A NUL (`%00`) in a URL is a 400 before any view runs (found by an outside test in production mode).

On PostgreSQL, GET /api/v1/racks/gb%00/, /api/v1/departments/<slug>/members/bob%00/ and
/api/v1/projects/?department=a%00 answered 500: the view looked the value up and PostgreSQL's text cannot
hold U+0000 (psycopg DataError). SQLite takes it, so the suite never saw it. portal.web.middleware
.NullCharacterMiddleware now refuses a NUL anywhere in the path or the query string, for the API (JSON) and
the pages alike, before a lookup can reach the database.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.slow(reason="5 cases, each a full request through the stack")
@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/racks/gb-r01%00/",
        "/api/v1/departments/alpha/members/member-a%00/",
        "/api/v1/projects/?department=alpha%00",
        "/api/v1/jobs/?search=train%00",
        "/api/v1/jobs/?x%00=1",
    ],
)
def test_a_nul_in_an_api_address_is_a_400_saying_so(api_as, member_a, lead_a, url):
    response = api_as(lead_a).get(url)
    assert response.status_code == 400, response.content
    assert "NUL" in response.json()["detail"]


def test_a_nul_in_a_page_address_is_a_400(client_as, lead_a):
    response = client_as(lead_a).get("/tenancy/departments/alpha%00/")
    assert response.status_code == 400
    assert b"NUL" in response.content


def test_a_nul_in_a_write_is_refused_before_the_view(api_as, lead_a, member_a):
    response = api_as(lead_a).delete("/api/v1/departments/alpha/members/member-a%00/")
    assert response.status_code == 400
    assert member_a.memberships.exists()


def test_ordinary_addresses_are_untouched(api_as, member_a):
    assert api_as(member_a).get("/api/v1/projects/?department=alpha").status_code == 200


@pytest.mark.parametrize("debug", [True, False])
def test_an_address_with_too_many_query_parameters_is_a_400_with_debug_on_or_off(
    client_as, api_as, admin_user, settings, debug
):
    """Found by an outside test on `make run`: 5,000 `slots=1` on a wizard page answered 500 with DEBUG on
    (Django's technical error page reads the query again and fails); 400 in production."""
    settings.DEBUG = debug
    query = "&".join(["slots=1"] * (settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1))
    page = client_as(admin_user).get(f"/inventory/racks/gb-r01/plan/?preset=custom&{query}")
    assert page.status_code == 400 and b"more than 1000 query parameters" in page.content
    api = api_as(admin_user).get(f"/api/v1/jobs/?{query}")
    assert api.status_code == 400 and "more than 1000 query parameters" in api.json()["detail"]
