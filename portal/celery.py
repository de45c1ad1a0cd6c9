"""The Celery application. Without CELERY_BROKER_URL tasks run eagerly in the calling process; `make run`
starts a worker and a beat on the filesystem broker (portal.settings, scripts/run.sh), production on Redis.

Work is started by task name through core.enqueue. Names of the previous release stay registered and
forward to the new ones (integrations.tasks.RENAMED, scheduling.tasks), so messages queued before an
upgrade do not crash a worker.
"""

import os

from celery import Celery
from celery.schedules import schedule
from celery.signals import beat_init

from core.logs import json_logs_in_workers

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

# Redis socket timeouts, in seconds (CELERY_BROKER_TRANSPORT_OPTIONS may override them). Without them a
# publish to a broker host that is gone waits for the operating system (minutes; forever on a connection
# that stays half-open): a request would hang on its on-commit message. The read timeout stays above the
# worker's BRPOP wait (1 s).
BROKER_SOCKET_TIMEOUTS = {"socket_connect_timeout": 2, "socket_timeout": 3}

app = Celery("rackplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# The request id travels with the tasks a request sends; JSON logs in workers too (core.logs).
json_logs_in_workers(app)


@app.on_after_configure.connect
def _bounded_broker_waits(sender, **kwargs):
    sender.conf.broker_transport_options = {
        **BROKER_SOCKET_TIMEOUTS,
        **(sender.conf.broker_transport_options or {}),
    }


@beat_init.connect
def _entries_never_run_are_due(sender, **kwargs):
    """A fixed-interval entry the beat has never sent (a fresh schedule file, a new entry) is due at once.

    Celery otherwise waits one full interval from start: after `make run` the first quota snapshot would
    come 5 minutes after the seed and the first periodic pass a minute later. A beat restarted on its
    schedule file keeps its timing.
    """
    for entry in sender.scheduler.schedule.values():
        if entry.total_run_count == 0 and type(entry.schedule) is schedule:
            entry.last_run_at = entry.last_run_at - entry.schedule.run_every
