"""Pushes you can trust, in the partition wizard, in a real Chromium: a platform admin chooses a layout that
moves the trays of a running multi-tray job and reads ONE finding for that job (not one per tray or GPU)
with "Drain first" beside it; clicking it re-checks with drain first on, and the plan goes on to a preview
that says "Drain first". Layouts the fleet's Slurm cannot express are greyed out and cannot be chosen: the
reason is said once above the presets and briefly under each greyed layout, about the rack being planned.

Screenshots at desktop (1400 px) and phone (390 px) width through `shots`."""

import re

import pytest
from playwright.sync_api import expect

from inventory.demo import seed_datacenter
from tests.e2e.browser import sign_in
from tests.factories import make_department, run_job
from tests.integrations.plans.test_slurm_version import slurm_target

PASSWORD = "e2e-admin-password-1"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1400, "height": 1000}
SPLIT_PRESETS = ("2x9", "3x6", "6x3", "9x2", "18x1")


@pytest.fixture
def admin(transactional_db, django_user_model, render_dir):
    """Three racks: gb-r01 (one default partition), gb-r02 (carved 2x9), gb-r03 (one default partition)."""
    seed_datacenter(racks=3)
    return django_user_model.objects.create_superuser("e2e-admin", "e2e-admin@example.com", PASSWORD)


def both_widths(page, shots, name: str) -> None:
    page.screenshot(path=str(shots / f"{name}-1400.png"), full_page=True)
    page.set_viewport_size(PHONE)
    page.screenshot(path=str(shots / f"{name}-390.png"), full_page=True)
    page.set_viewport_size(DESKTOP)


@pytest.mark.e2e
def test_one_finding_per_job_and_drain_first_inline(live_server, page, admin, shots):
    run_job(make_department("Ops"), trays=[f"gb-r01-t{slot:02d}" for slot in range(1, 5)], name="ops-train")
    sign_in(page, live_server, admin.username, PASSWORD)
    page.goto(f"{live_server.url}/inventory/racks/gb-r01/plan/")
    expect(page.locator("#preset-1x18")).to_be_checked()

    # 2x9 moves every tray of gb-r01, the job's four with them: one finding for the job, with the button.
    page.locator("#preset-2x9").check()
    expect(page.locator('li.plan-row[data-slot="10"]')).to_have_attribute("data-planned", "p2")
    findings = page.locator(".plan-side ul.findings > li")
    job = findings.filter(has_text="ops-train")
    expect(job).to_have_count(1)
    expect(job).to_have_class(re.compile(r"\bfinding-error\b"))
    expect(job).to_contain_text(
        "Trays 1-4 (gb-r01-t01, gb-r01-t02, gb-r01-t03, gb-r01-t04) run ops-train and would change partition"
    )
    expect(findings.filter(has_text="gb-r01-t02")).to_have_count(1)  # no box per tray
    expect(page.locator(".plan-side a.drain-first-inline")).to_have_count(1)
    button = job.get_by_role("link", name="Drain first")
    expect(button).to_be_visible()
    # The button follows the sentence, not squeezed into the icon's column under it.
    icon = job.locator(".finding-icon").bounding_box()
    assert button.bounding_box()["x"] > icon["x"] + icon["width"]
    expect(page.locator("#drain-first")).not_to_be_checked()
    expect(page.locator(".plan-side")).to_contain_text("errors to fix")
    page.locator(".plan-side").scroll_into_view_if_needed()
    both_widths(page, shots, "findings-refused")

    with page.expect_navigation():
        job.get_by_role("link", name="Drain first").click()
    expect(page).to_have_url(re.compile(r"drain_first=on"))
    expect(page).to_have_url(re.compile(r"preset=2x9"))
    expect(page.locator("#drain-first")).to_be_checked()
    job = page.locator(".plan-side ul.findings > li").filter(has_text="ops-train")
    expect(job).to_have_count(1)
    expect(job).to_have_class(re.compile(r"\bfinding-warning\b"))
    expect(job).to_contain_text("run ops-train: they will be drained and the plan applied once the work has")
    expect(page.locator("a.drain-first-inline")).to_have_count(0)
    expect(page.locator(".plan-side")).to_contain_text("no errors")
    both_widths(page, shots, "findings-drain-first")

    with page.expect_navigation():
        page.get_by_role("button", name="Next: names").click()
    expect(page.locator("#name-2")).to_have_value("p2")
    with page.expect_navigation():
        page.get_by_role("button", name="Next: preview").click()
    apply_panel = page.locator(".apply-panel")
    expect(apply_panel).to_contain_text("Drain first: busy trays are drained and the plan waits")
    expect(apply_panel.locator('input[name="drain_first"]')).to_have_value("on")
    expect(apply_panel.get_by_role("button", name="Apply plan")).to_be_enabled()
    expect(page.locator("ul.findings > li").filter(has_text="ops-train")).to_contain_text("will be drained")
    both_widths(page, shots, "preview-drain-first")


@pytest.mark.e2e
def test_layouts_slurm_cannot_express_are_greyed_with_the_reason(live_server, page, admin, shots, tmp_path):
    sign_in(page, live_server, admin.username, PASSWORD)

    # Slurm 24.11's block sizes: beside gb-r01 (18 trays) and gb-r02 (9 + 9), gb-r03 cannot take 3x6 etc.
    page.goto(f"{live_server.url}/inventory/racks/gb-r03/plan/")
    notes = page.locator("#preset-notes")
    expect(notes).to_have_count(1)
    expect(notes).to_contain_text("Layouts of gb-r03 that break this")
    for preset in ("3x6", "6x3", "9x2", "18x1"):
        expect(page.locator(f"#preset-{preset}")).to_be_disabled()
        expect(page.locator(f"#preset-{preset}-why")).to_be_visible()
        expect(page.locator(f"#preset-{preset}-why")).not_to_contain_text("gb-r0")
    expect(page.locator("#preset-3x6-why")).to_have_text(
        "6 trays each: the other racks' partitions of 9 and 18 trays are not 6 times a power of two."
    )
    expect(page.locator("#preset-2x9")).to_be_enabled()
    expect(page.locator(".preset-why")).to_have_count(4)
    page.locator(".layout-picker").scroll_into_view_if_needed()
    both_widths(page, shots, "greyed-block-sizes")

    # A Slurm target that reported 22.05 (no topology/block): every split layout of gb-r01 is greyed out.
    slurm_target(tmp_path, "22.05.9")
    page.goto(f"{live_server.url}/inventory/racks/gb-r01/plan/")
    expect(page.locator("#preset-notes")).to_contain_text(
        "Slurm 22.05.9 on target hpc cannot express NVLink partitions: topology/block needs Slurm 23.11"
    )
    expect(page.locator("#preset-1x18")).to_be_checked()
    expect(page.locator("#preset-1x18")).to_be_enabled()
    for preset in SPLIT_PRESETS:
        radio = page.locator(f"#preset-{preset}")
        expect(radio).to_be_disabled()
        expect(radio).to_have_attribute("aria-describedby", f"preset-{preset}-why preset-notes")
        count = 18 // int(preset.split("x")[1])
        expect(page.locator(f"#preset-{preset}-why")).to_have_text(
            f"{count} partitions need Slurm 23.11+ (topology/block)."
        )
    # The sentence naming the version is said once, not under every layout.
    expect(page.get_by_text("topology/block needs Slurm 23.11 or later")).to_have_count(1)
    # Not selectable: clicking the greyed layout's label changes nothing.
    page.locator('label[for="preset-2x9"]').click(force=True)
    expect(page.locator("#preset-1x18")).to_be_checked()
    expect(page.locator("#preset-2x9")).not_to_be_checked()
    expect(page.locator('li.plan-row[data-slot="10"]')).to_have_attribute("data-planned", "default")
    page.locator(".layout-picker").scroll_into_view_if_needed()
    both_widths(page, shots, "greyed-old-slurm")


# Elements whose right edge passes the viewport's while their parent's does not: what makes the page too wide.
WIDER_THAN_VIEWPORT = """() => {
  const width = document.documentElement.clientWidth;
  const wide = (el) => el.getClientRects().length && el.getBoundingClientRect().right > width + 0.5;
  return [...document.querySelectorAll("body *")]
    .filter((el) => wide(el) && !wide(el.parentElement))
    .map((el) => [el.tagName, el.id, el.className, Math.round(el.getBoundingClientRect().right)]);
}"""


def assert_fits(page, width: int) -> None:
    """The page is no wider than the viewport: nothing to scroll sideways, nothing cut at the right."""
    scroll_width = page.evaluate("document.documentElement.scrollWidth")
    assert scroll_width <= width, (scroll_width, page.evaluate(WIDER_THAN_VIEWPORT))


@pytest.mark.e2e
def test_drain_first_on_the_preview_reruns_the_preview_in_place(live_server, page, admin, shots):
    run_job(make_department("Ops"), trays=[f"gb-r01-t{slot:02d}" for slot in range(1, 5)], name="ops-train")
    run_job(make_department("Vision"), trays=["gb-r01-t12"], name="vision-eval")
    sign_in(page, live_server, admin.username, PASSWORD)
    page.goto(f"{live_server.url}/inventory/racks/gb-r01/plan/preview/?preset=2x9")
    findings = page.locator("ul.findings > li")
    expect(findings.filter(has_text="ops-train")).to_have_class(re.compile(r"\bfinding-error\b"))
    expect(page.locator("a.drain-first-inline")).to_have_count(2)  # one per job, none per tray

    # On the preview, "Drain first" re-runs the preview with drain first on: not back to the layout step.
    with page.expect_navigation():
        findings.filter(has_text="ops-train").get_by_role("link", name="Drain first").click()
    expect(page).to_have_url(re.compile(r"/inventory/racks/gb-r01/plan/preview/\?"))
    expect(page).to_have_url(re.compile(r"preset=2x9"))
    expect(page).to_have_url(re.compile(r"drain_first=on"))
    expect(page.locator("h1")).to_contain_text("gb-r01")
    expect(page.locator("#checks-title")).to_contain_text("no errors")
    expect(findings.filter(has_text="ops-train")).to_contain_text("will be drained")
    expect(findings.filter(has_text="vision-eval")).to_contain_text("will be drained")
    expect(page.locator("a.drain-first-inline")).to_have_count(0)
    apply_panel = page.locator(".apply-panel")
    expect(apply_panel.locator('input[name="drain_first"]')).to_have_value("on")
    expect(apply_panel.get_by_role("button", name="Apply plan")).to_be_enabled()
    assert_fits(page, DESKTOP["width"])

    # At a phone's width the preview (grouped findings, the what-if panel, the diffs) fits the screen.
    page.set_viewport_size(PHONE)
    expect(page.locator(".whatif-panel, #whatif-title").first).to_be_visible()
    assert_fits(page, PHONE["width"])
    page.screenshot(path=str(shots / "preview-in-place-390.png"), full_page=True)
    page.set_viewport_size(DESKTOP)
    page.screenshot(path=str(shots / "preview-in-place-1400.png"), full_page=True)


@pytest.mark.e2e
def test_a_plan_that_only_dedicates_a_partition_says_what_it_changes_in_japanese(
    live_server, browser, admin, shots
):
    """The walkthrough dedicated gb-r08's existing p2 to a department and read "⚠ this plan does not change
    the partitions" above a diff of three files. gb-r02 is carved 2x9 here: the preview's check says no tray
    moves and the fabric's partitions stay, names the dedication and the Slurm move, and the diff agrees."""
    make_department("Inference", guaranteed_gpus=36)
    context = browser.new_context(viewport=DESKTOP, locale="ja-JP", timezone_id="Asia/Tokyo")
    page = context.new_page()
    sign_in(page, live_server, admin.username, PASSWORD)
    page.goto(
        f"{live_server.url}/inventory/racks/gb-r02/plan/preview/?preset=2x9&name=p1&name=p2"
        "&department=&department=inference&slurm=&slurm="
    )
    findings = page.locator("ul.findings > li")
    expect(findings.filter(has_text="パーティションは変わりません")).to_have_count(0)
    said = findings.filter(has_text="NVLink パーティションが変わるトレイはなく")
    expect(said).to_have_count(1)
    expect(said).to_have_class(re.compile(r"\bfinding-info\b"))
    expect(said).to_contain_text("p2 は inference の専有になり")
    expect(said).to_contain_text("p2 のトレイは Slurm パーティション gpu から inference に移り")
    expect(said).not_to_contain_text("No tray")
    ok = findings.filter(has_text="重複なし")
    expect(ok.locator(".visually-hidden")).to_have_text(re.compile(r"^\s*問題なし:\s*$"))  # not "ok:"
    # What the check says changes is what the diff shows: Slurm, Kubernetes and OpenSM files.
    expect(page.locator("body")).to_contain_text("slurm/rackplane.conf")
    expect(page.locator("body")).to_contain_text("kubernetes/02-nodes.yaml")
    expect(page.locator("body")).to_contain_text("opensm/partitions.conf")
    expect(page.locator(".apply-panel").locator("button.apply-button")).to_be_enabled()
    said.scroll_into_view_if_needed()
    both_widths(page, shots, "preview-dedication-only-ja")
    context.close()
