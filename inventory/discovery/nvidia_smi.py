"""Read NVLink fabric membership out of ``nvidia-smi`` output.

Pure Python (standard library and core.hardware's constants, no Django) so agents, management commands
and tests can all use it.

Three inputs are understood, exactly as the driver prints them:

``nvidia-smi -q`` (``"text"``)
    Starts with ``==============NVSMI LOG==============``, then one block per GPU headed
    ``GPU 00000009:01:00.0`` at column 0. Fields are ``Key : Value`` lines nested four spaces per level; the
    column the colons line up on depends on the driver (42 in 550/570, 55 in 580.159), so it is never relied
    upon. Each GPU block carries a ``Fabric`` sub-block::

        Fabric
            State                             : Completed
            Status                            : Success
            CliqueId                          : 32766
            ClusterUUID                       : 3f7c2a91-5b1e-4d08-9c6a-2e4f8b0d1a73
            Health
                Summary                       : Healthy
                Bandwidth                     : Full

    Fabric fields are read only from that sub-block of each GPU block (found by indentation), so
    ``GPU Fabric GUID`` under ``Platform Info`` or any other ``Fabric`` word elsewhere is ignored.

``nvidia-smi -q -x`` (``"xml"``)
    ``<nvidia_smi_log>`` with one ``<gpu id="...">`` per GPU and
    ``<fabric><state/><status/><cliqueId/><clusterUuid/><health><summary/>...</health></fabric>``.
    Element names are matched ignoring case and underscores. Newer drivers add
    ``<cliques><clique_entry><clique_id>``; only the direct ``<cliqueId>`` child of ``<fabric>`` is read.

``nvidia-smi --query-gpu=uuid,fabric.clusterUuid,fabric.cliqueId --format=csv,noheader`` (``"csv"``)
    One ``GPU-..., <cluster UUID>, <clique ID>`` row per GPU. With no fabric the driver prints the bare
    token ``N/A`` in the fabric columns; the bracketed ``[N/A]`` / ``[Not Supported]`` forms used by other
    query fields are accepted too. A header row (``--format=csv`` without ``noheader``) is skipped.

Health evidence is read from ``-q`` and ``-q -x`` too (never from CSV): each GPU's PCI bus id (the block
header / ``<gpu id>``, which kernel XID lines name GPUs by), NVML's recovery action (``GPU Recovery Action`` /
``<gpu_recovery_action>``: :class:`RecoveryAction`) and the fabric health rows under ``Fabric > Health``
(``Bandwidth``, ``Route Recovery in progress``, ``Route Unhealthy``, ``Access Timeout Recovery``, ``Incorrect
Configuration``: :class:`FabricFlag`). inventory.health turns them into health events.

State, status and health mapping (see :class:`FabricState`, :class:`GpuHealth`) and the node verdict
(:func:`summarize`) follow NVML's ``nvmlGpuFabricInfo`` semantics: the status is meaningful only once the
state is ``Completed``, and an all-zero cluster UUID means "in no NVLink domain" (H100 / HGX), never "these
GPUs share one". The node label follows Kubernetes GPU Feature Discovery: ``nvidia.com/gpu.clique`` is
``<ClusterUUID>.<CliqueId>`` only when every fabric-attached GPU agrees on both.
"""

from __future__ import annotations

import csv
import enum
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Protocol

from core.hardware import GPUS_PER_TRAY, MAX_REPORTED_CLIQUE_ID
from core.sentences import gettext_noop, say

NO_CLUSTER = "00000000-0000-0000-0000-000000000000"

FORMATS = ("text", "xml", "csv", "json")


class FabricState(enum.StrEnum):
    COMPLETED = "completed"
    IN_PROGRESS = "in_progress"
    NOT_STARTED = "not_started"
    NOT_SUPPORTED = "not_supported"


class GpuHealth(enum.StrEnum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    LIMITED_CAPACITY = "limited_capacity"
    NOT_SUPPORTED = "not_supported"
    UNKNOWN = "unknown"


class RecoveryAction(enum.StrEnum):
    """``nvmlDeviceGpuRecoveryAction_t`` (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION); UNKNOWN for a value this
    portal does not know yet (a newer driver), which is never read as "nothing to do"."""

    NONE = "NONE"
    GPU_RESET = "GPU_RESET"
    NODE_REBOOT = "NODE_REBOOT"
    DRAIN_P2P = "DRAIN_P2P"
    DRAIN_AND_RESET = "DRAIN_AND_RESET"
    UNKNOWN = "UNKNOWN"


_RECOVERY_WORDS = {
    "none": RecoveryAction.NONE,
    "0": RecoveryAction.NONE,
    "gpu reset": RecoveryAction.GPU_RESET,
    "gpu reset required": RecoveryAction.GPU_RESET,
    "reset": RecoveryAction.GPU_RESET,
    "1": RecoveryAction.GPU_RESET,
    "node reboot": RecoveryAction.NODE_REBOOT,
    "node reboot required": RecoveryAction.NODE_REBOOT,
    "reboot": RecoveryAction.NODE_REBOOT,
    "2": RecoveryAction.NODE_REBOOT,
    "drain p2p": RecoveryAction.DRAIN_P2P,
    "3": RecoveryAction.DRAIN_P2P,
    "drain and reset": RecoveryAction.DRAIN_AND_RESET,
    "4": RecoveryAction.DRAIN_AND_RESET,
}


def recovery_action(raw: str | None) -> RecoveryAction | None:
    """The recovery action as nvidia-smi prints it (``None``, ``GPU Reset Required``, ``Node Reboot
    Required``, ``Drain P2P``, ``Drain and Reset``, the enum names or numbers); None when not printed or N/A
    (drivers before NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)."""
    if raw is None:
        return None
    text = " ".join(raw.strip().lower().replace("_", " ").split())
    if text.startswith("nvml gpu recovery action "):
        text = text[len("nvml gpu recovery action ") :]
    if text in ("", "n/a", "[n/a]", "not supported", "[not supported]"):
        return None
    return _RECOVERY_WORDS.get(text, RecoveryAction.UNKNOWN)


class FabricFlag(enum.StrEnum):
    """NVLink fabric health problems (nvmlGpuFabricInfoV healthMask; nvidia-smi's Fabric > Health rows)."""

    DEGRADED_BANDWIDTH = "DEGRADED_BANDWIDTH"  # Bandwidth: Degraded (mask DEGRADED_BW, shift 0)
    ROUTE_RECOVERY = "ROUTE_RECOVERY"  # Route Recovery in progress: True (shift 2)
    ROUTE_UNHEALTHY = "ROUTE_UNHEALTHY"  # Route Unhealthy: True (shift 4)
    ACCESS_TIMEOUT_RECOVERY = "ACCESS_TIMEOUT_RECOVERY"  # Access Timeout Recovery: True (shift 6)
    INCORRECT_CONFIGURATION = "INCORRECT_CONFIGURATION"  # anything but N/A / none (shift 8, an enum)


def _true(raw: str | None) -> bool:
    return raw is not None and raw.strip().lower() in ("true", "yes", "1")


def fabric_flags(
    *,
    bandwidth: str | None,
    route_recovery: str | None,
    route_unhealthy: str | None,
    access_timeout: str | None,
    incorrect_configuration: str | None,
) -> tuple[FabricFlag, ...]:
    """The fabric health problems in nvidia-smi's ``Fabric > Health`` rows (None: row not printed)."""
    flags = []
    if bandwidth is not None and bandwidth.strip().lower() == "degraded":
        flags.append(FabricFlag.DEGRADED_BANDWIDTH)
    if _true(route_recovery):
        flags.append(FabricFlag.ROUTE_RECOVERY)
    if _true(route_unhealthy):
        flags.append(FabricFlag.ROUTE_UNHEALTHY)
    if _true(access_timeout):
        flags.append(FabricFlag.ACCESS_TIMEOUT_RECOVERY)
    config = (incorrect_configuration or "").strip().lower()
    if config not in ("", "n/a", "none", "[n/a]", "not supported", "[not supported]", "false"):
        flags.append(FabricFlag.INCORRECT_CONFIGURATION)
    return tuple(flags)


class MigState(Protocol):
    """A GPU's MIG state as a ReportedGpu holds it: inventory.discovery.mig.GpuMig (which reads this module's
    XML helpers, so it is named here by what the portal uses of it)."""

    @property
    def current(self) -> enum.StrEnum: ...

    @property
    def pending(self) -> enum.StrEnum: ...

    @property
    def instances(self) -> tuple: ...  # of inventory.discovery.mig.MigInstance (each with its `uuid`)

    def as_dict(self) -> dict: ...


class ReportError(ValueError):
    """Input could not be understood; message says what was wrong in plain words (which line/element, what
    was expected)."""


@dataclass(frozen=True)
class ReportedGpu:
    uuid: str  # canonical "GPU-" + lower-case hex (nvidia-smi prints lower case; either case is accepted)
    index: int  # position on the node, 0-based, in output order
    cluster_uuid: str | None  # lower-case canonical UUID; None when the GPU is in no NVLink domain
    clique_id: int | None  # None under the same conditions
    state: FabricState
    status: str | None  # as printed ("Success", "Insufficient Resources"); None when N/A or not meaningful
    health: GpuHealth  # from Fabric > Health > Summary; UNKNOWN when absent (CSV, old drivers)
    serial: str | None = None
    product: str | None = None
    memory_mib: int | None = None
    raw_cluster_uuid: str | None = None  # what was printed, for problem messages
    raw_clique_id: str | None = None
    # Health evidence (-q and -q -x only): the PCI bus id as printed ("00000008:01:00.0", which kernel XID
    # lines name the GPU by), NVML's recovery action (None: not printed, older drivers) and the fabric
    # health problems of Fabric > Health. Not part of as_dict(): the portal records them as health events.
    pci_bus_id: str | None = None
    recovery_action: RecoveryAction | None = None
    fabric_flags: tuple[FabricFlag, ...] = ()
    # MIG mode and instances (inventory.discovery.mig: from `-q -x` and the node's `nvidia-smi mig` outputs,
    # or the structured report's `mig`); None: the report did not say (text and CSV listings).
    mig: MigState | None = None

    def as_dict(self) -> dict:
        return {
            "uuid": self.uuid,
            "index": self.index,
            "cluster_uuid": self.cluster_uuid,
            "clique_id": self.clique_id,
            "state": str(self.state.value),
            "status": self.status,
            "health": str(self.health.value),
            # What the report said of MIG (None: nothing; text and CSV listings do not say).
            "mig_mode": str(self.mig.current.value) if self.mig is not None else None,
        }


@dataclass
class NodeReport:
    host: str
    format: str  # "text" | "xml" | "csv" | "json"
    gpus: list[ReportedGpu]
    tray_clique: str | None  # "<cluster_uuid>.<clique_id>" per the GPU Feature Discovery rule
    problems: list[str] = field(default_factory=list)  # why this node cannot join an NVLink partition

    def as_dict(self) -> dict:
        return {
            "host": self.host,
            "format": self.format,
            "gpus": [gpu.as_dict() for gpu in self.gpus],
            "tray_clique": self.tray_clique,
            "problems": list(self.problems),
        }


# --------------------------------------------------------------------------------------------------------
# Value helpers shared by the three parsers
# --------------------------------------------------------------------------------------------------------

_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
_GPU_UUID_RE = re.compile(
    r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE
)
_PCI_ID = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
_GPU_HEADER_RE = re.compile(rf"^GPU\s+(?P<bus>{_PCI_ID})$")
_PCI_ID_RE = re.compile(rf"^{_PCI_ID}$")
_MIB_RE = re.compile(r"^(\d+)\s*MiB$", re.IGNORECASE)

# How nvidia-smi says "no value": bare in -q/-q -x and in the fabric.* CSV columns, bracketed in other CSV
# columns. Compared after lower-casing and stripping brackets.
_ABSENT = {"", "n/a", "not supported", "none"}

_STATES = {
    "completed": FabricState.COMPLETED,
    "in progress": FabricState.IN_PROGRESS,
    "not started": FabricState.NOT_STARTED,
    "not supported": FabricState.NOT_SUPPORTED,
    "n/a": FabricState.NOT_SUPPORTED,
    "": FabricState.NOT_SUPPORTED,
}

_HEALTH = {
    "healthy": GpuHealth.HEALTHY,
    "unhealthy": GpuHealth.UNHEALTHY,
    "limited capacity": GpuHealth.LIMITED_CAPACITY,
    "not supported": GpuHealth.NOT_SUPPORTED,
    # NVML's healthSummary 0 ("not supported") is what nvidia-smi renders as N/A, e.g. on H100.
    "n/a": GpuHealth.NOT_SUPPORTED,
}

HEALTH_WORDS = {GpuHealth.UNHEALTHY: "Unhealthy", GpuHealth.LIMITED_CAPACITY: "Limited Capacity"}


def _token(value: str | None) -> str:
    """Lower-case comparison form of a printed value: ``[Not Supported]`` -> ``not supported``."""
    if value is None:
        return ""
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1].strip()
    return " ".join(text.lower().split())


def _is_absent(value: str | None) -> bool:
    return _token(value) in _ABSENT


def _norm_key(key: str) -> str:
    """``Cluster UUID`` / ``ClusterUUID`` / ``cluster_uuid`` all become ``clusteruuid``."""
    return re.sub(r"[^0-9a-z]", "", key.lower())


def _short(value: str, limit: int = 80) -> str:
    value = value.strip()
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _cluster_uuid(raw: str | None, where: str) -> str | None:
    """Canonical lower-case cluster UUID, or None when nvidia-smi printed no value."""
    if _is_absent(raw):
        return None
    text = raw.strip()
    if not _UUID_RE.match(text):
        raise ReportError(
            f"{where}: cluster UUID {_short(text)!r} is not a UUID "
            "(expected 8-4-4-4-12 hex digits such as 3f7c2a91-5b1e-4d08-9c6a-2e4f8b0d1a73, or N/A)"
        )
    return text.lower()


def _clique_range(clique_id: int, where: str) -> int:
    if not 0 <= clique_id <= MAX_REPORTED_CLIQUE_ID:
        raise ReportError(
            f"{where}: clique ID {_short(str(clique_id))} is out of range (NVML clique IDs are "
            f"0-{MAX_REPORTED_CLIQUE_ID})"
        )
    return clique_id


def _clique_id(raw: str | None, where: str) -> int | None:
    if _is_absent(raw):
        return None
    text = raw.strip()
    if not re.fullmatch(r"[0-9]+", text):
        raise ReportError(
            f"{where}: clique ID {_short(text)!r} is not a whole number (expected e.g. 32766 or N/A)"
        )
    digits = text.lstrip("0") or "0"
    if len(digits) > len(str(MAX_REPORTED_CLIQUE_ID)):  # never int() a 5,000-digit string
        raise ReportError(
            f"{where}: clique ID {_short(text)!r} is out of range (NVML clique IDs are "
            f"0-{MAX_REPORTED_CLIQUE_ID})"
        )
    return _clique_range(int(digits), where)


def canonical_gpu_uuid(raw: str | None, where: str = "GPU") -> str:
    """``GPU-`` + 8-4-4-4-12 hex digits, strictly, returned with the hex lower-cased (the one stored form).

    nvidia-smi and NVML print lower case; upper case is accepted so the same GPU is never two rows.
    """
    if raw is None or _is_absent(raw):
        raise ReportError(f"{where} has no GPU UUID; every GPU must report one (GPU-xxxxxxxx-xxxx-...)")
    text = raw.strip()
    if not _GPU_UUID_RE.match(text):
        raise ReportError(
            f"{where}: {_short(text)!r} is not a GPU UUID (expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)"
        )
    return "GPU-" + text[4:].lower()


_gpu_uuid = canonical_gpu_uuid


def _state(raw: str | None, where: str) -> FabricState:
    key = _token(raw)
    if key not in _STATES:
        raise ReportError(
            f"{where}: fabric State {_short(raw or '')!r} is not one of Completed, In Progress, Not Started, "
            "Not Supported or N/A"
        )
    return _STATES[key]


def _health(raw: str | None) -> GpuHealth:
    if raw is None:
        return GpuHealth.UNKNOWN
    return _HEALTH.get(_token(raw), GpuHealth.UNKNOWN)


def _optional(raw: str | None) -> str | None:
    return None if raw is None or _is_absent(raw) else raw.strip()


def _memory(raw: str | None) -> int | None:
    """Best effort: ``189471 MiB`` -> 189471; anything else (N/A, odd units) -> None."""
    match = _MIB_RE.match(raw.strip()) if raw else None
    return int(match.group(1)) if match else None


def _build_gpu(
    *,
    where: str,
    index: int,
    uuid: str | None,
    has_fabric: bool,
    state: str | None,
    status: str | None,
    clique: str | None,
    cluster: str | None,
    summary: str | None,
    serial: str | None,
    product: str | None,
    memory: str | None,
    pci_bus_id: str | None = None,
    recovery: str | None = None,
    flags: tuple[FabricFlag, ...] = (),
) -> ReportedGpu:
    """One GPU from ``-q`` / ``-q -x`` values (None = field not printed at all)."""
    gpu_uuid = _gpu_uuid(uuid, where)
    where = f"{where} ({gpu_uuid})"
    # Older drivers print no Fabric block at all: such a GPU cannot be in an NVLink domain.
    fabric_state = _state(state, where) if has_fabric else FabricState.NOT_SUPPORTED
    cluster_uuid = _cluster_uuid(cluster, where)
    clique_id = _clique_id(clique, where)
    printed_status = _optional(status)
    if fabric_state is not FabricState.COMPLETED:
        printed_status = None  # "must be checked only if state returns complete" (NVML)
    joined = (
        fabric_state is FabricState.COMPLETED
        and printed_status is not None
        and _token(printed_status) == "success"
        and cluster_uuid is not None
        and cluster_uuid != NO_CLUSTER
        and clique_id is not None
    )
    return ReportedGpu(
        uuid=gpu_uuid,
        index=index,
        cluster_uuid=cluster_uuid if joined else None,
        clique_id=clique_id if joined else None,
        state=fabric_state,
        status=printed_status,
        health=_health(summary) if has_fabric else GpuHealth.UNKNOWN,
        serial=_optional(serial),
        product=_optional(product),
        memory_mib=_memory(memory),
        raw_cluster_uuid=cluster.strip() if cluster is not None else None,
        raw_clique_id=clique.strip() if clique is not None else None,
        pci_bus_id=pci_bus_id.strip() if pci_bus_id and _PCI_ID_RE.match(pci_bus_id.strip()) else None,
        recovery_action=recovery_action(recovery),
        fabric_flags=flags if has_fabric else (),
    )


def _check_attached(declared: str | None, found: int, what: str) -> None:
    """Refuse output that lists fewer GPU blocks than it says are attached (truncated, or ``-i N``)."""
    if declared is None or not re.fullmatch(r"[0-9]+", declared.strip()):
        return
    attached = int(declared.strip())
    if attached != found:
        raise ReportError(
            f"the output has {found} {what} but says {attached} GPUs are attached; it looks truncated or "
            "limited to some GPUs (-i); send the full output for every GPU on the node"
        )


# --------------------------------------------------------------------------------------------------------
# Format detection
# --------------------------------------------------------------------------------------------------------


def _clean(text: str | bytes) -> str:
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ReportError(
                f"the nvidia-smi output is not UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from None
    if not isinstance(text, str):
        raise ReportError(f"expected nvidia-smi output as text, got {type(text).__name__}")
    return text.lstrip("\ufeff")


def detect_format(text: str) -> str:
    """``"xml"``, ``"text"`` or ``"csv"``; ReportError for empty or unrecognised input."""
    text = _clean(text)
    stripped = text.strip()
    if not stripped:
        raise ReportError("the nvidia-smi output is empty")
    if stripped.startswith("<"):
        return "xml"
    lines = [line.strip() for line in stripped.splitlines() if line.strip()]
    for line in lines[:3]:
        lowered = line.lower()
        if "no devices were found" in lowered:
            raise ReportError("nvidia-smi found no GPUs on this node ('No devices were found')")
        if lowered.startswith("nvidia-smi has failed"):
            raise ReportError(f"nvidia-smi could not talk to the driver: {_short(line, 160)!r}")
    if "NVSMI LOG" in stripped or any(_GPU_HEADER_RE.match(line) for line in lines):
        return "text"
    try:
        first = next(csv.reader([lines[0]], skipinitialspace=True), [])
    except csv.Error as exc:
        raise ReportError(f"could not read the first line as CSV: {exc}") from None
    if len(first) > 1 and (first[0].strip().upper().startswith("GPU-") or _token(first[0]) == "uuid"):
        return "csv"
    raise ReportError(
        "could not recognise the nvidia-smi output: expected `nvidia-smi -q` text (starting with "
        "'==============NVSMI LOG=============='), `nvidia-smi -q -x` XML (<nvidia_smi_log>), or CSV rows "
        f"'GPU-…, <cluster UUID>, <clique ID>'; the first line was {_short(lines[0])!r}"
    )


# --------------------------------------------------------------------------------------------------------
# nvidia-smi -q
# --------------------------------------------------------------------------------------------------------


@dataclass
class _Node:
    indent: int
    key: str
    value: str | None  # None for a section header ("Fabric", "GPU 0000...")
    line: int
    children: list[_Node] = field(default_factory=list)

    @property
    def norm(self) -> str:
        return _norm_key(self.key)

    def child(self, *names: str) -> _Node | None:
        for node in self.children:
            if node.norm in names:
                return node
        return None

    def children_named(self, name: str) -> list[_Node]:
        return [node for node in self.children if node.norm == name]

    def value_of(self, *path: str) -> str | None:
        node: _Node | None = self
        for name in path:
            node = node.child(name) if node else None
        return node.value if node is not None else None


# "Key   : value" where the colon is followed by whitespace or ends the line. This keeps PCI addresses
# ("GPU 00000009:01:00.0") and times in values ("11:01:42") from being read as separators.
_KV_RE = re.compile(r"^(?P<key>[^:]*?)\s*:(?:\s+(?P<value>.*?))?\s*$")


def _tree(text: str) -> _Node:
    root = _Node(indent=-1, key="", value=None, line=0)
    stack = [root]
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.expandtabs(4).rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        match = None if _GPU_HEADER_RE.match(body) else _KV_RE.match(body)
        if match and match.group("key"):
            node = _Node(indent, match.group("key").strip(), (match.group("value") or "").strip(), number)
        else:
            node = _Node(indent, body, None, number)
        while stack[-1].indent >= indent:
            stack.pop()
        stack[-1].children.append(node)
        stack.append(node)
    return root


def _text_flags(health: _Node | None) -> tuple[FabricFlag, ...]:
    if health is None:
        return ()
    return fabric_flags(
        bandwidth=health.value_of("bandwidth"),
        route_recovery=health.value_of("routerecoveryinprogress"),
        route_unhealthy=health.value_of("routeunhealthy"),
        access_timeout=health.value_of("accesstimeoutrecovery"),
        incorrect_configuration=health.value_of("incorrectconfiguration"),
    )


def parse_text(text: str) -> list[ReportedGpu]:
    """GPUs from ``nvidia-smi -q`` output, in the order of their ``GPU <bus id>`` blocks."""
    text = _clean(text)
    if not text.strip():
        raise ReportError("the nvidia-smi -q output is empty")
    root = _tree(text)
    blocks = [node for node in root.children if node.value is None and _GPU_HEADER_RE.match(node.key)]
    if not blocks:
        raise ReportError(
            "no GPU blocks found in the nvidia-smi -q output (expected lines like 'GPU 00000009:01:00.0' "
            "followed by indented fields)"
        )
    _check_attached(root.value_of("attachedgpus"), len(blocks), "GPU blocks")
    gpus = []
    for index, block in enumerate(blocks):
        where = f"GPU {index} (block '{block.key}' at line {block.line})"
        fabrics = [node for node in block.children_named("fabric") if node.value in (None, "")]
        if len(fabrics) > 1:
            lines = ", ".join(str(node.line) for node in fabrics)
            raise ReportError(f"{where} has more than one Fabric section (lines {lines})")
        fabric = fabrics[0] if fabrics else None
        gpus.append(
            _build_gpu(
                where=where,
                index=index,
                uuid=block.value_of("gpuuuid"),
                has_fabric=fabric is not None,
                state=fabric.value_of("state") if fabric else None,
                status=fabric.value_of("status") if fabric else None,
                clique=fabric.value_of("cliqueid") if fabric else None,
                cluster=fabric.value_of("clusteruuid") if fabric else None,
                summary=fabric.value_of("health", "summary") if fabric else None,
                serial=block.value_of("serialnumber"),
                product=block.value_of("productname"),
                memory=block.value_of("fbmemoryusage", "total"),
                pci_bus_id=block.key.split(None, 1)[1],
                recovery=block.value_of("gpurecoveryaction"),
                flags=_text_flags(fabric.child("health")) if fabric else (),
            )
        )
    return gpus


# --------------------------------------------------------------------------------------------------------
# nvidia-smi -q -x
# --------------------------------------------------------------------------------------------------------


def _xchild(elem: ET.Element | None, *names: str) -> ET.Element | None:
    """First direct child whose tag matches one of ``names`` ignoring case and underscores."""
    if elem is None:
        return None
    wanted = {_norm_key(name) for name in names}
    for child in elem:
        if isinstance(child.tag, str) and _norm_key(child.tag) in wanted:
            return child
    return None


def _xtext(elem: ET.Element | None, *path: str) -> str | None:
    for name in path:
        elem = _xchild(elem, name)
    if elem is None:
        return None
    return (elem.text or "").strip()


def _xml_flags(health: ET.Element | None) -> tuple[FabricFlag, ...]:
    if health is None:
        return ()
    return fabric_flags(
        bandwidth=_xtext(health, "bandwidth"),
        route_recovery=_xtext(health, "route_recovery_in_progress"),
        route_unhealthy=_xtext(health, "route_unhealthy"),
        access_timeout=_xtext(health, "access_timeout_recovery"),
        incorrect_configuration=_xtext(health, "incorrect_configuration"),
    )


def gpu_elements(text: str, error: type[ReportError] = ReportError) -> tuple[ET.Element, list[ET.Element]]:
    """The root and the ``<gpu>`` elements of ``nvidia-smi -q -x`` output, or `error` saying why not (no
    entities are expanded). Shared with inventory.discovery.mig, which reads the same listing."""
    text = text.strip()
    if not text:
        raise error("the nvidia-smi -q -x output is empty")
    if re.search(r"<!ENTITY", text, re.IGNORECASE):
        raise error("the XML declares entities (<!ENTITY>); nvidia-smi never does, refusing to expand them")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line, column = exc.position
        raise error(f"the XML is malformed at line {line}, column {column + 1}: {exc}") from None
    except ValueError as exc:
        raise error(f"the XML could not be read: {_short(str(exc))}") from None
    if root.tag != "nvidia_smi_log":
        raise error(
            f"the XML root element is <{_short(str(root.tag), 40)}>, "
            "expected <nvidia_smi_log> from nvidia-smi -q -x"
        )
    elements = [child for child in root if child.tag == "gpu"]
    if not elements:
        raise error("the XML has no <gpu> elements")
    return root, elements


def parse_xml(text: str) -> list[ReportedGpu]:
    """GPUs from ``nvidia-smi -q -x`` output, in the order of their ``<gpu>`` elements."""
    root, elements = gpu_elements(_clean(text))
    _check_attached(_xtext(root, "attached_gpus"), len(elements), "<gpu> elements")
    gpus = []
    for index, gpu in enumerate(elements):
        where = f'GPU {index} (<gpu id="{gpu.get("id", "?")}">)'
        fabric = _xchild(gpu, "fabric")
        gpus.append(
            _build_gpu(
                where=where,
                index=index,
                uuid=_xtext(gpu, "uuid"),
                has_fabric=fabric is not None,
                state=_xtext(fabric, "state"),
                status=_xtext(fabric, "status"),
                clique=_xtext(fabric, "cliqueId"),
                cluster=_xtext(fabric, "clusterUuid"),
                summary=_xtext(fabric, "health", "summary"),
                serial=_xtext(gpu, "serial"),
                product=_xtext(gpu, "product_name"),
                memory=_xtext(gpu, "fb_memory_usage", "total"),
                pci_bus_id=gpu.get("id") or _xtext(gpu, "pci", "pci_bus_id"),
                recovery=_xtext(gpu, "gpu_recovery_action"),
                flags=_xml_flags(_xchild(fabric, "health")),
            )
        )
    return gpus


# --------------------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu=uuid,fabric.clusterUuid,fabric.cliqueId --format=csv,noheader
# --------------------------------------------------------------------------------------------------------


def parse_csv(text: str) -> list[ReportedGpu]:
    """GPUs from the compact query ``uuid,fabric.clusterUuid,fabric.cliqueId`` (one row per GPU).

    The query has no state, status or health column, so they are inferred:

    * ``state`` is ``not_supported`` when both fabric columns print ``N/A`` / ``Not Supported`` (bare or in
      brackets), otherwise ``completed`` -- the driver prints numbers only once the GPU has a fabric probe.
    * ``status`` is None and ``health`` is ``unknown``.
    * As everywhere, an all-zero cluster UUID means "in no NVLink domain". A failed registration
      (``Insufficient Resources``) also prints clique 0 and the all-zero UUID, and this format cannot tell
      it apart from an H100; use ``nvidia-smi -q`` when that matters.
    """
    text = _clean(text)
    rows = [(number, line.strip()) for number, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not rows:
        raise ReportError("the CSV output is empty")
    gpus = []
    for position, (number, line) in enumerate(rows):
        try:
            cells = [cell.strip() for cell in next(csv.reader([line], skipinitialspace=True))]
        except csv.Error as exc:
            raise ReportError(f"CSV line {number}: {exc}") from None
        if position == 0 and cells and _token(cells[0]) == "uuid":
            continue  # header row from --format=csv
        if len(cells) != 3:
            raise ReportError(
                f"CSV line {number}: expected 3 comma-separated columns (uuid, fabric.clusterUuid, "
                f"fabric.cliqueId), got {len(cells)}: {_short(line)!r}"
            )
        raw_uuid, raw_cluster, raw_clique = cells
        where = f"CSV line {number}"
        uuid = _gpu_uuid(raw_uuid, where)
        where = f"{where} ({uuid})"
        cluster = _cluster_uuid(raw_cluster, where)
        clique = _clique_id(raw_clique, where)
        if (cluster is None) != (clique is None):
            raise ReportError(
                f"{where}: cluster UUID is {raw_cluster!r} but clique ID is {raw_clique!r}; "
                "nvidia-smi prints both or neither"
            )
        state = FabricState.NOT_SUPPORTED if cluster is None else FabricState.COMPLETED
        joined = cluster is not None and cluster != NO_CLUSTER
        gpus.append(
            ReportedGpu(
                uuid=uuid,
                index=len(gpus),
                cluster_uuid=cluster if joined else None,
                clique_id=clique if joined else None,
                state=state,
                status=None,
                health=GpuHealth.UNKNOWN,
                raw_cluster_uuid=raw_cluster,
                raw_clique_id=raw_clique,
            )
        )
    if not gpus:
        raise ReportError("the CSV output has a header row but no GPU rows")
    return gpus


def parse_any(text: str) -> tuple[str, list[ReportedGpu]]:
    fmt = detect_format(text)
    parser = {"xml": parse_xml, "text": parse_text, "csv": parse_csv}[fmt]
    return fmt, parser(text)


MAX_TEXT = 64  # the inventory's limit on a GPU's status, serial and product
MAX_MEMORY_MIB = 2**31 - 1  # the largest memory the inventory can store (a 32-bit column)


def validate_report(
    gpus: Iterable[ReportedGpu], gpus_per_node: int | None = GPUS_PER_TRAY
) -> list[ReportedGpu]:
    """The one check every node report passes before it may touch the inventory, whatever it came from
    (structured JSON, raw text/XML/CSV, the command, an agent calling the service): ReportError, naming
    the problem, for a report that could only corrupt it.

    Returns the GPUs with UUIDs in canonical form. Refused: an empty report (a node with GPUs never reports
    none; accepting it would detach every GPU of the tray), a malformed UUID, a clique ID outside
    0-MAX_REPORTED_CLIQUE_ID, one UUID twice (compared case-insensitively) or one index twice, more GPUs or
    higher indexes than a node of ``gpus_per_node`` has (None: any number), and values longer or larger
    than the inventory stores.
    """
    gpus = list(gpus)
    if not gpus:
        raise ReportError(
            "the report lists no GPUs; a node always reports every GPU it has, send its full output"
        )
    out: list[ReportedGpu] = []
    by_uuid: dict[str, list[int]] = {}
    by_index: dict[int, int] = {}
    for position, gpu in enumerate(gpus):
        where = f"GPU {gpu.index}" if isinstance(gpu.index, int) else f"GPU #{position}"
        uuid = canonical_gpu_uuid(gpu.uuid if isinstance(gpu.uuid, str) else None, where)
        if isinstance(gpu.index, bool) or not isinstance(gpu.index, int) or gpu.index < 0:
            raise ReportError(f"{where} ({uuid}): index {gpu.index!r} is not a GPU index (0, 1, ...)")
        if gpus_per_node is not None and gpu.index >= gpus_per_node:
            raise ReportError(
                f"{where} ({uuid}): index {gpu.index} is beyond the {gpus_per_node} GPUs of a compute tray "
                f"(indexes 0-{gpus_per_node - 1})"
            )
        if gpu.clique_id is not None:
            _clique_range(gpu.clique_id, f"{where} ({uuid})")
        for name in ("status", "serial", "product"):
            value = getattr(gpu, name)
            if value is not None and len(value) > MAX_TEXT:
                raise ReportError(f"{where} ({uuid}): {name} is longer than {MAX_TEXT} characters")
        if gpu.memory_mib is not None and not 0 <= gpu.memory_mib <= MAX_MEMORY_MIB:
            raise ReportError(f"{where} ({uuid}): memory of {gpu.memory_mib} MiB is not a GPU's")
        if gpu.index in by_index:
            raise ReportError(
                f"two GPUs share index {gpu.index} (entries {by_index[gpu.index]} and {position})"
            )
        by_index[gpu.index] = position
        by_uuid.setdefault(uuid, []).append(gpu.index)
        out.append(gpu if gpu.uuid == uuid else replace(gpu, uuid=uuid))
    twice = [f"{uuid} ({_ranges(indices)})" for uuid, indices in by_uuid.items() if len(indices) > 1]
    if twice:
        raise ReportError("the report lists one GPU UUID more than once: " + "; ".join(twice))
    return out


# --------------------------------------------------------------------------------------------------------
# Node verdict
# --------------------------------------------------------------------------------------------------------


def _ranges(indices: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``GPU 0-2, 5``."""
    ordered = sorted(set(indices))
    parts: list[str] = []
    start = previous = None
    for value in [*ordered, None]:
        if value is not None and previous is not None and value == previous + 1:
            previous = value
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = value
    return "GPU " + ", ".join(parts)


def _label(gpu: ReportedGpu) -> str:
    return f"GPU {gpu.index} ({gpu.uuid})"


def _domain(gpu: ReportedGpu) -> str:
    return f"{gpu.cluster_uuid}.{gpu.clique_id}"


def _describe(groups: dict[str, list[int]]) -> str:
    return ", ".join(
        say(REPORTS_ONE if len(indices) == 1 else REPORTS_MANY, gpu_list=_ranges(indices), domain=key)
        for key, indices in groups.items()
    )


# Why a node cannot join a partition (NodeReport.problems, kept on the tray as its fabric problems): templates
# (core.sentences), stored and sent in English (the API, the agent), shown in the viewer's language by the
# portal. GPUs are values ("GPU 3 (GPU-...)", "GPU 0-2, 5"), as are nvidia-smi's own words (a status, a
# health).
NO_GPUS = gettext_noop("the report lists no GPUs")
NO_DOMAIN = gettext_noop("no GPU is in an NVLink domain")
NO_DOMAIN_EXPECTED = gettext_noop(
    "no GPU is in an NVLink domain, but the rack's cluster UUID is %(expected)s"
)
UUID_TWICE = gettext_noop("GPU UUID %(uuid)s appears more than once (%(gpu_list)s)")
IN_PROGRESS = gettext_noop("%(gpu)s fabric registration is still in progress")
NOT_STARTED = gettext_noop("%(gpu)s has not started fabric registration")
NO_STATUS = gettext_noop("%(gpu)s completed fabric registration but printed no status")
REGISTRATION_FAILED = gettext_noop("%(gpu)s fabric registration failed: %(status)s")
NO_FABRIC_SUPPORT = gettext_noop("%(gpu)s reports no NVLink fabric support while %(gpu_list)s do")
FABRIC_HEALTH = gettext_noop("%(gpu)s fabric health is %(health)s")
DISAGREE_CLIQUE = gettext_noop("GPUs disagree on the NVLink clique: %(groups)s")
DISAGREE_DOMAIN = gettext_noop("GPUs disagree on the NVLink domain (cluster UUID): %(groups)s")
NOT_IN_DOMAIN = gettext_noop("%(gpu)s is in no NVLink domain (cluster UUID %(printed)s) while %(groups)s")
OTHER_CLUSTER = gettext_noop("cluster UUID %(cluster)s differs from the rack's %(expected)s")
OTHER_CLUSTER_GPUS = gettext_noop(
    "cluster UUID %(cluster)s differs from the rack's %(expected)s (%(gpu_list)s)"
)
# How the GPUs of one clique are listed in those ("GPU 0-3 report <cluster UUID>.<clique>").
REPORTS_ONE = gettext_noop("%(gpu_list)s reports %(domain)s")
REPORTS_MANY = gettext_noop("%(gpu_list)s report %(domain)s")


def summarize(
    host: str, fmt: str, gpus: list[ReportedGpu], expected_cluster_uuid: str | None = None
) -> NodeReport:
    """Decide the node's NVLink clique and list why it cannot join a partition.

    ``tray_clique`` follows GPU Feature Discovery: ``<cluster_uuid>.<clique_id>`` when there is at least one
    fabric-attached GPU (state other than not_supported) and every such GPU is in an NVLink domain with the
    same cluster UUID and clique ID; otherwise None.

    ``problems`` (empty when the node is fine) names the GPUs involved. Judgement calls:

    * A node whose GPUs are all not_supported (PCIe GPUs, State N/A) or all Completed/Success with the
      all-zero cluster UUID (H100/HGX) simply has no NVLink domain: no problem is reported. "no GPU is in
      an NVLink domain" is reported only when some GPU is fabric-capable but not joined (registration in
      progress, not started, or failed), or when ``expected_cluster_uuid`` says the node belongs to a rack.
    * A GPU that completed registration without a domain while its neighbours joined one, and a GPU with no
      fabric support next to GPUs that have it, are both reported: a tray's GPUs must all be in one clique.
    * With ``expected_cluster_uuid`` every cluster UUID the node reports must be the rack's.
    """
    if fmt not in FORMATS:
        raise ReportError(f"unknown report format {fmt!r}; expected one of {', '.join(FORMATS)}")
    expected = None
    if expected_cluster_uuid is not None:
        expected = _cluster_uuid(expected_cluster_uuid, "expected_cluster_uuid")
        if expected is None or expected == NO_CLUSTER:
            raise ReportError(f"expected_cluster_uuid {expected_cluster_uuid!r} is not a rack's cluster UUID")

    gpus = list(gpus)
    problems: list[str] = []
    if not gpus:
        problems.append(NO_GPUS)
        if expected:
            problems.append(say(NO_DOMAIN_EXPECTED, expected=expected))
        return NodeReport(host=host, format=fmt, gpus=gpus, tray_clique=None, problems=problems)

    seen: dict[str, list[int]] = {}
    for gpu in gpus:
        seen.setdefault(gpu.uuid.lower(), []).append(gpu.index)
    for indices in seen.values():
        if len(indices) > 1:
            uuid = next(g.uuid for g in gpus if g.index == indices[0])
            problems.append(say(UUID_TWICE, uuid=uuid, gpu_list=_ranges(indices)))

    attached = [g for g in gpus if g.state is not FabricState.NOT_SUPPORTED]
    joined = [g for g in attached if g.cluster_uuid is not None and g.clique_id is not None]
    not_joined: list[ReportedGpu] = []  # fabric-capable but registration unfinished or failed
    no_domain: list[ReportedGpu] = []  # registration succeeded, but in no NVLink domain (all-zero UUID)

    for gpu in attached:
        if gpu.state is FabricState.IN_PROGRESS:
            problems.append(say(IN_PROGRESS, gpu=_label(gpu)))
            not_joined.append(gpu)
        elif gpu.state is FabricState.NOT_STARTED:
            problems.append(say(NOT_STARTED, gpu=_label(gpu)))
            not_joined.append(gpu)
        elif gpu.status is None and fmt != "csv":
            problems.append(say(NO_STATUS, gpu=_label(gpu)))
            not_joined.append(gpu)
        elif gpu.status is not None and _token(gpu.status) != "success":
            problems.append(say(REGISTRATION_FAILED, gpu=_label(gpu), status=gpu.status))
            not_joined.append(gpu)
        elif gpu.cluster_uuid is None:
            no_domain.append(gpu)

    if attached:
        for gpu in gpus:
            if gpu.state is FabricState.NOT_SUPPORTED:
                problems.append(
                    say(NO_FABRIC_SUPPORT, gpu=_label(gpu), gpu_list=_ranges(g.index for g in attached))
                )

    for gpu in gpus:
        if gpu.health in HEALTH_WORDS:
            problems.append(say(FABRIC_HEALTH, gpu=_label(gpu), health=HEALTH_WORDS[gpu.health]))

    groups: dict[str, list[int]] = {}
    for gpu in joined:
        groups.setdefault(_domain(gpu), []).append(gpu.index)
    if len(groups) > 1:
        one_cluster = len({g.cluster_uuid for g in joined}) == 1
        problems.append(say(DISAGREE_CLIQUE if one_cluster else DISAGREE_DOMAIN, groups=_describe(groups)))
    if joined:
        for gpu in no_domain:
            printed = gpu.raw_cluster_uuid if gpu.raw_cluster_uuid is not None else "N/A"
            problems.append(say(NOT_IN_DOMAIN, gpu=_label(gpu), printed=printed, groups=_describe(groups)))
    elif expected:
        problems.append(say(NO_DOMAIN_EXPECTED, expected=expected))
    elif not_joined:
        problems.append(NO_DOMAIN)

    if expected and joined:
        clusters: dict[str, list[int]] = {}
        for gpu in joined:
            clusters.setdefault(gpu.cluster_uuid, []).append(gpu.index)
        for cluster, indices in clusters.items():
            if cluster != expected:
                if len(clusters) == 1:
                    problems.append(say(OTHER_CLUSTER, cluster=cluster, expected=expected))
                else:
                    problems.append(
                        say(OTHER_CLUSTER_GPUS, cluster=cluster, expected=expected, gpu_list=_ranges(indices))
                    )

    tray_clique = None
    if attached and len(joined) == len(attached) and len(groups) == 1:
        tray_clique = next(iter(groups))
    return NodeReport(host=host, format=fmt, gpus=gpus, tray_clique=tray_clique, problems=problems)


def analyze(host: str, text: str, expected_cluster_uuid: str | None = None) -> NodeReport:
    fmt, gpus = parse_any(text)
    return summarize(host, fmt, gpus, expected_cluster_uuid)
