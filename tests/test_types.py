"""mypy passes over the typed seams ([tool.mypy] in pyproject.toml: core, the kinds registry and the
Protocols every kind implements, each kind's registration, the placement engine)."""

from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow(reason="runs mypy over the typed modules")
def test_the_typed_modules_pass_mypy(monkeypatch):
    monkeypatch.chdir(ROOT)  # pyproject.toml's [tool.mypy] `files`, and its .mypy_cache, are the repo's
    stdout, stderr, status = api.run([])
    assert status == 0, stdout + stderr
