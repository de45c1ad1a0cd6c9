"""Error pages in production mode (DEBUG off): 404, 403 and 500 render, styled, for everyone; JSON in /api/
for API clients, the styled page there for a browser that asks for a page.

DEBUG on shows Django's technical 500 instead, which is how a 500 on every unknown URL once went unseen; a 404
is the portal's page there too (portal.web.middleware.DevErrorPages).
"""

import pytest
from django.core.exceptions import PermissionDenied
from django.template.loader import render_to_string
from django.test import RequestFactory, override_settings
from django.urls import path

from portal import urls as portal_urls

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("production_mode")]

UNKNOWN_PAGES = ["/nonexistent/", "/static/nope.css", "/scheduling/jobs/999999/nope/"]
UNKNOWN_API = ["/api/v1/nope/", "/api/nope/", "/api/v1/racks/gb-r01/nope/", "/api/v2/"]
BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"  # what a browser asks for
API_CLIENTS = ["*/*", "application/json", "application/json, text/html"]  # curl, a REST client, either
STYLESHEET = '<link rel="stylesheet" href="/static/css/portal.css">'


def explode(request):
    raise RuntimeError("a bug in a view")


def forbid(request):
    raise PermissionDenied("Only the night shift may reboot racks.")


# A test-only URL configuration: the portal's URLs and error handlers, plus views that fail on purpose.
urlpatterns = [
    path("boom/", explode),
    path("api/v1/boom/", explode),
    path("forbidden/", forbid),
    path("api/v1/forbidden/", forbid),
    *portal_urls.urlpatterns,
]
handler400 = portal_urls.handler400
handler403 = portal_urls.handler403
handler404 = portal_urls.handler404
handler500 = portal_urls.handler500


@pytest.fixture
def production_mode(settings):
    settings.DEBUG = False


@pytest.fixture(params=["anonymous", "member_a", "platform_admin"])
def visitor(request, client):
    """The test client, anonymous or signed in as a department member or a platform admin."""
    if request.param != "anonymous":
        client.force_login(request.getfixturevalue(request.param))
    return client


def assert_html_error(response, status: int, heading: str):
    assert response.status_code == status
    assert response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert f"<h1>{heading}</h1>" in html
    assert STYLESHEET in html
    assert "Content-Security-Policy" in response.headers
    return html


@pytest.mark.slow(reason="9 cases, each a full request through the stack")
@pytest.mark.parametrize("url", UNKNOWN_PAGES)
def test_unknown_pages_are_a_styled_404_for_everyone(visitor, url):
    html = assert_html_error(visitor.get(url), 404, "Not found")
    assert f"<code>{url}</code>" in html


@pytest.mark.parametrize("url", UNKNOWN_API)
def test_unknown_api_urls_are_a_json_404_for_everyone(visitor, url):
    response = visitor.get(url)
    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}
    for accept in API_CLIENTS:
        response = visitor.get(url, headers={"accept": accept})
        assert response.status_code == 404 and response.json() == {"detail": "Not found."}, accept
        assert "Accept" in response["Vary"]


@pytest.mark.parametrize("url", UNKNOWN_API)
def test_unknown_api_urls_are_the_404_page_with_the_menu_for_a_browser(client, client_as, url):
    """A person who types an /api/... address that is not there reads the portal's 404 page, as for any other
    address (signed in: with the menu); the answer varies with Accept and says so."""
    response = client_as("member_a").get(url, headers={"accept": BROWSER})
    html = assert_html_error(response, 404, "Not found")
    assert f"<code>{url}</code>" in html
    assert '<nav aria-label="Main">' in html and 'href="/scheduling/jobs/"' in html
    assert "Accept" in response["Vary"]
    client.logout()
    assert_html_error(client.get(url, headers={"accept": BROWSER}), 404, "Not found")


@pytest.mark.parametrize("persona", ["member_a", "platform_admin"])
def test_a_missing_rack_is_a_styled_404(client_as, persona):
    assert_html_error(client_as(persona).get("/inventory/racks/no-such-rack/"), 404, "Not found")


def test_a_missing_rack_sends_an_anonymous_visitor_to_the_login_page(client):
    response = client.get("/inventory/racks/no-such-rack/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_the_404_page_escapes_the_path(client_as):
    html = assert_html_error(client_as("member_a").get("/<script>alert(1)</script>/"), 404, "Not found")
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_a_403_page_says_why(client_as):
    html = assert_html_error(client_as("member_a").get("/tenancy/dashboard/"), 403, "Not allowed")
    assert "Only platform admins may use" in html


@override_settings(ROOT_URLCONF=__name__)
def test_a_403_from_any_view_shows_its_reason(client_as):
    html = assert_html_error(client_as("member_a").get("/forbidden/"), 403, "Not allowed")
    assert "Only the night shift may reboot racks." in html


@override_settings(ROOT_URLCONF=__name__)
def test_a_403_under_the_api_is_json(client_as):
    response = client_as("member_a").get("/api/v1/forbidden/")
    assert response.status_code == 403
    assert response.json() == {"detail": "Only the night shift may reboot racks."}


def test_a_failed_csrf_check_is_the_403_page_with_what_to_do(client, member_a):
    client = type(client)(enforce_csrf_checks=True)
    client.force_login(member_a)
    html = assert_html_error(client.post("/logout/"), 403, "Not allowed")
    assert "security token was missing or out of date" in html


@override_settings(ROOT_URLCONF=__name__)
@pytest.mark.parametrize("persona", ["member_a", "platform_admin"])
def test_a_view_that_raises_is_the_500_page(client_as, persona):
    client = client_as(persona)
    client.raise_request_exception = False
    assert_html_error(client.get("/boom/"), 500, "Something went wrong")


@override_settings(ROOT_URLCONF=__name__)
def test_an_api_view_that_raises_is_a_json_500(client_as):
    client = client_as("member_a")
    client.raise_request_exception = False
    response = client.get("/api/v1/boom/")
    assert response.status_code == 500
    assert response.json() == {"detail": "Server error."}


def test_the_500_page_renders_with_no_context_at_all():
    # Django's own fallback path: the template with an empty context, no request.
    html = render_to_string("500.html")
    assert "<h1>Something went wrong</h1>" in html and STYLESHEET in html


def test_base_page_renders_for_a_signed_in_user_without_a_resolved_url(member_a):
    # An unknown URL has no resolver_match; the navigation used to fail on it.
    request = RequestFactory().get("/nonexistent/")
    request.user = member_a
    request.resolver_match = None
    html = render_to_string("base.html", request=request)
    assert 'aria-label="Main"' in html and 'aria-current="page"' not in html


def test_an_error_page_that_cannot_render_falls_back_to_plain_text(client, settings):
    settings.TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": []}]
    response = client.get("/nonexistent/")
    assert response.status_code == 404
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response.content == b"404: Not found."


def test_debug_mode_leaves_djangos_technical_error_pages_without_the_policy(client, settings):
    """`make run` (DEBUG on) shows the portal's 404, with the policy; Django's technical 404, asked for with
    ?technical=1, is styled inline: the policy would blank it. Every other answer keeps the policy, and with
    DEBUG off the error pages keep it too (assert_html_error)."""
    settings.DEBUG = True
    assert "Content-Security-Policy" in client.get("/nonexistent/").headers
    missing = client.get("/nonexistent/?technical=1")
    assert missing.status_code == 404
    assert "Content-Security-Policy" not in missing.headers
    login = client.get("/login/")
    assert login.status_code == 200
    assert "Content-Security-Policy" in login.headers


@pytest.mark.parametrize("debug", [False, True])
def test_a_404_and_a_403_show_the_menu_of_the_signed_in_person_in_production_and_development(
    client_as, settings, debug
):
    settings.DEBUG = debug  # `make run` serves with DEBUG on: the same pages, never the URL list
    client = client_as("member_a")
    for url, status, heading in (
        ("/no/such/page/", 404, "Not found"),
        ("/inventory/racks/no-such-rack/", 404, "Not found"),
        ("/tenancy/dashboard/", 403, "Not allowed"),
    ):
        html = assert_html_error(client.get(url), status, heading)
        assert '<nav aria-label="Main">' in html and 'href="/scheduling/jobs/"' in html, url
        assert "URL patterns" not in html and "DEBUG = True" not in html
    if debug:  # a developer may still ask for Django's page
        assert "URL patterns" in client.get("/no/such/page/?technical=1").content.decode()
