"""A department lead in a real browser creates a project and moves a member into it from another project:
the projects panel refreshes in place (htmx), the database and the audit log agree, and the page breaks no
content security rule."""

import re

import pytest
from playwright.sync_api import expect

from core.access import Role
from core.models import AuditEvent
from inventory.demo import seed_datacenter
from tenancy.models import Project, ProjectMembership
from tests.e2e.browser import sign_in
from tests.factories import make_department, make_member

PASSWORD = "e2e-lead-password-1"


@pytest.fixture
def research(transactional_db):
    seed_datacenter(racks=1)
    department = make_department("Research", guaranteed_gpus=32)
    lead = make_member("e2e-lead", department, Role.LEAD, password=PASSWORD)
    member = make_member("e2e-member", department)
    vision = Project.objects.create(department=department, name="Vision", slug="vision", guaranteed_gpus=16)
    ProjectMembership.objects.create(user=member, project=vision)
    return {"department": department, "lead": lead, "member": member, "vision": vision}


@pytest.mark.e2e
def test_a_lead_creates_a_project_and_moves_a_member_into_it(live_server, page, research, shots):
    violations = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    sign_in(page, live_server, "e2e-lead", PASSWORD)
    expect(page).not_to_have_url(re.compile(r"/login/"))
    page.goto(f"{live_server.url}/tenancy/departments/research/")

    panel = page.locator("#projects")
    # One project (vision), the default project (with the work without a project), and the totals.
    expect(panel.locator("tr[data-project]")).to_have_count(3)
    expect(panel.locator('tr[data-project="default"]')).to_contain_text("Default")
    expect(panel.locator('tr[data-project="department-total"]')).to_be_visible()

    # Too large a guarantee: told in words, nothing made.
    form = panel.locator("form.add-project")
    form.get_by_label("Name").fill("Speech")
    form.get_by_label("Guaranteed GPUs").fill("20")
    form.get_by_role("button", name="Create project").click()
    expect(page.locator("#projects .field-error")).to_contain_text("at most 16 for this project")
    assert not Project.objects.filter(slug="speech").exists()

    form = page.locator("#projects form.add-project")
    form.get_by_label("Guaranteed GPUs").fill("8")
    form.get_by_role("button", name="Create project").click()
    speech_row = page.locator('#projects tr[data-project="speech"]')
    expect(speech_row).to_be_visible()
    expect(speech_row.locator('[data-figure="guaranteed"]')).to_have_text("8")
    page.screenshot(path=str(shots / "projects-created.png"), full_page=True)

    # Move the member from Vision to Speech.
    person = page.locator('#projects tr[data-project="vision"] li[data-username="e2e-member"]')
    person.get_by_label("Move e2e-member to").select_option(label="Speech")
    person.get_by_role("button", name="Move").click()
    # Confirmed first: the page says where their jobs stay and where their next jobs go.
    expect(page.locator('[data-confirm="move"]')).to_contain_text("Their next jobs go to Speech")
    page.screenshot(path=str(shots / "projects-member-move-confirm.png"), full_page=True)
    page.get_by_role("button", name="Move them").click()
    expect(page.locator('#projects tr[data-project="speech"] li[data-username="e2e-member"]')).to_be_visible()
    expect(page.locator('#projects tr[data-project="vision"] li[data-username="e2e-member"]')).to_have_count(
        0
    )
    page.screenshot(path=str(shots / "projects-member-moved.png"), full_page=True)

    speech = Project.objects.get(slug="speech")
    assert ProjectMembership.objects.get(user=research["member"]).project == speech
    assert AuditEvent.objects.filter(
        object_type="tenancy.project", action="create", actor=research["lead"]
    ).exists()
    moved = AuditEvent.objects.get(object_type="tenancy.projectmembership", action="update")
    assert moved.actor == research["lead"] and moved.after["project"] == speech.pk
    assert violations == []
