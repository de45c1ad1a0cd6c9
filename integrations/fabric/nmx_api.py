"""NMX Manager's REST API (NMX-M) as NmxFabricManager (nmx.py) reads and writes it: the paths and values
below, GPU locations, the fabric of one domain as read back, and the fields of its answers.

The API shape, and where it comes from:

* NMX-M documentation, "Partitions Management" (docs.nvidia.com/networking/display/nmxmv8513000/
  Partitions+Management) and NetQ NVLink "Manage Partitions" (cumulus-netq-50/52):
  `GET/POST /nmx/v1/partitions`, `GET/PUT/DELETE /nmx/v1/partitions/{id}`; create, update and delete
  answer `202 Accepted` with `{"operationId": "..."}` and a `Location: /nmx/v1/operations/<op-id>` header;
  an operation that created a resource answers, once completed, with a Location header pointing to it.
  Members are either GPU IDs or location objects (domain, chassis, slot, host); the member type is fixed at
  creation and a PUT with the other type is a `409 Conflict`. PUT carries the complete new member list (the
  manager adds and removes the difference); the partition name cannot be changed. A GPU belongs to one
  partition; a partition's GPUs are in one domain. Health values per resiliency mode.
* NVIDIA's own Rust client, libnmxm (github.com/NVIDIA/ncx-infra-controller-core, crates/libnmxm,
  nmxm_model.rs / nmxm_api.rs), for the field names:
  Partition `{"ID", "PartitionID", "Name", "Type": ID_BASED|LOCATION_BASED|UNDEFINED, "Health", "Members",
  "CreatedAt", "UpdatedAt"}`; location member `{"DomainUUID", "ChassisID", "SlotID", "HostID", "DeviceID"}`;
  create body `{"Name", "Members"}` and update body `{"Members"}` (no PartitionID: the fabric assigns it);
  Operation `{"ID", "Status": pending|in-progress|failed|completed|cancelled, "Percentage", "CurrentStep",
  "Request": {...}, "Result": {"Data", "Error", "Details"}}`; GPU `{"ID", "DomainUUID", "LocationInfo":
  {"ChassisID", "SlotID", "HostID", "TrayIndex"}, "DeviceID", "PartitionID", ...}` at `GET /nmx/v1/gpus`.
  The `{id}` in partition paths is the partition's system `ID` (a 24-hex string), not its PartitionID.
* NMX-C gRPC API documentation: PartitionID 1..32766, 32766 is the default partition ("Default
  Partition"), names unique in a domain, up to 255 ASCII characters.
* Where the API is served: NMX-M v85 and NetQ 5.0 ("NetQ NVLink", NMX-M shipped inside NetQ) write every
  path under `/nmx/v1`; NetQ 5.2's "Manage Partitions" writes the same resources under `/v1`. Rackplane finds
  which one a server answers (API_PREFIXES, newest first) at Test connection and on first use, keeps it on
  the target (its facts, `nmx_api`), and looks again when a remembered prefix stops answering.
* NMX-M "HTTPS/Authentication": HTTPS with Kong basic authentication (users ro-user and rw-user);
  requests carry `Authorization: Basic <token>`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from integrations.fabric.base import (
    FabricPartition,
    FabricRejected,
    FabricStep,
    normalize_domain,
)

API = "/nmx/v1"  # NMX-M and NetQ 5.0
API_PREFIXES = ("/v1", API)  # newest first: NetQ 5.2 and later, then NMX-M / NetQ 5.0
ID_BASED = "ID_BASED"
LOCATION_BASED = "LOCATION_BASED"
UNDEFINED = "UNDEFINED"
TERMINAL_OK = "completed"
TERMINAL_BAD = ("failed", "cancelled")
RUNNING = ("pending", "in-progress")
FOREIGN_ID = "nmx-gpu:"  # a member NMX-M knows but the given locations do not
FOREIGN_LOCATION = "nmx-location:"


@dataclass(frozen=True)
class GpuLocation:
    """Where NMX-M finds a GPU: a location-based partition member."""

    domain: str
    chassis_id: int
    slot_id: int
    host_id: int
    device_id: int

    def __post_init__(self):
        object.__setattr__(self, "domain", normalize_domain(self.domain))

    @classmethod
    def for_tray(
        cls, domain: str, slot: int, gpu_index: int, *, chassis_id: int = 1, host_id: int = 1
    ) -> GpuLocation:
        """The location of GPU `gpu_index` of the compute tray in `slot` (assumed numbering, see module)."""
        return cls(domain, chassis_id, slot, host_id, gpu_index)

    @classmethod
    def from_member(cls, member: Mapping[str, Any]) -> GpuLocation:
        return cls(
            str(member["DomainUUID"]),
            int(member["ChassisID"]),
            int(member["SlotID"]),
            int(member["HostID"]),
            int(member["DeviceID"]),
        )

    def member(self) -> dict[str, Any]:
        return {
            "DomainUUID": self.domain,
            "ChassisID": self.chassis_id,
            "SlotID": self.slot_id,
            "HostID": self.host_id,
            "DeviceID": self.device_id,
        }

    def text(self) -> str:
        return f"{self.domain}/{self.chassis_id}.{self.slot_id}.{self.host_id}.{self.device_id}"


@dataclass
class LivePartition:
    system_id: str
    type: str
    partition: FabricPartition


@dataclass
class FabricSnapshot:
    domain: str
    partitions: list[LivePartition] = field(default_factory=list)
    gpu_location: dict[str, GpuLocation] = field(default_factory=dict)  # NMX-M GPU ID -> location
    gpu_domain: dict[str, str] = field(default_factory=dict)  # NMX-M GPU ID -> domain
    domain_gpus: list[str] = field(default_factory=list)  # every GPU of the domain, as Rackplane names it

    @property
    def current(self) -> list[FabricPartition]:
        return [live.partition for live in self.partitions]

    def find(self, step: FabricStep) -> LivePartition:
        for live in self.partitions:
            if (live.partition.is_default and step.is_default) or (
                not live.partition.is_default and not step.is_default and live.partition.name == step.name
            ):
                return live
        raise FabricRejected(f"partition {step.name} is not on the fabric any more", partition=step.name)


def answer_reason(raw: bytes) -> str:
    text = raw.decode(errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:500]
    if isinstance(data, dict):
        for key in ("message", "Message", "detail", "Details", "details", "error", "Error", "title"):
            value = data.get(key)
            if isinstance(value, dict):
                value = value.get("message") or value.get("Message")
            if isinstance(value, str) and value.strip():
                return value.strip()
    return text[:500]


def what_to_do(code: int) -> str:
    if code in (401, 403):
        return "check the NMX-M credentials (changes need the rw-user)"
    if code == 404:
        return "the partition or operation is gone; apply again (it reads the fabric back first)"
    if code == 409:
        return (
            "another partition holds these GPUs, the name is taken or the member type differs; "
            "read the fabric back and re-plan"
        )
    return "fix the partition plan (NMX-M's reason above) and apply again"


def answer_operation_id(data: Any, headers: Mapping[str, str]) -> str | None:
    if isinstance(data, dict):
        for key in ("operationId", "OperationID", "operationID", "ID"):
            if data.get(key):
                return str(data[key])
    location = headers.get("Location") or ""
    if "/operations/" in location:
        return location.rstrip("/").rsplit("/", 1)[-1]
    return None


def answer_partition_id(data: Any) -> int | None:
    if isinstance(data, dict) and data.get("PartitionID") is not None:
        try:
            return int(data["PartitionID"])
        except (TypeError, ValueError):
            return None
    return None
