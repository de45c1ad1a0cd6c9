"""A fresh clone of the working tree for tests that run the project's own scripts (`make run`'s steps).

The clone holds the files git would check out (tracked, plus new files not ignored, as in the working tree),
no var/, and the project's .venv linked in: nothing the developer's var/ holds (database, dev.env, broker
folders) can leak in, and nothing the test writes leaks out.

The `prepared_clone` fixture gives a test its own copy of the session's one clone prepared as `make run`
prepares it (`scripts/run.sh --prepare`: var/dev.env, migrate, seed, admin): the preparation runs once per
session, whatever the number of xdist workers, and a copy takes a fraction of a second.
"""

import contextlib
import fcntl
import hashlib
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
VENV = REPO_ROOT / ".venv"


def make_clone(destination: Path) -> Path:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if not source.is_file():  # deleted in the working tree
            continue
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    (destination / ".venv").symlink_to(VENV)
    # scripts/venv.sh reinstalls when pyproject.toml differs from the last install: in the clone that would
    # point the shared .venv's editable install at the temporary clone.
    installed = (VENV / ".rackplane-installed").read_text().strip()
    if hashlib.sha256((destination / "pyproject.toml").read_bytes()).hexdigest() != installed:
        raise RuntimeError(".venv was installed from another pyproject.toml: run `bash scripts/venv.sh test`")
    return destination


def shell_env(**variables) -> dict:
    """The environment of a developer's new shell: none of the settings the test session set."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "DATABASE_URL", "CELERY_BROKER_URL"}
        and not key.startswith(("RACKPLANE_", "DJANGO_", "PYTEST_"))
    }
    env.update(variables)
    return env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def prepare(clone: Path) -> None:
    """`make run`'s steps up to serving, in the clone (the environment of a developer's new shell)."""
    prepared = subprocess.run(
        ["bash", "scripts/run.sh", "--prepare"],
        cwd=clone,
        env=shell_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr


def shared_prepared_clone(shared_root: Path) -> Path:
    """The session's prepared clone under `shared_root` (a directory every xdist worker of the session sees):
    made by whichever worker asks first, under a lock the others wait on. Copy it, never change it."""
    template = shared_root / "prepared-clone" / "rackplane"
    ready = template.parent / ".ready"
    shared_root.mkdir(parents=True, exist_ok=True)
    with (shared_root / "prepared-clone.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not ready.exists():
                shutil.rmtree(template.parent, ignore_errors=True)
                prepare(make_clone(template))
                ready.touch()
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(lock, fcntl.LOCK_UN)
    return template


def copy_clone(template: Path, destination: Path) -> Path:
    """A copy of a prepared clone (its var/ included; .venv stays a link to the project's)."""
    shutil.copytree(template, destination, symlinks=True)
    return destination


@pytest.fixture(scope="session")
def prepared_clone_template(tmp_path_factory) -> Path:
    # Every xdist worker's base directory sits in one directory of the run; a run without workers has its own.
    base = tmp_path_factory.getbasetemp()
    return shared_prepared_clone((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared")


def copy_database(template: Path, directory: Path) -> Path:
    """directory/rackplane.sqlite3: a copy of a prepared clone's database (migrated and seeded by this very
    code), for a test whose subject is not `migrate` but needs a database (a migrate costs ~8 s of CPU)."""
    database = directory / "rackplane.sqlite3"
    shutil.copy2(template / "var" / "rackplane.sqlite3", database)
    return database


@pytest.fixture
def migrated_sqlite(prepared_clone_template, tmp_path) -> Path:
    """tmp_path/rackplane.sqlite3, migrated and seeded (copy_database)."""
    return copy_database(prepared_clone_template, tmp_path)


@pytest.fixture
def prepared_clone(prepared_clone_template, tmp_path) -> Path:
    """This test's own copy of the session's prepared clone."""
    return copy_clone(prepared_clone_template, tmp_path / "rackplane")
