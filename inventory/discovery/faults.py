"""GPU faults as a node reports them: NVIDIA's XID catalog for GB200, NVML recovery actions, NVLink fabric
health flags, DCGM health fields, and the kernel's XID lines and PCI bus ids.

Pure Python (standard library only, no Django) so the portal, the node agent's tests and the simulator can
all use it. Facts come from NVIDIA's "Xid Catalog" (columns Applies to GB200 and Immediate action), NVML's
``nvmlDeviceGpuRecoveryAction_t`` and ``nvmlGpuFabricInfoV`` health mask, and dcgm-exporter's field names;
see docs/health.md. The one check every health input of a report passes is
inventory.discovery.health_report; the health rules a new database starts with,
inventory.discovery.rule_defaults.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from inventory.discovery.nvidia_smi import FabricFlag

XID_RANGE = (1, 999)


class Action(enum.StrEnum):
    """What NVIDIA's catalog says to do at once (the "Immediate action" column)."""

    IGNORE = "IGNORE"
    RESTART_APP = "RESTART_APP"
    RESET_GPU = "RESET_GPU"
    RESTART_BM = "RESTART_BM"  # reboot the bare-metal node
    RESTART_VM = "RESTART_VM"
    RESTART_FM = "RESTART_FM"  # restart the fabric manager
    CHECK_UVM = "CHECK_UVM"
    WORKFLOW_XID_45 = "WORKFLOW_XID_45"
    WORKFLOW_XID_48 = "WORKFLOW_XID_48"
    WORKFLOW_NVLINK_ERR = "WORKFLOW_NVLINK_ERR"
    WORKFLOW_NVLINK5_ERR = "WORKFLOW_NVLINK5_ERR"
    INFORMATIONAL = "INFORMATIONAL"
    OPERATIONAL = "OPERATIONAL"


# The rule kind for NVLink fabric health bits (inventory.choices HealthEventKind.FABRIC). Not the integration
# kind of the same name: the fabric manager target.
FABRIC_HEALTH = "fabric"
# The code of the fabric event of a GPU whose NVLink fabric registration is still in progress (NVML fabric
# state IN_PROGRESS): not a health mask flag, a state its node restates every report
# (inventory.health.events).
FABRIC_REGISTRATION_IN_PROGRESS = "REGISTRATION_IN_PROGRESS"


@dataclass(frozen=True)
class Xid:
    number: int
    mnemonic: str
    description: str
    action: Action
    gb200: bool = True  # listed as applying to GB200 in the catalog


def _xids(*entries: Xid) -> dict[int, Xid]:
    return {entry.number: entry for entry in entries}


# NVIDIA's Xid catalog, the rows that matter on GB200/GB300 (and 74/136, which never show there: GB200 NVLink
# faults are 144-150 and 155). 68 is not in operations.md's table: it is one of the "application" XIDs the
# k8s-device-plugin ignores (a video decoder exception).
XID_CATALOG: dict[int, Xid] = _xids(
    Xid(13, "ROBUST_CHANNEL_GR_EXCEPTION", "graphics engine exception", Action.RESTART_APP),
    Xid(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", Action.RESTART_APP),
    Xid(43, "RESETCHANNEL_VERIF_ERROR", "GPU stopped processing (application fault)", Action.IGNORE),
    Xid(45, "PREEMPTIVE_REMOVAL", "preemptive cleanup after an earlier error", Action.WORKFLOW_XID_45),
    Xid(46, "GPU_TIMEOUT_ERROR", "GPU timeout", Action.RESET_GPU),
    Xid(48, "GPU_ECC_DBE", "double-bit ECC error", Action.WORKFLOW_XID_48),
    Xid(62, "PMU_HALT_ERROR", "internal micro-controller halt", Action.RESET_GPU),
    Xid(63, "INFOROM_DRAM_RETIREMENT_EVENT", "row remapping event", Action.IGNORE),
    Xid(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "row remapping failure", Action.RESET_GPU),
    Xid(68, "NVDEC0_EXCEPTION", "video decoder exception (application)", Action.RESTART_APP),
    Xid(74, "NVLINK_ERROR", "NVLink error (A100/H100 only)", Action.WORKFLOW_NVLINK_ERR, gb200=False),
    Xid(79, "GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", Action.RESTART_BM),
    Xid(92, "EXCESSIVE_SBE_INTERRUPTS", "high single-bit ECC error rate", Action.IGNORE),
    Xid(94, "CONTAINED_ERROR", "contained memory error", Action.RESTART_APP),
    Xid(95, "UNCONTAINED_ERROR", "uncontained memory error", Action.RESET_GPU),
    Xid(109, "CTXSW_TIMEOUT_ERROR", "context switch timeout", Action.RESET_GPU),
    Xid(119, "GSP_RPC_TIMEOUT", "GSP RPC timeout", Action.RESET_GPU),
    Xid(120, "GSP_ERROR", "GSP error", Action.RESET_GPU),
    Xid(121, "C2C_ERROR", "corrected Grace C2C link error", Action.IGNORE),
    Xid(136, "ALI_TRAINING_FAIL", "NVLink training failure (H100 only)", Action.RESET_GPU, gb200=False),
    Xid(137, "NVLINK_PRIV_ERR", "peer MMU fault over NVLink (usually the application)", Action.IGNORE),
    Xid(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "unrecoverable ECC error escaped", Action.RESET_GPU),
    Xid(143, "GPU_INIT_ERROR", "GPU initialization error", Action.RESET_GPU),
    Xid(144, "NVLINK_SAW_ERROR", "NVLink SAW error", Action.WORKFLOW_NVLINK5_ERR),
    Xid(145, "NVLINK_RLW_ERROR", "NVLink RLW error", Action.WORKFLOW_NVLINK5_ERR),
    Xid(146, "NVLINK_TLW_ERROR", "NVLink TLW error", Action.WORKFLOW_NVLINK5_ERR),
    Xid(147, "NVLINK_TREX_ERROR", "NVLink TREX error", Action.WORKFLOW_NVLINK5_ERR),
    Xid(148, "NVLINK_NVLPW_CTRL_ERROR", "NVLink NVLPW control error", Action.WORKFLOW_NVLINK5_ERR),
    Xid(149, "NVLINK_NETIR_ERROR", "NVLink NETIR error", Action.WORKFLOW_NVLINK5_ERR),
    Xid(150, "NVLINK_MSE_ERROR", "NVLink MSE error", Action.WORKFLOW_NVLINK5_ERR),
    Xid(151, "KEY_ROTATION_ERROR", "confidential computing key rotation error", Action.RESTART_VM),
    Xid(154, "GPU_RECOVERY_ACTION_CHANGED", "the GPU's recovery action changed", Action.INFORMATIONAL),
    Xid(155, "NVLINK_SW_DEFINED_ERROR", "NVLink link down by software", Action.RESET_GPU),
    Xid(156, "RESOURCE_RETIREMENT_EVENT", "resource retirement event", Action.RESET_GPU),
    Xid(157, "RESOURCE_RETIREMENT_FAILURE", "resource retirement failure", Action.IGNORE),
    Xid(158, "GPU_FATAL_TIMEOUT", "GPU fatal timeout", Action.RESET_GPU),
    Xid(159, "CHI_NON_DATA_ERROR", "Grace C2C non-data error", Action.CHECK_UVM),
    Xid(162, "PSHC_ENGAGED", "power smoothing engaged", Action.OPERATIONAL),
    Xid(163, "PSHC_DISENGAGED", "power smoothing disengaged", Action.OPERATIONAL),
    Xid(164, "PSHC_LOW_LIFETIME", "power smoothing lifetime low", Action.OPERATIONAL),
    Xid(165, "PSHC_ZERO_LIFETIME", "power smoothing lifetime exhausted", Action.OPERATIONAL),
    Xid(171, "UNCORRECTABLE_DRAM_ERROR", "uncorrectable DRAM error (details of XID 48)", Action.IGNORE),
    Xid(172, "UNCORRECTABLE_SRAM_ERROR", "uncorrectable SRAM error (details of XID 48)", Action.IGNORE),
)


def xid_info(number: int) -> Xid | None:
    return XID_CATALOG.get(number)


def mnemonic(number: int) -> str:
    info = XID_CATALOG.get(number)
    return info.mnemonic if info else ""


# healthMask: 2-bit fields, value 1 = TRUE (0 = not supported, 2 = FALSE); INCORRECT_CONFIGURATION is an enum
# whose 0 and 1 mean "not supported" and "none".
_MASK_FLAGS = (
    (0, FabricFlag.DEGRADED_BANDWIDTH),
    (2, FabricFlag.ROUTE_RECOVERY),
    (4, FabricFlag.ROUTE_UNHEALTHY),
    (6, FabricFlag.ACCESS_TIMEOUT_RECOVERY),
)


def fabric_flags_from_mask(mask: int) -> tuple[FabricFlag, ...]:
    """The problems in NVML's / DCGM's fabric health mask (DCGM_FI_DEV_FABRIC_HEALTH_MASK)."""
    flags = [flag for shift, flag in _MASK_FLAGS if (mask >> shift) & 0b11 == 1]
    if (mask >> 8) & 0b1111 > 1:
        flags.append(FabricFlag.INCORRECT_CONFIGURATION)
    return tuple(flags)


# --------------------------------------------------------------------------------------------------------
# DCGM health fields (dcgm-exporter; most are commented out of its default counters: docs/dcgm-counters.csv)
# --------------------------------------------------------------------------------------------------------

DCGM_XID = "DCGM_FI_DEV_XID_ERRORS"  # gauge: the last XID the GPU raised (0: none)
DCGM_XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"  # exporter's count per `xid` label over its window
DCGM_FABRIC_MASK = "DCGM_FI_DEV_FABRIC_HEALTH_MASK"
# Cumulative counters (reset by a GPU reset or driver reload) and gauges read as health evidence.
DCGM_HEALTH_FIELDS = (
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS",
    "DCGM_FI_DEV_NVLINK_COUNT_EFFECTIVE_ERRORS",
    "DCGM_FI_DEV_NVLINK_ECC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS",
    "DCGM_FI_DEV_NVSWITCH_NON_FATAL_ERRORS",
    "DCGM_FI_DEV_C2C_LINK_ERROR_REPLAY",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
)
DCGM_FIELDS = (DCGM_XID, DCGM_XID_COUNT, DCGM_FABRIC_MASK, *DCGM_HEALTH_FIELDS)
# DCGM's "blank" sentinels sit near 2**63 (and 2**31 for 32-bit fields): no value, never a count.
DCGM_BLANK_FLOOR = 0x7FFFFFF0


# --------------------------------------------------------------------------------------------------------
# Kernel log lines and PCI bus ids
# --------------------------------------------------------------------------------------------------------

_NVRM_RE = re.compile(
    r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?\):\s*"
    r"(?P<xid>\d{1,3})(?:\.(?P<sub>\d+))?\b"
)
_PCI_RE = re.compile(
    r"^(?P<domain>[0-9A-Fa-f]{4,8}):(?P<bus>[0-9A-Fa-f]{2}):(?P<device>[0-9A-Fa-f]{2})(?:\.[0-7])?$"
)

PciKey = tuple[int, int, int]


def pci_key(raw: str | None) -> PciKey | None:
    """(domain, bus, device) of ``00000008:01:00.0`` or ``0008:01:00``; None when not a PCI bus id."""
    if not raw:
        return None
    match = _PCI_RE.match(raw.strip())
    if not match:
        return None
    return int(match["domain"], 16), int(match["bus"], 16), int(match["device"], 16)


@dataclass(frozen=True)
class NvrmLine:
    pci: PciKey
    xid: int
    subcode: int | None


def parse_nvrm(text: str) -> NvrmLine | None:
    """The PCI id and XID of an ``NVRM: Xid (PCI:0000:1b:00): 79, pid=..., ...`` kernel line, or None."""
    match = _NVRM_RE.search(text or "")
    if not match:
        return None
    return NvrmLine(
        pci=pci_key(match["pci"]),
        xid=int(match["xid"]),
        subcode=int(match["sub"]) if match["sub"] is not None else None,
    )
