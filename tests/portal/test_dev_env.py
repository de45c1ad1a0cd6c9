"""The development environment file `make run` writes (var/dev.env) puts manage.py in development mode; the
shell's own variables win over it, so DEBUG=0 still refuses a missing SECRET_KEY. (RACKPLANE_DEV_ENV=0
ignoring var/dev.env is checked in a clone that has one: tests/test_readme_commands.py.)

Settings are read once per process, so each case starts a fresh Python with a controlled environment.
"""

import subprocess
import sys

import pytest

from tests.fresh_clone import REPO_ROOT, shell_env

pytestmark = pytest.mark.slow(reason="a fresh Python per case")

PRINT_SETTINGS = (
    "import django; django.setup(); from django.conf import settings; "
    "print(settings.DEBUG, settings.CELERY_TASK_ALWAYS_EAGER, settings.CELERY_BROKER_TRANSPORT_OPTIONS)"
)


@pytest.fixture
def dev_env(tmp_path):
    path = tmp_path / "dev.env"
    path.write_text("# as scripts/run.sh writes it\nDEBUG=1\nCELERY_BROKER_URL=filesystem://\n")
    return path


def start_django(tmp_path, **variables):
    env = shell_env(
        DJANGO_SETTINGS_MODULE="portal.settings", DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}"
    )
    env.update(variables)
    return subprocess.run(
        [sys.executable, "-c", PRINT_SETTINGS],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_file_turns_on_development_mode_and_the_filesystem_broker(tmp_path, dev_env):
    result = start_django(tmp_path, RACKPLANE_DEV_ENV=str(dev_env))
    assert result.returncode == 0, result.stderr
    debug, eager, options = result.stdout.split(" ", 2)
    assert (debug, eager) == ("True", "False")
    assert "'data_folder_in': " in options and "/var/celery/queue'" in options


def test_the_shell_environment_wins_over_the_file(tmp_path, dev_env):
    result = start_django(tmp_path, RACKPLANE_DEV_ENV=str(dev_env), DEBUG="0")
    assert result.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY is missing" in result.stderr
