"""Health-driven operations: faults recorded as events, judged by admins' rules, decisions recorded as data.

The loop, all of it run on ingest inside the transaction that records the event (the tray row locked):

1. **Events.** A discovery report's XIDs (mapped to the GPU whose PCI bus id the kernel line names), the
   GPUs' NVML recovery action and fabric health flags, failed active checks, and DCGM fields become
   `HealthEvent` rows. The same fault on the same GPU within `HealthSettings.dedup_window_s` of its last
   sighting updates that row (count, last seen) instead of adding one. Conditions a report restates every
   interval (a recovery action, a fabric flag, a DCGM gauge) refresh `last_seen` without counting up.
2. **Rules.** Every enabled `HealthRule` that matches acts: `drain` the tray, `degrade` its NVLink partition
   (an NVLink fault affects every tray of it), or `warn`. Each decision is a `HealthAction` row saying what,
   why and when.
3. **Drain.** A tray that is up is drained with a reason that says who and why (``rackplane: XID 79
   (GPU_HAS_FALLEN_OFF_THE_BUS) on GPU-... at ...``); the scheduler stops placing on it at once (a tray that
   is not up is never schedulable, and the state change asks for a pass: scheduling.signals). A tray that
   is already out for another owner's reason (an admin, a partition plan, Slurm) is left as it is. A
   repeat offender (HealthSettings.repeat_faults drains within repeat_days) goes to "needs service"
   instead, and never comes back by itself.
4. **Circuit breaker.** No more than `breaker_percent` % of all trays (at least one) are taken out by the
   rules per `breaker_window_s`: the next drain trips the breaker (an alert row), and every drain after it
   is recorded as blocked until an admin clears `breaker_tripped_at`.
5. **Dry run.** With `HealthSettings.dry_run` the decisions are recorded as "would drain" (and would
   degrade, would return) and nothing else changes.
6. **Return to service.** A tray the rules drained returns when its agent has reported it healthy for
   `return_after_s` and, when `return_check` names an active check, that check passed after the fault.

Backends: `drain_tray` and `return_to_service` are the one way a tray's health state changes; each sends
`tray_health_changed` once the transaction commits, and the tray's save is heard by integrations.signals.
What connects there: the drain pushed to Slurm (`scontrol update ... State=DRAIN Reason=...`, never
overwriting another owner's reason) and Kubernetes (cordon + taint) by integrations.trays, and the tray's
running jobs handled by their class's policy (wait, checkpoint then requeue, or requeue at once:
scheduling.requeue, through integrations.requeue). Nothing here talks to the outside world. Notifications
are recorded here (core.notifications); `breaker_tripped` is sent like `tray_health_changed`.

Degraded partitions: the scheduling pass reads `NVLinkPartition.degraded_reason` (scheduling.pass_inputs) and
places no job spanning trays on a degraded partition; the pending reason names the degradation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.dispatch import Signal
from django.utils import timezone

from core.models import NotificationEvent
from core.notifications import notify
from core.textrule import text_problem
from inventory.choices import (
    QUARANTINE_ACTIONS,
    ActionKind,
    GpuHealth,
    HealthKind,
    HealthSource,
    RuleAction,
    TrayState,
)
from inventory.discovery import faults
from inventory.discovery.nvidia_smi import RecoveryAction, ReportedGpu, ReportError, canonical_gpu_uuid
from inventory.models import (
    ComputeTray,
    Gpu,
    HealthAction,
    HealthCheckResult,
    HealthEvent,
    HealthRule,
    HealthSettings,
    NVLinkPartition,
)

REASON_PREFIX = "rackplane: "  # the owner prefix of every drain the health rules make (Slurm reasons too)
NEEDS_SERVICE_PREFIX = REASON_PREFIX + "needs service: "
REASON_LIMIT = 255  # ComputeTray.state_reason
# A reason a person types (drain, maintenance): room left for "rackplane: <username>: " and a maintenance
# window's dates in front of it within REASON_LIMIT.
TYPED_REASON_LIMIT = 160
NOTE_LIMIT = 300  # a return-to-service note
# A tray's state in a sentence ("gb-r03-t03 is already drained"), as inventory.planning words it too.
STATE_WORDS = {
    TrayState.UP: "in service",
    TrayState.DRAIN: "drained",
    TrayState.DOWN: "down",
    TrayState.MAINTENANCE: "in maintenance",
    TrayState.NEEDS_SERVICE: "waiting for service",
}
CHECKS_KEPT = 20  # results kept per tray and check name
MESSAGE_LIMIT = 4096  # characters of a failed check's output kept on its event (the tail)

# Sent on commit when a tray's health state changed: sender=ComputeTray, tray_id, state, reason, source
# ("rules" or "admin"), action (an ActionKind), actor (a user or None). The place Slurm/Kubernetes drains,
# job requeues and notifications hook in.
tray_health_changed = Signal()
# A fault older than this when it is reported is recorded as history; no rule acts on it.
STALE_AFTER = timedelta(hours=24)
# Sent on commit when the circuit breaker tripped: sender=HealthSettings, at, note.
breaker_tripped = Signal()

_ACTION_ORDER = {RuleAction.DRAIN: 0, RuleAction.DEGRADE: 1, RuleAction.WARN: 2}
_UNHEALTHY = (GpuHealth.UNHEALTHY, GpuHealth.LIMITED_CAPACITY)


class HealthError(ValueError):
    """A health operation that cannot be done; the message says why and what to do."""


@dataclass(frozen=True)
class Observation:
    """One fault as seen once, before it is matched with the events already recorded."""

    kind: str
    code: str
    at: datetime
    source: str = HealthSource.AGENT
    gpu_uuid: str = ""
    xid: int | None = None
    value: float | None = None
    message: str = ""
    occurrence: bool = True  # a new occurrence (counts up); False: a condition restated (refreshes only)

    @property
    def mnemonic(self) -> str:
        return faults.mnemonic(self.xid) if self.xid is not None else ""


@dataclass
class HealthOutcome:
    """What one ingest did: new and repeated events, the decisions taken (as sentences), and for the agent
    whether the tray counts as healthy now."""

    new_events: int = 0
    repeated_events: int = 0
    actions: list[str] = field(default_factory=list)
    unmapped_xids: int = 0
    healthy: bool | None = None

    def as_dict(self) -> dict:
        return {
            "new_events": self.new_events,
            "repeated_events": self.repeated_events,
            "actions": list(self.actions),
            "unmapped_xids": self.unmapped_xids,
            "healthy": self.healthy,
        }


def owned_by_rules(tray: ComputeTray) -> bool:
    """Whether the tray is out for a reason Rackplane's health rules gave (and so theirs to give back)."""
    return tray.state != TrayState.UP and tray.state_reason.startswith(REASON_PREFIX)


# --------------------------------------------------------------------------------------------------------
# Ingest: a discovery report, DCGM samples
# --------------------------------------------------------------------------------------------------------


def observations_from_report(
    gpus: list[ReportedGpu], health: faults.HealthReport, now: datetime
) -> tuple[list[Observation], int]:
    """The faults a report shows, and how many XIDs named no GPU of the tray (kept as tray events)."""
    by_pci = {}
    for gpu in gpus:
        key = faults.pci_key(gpu.pci_bus_id)
        if key is not None:
            by_pci[key] = gpu.uuid
    observations, unmapped = [], 0
    for xid in health.xids:
        uuid = by_pci.get(xid.pci, "") if xid.pci is not None else ""
        if not uuid:
            unmapped += 1
        observations.append(
            Observation(
                kind=HealthKind.XID,
                code=str(xid.xid),
                xid=xid.xid,
                at=min(xid.time, now),
                gpu_uuid=uuid,
                message=xid.text,
            )
        )
    for gpu in gpus:
        action = gpu.recovery_action
        if action is not None and action != RecoveryAction.NONE:
            observations.append(
                Observation(
                    kind=HealthKind.RECOVERY_ACTION,
                    code=str(action),
                    at=now,
                    gpu_uuid=gpu.uuid,
                    occurrence=False,
                )
            )
        for flag in gpu.fabric_flags:
            observations.append(
                Observation(
                    kind=HealthKind.FABRIC, code=str(flag), at=now, gpu_uuid=gpu.uuid, occurrence=False
                )
            )
    for check in health.checks:
        if not check.passed:
            observations.append(
                Observation(
                    kind=HealthKind.CHECK_FAILED,
                    code=check.name,
                    at=min(check.started + timedelta(seconds=check.seconds), now),
                    value=float(check.exit_status),
                    message=check.output[-MESSAGE_LIMIT:],
                )
            )
    return observations, unmapped


def record_report_health(
    tray: ComputeTray,
    gpus: list[ReportedGpu],
    health: faults.HealthReport | None,
    now: datetime,
    *,
    gpus_listed: bool = True,
) -> HealthOutcome:
    """Record what a discovery report says about health and act on it. Called by
    inventory.services.ingest_report inside its transaction, with `tray` locked and its GPUs reconciled;
    the caller saves the tray's `healthy_since`, `agent_version` and `agent_interval_s` with its own save."""
    health = health or faults.HealthReport()
    observations, unmapped = observations_from_report(gpus, health, now)
    for check in health.checks:
        _store_check(tray, check, now)
    if health.agent is not None:
        tray.agent_version = health.agent.version
        tray.agent_interval_s = health.agent.interval_s
    outcome = HealthOutcome(unmapped_xids=unmapped)
    context = _Context.load(now)
    acted_on = _record(tray, observations, context, outcome)
    bad_gpus = any(gpu.health in _UNHEALTHY for gpu in gpus)
    pending = any(gpu.recovery_action not in (None, RecoveryAction.NONE) for gpu in gpus)
    # A report without a GPU listing (nvidia-smi failed on the node) is no evidence of health.
    outcome.healthy = gpus_listed and not (acted_on or bad_gpus or pending)
    if outcome.healthy:
        tray.healthy_since = tray.healthy_since or now
    else:
        tray.healthy_since = None
    _consider_recovery(tray, context, outcome)
    _consider_return(tray, context, outcome)
    return outcome


def record_dcgm(samples, at: datetime | None = None, source: str = HealthSource.DCGM) -> HealthOutcome:
    """Record DCGM health fields (tenancy.telemetry.HealthSample: uuid, field, value, xid) and act on them.

    GPUs the inventory does not know, or that are on no tray, are skipped (counted by the caller). Trays are
    locked in primary key order, so two pushes for overlapping trays cannot deadlock.
    """
    now = at or timezone.now()
    by_uuid: dict[str, list] = {}
    for sample in samples:
        if sample.field not in faults.DCGM_FIELDS:
            continue
        try:
            uuid = canonical_gpu_uuid(sample.uuid, "UUID")
        except ReportError:
            continue  # not a GPU UUID: nothing in the inventory to record it on
        by_uuid.setdefault(uuid, []).append(sample)
    outcome = HealthOutcome()
    if not by_uuid:
        return outcome
    with transaction.atomic():
        gpus = {
            gpu.uuid: gpu
            for gpu in Gpu.objects.filter(uuid__in=list(by_uuid), tray__isnull=False).order_by("pk")
        }
        tray_ids = sorted({gpu.tray_id for gpu in gpus.values()})
        trays = {
            tray.pk: tray
            for tray in ComputeTray.objects.select_for_update().filter(pk__in=tray_ids).order_by("pk")
        }
        context = _Context.load(now)
        for tray_id in tray_ids:
            tray = trays[tray_id]
            observations = []
            for uuid, gpu in gpus.items():
                if gpu.tray_id != tray_id:
                    continue
                for sample in by_uuid[uuid]:
                    observations.extend(_dcgm_observations(sample, uuid, now, source))
            if not observations:
                continue
            if _record(tray, observations, context, outcome):
                tray.healthy_since = None
                tray.save(update_fields=["healthy_since"])
    return outcome


def _dcgm_observations(sample, uuid: str, now: datetime, source: str) -> list[Observation]:
    value = sample.value
    if not math.isfinite(value) or value < 0 or value >= faults.DCGM_BLANK_FLOOR:
        return []
    if sample.field in (faults.DCGM_XID, faults.DCGM_XID_COUNT):
        # The last XID DCGM saw (its value is the XID), or a count per XID (the XID is the sample's label).
        last = sample.field == faults.DCGM_XID
        number = int(value) if last else sample.xid
        if (not last and value == 0) or number is None or number == 0:
            return []
        if not faults.XID_RANGE[0] <= number <= faults.XID_RANGE[1]:
            return []
        message = (
            f"{sample.field} = {number} (the last XID DCGM saw)"
            if last
            else f"{sample.field}{{xid={number}}} = {value:g}"
        )
        return [
            Observation(
                kind=HealthKind.XID,
                code=str(number),
                xid=number,
                at=now,
                gpu_uuid=uuid,
                source=source,
                value=value,
                message=message,
                occurrence=False,
            )
        ]
    if sample.field == faults.DCGM_FABRIC_MASK:
        return [
            Observation(
                kind=HealthKind.FABRIC,
                code=str(flag),
                at=now,
                gpu_uuid=uuid,
                source=source,
                message=f"{sample.field} = {int(value):#x}",
                occurrence=False,
            )
            for flag in faults.fabric_flags_from_mask(int(value))
        ]
    if value == 0:
        return []
    return [
        Observation(
            kind=HealthKind.DCGM_FIELD,
            code=sample.field,
            at=now,
            gpu_uuid=uuid,
            source=source,
            value=value,
            occurrence=False,
        )
    ]


def _store_check(tray: ComputeTray, check: faults.CheckReport, now: datetime) -> HealthCheckResult:
    result, _ = HealthCheckResult.objects.update_or_create(
        tray=tray,
        name=check.name,
        started=check.started,
        defaults={
            "exit_status": check.exit_status,
            "output": check.output,
            "seconds": check.seconds,
            "received_at": now,
        },
    )
    old = HealthCheckResult.objects.filter(tray=tray, name=check.name).order_by("-started", "-pk")[
        CHECKS_KEPT:
    ]
    stale = list(old.values_list("pk", flat=True))
    if stale:
        HealthCheckResult.objects.filter(pk__in=stale).delete()
    return result


# --------------------------------------------------------------------------------------------------------
# Events and rules
# --------------------------------------------------------------------------------------------------------


@dataclass
class _Context:
    now: datetime
    settings: HealthSettings
    rules: list[HealthRule]

    @classmethod
    def load(cls, now: datetime) -> _Context:
        return cls(
            now=now,
            settings=HealthSettings.load(),
            rules=list(HealthRule.objects.filter(enabled=True).order_by("pk")),
        )

    def matching(self, event: HealthEvent) -> list[HealthRule]:
        found = [rule for rule in self.rules if rule.matches(event.kind, event.xid, event.code, event.value)]
        return sorted(found, key=lambda rule: (_ACTION_ORDER[rule.action], rule.pk))


def _record(
    tray: ComputeTray, observations: list[Observation], context: _Context, outcome: HealthOutcome
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
        event, new = _event(tray, observation, window, gpu_ids)
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
                    f"{event.title} on {_where(event)} at {_timestamp(observation.at)}: recorded, not acted "
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
                _act(
                    outcome,
                    tray,
                    ActionKind.WARN,
                    f"{event.title} on {_where(event)}: {rule.name}",
                    event,
                    rule,
                    at=context.now,
                )
    return serious


def _event(
    tray: ComputeTray, observation: Observation, window: timedelta, gpu_ids: dict
) -> tuple[HealthEvent, bool]:
    """The event this observation repeats (same tray, GPU, kind and code, last seen within the window),
    updated; else a new one."""
    existing = (
        HealthEvent.objects.filter(
            tray=tray,
            kind=observation.kind,
            code=observation.code,
            gpu_uuid=observation.gpu_uuid,
            last_seen__gte=observation.at - window,
        )
        .order_by("-last_seen", "-pk")
        .first()
    )
    if existing is None:
        event = HealthEvent.objects.create(
            tray=tray,
            gpu_id=gpu_ids.get(observation.gpu_uuid),
            gpu_uuid=observation.gpu_uuid,
            source=observation.source,
            kind=observation.kind,
            code=observation.code,
            xid=observation.xid,
            mnemonic=observation.mnemonic,
            value=observation.value,
            message=observation.message,
            first_seen=observation.at,
            last_seen=observation.at,
        )
        return event, True
    changed = ["last_seen"]
    if observation.occurrence:
        existing.count += 1
        changed.append("count")
    elif observation.value is not None and existing.value is not None and observation.value > existing.value:
        existing.count += 1  # a counter went up: the fault happened again
        changed.append("count")
    if observation.value is not None and observation.value != existing.value:
        existing.value = observation.value
        changed.append("value")
    if observation.message and observation.message != existing.message:
        existing.message = observation.message
        changed.append("message")
    existing.last_seen = max(existing.last_seen, observation.at)
    existing.first_seen = min(existing.first_seen, observation.at)
    changed.append("first_seen")
    existing.save(update_fields=changed)
    return existing, False


def _where(event: HealthEvent) -> str:
    return event.gpu_uuid or "the tray"


def _act(
    outcome: HealthOutcome | None,
    tray: ComputeTray,
    kind: str,
    reason: str,
    event: HealthEvent | None = None,
    rule: HealthRule | None = None,
    *,
    partition: NVLinkPartition | None = None,
    dry_run: bool = False,
    actor=None,
    at: datetime | None = None,
) -> HealthAction:
    action = HealthAction.objects.create(
        tray=tray,
        kind=kind,
        event=event,
        rule=rule,
        rule_name=rule.name if rule else "",
        partition=partition,
        dry_run=dry_run,
        reason=reason[:500],
        actor=actor,
        created_at=at or timezone.now(),
    )
    if outcome is not None:
        outcome.actions.append(f"{ActionKind(kind).label}: {reason}")
    return action


def _timestamp(moment: datetime) -> str:
    return timezone.localtime(moment, timezone.get_fixed_timezone(0)).strftime("%Y-%m-%d %H:%M:%S UTC")


def drain_reason(event: HealthEvent) -> str:
    """``rackplane: XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS) on GPU-... at 2025-10-14 11:20:09 UTC``."""
    return f"{REASON_PREFIX}{event.title} on {_where(event)} at {_timestamp(event.last_seen)}"[:REASON_LIMIT]


def _drain_decision(
    tray: ComputeTray,
    event: HealthEvent,
    rule: HealthRule,
    new: bool,
    context: _Context,
    outcome: HealthOutcome,
) -> None:
    if tray.state != TrayState.UP:
        if not owned_by_rules(tray) and new:
            _act(
                outcome,
                tray,
                ActionKind.NOT_OURS,
                f"{event.title} on {_where(event)} would drain it, but it is already "
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
    reason = drain_reason(event)
    if repeat:
        reason = (
            f"{NEEDS_SERVICE_PREFIX}{earlier + 1} faults in {settings.repeat_days} days, the last "
            f"{event.title} on {_where(event)} at {_timestamp(event.last_seen)}"
        )[:REASON_LIMIT]
    why = f"{reason} (rule {rule.name})"

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
            _act(outcome, tray, ActionKind.BREAKER_TRIPPED, blocked, event, rule, at=context.now)
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
        _act(
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
        _act(outcome, tray, kind, why, event, rule, dry_run=True, at=context.now)
        return
    state = TrayState.NEEDS_SERVICE if repeat else TrayState.DRAIN
    _set_state(tray, state, reason, source="rules", actor=None)
    kind = ActionKind.NEEDS_SERVICE if repeat else ActionKind.DRAIN
    _act(outcome, tray, kind, why, event, rule, at=context.now)


def _breaker_blocks(tray: ComputeTray, settings: HealthSettings, dry_run: bool, now: datetime) -> str:
    """Why the circuit breaker stops this drain ("" when it does not)."""
    if settings.breaker_tripped_at is not None and not dry_run:
        return (
            f"the circuit breaker tripped at {_timestamp(settings.breaker_tripped_at)} and stops every drain "
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


def _degrade_decision(
    tray: ComputeTray, event: HealthEvent, rule: HealthRule, context: _Context, outcome: HealthOutcome
) -> None:
    """Mark the tray's NVLink partition degraded: every tray of it shares the fault's NVLink fabric. The
    partition row is written under the rack lock ingest holds (never the other trays' rows: another
    ingest may hold them)."""
    partition = tray.partition
    if partition is None:
        return
    partition = NVLinkPartition.objects.get(pk=partition.pk)
    dry_run = context.settings.dry_run
    reason = (
        f"{REASON_PREFIX}{event.title} on {tray.hostname} {_where(event)} at {_timestamp(event.last_seen)}"
    )
    if dry_run:
        already = HealthAction.objects.filter(
            partition=partition, kind=ActionKind.WOULD_DEGRADE, event=event
        ).exists()
        if not already:
            _act(
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
    _act(
        outcome,
        tray,
        ActionKind.DEGRADE,
        f"partition {partition} ({hosts}): {reason} (rule {rule.name})",
        event,
        rule,
        partition=partition,
        at=context.now,
    )


def _consider_recovery(tray: ComputeTray, context: _Context, outcome: HealthOutcome) -> None:
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
    _act(
        outcome,
        tray,
        ActionKind.RECOVER,
        f"partition {partition}: no NVLink fault on any of its trays for "
        f"{context.settings.return_after_s / 60:g} minutes (was: {was})",
        partition=partition,
        at=context.now,
    )


# --------------------------------------------------------------------------------------------------------
# Return to service
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Eligibility:
    eligible: bool
    why: str


def return_eligibility(
    tray: ComputeTray, settings: HealthSettings | None = None, now: datetime | None = None
) -> Eligibility:
    """Whether a tray the rules drained may return: healthy for return_after_s and, when return_check is
    set, that check passed after the drain. Needs-service trays and other owners' drains never qualify."""
    settings = settings or HealthSettings.load()
    now = now or timezone.now()
    if tray.state == TrayState.UP:
        return Eligibility(False, "it is in service")
    if not owned_by_rules(tray):
        return Eligibility(
            False, f"it is out for another owner's reason ({tray.state_reason}); they return it"
        )
    if tray.state == TrayState.NEEDS_SERVICE:
        return Eligibility(False, "it needs service; return it by hand once repaired")
    drained = (
        HealthAction.objects.filter(tray=tray, kind__in=QUARANTINE_ACTIONS)
        .order_by("-created_at", "-pk")
        .first()
    )
    drained_at = drained.created_at if drained else None
    if tray.healthy_since is None:
        # A drain by hand (an admin, a maintenance window) has no fault: the drain is what it waits on.
        by_rules = drained is not None and (drained.rule_name or drained.event_id is not None)
        since = "the fault" if by_rules else "it was drained"
        return Eligibility(False, f"its agent has not reported it healthy since {since}")
    needed = timedelta(seconds=settings.return_after_s)
    if now - tray.healthy_since < needed:
        left = needed - (now - tray.healthy_since)
        return Eligibility(
            False,
            f"healthy since {_timestamp(tray.healthy_since)}; {left.total_seconds() / 60:.0f} more minutes",
        )
    if settings.return_check:
        checks = HealthCheckResult.objects.filter(tray=tray, name=settings.return_check)
        if drained_at is not None:
            checks = checks.filter(started__gte=drained_at)
        last = checks.order_by("-started", "-pk").first()
        if last is None:
            return Eligibility(False, f"no {settings.return_check!r} check has run since it was drained")
        if not last.passed:
            return Eligibility(
                False, f"the last {settings.return_check!r} check failed (exit status {last.exit_status})"
            )
        return Eligibility(
            True,
            f"healthy since {_timestamp(tray.healthy_since)} and {settings.return_check!r} passed at "
            f"{_timestamp(last.started)}",
        )
    return Eligibility(True, f"healthy since {_timestamp(tray.healthy_since)}")


def _consider_return(tray: ComputeTray, context: _Context, outcome: HealthOutcome) -> None:
    """Return a tray the rules drained once it qualifies; a drain by hand (drain_tray) is returned by hand."""
    if tray.state != TrayState.DRAIN or not owned_by_rules(tray):
        return
    drained = HealthAction.objects.filter(tray=tray, kind__in=QUARANTINE_ACTIONS).order_by(
        "-created_at", "-pk"
    )
    last = drained.first()
    if last is None or not last.rule_name:
        return
    verdict = return_eligibility(tray, context.settings, context.now)
    if not verdict.eligible:
        return
    if context.settings.dry_run or not context.settings.auto_return:
        last = HealthAction.objects.filter(tray=tray).order_by("-created_at", "-pk").first()
        if last is None or last.kind != ActionKind.WOULD_RETURN:
            _act(
                outcome,
                tray,
                ActionKind.WOULD_RETURN,
                f"eligible to return: {verdict.why}",
                dry_run=True,
                at=context.now,
            )
        return
    _set_state(tray, TrayState.UP, "", source="rules", actor=None)
    _act(outcome, tray, ActionKind.RETURN, f"returned to service: {verdict.why}", at=context.now)


# --------------------------------------------------------------------------------------------------------
# The service functions: drain, return, needs service (rules and admins alike)
# --------------------------------------------------------------------------------------------------------


def _set_state(tray: ComputeTray, state: str, reason: str, *, source: str, actor) -> None:
    """Change the tray's state (a save: audited, and the scheduler's watcher asks for a pass) and tell the
    backends once the transaction commits."""
    tray.state = state
    tray.state_reason = reason[:REASON_LIMIT]
    tray.save(update_fields=["state", "state_reason"])
    event, words = {
        TrayState.UP: (NotificationEvent.TRAY_RETURNED, "back in service"),
        TrayState.NEEDS_SERVICE: (NotificationEvent.NEEDS_SERVICE, "needs service"),
    }.get(state, (NotificationEvent.TRAY_DRAINED, "drained"))
    notify(
        event,
        f"{tray.hostname} {words}" + (f": {reason}" if reason else ""),
        {"tray": tray.hostname, "rack": tray.rack.name, "state": state, "reason": reason, "source": source},
        scope=[f"rack:{tray.rack.name}", f"tray:{tray.hostname}"],
    )
    tray_id, kind = (
        tray.pk,
        {
            TrayState.UP: ActionKind.RETURN,
            TrayState.NEEDS_SERVICE: ActionKind.NEEDS_SERVICE,
        }.get(state, ActionKind.DRAIN),
    )
    transaction.on_commit(
        lambda: tray_health_changed.send(
            sender=ComputeTray,
            tray_id=tray_id,
            state=state,
            reason=reason,
            source=source,
            action=kind,
            actor=actor,
        )
    )


def state_words(state: str) -> str:
    """A tray state as a sentence says it: "drained", "in maintenance" (not the value "drain")."""
    return STATE_WORDS.get(state, str(state).replace("_", " "))


def typed_text_problem(text: str, *, what: str = "The reason", limit: int = TYPED_REASON_LIMIT) -> str:
    """Why `text` typed by a person cannot be a reason or note ("" when it can): a control or invisible
    formatting character (a bidi override would show operators other words than Slurm keeps), Rackplane's
    own "rackplane:" prefix in front (it would read as one of Rackplane's reasons: Rackplane adds it), or
    more than `limit` characters."""
    problem = text_problem(text)  # the one text rule (core.textrule): one line, nothing invisible
    if problem:
        return problem.message(what)
    if text.strip().lower().startswith(REASON_PREFIX.strip()):
        return (
            f"{what} starts with “rackplane:”: leave it out. Rackplane puts “rackplane: <your name>:” in "
            "front of every reason it sends to Slurm and Kubernetes."
        )
    if len(text.strip()) > limit:
        return f"{what} is {len(text.strip())} characters long: at most {limit}, please."
    return ""


def drain_tray(tray: ComputeTray, reason: str, *, actor=None, needs_service: bool = False) -> HealthAction:
    """Take a tray out of service by hand (an admin, or another service), recorded as a health decision.

    The reason is prefixed with "rackplane: " (the owner, as in Slurm) and the actor's name. A tray already
    out for another owner's reason keeps it: HealthError.
    """
    text = (reason or "").strip()
    if not text:
        raise HealthError("Say why the tray is drained: the reason is shown to operators and sent to Slurm.")
    # Callers pass what a person typed (the portal's forms check it first, for a field error); a maintenance
    # window's dates come in front of it, so only the control characters and the prefix are checked here.
    problem = typed_text_problem(text, limit=REASON_LIMIT)
    if problem:
        raise HealthError(problem)
    with transaction.atomic():
        tray = ComputeTray.objects.select_for_update().get(pk=tray.pk)
        if tray.state != TrayState.UP and not owned_by_rules(tray):
            raise HealthError(
                f"{tray.hostname} is already {state_words(tray.state)} ({tray.state_reason}); that "
                "owner's reason is kept. Return it first if Rackplane should own the drain."
            )
        if tray.state != TrayState.UP and not (needs_service and tray.state != TrayState.NEEDS_SERVICE):
            # Out already (the rules' or an admin's drain, a maintenance window): a second drain would replace
            # its reason and notify again.
            raise HealthError(
                f"{tray.hostname} is already {state_words(tray.state)} ({tray.state_reason}). "
                "Return it to service first to take it out for another reason."
            )
        who = f"{actor.get_username()}: " if actor is not None else ""
        prefix = NEEDS_SERVICE_PREFIX if needs_service else REASON_PREFIX
        full = f"{prefix}{who}{text}"[:REASON_LIMIT]
        state = TrayState.NEEDS_SERVICE if needs_service else TrayState.DRAIN
        _set_state(tray, state, full, source="admin", actor=actor)
        kind = ActionKind.NEEDS_SERVICE if needs_service else ActionKind.DRAIN
        return _act(None, tray, kind, full, actor=actor)


def return_to_service(tray: ComputeTray, *, actor=None, note: str = "", force: bool = False) -> HealthAction:
    """Put a tray the health rules (or drain_tray) took out back in service.

    Without `force` the tray must qualify (return_eligibility); an admin may force it (a needs-service tray
    repaired, an eligibility rule they know to be wrong), and the note says why. Another owner's drain (an
    admin in Slurm, a partition plan) is never undone here: HealthError.
    """
    with transaction.atomic():
        tray = ComputeTray.objects.select_for_update().get(pk=tray.pk)
        if tray.state == TrayState.UP:
            raise HealthError(f"{tray.hostname} is already in service.")
        if not owned_by_rules(tray):
            raise HealthError(
                f"{tray.hostname} is out for another owner's reason ({tray.state_reason}); Rackplane "
                "does not undo it. Its owner returns it."
            )
        verdict = return_eligibility(tray)
        if not verdict.eligible and not force:
            raise HealthError(f"{tray.hostname} cannot return yet: {verdict.why}.")
        who = f"{actor.get_username()}: " if actor is not None else ""
        why = verdict.why if verdict.eligible else f"forced ({verdict.why})"
        text = f"{who}returned to service: {why}" + (f"; {note.strip()}" if note and note.strip() else "")
        _set_state(tray, TrayState.UP, "", source="admin" if actor else "rules", actor=actor)
        return _act(None, tray, ActionKind.RETURN, text, actor=actor)


def seed_default_rules() -> int:
    """Create the default rules that are missing (by name); returns how many. Migration 0007 seeds the same
    list into a new database; tests that flush the database call this."""
    created = 0
    for rule in faults.default_rules():
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


def reset_breaker(*, actor=None) -> None:
    """Let the rules drain again after the circuit breaker tripped."""
    with transaction.atomic():
        settings = HealthSettings.objects.select_for_update().get(pk=HealthSettings.load().pk)
        settings.breaker_tripped_at = None
        settings.breaker_note = ""
        settings.save(update_fields=["breaker_tripped_at", "breaker_note"])


def record_admin_event(
    tray: ComputeTray, *, code: str, message: str = "", gpu_uuid: str = "", xid: int | None = None, actor=None
) -> HealthOutcome:
    """An admin records a fault seen outside the agent (a technician's finding, a vendor report); the rules
    judge it like any other. `xid` makes it an XID event."""
    if gpu_uuid:
        try:
            gpu_uuid = canonical_gpu_uuid(gpu_uuid, "gpu_uuid")
        except ReportError as error:
            raise HealthError(str(error)) from error
    if xid is not None and not faults.XID_RANGE[0] <= xid <= faults.XID_RANGE[1]:
        raise HealthError(f"XID {xid} is out of range (1-999).")
    now = timezone.now()
    observation = Observation(
        kind=HealthKind.XID if xid is not None else HealthKind.CHECK_FAILED,
        code=str(xid) if xid is not None else (code or "admin")[:128],
        xid=xid,
        at=now,
        source=HealthSource.ADMIN,
        gpu_uuid=gpu_uuid,
        message=message[:MESSAGE_LIMIT],
    )
    outcome = HealthOutcome()
    with transaction.atomic():
        tray = ComputeTray.objects.select_for_update().get(pk=tray.pk)
        if _record(tray, [observation], _Context.load(now), outcome):
            tray.healthy_since = None
            tray.save(update_fields=["healthy_since"])
    return outcome


# --------------------------------------------------------------------------------------------------------
# The timeline (tray and GPU pages)
# --------------------------------------------------------------------------------------------------------

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
    what: str  # "event" | "action"
    item: object


def timeline(
    user,
    *,
    tray: ComputeTray | None = None,
    gpu: Gpu | None = None,
    range_key: str = TIMELINE_DEFAULT,
    now: datetime | None = None,
) -> tuple[list[TimelineEntry], str]:
    """Events and actions of a tray (or one GPU: its events, and its tray's actions about them), newest
    first, within the range; returns the entries and the range used. Visibility: visible_to(user)."""
    if range_key not in TIMELINE_RANGES:
        range_key = TIMELINE_DEFAULT
    span = TIMELINE_RANGES[range_key]
    since = (now or timezone.now()) - span if span else None
    events = HealthEvent.objects.visible_to(user).select_related("gpu")
    actions = HealthAction.objects.visible_to(user).select_related("event", "actor", "tray")
    if gpu is not None:
        events = events.filter(Q(gpu=gpu) | Q(gpu_uuid=gpu.uuid))
        actions = actions.filter(Q(event__gpu=gpu) | Q(event__gpu_uuid=gpu.uuid))
    elif tray is not None:
        events = events.filter(tray=tray)
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
    entries = [
        TimelineEntry(e.last_seen, "event", e) for e in events.order_by("-last_seen", "-pk")[:TIMELINE_LIMIT]
    ]
    entries += [
        TimelineEntry(a.created_at, "action", a)
        for a in actions.order_by("-created_at", "-pk")[:TIMELINE_LIMIT]
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
