"""The GPUs' life in a real browser: the rack view switched to utilization (colours change, a legend, GPUs
with no data marked), a GPU page whose range picker brings older jobs in, and a job page with its logs and
"resubmit". Screenshots at desktop and phone width (390 px) through the `shots` fixture."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from core.access import Role
from inventory.demo import seed_datacenter
from inventory.models import ComputeTray, Gpu
from scheduling.models import Job
from tenancy.activity import record_samples
from tenancy.telemetry import Sample
from tests.e2e.browser import sign_in
from tests.factories import make_department, make_job, make_member, make_user

PASSWORD = "e2e-gpu-life-password-1"


@pytest.fixture
def fleet(transactional_db):
    seed_datacenter(racks=2)
    department = make_department("Vision", guaranteed_gpus=16)
    make_user("e2e-admin", staff=True, password=PASSWORD)
    member = make_member("e2e-member", department, Role.MEMBER, password=PASSWORD)
    gpus = list(Gpu.objects.filter(tray__rack__name="gb-r01").order_by("tray__slot", "index"))
    # The first tray busy, the second idle, the rest of the rack reports nothing (no data).
    record_samples(
        [Sample(gpu.uuid, "", gpu.index, 92.0) for gpu in gpus[:4]]
        + [Sample(gpu.uuid, "", gpu.index, 1.0) for gpu in gpus[4:8]]
    )
    tray = ComputeTray.objects.get(hostname="gb-r02-t04")
    now = timezone.now()
    old = make_job(
        department,
        "vision-sweep",
        state="completed",
        trays=[tray],
        started_at=now - timedelta(days=3),
        finished_at=now - timedelta(days=2, hours=20),
        exit_code=0,
        submitted_by=member,
    )
    return {
        "department": department,
        "member": member,
        "busy": gpus[0],
        "idle": gpus[4],
        "quiet": gpus[8],
        "tray": tray,
        "old": old,
    }


def background(page, uuid):
    return page.locator(f'button.gpu[data-gpu-uuid="{uuid}"]').evaluate(
        "el => getComputedStyle(el).backgroundColor"
    )


@pytest.mark.e2e
def test_rack_view_colours_by_utilization(live_server, page, fleet, shots):
    sign_in(page, live_server, "e2e-admin", PASSWORD)
    page.goto(f"{live_server.url}/inventory/racks/gb-r01/")
    busy, idle, quiet = fleet["busy"].uuid, fleet["idle"].uuid, fleet["quiet"].uuid
    expect(page.locator("ol.rack-grid")).to_have_class(re.compile(r"\bcolour-by-partition\b"))
    before = {uuid: background(page, uuid) for uuid in (busy, idle, quiet)}
    assert len(set(before.values())) == 1  # by partition: one partition, one look

    page.get_by_role("link", name="Utilization", exact=True).click()
    expect(page).to_have_url(re.compile(r"\?colour=utilization$"))
    expect(page.locator("ol.rack-grid")).to_have_class(re.compile(r"\bcolour-by-utilization\b"))
    after = {uuid: background(page, uuid) for uuid in (busy, idle, quiet)}
    assert after[busy] != before[busy] and after[idle] != after[busy]
    assert len(set(after.values())) == 3  # busy, idle and no data all look different
    expect(page.locator(f'button.gpu[data-gpu-uuid="{busy}"] .gpu-util')).to_have_text("92 %")
    expect(page.locator(f'button.gpu[data-gpu-uuid="{quiet}"] .gpu-util')).to_have_text(
        "no data", use_inner_text=True
    )
    legend = page.locator(".util-legend")
    expect(legend.locator('[data-band="4"]')).to_contain_text("(4)")
    expect(legend.locator('[data-band="0"]')).to_contain_text("(4)")
    expect(legend.locator('[data-band="none"]')).to_contain_text("(64)")
    page.screenshot(path=str(shots / "rack-utilization-desktop.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    expect(page.locator(f'button.gpu[data-gpu-uuid="{busy}"]')).to_be_visible()
    page.screenshot(path=str(shots / "rack-utilization-390.png"), full_page=True)

    page.set_viewport_size({"width": 1400, "height": 1000})
    page.locator(".colour-by").get_by_role("link", name="Health", exact=True).click()
    expect(page.locator("ol.rack-grid")).to_have_class(re.compile(r"\bcolour-by-health\b"))
    expect(page.locator(".health-legend")).to_contain_text("Unhealthy")


@pytest.mark.e2e
def test_gpu_page_range_brings_older_jobs(live_server, page, fleet, shots):
    sign_in(page, live_server, "e2e-member", PASSWORD)
    gpu = fleet["tray"].gpus.get(index=1)
    page.goto(f"{live_server.url}/inventory/gpus/{gpu.pk}/")
    panel = page.locator(f"#held-jobs-gpu-{gpu.pk}")
    expect(panel).to_contain_text("No job you may see ran here in the last 24 hours")
    panel.get_by_role("link", name="7 days").click()
    expect(panel).to_have_attribute("data-range", "7d")
    row = panel.locator(f'tr[data-job="{fleet["old"].pk}"]')
    expect(row).to_contain_text("vision-sweep")
    expect(row).to_contain_text("Completed")
    page.screenshot(path=str(shots / "gpu-life-desktop.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(shots / "gpu-life-390.png"), full_page=True)
    row.get_by_role("link").click()
    expect(page).to_have_url(re.compile(rf"/scheduling/jobs/{fleet['old'].pk}/$"))


@pytest.mark.e2e
def test_job_page_shows_logs_and_resubmits(live_server, page, fleet, shots):
    from integrations.dispatch import dispatch

    job = make_job(
        fleet["department"],
        "vision-train",
        state="starting",
        trays=["gb-r02-t06"],
        submitted_by=fleet["member"],
        work={"script": "#!/bin/bash\necho '<script>alert(1)</script>'\nsrun python train.py\n"},
    )
    assert dispatch(job.pk) == "submitted"
    console = []
    page.on("console", lambda message: console.append(message.text))
    sign_in(page, live_server, "e2e-member", PASSWORD)
    page.goto(f"{live_server.url}/scheduling/jobs/{job.pk}/")
    logs = page.locator("#job-logs")
    expect(logs).to_contain_text("the embedded backend")
    pre = logs.locator("pre.log")
    expect(pre).to_contain_text("<script>alert(1)</script>")  # shown as text, never run
    expect(pre).to_contain_text("srun python train.py")
    expect(logs.get_by_role("link", name="Download all")).to_have_attribute(
        "href", f"/scheduling/jobs/{job.pk}/logs/?download=1"
    )
    page.screenshot(path=str(shots / "job-logs-desktop.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(shots / "job-logs-390.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 1000})

    page.get_by_role("link", name="Resubmit").click()
    expect(page.locator("h1")).to_contain_text(f"Resubmit job #{job.pk}")
    page.screenshot(path=str(shots / "job-resubmit-desktop.png"), full_page=True)
    with page.expect_navigation():
        page.get_by_role("button", name="Resubmit").click()
    new = Job.objects.exclude(pk__in=[job.pk, fleet["old"].pk]).get()
    expect(page).to_have_url(re.compile(rf"/scheduling/jobs/{new.pk}/$"))
    expect(page.locator(".messages, .message").first).to_contain_text(
        f"submitted with the spec of job #{job.pk}"
    )
    assert (new.name, new.work, new.submitted_by) == (job.name, job.work, fleet["member"])
    assert not [text for text in console if "Content Security Policy" in text or "Refused" in text], console
