"""The Containerfile, checked as far as this machine allows.

No image can be built here: no registry is reachable for a base image, no container engine is installed
(docs/deployment/image.md says how to build one from a debootstrap root file system). So the file is
parsed and its promises are checked: two stages, a non-root numeric USER, static files collected at build with
no secret kept, no ADD of remote URLs, every COPY source present, the entry point; and the build's
collectstatic step is run here, with the same settings, to prove it works without a database or a real key.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILE = REPO / "Containerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: comments dropped, continuation lines joined."""
    out, pending = [], ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical = (pending + line).strip()
        pending = ""
        keyword, _, arguments = logical.partition(" ")
        out.append((keyword.upper(), arguments.strip()))
    assert not pending, "the Containerfile ends in a continuation line"
    return out


def stages(parsed):
    """Lists of instructions per stage (split at FROM); ARGs before the first FROM are stage 0's prelude."""
    result: list[list[tuple[str, str]]] = []
    for keyword, arguments in parsed:
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, arguments))
    return result


@pytest.fixture(scope="module")
def parsed():
    return instructions(CONTAINERFILE.read_text())


def test_parser_reads_continuations():
    assert instructions("# c\nRUN a \\\n    && b\n\nUSER 1\n") == [("RUN", "a      && b"), ("USER", "1")]


def test_two_stages_and_the_final_one_runs_as_a_non_root_user(parsed):
    build, final = stages(parsed)
    assert build[0][1].endswith(" AS build")
    users = [arguments for keyword, arguments in final if keyword == "USER"]
    assert users == ["65532:65532"]  # numeric: runAsNonRoot can verify it without reading /etc/passwd
    # Nothing runs as root after USER, and the build tools stay in the build stage.
    after_user = final[[k for k, _ in final].index("USER") :]
    assert "RUN" not in [k for k, _ in after_user]
    assert not any("build-essential" in arguments for _, arguments in final)
    assert ("ENTRYPOINT", '["rackplane"]') in final and ("CMD", '["serve"]') in final
    assert ("EXPOSE", "8000") in final


def test_static_files_are_collected_at_build_without_keeping_a_secret(parsed):
    build, final = stages(parsed)
    collect = [arguments for keyword, arguments in build if keyword == "RUN" and "collectstatic" in arguments]
    assert len(collect) == 1
    assert "STATIC_ROOT=/app/staticfiles" in collect[0] and "--no-input" in collect[0]
    assert "secrets.token_urlsafe" in collect[0]  # made in that shell, never an ENV or ARG
    env = " ".join(arguments for keyword, arguments in parsed if keyword in ("ENV", "ARG", "LABEL"))
    assert not re.search(r"(SECRET|PASSWORD|TOKEN|DATABASE_URL|BROKER_URL)\w*=", env)
    assert "STATIC_ROOT=/app/staticfiles" in env  # the runtime reads what the build collected
    assert ("COPY", "--from=build /app /app") in final


def test_no_remote_add_and_every_copy_source_exists(parsed):
    assert not [arguments for keyword, arguments in parsed if keyword == "ADD"]
    assert not [a for k, a in parsed if k in ("RUN", "COPY") and re.search(r"\b(curl|wget)\b|https?://", a)]
    for keyword, arguments in parsed:
        if keyword != "COPY" or arguments.startswith("--from="):
            continue
        *sources, _destination = shlex.split(arguments)
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: not in the repository"


def test_no_healthcheck_kubernetes_probes_instead(parsed):
    # Kubernetes ignores HEALTHCHECK and the OCI format drops it; the chart probes /healthz and /readyz.
    assert "HEALTHCHECK" not in [keyword for keyword, _ in parsed]
    chart = (REPO / "deploy" / "helm" / "rackplane" / "values.yaml").read_text()
    assert "path: /healthz" in chart and "path: /readyz" in chart


def test_containerignore_keeps_local_state_out():
    ignored = {line.strip() for line in (REPO / ".containerignore").read_text().splitlines()}
    assert {".git", ".venv", "var", ".env", "*.env", "*.sqlite3", "tests"} <= ignored
    # Nothing the build copies is ignored.
    copied = {
        shlex.split(arguments)[0]
        for keyword, arguments in instructions(CONTAINERFILE.read_text())
        if keyword == "COPY" and not arguments.startswith("--from=")
    }
    assert not copied & ignored


@pytest.mark.slow(reason="collectstatic in a subprocess")
def test_the_build_collectstatic_step_works_here(tmp_path):
    """The build's collectstatic RUN, with its settings, into a temporary STATIC_ROOT."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("RACKPLANE_", "DATABASE", "CELERY_"))}
    environ.update(
        SECRET_KEY=subprocess.check_output(
            [sys.executable, "-c", "import secrets; print(secrets.token_urlsafe(50))"], text=True
        ).strip(),
        DEBUG="0",
        ALLOWED_HOSTS="build.invalid",
        RACKPLANE_DEV_ENV="0",
        DATABASE_URL=f"sqlite:///{tmp_path / 'build.sqlite3'}",
        STATIC_ROOT=str(tmp_path / "staticfiles"),
    )
    result = subprocess.run(
        [sys.executable, str(REPO / "manage.py"), "collectstatic", "--no-input", "--verbosity", "0"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    collected = tmp_path / "staticfiles"
    assert any(collected.rglob("*.css")) and any(collected.rglob("*.css.gz"))  # compressed for WhiteNoise
    assert any(collected.glob("plotly/**/*.js"))
    assert not (tmp_path / "build.sqlite3").exists() or (tmp_path / "build.sqlite3").stat().st_size == 0
    # And the portal run with those settings serves what was collected, in its compressed forms: with the
    # finders also on, WhiteNoise let the plain source files (no .gz beside them) replace the collected ones,
    # and plotly's 4.7 MB went uncompressed in production.
    serve = (
        "import django; django.setup()\n"
        "from django.test import Client\n"
        "from core.static_assets import plotly_name\n"
        "client = Client(HTTP_HOST='build.invalid')\n"
        "for name in (plotly_name(), 'css/portal.css'):\n"
        "    response = client.get('/static/' + name, HTTP_ACCEPT_ENCODING='gzip')\n"
        "    print(name, response.status_code, response.get('Content-Encoding', 'none'))\n"
    )
    served = subprocess.run(
        [sys.executable, "-c", serve],
        env={**environ, "DJANGO_SETTINGS_MODULE": "portal.settings"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert served.returncode == 0, served.stderr
    assert [line.split()[1:] for line in served.stdout.splitlines()] == [["200", "gzip"], ["200", "gzip"]]
