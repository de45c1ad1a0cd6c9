"""Production mode (DEBUG off) refuses to start without a real SECRET_KEY and ALLOWED_HOSTS.

Settings are read once per process, so each case starts a fresh Python with a controlled environment.
"""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from portal.settings import DEV_SECRET_KEY

pytestmark = pytest.mark.slow(reason="a fresh Python per case")

REPO_ROOT = Path(__file__).resolve().parents[2]
REAL_KEY = secrets.token_urlsafe(40)  # made per run: a real, random key
SETTINGS_VARIABLES = ("SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "DATABASE_URL", "CELERY_BROKER_URL")


def start_django(tmp_path, **variables):
    env = {key: value for key, value in os.environ.items() if key not in SETTINGS_VARIABLES}
    env.update(
        DJANGO_SETTINGS_MODULE="portal.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'settings-test.sqlite3'}",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])),
    )
    env.update(variables)
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            "print('DEBUG', settings.DEBUG, 'HOSTS', ','.join(settings.ALLOWED_HOSTS))",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_refused(result, message):
    assert result.returncode != 0, result.stdout
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr


@pytest.mark.parametrize(
    "variables",
    [
        pytest.param({}, id="missing"),
        pytest.param({"SECRET_KEY": ""}, id="empty"),
        pytest.param({"SECRET_KEY": DEV_SECRET_KEY}, id="development-default"),
        pytest.param({"SECRET_KEY": "too-short-a-key"}, id="short"),
    ],
)
def test_production_refuses_without_a_real_secret_key(tmp_path, variables):
    result = start_django(tmp_path, DEBUG="0", ALLOWED_HOSTS="rackplane.example.com", **variables)
    assert_refused(result, "SECRET_KEY is missing or is the development default")


def test_production_refuses_without_allowed_hosts(tmp_path):
    result = start_django(tmp_path, DEBUG="0", SECRET_KEY=REAL_KEY)
    assert_refused(result, "ALLOWED_HOSTS is empty")


def test_debug_off_is_the_default(tmp_path):
    result = start_django(tmp_path)
    assert_refused(result, "SECRET_KEY is missing")


def test_production_starts_with_a_real_key_and_hosts(tmp_path):
    result = start_django(
        tmp_path, DEBUG="0", SECRET_KEY=REAL_KEY, ALLOWED_HOSTS="rackplane.example.com,portal.example.com"
    )
    assert result.returncode == 0, result.stderr
    assert "DEBUG False HOSTS rackplane.example.com,portal.example.com" in result.stdout


def test_development_mode_starts_with_embedded_defaults(tmp_path):
    result = start_django(tmp_path, DEBUG="1")
    assert result.returncode == 0, result.stderr
    assert "DEBUG True HOSTS 127.0.0.1,localhost" in result.stdout


def test_a_sites_own_jit_option_in_database_url_wins(tmp_path):
    """The portal turns PostgreSQL's JIT off unless DATABASE_URL's `options` says otherwise."""
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.DATABASES['default']['OPTIONS'])"
    )
    env = {key: value for key, value in os.environ.items() if key not in SETTINGS_VARIABLES}
    env.update(DJANGO_SETTINGS_MODULE="portal.settings", DEBUG="1", PYTHONPATH=str(REPO_ROOT))
    seen = {}
    for name, url in {
        "default": "postgres://rp@127.0.0.1:5432/rp",
        "own": "postgres://rp@127.0.0.1:5432/rp?options=-c%20jit%3Don",
    }.items():
        result = subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO_ROOT,
            env={**env, "DATABASE_URL": url},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        seen[name] = result.stdout
    assert "'options': '-c jit=off'" in seen["default"]
    assert "jit=on" in seen["own"] and "jit=off" not in seen["own"]
