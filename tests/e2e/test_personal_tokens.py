"""A researcher in a real browser makes a personal API token (named, with an expiry), copies the key from the
page that shows it once, submits a job with it through the API of the live server, then revokes the token
on the same page: the API refuses it from then on, with a 401 that says so."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from playwright.sync_api import expect

from inventory.demo import seed_datacenter
from scheduling.models import Job
from tests.factories import make_department, make_member

pytestmark = pytest.mark.e2e

PASSWORD = "e2e-token-password-1"
SCRIPT = "#!/bin/bash\nsrun python train.py\n"


@pytest.fixture
def researcher(transactional_db):
    seed_datacenter(racks=3)
    department = make_department("Research", guaranteed_gpus=32)
    return make_member("e2e-tokens", department, password=PASSWORD)


def submit(live_server, key: str) -> requests.Response:
    return requests.post(
        f"{live_server.url}/api/v1/jobs/",
        json={"department": "research", "name": "from-a-script", "gpus": 4, "work": {"script": SCRIPT}},
        headers={"Authorization": f"Token {key}"},
        timeout=30,
    )


def test_make_a_token_submit_a_job_with_it_then_revoke_it(live_server, page, shots, researcher, tmp_path):
    page.goto(f"{live_server.url}/login/")
    page.fill("#id_username", "e2e-tokens")
    page.fill("#id_password", PASSWORD)
    with page.expect_navigation():
        page.locator("#id_password").press("Enter")

    page.locator(".topbar .who").click()  # the username leads to the tokens page
    expect(page).to_have_url(f"{live_server.url}/account/tokens/")
    expect(page.get_by_text("You have no personal API tokens yet.")).to_be_visible()
    page.fill("#id_name", "training launcher")
    page.select_option("#id_lifetime_days", "30")
    page.locator("#make-token").click()

    expect(page).to_have_url(f"{live_server.url}/account/tokens/new/")
    page.wait_for_load_state()  # the Copy button's script is deferred: a click before it ran does nothing
    key = page.locator("#new-token").inner_text()
    assert re.fullmatch(r"rpt_[\w-]{43}", key), key
    # The Copy button puts the key on the clipboard; the snippets carry it, ready to run.
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    copy = page.locator('button[data-copy="new-token"]')
    copy.click()
    expect(copy).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == key
    curl = page.locator("#snippet-curl").inner_text()
    assert curl == f'curl -H "Authorization: Token {key}" {live_server.url}/api/v1/jobs/'
    python = page.locator("#snippet-python").inner_text()
    rp_lines = page.locator("#snippet-rp").inner_text().splitlines()
    assert rp_lines == [f"rp login --url {live_server.url}", "rp ls"]
    page.screenshot(path=str(shots / "01-new-token-shown-once.png"), full_page=True)
    page.reload()
    expect(page.locator("#new-token")).to_have_count(0)  # shown once

    response = submit(live_server, key)
    assert response.status_code == 201, response.text
    assert Job.objects.get(pk=response.json()["id"]).submitted_by == researcher
    # The page's Python snippet, run as it is, lists that job.
    ran = subprocess.run([sys.executable, "-c", python], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    job_id, name, state = ran.stdout.split()
    assert (job_id, name, state) == (str(response.json()["id"]), "from-a-script", Job.objects.get().state)
    # The rp snippet as a person types it (the key pasted at the prompt; here on standard input).
    rp = Path(sys.executable).with_name("rp")
    environment = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    login = [*rp_lines[0].split()[1:], "--token-stdin"]
    ran = subprocess.run(
        [rp, *login], input=key + "\n", capture_output=True, text=True, env=environment, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    listed = subprocess.run([rp, "ls"], capture_output=True, text=True, env=environment, timeout=60)
    assert listed.returncode == 0 and "from-a-script" in listed.stdout, listed.stderr

    page.goto(f"{live_server.url}/account/tokens/")
    row = page.locator("#own-tokens tr.token-row")
    expect(row).to_have_count(1)
    expect(row.locator("td").first).to_have_text("training launcher")
    expect(row.locator(".token-status")).to_have_text("Active")
    expect(row.locator("td").nth(4)).not_to_have_text("never")  # the job's request used it
    page.screenshot(path=str(shots / "02-token-listed.png"), full_page=True)
    # On a phone the row keeps its name, expiry, status and Revoke button on screen (the rest is left out).
    page.set_viewport_size({"width": 390, "height": 844})
    revoke = row.get_by_role("button", name="Revoke training launcher")
    box = revoke.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 390, box
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.screenshot(path=str(shots / "02-token-listed-390.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 1000})

    # Revoke asks first (found by a walkthrough, issue 31: one click revoked it): dismissed, nothing happens;
    # accepted, the token is revoked.
    dialogs = []

    def answer(accept):
        def handler(dialog):
            dialogs.append(dialog.message)
            if accept:
                dialog.accept()
            else:
                dialog.dismiss()

        return handler

    page.once("dialog", answer(False))
    row.get_by_role("button", name="Revoke training launcher").click()
    expect(row.locator(".token-status")).to_have_text("Active")
    assert dialogs and dialogs[0].startswith("Revoke token rpt_"), dialogs
    assert "(training launcher)? Every script or tool using it is refused" in dialogs[0]
    still = requests.get(
        f"{live_server.url}/api/v1/jobs/", headers={"Authorization": f"Token {key}"}, timeout=30
    )
    assert still.status_code == 200
    page.once("dialog", answer(True))
    row.get_by_role("button", name="Revoke training launcher").click()
    expect(page.locator(".message.success")).to_contain_text("the API refuses it from now on")
    assert len(dialogs) == 2
    expect(row.locator(".token-status")).to_contain_text("Revoked")
    page.screenshot(path=str(shots / "03-token-revoked.png"), full_page=True)

    refused = submit(live_server, key)
    assert refused.status_code == 401
    assert "was revoked at" in refused.json()["detail"]
