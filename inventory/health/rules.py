"""Health rules: every enabled `HealthRule` an event matches decides (drain, degrade, warn), under the
circuit breaker and dry run.

Steps 2 to 5 of the loop (the package docstring): `judge` records observations as events
(inventory.health.events) and acts on the rules they match; a drain goes through the circuit breaker
(`breaker_percent` % of the trays per `breaker_window_s`, then `breaker_tripped` and every further drain
blocked until `reset_breaker`) and repeat offenders go to "needs service"; a degrade marks the tray's NVLink
partition and `consider_recovery` clears it once the partition is quiet. With `HealthSettings.dry_run`
every decision is recorded as "would ..." and nothing else changes. Also the default rules
(`seed_default_rules`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.dispatch import Signal

from core.models import NotificationEvent
from core.notifications.recording import notify
from inventory.choices import QUARANTINE_ACTIONS, ActionKind, RuleAction, TrayState
from inventory.discovery import rule_defaults
from inventory.health.actions import (
    REASON_LIMIT,
    REASON_PREFIX,
    drain_reason,
    owned_by_rules,
    record_action,
    repeat_reason,
    rule_reason,
    set_state,
    state_words,
)
from inventory.health.events import HealthOutcome, Observation, record_event, timestamp, where
from inventory.models import (
    ComputeTray,
    Gpu,
    HealthAction,
    HealthEvent,
    HealthRule,
    HealthSettings,
    NVLinkPartition,
)

# A fault older than this when it is reported is recorded as history; no rule acts on it.
STALE_AFTER = timedelta(hours=24)
# Sent on commit when the circuit breaker tripped: sender=HealthSettings, at, note.
breaker_tripped = Signal()

_ACTION_ORDER = {RuleAction.DRAIN: 0, RuleAction.DEGRADE: 1, RuleAction.WARN: 2}


@dataclass
class RulesContext:
    """What one ingest judges by: its moment, the settings and the enabled rules."""

    now: datetime
    settings: HealthSettings
    rules: list[HealthRule]

    @classmethod
    def load(cls, now: datetime) -> RulesContext:
        return cls(
            now=now,
            settings=HealthSettings.load(),
            rules=list(HealthRule.objects.filter(enabled=True).order_by("pk")),
        )

    def matching(self, event: HealthEvent) -> list[HealthRule]:
        found = [rule for rule in self.rules if rule.matches(event.kind, event.xid, event.code, event.value)]
        return sorted(found, key=lambda rule: (_ACTION_ORDER[rule.action], rule.pk))


def judge(
    tray: ComputeTray, observations: list[Observation], context: RulesContext, outcome: HealthOutcome
) -> bool:
    """Record the observations as events (new or repeats) and act on the rules they match. True when one of
    them matched a drain or degrade rule (the tray is not healthy)."""
    window = timedelta(seconds=context.settings.dedup_window_s)
    gpu_ids = dict(
        Gpu.objects.filter(uuid__in={o.gpu_uuid for o in observations if o.gpu_uuid}).values_list(
            "uuid", "pk"
        )
    )
    serious = False
    for observation in observations:
        event, new = record_event(tray, observation, window, gpu_ids)
        if new:
            outcome.new_events += 1
        else:
            outcome.repeated_events += 1
        rules = context.matching(event)
        actions = {rule.action for rule in rules}
        verdict = {
            "drains": RuleAction.DRAIN in actions,
            "degrades": RuleAction.DEGRADE in actions,
            "warns": RuleAction.WARN in actions,
        }
        if any(getattr(event, name) != value for name, value in verdict.items()):
            for name, value in verdict.items():
                setattr(event, name, value)
            event.save(update_fields=list(verdict))
        if context.now - observation.at > STALE_AFTER:
            # An old fault (a first read of a long kernel log, a backlog the agent could not post): history,
            # not a reason to take a tray out now.
            if new:
                outcome.actions.append(
                    f"{event.title} on {where(event)} at {timestamp(observation.at)}: recorded, not acted "
                    f"on (older than {STALE_AFTER.days * 24} hours)"
                )
            continue
        serious = serious or verdict["drains"] or verdict["degrades"]
        first_of_each = {}
        for rule in rules:  # sorted: the first (oldest) rule of each action speaks for it
            first_of_each.setdefault(rule.action, rule)
        for rule in first_of_each.values():
            if rule.action == RuleAction.DRAIN:
                _drain_decision(tray, event, rule, new, context, outcome)
            elif rule.action == RuleAction.DEGRADE:
                _degrade_decision(tray, event, rule, context, outcome)
            elif new:
                record_action(
                    outcome,
                    tray,
                    ActionKind.WARN,
                    f"{event.title} on {where(event)}: {rule.name}",
                    event,
                    rule,
                    at=context.now,
                )
    return serious


# --------------------------------------------------------------------------------------------------------
# Drain, the circuit breaker, repeat offenders
# --------------------------------------------------------------------------------------------------------


def _drain_decision(
    tray: ComputeTray,
    event: HealthEvent,
    rule: HealthRule,
    new: bool,
    context: RulesContext,
    outcome: HealthOutcome,
) -> None:
    if tray.state != TrayState.UP:
        if not owned_by_rules(tray) and new:
            record_action(
                outcome,
                tray,
                ActionKind.NOT_OURS,
                f"{event.title} on {where(event)} would drain it, but it is already "
                f"{state_words(tray.state)} ({tray.state_reason}); that reason is kept",
                event,
                rule,
                at=context.now,
            )
        return
    # The settings row, locked, serialises the circuit breaker's count over concurrent ingests.
    settings = HealthSettings.objects.select_for_update().get(pk=context.settings.pk)
    context.settings = settings
    dry_run = settings.dry_run
    since = context.now - timedelta(days=settings.repeat_days)
    counted = (ActionKind.WOULD_DRAIN, ActionKind.WOULD_NEEDS_SERVICE) if dry_run else QUARANTINE_ACTIONS
    # Faults the rules drained it for (drains by hand are people's decisions, not faults counted here).
    earlier = (
        HealthAction.objects.filter(tray=tray, kind__in=counted, created_at__gte=since)
        .exclude(rule_name="")
        .count()
    )
    repeat = earlier + 1 >= settings.repeat_faults
    reason = repeat_reason(event, earlier + 1, settings.repeat_days) if repeat else drain_reason(event)
    why = rule_reason(reason, rule)

    blocked = _breaker_blocks(tray, settings, dry_run, context.now)
    # A fault a tray keeps reporting while it stays up (dry run, a blocked drain) is one decision, not one
    # per report.
    kinds = [ActionKind.BLOCKED] if blocked else [ActionKind.WOULD_DRAIN, ActionKind.WOULD_NEEDS_SERVICE]
    if (blocked or dry_run) and HealthAction.objects.filter(event=event, kind__in=kinds).exists():
        return
    if blocked:
        if not dry_run and settings.breaker_tripped_at is None:
            settings.breaker_tripped_at = context.now
            settings.breaker_note = blocked
            settings.save(update_fields=["breaker_tripped_at", "breaker_note"])
            record_action(outcome, tray, ActionKind.BREAKER_TRIPPED, blocked, event, rule, at=context.now)
            note = blocked
            notify(
                NotificationEvent.BREAKER_TRIPPED,
                f"Health circuit breaker tripped: drains stopped ({tray.hostname} was next)",
                {"tray": tray.hostname, "note": note, "at": context.now.isoformat()},
                scope=[f"rack:{tray.rack.name}", f"tray:{tray.hostname}"],
            )
            transaction.on_commit(
                lambda: breaker_tripped.send(sender=HealthSettings, at=context.now, note=note)
            )
        record_action(
            outcome,
            tray,
            ActionKind.BLOCKED,
            f"not drained: {why}; {blocked}",
            event,
            rule,
            dry_run=dry_run,
            at=context.now,
        )
        return
    if dry_run:
        kind = ActionKind.WOULD_NEEDS_SERVICE if repeat else ActionKind.WOULD_DRAIN
        record_action(outcome, tray, kind, why, event, rule, dry_run=True, at=context.now)
        return
    state = TrayState.NEEDS_SERVICE if repeat else TrayState.DRAIN
    set_state(tray, state, reason, source="rules", actor=None)
    kind = ActionKind.NEEDS_SERVICE if repeat else ActionKind.DRAIN
    record_action(outcome, tray, kind, why, event, rule, at=context.now)


def _breaker_blocks(tray: ComputeTray, settings: HealthSettings, dry_run: bool, now: datetime) -> str:
    """Why the circuit breaker stops this drain ("" when it does not)."""
    if settings.breaker_tripped_at is not None and not dry_run:
        return (
            f"the circuit breaker tripped at {timestamp(settings.breaker_tripped_at)} and stops every drain "
            "by the rules until a platform admin clears it (Health settings in the admin)"
        )
    total = ComputeTray.objects.count()
    limit = max(1, math.floor(total * settings.breaker_percent / 100))
    since = now - timedelta(seconds=settings.breaker_window_s)
    counted = (ActionKind.WOULD_DRAIN, ActionKind.WOULD_NEEDS_SERVICE) if dry_run else QUARANTINE_ACTIONS
    out = (  # trays the rules took out in the window (an admin's drains are not the breaker's business)
        HealthAction.objects.filter(kind__in=counted, created_at__gte=since)
        .exclude(rule_name="")
        .exclude(tray=tray)
        .values("tray")
        .distinct()
        .count()
    )
    if out + 1 <= limit:
        return ""
    minutes = settings.breaker_window_s / 60
    return (
        f"the circuit breaker allows {limit} of {total} trays ({settings.breaker_percent} %) to be taken out "
        f"per {minutes:g} minutes and {out} already were; check for a fleet-wide cause (a driver, a switch, "
        "a bad rule) before clearing it"
    )


def reset_breaker(*, actor=None) -> None:
    """Let the rules drain again after the circuit breaker tripped."""
    with transaction.atomic():
        settings = HealthSettings.objects.select_for_update().get(pk=HealthSettings.load().pk)
        settings.breaker_tripped_at = None
        settings.breaker_note = ""
        settings.save(update_fields=["breaker_tripped_at", "breaker_note"])


# --------------------------------------------------------------------------------------------------------
# Degraded NVLink partitions
# --------------------------------------------------------------------------------------------------------


def _degrade_decision(
    tray: ComputeTray, event: HealthEvent, rule: HealthRule, context: RulesContext, outcome: HealthOutcome
) -> None:
    """Mark the tray's NVLink partition degraded: every tray of it shares the fault's NVLink fabric. The
    partition row is written under the rack lock ingest holds (never the other trays' rows: another
    ingest may hold them)."""
    partition = tray.partition
    if partition is None:
        return
    partition = NVLinkPartition.objects.get(pk=partition.pk)
    dry_run = context.settings.dry_run
    reason = f"{REASON_PREFIX}{event.title} on {tray.hostname} {where(event)} at {timestamp(event.last_seen)}"
    if dry_run:
        already = HealthAction.objects.filter(
            partition=partition, kind=ActionKind.WOULD_DEGRADE, event=event
        ).exists()
        if not already:
            record_action(
                outcome,
                tray,
                ActionKind.WOULD_DEGRADE,
                f"partition {partition}: {reason} (rule {rule.name})",
                event,
                rule,
                partition=partition,
                dry_run=True,
                at=context.now,
            )
        return
    if partition.degraded_reason:
        return
    NVLinkPartition.objects.filter(pk=partition.pk).update(
        degraded_reason=reason[:REASON_LIMIT], degraded_since=context.now
    )
    tray.partition.degraded_reason = reason[:REASON_LIMIT]
    tray.partition.degraded_since = context.now
    hosts = ", ".join(partition.trays.order_by("slot").values_list("hostname", flat=True))
    record_action(
        outcome,
        tray,
        ActionKind.DEGRADE,
        f"partition {partition} ({hosts}): {reason} (rule {rule.name})",
        event,
        rule,
        partition=partition,
        at=context.now,
    )


def consider_recovery(tray: ComputeTray, context: RulesContext, outcome: HealthOutcome) -> None:
    """Clear the partition's degradation once no tray of it has shown a degrading fault for return_after_s."""
    partition = tray.partition
    if partition is None or not partition.degraded_reason or context.settings.dry_run:
        return
    quiet_since = context.now - timedelta(seconds=context.settings.return_after_s)
    if partition.degraded_since and partition.degraded_since > quiet_since:
        return
    if HealthEvent.objects.filter(
        tray__partition=partition, degrades=True, last_seen__gte=quiet_since
    ).exists():
        return
    was = partition.degraded_reason
    NVLinkPartition.objects.filter(pk=partition.pk).update(degraded_reason="", degraded_since=None)
    partition.degraded_reason, partition.degraded_since = "", None
    record_action(
        outcome,
        tray,
        ActionKind.RECOVER,
        f"partition {partition}: no NVLink fault on any of its trays for "
        f"{context.settings.return_after_s / 60:g} minutes (was: {was})",
        partition=partition,
        at=context.now,
    )


# --------------------------------------------------------------------------------------------------------
# The default rules
# --------------------------------------------------------------------------------------------------------


def seed_default_rules() -> int:
    """Create the default rules that are missing (by name); returns how many. Migration 0007 seeds the same
    list into a new database; tests that flush the database call this."""
    created = 0
    for rule in rule_defaults.default_rules():
        _, new = HealthRule.objects.get_or_create(
            name=rule.name,
            defaults={
                "kind": rule.kind,
                "action": rule.action,
                "xid_first": rule.xid_first,
                "xid_last": rule.xid_last,
                "code": rule.code,
                "threshold": rule.threshold,
                "note": rule.note,
            },
        )
        created += new
    return created
