"""The portal tells the truth by itself, tried as people would on `make run`'s own stack:
scripts/run.sh in a fresh clone (web server, real Celery worker and beat, the demo's simulated fabric),
Chromium for the admin and the lead, the REST API for a member. Nothing but the stack acts between the
steps: the test only reads.

* An admin carves the free rack gb-r08 into 2x9 in the wizard: the rack shows clique drift while the fabric
  changes, and it clears by itself when the simulated nodes report their new cliques.
* A member's 9-tray `partition` job submitted meanwhile waits, naming the drifted trays, and starts by itself
  once they settle.
* Raising Research's guarantee turns its borrowed jobs in quota on the lead's page at the next pass.
* The lead's 24-hour quota chart ends within 5 minutes of now.
"""

import json
import re
import urllib.request
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from playwright.sync_api import expect

from tests.embedded_stack import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow(reason="the embedded make-run stack and a browser")]


@pytest.fixture
def stack(embedded_stack):
    return embedded_stack


def admin_login(stack) -> tuple[str, str]:
    line = (stack.clone / "var" / "admin-credentials.txt").read_text()
    username, password = re.search(r"Admin login: (\S+) / (\S+)", line).groups()
    return username, password


def demo_password(stack) -> str:
    return (stack.clone / "var" / "demo-logins.txt").read_text().splitlines()[0].split(": ")[1]


def sign_in(page, stack, username: str, password: str) -> None:
    page.goto(f"http://{stack.address}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    with page.expect_navigation():
        page.locator("#id_password").press("Enter")
    expect(page.locator("body")).not_to_contain_text("Please enter a correct username")


def submit(stack, token: str, body: dict) -> dict:
    request = urllib.request.Request(
        f"http://{stack.address}/api/v1/jobs/",
        method="POST",
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        data=json.dumps(body).encode(),
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 201
        return json.load(response)


def test_a_recarved_rack_settles_by_itself_and_the_waiting_job_starts(stack, browser, shots):
    admin = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = admin.new_page()
    sign_in(page, stack, *admin_login(stack))
    page.goto(f"http://{stack.address}/inventory/racks/gb-r08/")
    expect(page.locator("body")).not_to_contain_text("with clique drift")
    with page.expect_navigation():
        page.get_by_role("link", name="Carve partitions").click()
    page.locator("#preset-2x9").check()
    expect(page.locator('li.plan-row[data-slot="10"]')).to_have_attribute("data-planned", "p2")
    with page.expect_navigation():
        page.get_by_role("button", name="Next: names").click()
    with page.expect_navigation():
        page.get_by_role("button", name="Next: preview").click()
    with page.expect_navigation():
        page.get_by_role("button", name="Apply plan").click()
    expect(page).to_have_url(re.compile(r"/inventory/plans/\d+/$"))

    # A member submits a one-partition job of 9 trays: gb-r08 is the only rack with that much free.
    job = submit(
        stack,
        stack.token("bob"),
        {
            "department": "research",
            "name": "train-after-recarve",
            "gpus": 36,
            "topology": "partition",
            "priority_class": "train",
            "backend": "slurm",
            "time_limit_minutes": 60,
            "work": {"script": "#!/bin/bash\nsrun hostname\n"},
        },
    )

    # While the fabric changes, the rack shows drift, and the job waits naming the trays.
    rack = admin.new_page()
    rack.goto(f"http://{stack.address}/inventory/racks/gb-r08/")
    expect(rack.locator(".chip-warn").filter(has_text="with clique drift")).to_be_visible()
    rack.screenshot(path=str(shots / "1-rack-drifting.png"), full_page=True)
    reason = wait_for(
        "the job waiting for the drifted trays",
        lambda: stack.query(
            "SELECT pending_reason FROM scheduling_job WHERE id = ? AND pending_reason LIKE ?",
            job["id"],
            "%gb-r08%another NVLink clique%",
        ),
        timeout=30,
    )
    print(f"pending reason: {reason[0][0]}")

    # The progress page follows the plan, then the nodes, until every GPU reports its new partition.
    progress = page.locator("#plan-progress")
    expect(progress).to_have_attribute("data-status", "applied", timeout=60_000)
    settled = page.locator("#node-reports")
    expect(settled).to_contain_text("Every node reports its new partition", timeout=90_000)
    expect(progress).to_have_attribute("data-done", "true")
    page.screenshot(path=str(shots / "2-plan-settled.png"), full_page=True)
    rack.reload()
    expect(rack.locator("body")).not_to_contain_text("with clique drift")
    expect(rack.locator("section.legend")).to_contain_text("p1")
    rack.screenshot(path=str(shots / "3-rack-settled.png"), full_page=True)

    # The job started with no other request: on the new partition's trays, and the member's page says so.
    hosts = stack.placement_once_running(job["id"])
    assert len(hosts) == 9 and all(host.startswith("gb-r08-") for host in hosts), hosts
    member = browser.new_context(viewport={"width": 1400, "height": 1000})
    member_page = member.new_page()
    sign_in(member_page, stack, "bob", demo_password(stack))
    member_page.goto(f"http://{stack.address}/scheduling/jobs/{job['id']}/")
    expect(member_page.locator("#job-state")).to_have_text(re.compile("Running"))
    member_page.screenshot(path=str(shots / "4-job-running.png"), full_page=True)
    member.close()
    admin.close()


def test_a_raised_guarantee_flips_the_borrowed_badges_and_the_chart_is_current(stack, browser, shots):
    lead = browser.new_context(viewport={"width": 1400, "height": 1000})
    lead_page = lead.new_page()
    sign_in(lead_page, stack, "alice", demo_password(stack))
    lead_page.goto(f"http://{stack.address}/tenancy/departments/research/")
    badges = lead_page.locator("table.running .borrowed-badge")
    expect(badges.first).to_be_visible()
    before = badges.count()
    lead_page.screenshot(path=str(shots / "5-lead-before.png"), full_page=True)

    # The chart's last point: the beat's snapshot, taken when the stack started, or since.
    figure = json.loads(lead_page.locator("[data-plotly-figure]").first.get_attribute("data-plotly-figure"))
    # Wall-clock times in the viewer's zone, which the time axis names (plotly draws them as written).
    zone = ZoneInfo(figure["layout"]["xaxis"]["title"]["text"])
    last = max(datetime.fromisoformat(x).replace(tzinfo=zone) for trace in figure["data"] for x in trace["x"])
    assert datetime.now(UTC) - last < timedelta(minutes=5), last

    [(held,)] = stack.query(
        "SELECT sum(gpus) FROM scheduling_job j JOIN tenancy_department d ON d.id = j.department_id "
        "WHERE d.slug = 'research' AND j.state IN ('starting', 'running')"
    )
    admin = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = admin.new_page()
    sign_in(page, stack, *admin_login(stack))
    page.goto(f"http://{stack.address}/tenancy/departments/research/edit/")
    page.fill("#id_guaranteed_gpus", str(held))
    with page.expect_navigation():
        page.get_by_role("button", name=re.compile("Save")).click()
    expect(page.locator("body")).to_contain_text("Department Research saved")
    admin.close()

    # No other request: the change asked for a pass, and the worker ran it.
    def flipped():
        lead_page.reload()
        return badges.count() == 0

    wait_for("the borrowed badges flipped to in quota", flipped, timeout=60, interval=2)
    expect(lead_page.locator('[data-figure="borrowed"]').first).to_have_text("0")
    lead_page.screenshot(path=str(shots / "6-lead-after.png"), full_page=True)
    print(f"borrowed badges: {before} -> 0 after the guarantee became {held}")
    lead.close()
