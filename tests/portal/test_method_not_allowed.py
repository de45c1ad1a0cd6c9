"""A GET on a POST-only address (a link followed, an address typed: /tenancy/departments/research/projects/5/
delete/) answers with the portal's page, status 405 (found by a walkthrough, issue 31: Django's empty 405 made
Chromium show its own error page). The API's 405 stays DRF's JSON."""

import pytest

from tests.i18n_check import english_left

pytestmark = pytest.mark.django_db

POST_ONLY = "/tenancy/departments/research/projects/5/delete/"


@pytest.mark.parametrize("debug", [False, True])
def test_a_get_on_a_post_only_address_is_the_portals_405_page(client_as, platform_admin, settings, debug):
    settings.DEBUG = debug
    client = client_as(platform_admin)
    response = client.get(POST_ONLY, headers={"Referer": "http://testserver/tenancy/departments/research/"})
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    page = response.content.decode()
    assert "<nav" in page and "portal.css" in page  # the menu and the portal's style
    assert "is an action a button sends" in page and POST_ONLY in page and "nothing was changed" in page
    back = '<a href="http://testserver/tenancy/departments/research/">Back to the previous page'
    assert back in page
    assert 'href="/"' in page


def test_a_link_back_only_to_this_site(client_as, platform_admin):
    response = client_as(platform_admin).get(POST_ONLY, headers={"Referer": "https://elsewhere.example/x"})
    assert response.status_code == 405 and "elsewhere.example" not in response.content.decode()


def test_the_405_page_reads_in_japanese(client_as, platform_admin):
    response = client_as(platform_admin).get(POST_ONLY, HTTP_ACCEPT_LANGUAGE="ja")
    assert response.status_code == 405
    page = response.content.decode()
    assert not english_left(page), english_left(page)


def test_the_apis_405_stays_json(api_as, platform_admin):
    response = api_as(platform_admin).delete("/api/v1/racks/")
    assert response.status_code == 405
    assert response["Content-Type"].startswith("application/json") and "detail" in response.json()
