"""Every Celery task's name, once: the tasks register under these, everything that sends one (core.enqueue,
the beat's CELERY_BEAT_SCHEDULE in portal.settings) names it from here.

Work is started by name, never by importing the task (a layer does not import the one that holds it), so a
misspelt name would only show as a message no worker knows. `check` (a Django system check, registered in
core.apps) makes it a start-up error: every name here is a registered task, and every beat entry names one
of them.

No Django import: portal.settings reads this before Django is set up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# core.tasks
DELIVER_NOTIFICATION = "core.tasks.deliver_notification"
RETRY_NOTIFICATIONS = "core.tasks.retry_notifications"
# inventory.tasks
FLUSH_HEARTBEATS = "inventory.tasks.flush_heartbeats"
# tenancy.tasks
SCRAPE_EXPORTER = "tenancy.tasks.scrape_exporter"
SCRAPE_EXPORTERS = "tenancy.tasks.scrape_exporters"
PRUNE_TELEMETRY = "tenancy.tasks.prune_telemetry"
# scheduling.tasks
SCHEDULE_JOBS = "scheduling.tasks.schedule_jobs"
SCHEDULE_JOBS_PERIODICALLY = "scheduling.tasks.schedule_jobs_periodically"
SNAPSHOT_QUOTAS = "scheduling.tasks.snapshot_quotas"
KEEP_IDLE_COUNTS = "scheduling.tasks.keep_idle_counts"
WHATIF_PREPARE = "scheduling.tasks.whatif_prepare"
WHATIF_REPLAY = "scheduling.tasks.whatif_replay"
# integrations.tasks
PUSH_CONFIG = "integrations.tasks.push_config"
RETRY_STALE_PUSHES = "integrations.tasks.retry_stale_pushes"
DISPATCH_JOB = "integrations.tasks.dispatch_job"
SYNC_JOBS = "integrations.tasks.sync_jobs"
SIGNAL_JOB = "integrations.tasks.signal_job"
SYNC_TRAY = "integrations.tasks.sync_tray_state"
FOLLOW_ACTIVE_PLANS = "integrations.tasks.follow_active_plans"
RUN_PLAN_WINDOWS = "integrations.tasks.run_plan_windows"
RECARVE_RACK = "integrations.tasks.recarve_rack"
REPORT_NODES = "integrations.tasks.report_simulated_nodes"
WATCH_REMOVALS = "integrations.tasks.watch_removals"
# portal.tasks
SIMULATE_DEMO_TELEMETRY = "portal.tasks.simulate_demo_telemetry"

TASKS = frozenset(
    {
        DELIVER_NOTIFICATION,
        RETRY_NOTIFICATIONS,
        FLUSH_HEARTBEATS,
        SCRAPE_EXPORTER,
        SCRAPE_EXPORTERS,
        PRUNE_TELEMETRY,
        SCHEDULE_JOBS,
        SCHEDULE_JOBS_PERIODICALLY,
        SNAPSHOT_QUOTAS,
        KEEP_IDLE_COUNTS,
        WHATIF_PREPARE,
        WHATIF_REPLAY,
        PUSH_CONFIG,
        RETRY_STALE_PUSHES,
        DISPATCH_JOB,
        SYNC_JOBS,
        SIGNAL_JOB,
        SYNC_TRAY,
        FOLLOW_ACTIVE_PLANS,
        RUN_PLAN_WINDOWS,
        RECARVE_RACK,
        REPORT_NODES,
        WATCH_REMOVALS,
        SIMULATE_DEMO_TELEMETRY,
    }
)

# Names of the previous release: a task stays registered under each and forwards what is still queued
# under it to the new name (integrations.tasks, scheduling.tasks), so an upgrade does not crash a worker.
OLD_SNAPSHOT_QUOTAS = "tenancy.tasks.snapshot_quotas"
RENAMED = {
    "scheduling.tasks.push_config": PUSH_CONFIG,
    "scheduling.tasks.retry_stale_pushes": RETRY_STALE_PUSHES,
    "scheduling.tasks.dispatch_job": DISPATCH_JOB,
    "scheduling.tasks.sync_jobs": SYNC_JOBS,
    "inventory.tasks.follow_active_plans": FOLLOW_ACTIVE_PLANS,
    OLD_SNAPSHOT_QUOTAS: SNAPSHOT_QUOTAS,
}


def problems(registered: Iterable[str], beat_schedule: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What is wrong between the table, the registered tasks and the beat's entries, in plain words."""
    known = set(registered)
    found = [
        f"task {name!r} is in core.task_names but no task is registered under that name"
        for name in sorted(TASKS | RENAMED.keys())
        if name not in known
    ]
    found += [
        f"beat entry {entry!r} sends {spec.get('task')!r}, which is not a task of core.task_names"
        for entry, spec in beat_schedule.items()
        if spec.get("task") not in TASKS
    ]
    return found


def check(app_configs=None, **kwargs) -> list:
    """The Django system check: every task of the table registered (the tasks modules imported, as a worker
    does), every beat entry naming one."""
    from celery import current_app
    from django.conf import settings
    from django.core import checks
    from django.utils.module_loading import autodiscover_modules

    # Each app's tasks module, as Celery's autodiscovery imports them in a worker. Not through Celery's
    # loader: its Django fixup runs the system checks when it imports them, which would run this again.
    autodiscover_modules("tasks")
    return [
        checks.Error(problem, hint="name tasks from core.task_names", id="rackplane.E001")
        for problem in problems(current_app.tasks.keys(), getattr(settings, "CELERY_BEAT_SCHEDULE", {}))
    ]
