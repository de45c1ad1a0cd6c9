"""The demo's simulated node agents and DCGM exporters: one tick of each (portal.tasks, every minute with
RACKPLANE_DEMO_TELEMETRY), through the real ingest and scrape paths, so `make run`'s inventory keeps reporting
and its charts end at "now".
"""

import random
from datetime import datetime

from django.db.models import F, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from inventory.discovery import nvidia_smi
from inventory.ingest import heartbeats as inventory_heartbeats
from inventory.ingest import reports as inventory_reports
from inventory.models import Gpu
from portal.demo.history import unheld_reporting_gpus
from portal.demo.telemetry import IDLE_RANGE, next_utilization
from scheduling.choices import HOLDING_STATES
from scheduling.models import Allocation
from tenancy.activity import RecordResult, record_samples
from tenancy.models import GpuUtilization
from tenancy.telemetry import Sample


def demo_nodes_report(now: datetime | None = None) -> dict:
    """One tick of the demo's simulated node agents: every tray that reported before sends its last report
    again (the GPUs as the inventory last heard them: clique, fabric state, health), as a real agent does
    every minute. Through the real path: inventory.ingest.heartbeats with the report's hash (one read per
    tray, last-seen times batched), or a full ingest_report when the tray's last report was not reconciled
    by one (the seed's trays, once). Repeating what was heard, never what the inventory intends, leaves a
    re-carved rack's drift to the simulated fabric's own reports (integrations.fabric.nodes)."""
    now = now or timezone.now()
    heard = (
        Gpu.objects.filter(tray__last_report_at__isnull=False)
        .exclude(fabric_state="")
        .select_related("tray")
        .order_by("tray__hostname", "index")
    )
    by_host: dict[str, list[nvidia_smi.ReportedGpu]] = {}
    for gpu in heard:
        by_host.setdefault(gpu.tray.hostname, []).append(
            nvidia_smi.ReportedGpu(
                gpu.uuid,
                gpu.index,
                str(gpu.reported_cluster_uuid) if gpu.reported_cluster_uuid else None,
                gpu.reported_clique_id,
                nvidia_smi.FabricState(gpu.fabric_state),
                gpu.fabric_status or None,
                nvidia_smi.GpuHealth(gpu.health),
            )
        )
    beats = ingested = 0
    for host, gpus in by_host.items():
        if inventory_heartbeats.heartbeat(host, inventory_reports.report_sha256("json", gpus, None), now):
            beats += 1
        else:
            inventory_reports.ingest_report(host, "json", gpus)
            ingested += 1
    inventory_heartbeats.flush_heartbeats()
    return {"trays": len(by_host), "heartbeats": beats, "full_reports": ingested}


def record_demo_telemetry(now: datetime | None = None, rng: random.Random | None = None) -> RecordResult:
    """One tick of the demo's simulated DCGM exporters (portal.tasks.simulate_demo_telemetry): a sample for
    every GPU a starting or running job holds, and a low one for every other GPU on a tray that is not down,
    recorded by the direct scrape's own path (tenancy.activity.record_samples: the activity row and the
    5-minute bucket).

    Each value follows the GPU's previous sample taken while its job held it (portal.demo.telemetry): the
    activity row, or when that aged out the GPU's last bucket since the job started. Three queries to read,
    record_samples' handful to write, whatever the number of GPUs.
    """
    now = now or timezone.now()
    rng = rng or random.Random()
    since = Coalesce(F("job__started_at"), F("job__placed_at"), F("job__created_at"))
    last_bucket = GpuUtilization.objects.filter(
        gpu=OuterRef("gpu"), bucket_start__gte=OuterRef("held_since"), bucket_start__lte=now
    ).order_by("-bucket_start")
    rows = (
        Allocation.objects.filter(job__state__in=HOLDING_STATES)
        .annotate(held_since=since)
        .annotate(last_mean=Subquery(last_bucket.values("mean")[:1]))
        .order_by("gpu_id")
        .values_list(
            "gpu_id",
            "gpu__uuid",
            "gpu__tray__hostname",
            "gpu__index",
            "job_id",
            "held_since",
            "gpu__activity__utilization",
            "gpu__activity__sampled_at",
            "last_mean",
        )
    )
    samples = []
    for gpu_id, uuid, hostname, index, job_id, held_since, value, sampled_at, last_mean in rows:
        previous = value if sampled_at is not None and held_since and sampled_at >= held_since else last_mean
        samples.append(
            Sample(
                uuid=uuid,
                hostname=hostname,
                gpu_index=index,
                value=next_utilization(previous, job_id, gpu_id, rng),
            )
        )
    # A DCGM exporter reports every GPU of its node: the ones no job holds (whole or a MIG slice) are low.
    free = unheld_reporting_gpus().values_list("uuid", "tray__hostname", "index")
    samples += [
        Sample(uuid=uuid, hostname=hostname, gpu_index=index, value=round(rng.uniform(*IDLE_RANGE), 1))
        for uuid, hostname, index in free
    ]
    return record_samples(samples, at=now)
