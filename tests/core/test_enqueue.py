"""core.enqueue: work is sent by task name after commit; a broker that is down is logged, never raised; eager
Celery still shows a task's own errors; the previous release's task names still run (forwarded).

`broker_down` and `use_broker` are shared with tests/scheduling/test_broker_down.py.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time

import pytest
from celery import shared_task
from celery.signals import task_prerun
from kombu import pools

from core.enqueue import enqueue, send_now
from integrations.models import ConfigPush, ConfigTarget, PushStatus
from integrations.tasks import RENAMED
from portal.celery import app as celery_app
from scheduling.models import SchedulerState, SchedulingRequest
from tenancy.models import Department, QuotaSnapshot
from tenancy.services import save_department

# --- a real broker configuration, pointed where nothing listens ---------------------------------------


def _fresh_connections() -> None:
    """Forget the app's broker connections so the next send connects to the broker configured now."""
    pools.reset()
    celery_app._pool = None
    celery_app.amqp._producer_pool = None


@contextlib.contextmanager
def use_broker(url: str | None):
    """Celery as in production, sending to `url` (not eager); None: eager, the way the tests run. Restores
    the configuration (read from settings at import) afterwards."""
    saved = celery_app.conf.task_always_eager, celery_app.conf.broker_url
    celery_app.conf.task_always_eager = url is None
    if url is not None:
        celery_app.conf.broker_url = url
    _fresh_connections()
    try:
        yield
    finally:
        celery_app.conf.task_always_eager, celery_app.conf.broker_url = saved
        _fresh_connections()


@pytest.fixture
def broker_down():
    """A Redis broker URL on a local port that refuses connections (bound, never listening, so no other
    process takes it meanwhile), with Celery not eager. Yields the URL."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"redis://127.0.0.1:{closed.getsockname()[1]}/0"
        with use_broker(url):
            yield url


# --- a task that fails on its own ------------------------------------------------------------------------


class TaskBroke(Exception):
    pass


@shared_task(name="tests.core.test_enqueue.breaks")
def breaks() -> None:
    raise TaskBroke("the task's own error")


# --- sending --------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_enqueue_sends_nothing_before_commit_and_the_task_after(django_capture_on_commit_callbacks):
    SchedulingRequest.objects.create(reason="test")

    with django_capture_on_commit_callbacks() as callbacks:
        enqueue("scheduling.tasks.schedule_jobs")
        assert not SchedulerState.objects.exists()  # the pass has not run inside the transaction

    assert len(callbacks) == 1
    assert not SchedulerState.objects.exists()
    callbacks[0]()  # the commit
    state = SchedulerState.objects.get()
    assert state.last_pass_at is not None
    assert not SchedulingRequest.objects.exists()


@pytest.mark.django_db
def test_sending_an_unknown_task_name_returns_false_and_logs(caplog):
    with caplog.at_level(logging.ERROR, logger="core.enqueue"):
        assert send_now("integrations.tasks.no_such_task", 7) is False
    assert "no task named integrations.tasks.no_such_task" in caplog.text


def test_a_broker_that_is_down_is_logged_and_never_raised(broker_down, caplog):
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="core.enqueue"):
        sent = send_now("scheduling.tasks.schedule_jobs")
    elapsed = time.monotonic() - started

    assert sent is False
    assert elapsed < 3, f"a publish to a broker that refuses connections took {elapsed:.1f} s"
    assert "scheduling.tasks.schedule_jobs() not sent, the task queue could not be reached" in caplog.text
    assert "Connection refused" in caplog.text


@pytest.mark.django_db
def test_a_commit_with_the_broker_down_keeps_the_row(broker_down, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:  # raises if a callback raises
        SchedulingRequest.objects.create(reason="broker down")
        enqueue("scheduling.tasks.schedule_jobs")
    assert len(callbacks) == 1
    assert SchedulingRequest.objects.filter(reason="broker down").exists()


def test_eager_celery_still_raises_the_tasks_own_error():
    assert celery_app.conf.task_always_eager  # how the tests run: no broker configured
    with pytest.raises(TaskBroke, match="the task's own error"):
        send_now("tests.core.test_enqueue.breaks")


@pytest.mark.slow(reason="waits for the broker's socket timeouts")
def test_a_broker_that_accepts_connections_but_never_answers_does_not_hold_the_caller(caplog):
    """A broker host that is gone without closing its connections (the socket timeouts portal.celery sets,
    and one retry: PUBLISH_RETRY_POLICY). A listening socket that never answers stands in for it."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        with use_broker(f"redis://127.0.0.1:{silent.getsockname()[1]}/0"):
            sent = []
            # In a thread, so that a publish without timeouts fails this test instead of hanging it.
            sender = threading.Thread(target=lambda: sent.append(send_now("scheduling.tasks.schedule_jobs")))
            with caplog.at_level(logging.WARNING, logger="core.enqueue"):
                sender.start()
                sender.join(timeout=2 * 3 + 2)
            assert not sender.is_alive(), "a publish to a broker that never answers is still waiting"
    timeouts = celery_app.conf.broker_transport_options
    assert (timeouts["socket_connect_timeout"], timeouts["socket_timeout"]) == (2, 3)
    assert sent == [False]
    assert "could not be reached" in caplog.text


# --- the previous release's task names ------------------------------------------------------------------

OLD_NAMES = {**RENAMED, "tenancy.tasks.snapshot_quotas": "scheduling.tasks.snapshot_quotas"}
# Arguments the previous release sent under each name (its tasks took primary keys).
OLD_ARGS = {"scheduling.tasks.push_config": (0,), "scheduling.tasks.dispatch_job": (0,)}


@pytest.fixture
def tasks_run():
    """Names of the tasks that start, in order (Celery's own signal, sent in eager mode too)."""
    seen: list[str] = []

    def record(sender=None, **kwargs):
        seen.append(sender.name)

    task_prerun.connect(record, weak=False)
    yield seen
    task_prerun.disconnect(record)


def test_every_old_name_is_one_of_the_new_names_forwarded():
    assert set(OLD_NAMES.values()) <= set(celery_app.tasks)
    assert not set(OLD_NAMES) & set(OLD_NAMES.values())


@pytest.mark.django_db
@pytest.mark.parametrize(("old", "new"), sorted(OLD_NAMES.items()))
def test_a_message_under_an_old_name_runs_the_new_task(old, new, tasks_run):
    assert old in celery_app.tasks, f"{old} is no longer registered: a queued message would be lost"
    result = celery_app.tasks[old].apply_async(OLD_ARGS.get(old, ()))
    assert result.get() is True  # forwarded
    assert tasks_run == [old, new]


@pytest.mark.django_db
def test_the_old_snapshot_name_records_snapshots():
    save_department(Department(name="Research", slug="research", guaranteed_gpus=0))
    celery_app.tasks["tenancy.tasks.snapshot_quotas"].delay()
    assert QuotaSnapshot.objects.filter(department__slug="research").count() == 1


@pytest.mark.django_db
def test_an_old_push_message_with_keyword_arguments_applies_the_push(settings, tmp_path):
    settings.RACKPLANE_RENDER_DIR = tmp_path
    target = ConfigTarget.objects.get_or_create(
        name="local", defaults={"kind": "directory", "settings": {"path": "", "keep": 5}}
    )[0]
    push = ConfigPush.objects.create(target=target, payload={"files": {"a.txt": "a\n"}}, payload_hash="x")

    celery_app.tasks["scheduling.tasks.push_config"].apply_async(kwargs={"push_id": push.pk})

    push.refresh_from_db()
    assert push.status == PushStatus.SUCCEEDED, push.log
    assert (tmp_path / "current" / "a.txt").read_text() == "a\n"
