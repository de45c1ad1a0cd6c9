"""A department lead in a real browser: the quota chart renders (plotly.min.js is served by the portal and
runs), the idle GPUs are listed with their jobs, and adding a member refreshes the members table in place."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from core.access import Role
from inventory.demo import seed_datacenter
from tenancy.models import GpuActivity, Membership, QuotaSnapshot
from tests.e2e.browser import arrived, sign_in
from tests.factories import healthy_gpus, make_department, make_member, make_user, run_job

PASSWORD = "e2e-lead-password-1"


@pytest.fixture
def research(transactional_db):
    seed_datacenter(racks=3)
    department = make_department("Research", guaranteed_gpus=16)
    lead = make_member("e2e-lead", department, Role.LEAD, password=PASSWORD)  # signs in through the form
    make_user("e2e-newcomer")

    gpus = healthy_gpus(8)
    run_job(department, gpus, "research-pretrain-0001")
    now = timezone.now()
    GpuActivity.objects.bulk_create(
        [
            GpuActivity(gpu=gpu, utilization=0.8, sampled_at=now, low_since=now - timedelta(hours=2))
            for gpu in gpus[:4]
        ]
        + [GpuActivity(gpu=gpu, utilization=91.0, sampled_at=now) for gpu in gpus[4:]]
    )
    start = now.replace(second=0, microsecond=0)
    QuotaSnapshot.objects.bulk_create(
        QuotaSnapshot(
            department=department,
            taken_at=start - timedelta(minutes=5 * step),
            guaranteed=16,
            in_use=8 + step % 12,
            in_quota=min(16, 8 + step % 12),
            borrowed=max(0, 8 + step % 12 - 16),
            fair_share=20,
            pending_demand=0,
            idle=4,
        )
        for step in range(48)
    )
    return {"department": department, "lead": lead, "idle": gpus[:4]}


@pytest.mark.e2e
def test_lead_sees_the_chart_and_idle_gpus_and_adds_a_member(live_server, page, research):
    sign_in(page, live_server, "e2e-lead", PASSWORD)
    expect(page).not_to_have_url(re.compile(r"/login/"))

    page.get_by_role("link", name="Departments").click()
    page.locator("a.dept-link", has_text="Research").click()
    arrived(page, re.compile(r"/tenancy/departments/research/$"))

    # The quota chart: plotly.min.js came from the portal and drew the figure.
    chart = page.locator("#quota-chart")
    expect(chart).to_have_class(re.compile(r"\bjs-plotly-plot\b"))
    expect(chart.locator(".main-svg").first).to_be_visible()
    expect(chart.locator(".legendtext", has_text="Fair share")).to_be_visible()
    assert page.evaluate("typeof window.Plotly") == "object"

    # The idle GPUs, each with the job holding it.
    idle_rows = page.locator("table.idle tbody tr")
    expect(idle_rows).to_have_count(4)
    for gpu in research["idle"]:
        row = page.locator(f'table.idle tr[data-gpu-uuid="{gpu.uuid}"]')
        expect(row).to_contain_text("research-pretrain-0001")
        expect(row).to_contain_text(gpu.tray.hostname)

    # Add a member: the members table refreshes in place (htmx), no page load.
    page.evaluate("window.__same_page = true")
    page.fill("#id_member_username", "e2e-newcomer")
    page.select_option("#id_member_role", "member")
    page.get_by_role("button", name="Add member").click()
    new_row = page.locator('#members tr[data-username="e2e-newcomer"]')
    expect(new_row).to_be_visible()
    expect(new_row.locator("select")).to_have_value("member")
    assert page.evaluate("window.__same_page === true"), "adding a member reloaded the whole page"
    assert Membership.objects.get(user__username="e2e-newcomer").department == research["department"]

    # A typo is answered in plain words, in place.
    page.fill("#id_member_username", "e2e-nobody")
    page.get_by_role("button", name="Add member").click()
    expect(page.locator("#members .field-error")).to_have_text(
        "no user named 'e2e-nobody' can be added to Research: "
        "leads add active accounts that are not platform admins"
    )
