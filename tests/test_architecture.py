"""The house rules, checked: layers only point down (import-linter's contracts in pyproject.toml, and proof
that they fail on an upward import), no import cycles, no function-level imports across packages.

See docs/developer/architecture.md for what each layer holds and may import.
"""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from tests.python_source import parse

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["core", "inventory", "tenancy", "scheduling", "integrations", "portal"]  # bottom to top
CLIENTS = ["rpcli"]  # `rp`, the REST client: beside the layers, importing none of them (its own contract)
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

# Function-level imports across packages that are deliberate, with the reason: none today. An import placed
# inside a function to dodge a cycle hides an upward dependency from the contract's reader; add one here
# only with the reason it cannot live at module level.
DELIBERATE_FUNCTION_IMPORTS: dict[tuple[str, str], str] = {}


def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", "pyproject.toml"],
        cwd=cwd,
        env={"PYTHONPATH": str(cwd), "PATH": str(LINT_IMPORTS.parent)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_import_contracts_are_kept():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    ("module", "statement", "contract"),
    [
        ("core/probe_upward.py", "import portal.urls\n", "Layers only point down"),
        ("inventory/probe_upward.py", "from scheduling.models import Job\n", "Layers only point down"),
        (
            "scheduling/engine/probe_django.py",
            "from django.db import models\n",
            "Pure logic imports no Django",
        ),
        ("integrations/slurm/probe_kind.py", "import integrations.kubernetes.target\n", "stands alone"),
        ("rpcli/probe_portal.py", "from scheduling.models import Job\n", "rp stands alone"),
        ("rpcli/probe_django.py", "import django.conf\n", "rp stands alone"),
        ("portal/probe_rp.py", "import rpcli.api\n", "The portal does not import rp"),
    ],
    ids=[
        "core-to-portal",
        "inventory-to-scheduling",
        "engine-to-django",
        "slurm-to-kubernetes",
        "rp-to-scheduling",
        "rp-to-django",
        "portal-to-rp",
    ],
)
def test_a_forbidden_import_breaks_the_build(tmp_path, module, statement, contract):
    """The same contracts, on a copy of the tree with one forbidden import added: lint-imports fails and
    names the contract and the import (so `make test` fails on it)."""
    for package in PACKAGES + CLIENTS:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / module).write_text(statement)

    result = lint_imports(tmp_path)

    assert result.returncode != 0
    assert f"{contract}" in result.stdout and "BROKEN" in result.stdout
    probe = module.removesuffix(".py").replace("/", ".")
    assert probe in result.stdout


def test_there_are_no_import_cycles():
    graph = grimp.build_graph(*PACKAGES)
    cycles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.chain_exists(importer=imported, imported=module):
                cycles.append(f"{module} <-> {imported}")
    assert cycles == []


def _function_level_imports(path: Path):
    tree = parse(path)
    inside = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            inside.update(id(child) for child in ast.walk(node) if child is not node)
    for node in ast.walk(tree):
        if id(node) not in inside:
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name


@pytest.mark.slow(reason="runs migrations")
def test_no_function_level_imports_across_packages():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for line, module in _function_level_imports(path):
                top = module.split(".")[0]
                if top in PACKAGES and top != package:
                    pair = (str(path.relative_to(ROOT)), module)
                    if pair not in DELIBERATE_FUNCTION_IMPORTS:
                        found.append(f"{pair[0]}:{line} imports {module}")
    assert found == []
