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
