"""The simulated fabric's node agents: after the simulated fabric re-carves a rack, its compute trays report
their GPUs' new fabric state through the same discovery service a real node agent posts to
(inventory.ingest.reports.ingest_report, behind /api/v1/discovery/reports/).

As on real hardware, the change is not instant. Right after the fabric applied a rack, every tray whose GPUs
change clique reports them "in progress" (no clique yet: the inventory keeps their old one, so the rack shows
drift while the fabric changes); SETTLE_SECONDS later the trays report "completed" with the clique of the
partition the fabric now holds each GPU in, and the drift clears. The second round travels as a task message
carrying the reports (the simulated fabric lives in one process's memory; the message does not depend on it).

Only trays whose GPUs report another NVLink domain or clique than the fabric holds report at all: a tray
whose cliques did not change keeps what its node last said (health, problems, registration in progress).
"""

from __future__ import annotations

from core.audit import audit_context
from core.enqueue import enqueue
from core.models import AuditSource
from core.task_names import REPORT_NODES
from integrations.fabric.base import normalize_domain
from inventory.discovery.mig import GpuMig
from inventory.discovery.nvidia_smi import FabricState, GpuHealth, ReportedGpu
from inventory.ingest.reports import ingest_report
from inventory.ingest.results import UnknownHost
from inventory.models import ComputeTray, Gpu

# How long the simulated fabric "takes" between a rack's apply and its nodes reporting the new cliques.
SETTLE_SECONDS = 15


def _gpu(entry: dict) -> ReportedGpu:
    return ReportedGpu(
        uuid=entry["uuid"],
        index=entry["index"],
        cluster_uuid=entry["cluster_uuid"],
        clique_id=entry["clique_id"],
        state=FabricState(entry["state"]),
        status=entry["status"],
        health=GpuHealth(entry["health"]),
        # The simulated MIG manager's reports (integrations.fabric.mig_nodes) carry the GPU's MIG state.
        mig=GpuMig.from_dict(entry["mig"]) if entry.get("mig") else None,
    )


def node_reports(rack: dict, live_partitions) -> tuple[list[dict], list[dict]]:
    """The reports of `rack`'s trays whose GPUs change clique: (in progress now, completed once settled).

    `rack` is the fabric payload's rack (name, domain, partitions with their GPUs as (uuid, slot, index));
    `live_partitions` the FabricPartitions the fabric holds for its domain after the apply. A report is
    {"host": hostname, "gpus": [ReportedGpu.as_dict(), ...]}, the structured form the discovery API takes.
    """
    domain = normalize_domain(rack["domain"])
    clique_of = {gpu: p.partition_id for p in live_partitions for gpu in p.gpu_uuids}
    slot_of = {gpu: (slot, index) for p in rack["partitions"] for gpu, slot, index in p["gpus"]}
    hosts = dict(ComputeTray.objects.filter(rack__name=rack["rack"]).values_list("slot", "hostname"))
    trays: dict[int, list[tuple]] = {}
    for gpu_uuid, cluster, clique, health in Gpu.objects.filter(uuid__in=list(slot_of)).values_list(
        "uuid", "reported_cluster_uuid", "reported_clique_id", "health"
    ):
        slot, index = slot_of[gpu_uuid]
        reported = (str(cluster) if cluster else None, clique)
        trays.setdefault(slot, []).append((index, gpu_uuid, health, reported))
    changing, settled = [], []
    for slot, gpus in sorted(trays.items()):
        if slot not in hosts:
            continue
        now, later, moves = [], [], False
        for index, gpu_uuid, health, reported in sorted(gpus):
            clique = clique_of.get(gpu_uuid)
            final = ReportedGpu(
                gpu_uuid,
                index,
                domain if clique is not None else None,
                clique,
                FabricState.COMPLETED if clique is not None else FabricState.NOT_STARTED,
                "Success" if clique is not None else None,
                GpuHealth(health),
            )
            if reported != (final.cluster_uuid, final.clique_id):
                moves = True
                now.append(
                    ReportedGpu(gpu_uuid, index, None, None, FabricState.IN_PROGRESS, None, final.health)
                )
            else:
                now.append(final)
            later.append(final)
        if moves:
            changing.append({"host": hosts[slot], "gpus": [gpu.as_dict() for gpu in now]})
            settled.append({"host": hosts[slot], "gpus": [gpu.as_dict() for gpu in later]})
    return changing, settled


def deliver(reports: list[dict]) -> list[str]:
    """Post each report to the discovery service, as a node agent would. Returns the hosts reconciled;
    a host no longer in the inventory is skipped. The nodes report as themselves: in the audit a background
    task with no user, whoever applied the plan whose push got them reporting."""
    done = []
    with audit_context(AuditSource.TASK):
        for report in reports:
            try:
                ingest_report(report["host"], "json", [_gpu(entry) for entry in report["gpus"]])
            except UnknownHost:
                continue
            done.append(report["host"])
    return done


def report_after_apply(rack: dict, live_partitions, log) -> None:
    """The simulated fabric applied `rack`: its changing trays report "in progress" now, and "completed"
    with their new cliques SETTLE_SECONDS after this push's work commits."""
    changing, settled = node_reports(rack, live_partitions)
    if not changing:
        return
    deliver(changing)
    enqueue(REPORT_NODES, settled, countdown=SETTLE_SECONDS)
    log(
        f"{rack['rack']}: {len(changing)} node(s) report the fabric change in progress; "
        f"their new cliques follow in about {SETTLE_SECONDS} s"
    )
