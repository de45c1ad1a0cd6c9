"""The stack tests' services: one PostgreSQL + Redis pair for the session (their own, from
scripts/services.sh, whatever DATABASE_URL the rest of the suite uses), migrated and seeded once; a `stack`
per test for the processes it starts (all stopped after it, by process group).

Scratch files live in a directory of this session's own (not pytest's tmp_path: pytest runs of other
sessions prune old numbered tmp directories, and the stack writes there from other processes)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.stack.harness import Stack, StackServices, seed

pytestmark = [
    pytest.mark.slow(reason="the production stack: gunicorn, Celery, PostgreSQL and Redis processes"),
    pytest.mark.integration,
]


@pytest.fixture(scope="session")
def scratch_root():
    root = Path(tempfile.mkdtemp(prefix="rackplane-stack-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def services():
    running = StackServices()
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def seeded(services, scratch_root) -> dict:
    (scratch_root / "seed").mkdir()
    stack = Stack(services, scratch_root / "seed")
    data = seed(stack, target_dir=scratch_root / "target")
    data["target_dir"] = str(scratch_root / "target")
    data["render_dir"] = str(scratch_root / "rendered")
    return data


@pytest.fixture
def stack(services, seeded, scratch_root, request):
    scratch = Path(tempfile.mkdtemp(prefix=f"{request.node.name[:40]}-", dir=scratch_root))
    running = Stack(
        services, scratch, STACK_TARGET_DIR=seeded["target_dir"], RACKPLANE_RENDER_DIR=seeded["render_dir"]
    )
    try:
        yield running
    finally:
        running.stop()
        # The next test starts on an empty cluster (its jobs run for an hour on the embedded backend).
        if services.dir is not None and services.redis_up():
            running.django("-m", "tests.stack.seed", "cancel-all")
