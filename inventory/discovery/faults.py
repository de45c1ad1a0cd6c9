"""GPU faults as a node reports them: NVIDIA's XID catalog for GB200, NVML recovery actions, NVLink fabric
health flags, DCGM health fields, and the one check every health input passes before it is recorded.

Pure Python (standard library only, no Django) so the portal, the node agent's tests and the simulator can
all use it. Facts come from NVIDIA's "Xid Catalog" (columns Applies to GB200 and Immediate action), NVML's
``nvmlDeviceGpuRecoveryAction_t`` and ``nvmlGpuFabricInfoV`` health mask, and dcgm-exporter's field names;
see ../shared/reference/operations.md section 2.

Inputs checked here, all sent by the node agent in a discovery report (inventory.api.discovery):

``xids``
    ``[{"time": "<ISO 8601 with zone>", "pci_bus_id": "00000000:1B:00.0" (optional), "xid": 1..999,
    "pid": int|null, "text": "<the kernel line, <= 512 chars>"}]``, at most MAX_XIDS per report. The PCI id
    of an ``NVRM: Xid (PCI:0000:1b:00): 79, pid=..., name=..., ...`` line has no function number; both forms
    are compared as (domain, bus, device).
``checks``
    ``[{"name", "exit_status", "output" (<= 64 KiB, the tail), "started", "seconds"}]``: active checks such as
    ``dcgmi diag -r 2``.
``agent``
    ``{"version": str, "interval_s": int}``.

:func:`validate_health` refuses (ReportError, naming the entry and the field) anything that is not exactly
that: wrong JSON types (a boolean is not a number, "79" is not 79), unknown keys, too many entries, an XID
outside 1-999, text longer than the limits, a time without a zone, the same entry twice.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from core.textrule import text_problem
from inventory.discovery.nvidia_smi import FabricFlag, ReportError

MAX_XIDS = 256  # per report; the agent sends each kernel line once, so a flood is split over reports
MAX_XID_TEXT = 512
MAX_CHECKS = 16
MAX_CHECK_NAME = 128
MAX_CHECK_OUTPUT = 64 * 1024  # bytes of UTF-8: the tail of the check's output
MAX_CHECK_SECONDS = 7 * 24 * 3600
MAX_AGENT_VERSION = 64
MAX_AGENT_INTERVAL = 24 * 3600
XID_RANGE = (1, 999)
MAX_FUTURE = timedelta(days=1)  # a kernel time further ahead than this is a broken clock, not a fault


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

# The rule defaults seeded into a new database (inventory migration 0007), from the catalog above:
# drain a tray for XIDs that need a GPU reset or a reboot; only warn for the "application" XIDs NVIDIA's own
# device plugin ignores; NVLink5 and software link-down faults degrade the tray's whole NVLink partition.
DRAIN_XIDS = ((48, 48), (79, 79), (95, 95), (119, 120), (140, 140), (144, 150), (155, 155))
# Immediate action RESET_GPU in the catalog too (109: NVIDIA says reset though the device plugin ignores it).
RESET_XIDS = ((46, 46), (62, 62), (64, 64), (109, 109), (143, 143), (158, 158))
WARN_XIDS = ((13, 13), (31, 31), (43, 43), (45, 45), (68, 68))
DEGRADE_XIDS = ((144, 150), (155, 155))


@dataclass(frozen=True)
class DefaultRule:
    """One rule a new database starts with (inventory.models.HealthRule; kinds and actions by value)."""

    name: str
    kind: str  # "xid" | "recovery_action" | FABRIC_HEALTH | "dcgm_field" | "check_failed" | "node_silent"
    action: str  # "drain" | "degrade" | "warn" | "hold" (node_silent only)
    xid_first: int | None = None
    xid_last: int | None = None
    code: str = ""
    threshold: float | None = None
    note: str = ""


def _xid_rule(first: int, last: int, action: str, why: str) -> DefaultRule:
    numbers = f"XID {first}" if first == last else f"XID {first}-{last}"
    names = ", ".join(XID_CATALOG[n].mnemonic for n in range(first, last + 1) if n in XID_CATALOG)
    actions = sorted({str(XID_CATALOG[n].action) for n in range(first, last + 1) if n in XID_CATALOG})
    verb = {"drain": "drain", "degrade": "degrade partition", "warn": "warn"}[action]
    return DefaultRule(
        name=f"{numbers} {verb}",
        kind="xid",
        action=action,
        xid_first=first,
        xid_last=last,
        note=f"{names}: NVIDIA's immediate action {', '.join(actions)}; {why}"[:300],
    )


def default_rules() -> list[DefaultRule]:
    """The safe defaults from NVIDIA's XID catalog for GB200, NVML's recovery actions, fabric health and
    DCGM fields. Admins edit them afterwards (Django admin: Health rules)."""
    rules = [_xid_rule(a, b, "drain", "the GPU needs a reset or the node a reboot") for a, b in DRAIN_XIDS]
    rules += [_xid_rule(a, b, "drain", "the catalog says reset the GPU") for a, b in RESET_XIDS]
    rules += [_xid_rule(a, b, "warn", "an application fault: the GPU is fine") for a, b in WARN_XIDS]
    rules += [
        _xid_rule(a, b, "degrade", "an NVLink fault affects every tray of the NVLink partition")
        for a, b in DEGRADE_XIDS
    ]
    for action in ("GPU_RESET", "NODE_REBOOT", "DRAIN_P2P", "DRAIN_AND_RESET"):
        rules.append(
            DefaultRule(
                name=f"recovery action {action} drain",
                kind="recovery_action",
                action="drain",
                code=action,
                note="NVML asks for this recovery before the GPU is used again",
            )
        )
    rules.append(
        DefaultRule(
            name="recovery action UNKNOWN warn",
            kind="recovery_action",
            action="warn",
            code="UNKNOWN",
            note="a recovery action this portal does not know (a newer driver): look at the GPU",
        )
    )
    for flag in (
        "ROUTE_UNHEALTHY",
        "DEGRADED_BANDWIDTH",
        "ACCESS_TIMEOUT_RECOVERY",
        "INCORRECT_CONFIGURATION",
    ):
        rules.append(
            DefaultRule(
                name=f"fabric {flag} degrade partition",
                kind=FABRIC_HEALTH,
                action="degrade",
                code=flag,
                note="NVLink fabric health: every tray of the NVLink partition is affected",
            )
        )
    rules.append(
        DefaultRule(
            name="fabric ROUTE_RECOVERY warn",
            kind=FABRIC_HEALTH,
            action="warn",
            code="ROUTE_RECOVERY",
            note="the fabric is recovering a route; degrade if it turns unhealthy",
        )
    )
    rules += [
        DefaultRule(
            name="DCGM row remap failure drain",
            kind="dcgm_field",
            action="drain",
            code="DCGM_FI_DEV_ROW_REMAP_FAILURE",
            threshold=1,
            note="memory rows could not be remapped: the GPU needs service",
        ),
        DefaultRule(
            name="DCGM NVLink link recovery failed degrade partition",
            kind="dcgm_field",
            action="degrade",
            code="DCGM_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS",
            threshold=1,
            note="an NVLink link could not recover",
        ),
        DefaultRule(
            name="DCGM NVSwitch fatal error degrade partition",
            kind="dcgm_field",
            action="degrade",
            code="DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS",
            threshold=1,
            note="a fatal NVSwitch error takes NVLink paths of the partition down",
        ),
    ]
    for name in (
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    ):
        rules.append(
            DefaultRule(
                name=f"DCGM {name.removeprefix('DCGM_FI_DEV_')} warn",
                kind="dcgm_field",
                action="warn",
                code=name,
                threshold=100,
                note="NVLink errors since the GPU's last reset (a cumulative counter)",
            )
        )
    rules.append(
        DefaultRule(
            name="active check failed drain",
            kind="check_failed",
            action="drain",
            note="an active check the agent runs (dcgmi diag ...) failed, as Slurm's HealthCheckProgram",
        )
    )
    rules.append(NODE_SILENT_RULE)
    return rules


# A tray whose node stopped reporting (HealthSettings.node_silent_after_s) gets no new work and is not
# drained: its jobs may well be running fine while only the agent is down. "warn" (or disabling the rule)
# leaves it schedulable and only shows it stale.
NODE_SILENT_RULE = DefaultRule(
    name="node silent hold",
    kind="node_silent",
    action="hold",
    note="the node agent stopped reporting: place no new work there until it reports again (jobs keep "
    "running)",
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


# --------------------------------------------------------------------------------------------------------
# The one check every health input passes
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class XidReport:
    time: datetime
    xid: int
    pci: PciKey | None  # from pci_bus_id, else from the kernel line
    pid: int | None
    text: str

    @property
    def mnemonic(self) -> str:
        return mnemonic(self.xid)


@dataclass(frozen=True)
class CheckReport:
    name: str
    exit_status: int
    output: str
    started: datetime
    seconds: float

    @property
    def passed(self) -> bool:
        return self.exit_status == 0


@dataclass(frozen=True)
class AgentInfo:
    version: str
    interval_s: int


@dataclass(frozen=True)
class HealthReport:
    """What a report says about health besides its GPUs' fabric state."""

    xids: tuple[XidReport, ...] = ()
    checks: tuple[CheckReport, ...] = ()
    agent: AgentInfo | None = None

    def __bool__(self) -> bool:
        return bool(self.xids or self.checks or self.agent)


XID_KEYS = {"time": True, "pci_bus_id": False, "xid": True, "pid": False, "text": True}
CHECK_KEYS = {"name": True, "exit_status": True, "output": True, "started": True, "seconds": True}
AGENT_KEYS = {"version": True, "interval_s": True}


def _type_name(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _keys(entry, keys: dict[str, bool], where: str) -> None:
    if not isinstance(entry, dict):
        raise ReportError(f"{where} must be an object, not {_type_name(entry)}")
    unknown = sorted(str(key) for key in entry if key not in keys)
    if unknown:
        raise ReportError(f"{where} has unknown keys {', '.join(unknown)}; it takes {', '.join(keys)}")
    missing = [key for key, required in keys.items() if required and key not in entry]
    if missing:
        raise ReportError(f"{where} lacks {', '.join(missing)}")


def _int(value, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ReportError(f"{where} must be a whole number, not {_type_name(value)}")
    if not low <= value <= high:
        raise ReportError(f"{where} {value} is out of range ({low}-{high})")
    return value


def _text(
    value, where: str, limit: int, *, blank: bool = True, limit_bytes: bool = False, one_line: bool = True
) -> str:
    """A string of a report. One-line fields (a kernel line, a check's name, a version) are held to the text
    rule (core.textrule: no control, bidi or invisible characters); a check's output is a tool's verbatim
    output (progress bars' CR, colours' ESC), refused only for NUL and lone surrogates."""
    if not isinstance(value, str):
        raise ReportError(f"{where} must be a string, not {_type_name(value)}")
    size = len(value.encode("utf-8", "surrogatepass")) if limit_bytes else len(value)
    if size > limit:
        unit = "bytes" if limit_bytes else "characters"
        raise ReportError(f"{where} is {size} {unit} long; at most {limit} are taken")
    if "\x00" in value:
        raise ReportError(f"{where} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ReportError(f"{where} is not valid Unicode (it holds a lone surrogate)") from None
    problem = text_problem(value) if one_line else None
    if problem:
        raise ReportError(problem.message(where))
    if not blank and not value.strip():
        raise ReportError(f"{where} is empty")
    return value


EARLIEST_YEAR = 2000  # a time before it is a node whose clock was never set (and would overflow arithmetic)


def _time(value, where: str, now: datetime | None) -> datetime:
    if not isinstance(value, str):
        raise ReportError(f"{where} must be an ISO 8601 time string, not {_type_name(value)}")
    try:
        parsed = datetime.fromisoformat(value.strip()) if len(value) <= 64 else None
    except ValueError:
        parsed = None
    if parsed is None:
        shown = value if len(value) <= 40 else value[:39] + "…"
        raise ReportError(f"{where} {shown!r} is not an ISO 8601 time (e.g. 2025-10-14T11:20:09+00:00)")
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise ReportError(f"{where} {value!r} has no time zone; send it with one (+00:00 or Z)")
    if parsed.year < EARLIEST_YEAR:
        raise ReportError(f"{where} {value!r} is before {EARLIEST_YEAR}: the node's clock is wrong")
    if now is not None and parsed - now > MAX_FUTURE:
        raise ReportError(f"{where} {value!r} is more than a day ahead of the portal's clock")
    return parsed


def _list(value, where: str, limit: int) -> list:
    if not isinstance(value, list):
        raise ReportError(f"{where} must be a list, not {_type_name(value)}")
    if len(value) > limit:
        raise ReportError(f"{where} has {len(value)} entries; at most {limit} are taken per report")
    return value


def validate_xid(entry, where: str = "xid", now: datetime | None = None) -> XidReport:
    _keys(entry, XID_KEYS, where)
    time = _time(entry["time"], f"{where}: time", now)
    xid = _int(entry["xid"], f"{where}: xid", *XID_RANGE)
    text = _text(entry["text"], f"{where}: text", MAX_XID_TEXT)
    pid = entry.get("pid")
    if pid is not None:
        pid = _int(pid, f"{where}: pid", 0, 2**31 - 1)
    raw_pci = entry.get("pci_bus_id")
    pci = None
    if raw_pci is not None:
        _text(raw_pci, f"{where}: pci_bus_id", 32)
        pci = pci_key(raw_pci)
        if pci is None:
            raise ReportError(
                f"{where}: pci_bus_id {raw_pci!r} is not a PCI bus id (e.g. 00000008:01:00.0 or 0008:01:00)"
            )
    line = parse_nvrm(text)
    if line is not None:
        if line.xid != xid:
            raise ReportError(f"{where}: xid is {xid} but its kernel line says XID {line.xid}")
        if pci is None:
            pci = line.pci
    return XidReport(time=time, xid=xid, pci=pci, pid=pid, text=text)


def validate_check(entry, where: str = "check", now: datetime | None = None) -> CheckReport:
    _keys(entry, CHECK_KEYS, where)
    name = _text(entry["name"], f"{where}: name", MAX_CHECK_NAME, blank=False).strip()
    exit_status = _int(entry["exit_status"], f"{where}: exit_status", -255, 255)
    output = _text(entry["output"], f"{where}: output", MAX_CHECK_OUTPUT, limit_bytes=True, one_line=False)
    started = _time(entry["started"], f"{where}: started", now)
    seconds = entry["seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ReportError(f"{where}: seconds must be a number, not {_type_name(seconds)}")
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_CHECK_SECONDS:
        raise ReportError(f"{where}: seconds {seconds} is out of range (0-{MAX_CHECK_SECONDS})")
    return CheckReport(name=name, exit_status=exit_status, output=output, started=started, seconds=seconds)


def validate_agent(entry, where: str = "agent") -> AgentInfo:
    _keys(entry, AGENT_KEYS, where)
    version = _text(entry["version"], f"{where}: version", MAX_AGENT_VERSION, blank=False).strip()
    interval = _int(entry["interval_s"], f"{where}: interval_s", 1, MAX_AGENT_INTERVAL)
    return AgentInfo(version=version, interval_s=interval)


def validate_health(
    xids=None, checks=None, agent=None, now: datetime | None = None
) -> tuple[HealthReport, dict[str, str]]:
    """Check the ``xids``, ``checks`` and ``agent`` of a report (None: not sent).

    Returns the report and {} when everything is right, else an empty report and {field: what is wrong}
    (every field is checked, so one answer names every problem; the first problem of each field).
    """
    errors: dict[str, str] = {}
    parsed_xids: list[XidReport] = []
    parsed_checks: list[CheckReport] = []
    parsed_agent = None
    if xids is not None:
        try:
            seen: dict[tuple, int] = {}
            for position, entry in enumerate(_list(xids, "xids", MAX_XIDS)):
                xid = validate_xid(entry, f"xids[{position}]", now)
                key = (xid.time, xid.xid, xid.pci, xid.pid, xid.text)
                if key in seen:
                    raise ReportError(
                        f"xids[{position}] repeats xids[{seen[key]}]; the agent sends each kernel line once"
                    )
                seen[key] = position
                parsed_xids.append(xid)
        except ReportError as error:
            errors["xids"] = str(error)
    if checks is not None:
        try:
            seen_checks: dict[tuple, int] = {}
            for position, entry in enumerate(_list(checks, "checks", MAX_CHECKS)):
                check = validate_check(entry, f"checks[{position}]", now)
                key = (check.name, check.started)
                if key in seen_checks:
                    raise ReportError(
                        f"checks[{position}] repeats checks[{seen_checks[key]}] (same name and start time)"
                    )
                seen_checks[key] = position
                parsed_checks.append(check)
        except ReportError as error:
            errors["checks"] = str(error)
    if agent is not None:
        try:
            parsed_agent = validate_agent(agent)
        except ReportError as error:
            errors["agent"] = str(error)
    if errors:
        return HealthReport(), errors
    return HealthReport(xids=tuple(parsed_xids), checks=tuple(parsed_checks), agent=parsed_agent), {}
