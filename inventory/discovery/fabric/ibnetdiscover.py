"""ibnetdiscover's topology output (infiniband-diags, rdma-core) -> the fabric above the rack (pure).

The format, as infiniband-diags/ibnetdiscover.c prints it (and its man page, "TOPOLOGY FILE FORMAT"): header
comments (`#`), then one block per node: id lines (`vendid=0x..`, `devid=0x..`, `sysimgguid=0x..`,
`switchguid=0x..(..)` or `caguid=0x..`), the node line (`Switch\t<ports> "S-<guid>"\t\t# "<description>"
base port 0 lid <n> lmc <n>` or `Ca\t<ports> "H-<guid>"\t\t# "<description>"`), then one line per connected
port (`[<port>]\t"S-<guid>"[<remote port>]\t\t# "<remote description>" lid <n> 4xNDR`; a CA's port line puts
its port GUID after the port number and the lids after `#`). `-g` adds chassis lines, which are skipped.

From the links: *leaves* are the switches a host adapter (CA) is cabled to; a *scalable unit* is a set of
leaves joined by the hosts they share (in a rail-optimized fabric, rail n's leaf of a unit has NIC n of every
tray of that unit); *spines* are the other switches cabled to leaves; units whose leaves reach a common spine
are one *spine group* (a 2-tier fabric is one spine group; a 3-tier one has a group per spine block under its
core). A host is named by its adapters' node description as rdma-ndd sets it by default ("%h %d":
"<hostname> mlx5_0"); a host's adapters, in device order, serve its GPUs 0-3 (GB200/GB300 trays: one
ConnectX NIC per GPU), and a GPU's rail is the rail most hosts' same-numbered NICs take to that leaf.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from core.hardware import GPUS_PER_TRAY
from inventory.discovery.fabric.parsed import (
    IBNETDISCOVER,
    FabricInputError,
    ParsedFabric,
    check_size,
    leaf_name,
)

_ID_LINE = re.compile(
    r"(vendid|devid|sysimgguid|switchguid|caguid|rtguid)=0x[0-9a-fA-F]+(?:\([0-9a-fA-F]+\))?"
)
_NODE = re.compile(
    r'(Switch|Ca|Rt)\s+(\d+)\s+"([SHR])-([0-9a-fA-F]{16})"\s*(?:#\s*"(.*?)"(?:\s+(?:base|enhanced)\s+port 0 '
    r"lid \d+ lmc \d+)?(?:\s+\(scp\))?\s*)?"
)
_PORT = re.compile(
    r"\[(\d+)\](?:\[ext \d+\])?(?:\(([0-9a-fA-F]+)\))?\s+"
    r'"([SHR?])-([0-9a-fA-F]{16})"\[(\d+)\](?:\[ext \d+\])?(?:\s*\(([0-9a-fA-F]+)\))?\s*(?:#.*)?'
)
# Lines of the grouped output (-g) and of chassis headers: nothing to read for the fabric's shape.
_SKIPPED = re.compile(r"(Chassis \d+.*|Non-Chassis Nodes|Hostname: .*)")
_DEVICE_NUMBER = re.compile(r"(\d+)$")


@dataclass
class _Node:
    kind: str  # "S", "H" or "R"
    guid: str
    description: str
    line: int
    # (line, port, remote guid, remote port)
    links: list[tuple[int, int, str, int]] = field(default_factory=list)


def _read(text: str) -> dict[str, _Node]:
    nodes: dict[str, _Node] = {}
    current: _Node | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        first = line[0]
        if first == "[":  # a port line: the most common by far
            match = _PORT.fullmatch(line)
            if match:
                if current is None:
                    raise FabricInputError("a port line outside a Switch or Ca block", number)
                current.links.append(
                    (number, int(match.group(1)), match.group(4).lower(), int(match.group(5)))
                )
                continue
        elif "=" in line and _ID_LINE.fullmatch(line.split("\t")[0].strip()):
            current = None  # a new node's block begins
            continue
        elif (match := _NODE.fullmatch(line)) is not None:
            kind, guid = match.group(3), match.group(4).lower()
            if (match.group(1) == "Switch") != (kind == "S"):
                raise FabricInputError(f"a {match.group(1)} line names a {kind!r} node", number)
            if guid in nodes:
                raise FabricInputError(
                    f"node {kind}-{guid} is listed twice (first on line {nodes[guid].line})", number
                )
            current = nodes[guid] = _Node(kind, guid, leaf_name(match.group(5) or "", number), number)
            continue
        elif _SKIPPED.fullmatch(line):
            continue
        shown = line if len(line) <= 80 else line[:77] + "..."
        raise FabricInputError(f"not a line of ibnetdiscover's topology output: {shown!r}", number)
    return nodes


def _device_order(description: str) -> tuple[int, str]:
    device = description.split()[1] if len(description.split()) > 1 else ""
    number = _DEVICE_NUMBER.search(device)
    return (int(number.group(1)) if number else 1 << 30, device)


class _Groups:
    """Union-find over names."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, item: str) -> str:
        self.parent.setdefault(item, item)
        while self.parent[item] != item:
            self.parent[item] = self.parent[self.parent[item]]
            item = self.parent[item]
        return item

    def join(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)


def _check_links(nodes: dict[str, _Node], last_line: int) -> None:
    """Every cable is printed from both ends (ibnetdiscover lists each node's connected ports): a port that
    reaches a node the output never lists, or one whose far end does not list it back, is output cut short
    (or edited); refused naming the port's line."""
    ends: dict[tuple[str, int], tuple[str, int]] = {}
    for node in nodes.values():
        for line, port, remote, remote_port in node.links:
            if (node.guid, port) in ends:
                raise FabricInputError(f"port {port} of {node.kind}-{node.guid} is listed twice", line)
            ends[(node.guid, port)] = (remote, remote_port)
    for node in nodes.values():
        for line, port, remote, remote_port in node.links:
            if remote not in nodes:
                raise FabricInputError(
                    f"a port of {node.kind}-{node.guid} reaches {remote}, which the output never lists "
                    f"(partial output? it ends at line {last_line:,})",
                    line,
                )
            if ends.get((remote, remote_port)) != (node.guid, port):
                far = nodes[remote]
                raise FabricInputError(
                    f"port {port} of {node.kind}-{node.guid} reaches port {remote_port} of "
                    f"{far.kind}-{remote} (listed on line {far.line}), whose block does not list that cable "
                    "back (partial output? "
                    f"it ends at line {last_line:,})",
                    line,
                )


def parse(text: str) -> ParsedFabric:
    """The fabric in ibnetdiscover's output, or FabricInputError naming the line it stopped at."""
    check_size(text)
    nodes = _read(text)
    # The line reading stopped at (the last), for refusals of the whole: output cut short says where it ends.
    last = (text.count("\n") + (not text.endswith("\n"))) if text.strip() else None
    if not nodes:
        raise FabricInputError("no Switch or Ca block: is this ibnetdiscover's output?", last)
    _check_links(nodes, last or 1)
    switches = {guid for guid, node in nodes.items() if node.kind == "S"}
    # Host (hostname) -> its adapters in device order; each adapter's leaf.
    adapters: dict[str, list[_Node]] = {}
    for node in nodes.values():
        if node.kind == "H" and node.description.split():
            adapters.setdefault(node.description.split()[0], []).append(node)
    leaf_of: dict[str, str] = {}  # adapter guid -> its leaf (the switch its first linked port reaches)
    for host_adapters in adapters.values():
        for adapter in host_adapters:
            for _line, _port, remote, _remote_port in adapter.links:
                if remote in switches:
                    leaf_of.setdefault(adapter.guid, remote)
    leaves = set(leaf_of.values())
    if not leaves:
        raise FabricInputError("no switch has a host adapter cabled to it: no leaf to group racks by", last)
    units = _Groups()
    host_leaves: dict[str, list[str]] = {}
    for host, host_adapters in adapters.items():
        reached = [leaf_of[a.guid] for a in host_adapters if a.guid in leaf_of]
        if reached:
            host_leaves[host] = reached
            for leaf in reached:
                units.join(leaf, reached[0])
    spine_of_leaf: dict[str, set[str]] = {leaf: set() for leaf in leaves}
    for guid in leaves:
        for _line, _port, remote, _remote_port in nodes[guid].links:
            if remote in switches and remote not in leaves:
                spine_of_leaf[guid].add(remote)
    # Units (by root leaf) -> hosts; spine groups join the units whose leaves share a spine.
    unit_hosts: dict[str, list[str]] = {}
    for host, reached in host_leaves.items():
        unit_hosts.setdefault(units.find(reached[0]), []).append(host)
    groups = _Groups()
    by_spine: dict[str, str] = {}
    for leaf, spines in spine_of_leaf.items():
        root = units.find(leaf)
        groups.find(root)
        for spine in spines:
            groups.join(root, by_spine.setdefault(spine, root))
    # Names: units "su-1"... by their first host, spine groups "sg-1"... by their first unit.
    ordered_units = sorted(unit_hosts, key=lambda root: min(unit_hosts[root]))
    unit_name = {root: f"su-{i}" for i, root in enumerate(ordered_units, start=1)}
    group_roots: list[str] = []
    for root in ordered_units:
        if groups.find(root) not in group_roots:
            group_roots.append(groups.find(root))
    group_name = {root: f"sg-{i}" for i, root in enumerate(group_roots, start=1)}
    parsed = ParsedFabric(source=IBNETDISCOVER)
    for root in ordered_units:
        parsed.units[unit_name[root]] = group_name[groups.find(root)]
        for host in unit_hosts[root]:
            parsed.hosts[host] = unit_name[root]
    # Rails: a GPU's NIC (its host's adapter of the same rank) and the leaf it reaches; the leaf's rail is
    # the rank most hosts' adapters on it have.
    ranks: dict[str, Counter[int]] = {leaf: Counter() for leaf in leaves}
    ranked: dict[str, list[_Node]] = {}
    for host, host_adapters in adapters.items():
        ranked[host] = sorted(host_adapters, key=lambda a: _device_order(a.description))
        for rank, adapter in enumerate(ranked[host][:GPUS_PER_TRAY]):
            if adapter.guid in leaf_of:
                ranks[leaf_of[adapter.guid]][rank] += 1
    rail_of = {
        leaf: min(counts.items(), key=lambda item: (-item[1], item[0]))[0]
        for leaf, counts in ranks.items()
        if counts
    }
    for host, host_adapters in ranked.items():
        for rank, adapter in enumerate(host_adapters[:GPUS_PER_TRAY]):
            leaf = leaf_of.get(adapter.guid)
            if leaf is not None:
                parsed.rails[(host, rank)] = (rail_of[leaf], nodes[leaf].description or f"S-{leaf}")
        if len(host_adapters) > GPUS_PER_TRAY:
            parsed.notes.append(
                f"host {host}: {len(host_adapters)} adapters, the first {GPUS_PER_TRAY} taken as its GPUs' "
                "NICs"
            )
    unnamed = sum(1 for node in nodes.values() if node.kind == "H" and not node.description.split())
    if unnamed:
        parsed.notes.append(f"{unnamed} host adapters without a node description (no hostname) left aside")
    return parsed
