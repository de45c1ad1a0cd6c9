"""The one check every health input passes before it is recorded: a report's XIDs, active checks and agent.

Pure Python (standard library only, no Django), like the catalog (inventory.discovery.faults).

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

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from core.textrule import text_problem
from inventory.discovery.faults import XID_RANGE, PciKey, mnemonic, parse_nvrm, pci_key
from inventory.discovery.nvidia_smi import ReportError

MAX_XIDS = 256  # per report; the agent sends each kernel line once, so a flood is split over reports
MAX_XID_TEXT = 512
MAX_CHECKS = 16
MAX_CHECK_NAME = 128
MAX_CHECK_OUTPUT = 64 * 1024  # bytes of UTF-8: the tail of the check's output
MAX_CHECK_SECONDS = 7 * 24 * 3600
MAX_AGENT_VERSION = 64
MAX_AGENT_INTERVAL = 24 * 3600


MAX_FUTURE = timedelta(days=1)  # a kernel time further ahead than this is a broken clock, not a fault


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
