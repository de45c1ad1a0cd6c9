"""The portal's own pages satisfy its Content-Security-Policy in a real browser: Chromium reports every
violation on the console ("Refused to execute inline script ...", "Refused to apply inline style ..."), and
none appears while a platform admin goes through every section, the charts, an htmx panel, the API docs,
the Django admin and the error pages."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from inventory.demo import seed_datacenter
from tenancy.models import Department, QuotaSnapshot
from tenancy.services import save_department
from tests.e2e.browser import arrived, sign_in

PASSWORD = "e2e-admin-password-1"
PAGES = [
    "/",
    "/inventory/racks/",
    "/tenancy/departments/",
    "/tenancy/departments/research/",
    "/tenancy/dashboard/",
    "/scheduling/jobs/",
    "/audit/",
    "/inventory/health/",  # the health centre's chart
    "/inventory/fabric/",
    "/inventory/fabric/import/",
    "/api/docs/",
    "/admin/",
    "/nonexistent/",
]


@pytest.fixture
def fleet(transactional_db, django_user_model):
    seed_datacenter(racks=2)
    department = save_department(Department(name="Research", slug="research", guaranteed_gpus=16))
    now = timezone.now().replace(second=0, microsecond=0)
    QuotaSnapshot.objects.bulk_create(
        QuotaSnapshot(
            department=department,
            taken_at=now - timedelta(minutes=5 * step),
            guaranteed=16,
            in_use=8,
            in_quota=8,
            borrowed=0,
            fair_share=20,
            pending_demand=0,
            idle=0,
        )
        for step in range(12)
    )
    return django_user_model.objects.create_superuser("e2e-root", "root@example.com", PASSWORD)


@pytest.mark.e2e
def test_no_page_breaks_the_content_security_policy(live_server, page, fleet):
    problems = []
    page.on(
        "console",
        lambda message: (
            problems.append(f"{page.url}: {message.text}")
            if "Content Security Policy" in message.text or "Content-Security-Policy" in message.text
            else None
        ),
    )
    page.on("pageerror", lambda error: problems.append(f"{page.url}: {error}"))

    sign_in(page, live_server, "e2e-root", PASSWORD)
    expect(page.locator("nav[aria-label=Main]")).to_be_visible()

    for path in PAGES:
        response = page.goto(f"{live_server.url}{path}")
        assert response.headers.get("content-security-policy"), path
        page.wait_for_load_state("networkidle")

    # The charts are drawn by static/js/portal.js from their JSON (no inline script).
    page.goto(f"{live_server.url}/tenancy/departments/research/")
    expect(page.locator("#quota-chart .main-svg").first).to_be_visible()
    # Swagger UI starts from its separately served setup script.
    page.goto(f"{live_server.url}/api/docs/")
    expect(page.locator(".swagger-ui .info").first).to_be_visible()
    # An htmx panel: a tray's detail swapped into the rack page.
    page.goto(f"{live_server.url}/inventory/racks/")
    page.locator("table a.rack-link").first.click()
    arrived(page, re.compile(r"/inventory/racks/[^/?]+/$"))
    page.locator("button.tray").first.click()
    expect(page.locator("aside#detail")).not_to_be_empty()
    page.wait_for_load_state("networkidle")

    assert problems == [], "\n".join(problems)
