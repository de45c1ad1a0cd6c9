"""Health events: the faults a report shows, as observations, recorded as `HealthEvent` rows.

Step 1 of the loop (the package docstring): a discovery report's XIDs, NVML recovery actions, fabric flags
(and a fabric registration still in progress) and failed active checks, and DCGM's health fields become
`Observation`s; each is recorded as a new event or as a repeat of the one it continues (same tray, GPU, kind
and code, last seen within `HealthSettings.dedup_window_s`). The results of active checks are kept here too
(the last CHECKS_KEPT per tray and check). Nothing here judges an event: inventory.health.rules does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from core import sentences
from core.moments import utc_words
from inventory.choices import HealthKind, HealthSource
from inventory.discovery import faults, health_report
from inventory.discovery.nvidia_smi import FabricState, RecoveryAction, ReportedGpu
from inventory.models import ComputeTray, HealthCheckResult, HealthEvent

CHECKS_KEPT = 20  # results kept per tray and check name
# A GPU still registering with the NVLink fabric (the tray's fabric problem "... fabric registration is still
# in progress") is a fabric event of its node's report, so the GPU's timeline and the health centre show when
# it was seen. No default rule acts on it: the scheduler already keeps work spanning trays off the tray until
# it completes (inventory.selectors.unsettled_fabric_trays).
REGISTRATION_IN_PROGRESS = faults.FABRIC_REGISTRATION_IN_PROGRESS
MESSAGE_LIMIT = 4096  # characters of a failed check's output kept on its event (the tail)


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


THE_TRAY = sentences.gettext_noop("the tray")  # where an event no GPU reported was seen, in reasons


def where(event: HealthEvent) -> str:
    """Where an event was seen, as reasons say it: its GPU's UUID, or "the tray"."""
    return event.gpu_uuid or THE_TRAY


def timestamp(moment: datetime) -> str:
    """A moment as reasons and decisions write it: ``2025-10-14 11:20:09 UTC``."""
    return utc_words(moment)  # shown in the viewer's zone by the pages (core.moments.moment_html)


# --------------------------------------------------------------------------------------------------------
# Observations: a discovery report, DCGM samples
# --------------------------------------------------------------------------------------------------------


def observations_from_report(
    gpus: list[ReportedGpu], health: health_report.HealthReport, now: datetime
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
        codes = [str(flag) for flag in gpu.fabric_flags]
        if gpu.state == FabricState.IN_PROGRESS:
            codes.append(REGISTRATION_IN_PROGRESS)
        for code in codes:
            observations.append(
                Observation(kind=HealthKind.FABRIC, code=code, at=now, gpu_uuid=gpu.uuid, occurrence=False)
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


def dcgm_observations(sample, uuid: str, now: datetime, source: str) -> list[Observation]:
    """The faults one DCGM sample (tenancy.telemetry.HealthSample) shows on the GPU `uuid`."""
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


# --------------------------------------------------------------------------------------------------------
# Rows: active checks' results, events (new or repeats)
# --------------------------------------------------------------------------------------------------------


def store_check(tray: ComputeTray, check: health_report.CheckReport, now: datetime) -> HealthCheckResult:
    """Keep an active check's result (one row per run), and only the last CHECKS_KEPT of its name."""
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


def record_event(
    tray: ComputeTray, observation: Observation, window: timedelta, gpu_ids: dict
) -> tuple[HealthEvent, bool]:
    """The event this observation repeats (same tray, GPU, kind and code, last seen within the window),
    updated; else a new one. True when it is new."""
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
