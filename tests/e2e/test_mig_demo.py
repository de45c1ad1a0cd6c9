"""Issue 30's done-when on `make run`'s own stack (the shared embedded stack: simulated fabric, embedded job
backend, configurations rendered to a folder), as people do it in the browser, nothing between the steps but
the stack itself:

* An admin gives an idle tray mig-parted's all-balanced layout on its page; the push renders it and the
  tray's simulated node reports its GPUs in MIG mode with the layout's instances (integrations.fabric
  .mig_nodes); the tray page says the layout is in effect.
* A member submits a 1g.23gb job through the job form, and another with `rp submit --mig-profile 1g.23gb`;
  the pass places each on a free slice of that tray and the embedded backend runs them to completion. The
  job page names the slice (profile, GPU, MIG UUID).
* While they run, the rack view and the tray page show which slices are held and by whom, and the idle
  ones; the department page's quota counts them in GPU-equivalents (2 x 1/7), agreeing with the rack view;
  the admin dashboard shows the department's slices and the idle ones.
* The admin turns MIG off again (all-disabled): the node reports whole GPUs and the tray takes whole-GPU
  jobs again, so the demo's capacity is as it was for the next test on the same stack.
"""

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.e2e.browser import DESKTOP, PHONE, page_width_after_resize
from tests.e2e.test_truth import admin_login, demo_password, sign_in
from tests.embedded_stack import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow(reason="the embedded make-run stack and a browser")]

LAYOUT = "all-balanced"
PROFILE = "1g.23gb"
SCRIPT = "#!/bin/bash\nsrun python notebook.py\n"


@pytest.fixture
def stack(embedded_stack):
    return embedded_stack


def idle_tray(stack) -> tuple[int, str, str]:
    """An idle tray in service of the demo (no job holds its GPUs, none in MIG mode, no layout), outside
    gb-r08 (whole, for the gangs the other tests carve it for): (pk, hostname, rack)."""
    rows = stack.query(
        "SELECT t.id, t.hostname, r.name FROM inventory_computetray t "
        "JOIN inventory_rack r ON r.id = t.rack_id "
        "WHERE t.state = 'up' AND r.name != 'gb-r08' AND t.mig_layout = '' "
        "AND NOT EXISTS (SELECT 1 FROM inventory_gpu g WHERE g.tray_id = t.id AND (g.mig_mode = 'enabled' "
        "OR EXISTS (SELECT 1 FROM scheduling_allocation a WHERE a.gpu_id = g.id))) "
        "ORDER BY r.name DESC, t.slot DESC LIMIT 1"
    )
    assert rows, "no idle tray in service outside gb-r08"
    return rows[0]


def shoot(page, shots, name: str, fits_a_phone: bool = True) -> None:
    """The page at a desktop's width and a phone's, kept as screenshots; `fits_a_phone`: nothing wider than
    the phone (the pages this test adds to; the department page and the dashboard have wide tables)."""
    page.set_viewport_size(DESKTOP)
    page.screenshot(path=str(shots / f"{name}-1400.png"), full_page=True)
    page.set_viewport_size(PHONE)
    if fits_a_phone:
        assert page_width_after_resize(page, PHONE["width"]) <= PHONE["width"] + 1, name
    page.screenshot(path=str(shots / f"{name}-390.png"), full_page=True)
    page.set_viewport_size(DESKTOP)


def choose_layout(page, stack, tray_pk: int, layout: str) -> None:
    page.goto(f"http://{stack.address}/inventory/trays/{tray_pk}/")
    page.select_option("select[name='mig-layout']", layout)
    with page.expect_navigation():
        page.get_by_role("button", name="Apply layout").click()
    expect(page.locator(".mig-status")).to_contain_text(f"Chosen: {layout}")


def in_effect(page, stack, tray_pk: int, timeout: float = 120) -> None:
    """Until the tray page says its layout is in effect (its GPUs' reports match it)."""

    def done() -> bool:
        page.goto(f"http://{stack.address}/inventory/trays/{tray_pk}/")
        return page.locator('[data-mig-status="in-effect"]').count() == 1

    wait_for("the tray's layout in effect", done, timeout=timeout, interval=3)


def job_id(stack, name: str) -> int:
    [(pk,)] = wait_for(
        f"job {name}", lambda: stack.query("SELECT id FROM scheduling_job WHERE name = ?", name), timeout=30
    )
    return pk


def time_is_up(stack, job: int) -> None:
    """Job `job`'s time limit ends now for the embedded backend (its `.ends` file, the moment it reports the
    job completed from: integrations.embedded.RenderedJobBackend), as if its minute had passed."""
    [(backend_id,)] = stack.query("SELECT backend_id FROM scheduling_job WHERE id = ?", job)
    ends = stack.clone / "var" / "rendered" / "jobs" / f"{backend_id.removeprefix('rendered/')}.ends"
    limit = datetime.fromisoformat(ends.read_text().strip())
    now = datetime.now(UTC)
    assert limit <= now + timedelta(minutes=1), (limit, now)  # the job's one-minute limit
    if limit > now:  # not up yet (on a loaded machine the steps above can take the minute)
        moved = ends.with_suffix(".ends.tmp")
        moved.write_text(now.isoformat())
        moved.replace(ends)


def test_a_mig_layout_applied_in_the_browser_runs_1g_slice_jobs_shown_everywhere(
    stack, browser, shots, tmp_path
):
    tray_pk, host, rack = idle_tray(stack)
    admin = browser.new_context(viewport=DESKTOP)
    page = admin.new_page()
    sign_in(page, stack, *admin_login(stack))

    # 1. The admin gives the idle tray all-balanced; the push renders it, the simulated node applies it.
    choose_layout(page, stack, tray_pk, LAYOUT)
    expect(page.locator(".mig-status")).to_contain_text("0 of 4 GPUs report it so far")
    in_effect(page, stack, tray_pk)
    expect(page.locator(".mig-status")).to_contain_text("All 4 GPUs report it.")
    slices = page.locator(".mig-slices")
    expect(slices).to_have_attribute("data-slices-total", "16")
    expect(slices).to_have_attribute("data-slices-held", "0")
    shoot(page, shots, "mig-1-layout-in-effect")
    rendered = stack.clone / "var" / "rendered" / "current"
    label = "".join(
        p.read_text() for p in rendered.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml")
    )
    assert f"nvidia.com/mig.config: {LAYOUT}" in label
    [(devices,)] = stack.query(
        "SELECT COUNT(*) FROM inventory_migdevice d JOIN inventory_gpu g ON g.id = d.gpu_id "
        "WHERE g.tray_id = ?",
        tray_pk,
    )
    assert devices == 16

    # 2. A member submits a 1g.23gb job through the form...
    member = browser.new_context(viewport=DESKTOP)
    bob = member.new_page()
    sign_in(bob, stack, "bob", demo_password(stack))
    bob.goto(f"http://{stack.address}/scheduling/jobs/new/")
    bob.select_option("#id_department", "research")
    bob.fill("#id_name", "notebook-1g")
    bob.fill("#id_gpus", "")
    bob.fill("#id_mig_profile", PROFILE)
    bob.fill("#id_mig_slices", "1")
    bob.fill("#id_time_limit_minutes", "1")
    bob.fill("#id_script", SCRIPT)
    bob.locator("#id_mig_slices").dispatch_event("change")
    expect(bob.locator("#job-preview")).to_contain_text(PROFILE)
    with bob.expect_navigation():
        bob.get_by_role("button", name="Submit job").click()
    expect(bob).to_have_url(re.compile(r"/scheduling/jobs/$"))
    from_form = job_id(stack, "notebook-1g")

    # ...and another with rp.
    script = tmp_path / "serve.sh"
    script.write_text(SCRIPT)
    environment = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "RP_URL": f"http://{stack.address}",
        "RP_TOKEN": stack.token("bob"),
    }
    rp = Path(sys.executable).with_name("rp")
    ran = subprocess.run(
        [
            rp,
            "submit",
            str(script),
            "--json",
            "-d",
            "research",
            "-n",
            "serve-1g",
            "--mig-profile",
            PROFILE,
            "--time-limit",
            "1",
        ],
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    from_rp = json.loads(ran.stdout)["id"]

    # The pass places each on a free slice of the tray; the embedded backend runs them.
    for job in (from_form, from_rp):
        assert stack.placement_once_running(job, timeout=90) == [host]
    held = stack.query(
        'SELECT s.job_id, s.mig_uuid, s.profile, g."index" FROM scheduling_sliceallocation s '
        "JOIN inventory_gpu g ON g.id = s.gpu_id WHERE s.job_id IN (?, ?) ORDER BY s.job_id",
        from_form,
        from_rp,
    )
    assert [(row[0], row[2]) for row in held] == [(from_form, PROFILE), (from_rp, PROFILE)], held
    uuid_of = {row[0]: (row[1], row[3]) for row in held}

    # The job page names its slice: profile, GPU, MIG UUID.
    bob.goto(f"http://{stack.address}/scheduling/jobs/{from_form}/")
    table = bob.locator("[data-slices-held]")
    mig_uuid, gpu_index = uuid_of[from_form]
    expect(table).to_contain_text(PROFILE)
    expect(table).to_contain_text(host)
    expect(table).to_contain_text(mig_uuid)
    expect(table.locator("td").nth(2)).to_have_text(str(gpu_index))
    shoot(bob, shots, "mig-2-job-page")

    # 3. The rack view: the two slices held, by whom, and the idle ones.
    bob.goto(f"http://{stack.address}/inventory/racks/{rack}/")
    row = bob.locator(f'[data-tray-slices="{host}"]')
    for job, name in ((from_form, "notebook-1g"), (from_rp, "serve-1g")):
        expect(row.locator(f'[data-slice-held-by="{job}"]')).to_contain_text(name)
        expect(row.locator(f'[data-slice-held-by="{job}"]')).to_contain_text("bob")
    expect(row.locator("[data-idle-slices]")).to_contain_text("Idle MIG slices: 6 x 1g.23gb, 4 x 2g.47gb")
    expect(bob.locator(f"#tray-{host[-2:].lstrip('0')} .slice-held")).to_have_count(2)
    bob.locator(f'[data-tray-slices="{host}"]').scroll_into_view_if_needed()
    shoot(bob, shots, "mig-3-rack-view")
    # The tray page's slices: who holds each.
    bob.goto(f"http://{stack.address}/inventory/trays/{tray_pk}/")
    expect(bob.locator(".mig-slices")).to_have_attribute("data-slices-held", "2")
    expect(bob.locator(f'[data-slice="{mig_uuid}"]')).to_contain_text("notebook-1g")
    bob.locator(".mig-slices").scroll_into_view_if_needed()
    shoot(bob, shots, "mig-4-tray-slices")

    # The department's quota counts the same two slices, 1/7 GPU each.
    bob.goto(f"http://{stack.address}/tenancy/departments/research/")
    expect(bob.locator('[data-figure="slices"]')).to_have_text("2")
    expect(bob.locator('[data-figure="slice-equivalents"]')).to_have_text("0.29")
    shoot(bob, shots, "mig-5-department-quota", fits_a_phone=False)
    # The admin dashboard: Research's slices, and the idle ones.
    page.goto(f"http://{stack.address}/tenancy/dashboard/")
    expect(page.locator('tr[data-department="research"] [data-slices]')).to_have_attribute("data-slices", "2")
    expect(page.locator('[data-figure="idle-slices"]')).to_have_text("14")
    page.locator('[data-figures="idle-slices"]').scroll_into_view_if_needed()
    shoot(page, shots, "mig-6-admin-dashboard", fits_a_phone=False)

    # The embedded backend runs them to completion (their one-minute limit); the slices are idle again. The
    # backend ends a job when the moment in its `.ends` file has passed (integrations.embedded): that moment
    # is brought to now, as a clock a minute on would find it, instead of the test waiting out the minute.
    for job in (from_form, from_rp):
        time_is_up(stack, job)
    for job in (from_form, from_rp):
        wait_for(
            f"job {job} completed",
            lambda job=job: stack.query(
                "SELECT 1 FROM scheduling_job WHERE id = ? AND state = 'completed'", job
            ),
            timeout=150,
            interval=2,
        )
    bob.goto(f"http://{stack.address}/scheduling/jobs/{from_form}/")
    expect(bob.locator("#job-state")).to_have_text(re.compile("Completed"))
    expect(bob.locator("main")).to_contain_text(f"{host} GPU {gpu_index} {PROFILE} ({mig_uuid})")
    shoot(bob, shots, "mig-7-job-completed")
    bob.goto(f"http://{stack.address}/inventory/racks/{rack}/")
    expect(bob.locator(f'[data-tray-slices="{host}"] [data-idle-slices]')).to_contain_text("8 x 1g.23gb")

    # 4. Whole GPUs again: the node reports MIG off, the demo's capacity is as it was.
    choose_layout(page, stack, tray_pk, "all-disabled")
    in_effect(page, stack, tray_pk)
    wait_for(
        "the tray's GPUs whole again",
        lambda: (
            stack.query(
                "SELECT COUNT(*) FROM inventory_gpu WHERE tray_id = ? "
                "AND mig_mode = 'disabled' AND mig_pending = 'disabled'",
                tray_pk,
            )
            == [(4,)]
        ),
        timeout=30,
    )
    member.close()
    admin.close()
