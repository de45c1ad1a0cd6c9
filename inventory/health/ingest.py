"""The health loop's entry points: a discovery report, DCGM samples, an admin's finding.

Each runs the whole loop (the package docstring) inside one transaction with the tray row locked: the
observations recorded as events (inventory.health.events), judged by the rules (inventory.health.rules),
and, for a discovery report, the partition's recovery and the tray's return considered
(inventory.health.returns).
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from inventory.choices import GpuHealth, HealthKind, HealthSource
from inventory.discovery import faults, health_report
from inventory.discovery.nvidia_smi import RecoveryAction, ReportedGpu, ReportError, canonical_gpu_uuid
from inventory.health.actions import HealthError
from inventory.health.events import (
    MESSAGE_LIMIT,
    HealthOutcome,
    Observation,
    dcgm_observations,
    observations_from_report,
    store_check,
)
from inventory.health.returns import consider_return
from inventory.health.rules import RulesContext, consider_recovery, judge
from inventory.models import ComputeTray, Gpu

_UNHEALTHY = (GpuHealth.UNHEALTHY, GpuHealth.LIMITED_CAPACITY)


def record_report_health(
    tray: ComputeTray,
    gpus: list[ReportedGpu],
    health: health_report.HealthReport | None,
    now: datetime,
    *,
    gpus_listed: bool = True,
) -> HealthOutcome:
    """Record what a discovery report says about health and act on it. Called by
    inventory.ingest.reports.ingest_report inside its transaction, with `tray` locked and its GPUs reconciled;
    the caller saves the tray's `healthy_since`, `agent_version` and `agent_interval_s` with its own save."""
    health = health or health_report.HealthReport()
    observations, unmapped = observations_from_report(gpus, health, now)
    for check in health.checks:
        store_check(tray, check, now)
    if health.agent is not None:
        tray.agent_version = health.agent.version
        tray.agent_interval_s = health.agent.interval_s
    outcome = HealthOutcome(unmapped_xids=unmapped)
    context = RulesContext.load(now)
    acted_on = judge(tray, observations, context, outcome)
    bad_gpus = any(gpu.health in _UNHEALTHY for gpu in gpus)
    pending = any(gpu.recovery_action not in (None, RecoveryAction.NONE) for gpu in gpus)
    # A report without a GPU listing (nvidia-smi failed on the node) is no evidence of health.
    outcome.healthy = gpus_listed and not (acted_on or bad_gpus or pending)
    if outcome.healthy:
        tray.healthy_since = tray.healthy_since or now
    else:
        tray.healthy_since = None
    consider_recovery(tray, context, outcome)
    consider_return(tray, context, outcome)
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
        context = RulesContext.load(now)
        for tray_id in tray_ids:
            tray = trays[tray_id]
            observations = []
            for uuid, gpu in gpus.items():
                if gpu.tray_id != tray_id:
                    continue
                for sample in by_uuid[uuid]:
                    observations.extend(dcgm_observations(sample, uuid, now, source))
            if not observations:
                continue
            if judge(tray, observations, context, outcome):
                tray.healthy_since = None
                tray.save(update_fields=["healthy_since"])
    return outcome


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
        if judge(tray, [observation], RulesContext.load(now), outcome):
            tray.healthy_since = None
            tray.save(update_fields=["healthy_since"])
    return outcome
