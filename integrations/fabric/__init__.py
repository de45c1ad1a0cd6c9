"""NVLink fabric manager adapters: push a rack's planned NVLink partitions to the fabric and read them back.

`base` is the interface (FabricPartition, FabricManager, the diff and the safe step order, typed errors),
`nmx` talks to NVIDIA NMX Manager's REST API (NmxFabricManager), `simulated` is the embedded in-memory default
(SimulatedFabricManager). No Django here: the plan apply service maps inventory rows to FabricPartition and
writes the resulting clique IDs back.
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
from integrations.fabric.nmx import GpuLocation, NmxFabricManager
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
