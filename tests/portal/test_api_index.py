"""`/api/` itself (portal.api.index): a person who types it into a browser is sent to the API documentation
(the Swagger UI, through the sign-in page when signed out) instead of reading `{"detail": "Not found."}`; a
REST client gets a JSON index of the API's addresses, with the authentication every API answer asks for.
Other unknown /api/ addresses: tests/portal/test_error_pages.py."""

import pytest

from tests.factories import token_client

pytestmark = pytest.mark.django_db

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
CLIENTS = [None, "*/*", "application/json"]  # no Accept (requests' default is */*), curl, a REST client


@pytest.mark.parametrize("path", ["/api/", "/api"])
def test_a_browser_is_sent_to_the_api_documentation(client_as, member_a, path):
    response = client_as("member_a").get(path, headers={"accept": BROWSER})
    assert response.status_code == 302
    assert response["Location"] == "/api/docs/"
    assert "Accept" in response["Vary"]
    docs = client_as("member_a").get(response["Location"], headers={"accept": BROWSER})
    assert docs.status_code == 200 and "swagger" in docs.content.decode().lower()


@pytest.mark.parametrize("path", ["/api/", "/api"])
def test_a_signed_out_browser_signs_in_first(client, path):
    response = client.get(path, headers={"accept": BROWSER})
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/api/docs/"


@pytest.mark.parametrize("accept", CLIENTS)
@pytest.mark.parametrize("path", ["/api/", "/api"])
def test_a_rest_client_gets_the_apis_addresses(member_a, path, accept):
    client = token_client(member_a)
    response = client.get(path, **({"HTTP_ACCEPT": accept} if accept else {}))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    index = response.json()
    assert index == {
        "v1": "http://testserver/api/v1/",
        "schema": "http://testserver/api/schema/",
        "docs": "http://testserver/api/docs/",
    }
    assert client.get(index["v1"]).status_code == 200  # each address answers the same client


@pytest.mark.parametrize("accept", CLIENTS)
def test_an_anonymous_rest_client_gets_401_in_json(api_client, accept):
    response = api_client.get("/api/", **({"HTTP_ACCEPT": accept} if accept else {}))
    assert response.status_code == 401
    assert response.json() == {"detail": "Authentication credentials were not provided."}
    assert response["WWW-Authenticate"].startswith("Token")


def test_it_reads_only(member_a):
    response = token_client(member_a).post("/api/", {}, format="json")
    assert response.status_code == 405
    assert response.json() == {"detail": 'Method "POST" not allowed.'}
