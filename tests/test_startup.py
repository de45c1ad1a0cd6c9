"""What every Python process of the portal pays at start-up (web, Celery worker and beat, manage.py, the
suite's many subprocesses): `django.setup()` imports no `kubernetes` package and builds no CEL parser; both
wait for their first use (integrations/kubernetes/client.py, validate.py). Measured: 0.5 s of each start."""

import pytest

from tests.processes import fresh_python

SCRIPT = """
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
import django
django.setup()
from integrations.kubernetes import validate
print("kubernetes" in sys.modules, validate._cel_env.cache_info().currsize)
"""


@pytest.mark.slow(reason="a fresh Python process")
def test_django_setup_leaves_the_kubernetes_client_and_the_cel_parser_for_their_first_use(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "DEBUG": "1", "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}
    result = fresh_python(SCRIPT, env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "0"]
