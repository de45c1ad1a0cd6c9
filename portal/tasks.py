"""Portal tasks: the demo's simulated DCGM exporters.

Beat runs `simulate_demo_telemetry` every minute (CELERY_BEAT_SCHEDULE in portal/settings.py). It does
something only where RACKPLANE_DEMO_TELEMETRY is on (`make run` writes it into var/dev.env; off by default,
so in production and in the tests): then every GPU a job holds gets a sample through the direct scrape's own
path (portal.demo.agents.record_demo_telemetry), so the demo's charts end at "now" and its idle jobs stay
idle, and
every tray's simulated node agent sends its last report again (portal.demo.agents.demo_nodes_report: a
heartbeat),
so the demo's trays do not go silent.
Off, it returns at once without touching the database.
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from core.audit import audit_context
from core.models import AuditSource
from core.task_names import SIMULATE_DEMO_TELEMETRY


@shared_task(name=SIMULATE_DEMO_TELEMETRY)
def simulate_demo_telemetry() -> dict:
    """One tick of the demo's simulated exporters; what it recorded, or that it is off."""
    if not getattr(settings, "RACKPLANE_DEMO_TELEMETRY", False):
        return {"skipped": "RACKPLANE_DEMO_TELEMETRY is off"}
    from portal.demo.agents import demo_nodes_report, record_demo_telemetry  # loaded only when it runs

    with audit_context(AuditSource.TASK):
        result = record_demo_telemetry()
        nodes = demo_nodes_report()  # the simulated node agents' minute report: the trays stay heard from
    return result.as_dict() | {"stale": result.stale, "nodes": nodes}
