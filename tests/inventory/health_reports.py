"""Reports as a node agent sends them, for the health tests: a GB200 tray's real `nvidia-smi -q -x` output
(the fixture of tests/inventory/fixtures) with the tray's own GPU UUIDs, cluster UUID and clique, its NVML
recovery action and fabric health rows set as a failing GPU prints them, and kernel XID lines."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime
from pathlib import Path

from django.utils import timezone

from inventory.models import ComputeTray

FIXTURE = Path(__file__).parent / "fixtures" / "nvidia_smi" / "gb200_default_partition.xml"
# The fixture's GPUs in order: <gpu id="..."> (the PCI bus id, as nvidia-smi prints it).
BUS_IDS = ["00000008:01:00.0", "00000009:01:00.0", "00000018:01:00.0", "00000019:01:00.0"]
URL = "/api/v1/discovery/reports/"


def nvidia_smi_xml(
    tray: ComputeTray,
    *,
    recovery: dict[int, str] | None = None,
    health: dict[int, dict[str, str]] | None = None,
) -> str:
    """`nvidia-smi -q -x` of `tray`: `recovery` {GPU index: "GPU Reset Required"}, `health` {GPU index:
    {"route_unhealthy": "True", "summary": "Unhealthy"}} (rows of Fabric > Health)."""
    root = ET.fromstring(FIXTURE.read_text().split("\n", 2)[2])  # without the XML and DOCTYPE lines
    gpus = list(tray.gpus.order_by("index"))
    clique = str(tray.partition.clique_id) if tray.partition_id else "32766"
    for index, element in enumerate(root.findall("gpu")):
        element.find("uuid").text = gpus[index].uuid
        fabric = element.find("fabric")
        fabric.find("clusterUuid").text = str(tray.rack.cluster_uuid)
        fabric.find("cliqueId").text = clique
        if recovery and index in recovery:
            element.find("gpu_recovery_action").text = recovery[index]
        for name, value in ((health or {}).get(index) or {}).items():
            fabric.find("health").find(name).text = value
    return ET.tostring(root, encoding="unicode")


def xid_line(number: int, gpu_index: int = 0, text: str = "GPU has fallen off the bus.") -> str:
    """The kernel line, as the driver logs it: the PCI id without its function number, 4-digit domain."""
    domain, bus, rest = BUS_IDS[gpu_index].split(":")
    return f"NVRM: Xid (PCI:{int(domain, 16):04x}:{bus}:{rest[:2]}): {number}, pid=4242, name=python, {text}"


def xid(number: int, gpu_index: int = 0, at: datetime | None = None, **fields) -> dict:
    entry = {
        "time": (at or timezone.now()).isoformat(),
        "xid": number,
        "pid": 4242,
        "text": xid_line(number, gpu_index),
    }
    entry.update(fields)
    return entry


def report(tray: ComputeTray, **extra) -> dict:
    body = {"host": tray.hostname, "nvidia_smi": nvidia_smi_xml(tray)}
    body.update(extra)
    return body
