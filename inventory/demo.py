"""A realistic, deterministic demo datacenter, written with bulk inserts so 1,000 racks take seconds.

Every rack gets a default partition (clique 32766) except the second, carved 2x9. A few GPUs are degraded,
one tray is drained, and one tray's GPU is still registering with the fabric, so every screen has
something to show. The same seed always yields the same UUIDs, serials and GUIDs.
"""

import random
import uuid
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from core.hardware import DEFAULT_CLIQUE_ID, GPUS_PER_TRAY, TRAYS_PER_RACK
from inventory.choices import FabricState, GpuHealth, SystemModel, TrayState
from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack

PRODUCTS = {
    SystemModel.GB200_NVL72: ("NVIDIA GB200", 189471),
    SystemModel.GB300_NVL72: ("NVIDIA GB300", 284208),
}
BATCH = 5000


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
