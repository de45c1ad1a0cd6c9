"""docs/security.md names the test that proves each line of the threat model: every one must exist, so the
page cannot point at a test that was renamed or removed."""

import ast
import re
from pathlib import Path

import pytest

from tests.python_source import parse

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)?(?:::(\w+))?`")


def defined_tests(path: Path) -> set[str]:
    tree = parse(path)
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_every_test_the_threat_model_names_exists():
    text = (ROOT / "docs" / "security.md").read_text()
    missing, named, current = [], 0, None
    for match in REFERENCE.finditer(text):
        path, name = match.groups()
        if path:
            current = path
            if not (ROOT / path).is_file():
                missing.append(path)
                continue
        if name and current:
            named += 1
            if name not in defined_tests(ROOT / current):
                missing.append(f"{current}::{name}")
    assert named > 40, "the threat model names the tests that prove it"
    assert not missing, missing
