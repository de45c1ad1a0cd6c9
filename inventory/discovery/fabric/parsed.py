"""What every fabric reader gives: scalable units under spine groups, and where racks, hosts and GPUs sit.

Pure (no Django). Names are checked here once, whatever the source: a group's name becomes a Slurm switch
name and a Kubernetes label value (inventory.names' rule for rack names: a DNS label, lower-case letters,
digits and '-').
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from core.textrule import text_problem
from inventory import names

# A fabric file larger than this is refused before it is read: a 1,000-switch ibnetdiscover dump (64 ports
# each, ~100 characters a line) is ~7 MB.
MAX_BYTES = 16 * 1024 * 1024
LEAF_NAME_MAX = 64  # a leaf switch's name as the fabric describes it (ibnetdiscover's node description)

IBNETDISCOVER = "ibnetdiscover"
TOPOGRAPH = "topograph"
SITE_FILE = "site_file"

_GROUP = re.compile(names.DNS_LABEL_PATTERN)


class FabricInputError(ValueError):
    """Input refused whole; `line` is the 1-based line it stopped at (None when the input has no lines)."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.line = line

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}" if self.line is not None else self.message


@dataclass
class ParsedFabric:
    """A fabric as one source sees it. Units hang under spine groups; racks (site file) or hosts (the
    discovered sources, by hostname) hang under units; GPUs have a rail (and the leaf their NIC reaches)."""

    source: str
    units: dict[str, str] = field(default_factory=dict)  # unit -> its spine group
    racks: dict[str, str] = field(default_factory=dict)  # rack name -> unit
    hosts: dict[str, str] = field(default_factory=dict)  # tray hostname -> unit
    rails: dict[tuple[str, int], tuple[int, str]] = field(default_factory=dict)  # (host, GPU) -> (rail, leaf)
    unit_leaves: dict[str, list[str]] = field(default_factory=dict)  # unit -> rail n's leaf (site file)
    notes: list[str] = field(default_factory=list)  # what was read but left aside, in words

    def spine_groups(self) -> list[str]:
        return sorted(set(self.units.values()))


def decode(data: bytes) -> str:
    """The text of an uploaded fabric file: UTF-8 (a BOM is allowed), at most MAX_BYTES."""
    if len(data) > MAX_BYTES:
        raise FabricInputError(
            f"the file has {len(data):,} bytes, more than the {MAX_BYTES:,} a fabric file may"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise FabricInputError(f"not UTF-8 text (byte {exc.start + 1})", line) from None
    return text


def check_size(text: str) -> None:
    if len(text) > MAX_BYTES:
        raise FabricInputError(f"the input has {len(text):,} characters, more than the {MAX_BYTES:,} allowed")


def group_name(value: object, what: str, line: int | None) -> str:
    """`value` as a unit's or spine group's name, or a refusal naming `what` and the line."""
    if not isinstance(value, str) or not value:
        raise FabricInputError(f"{what} needs a name", line)
    problem = text_problem(value, max_length=names.RACK_NAME_MAX)
    if problem is not None:
        raise FabricInputError(f"{what} {value!r}: {problem.reason}", line)
    if _GROUP.match(value) is None:
        rule = "use lower case" if value != value.lower() else "use only a-z, 0-9 and '-'"
        raise FabricInputError(
            f"{what} {value!r}: {rule} (a group's name is a Slurm switch name and a Kubernetes label value)",
            line,
        )
    return value


def _named(value: object, what: str, limit: int, rule, line: int | None) -> str:
    if not isinstance(value, str):
        raise FabricInputError(f"a {what}'s name must be text", line)
    problem = text_problem(value, max_length=limit)
    why = problem.reason if problem is not None else rule(value)
    if why is not None:
        raise FabricInputError(f"{what} {value!r}: {why}", line)
    return value


def rack_name(value: object, line: int | None) -> str:
    return _named(value, "rack", names.RACK_NAME_MAX, names.rack_name_error, line)


def hostname(value: object, line: int | None) -> str:
    return _named(value, "host", names.HOSTNAME_MAX, names.hostname_error, line)


def leaf_name(value: str, line: int | None) -> str:
    problem = text_problem(value, max_length=LEAF_NAME_MAX)
    if problem is not None:
        raise FabricInputError(f"switch description {value!r}: {problem.reason}", line)
    return value


def place_unit(units: dict[str, str], unit: str, spine: str, line: int | None) -> None:
    """Put `unit` under `spine`, refusing a unit named under two spine groups."""
    known = units.setdefault(unit, spine)
    if known != spine:
        raise FabricInputError(f"unit {unit!r} is under spine group {known!r} and {spine!r}", line)
