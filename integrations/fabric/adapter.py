"""The fabric target's adapter: FabricManager.apply rack by rack (one NVLink domain each), with progress.

With the simulated fabric, the racks' simulated nodes then report their new cliques through discovery
(integrations.fabric.nodes), as node agents do on real hardware after NMX-M re-carves a rack."""

from __future__ import annotations

import threading
from collections.abc import Callable

from core.hardware import DEFAULT_CLIQUE_ID
from core.outbound import ALLOW_PRIVATE_SETTING
from integrations.fabric import (
    FabricError,
    FabricPartition,
    GpuLocation,
    NmxFabricManager,
    SimulatedFabricManager,
)
from integrations.fabric.mig_nodes import report_after_push
from integrations.fabric.nodes import report_after_apply
from inventory.models import Gpu, NVLinkPartition

# The embedded fabric keeps its partitions in memory: one per target, for the life of the process.
_SIMULATED: dict[int, SimulatedFabricManager] = {}
_SIMULATED_LOCK = threading.Lock()


def simulated_fabric(target_id: int) -> SimulatedFabricManager:
    """The target's simulated fabric. A process that has none yet (a worker just started) begins with the
    partitions the nodes last reported, as a real fabric manager would hold them: a plan for one rack then
    changes that rack only."""
    with _SIMULATED_LOCK:
        if target_id not in _SIMULATED:
            _SIMULATED[target_id] = _as_reported()
        return _SIMULATED[target_id]


def _as_reported() -> SimulatedFabricManager:
    names = {
        (str(rack_uuid), clique): name
        for rack_uuid, clique, name in NVLinkPartition.objects.exclude(rack__cluster_uuid=None).values_list(
            "rack__cluster_uuid", "clique_id", "name"
        )
    }
    members: dict[tuple[str, int], list[str]] = {}
    for uuid, domain, clique in Gpu.objects.filter(
        tray__isnull=False, reported_cluster_uuid__isnull=False, reported_clique_id__isnull=False
    ).values_list("uuid", "reported_cluster_uuid", "reported_clique_id"):
        members.setdefault((str(domain), clique), []).append(uuid)
    partitions = [
        FabricPartition(names.get((domain, clique), f"clique-{clique}"), clique, tuple(uuids), domain)
        for (domain, clique), uuids in members.items()
    ]
    try:
        return SimulatedFabricManager(partitions)
    except (FabricError, ValueError):  # the reports do not make a valid fabric (a GPU in two cliques...)
        return SimulatedFabricManager()


class FabricAdapter:
    """FabricManager.apply rack by rack (one NVLink domain each), with progress lines in the log."""

    def __init__(self, target, values: dict):
        self.target = target
        self.values = values
        self.facts: dict[str, str] = {}  # what NMX-M told (the path it serves), kept on the target

    def _manager(self, racks: list[dict]):
        if self.values["kind"] == "simulated":
            return simulated_fabric(self.target.pk)
        locations = {
            uuid: GpuLocation.for_tray(rack["domain"], slot, index)
            for rack in racks
            if rack.get("domain")
            for partition in rack["partitions"]
            for uuid, slot, index in partition["gpus"]
        }
        return NmxFabricManager(
            self.values["base_url"],
            token=self.values.get("token") or None,
            verify=not self.values.get("insecure"),
            locations=locations,
            allow_private=bool(self.values.get(ALLOW_PRIVATE_SETTING, True)),
            api=(self.target.facts or {}).get("nmx_api"),
        )

    def _learned(self, manager) -> None:
        if self.values["kind"] == "simulated":
            self.facts = {"fabric_manager": "simulated"}
        else:
            self.facts = {"fabric_manager": "NMX-M", **getattr(manager, "facts", {})}

    def check(self) -> list[str]:
        """Test connection (integrations.push_history): NMX-M answers its partition and GPU lists under the
        path it serves (found here and remembered on the target); nothing is written."""
        manager = self._manager([])
        self._learned(manager)
        if self.values["kind"] == "simulated":
            domains = manager.domains()
            partitions = sum(len(manager.read_back(domain)) for domain in domains)
            held = f"{len(domains):,} NVLink domains, {partitions:,} partitions"
            return [f"simulated fabric in this process: {held}"]
        api = manager.probe()
        self._learned(manager)
        partitions = manager.collection("partitions")
        gpus = manager.collection("gpus")
        release = "NetQ 5.2 or later" if api == "/v1" else "NMX-M or NetQ 5.0"
        return [
            f"NMX-M answers at {manager.base_url}{api} (the path of {release})",
            f"{len(gpus):,} GPUs and {len(partitions):,} partitions visible with this token",
        ]

    @staticmethod
    def _desired(rack: dict) -> list[FabricPartition]:
        return [
            FabricPartition(p["name"], p["partition_id"], tuple(g[0] for g in p["gpus"]), rack["domain"])
            for p in rack["partitions"]
            if p["gpus"] or p["partition_id"] == DEFAULT_CLIQUE_ID
        ]

    def apply(self, payload: dict, log: Callable[..., None], push) -> str:
        racks = payload.get("racks") or []
        manager = self._manager(racks)
        changed, unchanged, skipped = [], 0, []
        for number, rack in enumerate(racks, 1):
            if not rack.get("domain"):
                skipped.append(rack["rack"])
                continue
            name = rack["rack"]

            def progress(step, total, message, name=name):
                if total:
                    log(f"{name}: {message}")

            try:
                result = manager.apply(rack["domain"], self._desired(rack), progress=progress)
                self._learned(manager)
            except FabricError as error:
                self._learned(manager)
                done = ", ".join(changed) or "none"
                error.details.append(
                    f"racks changed before the failure: {done}; racks not attempted: {len(racks) - number}"
                )
                raise
            if result.changed:
                changed.append(name)
                if self.values["kind"] == "simulated":
                    # No node agent runs on simulated hardware: its simulated nodes report the new cliques.
                    report_after_apply(rack, result.read_back, log)
            else:
                unchanged += 1
            if result.renumbered:
                log(f"{name}: " + result.log[-1])
        if self.values["kind"] == "simulated":
            # No MIG manager runs on simulated hardware: the trays' simulated nodes apply their MIG layouts.
            report_after_push(payload.get("mig_nodes") or [], log)
        if skipped:
            log(
                f"{len(skipped)} rack(s) skipped, no cluster UUID known yet (not discovered): "
                + ", ".join(skipped[:10])
                + (", ..." if len(skipped) > 10 else "")
            )
        return f"{len(changed)} rack(s) changed, {unchanged} already as planned, {len(skipped)} skipped"

    def diff(self, payload: dict) -> list[str]:
        racks = payload.get("racks") or []
        manager = self._manager(racks)
        out = []
        for rack in racks:
            if not rack.get("domain"):
                out.append(f"{rack['rack']}: skipped (no cluster UUID known yet)")
                continue
            summary = manager.diff(rack["domain"], self._desired(rack)).summary()
            self._learned(manager)
            out.extend(f"{rack['rack']}: {line}" for line in summary)
        return out
