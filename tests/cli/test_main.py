"""rp's command line without a server: its help (the exit codes), shell completion, argument refusals, the
watch line and what `rp logs -f` prints of each new read."""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rpcli import commands
from rpcli.errors import EXIT_CODES_HELP, Exit
from rpcli.main import main

DOCS = Path(__file__).resolve().parents[2] / "docs" / "api" / "rp.md"


@pytest.fixture(autouse=True)
def _nowhere(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("RP_URL", raising=False)
    monkeypatch.delenv("RP_TOKEN", raising=False)


def test_the_help_and_the_docs_list_every_exit_code(capsys):
    assert main(["--help"]) == 0
    shown = capsys.readouterr().out
    docs = DOCS.read_text()
    for code in Exit:
        assert re.search(rf"^\s*{code.value}\s", EXIT_CODES_HELP, re.M), code
        assert f"| {code.value} |" in docs, code
    assert EXIT_CODES_HELP in shown
    commands_ = ("login", "logout", "submit", "ls", "show", "watch", "logs", "cancel", "quota", "completion")
    for command in commands_:
        assert re.search(rf"^\s+{command}\s", shown, re.M), command


@pytest.mark.parametrize(
    ("shell", "marker"), [("bash", "complete -o bashdefault -F _shtab_rp rp"), ("zsh", "#compdef rp")]
)
def test_completion_scripts_know_the_commands_and_choices(capsys, shell, marker):
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    assert marker in script
    for word in ("submit", "watch", "quota", "--idempotency-key", "kubernetes", "cancelled"):
        assert word in script, word


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["nope"],
        ["show", "abc"],
        ["show", "0"],
        ["show", "99999999999999999999"],
        ["ls", "--state", "done"],
        ["submit", "x.sh"],  # no --gpus
        ["submit", "x.sh", "--gpus", "0"],
        ["watch", "1", "--interval", "0"],
    ],
)
def test_a_usage_error_is_exit_2_in_words(capsys, argv):
    assert main(argv) == Exit.USAGE
    err = capsys.readouterr().err
    assert err and "Traceback" not in err


def test_every_command_that_needs_a_login_says_so(capsys):
    for argv in (["ls"], ["show", "1"], ["watch", "1"], ["logs", "1"], ["cancel", "1"], ["quota"]):
        assert main(argv) == Exit.AUTH
        assert "not logged in: run `rp login --url" in capsys.readouterr().err


def test_submit_needs_a_script_or_an_image_not_both(capsys, tmp_path):
    script = tmp_path / "a.sh"
    script.write_text("#!/bin/bash\n")
    assert main(["submit", "--gpus", "4"]) == Exit.USAGE
    assert main(["submit", str(script), "--image", "x", "--gpus", "4"]) == Exit.USAGE
    assert main(["submit", str(script), "--env", "A=1", "--gpus", "4"]) == Exit.USAGE
    assert main(["submit", "--image", "x", "--env", "NOEQUALS", "--gpus", "4"]) == Exit.USAGE
    assert main(["submit", str(script), "--gpus", "4", "--idempotency-key", "é"]) == Exit.USAGE
    assert "Traceback" not in capsys.readouterr().err


def test_the_watch_line_shows_progress_against_the_time_limit():
    now = datetime.datetime(2026, 11, 30, 12, 30, tzinfo=datetime.UTC)
    running = {
        "id": 42,
        "state": "running",
        "started_at": "2026-11-30T12:00:00Z",
        "time_limit_minutes": 60,
        "placement": ["gb-r01-t01", "gb-r01-t02"],
    }
    assert commands.progress(running, now) == (
        "job 42 running for 30m00s of 60 min (50%) on gb-r01-t01,gb-r01-t02"
    )
    pending = {"id": 42, "state": "pending", "pending_reason": "waiting for 8 GPUs in one partition"}
    assert commands.progress(pending, now) == "job 42 pending: waiting for 8 GPUs in one partition"
    failed = {"id": 42, "state": "failed", "exit_code": 3, "backend_message": "OOM"}
    assert commands.progress(failed, now) == "job 42 failed with exit code 3: OOM"


def test_following_logs_prints_only_what_is_new():
    follow = commands._LogFollower()
    part = {"name": "/work/job.out", "text": "one\ntwo\n", "size": 8}
    assert follow.new_text(part) == "one\ntwo\n"
    assert follow.new_text(part) == ""
    assert follow.new_text({**part, "text": "one\ntwo\nthree\n", "size": 14}) == "three\n"
    # the API sends only the end of a long stream: the growth is what is new
    assert follow.new_text({**part, "text": "three\nfour é\n", "size": 22}) == "four é\n"
    assert follow.new_text({**part, "text": "z\n", "size": 2000}).startswith("[... ")
    # a pod's log has no size: what follows the text shown before
    pod = {"name": "pod-0", "text": "a\nb\n", "size": None}
    assert follow.new_text(pod) == "a\nb\n"
    assert follow.new_text({**pod, "text": "a\nb\nc\n"}) == "c\n"
    assert follow.new_text({**pod, "text": "b\nc\nd\n"}) == "d\n"


@pytest.mark.slow(reason="runs rp in three Python subprocesses")
def test_rp_runs_where_the_portal_cannot_be_imported(tmp_path):
    """The import contract checks rpcli's imports as written; this runs it with Django and every package of
    the portal made unimportable, as on a laptop that only has rp."""
    blocked = [
        "django",
        "rest_framework",
        "celery",
        "core",
        "inventory",
        "tenancy",
        "scheduling",
        "integrations",
    ]
    code = (
        "import sys\n"
        f"for name in {[*blocked, 'portal']!r}: sys.modules[name] = None\n"
        "from rpcli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path)}
    env.pop("RP_URL", None)
    for argv, expected in ((["--help"], 0), (["completion", "zsh"], 0), (["ls"], Exit.AUTH)):
        done = subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=60
        )
        assert done.returncode == expected, done.stderr
        assert "Traceback" not in done.stderr


def test_times_are_shown_in_the_machines_zone_with_its_name():
    import datetime
    import zoneinfo

    from rpcli import output

    tokyo = zoneinfo.ZoneInfo("Asia/Tokyo")
    assert output.when("2026-11-30T10:38:05Z", tokyo) == "2026-11-30 19:38 JST"
    assert output.when("2026-11-30T10:38:05.123456+00:00", datetime.UTC) == "2026-11-30 10:38 UTC"
    assert output.when("2026-11-30T23:30:00Z", tokyo) == "2026-12-01 08:30 JST"  # the next day there
    assert output.when(None) == "-" and output.when("not a time") == "not a time"


def test_moments_inside_a_stored_sentence_are_shown_in_the_machines_zone():
    """The fourth walkthrough's `rp show` in Tokyo: created "23:20 JST" beside a backend message "it ends at
    its time limit, 2026-11-30 15:20 UTC": one zone on one screen."""
    import zoneinfo

    from rpcli import output

    tokyo = zoneinfo.ZoneInfo("Asia/Tokyo")
    said = "Slurm (prod): running (it ends at its time limit, 2026-11-30 15:20 UTC)"
    assert output.moments_in_zone(said, tokyo) == (
        "Slurm (prod): running (it ends at its time limit, 2026-12-01 00:20 JST)"
    )
    assert output.moments_in_zone("requeued at 2026-11-30 12:40:13 UTC unless", tokyo) == (
        "requeued at 2026-11-30 21:40:13 JST unless"
    )
    alone = "no moment here; 12:40 UTC alone"  # a time without its date: as written
    assert output.moments_in_zone(alone, tokyo) == alone
    assert output.moments_in_zone(None, tokyo) is None
