"""Driving `rp` (rpcli/) against the portal served by pytest-django's live server, as a member of a department
with a personal token made the way the tokens page makes one (core.tokens.issue).

`rp(...)` runs the installed console script (.venv/bin/rp) in a subprocess with its own config folder
(XDG_CONFIG_HOME in a temporary directory, HOME beside it), so each test proves the command a person runs:
argument parsing, exit codes, what goes to stdout and stderr, the config file on disk.
"""

from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.utils import timezone

from core import tokens
from tests.factories import make_department, make_member

RP = Path(sys.executable).with_name("rp")
SCRIPT = "#!/bin/bash\nsrun python train.py --epochs 1\n"


@dataclass
class Ran:
    code: int
    out: str
    err: str


def personal_token(user, name: str = "rp", days: int = 30) -> tuple[tokens.PersonalToken, str]:
    return tokens.issue(user, name, timezone.now() + datetime.timedelta(days=days))


@pytest.fixture
def rp_home(tmp_path) -> Path:
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    return home


@pytest.fixture
def rp_env(rp_home) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RP_")}
    env.update(HOME=str(rp_home), XDG_CONFIG_HOME=str(rp_home / "config"), COLUMNS="200")
    return env


@pytest.fixture
def config_file(rp_home) -> Path:
    return rp_home / "config" / "rackplane" / "rp.json"


@pytest.fixture
def rp(rp_env):
    """`rp("ls", "--json")` -> Ran(code, out, err); `input=` feeds standard input."""

    def run(*args: str, input: str | None = None, timeout: float = 60, env: dict | None = None) -> Ran:
        done = subprocess.run(
            [str(RP), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**rp_env, **(env or {})},
        )
        return Ran(done.returncode, done.stdout, done.stderr)

    return run


@pytest.fixture
def research(demo_inventory):
    """A department with a guarantee on the seeded racks, so a submission is admitted and placed."""
    return make_department("Research", guaranteed_gpus=32)


@pytest.fixture
def researcher(research):
    return make_member("researcher", research)


@pytest.fixture
def logged_in(live_server, researcher, rp):
    """`rp login` done as the researcher with a fresh personal token; gives (token row, key)."""
    token, key = personal_token(researcher)
    done = rp("login", "--url", live_server.url, "--token-stdin", input=key + "\n")
    assert done.code == 0, done.err
    return token, key


@pytest.fixture
def unused_port() -> int:
    """A loopback port nothing listens on (bound, then closed): a portal that is down."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
