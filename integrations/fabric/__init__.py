"""NVLink fabric manager adapters: push a rack's planned NVLink partitions to the fabric and read them back.

`base` is the interface (FabricPartition, FabricManager, the diff and the safe step order, typed errors),
`nmx` talks to NVIDIA NMX Manager's REST API (NmxFabricManager), `simulated` is the embedded in-memory default
(SimulatedFabricManager). These three use no Django; `adapter` (the fabric push target) maps the
inventory's partitions to FabricPartition, and `nodes` makes the simulated fabric's nodes report their new
cliques through discovery, as node agents do on real hardware.
"""

from integrations.fabric.base import (
    DEFAULT_PARTITION_ID,
    FabricDiff,
    FabricError,
    FabricInvalid,
    FabricManager,
    FabricPartition,
    FabricRejected,
    FabricResult,
    FabricStep,
    FabricUnavailable,
    PartitionChange,
    PartitionHealth,
    StepOutcome,
)
from integrations.fabric.nmx import NmxFabricManager
from integrations.fabric.nmx_api import GpuLocation
from integrations.fabric.simulated import SimulatedFabricManager

__all__ = [
    "DEFAULT_PARTITION_ID",
    "FabricDiff",
    "FabricError",
    "FabricInvalid",
    "FabricManager",
    "FabricPartition",
    "FabricRejected",
    "FabricResult",
    "FabricStep",
    "FabricUnavailable",
    "GpuLocation",
    "NmxFabricManager",
    "PartitionChange",
    "PartitionHealth",
    "SimulatedFabricManager",
    "StepOutcome",
]
