"""Fixtures for the deployment checks: Helm (built once from its Go module by scripts/helm.sh) and the real
Kubernetes API server of the testbed (tests/integrations/kube_testbed.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integrations.kube_testbed import kube, kube_proxy, kube_testbed  # noqa: F401

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def helm() -> str:
    """The path of the Helm binary, built on first use (a few minutes; cached in ~/.cache/rackplane/helm)."""
    if shutil.which("go") is None and not list((REPO / "var" / "cache" / "helm").glob("*/helm")):
        pytest.fail(
            "Helm is not built and Go is not installed: install Go 1.26 or newer (the tests build Helm from "
            "its Go module with scripts/helm.sh build), then run the tests again."
        )
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "helm.sh"), "build"], capture_output=True, text=True, timeout=1800
    )
    if result.returncode != 0:
        pytest.fail(f"scripts/helm.sh build failed:\n{result.stderr[-3000:]}")
    return result.stdout.strip().splitlines()[-1]
