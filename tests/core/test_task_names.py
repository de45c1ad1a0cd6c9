"""One table of Celery task names (core.task_names), checked at start-up: every name in it is a registered
task, every beat entry names one of them. A fresh process that imported no tasks module finds them too
(tests/core/test_task_discovery.py)."""

from celery import current_app
from django.conf import settings
from django.core import checks

from core import task_names


def test_every_name_is_a_registered_task_and_every_beat_entry_names_one():
    assert task_names.check() == []
    assert set(current_app.tasks) >= task_names.TASKS
    assert {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()} <= task_names.TASKS


def test_the_check_runs_with_the_system_checks():
    assert task_names.check in checks.registry.registry.get_checks()
    assert checks.run_checks() == []


def test_an_unknown_task_name_is_reported(monkeypatch):
    monkeypatch.setattr(task_names, "TASKS", task_names.TASKS | {"integrations.tasks.no_such_task"})
    errors = task_names.check()
    assert [error.id for error in errors] == ["rackplane.E001"]
    unknown = "'integrations.tasks.no_such_task' is in core.task_names but no task is registered"
    assert unknown in errors[0].msg


def test_a_beat_entry_naming_an_unknown_task_is_reported(monkeypatch):
    typo = {"task": "integrations.tasks.sync_job", "schedule": 30.0}
    beat = {**settings.CELERY_BEAT_SCHEDULE, "typo": typo}
    monkeypatch.setattr(settings, "CELERY_BEAT_SCHEDULE", beat)
    errors = task_names.check()
    assert [error.msg for error in errors] == [
        "beat entry 'typo' sends 'integrations.tasks.sync_job', which is not a task of core.task_names"
    ]


def test_old_names_still_forward():
    assert set(current_app.tasks) >= set(task_names.RENAMED)
    assert set(task_names.RENAMED.values()) <= task_names.TASKS
