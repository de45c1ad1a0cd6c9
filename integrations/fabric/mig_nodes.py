"""The simulated nodes' MIG manager: in the embedded mode (`make run`: the simulated fabric, no GPU Operator),
a tray given a MIG layout reports its GPUs in that layout once the push that renders it has run, through the
same discovery service a real node agent posts to (inventory.ingest.reports.ingest_report), as the GPU
Operator's MIG manager and the node's agent do on a real site.

On a real site the push sets the node's ``nvidia.com/mig.config`` label (and mig-parted's ConfigMap); the MIG
manager then stops the GPU clients, switches MIG mode, makes the layout's GPU instances and compute instances,
and the node's agent reports them (``nvidia-smi -q -x`` and ``nvidia-smi mig -lgi/-lgip/-lgipp``, ``-L``).
Here the simulated fabric target's push carries the layouts the trays were given (its payload's
``mig_nodes``, rendered with the label) and plays both, in two rounds like the fabric's nodes
(integrations.fabric.nodes): right after the push, each tray whose GPUs do not report its layout yet reports
them with the new mode pending and no instances (the manager is at work); SETTLE_SECONDS later (a task
message carrying the reports) with the new mode current and the layout's instances.

The instances are never taken from a table: they are the placements inventory.mig_layouts.place finds for
the layout among the profiles and placements the GPUs' model reported (``-lgip``/``-lgipp``, the tray's
catalogue: inventory.mig_options.layout_options), each with its profile's memory and multiprocessors as
reported. A tray whose layout is ``all-disabled`` reports MIG off. A tray given no layout is left alone.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable

from core.enqueue import enqueue
from core.task_names import REPORT_NODES
from integrations.fabric.nodes import SETTLE_SECONDS, deliver
from inventory.choices import MigMode as StoredMigMode
from inventory.discovery.mig import MEMORY_SLICES, GpuMig, MigInstance, MigMode, MigProfile
from inventory.discovery.nvidia_smi import FabricState, GpuHealth, ReportedGpu
from inventory.mig_layouts import COMPUTE_SLICES, LayoutError, compute_slices, place
from inventory.mig_layouts import layout as mig_layout
from inventory.mig_options import layout_options, layout_status
from inventory.models import ComputeTray

# The MIG devices' UUIDs (nvidia-smi -L: "MIG-<uuid>"): the same GPU, layout and instance give the same one.
MIG_UUIDS = uuid.UUID("4f6a2c1e-9b3d-5e70-8a41-2d6c0b7e9f13")


def mig_nodes(nodes: Iterable) -> list[dict]:
    """The simulated fabric's payload part: each tray given a layout, {"host", "layout", "devices"}
    (integrations.kubernetes.render.NodeSpec: the layout its node label names)."""
    return [
        {"host": node.hostname, "layout": node.mig_layout.name, "devices": node.mig_layout.as_dict()}
        for node in nodes
        if node.mig_layout is not None
    ]


def _free(profile: MigProfile, used: list[bool], made: Counter) -> int:
    """How many more instances of `profile` the GPU could make now (-lgip's Free column): its placements
    that still fit the free memory slices, taken greedily, within its total and the free compute slices."""
    taken = list(used)
    count = 0
    for start, size in sorted(profile.placements):
        if start + size <= len(taken) and not any(taken[start : start + size]):
            taken[start : start + size] = [True] * size
            count += 1
    try:
        slices = compute_slices(profile.name)
    except LayoutError:
        slices = 1
    left = COMPUTE_SLICES - sum(compute_slices(name) * n for name, n in made.items())
    return max(0, min(count, profile.instances_total - made[profile.name], left // slices))


def made_by_manager(gpu_uuid: str, layout_name: str, devices: dict, profiles: Iterable[MigProfile]) -> GpuMig:
    """The GPU as its node reports it once the MIG manager applied the layout: MIG on, one GPU instance
    (with one compute instance) per device the layout asks for, at the placement inventory.mig_layouts
    .place finds among the reported ones, and the profiles with what is left free. Pure; LayoutError when
    the profiles cannot hold the layout."""
    profiles = tuple(profiles)
    by_name = {p.name: p for p in profiles}
    placed = place(devices, profiles)
    used = [False] * MEMORY_SLICES
    made: Counter = Counter()
    instances = []
    for number, (name, start, size) in enumerate(placed, start=1):
        profile = by_name[name]
        used[start : start + size] = [True] * size
        made[name] += 1
        device = uuid.uuid5(MIG_UUIDS, f"{gpu_uuid}/{layout_name}/{number}/{name}/{start}")
        instances.append(
            MigInstance(
                gpu_instance_id=number,
                compute_instance_id=0,
                profile=name,
                profile_id=profile.profile_id,
                placement_start=start,
                placement_size=size,
                uuid=f"MIG-{device}",
                multiprocessors=profile.multiprocessors,
                memory_mib=profile.memory_mib,
            )
        )
    offered = tuple(
        MigProfile(
            p.profile_id,
            p.name,
            _free(p, used, made),
            p.instances_total,
            p.memory_mib,
            p.p2p,
            p.multiprocessors,
            p.placements,
        )
        for p in profiles
    )
    return GpuMig(gpu_uuid, MigMode.ENABLED, MigMode.ENABLED, tuple(instances), offered, True)


def _entry(gpu, mig: GpuMig) -> dict:
    reported = ReportedGpu(
        gpu.uuid,
        gpu.index,
        str(gpu.reported_cluster_uuid) if gpu.reported_cluster_uuid else None,
        gpu.reported_clique_id,
        FabricState(gpu.fabric_state),
        gpu.fabric_status or None,
        GpuHealth(gpu.health),
    )
    return {**reported.as_dict(), "mig": mig.as_dict()}


def _counts(devices) -> dict[str, int]:
    """A layout's devices as the payload holds them: profile name -> a whole number (no text, no bool)."""
    if not isinstance(devices, dict) or not all(
        isinstance(name, str) and isinstance(count, int) and not isinstance(count, bool)
        for name, count in devices.items()
    ):
        raise LayoutError(f"the MIG devices must map profile names to whole numbers, not {devices!r}")
    return devices


def mig_reports(nodes: list[dict]) -> tuple[list[dict], list[dict], list[str]]:
    """The reports of the trays of `nodes` (mig_nodes' shape) whose GPUs do not report their layout yet:
    (mode pending now, layout made once settled, what was refused in words). A report is {"host": hostname,
    "gpus": [ReportedGpu.as_dict() with its "mig": GpuMig.as_dict()]}, as integrations.fabric.nodes.deliver
    posts it."""
    wanted = {node["host"]: node for node in nodes}
    trays = (
        ComputeTray.objects.filter(hostname__in=list(wanted)).prefetch_related("gpus").order_by("hostname")
    )
    now, later, refused = [], [], []
    for tray in trays:
        node = wanted[tray.hostname]
        gpus = sorted((g for g in tray.gpus.all() if g.index is not None), key=lambda g: g.index)
        try:
            chosen = mig_layout(node["layout"], _counts(node["devices"]))
        except (LayoutError, TypeError, ValueError) as error:
            refused.append(f"{tray.hostname}: {error}")
            continue
        if not gpus or layout_status(tray, chosen, gpus).done:
            continue
        if any(g.mig_mode == StoredMigMode.NOT_SUPPORTED for g in gpus):
            refused.append(f"{tray.hostname}: its GPUs report that they cannot do MIG")
            continue
        target = MigMode.ENABLED if chosen.enabled else MigMode.DISABLED
        profiles = layout_options(tray, gpus).profiles
        settled = []
        try:
            for gpu in gpus:
                if chosen.enabled:
                    settled.append(made_by_manager(gpu.uuid, chosen.name, chosen.counts, profiles))
                else:
                    settled.append(GpuMig(gpu.uuid, MigMode.DISABLED, MigMode.DISABLED, (), (), True))
        except LayoutError as error:
            refused.append(f"{tray.hostname}: {error}")
            continue
        pending = []
        for gpu in gpus:
            on = gpu.mig_mode == StoredMigMode.ENABLED
            current = MigMode.ENABLED if on else MigMode.DISABLED
            pending.append(GpuMig(gpu.uuid, current, target, (), profiles if on else (), on))
        now.append(
            {"host": tray.hostname, "gpus": [_entry(g, m) for g, m in zip(gpus, pending, strict=True)]}
        )
        later.append(
            {"host": tray.hostname, "gpus": [_entry(g, m) for g, m in zip(gpus, settled, strict=True)]}
        )
    return now, later, refused


def report_after_push(nodes: list[dict], log) -> None:
    """The simulated fabric's push ran: the trays whose layout changed report the new mode pending now, and
    their GPUs in the layout SETTLE_SECONDS after the push's work commits."""
    now, later, refused = mig_reports(nodes)
    for line in refused:
        log(f"MIG manager (simulated): {line}")
    if not now:
        return
    deliver(now)
    enqueue(REPORT_NODES, later, countdown=SETTLE_SECONDS)
    hosts = ", ".join(report["host"] for report in now)
    log(
        f"MIG manager (simulated): {hosts} apply their layout (node label nvidia.com/mig.config); "
        f"their GPUs report it in about {SETTLE_SECONDS} s"
    )
