"""Carving that follows demand, tried as people would on `make run`'s own stack (scripts/run.sh in a fresh
clone: web server, real Celery worker and beat, the demo's simulated fabric), in Chromium for the admin and
the REST API for the rest. Nothing but the stack acts between the steps: the test only reads.

The stack is this module's own (gb-r08 is re-carved here, and tests/e2e/test_truth.py counts on the session's
stack keeping it whole), started as an operator would with a preemption grace of an hour
(RACKPLANE_PREEMPT_AFTER_MINUTES): an in-quota gang waits rather than preempt borrowers at once, which is
when re-carving idle trays is the way to serve it.

* The admin carves the demo's free rack gb-r08 into 2x9 (the partition API) and gives Platform a guarantee
  of 80 GPUs; Platform's member ivan submits a 12-tray (48-GPU) one-partition gang, in quota. It waits: no
  partition has 12 free trays.
* The admin turns re-carving on on gb-r08's page. The scheduler merges the idle p1 and p2 into one
  partition through the wizard's path; the plan shows as the scheduler's with its reason, the gang starts on
  gb-r08, and the rack page and the admin dashboard count the same re-carve.
"""

import json
import re
import urllib.request

import pytest
from playwright.sync_api import expect

from tests.e2e.test_truth import admin_login, demo_password, sign_in, submit
from tests.embedded_stack import running_stack, wait_for
from tests.fresh_clone import copy_clone

pytestmark = [pytest.mark.e2e, pytest.mark.slow(reason="its own make-run stack and a browser")]


@pytest.fixture(scope="module")
def stack(prepared_clone_template, tmp_path_factory):
    clone = copy_clone(prepared_clone_template, tmp_path_factory.mktemp("recarving") / "rackplane")
    with running_stack(clone, RACKPLANE_PREEMPT_AFTER_MINUTES="60") as stack:
        yield stack


def api(stack, token: str, method: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        f"http://{stack.address}{path}",
        method=method,
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        data=json.dumps(body).encode(),
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status in (200, 201), response.status
        return json.load(response)


def settled(stack, rack: str) -> bool:
    """Every GPU of `rack` reports the clique its partition intends, its fabric registration completed."""
    [(unsettled,)] = stack.query(
        "SELECT count(*) FROM inventory_gpu g JOIN inventory_computetray t ON t.id = g.tray_id "
        "JOIN inventory_rack r ON r.id = t.rack_id JOIN inventory_nvlinkpartition p ON p.id = t.partition_id "
        "WHERE r.name = ? AND (g.reported_clique_id IS NOT p.clique_id OR g.fabric_state != 'completed')",
        rack,
    )
    return unsettled == 0


def test_an_admin_turns_recarving_on_and_a_waiting_gang_gets_its_partition(stack, browser, shots):
    admin_token = stack.token(admin_login(stack)[0])
    plan = api(
        stack,
        admin_token,
        "POST",
        "/api/v1/partition-plans/",
        {"rack": "gb-r08", "layout": {"preset": "2x9"}},
    )
    wait_for(
        "gb-r08 carved 2x9 and its nodes settled", lambda: settled(stack, "gb-r08"), timeout=120, interval=1
    )
    assert stack.query("SELECT status FROM inventory_partitionplan WHERE id = ?", plan["id"]) == [
        ("applied",)
    ]
    api(stack, admin_token, "PATCH", "/api/v1/departments/platform/", {"guaranteed_gpus": 80})

    gang = submit(
        stack,
        stack.token("ivan"),
        {
            "department": "platform",
            "name": "train-gang-12",
            "gpus": 48,
            "topology": "partition",
            "priority_class": "train",
            "backend": "slurm",
            "time_limit_minutes": 60,
            "work": {"script": "#!/bin/bash\nsrun hostname\n"},
        },
    )
    [(reason,)] = wait_for(
        "the gang waiting for a partition",
        lambda: stack.query(
            "SELECT pending_reason FROM scheduling_job WHERE id = ? AND state = 'pending' "
            "AND pending_reason LIKE 'waiting:%'",
            gang["id"],
        ),
        timeout=60,
    )
    print(f"the gang waits: {reason}")
    assert not stack.query("SELECT 1 FROM inventory_partitionplan WHERE origin = 'scheduler'")

    # The admin turns re-carving on for gb-r08, on its page.
    admin = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = admin.new_page()
    sign_in(page, stack, *admin_login(stack))
    page.goto(f"http://{stack.address}/inventory/racks/gb-r08/")
    panel = page.locator("#recarving")
    expect(panel).to_have_attribute("data-recarving", "off")
    expect(panel).to_contain_text("never across departments")
    panel.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "1-rack-recarving-off.png"), full_page=True)
    page.get_by_label("Let the scheduler re-carve idle trays").check()
    page.get_by_label("Smallest partition (trays)").fill("9")
    page.get_by_label("Re-carves per hour, at most").fill("2")
    with page.expect_navigation():
        page.get_by_role("button", name="Save the policy").click()
    expect(page.locator("body")).to_contain_text("Re-carving of gb-r08 is on")
    expect(panel).to_have_attribute("data-recarving", "on")

    # No other request: the policy asked for a pass, which proposed; integrations made the plan.
    [(plan_id, plan_reason, created_by)] = wait_for(
        "the scheduler's plan",
        lambda: stack.query(
            "SELECT p.id, p.reason, p.created_by_id FROM inventory_partitionplan p JOIN inventory_rack r "
            "ON r.id = p.rack_id WHERE r.name = 'gb-r08' AND p.origin = 'scheduler' AND p.for_job_id = ?",
            gang["id"],
        ),
        timeout=60,
    )
    assert created_by is None and f"job {gang['id']} (platform, 48 GPUs in quota)" in plan_reason, plan_reason
    print(f"the scheduler's reason: {plan_reason}")

    # The plan's page says it is the scheduler's, and why; it follows the plan until the nodes settle.
    page.goto(f"http://{stack.address}/inventory/plans/{plan_id}/")
    expect(page.locator("[data-origin]")).to_contain_text("the scheduler")
    expect(page.locator("[data-plan-reason]")).to_contain_text(plan_reason)
    expect(page.locator("#plan-progress")).to_have_attribute("data-status", "applied", timeout=60_000)
    expect(page.locator("#node-reports")).to_contain_text(
        "Every node reports its new partition", timeout=90_000
    )
    page.screenshot(path=str(shots / "2-schedulers-plan.png"), full_page=True)
    page.goto(f"http://{stack.address}/inventory/plans/")
    row = page.locator("table.plans tbody tr").filter(has=page.locator('[data-origin="scheduler"]')).first
    expect(row).to_contain_text("the scheduler")
    expect(row).to_contain_text(plan_reason)
    page.screenshot(path=str(shots / "3-plan-list.png"), full_page=True)

    # The gang gets its partition: it starts on gb-r08's trays, with nothing else asked of anyone.
    hosts = stack.placement_once_running(gang["id"], timeout=90)
    assert len(hosts) == 12 and all(host.startswith("gb-r08-") for host in hosts), hosts

    # The rack page and the dashboard agree: one re-carve of gb-r08 in the last 24 h, this plan.
    page.goto(f"http://{stack.address}/inventory/racks/gb-r08/")
    expect(panel.locator('[data-policy="recent"]')).to_have_text("1")
    expect(panel.locator('[data-policy="last"]')).to_contain_text(f"plan #{plan_id}")
    expect(panel.locator('[data-policy="reason"]')).to_contain_text(plan_reason)
    expect(page.locator("section.legend")).not_to_contain_text("p2")
    expect(page.locator(f'[data-held-by="{gang["id"]}"]').first).to_be_visible()
    page.screenshot(path=str(shots / "4-rack-recarved.png"), full_page=True)
    page.goto(f"http://{stack.address}/tenancy/dashboard/")
    expect(page.locator('[data-figure="recarves"]')).to_have_text("1")
    expect(page.locator('[data-recarved-rack="gb-r08"]')).to_be_visible()
    expect(page.locator(".recarves")).to_contain_text("gb-r08 1")
    page.locator(".recarves").scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "5-dashboard.png"), full_page=True)

    # A member sees the policy and the re-carve on the rack page, and no form.
    member = browser.new_context(viewport={"width": 1400, "height": 1000})
    member_page = member.new_page()
    sign_in(member_page, stack, "ivan", demo_password(stack))
    member_page.goto(f"http://{stack.address}/inventory/racks/gb-r08/")
    expect(member_page.locator("#recarving")).to_have_attribute("data-recarving", "on")
    expect(member_page.locator("#recarving form")).to_have_count(0)
    expect(member_page.locator('#recarving [data-policy="recent"]')).to_have_text("1")
    member.close()
    admin.close()
    assert re.search(r"re-carve of gb-r08 for job \d+: plan #\d+", stack.log("celery-worker.log"))
