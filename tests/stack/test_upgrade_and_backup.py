"""Upgrades and backups, as docs/deployment/operations.md says to do them:

1. A database of the previous release with data (tests/stack/previous_release.py: the migrations of commit
   2b15314, rows written through that state's models) is upgraded with `rackplane migrate` (what the chart's
   migration Job runs), then served by `rackplane serve`: the old job is there, a new one is accepted.
2. `pg_dump -Fc` of that database, `pg_restore` into a fresh database, and the portal (gunicorn) started on
   the restored one serves the same data and is ready.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import requests

from tests.stack.harness import RACKPLANE, ROOT, Stack, api, job_body, pg_bindir

pytestmark = [
    pytest.mark.slow(reason="the production stack: gunicorn, Celery, PostgreSQL and Redis processes"),
    pytest.mark.integration,
]


def run(argv: list[str], env: dict[str, str]) -> str:
    out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, (
        f"{' '.join(argv)} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    )
    return out.stdout


def test_previous_release_upgrades_then_a_dump_restores_into_a_fresh_database(services, scratch_root):
    upgraded_url = services.create_database("upgrade_from_previous")
    stack = Stack(services, scratch_root, DATABASE_URL=upgraded_url)
    try:
        previous = json.loads(
            run([sys.executable, "-m", "tests.stack.previous_release"], stack.env).splitlines()[-1]
        )
        run([RACKPLANE, "migrate"], stack.env)  # what the chart's migration Job runs
        run([RACKPLANE, "manage", "migrate", "--check"], stack.env)

        web = stack.web("web-upgraded")
        job = api(web, previous["token"], "GET", f"/api/v1/jobs/{previous['job']}/")
        assert job.status_code == 200 and job.json()["name"] == "previous-train", job.text
        new = api(
            web,
            previous["token"],
            "POST",
            "/api/v1/jobs/",
            job_body(previous["department"], "after-upgrade", gpus=4),
        )
        assert new.status_code == 201, new.text
        assert requests.get(f"{web}/readyz", timeout=30).json()["checks"]["migrations"]["ok"] is True
        stack.stop()

        # Backup and restore.
        dump = scratch_root / "rackplane.dump"
        bindir = pg_bindir()
        run([f"{bindir}/pg_dump", "-Fc", "--no-owner", "-f", str(dump), upgraded_url], stack.env)
        restored_url = services.create_database("restored")
        run(
            [f"{bindir}/pg_restore", "--no-owner", "--exit-on-error", "-d", restored_url, str(dump)],
            stack.env,
        )

        restored = Stack(services, scratch_root, DATABASE_URL=restored_url)
        stack = restored
        web = restored.web("web-restored")
        ready = requests.get(f"{web}/readyz", timeout=30)
        assert ready.status_code == 200 and ready.json()["checks"]["migrations"]["ok"] is True, ready.text
        listed = api(web, previous["token"], "GET", "/api/v1/jobs/?sort=id")
        assert listed.status_code == 200, listed.text
        names = {item["name"] for item in listed.json()["results"]}
        assert {"previous-train", "after-upgrade"} <= names, names
    finally:
        stack.stop()
