"""The canonical hash of a parsed node report: what makes two reports "the same" for discovery.

Pure (no Django). Two reports hash alike exactly when reconciling the second could change nothing the first
did not: the same GPUs (every field the parsers read, including the raw values problem messages quote, the
PCI bus ids XIDs map to, the recovery actions and fabric health flags, the MIG mode and instances), the same
input format, and the same agent version and interval (written on the tray). Volatile readings nvidia-smi
prints (temperatures, clocks, utilization, a timestamp) are never parsed, so they never count.

The hash is what the portal answers (`report_sha256`) and what a node agent may send back instead of its
body (inventory.api.discovery): 64 lower-case hex digits.
"""

from __future__ import annotations

import hashlib
import json
import re

from inventory.discovery.nvidia_smi import ReportedGpu

HASH_RE = re.compile(r"^[0-9a-f]{64}$")
VERSION = 2  # part of the hashed text: a change of what is hashed makes every stored hash differ


def _gpu(gpu: ReportedGpu) -> list:
    return [
        gpu.uuid,
        gpu.index,
        gpu.cluster_uuid,
        gpu.clique_id,
        str(gpu.state.value),
        gpu.status,
        str(gpu.health.value),
        gpu.serial,
        gpu.product,
        gpu.memory_mib,
        gpu.raw_cluster_uuid,
        gpu.raw_clique_id,
        gpu.pci_bus_id,
        str(gpu.recovery_action.value) if gpu.recovery_action is not None else None,
        sorted(str(flag.value) for flag in gpu.fabric_flags),
        gpu.mig.as_dict() if gpu.mig is not None else None,
    ]


def report_hash(fmt: str, gpus: list[ReportedGpu], agent_version: str = "", agent_interval_s=None) -> str:
    """sha256 (hex) of the canonical form of a validated report; GPUs in reported order (order is index)."""
    canonical = [VERSION, fmt, agent_version or "", agent_interval_s, [_gpu(gpu) for gpu in gpus]]
    text = json.dumps(canonical, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def report_key(report_sha256: str, basis: str) -> str:
    """What a tray stores: the report's hash bound to what the inventory intended when it was reconciled
    (rack, its cluster UUID, the tray's partition), so a changed intent makes the same report count again."""
    return hashlib.sha256(f"{report_sha256}\n{basis}".encode()).hexdigest()
