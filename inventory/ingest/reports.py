"""Reconciling what a node reports: the inventory workflows that change several rows at once.

Discovery is the source of truth for what *is* (GPU UUIDs, where they sit, their fabric state); the
inventory is the source of truth for what is *intended* (which partition a tray belongs to). Reconciling a
node report updates the first and flags any disagreement with the second as drift, on the tray, visibly.

An unchanged report is a heartbeat (inventory.ingest.heartbeats); a report may move only the GPUs its
agent token's scope covers (inventory.ingest.gpus).
"""

import uuid

from django.db import transaction
from django.utils import timezone

from core.sentences import CLAUSES, gettext_noop, say
from inventory.discovery.health_report import HealthReport
from inventory.discovery.nvidia_smi import NodeReport, ReportedGpu, summarize, validate_report
from inventory.discovery.report_hash import report_hash, report_key
from inventory.health.ingest import record_report_health
from inventory.ingest.gpus import contested, reconcile_gpus, require_in_scope
from inventory.ingest.heartbeats import quiet, report_basis
from inventory.ingest.results import HEALTH_ONLY, IngestResult, UnknownHost
from inventory.models import AgentToken, ComputeTray, Gpu, Rack

# A tray's fabric problems found here: templates (core.sentences), stored in English, shown translated.
CLUSTER_TAKEN = gettext_noop("cluster UUID %(cluster)s is already the cluster UUID of rack %(owner)s")
NOT_LEARNED = gettext_noop("%(rack)s did not learn it")
DRIFT_NODE = gettext_noop(
    "drift: the node reports clique %(clique)s, the inventory intends %(rack)s %(name)s (clique %(intended)s)"
)
DRIFT_GPU = gettext_noop(
    "drift: GPU %(index)s (%(uuid)s) reports clique %(clique)s, the inventory intends %(rack)s %(name)s "
    "(clique %(intended)s)"
)


def _expected_cluster(tray: ComputeTray | None) -> str | None:
    return str(tray.rack.cluster_uuid) if tray is not None and tray.rack.cluster_uuid else None


def check_report(
    host: str, fmt: str, gpus: list[ReportedGpu], *, scope: AgentToken | None = None
) -> IngestResult:
    """Judge a report without writing anything; works for hosts the inventory does not know yet.

    ReportError (from validate_report) for a report that ingest_report would refuse; OutOfScope for one
    `scope` may not send (a dry run is refused as the report itself would be, and learns no other rack's
    hosts from the contested-GPU problems).
    """
    gpus = validate_report(gpus)
    tray = ComputeTray.objects.select_related("rack", "partition").filter(hostname=host).first()
    known = list(Gpu.objects.filter(uuid__in=[g.uuid for g in gpus]))
    require_in_scope(scope, tray, host, known)
    report = summarize(host, fmt, gpus, expected_cluster_uuid=_expected_cluster(tray))
    if tray is not None:
        claims = contested(tray, gpus, known, timezone.now())
        report.problems.extend(claims.values())
    drift = _drift(tray, report) if tray is not None else []
    return IngestResult(report=report, applied=False, drift=drift)


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
        result.health = record_report_health(tray, [], health, now, gpus_listed=False)
        tray.save(update_fields=["healthy_since", "agent_version", "agent_interval_s"])
    return result


def ingest_report(
    host: str,
    fmt: str,
    gpus: list[ReportedGpu],
    health: HealthReport | None = None,
    *,
    scope: AgentToken | None = None,
) -> IngestResult:
    """Reconcile one node's report with the inventory, atomically.

    Creates GPUs the inventory has never seen, follows GPUs that moved (to another tray or index),
    detaches GPUs the node no longer reports (kept, not deleted), learns the rack's cluster UUID from its
    first consistent report, and records problems and drift on the tray. Fabric values a GPU reports only
    when healthy (cluster UUID, clique ID) keep their last good value when a report lacks them. GPUs changed
    in bulk (detached, moved, new health, fabric state or clique) are announced with `bulk_changed`.

    A report validate_report refuses raises ReportError before anything is read or written. A GPU another
    tray still reports is not moved: see inventory.ingest.gpus.contested.

    `health` (XIDs, active checks, the agent; inventory.discovery.health_report.validate_health made it) and
    the GPUs' recovery actions and fabric health flags are recorded as health events and judged by the health
    rules in the same transaction (inventory.health.ingest.record_report_health): a drain decided here commits
    with the report, or neither does.

    `scope`: the agent token the report came with (None: a fleet token, a command). A report listing a GPU
    outside it raises OutOfScope, judged on the locked rows before the first write (see
    inventory.ingest.gpus): nothing of the report is applied, its health included.
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

        reconcile_gpus(tray, gpus, now, result, scope)

        if rack.cluster_uuid is None and report.tray_clique and not report.problems:
            learned = report.tray_clique.split(".")[0]
            owner = Rack.objects.filter(cluster_uuid=learned).exclude(pk=rack.pk).first()
            if owner is None:
                rack.cluster_uuid = uuid.UUID(learned)
                rack.save(update_fields=["cluster_uuid", "updated_at"])
                result.learned_cluster_uuid = learned
            else:
                report.problems.append(
                    CLAUSES.join(
                        [
                            say(CLUSTER_TAKEN, cluster=learned, owner=owner.name),
                            say(NOT_LEARNED, rack=rack.name),
                        ]
                    )
                )

        result.drift = _drift(tray, report)
        tray.fabric_problems = report.problems + result.drift
        if report.tray_clique:
            tray.reported_clique = report.tray_clique
        tray.last_report = report.as_dict()
        tray.last_report_at = now
        result.health = record_report_health(tray, gpus, health, now)
        result.report_sha256 = report_sha256(fmt, gpus, health)
        tray.report_key = (
            report_key(result.report_sha256, report_basis(tray)) if _settled(tray, result) else ""
        )
        tray.save(
            update_fields=[
                "fabric_problems",
                "reported_clique",
                "last_report",
                "last_report_at",
                "healthy_since",
                "agent_version",
                "agent_interval_s",
                "report_key",
            ]
        )
    return result


def report_sha256(fmt: str, gpus: list[ReportedGpu], health: HealthReport | None) -> str:
    """The hash ingest_report gives this report (inventory.discovery.report_hash: the GPUs, the format and
    the agent's version and interval as sent)."""
    agent = health.agent if health is not None else None
    return report_hash(fmt, gpus, agent.version if agent else "", agent.interval_s if agent else None)


def _no_health_business(tray: ComputeTray) -> bool:
    """Nothing the health rules must look at again on this tray's next report: it counts healthy, the rules
    did not take it out (return to service needs reports), its partition is not degraded (recovery needs
    reports)."""
    partition = tray.partition
    return quiet(
        tray.healthy_since, tray.state, tray.state_reason, partition.degraded_reason if partition else ""
    )


def _settled(tray: ComputeTray, result: IngestResult) -> bool:
    """Whether the same report again may be a heartbeat (see inventory.ingest.heartbeats)."""
    outcome = result.health
    return (
        _no_health_business(tray)
        and outcome is not None
        and outcome.healthy
        and not outcome.actions
        and not result.contested
        and not result.report.problems
        and not result.drift
    )


def _drift(tray: ComputeTray, report: NodeReport) -> list[str]:
    """Where the node's reported clique is not the partition the inventory intends for the tray."""
    partition = tray.partition
    if partition is None:
        return []
    intended = {"rack": tray.rack.name, "name": partition.name, "intended": partition.clique_id}
    if report.tray_clique:
        clique_id = int(report.tray_clique.rsplit(".", 1)[1])
        if clique_id != partition.clique_id:
            return [say(DRIFT_NODE, clique=clique_id, **intended)]
        return []
    return [
        say(DRIFT_GPU, index=gpu.index, uuid=gpu.uuid, clique=gpu.clique_id, **intended)
        for gpu in report.gpus
        if gpu.clique_id is not None and gpu.clique_id != partition.clique_id
    ]
