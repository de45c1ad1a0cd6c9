"""A web process has imported no tasks module when it first enqueues: the task is still found by name, and
the start-up check of core.task_names finds every task of the table."""

import pytest

from tests.processes import fresh_python

SCRIPT = """
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
import django
django.setup()
from celery import current_app
from core.enqueue import send_now
assert not any(name in sys.modules for name in ("scheduling.tasks", "integrations.tasks")), "imported early"
assert "integrations.tasks.sync_jobs" not in current_app.tasks
print(send_now("integrations.tasks.follow_active_plans"), send_now("no.such.task"))
from core.task_names import check
print(len(check()))  # the start-up check imports the tasks modules itself: every name of the table found
"""


@pytest.mark.slow(reason="a fresh Python process")
def test_a_process_that_imported_no_tasks_finds_them_by_name(migrated_sqlite):
    env = {"PATH": "/usr/bin:/bin", "DEBUG": "1", "DATABASE_URL": f"sqlite:///{migrated_sqlite}"}
    result = fresh_python(SCRIPT, env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "False", "0"]
