"""A realistic, deterministic demo datacenter, written with bulk inserts so 1,000 racks take seconds.

Every rack gets a default partition (clique 32766) except the second, carved 2x9. A few GPUs are degraded,
one tray is drained, and one tray's GPU is still registering with the fabric, so every screen has something
to show; `seed_mig_gpu` (the `seed_demo` command's) puts GPU 0 of the second-to-last rack's last tray in
MIG mode with four instances. The same seed always yields the same UUIDs, serials and GUIDs.
"""

import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from core.hardware import DEFAULT_CLIQUE_ID, GPUS_PER_TRAY, TRAYS_PER_RACK
from inventory import fabric_import
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
from inventory.discovery.fabric.read import read as read_fabric
from inventory.discovery.health_report import HealthReport, validate_xid
from inventory.discovery.mig import GpuMig, MigInstance, MigProfile
from inventory.discovery.nvidia_smi import FabricFlag, ReportedGpu
from inventory.discovery.nvidia_smi import FabricState as ReportedFabricState
from inventory.discovery.nvidia_smi import GpuHealth as ReportedHealth
from inventory.health.actions import drain_reason, record_action, rule_reason
from inventory.health.events import HealthOutcome, Observation, observations_from_report, record_event
from inventory.health.rules import RulesContext, judge
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

    # Drained because its GPU 2 fell off the bus: that GPU reports unhealthy, as the reason says (the health
    # history, seed_health_history, gives it the reason the rules' drain gives, with the XID 79 event).
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
# trays in service by rack and slot, GPU index, kind, code, XID, hours ago). Warnings only (an application's
# XID 13 or 31, a fabric route recovery its GPU's NVML health mask shows): no rule takes a tray out for them,
# so the demo's capacity and placements stay as they are.
FLEET_WARNINGS = (
    (22, 1, HealthKind.XID, "13", 13, 30),
    (22, 1, HealthKind.XID, "13", 13, 170),
    (40, 3, HealthKind.XID, "31", 31, 52),
    (47, 0, HealthKind.FABRIC, "ROUTE_RECOVERY", None, 8),
    (61, 0, HealthKind.XID, "13", 13, 300),
)
# A GB200 tray's GPUs are at these PCI bus ids, by index (tests/inventory/fixtures/nvidia_smi's real listing);
# the kernel's XID lines name a GPU by it.
TRAY_PCI = ("00000008:01:00.0", "00000009:01:00.0", "00000018:01:00.0", "00000019:01:00.0")
XID_79_LINE = "NVRM: Xid (PCI:0018:01:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
# The kernel's line for each XID the demo's reports carry, as the driver writes them (%s: the GPU's PCI id).
XID_LINES = {
    13: "NVRM: Xid (PCI:%s): 13, pid=48213, name=python3, Graphics Exception: ESR 0x514648=0x1000e",
    31: "NVRM: Xid (PCI:%s): 31, pid=51876, name=python3, Ch 00000008, intr 00000000. MMU Fault",
    63: "NVRM: Xid (PCI:%s): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row marked for "
    "remapping, reset gpu to activate.",
    94: "NVRM: Xid (PCI:%s): 94, pid=50312, name=python3, Contained: CE User Channel (0x9). RST: No",
}


# What each GPU the demo seeds unhealthy or limited reported (a GPU's health is what its faults made it):
# (XID, hours ago). A contained memory error (XID 94: NVIDIA's action is restart the application) leaves NVML
# reporting the GPU unhealthy until it is reset; a row remapping event (XID 63) leaves it at limited capacity
# until the remap is applied. No default rule acts on either (the health centre says so in words), so these
# trays stay in service as seeded (and the demo's jobs where they are).
DEGRADED_BY = {GpuHealth.UNHEALTHY: (94, 5), GpuHealth.LIMITED_CAPACITY: (63, 11)}


def _drained_by_rules(tray: ComputeTray, observation: Observation, gpu_ids: dict) -> HealthEvent:
    """The drained tray's fault as the rules filed it, with the drain they took for it when it came
    (inventory.health.rules.judge's records). The demo seeds the tray drained already (before its jobs, so
    none is placed there), where the rules' judge would leave an earlier owner's drain alone: this records
    the decision the rules took at the fault instead, and the reason they gave the tray."""
    event, _new = record_event(tray, observation, timedelta(minutes=10), gpu_ids)
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
    rule = next((rule for rule in rules if rule.action == RuleAction.DRAIN), None)
    if rule is None:
        raise ValueError(f"the demo drains {tray.hostname} for {event.title}, but no rule drains for it")
    # As the rules' drain leaves it (rules._drain_decision): the tray's reason is theirs ("rackplane: ..."),
    # so the tray is theirs to return, and its page tells one story.
    tray.state_reason = drain_reason(event)
    ComputeTray.objects.filter(pk=tray.pk).update(state_reason=tray.state_reason)
    record_action(
        None, tray, ActionKind.DRAIN, rule_reason(tray.state_reason, rule), event, rule, at=observation.at
    )
    return event


@dataclass(frozen=True)
class _Report:
    """One report a demo tray's node agent sent: when, and the XID its kernel logged on a GPU (or none)."""

    tray: ComputeTray
    at: datetime
    gpu_index: int | None = None
    xid: int | None = None
    fabric_flag: str = ""


def _send(report: _Report) -> int:
    """`report` through the health path of a real one (inventory.health.ingest.record_report_health's):
    its GPUs as the node lists them (fabric state and health as the inventory holds them), its kernel line
    read as the agent sends it, the observations from inventory.health.events.observations_from_report, and
    the rules' judge as it ran when the report came. No tray changes state (a rule that would take one out
    is a mistake in the demo). The number of events it recorded or repeated."""
    tray = report.tray
    flags = (FabricFlag(report.fabric_flag),) if report.fabric_flag else ()
    gpus = []
    for gpu in tray.gpus.order_by("index"):
        gpus.append(
            ReportedGpu(
                uuid=gpu.uuid,
                index=gpu.index,
                cluster_uuid=str(gpu.reported_cluster_uuid) if gpu.reported_cluster_uuid else None,
                clique_id=gpu.reported_clique_id,
                state=ReportedFabricState(gpu.fabric_state),
                status=gpu.fabric_status or None,
                health=ReportedHealth(gpu.health),
                pci_bus_id=TRAY_PCI[gpu.index] if gpu.index < len(TRAY_PCI) else None,
                fabric_flags=flags if gpu.index == report.gpu_index else (),
            )
        )
    xids = ()
    if report.xid is not None:
        pci = TRAY_PCI[report.gpu_index].removeprefix("0000")[:-2]
        entry = {"time": report.at.isoformat(), "xid": report.xid, "text": XID_LINES[report.xid] % pci}
        xids = (validate_xid(entry, now=report.at),)
    observations, _unmapped = observations_from_report(gpus, HealthReport(xids=xids), report.at)
    outcome = HealthOutcome()
    judge(tray, observations, RulesContext.load(report.at), outcome)
    state = ComputeTray.objects.values_list("state", flat=True).get(pk=tray.pk)
    if state != tray.state:
        raise ValueError(f"the demo keeps {tray.hostname} {tray.state}, but its report made it {state}")
    return outcome.new_events + outcome.repeated_events


def seed_health_history(now=None) -> int:
    """What the node agents of the demo's trays reported before the demo starts, as events of their
    timelines and the health centre (recorded and judged as a real report's: `_send`): for each tray
    drained for a GPU that fell off the bus, the kernel's XID 79 on that GPU three hours ago, the rules'
    drain for it and its service mark (needs service: awaiting RMA, as its reason says); for every other GPU
    the demo seeds unhealthy or limited, the fault that made it so (DEGRADED_BY); for every GPU still
    registering with the NVLink fabric, its node's report of it now; and a few warnings across the fleet
    (FLEET_WARNINGS). No tray changes state. The number of events recorded."""
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
        _drained_by_rules(tray, observation, {gpu.uuid: gpu.pk})
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
    reports = []
    degraded = (
        Gpu.objects.filter(health__in=list(DEGRADED_BY))
        .exclude(health_events__isnull=False)
        .select_related("tray", "tray__rack")
        .order_by("tray__rack__name", "tray__slot", "index")
    )
    for gpu in degraded:
        xid, hours = DEGRADED_BY[gpu.health]
        reports.append(_Report(gpu.tray, now - timedelta(hours=hours), gpu.index, xid))
    registering = (
        ComputeTray.objects.filter(gpus__fabric_state=FabricState.IN_PROGRESS)
        .distinct()
        .order_by("rack__name", "slot")
    )
    reports += [_Report(tray, now) for tray in registering]
    in_service = list(ComputeTray.objects.filter(state=TrayState.UP).order_by("rack__name", "slot"))
    for position, index, kind, code, xid, hours in FLEET_WARNINGS:
        if position < len(in_service):
            flag = code if kind == HealthKind.FABRIC else ""
            reports.append(_Report(in_service[position], now - timedelta(hours=hours), index, xid, flag))
    for report in sorted(reports, key=lambda report: report.at):  # as they came, oldest first
        recorded += _send(report)
    return recorded


# --- The compute fabric above the racks (issue 33) ---------------------------------------------------------

DEMO_RACKS_PER_UNIT = 4
DEMO_SPINE_GROUPS = ("spine-a", "spine-b")


def demo_site_file(rack_names: list[str]) -> str:
    """The demo's fabric as an operator would write it (docs/operators/fabric.md): scalable units of
    DEMO_RACKS_PER_UNIT racks, each unit's four rail leaves, the first half of the units under spine-a and the
    rest under spine-b (8 racks: su-1 = gb-r01..04 under spine-a, su-2 = gb-r05..08 under spine-b)."""
    names = sorted(rack_names)
    units = [names[i : i + DEMO_RACKS_PER_UNIT] for i in range(0, len(names), DEMO_RACKS_PER_UNIT)]
    half = (len(units) + 1) // 2
    lines = ["spine_groups:"]
    for spine, members in ((DEMO_SPINE_GROUPS[0], units[:half]), (DEMO_SPINE_GROUPS[1], units[half:])):
        if not members:
            continue
        lines += [f"  - name: {spine}", "    units:"]
        for racks in members:
            number = units.index(racks) + 1
            leaves = ", ".join(f"leaf-su{number}-rail{rail}" for rail in range(GPUS_PER_TRAY))
            lines += [
                f"      - name: su-{number}",
                f"        racks: [{', '.join(racks)}]",
                f"        leaves: [{leaves}]",
            ]
    return "\n".join(lines) + "\n"


def seed_fabric() -> int:
    """Give the demo's racks a fabric through the site-file importer (the same path an operator's file
    takes), put in use; returns the racks placed. Changes no capacity and no placement made before it."""
    text = demo_site_file(list(Rack.objects.values_list("name", flat=True)))
    parsed = read_fabric("site_file", text.encode(), "demo-site.yaml")
    plan = fabric_import.apply(parsed, label="demo-site.yaml", use=True)
    return len(plan.racks)
