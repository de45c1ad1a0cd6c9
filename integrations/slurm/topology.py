"""Slurm topology from NVLink partitions: how the blocks of topology/block are laid out (`plan_topology`), and
`scontrol show topology` and topology.conf read back (`parse_show_topology`, `parse_topology_conf`,
`compare_topology`), so the adapter (`target.py`) can check what the controller really loaded. Pure
functions, no Django, no I/O; the files themselves are written by render.py.

How NVLink partitions become Slurm 24.11 blocks (topology/block; rules read in Slurm 24.11.5's
src/plugins/topology/block/block_record.c, `_read_topo_file` and `block_record_validate`, and confirmed on
the testbed, scripts/slurm-testbed.sh):

* `BlockSizes` counts nodes. Its first value is the *base block size*; every value must be the base times a
  power of two (2**0 .. 2**15: `MAX_BLOCK_LEVELS` is 16), otherwise slurmctld stops with "Invalid
  BlockSizes value". The values are levels in a bit set, so their order after the first does not matter to
  Slurm; Rackplane writes them ascending (each a power-of-two multiple of the one before).
* Without `BlockSizes` the base is the node count of the first block and levels 1, 2, 4, 8, 16 (base blocks)
  are implied; Rackplane always writes `BlockSizes` so nothing depends on file order by accident.
* Every block must have at least the base size of nodes ("Block configuration (X) children count lower
  than bblock_node_cnt", fatal in 24.11; 25.05 allows smaller blocks). A block *larger* than the base is
  accepted but counted as one base block (`scontrol show topology` prints `BlockSize=<base>` for it), so a
  job of more than base nodes would not be kept inside it.
* Level k (base * 2**k nodes) aggregates 2**k *consecutive blocks in file order*, aligned on multiples of
  2**k, whatever their node counts. A trailing short group is kept only when it has more blocks than the
  previous configured level. Levels at or beyond the one that covers every block are ignored.
* Node names Slurm does not know are only warned about, and nodes outside every block are allowed (they are
  just unreachable for topology-aware jobs): the renderer checks names itself.

So Rackplane renders, for Slurm 24.11:

* base = the smallest NVLink partition (node count);
* a partition of base * 2**k nodes (k > 0) is written as 2**k blocks of base nodes named `<name>-1..`,
  placed so that level k aggregates exactly them: a job of up to base * 2**k nodes then stays in that
  NVLink partition. A partition whose size is not base * 2**k cannot be expressed in 24.11: ValueError;
* blocks are ordered by NVLink domain (rack), then largest partition first (keeps the split ones aligned),
  then by name (natural order);
* one more level for the NVLink domain (the rack) when every domain has the same number of blocks and
  Slurm's aggregation then groups exactly each rack: jobs larger than a partition prefer one rack. No level
  ever groups two racks (Rackplane does not know the network between racks);
* levels that would only group blocks by file order (pairs inside a rack of three partitions, say) are left
  out: with them Slurm would refuse to combine, e.g., partitions 2 and 3 of a rack.

For 25.05+ (`topology.yaml`), blocks may be smaller than the base, so the base is the *largest* partition
and no block is split: a job of up to one partition's size is kept in one partition.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import hostlist

from core.blocks import (
    MAX_BLOCK_LEVELS,
    BlockPartition,
    block_layout,
    check_block_sizes,
    natural_key,
    slurm_aggregates,
)

__all__ = [
    "MAX_BLOCK_LEVELS",
    "PlannedBlock",
    "SlurmBlock",
    "TopologyPlan",
    "check_block_sizes",
    "check_blocks",
    "check_name",
    "compare_topology",
    "compress",
    "compress_block",
    "expand",
    "natural_key",
    "order_blocks",
    "parse_show_topology",
    "parse_topology_conf",
    "plan_topology",
    "slurm_aggregates",
]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")
HOSTNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*\Z")


@dataclass(frozen=True)
class SlurmBlock:
    """One NVLink partition as a topology/block block.

    `name` is the Slurm block name (e.g. `r01p1`, unique in the cluster); `domain` the NVLink domain (rack)
    it is carved from; `hostnames` its compute trays.
    """

    name: str
    domain: str
    hostnames: tuple[str, ...]

    def __post_init__(self):
        object.__setattr__(self, "hostnames", tuple(self.hostnames))


@dataclass(frozen=True)
class PlannedBlock:
    """A block as slurmctld will report it: base blocks and aggregated blocks."""

    name: str
    hostnames: frozenset[str]
    size: int
    aggregated: bool = False
    partition: str = ""  # the NVLink partition a base block belongs to (== name unless split)


@dataclass(frozen=True)
class TopologyPlan:
    """What `render_topology_conf` writes and what `scontrol show topology` should then print."""

    blocks: tuple[tuple[str, tuple[str, ...], str], ...]  # (slurm block name, hostnames, partition)
    block_sizes: tuple[int, ...]
    # What `scontrol show topology` should list (`expected`): given, or made from the aggregated blocks'
    # groups when first asked (at 10,000 racks the aggregates hold 180,000 hostnames per level: a render
    # that only writes the file never needs them).
    given: tuple[PlannedBlock, ...] | None = None
    groups: tuple[tuple[int, tuple[int, ...]], ...] = ()

    @functools.cached_property
    def expected(self) -> tuple[PlannedBlock, ...]:
        if self.given is not None:
            return self.given
        return _expected_blocks(self.blocks, self.block_sizes[0], self.groups)

    @property
    def base(self) -> int:
        return self.block_sizes[0]


# --- helpers ------------------------------------------------------------------------------------------


def compress(hostnames: Iterable[str]) -> str:
    """Slurm's compressed hostlist form (`gb-r01-t[01-09]`), sorted numerically."""
    names = list(hostnames)
    if not names:
        raise ValueError("an empty host list has no Slurm form")
    return hostlist.collect_hostlist(names)


@functools.lru_cache(maxsize=1 << 17)
def compress_block(hostnames: tuple[str, ...]) -> str:
    """`compress` of one topology block's hosts (one partition of one rack) or one Slurm partition's, kept by
    content: a fleet's topology file is assembled from its blocks' lines, each compressed again only when
    its hosts changed (issue 32: a one-rack re-carve at 10,000 racks)."""
    return compress(hostnames)


def expand(expression: str) -> list[str]:
    return hostlist.expand_hostlist(expression)


def check_name(kind: str, name: str) -> None:
    if not _NAME.match(name or ""):
        raise ValueError(
            f"{kind} name {name!r} is not a valid Slurm name (letters, digits, '.', '_', '-'; no spaces)"
        )


def check_blocks(blocks: Sequence[SlurmBlock]) -> None:
    """ValueError, naming the first fault in the blocks' order, for what slurmctld would refuse: a bad or
    repeated block name, a block without a rack or nodes, a bad node name, a node listed twice in a block or
    in two blocks. Each block's own hosts are checked by content (`_host_faults`, kept); whether any node is
    listed twice at all is one set of every host (180,000 at 10,000 racks), and only when one is does the
    walk host by host that names it run (the same first fault either way)."""
    if not blocks:
        raise ValueError("no NVLink partitions: topology/block needs at least one block")
    hosts = list(itertools.chain.from_iterable(block.hostnames for block in blocks))
    shared = len(set(hosts)) != len(hosts)
    seen_names: set[str] = set()
    owner: dict[str, str] = {}
    for block in blocks:
        check_name("block", block.name)
        if not block.domain:
            raise ValueError(f"block {block.name} has no NVLink domain (rack)")
        if block.name in seen_names:
            raise ValueError(f"block name {block.name} is used twice")
        seen_names.add(block.name)
        if not block.hostnames:
            raise ValueError(f"block {block.name} has no nodes (Slurm: 'lacks children')")
        invalid, repeated = _host_faults(block.hostnames)
        if not shared:
            if invalid is not None:
                raise ValueError(f"block {block.name}: {block.hostnames[invalid]!r} is not a valid node name")
            continue
        for position, host in enumerate(block.hostnames):
            if position == invalid:
                raise ValueError(f"block {block.name}: {host!r} is not a valid node name")
            if host in owner and owner[host] != block.name:
                raise ValueError(f"node {host} is in two blocks: {owner[host]} and {block.name}")
            owner[host] = block.name
        if repeated:
            raise ValueError(f"block {block.name} lists a node twice")


@functools.lru_cache(maxsize=1 << 16)
def _host_faults(hostnames: tuple[str, ...]) -> tuple[int | None, bool]:
    """(position of the first host that is not a valid node name or None, whether one is listed twice) of a
    block's hosts, kept by content: a fleet's 20,000 blocks are checked again at every render, and only a
    re-carved rack's have changed (issue 32)."""
    invalid = next((i for i, host in enumerate(hostnames) if not HOSTNAME.match(host)), None)
    return invalid, len(set(hostnames)) != len(hostnames)


@functools.lru_cache(maxsize=1 << 16)
def _sorted_hosts(hostnames: tuple[str, ...]) -> tuple[str, ...]:
    """A block's hosts in hostlist's numeric order, kept by content (`_host_faults`)."""
    return tuple(hostlist.numerically_sorted(list(hostnames)))


def order_blocks(blocks: Sequence[SlurmBlock], key_size) -> list[SlurmBlock]:
    return sorted(blocks, key=lambda b: (natural_key(b.domain), -key_size(b), natural_key(b.name)))


def _split_name(name: str, part: int) -> str:
    return f"{name}-{part}"


def _expected_blocks(rows, base: int, groups) -> tuple[PlannedBlock, ...]:
    """What `scontrol show topology` should list: each base block, then Slurm's aggregated ones."""
    expected = [PlannedBlock(name=r[0], hostnames=frozenset(r[1]), size=base, partition=r[2]) for r in rows]
    for level, members in sorted(groups, key=lambda g: g[0]):
        expected.append(
            PlannedBlock(
                name=compress(rows[i][0] for i in members),
                hostnames=frozenset(h for i in members for h in rows[i][1]),
                size=base << level,
                aggregated=True,
            )
        )
    return tuple(expected)


def plan_topology(blocks: Sequence[SlurmBlock]) -> TopologyPlan:
    """The Slurm 24.11 block layout for these NVLink partitions (see the module docstring for the rules,
    which live in core/blocks.py: one rule for this renderer, the wizard and the scheduler's re-carving)."""
    check_blocks(blocks)
    layout = block_layout([BlockPartition(b.domain, b.name, len(b.hostnames)) for b in blocks])
    base = layout.base
    rows: list[tuple[str, tuple[str, ...], str]] = []  # name, hosts, partition
    for index, part in layout.rows:
        block = blocks[index]
        hosts = _sorted_hosts(block.hostnames)
        if part == 0:
            rows.append((block.name, tuple(hosts), block.name))
        else:
            chunk = tuple(hosts[(part - 1) * base : part * base])
            rows.append((_split_name(block.name, part), chunk, block.name))
    names = [r[0] for r in rows]
    if len(set(names)) != len(names):
        raise ValueError("splitting a large partition gave a block name that is already taken: rename blocks")
    check_block_sizes(layout.block_sizes, [len(r[1]) for r in rows])
    return TopologyPlan(
        blocks=tuple(rows),
        block_sizes=layout.block_sizes,
        groups=tuple((level, tuple(members)) for level, members in layout.groups),
    )


# --- parsing ------------------------------------------------------------------------------------------

PAIR = re.compile(r"(\w+)=(\S*)")


def key_value_lines(text: str):
    """(line number, line, its Key=value fields) of each non-blank line of scontrol's output."""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line:
            yield number, line, dict(PAIR.findall(line))


def parse_show_topology(text: str) -> list[dict]:
    """Parse `scontrol show topology` of topology/block.

    Each `BlockName=...` / `AggregatedBlock=...` line becomes {"name", "index", "nodes" (as printed),
    "hostnames" (expanded, sorted), "size", "aggregated"}. Blank lines are skipped; any other line is an
    error (the output is not what this parser knows, e.g. another topology plugin).
    """
    result = []
    for number, line, fields in key_value_lines(text):
        if "BlockName" in fields:
            name, aggregated = fields["BlockName"], False
        elif "AggregatedBlock" in fields:
            name, aggregated = fields["AggregatedBlock"], True
        else:
            raise ValueError(f"line {number} of scontrol show topology is not a block line: {line!r}")
        nodes = fields.get("Nodes", "")
        try:
            hosts = hostlist.numerically_sorted(expand(nodes)) if nodes and nodes != "(null)" else []
        except hostlist.BadHostlist as error:
            raise ValueError(f"line {number}: bad node list {nodes!r}: {error}") from error
        result.append(
            {
                "name": name,
                "index": int(fields["BlockIndex"]) if "BlockIndex" in fields else None,
                "nodes": nodes,
                "hostnames": hosts,
                "size": int(fields["BlockSize"]) if fields.get("BlockSize", "").isdigit() else None,
                "aggregated": aggregated,
            }
        )
    return result


def compare_topology(plan: TopologyPlan, shown: Sequence[dict]) -> list[str]:
    """Differences between the plan and parsed `scontrol show topology` output (empty: they agree)."""
    problems = []
    want = {(b.aggregated, b.name): b for b in plan.expected}
    have = {(bool(s["aggregated"]), s["name"]): s for s in shown}
    for key in sorted(set(want) - set(have)):
        problems.append(f"{'aggregated block' if key[0] else 'block'} {key[1]} is missing")
    for key in sorted(set(have) - set(want)):
        problems.append(f"{'aggregated block' if key[0] else 'block'} {key[1]} is not in the plan")
    for key in sorted(set(want) & set(have)):
        planned, live = want[key], have[key]
        if set(live["hostnames"]) != planned.hostnames:
            problems.append(f"block {key[1]}: nodes {live['nodes']}, planned {compress(planned.hostnames)}")
        if live["size"] is not None and live["size"] != planned.size:
            problems.append(f"block {key[1]}: BlockSize={live['size']}, planned {planned.size}")
    return problems


def parse_topology_conf(text: str) -> TopologyPlan:
    """Read a topology.conf back into the plan Slurm 24.11 will make of it (blocks, BlockSizes, aggregates).

    Follows Slurm's reading: BlockSizes absent means base = the first block's node count and levels 1..16
    base blocks. Raises ValueError for what slurmctld would refuse.
    """
    rows: list[tuple[str, tuple[str, ...], str]] = []
    sizes_text = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = dict(PAIR.findall(line))
        key = line.split("=", 1)[0].lower()
        if key == "blockname":
            name = line.split("=", 1)[1].split()[0]
            nodes = next((v for k, v in fields.items() if k.lower() == "nodes"), "")
            if not nodes:
                raise ValueError(f"line {number}: block {name} has no Nodes=")
            rows.append((name, tuple(hostlist.numerically_sorted(expand(nodes))), name))
        elif key == "blocksizes":
            sizes_text = line.split("=", 1)[1].strip()
        else:
            raise ValueError(f"line {number}: unknown topology.conf line {line!r}")
    if not rows:
        raise ValueError("topology.conf has no BlockName lines")
    if len({r[0] for r in rows}) != len(rows):
        raise ValueError("topology.conf names a block twice")
    if sizes_text is None:
        base = len(rows[0][1])
        levels = [0, 1, 2, 3, 4]
    else:
        try:
            values = [int(v) for v in sizes_text.split(",")]
        except ValueError:
            raise ValueError(f"BlockSizes={sizes_text} is not a list of numbers") from None
        check_block_sizes(values, [len(r[1]) for r in rows])
        base = values[0]
        levels = [(v // base).bit_length() - 1 for v in values]
    check_block_sizes([base], [len(r[1]) for r in rows])
    kept, groups = slurm_aggregates(len(rows), levels)
    return TopologyPlan(
        blocks=tuple(rows),
        block_sizes=tuple(base << lv for lv in kept),
        groups=tuple((level, tuple(members)) for level, members in groups),
    )
