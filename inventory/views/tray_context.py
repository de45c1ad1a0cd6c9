"""What the tray and GPU pages show besides the object itself: the health timeline and the tray's checks.
Shared by inventory.views.racks (the GPU and tray pages and tray_page, with which
integrations.views.tray_actions
renders the tray page again after a refused action)."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _

from inventory import selectors
from inventory.choices import MigMode
from inventory.health.service import latest_record
from inventory.health.timeline import TIMELINE_LIMIT, latest_checks, timeline
from inventory.staleness import mark_silent


def health_context(request, **subject) -> dict:
    """The health timeline (events and decisions, newest first) in the range `?health=24h|7d|30d|all`."""
    entries, range_key = timeline(request.user, range_key=request.GET.get("health", ""), **subject)
    return {
        "health_entries": entries,
        "health_range": range_key,
        "health_ranges": [(key, label) for key, label in HEALTH_RANGE_LABELS.items()],
        "health_limit": TIMELINE_LIMIT,
    }


HEALTH_RANGE_LABELS = {"24h": _("24 hours"), "7d": _("7 days"), "30d": _("30 days"), "all": _("All")}


def tray_context(request, tray) -> dict:
    mark_silent([tray])  # the node stopped reporting (inventory.staleness): tray.silent, tray.silent_for
    shown = selectors.tray_context(request.user, tray)
    return {
        **shown,
        # a GPU in MIG mode: the page loads its slices and who holds them (scheduling's fragment)
        "mig_gpus": any(gpu.mig_mode == MigMode.ENABLED for gpu in shown.get("gpus") or ()),
        **health_context(request, tray=tray),
        "health_checks": latest_checks(request.user, tray),
        "service_record": latest_record(tray),  # its service / RMA mark (inventory.health.service)
    }
