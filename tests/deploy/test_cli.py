"""`rackplane` (portal/ops/cli.py): the command lines it builds, and the real thing: `rackplane migrate` on a
fresh SQLite database, `rackplane serve` under gunicorn answering a request and stopping on SIGTERM."""

from __future__ import annotations

import io
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from portal.ops import cli

REPO = Path(__file__).resolve().parents[2]
RACKPLANE = Path(sys.executable).with_name("rackplane")


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


# --- the command lines -------------------------------------------------------------------------------------


def test_serve_defaults():
    command = cli.serve_command({}, control_socket=True)
    assert command[:2] == ["gunicorn", "portal.wsgi:application"]
    assert option(command, "--config") == "python:portal.ops.gunicorn_conf"
    assert option(command, "--bind") == "0.0.0.0:8000"
    assert option(command, "--worker-class") == "gthread"
    assert (option(command, "--workers"), option(command, "--threads")) == ("2", "4")
    assert (option(command, "--timeout"), option(command, "--graceful-timeout")) == ("60", "30")
    assert (option(command, "--max-requests"), option(command, "--max-requests-jitter")) == ("20000", "2000")
    assert "--no-control-socket" in command  # it would live under $HOME: read-only in the image
    assert "--access-logfile" not in command  # the portal logs requests itself, with their request id
    assert option(command, "--error-logfile") == "-"


def test_serve_reads_the_environment():
    environ = {
        "PORT": "9000",
        "WEB_CONCURRENCY": "5",
        "GUNICORN_THREADS": "8",
        "GUNICORN_TIMEOUT": "120",
        "GUNICORN_GRACEFUL_TIMEOUT": "45",
        "GUNICORN_KEEPALIVE": "2",
        "GUNICORN_MAX_REQUESTS": "0",
        "GUNICORN_WORKER_TMP_DIR": "/dev/shm",
        "GUNICORN_ACCESS_LOG": "1",
        "GUNICORN_CONTROL_SOCKET": "/tmp/g.ctl",
    }
    command = cli.serve_command(environ, ["--log-level", "debug"], control_socket=True)
    assert option(command, "--bind") == "0.0.0.0:9000"
    assert (option(command, "--workers"), option(command, "--threads")) == ("5", "8")
    assert (option(command, "--timeout"), option(command, "--graceful-timeout")) == ("120", "45")
    assert option(command, "--keep-alive") == "2"
    assert "--max-requests" not in command
    assert option(command, "--worker-tmp-dir") == "/dev/shm"
    assert option(command, "--access-logfile") == "-"
    assert option(command, "--control-socket") == "/tmp/g.ctl" and "--no-control-socket" not in command
    assert command[-2:] == ["--log-level", "debug"]  # extra arguments last: they win
    assert option(cli.serve_command({"BIND": "127.0.0.1:7000", "PORT": "1"}), "--bind") == "127.0.0.1:7000"


@pytest.mark.parametrize(
    "given",
    [["-b", "127.0.0.1:8432"], ["-b127.0.0.1:8432"], ["--bind", "127.0.0.1:8432"], ["--bind=127.0.0.1:8432"]],
)
def test_an_address_on_the_command_line_replaces_bind_and_port(given):
    """gunicorn listens on every --bind it is given: `rackplane serve -b 127.0.0.1:8432` once listened on
    0.0.0.0:8000 too (the default BIND before it)."""
    for environ in ({}, {"BIND": "0.0.0.0:9000"}, {"PORT": "9000"}):
        command = cli.serve_command(environ, given, control_socket=False)
        binds = [part for part in command if part in ("-b", "--bind") or part.startswith(("-b1", "--bind="))]
        assert binds == given[:1] and command[-len(given) :] == given


def test_serve_without_a_control_socket_option_passes_none():
    assert not any("control-socket" in part for part in cli.serve_command({}, control_socket=False))


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"WEB_CONCURRENCY": "four"}, "WEB_CONCURRENCY='four' is not a whole number"),
        ({"GUNICORN_THREADS": "0"}, "GUNICORN_THREADS=0 is below 1"),
        ({"PORT": "-1"}, "PORT=-1 is below 1"),
    ],
)
def test_serve_refuses_bad_numbers(environ, message):
    with pytest.raises(cli.UsageError, match=message):
        cli.serve_command(environ)


def test_worker_and_beat_command_lines(tmp_path):
    worker = cli.worker_command(
        {"CELERY_CONCURRENCY": "6", "CELERY_QUEUES": " pushes, ,dispatch ", "LOG_LEVEL": "WARNING"}
    )
    assert worker[:4] == ["celery", "--app", "portal", "worker"]
    assert option(worker, "--concurrency") == "6"
    assert option(worker, "--queues") == "pushes,dispatch"
    assert option(worker, "--loglevel") == "WARNING"
    assert option(worker, "--max-tasks-per-child") == "100"
    assert "--queues" not in cli.worker_command({})

    beat = cli.beat_command({"TMPDIR": str(tmp_path)})
    assert beat[:4] == ["celery", "--app", "portal", "beat"]
    assert option(beat, "--schedule") == str(tmp_path / "rackplane-beat-schedule")  # writable, never the cwd
    assert option(cli.beat_command({"CELERY_BEAT_SCHEDULE_FILENAME": "/data/s"}), "--schedule") == "/data/s"


def test_metrics_folder_is_made_or_emptied(tmp_path):
    environ: dict[str, str] = {"TMPDIR": str(tmp_path)}
    folder = Path(cli.prepare_metrics_folder(environ))
    assert folder.is_dir() and environ["PROMETHEUS_MULTIPROC_DIR"] == str(folder)

    (folder / "counter_123.db").write_bytes(b"stale")
    (folder / "keep.txt").write_text("not ours")
    assert cli.prepare_metrics_folder(environ) == str(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["keep.txt"]


def test_main_answers_usage_errors(capsys):
    assert cli.main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err
    assert cli.main(["migrate", "--fake"]) == 2
    assert "rackplane manage migrate" in capsys.readouterr().err
    assert cli.main([]) == 2
    assert "rackplane serve" in capsys.readouterr().err


@pytest.mark.django_db
def test_wait_for_database_gives_up_with_a_reason(settings):
    from django.db import connections

    connection = connections["default"]
    real = connection.ensure_connection

    def refuse():
        from django.db.utils import OperationalError

        raise OperationalError(
            'connection to server at "db" (10.0.0.5), port 5432 failed: Connection refused'
        )

    ticks = iter([0.0, 0.5, 1.0, 2.5])
    out = io.StringIO()
    connection.ensure_connection = refuse
    try:
        with pytest.raises(cli.UsageError) as caught:
            cli.wait_for_database(2, interval=0, clock=lambda: next(ticks), out=out)
    finally:
        connection.ensure_connection = real
    assert "did not answer within 2 seconds" in str(caught.value)
    assert "Connection refused" in str(caught.value) and "RACKPLANE_DB_WAIT_TIMEOUT" in str(caught.value)
    assert out.getvalue().count("waiting for the database") == 2


# --- the real thing ---------------------------------------------------------------------------------------


def production_environment(tmp_path: Path) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("RACKPLANE_", "CELERY_", "DATABASE"))}
    environ.update(
        SECRET_KEY=secrets.token_urlsafe(50),
        DEBUG="0",
        ALLOWED_HOSTS="localhost,127.0.0.1",
        RACKPLANE_DEV_ENV="0",
        DATABASE_URL=f"sqlite:///{tmp_path / 'rackplane.sqlite3'}",
        TMPDIR=str(tmp_path),
        PYTHONUNBUFFERED="1",
    )
    return environ


def rackplane(*args: str, environ: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    assert RACKPLANE.exists(), (
        f"{RACKPLANE} is missing: run scripts/venv.sh test (pyproject.toml installs it)"
    )
    return subprocess.run(
        [str(RACKPLANE), *args],
        env=environ,
        cwd=tmp_cwd(environ),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def tmp_cwd(environ: dict[str, str]) -> str:
    return environ["TMPDIR"]  # never the repository: nothing may depend on the working directory


def applied_migrations(database: Path) -> int:
    with sqlite3.connect(database) as connection:
        return connection.execute("SELECT count(*) FROM django_migrations").fetchone()[0]


@pytest.mark.slow(reason="migrates a fresh database in a subprocess")
def test_migrate_applies_then_finds_nothing_to_do(tmp_path):
    environ = production_environment(tmp_path)
    first = rackplane("migrate", environ=environ)
    assert first.returncode == 0, first.stderr
    assert "applying migrations" in first.stderr and "migrations applied" in first.stderr
    count = applied_migrations(tmp_path / "rackplane.sqlite3")
    assert count > 20

    second = rackplane("migrate", environ=environ)
    assert second.returncode == 0, second.stderr
    assert "up to date; nothing to migrate" in second.stderr
    assert applied_migrations(tmp_path / "rackplane.sqlite3") == count


@pytest.mark.slow(reason="waits out the database wait timeout")
def test_migrate_fails_clearly_when_the_database_never_answers(tmp_path):
    environ = production_environment(tmp_path)
    environ["DATABASE_URL"] = "postgres://rackplane:x@127.0.0.1:1/rackplane"  # nothing listens on port 1
    environ["RACKPLANE_DB_WAIT_TIMEOUT"] = "3"
    started = time.monotonic()
    result = rackplane("migrate", environ=environ, timeout=120)
    assert result.returncode == 2
    assert "did not answer within 3 seconds" in result.stderr and "Traceback" not in result.stderr
    assert "waiting for the database" in result.stderr
    assert time.monotonic() - started < 60


@pytest.mark.slow(reason="a fresh Python imports Celery and Django")
@pytest.mark.parametrize("command", ["worker", "beat"])
def test_celery_accepts_the_built_command_line(command, tmp_path):
    # click rejects an unknown option before it answers --help: this proves every option we pass exists.
    result = rackplane(command, "--help", environ=production_environment(tmp_path), timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"Usage: celery {command}" in result.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow(reason="starts gunicorn and stops it")
def test_serve_answers_then_stops_on_sigterm(tmp_path, migrated_sqlite):
    environ = production_environment(tmp_path)  # its database: migrated_sqlite (the migrate test is above)
    port = free_port()
    # The address given on the command line, as an operator types it: the only one it listens on (BIND and
    # PORT would add 0.0.0.0:8000 if they were not replaced).
    environ.update(WEB_CONCURRENCY="2", GUNICORN_THREADS="2", GUNICORN_GRACEFUL_TIMEOUT="10")
    log = (tmp_path / "serve.log").open("w+")
    process = subprocess.Popen(
        [str(RACKPLANE), "serve", "-b", f"127.0.0.1:{port}"],
        env=environ,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/login/", timeout=10) as response:
                    status, body = response.status, response.read().decode()
                break
            except (urllib.error.URLError, ConnectionError):
                assert process.poll() is None, f"gunicorn exited: {(tmp_path / 'serve.log').read_text()}"
                assert time.monotonic() < deadline, (
                    f"no answer in 90 s: {(tmp_path / 'serve.log').read_text()}"
                )
                time.sleep(0.5)
        assert status == 200 and "csrfmiddlewaretoken" in body  # Django's own sign-in page
        # gunicorn itself is the process (exec): the signal reaches it, not a wrapper.
        assert Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0")[1].endswith(b"gunicorn")
        metrics_dirs = list(tmp_path.glob("rackplane-metrics-*"))
        assert len(metrics_dirs) == 1 and list(metrics_dirs[0].glob("*.db"))  # workers share their counters
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    output = (tmp_path / "serve.log").read_text()
    assert f"Listening at: http://127.0.0.1:{port} (" in output  # that address alone
    assert "Handling signal: term" in output and "Shutting down: Master" in output
