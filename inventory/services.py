"""Inventory workflows that change several rows at once: reconciling what a node reports.

Discovery is the source of truth for what *is* (GPU UUIDs, where they sit, their fabric state); the
inventory is the source of truth for what is *intended* (which partition a tray belongs to). Reconciling a
node report updates the first and flags any disagreement with the second as drift, on the tray, visibly.
"""

import uuid
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.audit import record_bulk_change
from inventory import health as health_rules
from inventory.discovery.faults import HealthReport
from inventory.discovery.nvidia_smi import NodeReport, ReportedGpu, summarize, validate_report
from inventory.models import ComputeTray, Gpu, Rack

# A GPU another tray reported within this window is still that tray's: see _contested.
CLAIM_WINDOW = timedelta(minutes=15)

# The GPU columns whose bulk changes are announced (attname -> field name where they differ); freshness,
# serial, product and memory are not decisions' inputs.
_ANNOUNCED = (
    "tray_id",
    "index",
    "health",
    "fabric_state",
    "fabric_status",
    "reported_cluster_uuid",
    "reported_clique_id",
)
_FIELD_NAME = {"tray_id": "tray"}


class UnknownHost(LookupError):
    """The report is for a host the inventory does not have."""


@dataclass
class IngestResult:
    report: NodeReport
    applied: bool
    drift: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    learned_cluster_uuid: str | None = None
    health: health_rules.HealthOutcome | None = None

    def changes(self) -> dict:
        return {
            "applied": self.applied,
            "drift": self.drift,
            "created_gpus": self.created,
            "moved_gpus": self.moved,
            "removed_gpus": self.removed,
            "learned_cluster_uuid": self.learned_cluster_uuid,
            "health": self.health.as_dict() if self.health is not None else None,
        }


def _expected_cluster(tray: ComputeTray | None) -> str | None:
    return str(tray.rack.cluster_uuid) if tray is not None and tray.rack.cluster_uuid else None


def check_report(host: str, fmt: str, gpus: list[ReportedGpu]) -> IngestResult:
    """Judge a report without writing anything; works for hosts the inventory does not know yet.

    ReportError (from validate_report) for a report that ingest_report would refuse.
    """
    gpus = validate_report(gpus)
    tray = ComputeTray.objects.select_related("rack", "partition").filter(hostname=host).first()
    report = summarize(host, fmt, gpus, expected_cluster_uuid=_expected_cluster(tray))
    if tray is not None:
        claims = _contested(tray, gpus, Gpu.objects.filter(uuid__in=[g.uuid for g in gpus]), timezone.now())
        report.problems.extend(claims.values())
    drift = _drift(tray, report) if tray is not None else []
    return IngestResult(report=report, applied=False, drift=drift)


HEALTH_ONLY = "health"  # the format of a report that carries no GPU listing (nvidia-smi failed on the node)


def ingest_health(host: str, health: HealthReport, *, dry_run: bool = False) -> IngestResult:
    """A report with XIDs or check results but no GPU listing: when a GPU falls off the bus, `nvidia-smi`
    itself fails on the node, and the agent still sends what the kernel logged. Nothing about the GPUs is
    reconciled (none is detached for not being listed); the health events are recorded and judged as in
    ingest_report. Without a listing the tray is never counted healthy (it cannot earn its return)."""
    report = NodeReport(host=host, format=HEALTH_ONLY, gpus=[], tray_clique=None)
    if dry_run:
        if not ComputeTray.objects.filter(hostname=host).exists():
            raise UnknownHost(f"host {host!r} is not in the inventory: add its compute tray first")
        return IngestResult(report=report, applied=False)
    now = timezone.now()
    with transaction.atomic():
        tray = ComputeTray.objects.select_for_update().filter(hostname=host).first()
        if tray is None:
            raise UnknownHost(f"host {host!r} is not in the inventory: add its compute tray first")
        tray.rack = Rack.objects.select_for_update().get(pk=tray.rack_id)  # the lock order of ingest_report
        result = IngestResult(report=report, applied=True)
        result.health = health_rules.record_report_health(tray, [], health, now, gpus_listed=False)
        tray.save(update_fields=["healthy_since", "agent_version", "agent_interval_s"])
    return result


def ingest_report(
    host: str, fmt: str, gpus: list[ReportedGpu], health: HealthReport | None = None
) -> IngestResult:
    """Reconcile one node's report with the inventory, atomically.

    Creates GPUs the inventory has never seen, follows GPUs that moved (to another tray or index),
    detaches GPUs the node no longer reports (kept, not deleted), learns the rack's cluster UUID from its
    first consistent report, and records problems and drift on the tray. Fabric values a GPU reports only
    when healthy (cluster UUID, clique ID) keep their last good value when a report lacks them. GPUs changed
    in bulk (detached, moved, new health, fabric state or clique) are announced with `bulk_changed`.

    A report validate_report refuses raises ReportError before anything is read or written. A GPU another
    tray still reports is not moved: see _contested.

    `health` (XIDs, active checks, the agent; inventory.discovery.faults.validate_health made it) and the
    GPUs' recovery actions and fabric health flags are recorded as health events and judged by the health
    rules in the same transaction (inventory.health.record_report_health): a drain decided here commits
    with the report, or neither does.
    """
    gpus = validate_report(gpus)
    now = timezone.now()
    with transaction.atomic():
        tray = ComputeTray.objects.select_for_update().filter(hostname=host).first()
        if tray is None:
            raise UnknownHost(f"host {host!r} is not in the inventory: add its compute tray first")
        rack = Rack.objects.select_for_update().get(pk=tray.rack_id)
        tray.rack = rack
        report = summarize(host, fmt, gpus, expected_cluster_uuid=_expected_cluster(tray))
        result = IngestResult(report=report, applied=True)

        _reconcile_gpus(tray, gpus, now, result)

        if rack.cluster_uuid is None and report.tray_clique and not report.problems:
            learned = report.tray_clique.split(".")[0]
            owner = Rack.objects.filter(cluster_uuid=learned).exclude(pk=rack.pk).first()
            if owner is None:
                rack.cluster_uuid = uuid.UUID(learned)
                rack.save(update_fields=["cluster_uuid", "updated_at"])
                result.learned_cluster_uuid = learned
            else:
                report.problems.append(
                    f"cluster UUID {learned} is already the cluster UUID of rack {owner.name}; "
                    f"{rack.name} did not learn it"
                )

        result.drift = _drift(tray, report)
        tray.fabric_problems = report.problems + result.drift
        if report.tray_clique:
            tray.reported_clique = report.tray_clique
        tray.last_report = report.as_dict()
        tray.last_report_at = now
        result.health = health_rules.record_report_health(tray, gpus, health, now)
        tray.save(
            update_fields=[
                "fabric_problems",
                "reported_clique",
                "last_report",
                "last_report_at",
                "healthy_since",
                "agent_version",
                "agent_interval_s",
            ]
        )
    return result


def _contested(tray: ComputeTray, gpus: list[ReportedGpu], known, now) -> dict[str, str]:
    """GPUs of this report that another tray still holds, as {uuid: problem naming both hosts}.

    Rule: a GPU that another tray reported within CLAIM_WINDOW stays on that tray; this report leaves it
    alone and gets a problem instead (recorded on the tray with the others). A GPU physically moved is
    followed once its old tray stops reporting it: that tray's next report detaches it, or the window runs
    out. The report is still answered 200 and the rest of it applied, not refused with a 409: the agent
    cannot fix a duplicate claim by retrying, two hosts claiming one UUID is a fact about the fleet an
    operator must see on the tray, and refusing would also drop this node's health and clique updates.
    """
    reported = {gpu.uuid: gpu for gpu in gpus}
    since = now - CLAIM_WINDOW
    holders = [
        gpu
        for gpu in known
        if gpu.uuid in reported
        and gpu.tray_id not in (None, tray.pk)
        and gpu.last_report_at is not None
        and gpu.last_report_at >= since
    ]
    hosts = dict(
        ComputeTray.objects.filter(pk__in={gpu.tray_id for gpu in holders}).values_list("pk", "hostname")
    )
    return {
        gpu.uuid: (
            f"GPU {reported[gpu.uuid].index} ({gpu.uuid}) is also reported by {hosts[gpu.tray_id]}, which "
            f"reported it at {gpu.last_report_at:%Y-%m-%d %H:%M:%S %Z}; it stays on {hosts[gpu.tray_id]} and "
            f"is not moved to {tray.hostname} until {hosts[gpu.tray_id]} stops reporting it"
        )
        for gpu in holders
    }


def _reconcile_gpus(tray: ComputeTray, gpus: list[ReportedGpu], now, result: IngestResult) -> None:
    locked = list(
        Gpu.objects.select_for_update()
        .filter(Q(uuid__in=[gpu.uuid for gpu in gpus]) | Q(tray=tray))
        .order_by("pk")
    )
    claims = _contested(tray, gpus, locked, now)
    result.report.problems.extend(claims.values())
    gpus = [gpu for gpu in gpus if gpu.uuid not in claims]
    reported = {gpu.uuid: gpu for gpu in gpus}
    known = {gpu.uuid: gpu for gpu in locked if gpu.uuid not in claims}

    # What each known GPU held before this report, for `bulk_changed` (the rows are loaded already).
    before = {gpu.pk: {name: getattr(gpu, name) for name in _ANNOUNCED} for gpu in known.values()}
    after = {pk: dict(values) for pk, values in before.items()}

    # GPUs that left this tray, and GPUs about to take a new place, first give up their (tray, index) so the
    # unique constraint never sees two GPUs on one position mid-update.
    vacate = []
    for gpu in known.values():
        wanted = reported.get(gpu.uuid)
        if wanted is None:
            result.removed.append(gpu.uuid)
            vacate.append(gpu)
        elif (gpu.tray_id, gpu.index) != (tray.pk, wanted.index):
            if gpu.tray_id not in (None, tray.pk):
                result.moved.append(gpu.uuid)
            vacate.append(gpu)
    vacated = {gpu.pk for gpu in vacate}
    if vacated:
        Gpu.objects.filter(pk__in=vacated).update(tray=None, index=None)
        for pk in vacated:
            after[pk].update(tray_id=None, index=None)

    # Most reports change nothing but freshness: group GPUs by what actually changed and send one plain
    # UPDATE per distinct change (usually one for the whole tray) instead of a per-row CASE bulk update.
    changes: dict[tuple, list[int]] = {}
    created = []
    for wanted in gpus:
        values = {
            "tray_id": tray.pk,
            "index": wanted.index,
            "health": wanted.health.value,
            "fabric_state": wanted.state.value,
            "fabric_status": wanted.status or "",
        }
        if wanted.cluster_uuid is not None and wanted.clique_id is not None:
            values["reported_cluster_uuid"] = uuid.UUID(wanted.cluster_uuid)
            values["reported_clique_id"] = wanted.clique_id
        for name in ("serial", "product", "memory_mib"):
            if getattr(wanted, name):
                values[name] = getattr(wanted, name)
        gpu = known.get(wanted.uuid)
        if gpu is None:
            created.append(Gpu(uuid=wanted.uuid, last_report_at=now, **values))
            result.created.append(wanted.uuid)
            continue
        if gpu.pk in vacated:
            gpu.tray_id = gpu.index = None
        changed = tuple(
            sorted((name, value) for name, value in values.items() if getattr(gpu, name) != value)
        )
        changes.setdefault(changed, []).append(gpu.pk)
        after[gpu.pk].update((name, value) for name, value in changed if name in _ANNOUNCED)
    for changed, pks in changes.items():
        Gpu.objects.filter(pk__in=pks).update(last_report_at=now, **dict(changed))
    if created:
        Gpu.objects.bulk_create(created)
    announced = {}
    for pk, old in before.items():
        diff = {_FIELD_NAME.get(k, k): (v, after[pk][k]) for k, v in old.items() if v != after[pk][k]}
        if diff:
            announced[pk] = diff
    record_bulk_change(Gpu, announced)


def _drift(tray: ComputeTray, report: NodeReport) -> list[str]:
    """Where the node's reported clique is not the partition the inventory intends for the tray."""
    partition = tray.partition
    if partition is None:
        return []
    intended = f"{tray.rack.name} {partition.name} (clique {partition.clique_id})"
    if report.tray_clique:
        clique_id = int(report.tray_clique.rsplit(".", 1)[1])
        if clique_id != partition.clique_id:
            return [f"drift: the node reports clique {clique_id}, the inventory intends {intended}"]
        return []
    return [
        f"drift: GPU {gpu.index} ({gpu.uuid}) reports clique {gpu.clique_id}, "
        f"the inventory intends {intended}"
        for gpu in report.gpus
        if gpu.clique_id is not None and gpu.clique_id != partition.clique_id
    ]
