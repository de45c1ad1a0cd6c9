"""A fresh clone of the working tree for tests that run the project's own scripts (`make run`'s steps).

The clone holds the files git would check out (tracked, plus new files not ignored, as in the working tree),
no var/, and the project's .venv linked in: nothing the developer's var/ holds (database, dev.env, broker
folders) can leak in, and nothing the test writes leaks out.
"""

import hashlib
import os
import shutil
import socket
import subprocess
from pathlib import Path

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
