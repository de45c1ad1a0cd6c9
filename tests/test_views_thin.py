"""Views stay thin: no function in a view module (pages, the API's views and viewsets, their helpers) is
over MAX_LINES lines. A view parses its input, calls a service or a context builder, and renders; what grows
past that belongs in a function of its own (a service, a context builder) in the same app.

Lines are counted from the `def` to the function's last line (decorators excluded), docstring included.
"""

import ast
from pathlib import Path

import pytest

from tests.python_source import parse

ROOT = Path(__file__).resolve().parent.parent
APPS = ("core", "inventory", "tenancy", "scheduling", "integrations", "portal")
MAX_LINES = 40
# The view modules, per app: views packages and modules (a sub-package's may be split by job into
# `*_views.py`, as integrations/plans/), portal's pages, the API modules and packages.
PATTERNS = (
    "views/*.py",
    "views.py",
    "*/views.py",
    "*/*_views.py",
    "pages/*.py",
    "api/*.py",
    "api.py",
    "*/api.py",
)


def view_modules() -> list[Path]:
    return sorted({path for app in APPS for pattern in PATTERNS for path in (ROOT / app).glob(pattern)})


def long_functions(tree: ast.AST, limit: int = MAX_LINES) -> list[tuple[str, int, int]]:
    """(name, line of its `def`, length) of each function or method longer than `limit` lines."""
    return [
        (node.name, node.lineno, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_long_functions_are_found_and_decorators_are_not_counted():
    forty = "\n".join(["@require_GET", "@login_required", "def view(request):", *["    x = 1"] * 39])
    forty_one = "\n".join(["class V:", "    def post(self):", *["        x = 1"] * 40])
    tree = parse(f"{forty}\n\n\n{forty_one}\n")
    assert long_functions(tree) == [("post", 46, 41)]


def test_the_view_modules_are_found():
    found = {str(path.relative_to(ROOT)) for path in view_modules()}
    for expected in (
        "scheduling/views/job_form.py",
        "inventory/api/discovery.py",
        "integrations/plans/views.py",
        "integrations/plans/whatif_views.py",
        "integrations/plans/progress_views.py",
        "portal/pages/search.py",
    ):
        assert expected in found


@pytest.mark.slow(reason="parses every view module")
def test_no_view_is_over_40_lines():
    found = [
        f"{path.relative_to(ROOT)}:{line} {name} ({length} lines)"
        for path in view_modules()
        for name, line, length in long_functions(parse(path))
    ]
    assert found == [], "move the work out of these views (a service or a context builder): " + ", ".join(
        found
    )
