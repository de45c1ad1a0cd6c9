"""A site file (YAML or CSV) an operator writes for a site with neither ibnetdiscover nor Topograph (pure).

YAML::

    spine_groups:
      - name: spine-a
        units:
          - name: su-1
            racks: [gb-r01, gb-r02]
            leaves: [leaf-su1-r0, leaf-su1-r1, leaf-su1-r2, leaf-su1-r3]   # optional: rail n's leaf
    trays:                                                                # optional: a tray cabled elsewhere
      - {hostname: gb-r02-t18, unit: su-2}

CSV: a header `spine_group,unit,rack`, then one line per rack.

Refused whole, naming the line: anchors and aliases, nesting deeper than the format, unknown keys, a rack or
unit named twice, names not in the rules (inventory.names), text that breaks the text rule.
"""

from __future__ import annotations

import csv
import io
import unicodedata

import yaml

from core.hardware import GPUS_PER_TRAY
from inventory.discovery.fabric.parsed import (
    SITE_FILE,
    FabricInputError,
    ParsedFabric,
    check_size,
    group_name,
    hostname,
    leaf_name,
    place_unit,
    rack_name,
)

MAX_DEPTH = 6  # the file > spine_groups > a group > its units > a unit > its racks/leaves
CSV_HEADER = ["spine_group", "unit", "rack"]


def _events_are_plain(text: str) -> None:
    """Refuse anchors, aliases and deep nesting before anything is built (an alias bomb expands nothing
    here; a 10,000-deep nest never reaches the recursive composer)."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            line = event.start_mark.line + 1
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise FabricInputError("YAML anchors and aliases are not taken in a site file", line)
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise FabricInputError(f"nested deeper than a site file ({MAX_DEPTH} levels)", line)
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            elif isinstance(event, yaml.ScalarEvent) and event.tag not in (
                None,
                "!",
                "tag:yaml.org,2002:str",
            ):
                raise FabricInputError(f"YAML tag {event.tag!r} is not taken in a site file", line)
    except yaml.reader.ReaderError as exc:
        # A character YAML does not allow (a control character): the reader knows which, and where.
        code = ord(exc.character) if isinstance(exc.character, str) else exc.character
        what = "a control character" if unicodedata.category(chr(code)) == "Cc" else "a character"
        raise FabricInputError(
            f"not YAML: {what} (U+{code:04X}) YAML does not allow", text.count("\n", 0, exc.position) + 1
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise FabricInputError(f"not YAML: {problem}", mark.line + 1 if mark else None) from None


def _line_of(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _mapping(node: yaml.Node, keys: set[str], required: set[str], what: str) -> dict[str, yaml.Node]:
    if not isinstance(node, yaml.MappingNode):
        raise FabricInputError(f"{what} must be a mapping", _line_of(node))
    out: dict[str, yaml.Node] = {}
    for key, value in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.value not in keys:
            raise FabricInputError(
                f"{what}: unknown key {str(getattr(key, 'value', '?'))[:40]!r} "
                f"(known: {', '.join(sorted(keys))})",
                _line_of(key),
            )
        if key.value in out:
            raise FabricInputError(f"{what}: {key.value!r} given twice", _line_of(key))
        out[key.value] = value
    for key in sorted(required - set(out)):
        raise FabricInputError(f"{what} needs {key!r}", _line_of(node))
    return out


def _sequence(node: yaml.Node, what: str) -> list[yaml.Node]:
    if not isinstance(node, yaml.SequenceNode):
        raise FabricInputError(f"{what} must be a list", _line_of(node))
    return list(node.value)


def _scalar(node: yaml.Node, what: str) -> str:
    if not isinstance(node, yaml.ScalarNode):
        raise FabricInputError(f"{what} must be text", _line_of(node))
    return node.value


def parse_yaml(text: str) -> ParsedFabric:
    check_size(text)
    _events_are_plain(text)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:  # pragma: no cover - _events_are_plain read the same events
        raise FabricInputError(f"not YAML: {exc}") from None
    if root is None:
        raise FabricInputError("the site file is empty")
    top = _mapping(root, {"spine_groups", "trays"}, {"spine_groups"}, "the site file")
    parsed = ParsedFabric(source=SITE_FILE)
    where: dict[str, int] = {}
    for group_node in _sequence(top["spine_groups"], "spine_groups"):
        group = _mapping(group_node, {"name", "units"}, {"name", "units"}, "a spine group")
        spine = group_name(
            _scalar(group["name"], "a spine group's name"), "spine group", _line_of(group["name"])
        )
        if spine in parsed.units.values() or spine in where:
            raise FabricInputError(f"spine group {spine!r} is named twice", _line_of(group["name"]))
        where[spine] = _line_of(group["name"])
        for unit_node in _sequence(group["units"], f"spine group {spine}'s units"):
            fields = _mapping(unit_node, {"name", "racks", "leaves"}, {"name", "racks"}, "a unit")
            line = _line_of(fields["name"])
            unit = group_name(_scalar(fields["name"], "a unit's name"), "unit", line)
            if unit in parsed.units:
                raise FabricInputError(f"unit {unit!r} is named twice", line)
            place_unit(parsed.units, unit, spine, line)
            for rack_node in _sequence(fields["racks"], f"unit {unit}'s racks"):
                rack = rack_name(_scalar(rack_node, "a rack's name"), _line_of(rack_node))
                if rack in parsed.racks:
                    raise FabricInputError(
                        f"rack {rack!r} is in unit {parsed.racks[rack]!r} already", _line_of(rack_node)
                    )
                parsed.racks[rack] = unit
            if "leaves" in fields:
                leaves = _sequence(fields["leaves"], f"unit {unit}'s leaves")
                if len(leaves) > GPUS_PER_TRAY:
                    raise FabricInputError(
                        f"unit {unit!r} lists {len(leaves)} leaves; a tray has {GPUS_PER_TRAY} GPUs (rails)",
                        _line_of(fields["leaves"]),
                    )
                parsed.unit_leaves[unit] = [
                    leaf_name(_scalar(leaf_node, "a leaf"), _line_of(leaf_node)) for leaf_node in leaves
                ]
    if not parsed.racks:
        raise FabricInputError("the site file places no rack")
    for tray_node in _sequence(top["trays"], "trays") if "trays" in top else []:
        fields = _mapping(tray_node, {"hostname", "unit"}, {"hostname", "unit"}, "a tray")
        line = _line_of(fields["hostname"])
        host = hostname(_scalar(fields["hostname"], "a tray's hostname"), line)
        unit = _scalar(fields["unit"], "a tray's unit")
        if unit not in parsed.units:
            raise FabricInputError(f"tray {host}: unit {unit!r} is not in the file", _line_of(fields["unit"]))
        if host in parsed.hosts:
            raise FabricInputError(f"tray {host!r} is listed twice", line)
        parsed.hosts[host] = unit
    return parsed


def parse_csv(text: str) -> ParsedFabric:
    check_size(text)
    if "\x00" in text:
        raise FabricInputError(
            "a NUL character: not a CSV text file", text[: text.index("\x00")].count("\n") + 1
        )
    parsed = ParsedFabric(source=SITE_FILE)
    reader = csv.reader(io.StringIO(text, newline=""))
    header_seen = False
    try:
        for row in reader:
            line = reader.line_num
            cells = [cell.strip() for cell in row]
            if not any(cells) or cells[0].startswith("#"):
                continue
            if not header_seen and cells == CSV_HEADER:
                header_seen = True
                continue
            if not header_seen:
                raise FabricInputError(f"the first line must be the header {','.join(CSV_HEADER)}", line)
            if len(cells) != len(CSV_HEADER):
                raise FabricInputError(f"{len(cells)} cells; a line is {','.join(CSV_HEADER)}", line)
            spine = group_name(cells[0], "spine group", line)
            unit = group_name(cells[1], "unit", line)
            rack = rack_name(cells[2], line)
            place_unit(parsed.units, unit, spine, line)
            if rack in parsed.racks:
                raise FabricInputError(f"rack {rack!r} is in unit {parsed.racks[rack]!r} already", line)
            parsed.racks[rack] = unit
    except csv.Error as exc:
        raise FabricInputError(f"not CSV: {exc}", reader.line_num) from None
    if not parsed.racks:
        raise FabricInputError("the site file places no rack")
    return parsed


def parse(text: str, name: str = "") -> ParsedFabric:
    """A site file, CSV when `name` ends in .csv or its first line is the CSV header, else YAML."""
    first = text.lstrip("\ufeff").split("\n", 1)[0].strip().replace(" ", "")
    if name.lower().endswith(".csv") or first == ",".join(CSV_HEADER):
        return parse_csv(text)
    return parse_yaml(text)
