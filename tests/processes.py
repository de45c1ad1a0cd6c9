"""A fresh Python process of the project, for what only a new process shows (settings read once, what its
start-up imports)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def fresh_python(script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`script` run by a new interpreter in the repository with exactly `env`; its output as text."""
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
