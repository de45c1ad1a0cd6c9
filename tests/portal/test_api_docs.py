"""The OpenAPI schema and the Swagger UI, served entirely by the portal (no CDN)."""

import re
from html.parser import HTMLParser

import pytest
import yaml
from django.conf import settings
from django.contrib.staticfiles import finders
from django.core.management import call_command

pytestmark = pytest.mark.django_db


class AssetCollector(HTMLParser):
    """Every URL the page makes the browser load: script src and link href (stylesheet, icon)."""

    def __init__(self):
        super().__init__()
        self.scripts: list[str] = []
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script" and attrs.get("src"):
            self.scripts.append(attrs["src"])
        if tag == "link" and attrs.get("href"):
            self.links.append(attrs["href"])


def test_schema_and_docs_need_a_login(client):
    for url in ["/api/schema/", "/api/docs/"]:
        response = client.get(url)
        assert response.status_code in (401, 403), url
        assert "Location" not in response, url


@pytest.mark.slow(reason="generates the whole OpenAPI schema")
def test_schema_is_served_and_describes_the_inventory_api(user_client):
    response = user_client.get("/api/schema/")
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    assert schema["openapi"].startswith("3.")
    for path in ["/api/v1/racks/", "/api/v1/racks/{name}/", "/api/v1/trays/", "/api/v1/gpus/{id}/"]:
        assert path in schema["paths"], path
    gpu_params = {p["name"] for p in schema["paths"]["/api/v1/gpus/"]["get"]["parameters"]}
    assert {"rack", "health", "clique_id", "page", "page_size"} <= gpu_params
    gpu = schema["components"]["schemas"]["Gpu"]["properties"]
    assert gpu["drift"]["type"] == "boolean"
    assert gpu["intended_clique_id"]["type"] == "integer"
    rack = schema["components"]["schemas"]["Rack"]["properties"]
    assert all(rack[name]["type"] == "integer" for name in ["trays", "gpus", "healthy_gpus", "partitions"])
    assert {"tokenAuth", "cookieAuth"} <= set(schema["components"]["securitySchemes"])


@pytest.mark.slow(reason="generates the whole OpenAPI schema")
def test_schema_generates_valid_without_warnings(tmp_path):
    # Same as `manage.py spectacular --validate --fail-on-warn`: a warning or an invalid schema raises.
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yml"))
    assert "/api/v1/partitions/" in (tmp_path / "schema.yml").read_text()


def test_swagger_ui_is_served_from_the_portal_without_a_cdn(user_client):
    response = user_client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert '<div id="swagger-ui">' in html

    page = AssetCollector()
    page.feed(html)
    assets = page.scripts + page.links
    assert len(page.scripts) >= 2  # the swagger-ui bundle and standalone preset
    assert any(href.endswith(".css") for href in page.links)
    for url in assets:
        assert not url.startswith(("http://", "https://", "//")), url
        if url.startswith("/api/docs/?script"):
            continue  # the UI's setup script, served by the portal instead of inline (CSP); checked below
        assert url.startswith(settings.STATIC_URL), url

        # Found by the staticfiles finders (the drf-spectacular-sidecar app) ...
        assert finders.find(url.removeprefix(settings.STATIC_URL)), url
        # ... and actually served by the portal.
        served = user_client.get(url)
        assert served.status_code == 200, url
        body = b"".join(served.streaming_content) if served.streaming else served.content
        assert body, url

    # No inline script; the setup script the page loads points the UI at the portal's own schema.
    assert "/api/docs/?script=" in page.scripts
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html)
    setup = user_client.get("/api/docs/?script=")
    assert setup.status_code == 200
    assert "/api/schema/" in setup.content.decode()
