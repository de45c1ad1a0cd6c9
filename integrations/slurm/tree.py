"""The compute fabric (core.fabric.Fabric) as a Slurm tree topology (topology/tree), for topology.yaml.

Pure functions, no Django, no I/O. `plan_tree` lays the switches out, `tree_topology` is the topology.yaml
entry, `parse_tree` reads one back (what the tests and the target check a file against) and
`parse_show_tree` / `compare_tree` read `scontrol show topology <name>` back against the plan.

The tree (issue 33): one leaf switch per group of the fabric's lowest level (the scalable unit) holding the
nodes of its racks, one switch per group of each level above over its groups (the spine group over its
units), and a root over the top level's groups when there is more than one. Racks the fabric does not know
are left out of the tree (`TreePlan.racks_left_out`): a partition using the tree must not hold them
(`tree_holds`).

What Slurm refuses or warns about, read in Slurm's src/plugins/topology/tree/switch_record.c
(`_parse_switches`, `switch_record_validate`; the same code reads topology.yaml's `tree.switches`, whose
fields `switch`, `children`, `nodes` are src/plugins/data_parser/v0.0.4N/parsers.c SWITCH_CONFIG):

* a switch name longer than 64 characters (HOST_NAME_MAX) or given twice (fatal: "Switch (%s) has already
  been defined"); a switch with both nodes and children;
* `children` is a hostlist expression of switch names (hostlist_create), every one of them defined
  (fatal: "has invalid child"): names therefore hold no ',', '[', ']' or spaces; Rackplane writes a plain
  comma list of names made of letters, digits, '.', '_' and '-' (`switch_name`);
* levels are resolved in passes over the file, and more than 20 passes is fatal ("Switch configuration is
  not a tree"): Rackplane writes leaves first and each level after the one below, so one pass resolves the
  whole tree, and refuses fabrics deeper than MAX_TREE_LEVELS anyway;
* unknown node names and a node under two leaf switches are only warned about ("Invalid hostnames in switch
  configuration", "Multiple leaf switches contain nodes"), and nodes under no switch too ("switches lack
  access to %d nodes"): the planner checks them itself (every node in exactly one leaf, every switch
  reachable from the root).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import hostlist

from core.fabric import Fabric
from integrations.slurm.topology import HOSTNAME, check_name, compress, expand, key_value_lines, natural_key

FABRIC_TOPOLOGY = "fabric"
ROOT_SWITCH = "root"
MAX_SWITCH_NAME = 64  # Slurm: HOST_NAME_MAX
# Slurm fatals after 20 resolution passes; the file order Rackplane writes needs one. The fabric's levels,
# the root and the leaves stay well below.
MAX_TREE_LEVELS = 16

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class TreeSwitch:
    """One switch: a leaf with `nodes`, or a switch over `children` (switch names)."""

    name: str
    nodes: tuple[str, ...] = ()
    children: tuple[str, ...] = ()
    level: int = 0  # 0 for a leaf, one more than its highest child otherwise


@dataclass(frozen=True)
class TreePlan:
    """The switches, leaves first then each level up (the root last), and what the tree leaves out."""

    switches: tuple[TreeSwitch, ...]
    racks_left_out: tuple[str, ...] = ()

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(h for s in self.switches for h in s.nodes)

    def summary(self) -> str:
        leaves = sum(1 for s in self.switches if s.nodes)
        return f"{leaves} leaf switches, {len(self.switches)} switches, {len(self.nodes)} nodes"


def switch_name(level: str, group: str) -> str:
    """`<level>.<group>` made of Slurm-safe characters (a group's name is unique within its level only)."""
    raw = f"{level}.{group}"
    name = _SAFE.sub("-", raw)
    if name != raw or len(name) > MAX_SWITCH_NAME or not name[:1].isalnum():
        digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
        name = f"{name.lstrip('._-')[: MAX_SWITCH_NAME - 10]}-{digest}"
        if not name[:1].isalnum():
            name = f"s{name}"[:MAX_SWITCH_NAME]
    return name


def plan_tree(fabric: Fabric, hosts_by_rack: Mapping[str, Sequence[str]]) -> TreePlan | None:
    """The fabric's tree over these racks' nodes, or None when no rack with nodes is in the fabric.

    `hosts_by_rack`: every rack Slurm knows and its node names. ValueError when the fabric is not a tree
    (a group under two parents), too deep for Slurm, or a node is in two racks.
    """
    if len(fabric.levels) + 1 > MAX_TREE_LEVELS:
        raise ValueError(
            f"the fabric has {len(fabric.levels)} levels: a Slurm tree of more than {MAX_TREE_LEVELS} is not "
            "rendered"
        )
    owner: dict[str, str] = {}
    for rack, hosts in hosts_by_rack.items():
        for host in hosts:
            if not HOSTNAME.match(host):
                raise ValueError(f"rack {rack}: {host!r} is not a valid node name")
            if owner.setdefault(host, rack) != rack:
                raise ValueError(f"node {host} is in two racks: {owner[host]} and {rack}")
    placed = {r: p for r, p in fabric.racks.items() if hosts_by_rack.get(r)}
    left_out = tuple(sorted((r for r, h in hosts_by_rack.items() if h and r not in placed), key=natural_key))
    if not placed:
        return None
    depth = len(fabric.levels)
    # parent[(d, group)] = the group one level up; a group seen under two parents is not a tree.
    parent: dict[tuple[int, str], str] = {}
    for rack, path in sorted(placed.items()):
        for d in range(1, depth):
            seen = parent.setdefault((d, path[d]), path[d - 1])
            if seen != path[d - 1]:
                raise ValueError(
                    f"the fabric is not a tree: {fabric.levels[d]} {path[d]} is under {fabric.levels[d - 1]} "
                    f"{seen} and {path[d - 1]} (rack {rack})"
                )
    names: dict[tuple[int, str], str] = {}
    for path in placed.values():
        for d, group in enumerate(path):
            names.setdefault((d, group), switch_name(fabric.levels[d], group))
    taken = sorted(names.values())
    if len(set(taken)) != len(taken) or ROOT_SWITCH in taken:
        raise ValueError("two fabric groups give the same Slurm switch name: rename one of them")

    leaf_hosts: dict[str, list[str]] = {}
    for rack, path in placed.items():
        leaf_hosts.setdefault(path[-1], []).extend(hosts_by_rack[rack])
    switches = [
        TreeSwitch(names[(depth - 1, g)], nodes=tuple(hostlist.numerically_sorted(h)))
        for g, h in sorted(leaf_hosts.items(), key=lambda item: natural_key(item[0]))
    ]
    below = sorted(leaf_hosts, key=natural_key)
    for d in range(depth - 2, -1, -1):
        groups: dict[str, list[str]] = {}
        for child in below:
            groups.setdefault(parent[(d + 1, child)], []).append(names[(d + 1, child)])
        level = depth - 1 - d
        switches += [
            TreeSwitch(names[(d, g)], children=tuple(c), level=level)
            for g, c in sorted(groups.items(), key=lambda item: natural_key(item[0]))
        ]
        below = sorted(groups, key=natural_key)
    if len(below) > 1:
        switches.append(TreeSwitch(ROOT_SWITCH, children=tuple(names[(0, g)] for g in below), level=depth))
    return TreePlan(switches=tuple(switches), racks_left_out=left_out)


def tree_holds(plan: TreePlan | None, hostnames: Iterable[str]) -> bool:
    """True when every one of these nodes is under a leaf of the tree (a partition may then use it)."""
    return plan is not None and set(hostnames) <= plan.nodes


def tree_topology(plan: TreePlan, name: str = FABRIC_TOPOLOGY, cluster_default: bool = False) -> dict:
    """The topology.yaml entry (Slurm 25.05+) of the tree: `{topology, cluster_default, tree: {switches}}`."""
    check_name("topology", name)
    switches = []
    for switch in plan.switches:
        if switch.nodes:
            switches.append({"switch": switch.name, "nodes": compress(switch.nodes)})
        else:
            switches.append({"switch": switch.name, "children": ",".join(switch.children)})
    return {"topology": name, "cluster_default": bool(cluster_default), "tree": {"switches": switches}}


def parse_tree(entry: Mapping) -> TreePlan:
    """A topology.yaml tree entry read back the way Slurm reads it, refusing what Slurm refuses or only
    warns about (see the module docstring): every node in exactly one leaf, every switch reachable from one
    root, no cycle."""
    switches = (entry.get("tree") or {}).get("switches") if isinstance(entry, Mapping) else None
    if not isinstance(switches, list) or not switches:
        raise ValueError("a tree topology needs a non-empty list of switches")
    by_name: dict[str, dict] = {}
    for number, raw in enumerate(switches, 1):
        name = raw.get("switch") if isinstance(raw, Mapping) else None
        if not isinstance(name, str) or not name:
            raise ValueError(f"switch {number} has no name")
        if len(name) > MAX_SWITCH_NAME or _SAFE.search(name):
            raise ValueError(f"switch name {name!r} is not one Slurm takes (64 characters, no ',', '[', ' ')")
        if name in by_name:
            raise ValueError(f"switch {name} is defined twice")
        if "nodes" in raw and "children" in raw:
            raise ValueError(f"switch {name} has both nodes and children")
        by_name[name] = raw
    owner: dict[str, str] = {}
    parents: dict[str, str] = {}
    out: dict[str, TreeSwitch] = {}
    for name, raw in by_name.items():
        if "nodes" in raw:
            hosts = tuple(hostlist.numerically_sorted(expand(str(raw["nodes"]))))
            for host in hosts:
                if host in owner:
                    raise ValueError(f"node {host} is under two leaf switches: {owner[host]} and {name}")
                owner[host] = name
            out[name] = TreeSwitch(name, nodes=hosts)
        else:
            children = tuple(expand(str(raw.get("children") or "")))
            if not children:
                raise ValueError(f"switch {name} has neither nodes nor children")
            for child in children:
                if child not in by_name or child == name:
                    raise ValueError(f"switch {name} has an invalid child {child}")
                if child in parents:
                    raise ValueError(f"switch {child} is under two switches: {parents[child]} and {name}")
                parents[child] = name
            out[name] = TreeSwitch(name, children=children)
    roots = [n for n in by_name if n not in parents]
    if len(roots) != 1:
        raise ValueError(f"the tree has {len(roots)} top switches ({', '.join(roots) or 'none'}), not one")
    levels: dict[str, int] = {}

    def level(name: str, trail: tuple[str, ...] = ()) -> int:
        if name in trail:
            raise ValueError(f"switch {name} is its own ancestor")
        if name not in levels:
            switch = out[name]
            levels[name] = 0 if switch.nodes else 1 + max(level(c, (*trail, name)) for c in switch.children)
        return levels[name]

    level(roots[0])
    unreachable = sorted(set(by_name) - set(levels))
    if unreachable:
        raise ValueError(f"switches not reachable from {roots[0]}: {', '.join(unreachable)}")
    if levels[roots[0]] + 1 > MAX_TREE_LEVELS:
        raise ValueError(f"the tree has {levels[roots[0]] + 1} levels, more than {MAX_TREE_LEVELS}")
    return TreePlan(
        switches=tuple(
            TreeSwitch(s.name, s.nodes, s.children, levels[s.name])
            for s in sorted(out.values(), key=lambda s: (levels[s.name], list(by_name).index(s.name)))
        )
    )


def parse_show_tree(text: str) -> list[dict]:
    """`scontrol show topology <tree topology>`: one `SwitchName=... Level=... LinkSpeed=... [Nodes=...]
    [Switches=...]` line per switch (src/plugins/topology/tree/topology_tree.c, `_print_topo_record`)."""
    result = []
    for number, line, fields in key_value_lines(text):
        if "SwitchName" not in fields:
            raise ValueError(f"line {number} of scontrol show topology is not a switch line: {line!r}")
        nodes = fields.get("Nodes", "")
        children = fields.get("Switches", "")
        result.append(
            {
                "name": fields["SwitchName"],
                "level": int(fields["Level"]) if fields.get("Level", "").isdigit() else None,
                "hostnames": expand(nodes) if nodes and nodes != "(null)" else [],
                "children": expand(children) if children and children != "(null)" else [],
            }
        )
    return result


def compare_tree(plan: TreePlan, shown: Sequence[dict]) -> list[str]:
    """Differences between the planned tree and parsed `scontrol show topology` output (empty: they agree).
    A switch's nodes are compared for leaves (Slurm also prints the nodes below an upper switch)."""
    problems = []
    want = {s.name: s for s in plan.switches}
    have = {s["name"]: s for s in shown}
    problems += [f"switch {n} is missing" for n in sorted(set(want) - set(have), key=natural_key)]
    problems += [f"switch {n} is not in the plan" for n in sorted(set(have) - set(want), key=natural_key)]
    for name in sorted(set(want) & set(have), key=natural_key):
        planned, live = want[name], have[name]
        if planned.nodes and set(live["hostnames"]) != set(planned.nodes):
            problems.append(
                f"switch {name}: nodes {compress(live['hostnames']) if live['hostnames'] else 'none'}"
            )
        if planned.children and set(live["children"]) != set(planned.children):
            problems.append(f"switch {name}: switches {','.join(live['children']) or 'none'}")
        if live["level"] is not None and live["level"] != planned.level:
            problems.append(f"switch {name}: level {live['level']}, planned {planned.level}")
    return problems
