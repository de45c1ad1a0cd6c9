"""The versions page's rows, the admin banner's removals, and the notification sent once per target before a
removal bites (integrations.versions holds the dated table and the rules; this reads the targets)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from core.models import NotificationEvent
from core.notifications.recording import notify
from integrations import registry, versions
from integrations.models import ConfigTarget

NOTIFIED = "removals_notified"  # facts key: the removal keys this target's admins were told of


@dataclass(frozen=True)
class TargetVersions:
    target: ConfigTarget
    label: str
    seen: list[tuple[str, str]]
    versioned: bool  # its kind has version facts to read (a folder of files has none)
    checked_at: str
    uses: str
    touches: list[versions.Touch]


def target_versions(today: date | None = None) -> list[TargetVersions]:
    """Every target (enabled or not): what it runs, what Rackplane uses there, the removals touching it."""
    today = today or timezone.localdate()
    rows = []
    for target in ConfigTarget.objects.order_by("name").only(
        "pk", "name", "kind", "enabled", "facts", "settings"
    ):
        facts = target.facts or {}
        kind = registry.get(target.kind) if registry.is_kind(target.kind) else None
        rows.append(
            TargetVersions(
                target=target,
                label=registry.label(target.kind),
                seen=versions.seen(kind.version_facts if kind else (), facts),
                versioned=bool(kind and kind.version_facts),
                checked_at=str(facts.get("checked_at", ""))[:16].replace("T", " "),
                uses=kind.uses(facts, target.settings or {}) if kind else "",
                touches=_touches(target.kind, facts, today),
            )
        )
    return rows


def _touches(kind: str, facts: dict, today: date) -> list[versions.Touch]:
    removals = registry.get(kind).removals if registry.is_kind(kind) else ()
    return versions.touches(removals, facts, today)


def all_removals() -> list[tuple[str, versions.Removal]]:
    """(kind label, removal) of every kind's table, for the page."""
    return [(registry.label(kind.name), removal) for kind in registry.kinds() for removal in kind.removals]


def biting(today: date | None = None) -> list[tuple[str, versions.Touch]]:
    """(target name, touch) of each removal that bites soon on an enabled target: the banner's content."""
    today = today or timezone.localdate()
    out = []
    for name, kind, facts in ConfigTarget.objects.filter(enabled=True).values_list("name", "kind", "facts"):
        out.extend((name, touch) for touch in _touches(kind, facts or {}, today) if touch.bites)
    return out


def notify_biting(today: date | None = None) -> list[str]:
    """Tell the subscribers of REMOVAL_AHEAD once per target and removal that bites soon; the keys told are
    kept in the target's facts (row-locked, so two beats never tell twice). Returns what was told."""
    today = today or timezone.localdate()
    told = []
    for pk in ConfigTarget.objects.filter(enabled=True).values_list("pk", flat=True):
        with transaction.atomic():
            target = ConfigTarget.objects.select_for_update().filter(pk=pk).first()
            if target is None:
                continue
            facts = dict(target.facts or {})
            done = set(facts.get(NOTIFIED) or [])
            touching = _touches(target.kind, facts, today)
            # A removal no longer needing action is forgotten: should it come back, it is told again.
            done &= {touch.removal.key for touch in touching if touch.needs_action}
            for touch in touching:
                removal = touch.removal
                if not touch.bites or removal.key in done:
                    continue
                due = removal.due.isoformat() if removal.due else "now"
                notify(
                    NotificationEvent.REMOVAL_AHEAD,
                    f"{target.name}: {removal.what} is removed in {removal.removed_in} ({due}): "
                    f"{removal.what_to_do}",
                    {
                        "target": target.name,
                        "removal": removal.key,
                        "removed_in": removal.removed_in,
                        "due": due,
                        "what_to_do": removal.what_to_do,
                    },
                    scope=f"target:{target.name}",
                    link=reverse("integrations:versions"),
                )
                done.add(removal.key)
                told.append(f"{target.name}: {removal.key}")
            if done != set(facts.get(NOTIFIED) or []):
                facts[NOTIFIED] = sorted(done)
                ConfigTarget.objects.filter(pk=pk).update(facts=facts)
    return told
