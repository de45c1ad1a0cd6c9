"""What the tray and GPU pages show besides the object itself: the health timeline and the tray's checks.
Shared by portal.racks (the pages) and portal.tray_actions (a refused action renders the tray page again)."""

from __future__ import annotations

from inventory import health, selectors
from inventory.services import mark_silent


def health_context(request, **subject) -> dict:
    """The health timeline (events and decisions, newest first) in the range `?health=24h|7d|30d|all`."""
    entries, range_key = health.timeline(request.user, range_key=request.GET.get("health", ""), **subject)
    return {
        "health_entries": entries,
        "health_range": range_key,
        "health_ranges": [(key, label) for key, label in HEALTH_RANGE_LABELS.items()],
        "health_limit": health.TIMELINE_LIMIT,
    }


HEALTH_RANGE_LABELS = {"24h": "24 hours", "7d": "7 days", "30d": "30 days", "all": "All"}


def tray_context(request, tray) -> dict:
    mark_silent([tray])  # the node stopped reporting (inventory.services): tray.silent, tray.silent_for
    return {
        **selectors.tray_context(request.user, tray),
        **health_context(request, tray=tray),
        "health_checks": health.latest_checks(request.user, tray),
    }
