"""The fabric inventory: racks (NVLink domains), compute trays, GPUs and NVLink partitions, partition plans,
node agents' tokens and health.

A rack is one NVLink domain of 18 compute trays x 4 GPUs. It is carved into NVLink partitions at tray
granularity; the default partition (clique ID 32766) covers the whole rack. What the inventory *intends*
(a tray's partition) and what the nodes *report* (each GPU's cluster UUID and clique ID) are kept side by
side so drift between them is visible.

Django finds an app's models through this package: it imports every model module, and `from
inventory.models import Rack` keeps working. Everything else (query sets, validators) is imported from its
own module.
"""

from inventory.models.agent_tokens import AgentToken
from inventory.models.fabric import FabricGroup, FabricImport, FabricUpload, GpuRail, RackPlace, TrayPlace
from inventory.models.health import (
    HealthAction,
    HealthCheckResult,
    HealthEvent,
    HealthRule,
    HealthSettings,
    ServiceRecord,
)
from inventory.models.plans import PartitionPlan
from inventory.models.racks import NVLinkPartition, Rack
from inventory.models.recarving import RecarvePolicy
from inventory.models.trays import ComputeTray, Gpu, MigDevice

__all__ = [
    "AgentToken",
    "ComputeTray",
    "FabricGroup",
    "FabricImport",
    "FabricUpload",
    "Gpu",
    "GpuRail",
    "HealthAction",
    "HealthCheckResult",
    "HealthEvent",
    "HealthRule",
    "HealthSettings",
    "MigDevice",
    "NVLinkPartition",
    "PartitionPlan",
    "Rack",
    "RackPlace",
    "RecarvePolicy",
    "ServiceRecord",
    "TrayPlace",
]
