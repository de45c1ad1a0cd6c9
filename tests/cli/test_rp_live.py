"""`rp` against the live portal, as a researcher with a personal token: login (the file 0600), submit (one job
per Idempotency-Key), ls/show/--json, cancel, logs, quota, watch to a final state; another department's job
is "not found" with nothing changed; an expired or revoked token is the authentication exit code."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import stat
import subprocess
import time

import pytest
from django.db import transaction

from core import tokens
from integrations.dispatch import process_cancels
from rpcli.commands import TIMES
from scheduling.choices import JobState
from scheduling.models import BackendCancel, Job
from scheduling.services.actions import finish_job
from tenancy.projects import create_project, set_project_member
from tests.cli.conftest import RP, SCRIPT, personal_token
from tests.factories import make_department, make_member

pytestmark = [
    pytest.mark.slow(reason="runs rp in subprocesses against a live server"),
    pytest.mark.django_db(transaction=True),
]

USAGE, AUTH, NOT_FOUND, REFUSED, SERVER = 2, 3, 4, 5, 6


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.sh"
    path.write_text(SCRIPT)
    return path


def read_terminal(terminal: int, shown: bytes = b"", until=None, wait: float = 30) -> bytes:
    """What a program wrote to its terminal, after `shown`: until `until(shown)` holds (the test fails when
    nothing comes for `wait` seconds before it does), or without `until` until the program closes its
    terminal or is quiet for `wait` seconds."""
    while until is None or not until(shown):
        if not select.select([terminal], [], [], wait)[0]:
            assert until is None, f"waited {wait} s in vain; the terminal shows {shown!r}"
            break
        try:
            chunk = os.read(terminal, 4096)
        except OSError:  # the program closed its terminal
            chunk = b""
        if not chunk:
            assert until is None, f"the program closed its terminal; it showed {shown!r}"
            break
        shown += chunk
    return shown


def submitted(rp, script, *extra: str) -> dict:
    done = rp("submit", str(script), "--gpus", "4", "--json", *extra)
    assert done.code == 0, done.err
    return json.loads(done.out)


# --- login / logout -----------------------------------------------------------------------------------------


def test_login_keeps_the_token_in_a_private_file_and_refuses_one_others_can_read(
    live_server, researcher, rp, config_file
):
    _, key = personal_token(researcher)

    done = rp("login", "--url", live_server.url + "/", "--token-stdin", input=key + "\n")

    assert done.code == 0, done.err
    assert "research" in done.out
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(config_file.parent.stat().st_mode) == 0o700
    assert json.loads(config_file.read_text()) == {"url": live_server.url, "token": key}
    assert rp("ls").code == 0

    config_file.chmod(0o644)
    refused = rp("ls")
    assert refused.code == USAGE
    assert (
        "others can read or write it (mode 0644)" in refused.err and f"chmod 600 {config_file}" in refused.err
    )
    assert "Traceback" not in refused.err

    config_file.chmod(0o600)
    assert rp("logout").code == 0
    assert not config_file.exists()
    after = rp("ls")
    assert after.code == AUTH and "not logged in" in after.err


def test_login_asks_for_the_token_at_a_prompt_that_does_not_echo_it(
    live_server, researcher, rp_env, config_file
):
    _, key = personal_token(researcher)
    pid, terminal = pty.fork()
    if pid == 0:  # the child: rp on a terminal of its own, as a person runs it
        try:
            os.execve(str(RP), [str(RP), "login", "--url", live_server.url], rp_env)
        finally:
            os._exit(127)  # never back into the test run
    shown, status = b"", None
    try:
        shown = read_terminal(terminal, until=lambda shown: b"API token (rpt_...): " in shown)
        os.write(terminal, key.encode() + b"\n")
        shown = read_terminal(terminal, shown)
        _, status = os.waitpid(pid, 0)
    finally:
        if status is None:  # it never got what it waited for
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(terminal)
    assert os.waitstatus_to_exitcode(status) == 0, shown
    assert b"Logged in to" in shown and key.encode() not in shown  # not echoed, not printed
    assert json.loads(config_file.read_text())["token"] == key


def test_a_refused_token_is_never_saved(live_server, researcher, rp, config_file):
    done = rp("login", "--url", live_server.url, "--token-stdin", input="rpt_" + "x" * 43 + "\n")

    assert done.code == AUTH
    assert "refused the token" in done.err
    assert not config_file.exists()


# --- submit, ls, show ---------------------------------------------------------------------------------------


def test_submit_then_ls_and_show_as_tables_and_json(logged_in, rp, script, researcher):
    done = rp("submit", str(script), "--gpus", "4", "--name", "from-rp", "--time-limit", "30")

    assert done.code == 0, done.err
    job = Job.objects.get(name="from-rp")
    assert (job.department.slug, job.gpus, job.submitted_by, job.time_limit_minutes) == (
        "research",
        4,
        researcher,
        30,
    )
    assert job.work == {"script": SCRIPT} and job.backend == "slurm"
    assert len(job.idempotency_key) == 36  # a UUID by default
    assert f"Submitted job {job.pk}" in done.out and f"rp watch {job.pk}" in done.out

    from_stdin = rp("submit", "-", "--gpus", "4", "--name", "from-stdin", "--json", input=SCRIPT)
    assert from_stdin.code == 0, from_stdin.err
    assert Job.objects.get(name="from-stdin").work == {"script": SCRIPT}
    Job.objects.filter(name="from-stdin").delete()

    listed = rp("ls")
    assert listed.code == 0
    assert listed.out.splitlines()[0].split()[:3] == ["ID", "NAME", "DEPARTMENT"]
    assert any(line.split()[:2] == [str(job.pk), "from-rp"] for line in listed.out.splitlines())

    as_json = json.loads(rp("ls", "--json").out)
    assert [j["id"] for j in as_json] == [job.pk]
    assert json.loads(rp("ls", "--json", "--state", "completed").out) == []

    shown = json.loads(rp("show", str(job.pk), "--json").out)
    assert shown["id"] == job.pk and shown["work"] == {"script": SCRIPT} and shown["events"]
    table = rp("show", str(job.pk))
    assert table.code == 0 and "from-rp" in table.out and "Events:" in table.out


def test_ls_walks_every_page(logged_in, rp, research, researcher):
    for n in range(105):  # the API's pages hold 100
        Job.objects.create(department=research, name=f"old-{n}", gpus=1, submitted_by=researcher)

    assert len(json.loads(rp("ls", "--json", "--limit", "0").out)) == 105
    assert len(json.loads(rp("ls", "--json").out)) == 50  # the default limit
    assert len(json.loads(rp("ls", "--json", "--name", "old-10").out)) == 6  # old-10, old-100..old-104


def test_ls_and_show_give_a_slice_jobs_profile_and_count_as_the_portal_does(
    logged_in, rp, research, researcher
):
    asks = {
        "slices": {"gpus": 0, "mig_profile": "1g.23gb", "mig_slices": 2},
        "sized": {"gpus": 0, "mig_profile": "1g.23gb", "mig_slices": 1, "mig_memory_gb": 20},
        "whole": {"gpus": 4},
    }
    by_profile, by_size, whole = (
        Job.objects.create(department=research, name=name, submitted_by=researcher, **fields)
        for name, fields in asks.items()
    )

    listed = rp("ls")
    assert listed.code == 0, listed.err
    rows = {line.split()[0]: line.split() for line in listed.out.splitlines()[1:]}
    column = listed.out.splitlines()[0].split().index("GPUS")
    assert rows[str(by_profile.pk)][column] == f"2{TIMES}1g.23gb"
    assert rows[str(by_size.pk)][column] == f"1{TIMES}1g.23gb"
    assert rows[str(whole.pk)][column] == "4"

    shown = rp("show", str(by_profile.pk)).out.splitlines()
    assert ["mig", "slices", "2", TIMES, "1g.23gb"] in [line.split() for line in shown]
    assert not any(line.split()[:1] == ["gpus"] for line in shown)
    sized = [line.split() for line in rp("show", str(by_size.pk)).out.splitlines()]
    assert ["mig", "slices", "1", TIMES, "1g.23gb", "(asked:", "20", "GB", "each)"] in sized
    assert ["gpus", "4"] in [line.split() for line in rp("show", str(whole.pk)).out.splitlines()]
    as_json = json.loads(rp("show", str(by_profile.pk), "--json").out)
    assert (as_json["gpus"], as_json["mig_profile"], as_json["mig_slices"]) == (0, "1g.23gb", 2)


def test_the_same_idempotency_key_twice_makes_one_job(logged_in, rp, script):
    first = submitted(rp, script, "--idempotency-key", "nightly-2026-11-30")
    again = rp("submit", str(script), "--gpus", "4", "--idempotency-key", "nightly-2026-11-30")

    assert again.code == 0, again.err
    assert f"Job {first['id']} was already made" in again.out
    assert Job.objects.count() == 1
    assert Job.objects.get().idempotency_key == "nightly-2026-11-30"

    other = submitted(rp, script)  # a new key each time by default
    assert other["id"] != first["id"] and Job.objects.count() == 2


def test_an_image_job_and_the_apis_refusal_in_its_words(logged_in, rp, tmp_path):
    done = rp(
        "submit", "--image", "nvcr.io/nvidia/pytorch:25.01-py3", "--command", "torchrun", "--arg", "train.py",
        "--env", "NCCL_DEBUG=INFO", "--gpus", "4", "--json",
    )  # fmt: skip
    assert done.code == 0, done.err
    job = Job.objects.get(pk=json.loads(done.out)["id"])
    assert job.backend == "kubernetes" and job.name == "pytorch"
    assert job.work == {
        "image": "nvcr.io/nvidia/pytorch:25.01-py3",
        "command": ["torchrun"],
        "args": ["train.py"],
        "env": {"NCCL_DEBUG": "INFO"},
    }

    no_shebang = tmp_path / "plain.sh"
    no_shebang.write_text("srun python train.py\n")
    refused = rp("submit", str(no_shebang), "--gpus", "4")
    assert refused.code == REFUSED
    assert "work:" in refused.err and "#!" in refused.err
    assert Job.objects.count() == 1


# --- cancel, logs, quota, watch -----------------------------------------------------------------------------


def test_cancel_and_cancelling_again_is_the_apis_refusal(logged_in, rp, script):
    job = submitted(rp, script)

    done = rp("cancel", str(job["id"]))

    assert done.code == 0, done.err
    assert Job.objects.get(pk=job["id"]).state == JobState.CANCELLED
    assert "cancelled" in done.out
    again = rp("cancel", str(job["id"]))
    assert again.code == REFUSED and "(400)" in again.err


def test_logs_print_the_jobs_output_and_follow_stops_when_it_ends(logged_in, rp, script):
    job = submitted(rp, script)
    Job.objects.get(pk=job["id"])  # the embedded backend wrote the request it would send: that is its output

    done = rp("logs", str(job["id"]))

    assert done.code == 0, done.err
    assert "srun python train.py --epochs 1" in done.out
    as_json = json.loads(rp("logs", str(job["id"]), "--json").out)
    assert as_json["job"] == job["id"] and as_json["error"] == ""
    [part] = as_json["parts"]
    assert part["text"] == done.out and part["size"] == len(done.out.encode())

    with transaction.atomic():
        finish_job(Job.objects.select_for_update().get(pk=job["id"]), JobState.COMPLETED, "exit code 0", 0)
    followed = rp("logs", "-f", "--interval", "0.2", str(job["id"]), timeout=30)
    assert followed.code == 0 and followed.out == done.out
    lines = rp("logs", "-f", "--json", str(job["id"]), timeout=30).out.splitlines()
    assert [json.loads(line)["text"] for line in lines] == [done.out]


def test_logs_of_a_job_not_yet_handed_to_a_backend_are_not_found(logged_in, rp, research, researcher):
    waiting = Job.objects.create(department=research, name="waiting", gpus=4, submitted_by=researcher)

    done = rp("logs", str(waiting.pk))

    assert done.code == NOT_FOUND and "not been handed to a backend" in done.err


def test_logs_of_a_cancelled_job_are_not_found_and_name_no_server_path(logged_in, rp, script, settings):
    job = submitted(rp, script)
    assert Job.objects.get(pk=job["id"]).backend_id  # handed to the embedded backend: it rendered a request
    assert rp("cancel", str(job["id"])).code == 0
    process_cancels()  # the embedded backend's cancel removes what it rendered (if the server has not yet)
    assert not BackendCancel.objects.filter(job_id=job["id"], done_at=None).exists()

    done = rp("logs", str(job["id"]))

    assert done.code == NOT_FOUND and "removed the request it rendered" in done.err
    assert str(settings.RACKPLANE_RENDER_DIR) not in done.out + done.err


def test_quota_shows_the_departments_guarantee_and_use_and_its_projects(
    logged_in, rp, script, research, researcher, platform_admin
):
    submitted(rp, script)
    vision = create_project(platform_admin, research, name="Vision", guaranteed_gpus=8, limit_gpus=16)
    set_project_member(platform_admin, vision, researcher)

    table = rp("quota")
    as_json = json.loads(rp("quota", "--json").out)

    assert table.code == 0
    departments, projects = table.out.split("\n\n")
    assert departments.splitlines()[1].split() == ["research", "32", "none", "4", "4", "0", "0", "4"]
    # The default project holds what the named one leaves of the department's 32 GPUs.
    rows = sorted(line.split() for line in projects.splitlines()[1:])
    assert rows == [["research", "default", "24", "(the", "rest)", "none"], ["research", "vision", "8", "16"]]
    [position] = as_json["departments"]
    assert position["department"] == "research" and position["guaranteed"] == 32 and position["in_use"] == 4
    assert sorted((p["slug"], p["guaranteed_gpus"], p["is_default"]) for p in as_json["projects"]) == [
        ("default", 0, True),
        ("vision", 8, False),
    ]

    # A named project the researcher is not in (hidden from them) still takes its share of the department's:
    # rp says the rest the server computes, not what the visible rows leave.
    create_project(platform_admin, research, name="NLP", guaranteed_gpus=6)
    rows = sorted(line.split() for line in rp("quota").out.split("\n\n")[1].splitlines()[1:])
    assert rows == [["research", "default", "18", "(the", "rest)", "none"], ["research", "vision", "8", "16"]]


@pytest.mark.parametrize(("state", "code"), [(JobState.COMPLETED, 0), (JobState.FAILED, 1)])
def test_watch_follows_the_job_until_it_ends(logged_in, rp_env, script, rp, state, code):
    job = submitted(rp, script)
    watcher = subprocess.Popen(
        [str(RP), "watch", str(job["id"]), "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**rp_env, "TZ": "Asia/Tokyo"},
    )
    try:
        first = watcher.stdout.readline()
        assert re.match(rf"\d\d:\d\d:\d\d JST job {job['id']} ", first), first  # its time, its zone named
        assert f"job {job['id']} " in first and (
            "running" in first or "starting" in first or "pending" in first
        )
        time.sleep(0.5)
        assert watcher.poll() is None  # still watching a job that has not ended
        with transaction.atomic():
            row = Job.objects.select_for_update().get(pk=job["id"])
            finish_job(row, state, "the backend says so", exit_code=0 if code == 0 else 3)
        out, err = watcher.communicate(timeout=30)
    finally:
        watcher.kill()
    assert watcher.returncode == code, err
    assert f"job {job['id']} {state}" in out.splitlines()[-1]


def test_watch_on_a_terminal_rewrites_the_line_of_the_running_job(logged_in, rp_env, rp, script):
    job = submitted(rp, script)
    terminal, its_end = pty.openpty()
    watcher = subprocess.Popen(
        [str(RP), "watch", str(job["id"]), "--interval", "0.2"],
        stdout=its_end,
        stderr=subprocess.PIPE,
        env=rp_env,
    )
    os.close(its_end)
    try:
        # the running job's line, then written again in place
        shown = read_terminal(terminal, until=lambda shown: shown.count(b"\r\x1b[K") >= 2)
        with transaction.atomic():
            finish_job(Job.objects.select_for_update().get(pk=job["id"]), JobState.COMPLETED, "done", 0)
        assert watcher.wait(timeout=30) == 0
        shown = read_terminal(terminal, shown, wait=1)
    finally:
        watcher.kill()
        os.close(terminal)
    text = shown.decode()
    assert f"job {job['id']} running for" in text
    assert text.rstrip().endswith("with exit code 0: done") and f"job {job['id']} completed" in text
    assert text.count("\n") == 2  # running, then completed: one line each (the terminal's \r\n)


def test_watch_gives_up_at_its_timeout(logged_in, rp, script):
    job = submitted(rp, script)

    done = rp("watch", str(job["id"]), "--interval", "0.2", "--timeout", "1", "--json")

    assert done.code == 7 and f"job {job['id']} is still running" in done.err
    [seen] = [json.loads(line) for line in done.out.splitlines()]  # one line: the job did not change
    assert seen["id"] == job["id"] and seen["state"] == "running"


def test_ctrl_c_stops_watching_with_130_and_no_traceback(logged_in, rp_env, rp, script):
    job = submitted(rp, script)
    watcher = subprocess.Popen(
        [str(RP), "watch", str(job["id"])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=rp_env,
    )
    try:
        assert f"job {job['id']} running" in watcher.stdout.readline()
        watcher.send_signal(signal.SIGINT)
        _, err = watcher.communicate(timeout=30)
    finally:
        watcher.kill()
    assert watcher.returncode == 130
    assert "interrupted" in err and "Traceback" not in err


# --- another tenant's job, tokens that no longer work ------------------------------------------------------


def test_another_departments_job_is_not_found_and_left_alone(logged_in, rp):
    other = make_department("Other")
    stranger = make_member("stranger", other)
    theirs = Job.objects.create(department=other, name="theirs", gpus=4, submitted_by=stranger)

    for command in (["show"], ["cancel"], ["logs"], ["watch", "--timeout", "5"]):
        done = rp(*command, str(theirs.pk))
        assert done.code == NOT_FOUND, (command, done.err)
        assert f"no job {theirs.pk}" in done.err
    theirs.refresh_from_db()
    assert theirs.state == JobState.PENDING and not theirs.events.filter(kind="cancelled").exists()
    assert json.loads(rp("ls", "--json").out) == []


def test_a_colleagues_job_may_be_seen_but_not_cancelled(logged_in, rp, research):
    colleague = make_member("colleague", research)
    theirs = Job.objects.create(department=research, name="theirs", gpus=4, submitted_by=colleague)

    assert json.loads(rp("show", str(theirs.pk), "--json").out)["submitted_by"] == "colleague"
    done = rp("cancel", str(theirs.pk))

    assert done.code == AUTH
    assert "not allowed: only the job's submitter" in done.err
    theirs.refresh_from_db()
    assert theirs.state == JobState.PENDING


@pytest.mark.parametrize("how", ["revoked", "expired"])
def test_a_token_that_no_longer_works_is_the_authentication_exit_code(logged_in, rp, how):
    token, _ = logged_in
    if how == "revoked":
        tokens.revoke(token)
    else:
        type(token).objects.filter(pk=token.pk).update(expires_at=token.created_at)

    done = rp("ls")

    assert done.code == AUTH
    assert "refused the token" in done.err and how in done.err.lower()
    assert ".." not in done.err  # the portal's sentence ends with a full stop; rp adds none


# --- hostile input ----------------------------------------------------------------------------------------


def test_an_address_that_answers_no_json_is_a_server_error(live_server, researcher, rp, config_file):
    _, key = personal_token(researcher)

    done = rp("login", "--url", live_server.url + "/login", "--token-stdin", input=key)

    assert done.code == SERVER
    assert "not the API's JSON" in done.err and "Traceback" not in done.err
    assert not config_file.exists()


def test_nothing_listens_there_is_a_server_error(rp, researcher, unused_port):
    _, key = personal_token(researcher)

    done = rp("login", "--url", f"http://127.0.0.1:{unused_port}", "--token-stdin", input=key)

    assert done.code == SERVER and "could not reach" in done.err


def test_input_files_that_are_not_scripts_are_refused_before_sending(logged_in, rp, tmp_path):
    huge = tmp_path / "huge.sh"
    huge.write_bytes(b"#!/bin/bash\n" + b"#" * (5 * 1024 * 1024))
    binary = tmp_path / "binary.sh"
    binary.write_bytes(b"#!/bin/bash\n\xff\xfe")
    cases = {
        str(huge): "over 4 MiB",
        str(binary): "not UTF-8",
        str(tmp_path): "cannot read",
        str(tmp_path / "missing.sh"): "cannot read",
    }
    for path, words in cases.items():
        done = rp("submit", path, "--gpus", "4")
        assert done.code == USAGE, (path, done.err)
        assert words in done.err and "Traceback" not in done.err
    assert Job.objects.count() == 0


def test_quota_says_what_the_portals_pages_say_for_a_department_that_borrows(
    logged_in, rp, research, researcher, client
):
    """`rp quota` reads the quota endpoint: the same figures as the home page, the department list and page
    (scheduling.usage.department_positions, in use = in quota + borrowed)."""
    from tests.factories import free_trays, run_job
    from tests.portal.test_figures_agree import screens

    run_job(research, name="r1", trays=free_trays(8))  # 32 GPUs: its whole guarantee
    run_job(research, name="r2", trays=free_trays(2))  # 8 more: borrowed

    [position] = json.loads(rp("quota", "--json").out)["departments"]
    table = rp("quota").out.split("\n\n")[0].splitlines()[1].split()

    figures = {name: position[name] for name in ("guaranteed", "in_use", "in_quota", "borrowed")}
    assert figures == {"guaranteed": 32, "in_use": 40, "in_quota": 32, "borrowed": 8}
    assert table[:6] == ["research", "32", "none", "40", "32", "8"]
    client.force_login(researcher)
    for screen, shown in screens(client, research).items():
        assert shown == {name: figures[name] for name in shown}, screen
