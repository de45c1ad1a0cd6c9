"""An admin carves the seeded rack gb-r01 into 2x9 through the partition wizard in a real Chromium: the
drawing follows the preset live, the preview shows the Slurm topology diff, and the progress page follows
the pushes (the embedded `local` directory target, Celery eager) until the plan is applied.

Screenshots of every step are saved in the test's tmp_path (printed), or in $RACKPLANE_SCREENSHOTS."""

import re

import pytest
from playwright.sync_api import expect

from integrations.models import ConfigPush, PushStatus
from inventory.demo import seed_datacenter
from inventory.models import NVLinkPartition, PartitionPlan, Rack
from tests.e2e.browser import sign_in
from tests.factories import make_department, nodes_report_their_partitions

PASSWORD = "e2e-admin-password-1"


@pytest.fixture
def seeded_inventory(transactional_db):
    return seed_datacenter(racks=3)


@pytest.fixture
def admin(transactional_db, django_user_model):
    return django_user_model.objects.create_superuser("e2e-admin", "e2e-admin@example.com", PASSWORD)


@pytest.mark.e2e
def test_an_admin_carves_a_rack_into_2x9_and_follows_the_plan(
    live_server, page, seeded_inventory, admin, local_target, render_dir, shots
):
    sign_in(page, live_server, admin.username, PASSWORD)

    page.goto(f"{live_server.url}/inventory/racks/gb-r01/")
    with page.expect_navigation():
        page.get_by_role("link", name="Carve partitions").click()
    expect(page).to_have_url(re.compile(r"/inventory/racks/gb-r01/plan/"))
    # Step 2 starts from the rack as it is: one default partition.
    expect(page.locator("#preset-1x18")).to_be_checked()
    expect(page.locator('li.plan-row[data-slot="10"]')).to_have_attribute("data-planned", "default")
    page.screenshot(path=str(shots / "2-layout.png"), full_page=True)

    # The drawing follows the preset without a page load, and the address bar keeps the plan.
    page.locator("#preset-2x9").check()
    expect(page.locator('li.plan-row[data-slot="10"]')).to_have_attribute("data-planned", "p2")
    expect(page.locator('li.plan-row[data-slot="9"]')).to_have_attribute("data-planned", "p1")
    expect(page.locator(".plan-side")).to_contain_text("no errors")
    expect(page).to_have_url(re.compile(r"preset=2x9"))
    page.screenshot(path=str(shots / "2-layout-2x9.png"), full_page=True)

    with page.expect_navigation():
        page.get_by_role("button", name="Next: names").click()
    expect(page.locator("#name-1")).to_have_value("p1")
    expect(page.locator("#name-2")).to_have_value("p2")
    page.screenshot(path=str(shots / "3-names.png"), full_page=True)

    with page.expect_navigation():
        page.get_by_role("button", name="Next: preview").click()
    topology = page.locator('pre.diff[data-path="slurm/topology.conf"]')
    expect(topology).to_contain_text("BlockName=")
    expect(topology.locator(".diff-add").filter(has_text="BlockName=r01p1")).to_have_count(1)
    expect(page.locator(".findings")).to_contain_text("no overlaps, names unique")
    page.screenshot(path=str(shots / "4-preview.png"), full_page=True)
    assert not PartitionPlan.objects.exists()  # a preview saves nothing

    with page.expect_navigation():
        page.get_by_role("button", name="Apply plan").click()
    expect(page).to_have_url(re.compile(r"/inventory/plans/\d+/$"))
    page.screenshot(path=str(shots / "5-progress.png"), full_page=True)
    progress = page.locator("#plan-progress")
    expect(progress).to_have_attribute("data-status", "applied", timeout=30_000)
    # No fabric manager here: the rack's nodes still report the old clique, and the page waits for them.
    expect(page.locator("#node-reports")).to_contain_text("Waiting for the nodes: 0 of 72 GPUs")
    nodes_report_their_partitions(Rack.objects.get(name="gb-r01"))
    expect(progress).to_have_attribute("data-done", "true", timeout=30_000)
    expect(page.locator("#node-reports")).to_contain_text("Every node reports its new partition")
    expect(progress).to_contain_text("Done: gb-r01 now has p1, p2")
    page.screenshot(path=str(shots / "5-progress-done.png"), full_page=True)

    plan = PartitionPlan.objects.get()
    assert plan.status == "applied"
    assert list(
        NVLinkPartition.objects.filter(rack__name="gb-r01")
        .order_by("clique_id")
        .values_list("name", "clique_id")
    ) == [("p1", 1), ("p2", 2)]
    pushes = ConfigPush.objects.filter(plan_id=plan.pk)
    assert [(push.target.name, push.status) for push in pushes] == [("local", PushStatus.SUCCEEDED)]
    assert "BlockName=r01p2" in (render_dir / "current" / "slurm" / "topology.conf").read_text()


@pytest.mark.e2e
def test_the_slurm_placeholder_follows_the_department_chosen(live_server, page, seeded_inventory, admin):
    """A row given to a department, its Slurm field left empty, is served by its department's Slurm
    partition (the sidebar says so): the field's placeholder says the same, and follows a change of
    department without a page load (the walkthrough saw "shared, or gpu_name" there)."""
    make_department("Vision", guaranteed_gpus=36)
    sign_in(page, live_server, admin.username, PASSWORD)
    page.goto(f"{live_server.url}/inventory/racks/gb-r01/plan/names/?preset=2x9")
    slurm = page.locator("#slurm-2")
    expect(slurm).to_have_attribute("placeholder", "gpu (shared), or gpu_name")

    page.locator("#department-2").select_option("vision")
    expect(page.locator('.planned-list li[data-partition="p2"]')).to_contain_text("Slurm vision")
    expect(slurm).to_have_attribute("placeholder", "vision (its department's)")
    expect(page.locator("#slurm-1")).to_have_attribute("placeholder", "gpu (shared), or gpu_name")
    # The field is the page's again: typing in it still refreshes the plan, and the address keeps it.
    slurm.fill("gpu_batch")
    expect(page).to_have_url(re.compile(r"slurm=gpu_batch"))
    expect(slurm).to_have_value("gpu_batch")

    page.locator("#department-2").select_option("")
    expect(page.locator('.planned-list li[data-partition="p2"]')).to_contain_text("Slurm gpu_batch")
    slurm.fill("")
    expect(slurm).to_have_attribute("placeholder", "gpu (shared), or gpu_name")
