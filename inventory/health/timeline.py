"""The health timeline: what a tray's (or a GPU's) page shows of its events, decisions, service marks and
active checks, filtered by who may see them (visible_to)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from inventory.choices import ActionKind
from inventory.models import ComputeTray, Gpu, HealthAction, HealthCheckResult, HealthEvent, ServiceRecord

TIMELINE_RANGES = {
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
    "all": None,
}
TIMELINE_DEFAULT = "7d"
TIMELINE_LIMIT = 200


@dataclass(frozen=True)
class TimelineEntry:
    at: datetime
    what: str  # "event" | "action" | "service"
    item: object


def timeline(
    user,
    *,
    tray: ComputeTray | None = None,
    gpu: Gpu | None = None,
    range_key: str = TIMELINE_DEFAULT,
    now: datetime | None = None,
) -> tuple[list[TimelineEntry], str]:
    """Events, actions and service marks of a tray (or one GPU: its events, its tray's actions about them
    and the marks naming it), newest first, within the range; returns the entries and the range used.
    Visibility: visible_to(user)."""
    if range_key not in TIMELINE_RANGES:
        range_key = TIMELINE_DEFAULT
    span = TIMELINE_RANGES[range_key]
    since = (now or timezone.now()) - span if span else None
    events = HealthEvent.objects.visible_to(user).select_related("gpu")
    actions = HealthAction.objects.visible_to(user).select_related("event", "actor", "tray")
    marks = ServiceRecord.objects.visible_to(user).select_related("actor", "tray")
    if gpu is not None:
        events = events.filter(Q(gpu=gpu) | Q(gpu_uuid=gpu.uuid))
        actions = actions.filter(Q(event__gpu=gpu) | Q(event__gpu_uuid=gpu.uuid))
        marks = marks.filter(Q(gpu=gpu) | Q(gpu_uuid=gpu.uuid))
    elif tray is not None:
        events = events.filter(tray=tray)
        marks = marks.filter(tray=tray)
        partition_actions = Q(
            partition_id=tray.partition_id, kind__in=[ActionKind.DEGRADE, ActionKind.RECOVER]
        )
        actions = (
            actions.filter(Q(tray=tray) | partition_actions)
            if tray.partition_id
            else actions.filter(tray=tray)
        )
    if since is not None:
        events = events.filter(last_seen__gte=since)
        actions = actions.filter(created_at__gte=since)
        marks = marks.filter(created_at__gte=since)
    entries = [
        TimelineEntry(e.last_seen, "event", e) for e in events.order_by("-last_seen", "-pk")[:TIMELINE_LIMIT]
    ]
    entries += [
        TimelineEntry(a.created_at, "action", a)
        for a in actions.order_by("-created_at", "-pk")[:TIMELINE_LIMIT]
    ]
    entries += [
        TimelineEntry(m.created_at, "service", m)
        for m in marks.order_by("-created_at", "-pk")[:TIMELINE_LIMIT]
    ]
    entries.sort(key=lambda entry: entry.at, reverse=True)
    return entries[:TIMELINE_LIMIT], range_key


def latest_checks(user, tray: ComputeTray) -> list[HealthCheckResult]:
    """The last result of each active check on the tray, by name."""
    seen, out = set(), []
    for result in (
        HealthCheckResult.objects.visible_to(user).filter(tray=tray).order_by("name", "-started", "-pk")
    ):
        if result.name not in seen:
            seen.add(result.name)
            out.append(result)
    return out
