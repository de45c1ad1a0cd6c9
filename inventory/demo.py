"""A realistic, deterministic demo datacenter, written with bulk inserts so 1,000 racks take seconds.

Every rack gets a default partition (clique 32766) except the second, carved 2x9. A few GPUs are degraded,
one tray is drained, and one tray's GPU is still registering with the fabric, so every screen has something
to show; `seed_mig_gpu` (the `seed_demo` command's) puts GPU 0 of the second-to-last rack's last tray in
MIG mode with four instances. The same seed always yields the same UUIDs, serials and GUIDs.
"""

import random
import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from core.hardware import DEFAULT_CLIQUE_ID, GPUS_PER_TRAY, TRAYS_PER_RACK
from inventory.choices import (
    ActionKind,
    FabricState,
    GpuHealth,
    HealthKind,
    MigMode,
    RuleAction,
    ServiceStatus,
    SystemModel,
    TrayState,
)
from inventory.discovery.mig import GpuMig, MigInstance, MigProfile
from inventory.health.actions import drain_reason, record_action
from inventory.health.events import Observation, record_event, where
from inventory.ingest.gpus import write_mig_devices
from inventory.models import ComputeTray, Gpu, HealthEvent, HealthRule, NVLinkPartition, Rack, ServiceRecord

PRODUCTS = {
    SystemModel.GB200_NVL72: ("NVIDIA GB200", 189471),
    SystemModel.GB300_NVL72: ("NVIDIA GB300", 284208),
}
BATCH = 5000

# The GB200's MIG profiles as `nvidia-smi mig -lgip` / `-lgipp` print them (driver 580; NVIDIA/mig-parted#227
# and shared reference operations.md 1.1): (ID, name, instances, memory MiB, SMs, placement starts, size).
GB200_MIG_PROFILES = (
    (0, "7g.186gb", 1, 189184, 148, (0,), 8),
    (5, "4g.93gb", 1, 93952, 76, (0,), 4),
    (9, "3g.93gb", 2, 93952, 66, (0, 4), 4),
    (14, "2g.47gb", 3, 46592, 38, (0, 2, 4), 2),
    (15, "1g.47gb", 4, 46592, 32, (0, 2, 4, 6), 2),
    (19, "1g.23gb", 7, 22528, 18, (0, 1, 2, 3, 4, 5, 6), 1),
    (20, "1g.23gb+me", 1, 22528, 18, (0, 1, 2, 3, 4, 5, 6), 1),
)
# The demo's MIG GPU: (GPU instance ID, profile ID, placement start) of each instance, the layout mig-parted's
# "all-balanced" gives a GB200 (2g.47gb, 2 x 1g.23gb, 3g.93gb), every slice taken.
DEMO_MIG_INSTANCES = ((3, 14, 0), (9, 19, 2), (10, 19, 3), (2, 9, 4))


@dataclass(frozen=True)
class SeedResult:
    racks: int
    trays: int
    gpus: int
    partitions: int


def rack_name(number: int, width: int) -> str:
    return f"gb-r{number:0{width}d}"


def tray_hostname(rack: str, slot: int) -> str:
    return f"{rack}-t{slot:02d}"


def location(number: int) -> str:
    """Ten racks a row, 25 rows a hall."""
    hall, row, position = "ABCD"[(number - 1) // 250 % 4], (number - 1) // 10 % 25 + 1, (number - 1) % 10 + 1
    return f"DC1 hall {hall} row {row:02d} pos {position:02d}"


def gpu_uuid(rng: random.Random) -> str:
    return f"GPU-{uuid.UUID(int=rng.getrandbits(128), version=4)}"


def carved_layout(trays_per_partition: int) -> list[tuple[int, list[int]]]:
    """(clique_id, slots) for a rack carved into equal partitions of consecutive trays."""
    return [
        (number + 1, list(range(start, start + trays_per_partition)))
        for number, start in enumerate(range(1, TRAYS_PER_RACK + 1, trays_per_partition))
    ]


@transaction.atomic
def seed_datacenter(racks: int = 8, system_model: str = SystemModel.GB200_NVL72, seed: int = 7) -> SeedResult:
    """Create `racks` NVL72 racks with trays, GPUs and partitions. Expects an empty inventory."""
    rng = random.Random(seed)
    now = timezone.now()
    product, memory_mib = PRODUCTS[SystemModel(system_model)]
    width = max(2, len(str(racks)))

    rack_rows = Rack.objects.bulk_create(
        [
            Rack(
                name=rack_name(n, width),
                system_model=system_model,
                cluster_uuid=uuid.UUID(int=rng.getrandbits(128), version=4),
                location=location(n),
            )
            for n in range(1, racks + 1)
        ],
        batch_size=BATCH,
    )

    # The second rack is carved 2x9; every other rack keeps its default partition.
    layouts = {}
    partitions = []
    for position, rack in enumerate(rack_rows):
        layout = (
            carved_layout(9) if position == 1 else [(DEFAULT_CLIQUE_ID, list(range(1, TRAYS_PER_RACK + 1)))]
        )
        layouts[rack.pk] = layout
        for number, (clique_id, _slots) in enumerate(layout, start=1):
            name = "default" if clique_id == DEFAULT_CLIQUE_ID else f"p{number}"
            partitions.append(NVLinkPartition(rack=rack, clique_id=clique_id, name=name))
    partitions = NVLinkPartition.objects.bulk_create(partitions, batch_size=BATCH)
    partition_of = {(p.rack_id, p.clique_id): p for p in partitions}

    trays = []
    guid_base = 0xA088C20300000000
    for rack in rack_rows:
        for clique_id, slots in layouts[rack.pk]:
            partition = partition_of[(rack.pk, clique_id)]
            for slot in slots:
                number = len(trays)
                trays.append(
                    ComputeTray(
                        rack=rack,
                        slot=slot,
                        hostname=tray_hostname(rack.name, slot),
                        partition=partition,
                        ib_port_guids=[f"0x{guid_base + number * 4 + port:016x}" for port in range(4)],
                        reported_clique=f"{rack.cluster_uuid}.{clique_id}",
                        last_report_at=now,
                    )
                )
    trays = ComputeTray.objects.bulk_create(trays, batch_size=BATCH)

    gpus = []
    for tray in trays:
        rack = tray.rack
        for index in range(GPUS_PER_TRAY):
            gpus.append(
                Gpu(
                    tray=tray,
                    index=index,
                    uuid=gpu_uuid(rng),
                    serial=f"{rng.randrange(10**12, 10**13)}",
                    product=product,
                    memory_mib=memory_mib,
                    health=GpuHealth.HEALTHY,
                    fabric_state=FabricState.COMPLETED,
                    fabric_status="Success",
                    reported_cluster_uuid=rack.cluster_uuid,
                    reported_clique_id=tray.partition.clique_id,
                    last_report_at=now,
                )
            )

    _degrade(rng, trays, gpus)
    for gpu in gpus:
        gpu.mig_mode = gpu.mig_pending = MigMode.DISABLED
    Gpu.objects.bulk_create(gpus, batch_size=BATCH)
    return SeedResult(racks=len(rack_rows), trays=len(trays), gpus=len(gpus), partitions=len(partitions))


def _degrade(rng: random.Random, trays: list[ComputeTray], gpus: list[Gpu]) -> None:
    """A few realistic faults: degraded GPUs, one tray drained for its broken GPU, one GPU still
    registering. Every reason names what the GPU rows show."""
    for position in rng.sample(range(len(gpus)), k=max(3, len(gpus) // 500)):
        gpus[position].health = rng.choice([GpuHealth.UNHEALTHY, GpuHealth.LIMITED_CAPACITY])

    # Drained because its GPU 2 fell off the bus: that GPU reports unhealthy, as the reason says.
    position = min(6, len(trays) - 1)
    drained = trays[position]
    drained.state = TrayState.DRAIN
    drained.state_reason = "XID 79 (GPU fell off the bus) on GPU 2; awaiting RMA"
    gpus[position * GPUS_PER_TRAY + 2].health = GpuHealth.UNHEALTHY

    if len(trays) > 2 * TRAYS_PER_RACK:
        registering = trays[2 * TRAYS_PER_RACK + 4]
        gpu = gpus[(2 * TRAYS_PER_RACK + 4) * GPUS_PER_TRAY + 1]
        gpu.fabric_state = FabricState.IN_PROGRESS
        gpu.fabric_status = ""
        registering.fabric_problems = [f"GPU 1 ({gpu.uuid}) fabric registration is still in progress"]
        ComputeTray.objects.filter(pk=registering.pk).update(fabric_problems=registering.fabric_problems)
    ComputeTray.objects.filter(pk=drained.pk).update(state=drained.state, state_reason=drained.state_reason)


def seed_mig_gpu(seed: int = 7) -> Gpu | None:
    """The demo's GPU in MIG mode (`manage.py seed_demo`, GB200 racks): GPU 0 of the drained tray, whose
    GPUs no job may have while it is out, so the demo's capacity, quotas and placements stay as they were
    (and the last rack stays free for the gangs the walkthrough carves it for), with the instances and
    profiles its node would report (DEMO_MIG_INSTANCES). None when there is no such GPU."""
    gpu = (
        Gpu.objects.filter(
            index=0, tray__state=TrayState.DRAIN, tray__rack__system_model=SystemModel.GB200_NVL72
        )
        .order_by("tray__rack__name", "tray__slot")
        .first()
    )
    if gpu is None:
        return None
    rng = random.Random(f"mig-{seed}")  # not the datacenter's sequence: its UUIDs are the racks'
    profiles = {
        pid: MigProfile(pid, name, 0, count, memory, False, sms, tuple((start, size) for start in starts))
        for pid, name, count, memory, sms, starts, size in GB200_MIG_PROFILES
    }
    instances = []
    for gi, pid, start in DEMO_MIG_INSTANCES:
        profile = profiles[pid]
        instances.append(
            MigInstance(
                gpu_instance_id=gi,
                compute_instance_id=0,
                profile=profile.name,
                profile_id=pid,
                placement_start=start,
                placement_size=profile.placements[0][1],
                uuid=f"MIG-{uuid.UUID(int=rng.getrandbits(128), version=4)}",
                multiprocessors=profile.multiprocessors,
                memory_mib=profile.memory_mib,
            )
        )
    gpu.mig_mode = gpu.mig_pending = MigMode.ENABLED
    gpu.mig = GpuMig(
        gpu.uuid, MigMode.ENABLED, MigMode.ENABLED, tuple(instances), tuple(profiles.values()), True
    ).as_dict()
    gpu.save(update_fields=["mig_mode", "mig_pending", "mig"])
    write_mig_devices({gpu.pk: gpu.mig})
    return gpu


# What the demo's fleet reported before it starts, besides the drained tray's faults: (position among the
# trays in service by rack and slot, GPU index or None for the tray, kind, code, XID, hours ago). Warnings
# only (an application's XID 13 or 31, a fabric route recovery): no rule takes a tray out for them, so the
# demo's capacity and placements stay as they are.
FLEET_WARNINGS = (
    (22, 1, HealthKind.XID, "13", 13, 30),
    (22, 1, HealthKind.XID, "13", 13, 170),
    (40, 3, HealthKind.XID, "31", 31, 52),
    (47, None, HealthKind.FABRIC, "ROUTE_RECOVERY", None, 8),
    (61, 0, HealthKind.XID, "13", 13, 300),
)
# A GB200 tray's GPU 2 is at PCI 0018:01:00 (tests/inventory/fixtures/nvidia_smi's real listing).
XID_79_LINE = "NVRM: Xid (PCI:0018:01:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


# What each GPU the demo seeds unhealthy or limited reported (a GPU's health is what its faults made it):
# (XID, hours ago). A contained memory error (XID 94: NVIDIA's action is restart the application) leaves NVML
# reporting the GPU unhealthy until it is reset; a row remapping event (XID 63) leaves it at limited capacity
# until the remap is applied. No default rule drains for either, so these trays stay in service as seeded
# (and the demo's jobs where they are).
DEGRADED_BY = {GpuHealth.UNHEALTHY: (94, 5), GpuHealth.LIMITED_CAPACITY: (63, 11)}


def _judged(tray: ComputeTray, observation: Observation, gpu_ids: dict) -> HealthEvent:
    """The event as the rules file it (drains, degrades or warns, by the enabled rules it matches), with the
    decisions they took when it came (inventory.health.rules.judge's records): a drain for the drained tray
    it took out (the rules' decision at the fault), a warning for the others. The demo's trays keep the
    states it seeded: a rule that would drain a tray the demo keeps in service is a mistake in the demo."""
    event, new = record_event(tray, observation, timedelta(minutes=10), gpu_ids)
    rules = [
        rule
        for rule in HealthRule.objects.filter(enabled=True).order_by("pk")
        if rule.matches(event.kind, event.xid, event.code, event.value)
    ]
    actions = {rule.action for rule in rules}
    event.drains = RuleAction.DRAIN in actions
    event.degrades = RuleAction.DEGRADE in actions
    event.warns = RuleAction.WARN in actions
    event.save(update_fields=["drains", "degrades", "warns"])
    first_of_each = {}
    for rule in rules:
        first_of_each.setdefault(rule.action, rule)
    for rule in first_of_each.values():
        if rule.action == RuleAction.DRAIN:
            if tray.state != TrayState.DRAIN:
                raise ValueError(f"the demo keeps {tray.hostname} in service, but rule {rule.name} drains it")
            reason = f"{drain_reason(event)} (rule {rule.name})"
            record_action(None, tray, ActionKind.DRAIN, reason, event, rule, at=observation.at)
        elif rule.action == RuleAction.WARN and new:  # a repeat is counted on its event, not decided again
            reason = f"{event.title} on {where(event)}: {rule.name}"
            record_action(None, tray, ActionKind.WARN, reason, event, rule, at=observation.at)
    return event


def seed_health_history(now=None) -> int:
    """What the node agents of the demo's trays reported before the demo starts, as events of their
    timelines and the health centre (the same rows the health rules record for a real report): for each tray
    drained for a GPU that fell off the bus, the kernel's XID 79 on that GPU three hours ago, the rules'
    drain for it and its service mark (needs service: awaiting RMA, as its reason says); for every other GPU
    the demo seeds unhealthy or limited, the fault that made it so (DEGRADED_BY); and a few warnings across
    the fleet (FLEET_WARNINGS). No tray changes state. The number of events recorded."""
    now = now or timezone.now()
    recorded = 0
    for tray in ComputeTray.objects.filter(state=TrayState.DRAIN, state_reason__startswith="XID 79"):
        gpu = tray.gpus.filter(index=2).first()
        if gpu is None:
            continue
        observation = Observation(
            kind=HealthKind.XID,
            code="79",
            at=now - timedelta(hours=3),
            gpu_uuid=gpu.uuid,
            xid=79,
            message=XID_79_LINE,
        )
        _judged(tray, observation, {gpu.uuid: gpu.pk})
        recorded += 1
        ServiceRecord.objects.get_or_create(
            tray=tray,
            status=ServiceStatus.NEEDS_SERVICE,
            defaults={
                "gpu": gpu,
                "gpu_uuid": gpu.uuid,
                "note": "GPU 2 fell off the bus; awaiting RMA",
                "created_at": now - timedelta(hours=2),
            },
        )
    degraded = (
        Gpu.objects.filter(health__in=list(DEGRADED_BY))
        .exclude(health_events__isnull=False)
        .select_related("tray", "tray__rack")
        .order_by("tray__rack__name", "tray__slot", "index")
    )
    for gpu in degraded:
        xid, hours = DEGRADED_BY[gpu.health]
        observation = Observation(
            kind=HealthKind.XID, code=str(xid), at=now - timedelta(hours=hours), gpu_uuid=gpu.uuid, xid=xid
        )
        _judged(gpu.tray, observation, {gpu.uuid: gpu.pk})
        recorded += 1
    in_service = list(ComputeTray.objects.filter(state=TrayState.UP).order_by("rack__name", "slot"))
    for position, index, kind, code, xid, hours in FLEET_WARNINGS:
        if position >= len(in_service):
            continue
        tray = in_service[position]
        gpu = tray.gpus.filter(index=index).first() if index is not None else None
        observation = Observation(
            kind=kind,
            code=code,
            at=now - timedelta(hours=hours),
            gpu_uuid=gpu.uuid if gpu is not None else "",
            xid=xid,
            occurrence=True,
        )
        _judged(tray, observation, {gpu.uuid: gpu.pk} if gpu is not None else {})
        recorded += 1
    return recorded
