"""Rackplane's own Prometheus figures, read from the database when /metrics is scraped (core.metrics).

Each source is a fixed handful of aggregate queries, whatever the number of racks, GPUs or jobs (the quota
figures are scheduling.usage.department_positions, the same the dashboards show). The project shell holds
them because they read every app. Names and labels: docs/metrics.md; deploy/grafana/rackplane.json draws them.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from django.db.models import Count, Max, Q
from django.utils import timezone

from core.metrics import ScrapeCollector, counter, gauge, single
from core.models import Notification, NotificationStatus
from integrations.models import ACTIVE_PUSH_STATES, ConfigPush, PushStatus
from inventory.choices import GpuHealth, HealthKind, TrayState
from inventory.models import ComputeTray, Gpu, HealthEvent
from inventory.selectors import tray_state_counts
from inventory.staleness import silent_policy, silent_q
from scheduling.choices import JobState, StrandedCause
from scheduling.models import Job, SchedulerState, SchedulingRequest
from scheduling.usage import department_positions

# A GPU that is in no tray (removed, kept on record) is counted with this tray state.
NO_TRAY = "removed"


def _zeros(*label_sets: list[str]) -> dict[tuple, int]:
    """Every combination of the known label values at 0, so a series exists before anything is counted."""
    combos: list[tuple] = [()]
    for values in label_sets:
        combos = [(*combo, value) for combo in combos for value in values]
    return dict.fromkeys(combos, 0)


def gpu_figures():
    counts = _zeros([*TrayState.values, NO_TRAY], GpuHealth.values)
    for row in Gpu.objects.order_by().values("tray__state", "health").annotate(n=Count("pk")):
        counts[(row["tray__state"] or NO_TRAY, row["health"])] = row["n"]
    yield gauge(
        "rackplane_gpus",
        "GPUs by the state of their compute tray (removed: in no tray) and their reported health.",
        ["tray_state", "health"],
        counts,
    )


def department_figures():
    positions = department_positions()
    yield single(
        "rackplane_schedulable_gpus",
        "GPUs a job may be given: in a tray that is up and not unhealthy.",
        positions.capacity,
    )
    figures = {
        "guaranteed": ("Its guaranteed GPU quota.", lambda p: p.guaranteed),
        "in_use": ("GPUs held by its running jobs.", lambda p: p.in_use),
        "borrowed": ("GPUs its running jobs hold beyond its guarantee (preemptible).", lambda p: p.borrowed),
        "idle": ("GPUs allocated to its running jobs, idle for the whole idle window.", lambda p: p.idle),
        "pending": ("GPUs its pending jobs ask for.", lambda p: p.pending_demand),
        "fair_share": ("Its fair share of the schedulable GPUs.", lambda p: p.fair_share),
        "starved": ("GPUs within its guarantee that it asks for and does not hold.", lambda p: p.starved),
    }
    for name, (documentation, value) in figures.items():
        yield gauge(
            f"rackplane_department_{name}_gpus",
            f"Per department: {documentation}",
            ["department"],
            {(p.department.slug,): value(p) for p in positions},
        )
    yield gauge(
        "rackplane_department_jobs",
        "Per department: its running (incl. starting) and pending jobs.",
        ["department", "state"],
        {
            **{(p.department.slug, "running"): p.running_jobs for p in positions},
            **{(p.department.slug, "pending"): p.pending_jobs for p in positions},
        },
    )


def job_figures():
    counts = _zeros(JobState.values)
    for row in Job.objects.order_by().values("state").annotate(n=Count("pk")):
        counts[(row["state"],)] = row["n"]
    yield gauge("rackplane_jobs", "Jobs by state (finished ones while they are kept).", ["state"], counts)


def scheduler_figures():
    state = SchedulerState.objects.filter(pk=1).first()
    yield single(
        "rackplane_scheduling_requests_waiting",
        "Reasons to run a scheduling pass not yet answered by one.",
        SchedulingRequest.objects.count(),
    )
    if state is None or state.last_pass_at is None:
        return  # no pass has run yet: no figures rather than zeros that look like a pass
    summary = state.last_summary or {}
    yield single(
        "rackplane_scheduler_last_pass_timestamp_seconds",
        "When the last scheduling pass ran (Unix time).",
        state.last_pass_at.timestamp(),
    )
    yield single(
        "rackplane_scheduler_last_pass_duration_seconds",
        "How long the last scheduling pass took.",
        (state.last_pass_ms or 0) / 1000,
    )
    yield single(
        "rackplane_scheduler_last_pass_decisions",
        "Decisions the last scheduling pass made.",
        summary.get("decisions", 0),
    )
    yield gauge(
        "rackplane_scheduler_last_pass_jobs",
        "Jobs the last scheduling pass started, preempted, or left waiting.",
        ["outcome"],
        {(outcome,): summary.get(outcome, 0) for outcome in ("started", "preempted", "waiting")},
    )
    if summary.get("stranded"):
        yield from stranded_figures(summary["stranded"])


def stranded_figures(stranded: dict):
    """Stranded NVLink capacity as the last pass computed it (scheduling.engine.stranded). Fleet figures
    only, no rack label: at 10,000 racks one series per rack and cause is 40,000 series, and a top-N label
    would make series come and go with every pass; the dashboard lists the worst racks instead."""
    yield single(
        "rackplane_stranded_free_gpus",
        "Free GPUs after the last scheduling pass (schedulable, held by no job, not held out).",
        stranded["free_gpus"],
    )
    yield gauge(
        "rackplane_stranded_gpus",
        "Free GPUs no job waiting after the last pass can be given under the engine's placement rules, by "
        "cause (0 when nothing waits).",
        ["cause"],
        {(cause,): stranded["by_cause"].get(cause, 0) for cause in StrandedCause.values},
    )
    yield gauge(
        "rackplane_largest_gang_gpus",
        "The most GPUs one job could be given now after the last pass: in one NVLink partition, or one rack.",
        ["scope"],
        {("partition",): stranded["largest_partition_gang"], ("rack",): stranded["largest_rack_gang"]},
    )
    yield single(
        "rackplane_stranded_racks",
        "Racks with at least one stranded GPU after the last scheduling pass.",
        stranded["racks_stranding"],
    )


def push_figures():
    rows = (
        ConfigPush.objects.order_by().values("target__name", "target__kind", "status").annotate(n=Count("pk"))
    )
    finished: dict[tuple, int] = {}
    active: dict[tuple, int] = {}
    for row in rows:
        target = (row["target__name"], row["target__kind"])
        if row["status"] in ACTIVE_PUSH_STATES:
            active[(*target, row["status"])] = row["n"]
        else:
            finished[(*target, row["status"])] = row["n"]
    for target in {key[:2] for key in (*finished, *active)}:
        for status in (PushStatus.SUCCEEDED, PushStatus.FAILED, PushStatus.SUPERSEDED):
            finished.setdefault((*target, status.value), 0)
        for status in ACTIVE_PUSH_STATES:
            active.setdefault((*target, status.value), 0)
    yield counter(
        "rackplane_config_pushes_finished",
        "Configuration pushes per target that ended, by outcome (succeeded, failed, superseded).",
        ["target", "kind", "outcome"],
        finished,
    )
    yield gauge(
        "rackplane_config_pushes_active",
        "Configuration pushes per target waiting (queued) or being applied (running).",
        ["target", "kind", "status"],
        active,
    )


def discovery_figures():
    now = timezone.now()
    hour_ago = now - timedelta(hours=1)
    silent_after = silent_policy().after
    trays = ComputeTray.objects.order_by()
    totals = trays.aggregate(
        reported_last_hour=Count("pk", filter=Q(last_report_at__gte=hour_ago)),
        silent=Count("pk", filter=silent_q(now - silent_after)),
        never_reported=Count("pk", filter=Q(last_report_at__isnull=True)),
        with_problems=Count("pk", filter=~Q(fabric_problems=[])),
        last_report=Max("last_report_at"),
    )
    states = {(state,): n for state, n in trays.aggregate(**tray_state_counts()).items()}
    yield gauge("rackplane_trays", "Compute trays by state.", ["state"], states)
    yield single(
        "rackplane_discovery_trays_reported_last_hour",
        "Compute trays whose node agent sent a discovery report in the last hour.",
        totals["reported_last_hour"],
    )
    yield single(
        "rackplane_discovery_trays_never_reported",
        "Compute trays no discovery report has come from yet.",
        totals["never_reported"],
    )
    yield single(
        "rackplane_discovery_trays_silent",
        "Compute trays whose node reported before but not within HealthSettings.node_silent_after_s "
        "(the node-silent rule holds new work there, or warns).",
        totals["silent"],
    )
    yield single(
        "rackplane_discovery_trays_with_problems",
        "Compute trays whose last discovery report had fabric problems (cannot join an NVLink partition).",
        totals["with_problems"],
    )
    if totals["last_report"] is not None:
        yield single(
            "rackplane_discovery_last_report_timestamp_seconds",
            "When the newest discovery report came in (Unix time).",
            totals["last_report"].timestamp(),
        )


def health_figures():
    hour_ago = timezone.now() - timedelta(hours=1)
    counts = _zeros(HealthKind.values)
    rows = HealthEvent.objects.order_by().filter(last_seen__gte=hour_ago).values("kind")
    for row in rows.annotate(n=Count("pk")):
        counts[(row["kind"],)] = row["n"]
    yield gauge(
        "rackplane_health_events_last_hour",
        "Health events (faults, repeats folded) seen in the last hour, by kind.",
        ["kind"],
        counts,
    )


def notification_figures():
    counts = Counter(dict.fromkeys(NotificationStatus.values, 0))
    for row in Notification.objects.order_by().values("status").annotate(n=Count("pk")):
        counts[row["status"]] = row["n"]
    yield gauge(
        "rackplane_notifications",
        "Notifications by status (pending: waiting for an attempt or a retry; failed: given up).",
        ["status"],
        {(status,): n for status, n in counts.items()},
    )


collector = ScrapeCollector(
    {
        "gpus": gpu_figures,
        "departments": department_figures,
        "jobs": job_figures,
        "scheduler": scheduler_figures,
        "pushes": push_figures,
        "discovery": discovery_figures,
        "health": health_figures,
        "notifications": notification_figures,
    }
)
