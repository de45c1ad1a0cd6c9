"""Slurm configuration from Rackplane's state: pure functions, no Django, no I/O.

Inputs are the small dataclasses below (built from the inventory by the caller); outputs are the exact text
of the files slurmctld reads (`topology.conf`, `topology.yaml`, `rackplane.conf`) and a parser for
`scontrol show topology`, so the adapter (`target.py`) can check what the controller really loaded.

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

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import hostlist
import yaml

MAX_BLOCK_LEVELS = 16  # Slurm 24.11 block_record.h: levels 0..15
MANAGED_HEADER = "# Managed by Rackplane (scheduling/backends/slurm). Changes made here are overwritten."

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_HOSTNAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*\Z")
_FEATURE = re.compile(r"^[A-Za-z0-9_.-]+\Z")
# NodeHostName / NodeAddr: a host name or an IP address (IPv6 may start with ':'); `\Z`, not `$`, which
# would let a trailing newline through and start a new line of slurm.conf.
_ADDRESS = re.compile(r"^[A-Za-z0-9:][A-Za-z0-9.:-]*\Z")


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
class SlurmNode:
    """One compute tray as a Slurm node.

    `address`, `node_hostname` and `port` are for sites (and the testbed) where slurmd is not reached at the
    node's own name on the default port; leave them empty otherwise.
    """

    hostname: str
    gpus: int = 4
    cpus: int = 144
    memory_mb: int = 0
    features: tuple[str, ...] = ()
    address: str = ""
    node_hostname: str = ""
    port: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "features", tuple(sorted(set(self.features))))


@dataclass(frozen=True)
class ServiceTier:
    """A service tier, rendered as one Slurm partition.

    `qos` is the partition QOS (its limits); `allow_qos` restricts which job QOS (departments) may submit
    (empty: all); `max_time_minutes` None means no limit.
    """

    name: str
    hostnames: tuple[str, ...]
    qos: str = ""
    default: bool = False
    allow_qos: tuple[str, ...] = ()
    max_time_minutes: int | None = None
    priority_tier: int = 1
    exclusive: bool = True

    def __post_init__(self):
        object.__setattr__(self, "hostnames", tuple(self.hostnames))
        object.__setattr__(self, "allow_qos", tuple(sorted(set(self.allow_qos))))


@dataclass(frozen=True)
class DepartmentQos:
    """A department's QOS: `gpu_limit` is its GrpTRES gres/gpu limit (None: no limit)."""

    name: str
    gpu_limit: int | None = None


@dataclass(frozen=True)
class SlurmAccount:
    """One account of the account tree (needs slurmdbd): a department's (parent `root`) or a project's (its
    department's account as parent). `gpu_limit` is its GrpTRES gres/gpu limit (None: no limit)."""

    name: str
    parent: str = "root"
    gpu_limit: int | None = None


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
    expected: tuple[PlannedBlock, ...] = field(default=())

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


def expand(expression: str) -> list[str]:
    return hostlist.expand_hostlist(expression)


def _natural(name: str):
    return hostlist.numeric_sort_key(name)


def _check_name(kind: str, name: str) -> None:
    if not _NAME.match(name or ""):
        raise ValueError(
            f"{kind} name {name!r} is not a valid Slurm name (letters, digits, '.', '_', '-'; no spaces)"
        )


def _check_blocks(blocks: Sequence[SlurmBlock]) -> None:
    if not blocks:
        raise ValueError("no NVLink partitions: topology/block needs at least one block")
    seen_names: set[str] = set()
    owner: dict[str, str] = {}
    for block in blocks:
        _check_name("block", block.name)
        if not block.domain:
            raise ValueError(f"block {block.name} has no NVLink domain (rack)")
        if block.name in seen_names:
            raise ValueError(f"block name {block.name} is used twice")
        seen_names.add(block.name)
        if not block.hostnames:
            raise ValueError(f"block {block.name} has no nodes (Slurm: 'lacks children')")
        for host in block.hostnames:
            if not _HOSTNAME.match(host):
                raise ValueError(f"block {block.name}: {host!r} is not a valid node name")
            if host in owner and owner[host] != block.name:
                raise ValueError(f"node {host} is in two blocks: {owner[host]} and {block.name}")
            owner[host] = block.name
        if len(set(block.hostnames)) != len(block.hostnames):
            raise ValueError(f"block {block.name} lists a node twice")


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def check_block_sizes(block_sizes: Sequence[int], block_node_counts: Sequence[int]) -> None:
    """Raise ValueError where Slurm 24.11's topology/block would refuse `BlockSizes` for these blocks."""
    if not block_sizes:
        raise ValueError("BlockSizes is empty")
    base = block_sizes[0]
    for size in block_sizes:
        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"BlockSizes value {size!r} is not a positive integer")
        if size % base:
            raise ValueError(f"BlockSizes value {size} is not a multiple of the base block size {base}")
        multiple = size // base
        if not _is_power_of_two(multiple):
            raise ValueError(
                f"BlockSizes value {size} is {multiple} x the base {base}: "
                "Slurm needs a power-of-two multiple"
            )
        if multiple.bit_length() - 1 >= MAX_BLOCK_LEVELS:
            raise ValueError(
                f"BlockSizes value {size} is 2**{multiple.bit_length() - 1} x the base: Slurm 24.11 allows "
                f"at most {MAX_BLOCK_LEVELS} levels (up to 2**{MAX_BLOCK_LEVELS - 1} base blocks)"
            )
    small = [n for n in block_node_counts if n < base]
    if small:
        raise ValueError(
            f"a block has {min(small)} nodes, fewer than the base block size {base}: Slurm 24.11 refuses "
            "blocks smaller than the first BlockSizes value (25.05 and later allow them)"
        )


def slurm_aggregates(
    block_count: int, levels: Sequence[int]
) -> tuple[list[int], list[tuple[int, list[int]]]]:
    """The levels Slurm 24.11 keeps and the aggregated blocks it forms, as block indexes.

    Mirrors `block_record_validate`: levels (exponents, base blocks = 2**level) are taken in increasing
    order up to the first that covers every block; level j groups blocks i .. i + 2**level - 1 for i a
    multiple of 2**level, and drops a trailing group no larger than the previous kept level.
    """
    kept: list[int] = []
    for level in sorted(set(levels)):
        kept.append(level)
        if (1 << level) >= block_count:
            break
    sizes = [1 << level for level in kept]
    groups: list[tuple[int, list[int]]] = []
    for j in range(1, len(sizes)):
        for start in range(0, block_count, sizes[j]):
            remaining = block_count - start
            if sizes[j] > remaining and sizes[j - 1] >= remaining:
                continue
            groups.append((kept[j], list(range(start, min(start + sizes[j], block_count)))))
    return kept, groups


def _order_blocks(blocks: Sequence[SlurmBlock], key_size) -> list[SlurmBlock]:
    return sorted(blocks, key=lambda b: (_natural(b.domain), -key_size(b), _natural(b.name)))


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
    """The Slurm 24.11 block layout for these NVLink partitions (see the module docstring for the rules)."""
    _check_blocks(blocks)
    base = min(len(b.hostnames) for b in blocks)
    for block in blocks:
        count = len(block.hostnames)
        if count % base or not _is_power_of_two(count // base):
            raise ValueError(
                f"Slurm 24.11 cannot express NVLink partition {block.name} ({count} nodes) next to a "
                f"partition of {base} nodes: a block larger than the base block size is only kept whole "
                "when it is the base times a power of two (Slurm aggregates 2, 4, 8... base blocks), and "
                "blocks smaller than the base are refused. Carve the racks so that every partition is the "
                "smallest one times a power of two, or use Slurm 25.05+ (topology.yaml), where blocks may "
                "be smaller than the base."
            )
        if (count // base).bit_length() - 1 >= MAX_BLOCK_LEVELS:
            raise ValueError(f"NVLink partition {block.name} needs more than {MAX_BLOCK_LEVELS} block levels")

    ordered = _order_blocks(blocks, lambda b: len(b.hostnames))
    rows: list[tuple[str, tuple[str, ...], str, str]] = []  # name, hosts, partition, domain
    for block in ordered:
        hosts = hostlist.numerically_sorted(list(block.hostnames))
        parts = len(hosts) // base
        if parts == 1:
            rows.append((block.name, tuple(hosts), block.name, block.domain))
        else:
            for part in range(parts):
                chunk = tuple(hosts[part * base : (part + 1) * base])
                rows.append((_split_name(block.name, part + 1), chunk, block.name, block.domain))
    names = [r[0] for r in rows]
    if len(set(names)) != len(names):
        raise ValueError("splitting a large partition gave a block name that is already taken: rename blocks")

    # Levels that keep a split partition whole.
    levels = {0}
    for block in blocks:
        parts = len(block.hostnames) // base
        if parts > 1:
            levels.add(parts.bit_length() - 1)

    def groups_ok(candidate: set[int]) -> tuple[bool, str]:
        kept, groups = slurm_aggregates(len(rows), sorted(candidate))
        for level, members in groups:
            domains = {rows[i][3] for i in members}
            if len(domains) > 1:
                return (
                    False,
                    f"level {base << level} would group blocks of racks {', '.join(sorted(domains))}",
                )
        for block in blocks:
            parts = len(block.hostnames) // base
            if parts == 1:
                continue
            level = parts.bit_length() - 1
            whole = [m for lvl, m in groups if lvl == level and {rows[i][2] for i in m} == {block.name}]
            if level not in kept or not whole:
                return False, f"partition {block.name} would not be one aggregated block of {base << level}"
        return True, ""

    ok, why = groups_ok(levels)
    if not ok:
        raise ValueError(
            f"Slurm 24.11 cannot express these NVLink partitions: {why}. Slurm groups consecutive blocks "
            "by count, not by rack; carve the racks alike (same partition sizes in every rack) or use Slurm "
            "25.05+ (topology.yaml)."
        )

    # The NVLink domain (rack) level, when Slurm would group exactly each rack.
    per_domain: dict[str, int] = {}
    for row in rows:
        per_domain[row[3]] = per_domain.get(row[3], 0) + 1
    counts = set(per_domain.values())
    if len(counts) == 1:
        count = counts.pop()
        if count > 1:
            rack_level = (count - 1).bit_length()  # ceil(log2(count))
            candidate = levels | {rack_level}
            if rack_level < MAX_BLOCK_LEVELS and groups_ok(candidate)[0]:
                _, groups = slurm_aggregates(len(rows), sorted(candidate))
                rack_groups = [set(m) for lvl, m in groups if lvl == rack_level]
                spans = [
                    {i for i, r in enumerate(rows) if r[3] == d} for d in sorted(per_domain, key=_natural)
                ]
                if all(span in rack_groups for span in spans):
                    levels = candidate

    kept, groups = slurm_aggregates(len(rows), sorted(levels))
    block_sizes = tuple(base << level for level in kept)
    check_block_sizes(block_sizes, [len(r[1]) for r in rows])

    return TopologyPlan(
        blocks=tuple((r[0], r[1], r[2]) for r in rows),
        block_sizes=block_sizes,
        expected=_expected_blocks(rows, base, groups),
    )


# --- renderers ----------------------------------------------------------------------------------------


def render_topology_conf(blocks: Sequence[SlurmBlock]) -> str:
    """topology.conf for Slurm 24.11's topology/block: one BlockName line per block, then BlockSizes."""
    plan = plan_topology(blocks)
    lines = [MANAGED_HEADER]
    lines += [f"BlockName={name} Nodes={compress(hosts)}" for name, hosts, _ in plan.blocks]
    lines.append("BlockSizes=" + ",".join(str(s) for s in plan.block_sizes))
    return "\n".join(lines) + "\n"


def render_topology_yaml(
    blocks: Sequence[SlurmBlock], cluster_default: bool = True, name: str = "nvlink"
) -> str:
    """topology.yaml (Slurm 25.05+): one block topology; base = the largest partition, nothing split."""
    _check_blocks(blocks)
    _check_name("topology", name)
    base = max(len(b.hostnames) for b in blocks)
    ordered = _order_blocks(blocks, lambda b: len(b.hostnames))
    levels = [0]
    per_domain: dict[str, list[int]] = {}
    for i, block in enumerate(ordered):
        per_domain.setdefault(block.domain, []).append(i)
    counts = {len(v) for v in per_domain.values()}
    if len(counts) == 1 and (count := counts.pop()) > 1:
        rack_level = (count - 1).bit_length()
        kept, groups = slurm_aggregates(len(ordered), [0, rack_level])
        if rack_level in kept and all(
            any(set(members) == set(span) for lvl, members in groups if lvl == rack_level)
            for span in per_domain.values()
        ):
            levels.append(rack_level)
    document = [
        {
            "topology": name,
            "cluster_default": bool(cluster_default),
            "block": {
                "block_sizes": [base << level for level in levels],
                "blocks": [{"block": b.name, "nodes": compress(b.hostnames)} for b in ordered],
            },
        }
    ]
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def _node_attrs(node: SlurmNode) -> tuple:
    return (node.node_hostname, node.address, node.cpus, node.memory_mb, node.gpus, node.features)


def render_node_lines(nodes: Sequence[SlurmNode]) -> list[str]:
    """NodeName lines, one per run of nodes with equal attributes (and consecutive ports, if any)."""
    if not nodes:
        raise ValueError("no nodes to render")
    by_name: dict[str, SlurmNode] = {}
    for node in nodes:
        if not _HOSTNAME.match(node.hostname):
            raise ValueError(f"{node.hostname!r} is not a valid node name")
        if node.hostname in by_name:
            raise ValueError(f"node {node.hostname} is listed twice")
        if node.gpus < 0 or node.cpus < 1 or node.memory_mb < 0:
            raise ValueError(f"node {node.hostname}: gpus, cpus and memory must be positive")
        for feature in node.features:
            if not _FEATURE.match(feature):
                raise ValueError(f"node {node.hostname}: feature {feature!r} is not a valid Slurm feature")
        for key, value in (("NodeHostName", node.node_hostname), ("NodeAddr", node.address)):
            if value and not _ADDRESS.match(value):
                raise ValueError(f"node {node.hostname}: {key} {value!r} is not a host name or an IP address")
        by_name[node.hostname] = node

    # Group by attributes; inside a group, hostlist order, split where the port does not follow on.
    groups: dict[tuple, list[SlurmNode]] = {}
    for name in hostlist.numerically_sorted(list(by_name)):
        groups.setdefault(_node_attrs(by_name[name]), []).append(by_name[name])
    runs: list[list[SlurmNode]] = []
    for members in groups.values():
        run: list[SlurmNode] = []
        for node in members:
            follows = bool(run) and (
                (node.port is None and run[-1].port is None)
                or (node.port is not None and run[-1].port is not None and node.port == run[-1].port + 1)
            )
            if run and not follows:
                runs.append(run)
                run = []
            run.append(node)
        runs.append(run)
    runs.sort(key=lambda r: _natural(r[0].hostname))

    lines = []
    for run in runs:
        first = run[0]
        parts = [f"NodeName={compress(n.hostname for n in run)}"]
        if first.node_hostname:
            parts.append(f"NodeHostName={first.node_hostname}")
        if first.address:
            parts.append(f"NodeAddr={first.address}")
        if first.port is not None:
            ports = f"[{first.port}-{run[-1].port}]" if len(run) > 1 else str(first.port)
            parts.append(f"Port={ports}")
        parts.append(f"CPUs={first.cpus}")
        if first.memory_mb:
            parts.append(f"RealMemory={first.memory_mb}")
        if first.gpus:
            parts.append(f"Gres=gpu:{first.gpus}")
        if first.features:
            parts.append("Features=" + ",".join(first.features))
        parts.append("State=UNKNOWN")
        lines.append(" ".join(parts))
    return lines


def render_partition_lines(
    tiers: Sequence[ServiceTier], known_nodes: Iterable[str] | None = None
) -> list[str]:
    """PartitionName lines, in the order given (Slurm lists partitions in file order)."""
    known = set(known_nodes) if known_nodes is not None else None
    names: set[str] = set()
    defaults = [t.name for t in tiers if t.default]
    if len(defaults) > 1:
        raise ValueError(f"only one partition can be the default, not {', '.join(defaults)}")
    lines = []
    for tier in tiers:
        _check_name("partition", tier.name)
        if tier.name in names:
            raise ValueError(f"partition {tier.name} is listed twice")
        names.add(tier.name)
        if tier.name.upper() == "DEFAULT":
            raise ValueError(
                "'DEFAULT' is Slurm's keyword for default partition options, not a partition name"
            )
        if not tier.hostnames:
            raise ValueError(f"partition {tier.name} has no nodes")
        if known is not None:
            unknown = sorted(set(tier.hostnames) - known)
            if unknown:
                raise ValueError(
                    f"partition {tier.name} names nodes that are not defined: {compress(unknown)}"
                )
        if tier.qos:
            _check_name("QOS", tier.qos)
        for qos in tier.allow_qos:  # every entry: an empty one would render "AllowQos=", a broken token
            _check_name("QOS", qos)
        parts = [f"PartitionName={tier.name}", f"Nodes={compress(tier.hostnames)}"]
        parts.append(f"Default={'YES' if tier.default else 'NO'}")
        if tier.qos:
            parts.append(f"QOS={tier.qos}")
        if tier.allow_qos:
            parts.append("AllowQos=" + ",".join(tier.allow_qos))
        if tier.max_time_minutes is not None:
            if tier.max_time_minutes < 1:
                raise ValueError(f"partition {tier.name}: max time must be at least one minute")
            parts.append(f"MaxTime={tier.max_time_minutes}")
        else:
            parts.append("MaxTime=INFINITE")
        parts.append(f"PriorityTier={tier.priority_tier}")
        parts.append(f"OverSubscribe={'EXCLUSIVE' if tier.exclusive else 'NO'}")
        parts.append("State=UP")
        lines.append(" ".join(parts))
    return lines


def render_rackplane_conf(nodes: Sequence[SlurmNode], tiers: Sequence[ServiceTier]) -> str:
    """The file slurm.conf includes (`Include rackplane.conf`): Rackplane's NodeName and PartitionName lines.

    Nodes: compressed where they share attributes, `Gres=gpu:N` (GresTypes=gpu and gres.conf are the
    site's), `State=UNKNOWN` so slurmd registration decides. Partitions (service tiers): `Nodes=`, `QOS=`
    (the tier's limits), `AllowQos=` (departments allowed, when set), `Default=YES/NO` (at most one YES),
    `MaxTime=`, `PriorityTier=`, `OverSubscribe=EXCLUSIVE` (whole trays: a job gets all 4 GPUs of a node,
    never shares it; MNNVL jobs need that) and `State=UP`.
    """
    node_lines = render_node_lines(nodes)
    part_lines = render_partition_lines(tiers, known_nodes=[n.hostname for n in nodes])
    return "\n".join([MANAGED_HEADER, *node_lines, *part_lines]) + "\n"


def sacctmgr_qos_commands(qos: DepartmentQos) -> list[list[str]]:
    """sacctmgr arguments that create the QOS (if missing) and set its GPU limit (-1 clears it)."""
    _check_name("QOS", qos.name)
    if qos.gpu_limit is not None and qos.gpu_limit < 0:
        raise ValueError(f"QOS {qos.name}: the GPU limit must be >= 0 or None")
    limit = "-1" if qos.gpu_limit is None else str(qos.gpu_limit)
    return [
        ["-i", "add", "qos", qos.name],
        ["-i", "modify", "qos", "where", f"name={qos.name}", "set", f"GrpTRES=gres/gpu={limit}"],
    ]


def sacctmgr_account_commands(accounts: Sequence[SlurmAccount]) -> list[list[str]]:
    """sacctmgr arguments that build the account tree: each account added under its parent (parents first;
    `-i add` of an existing account changes nothing) and its GPU limit set (`-1` clears it), e.g.
    `-i add account research-vision parent=research` then
    `-i modify account name=research-vision set GrpTRES=gres/gpu=48`."""
    names = {a.name for a in accounts}
    for account in accounts:
        _check_name("account", account.name)
        _check_name("account", account.parent)
        if account.parent != "root" and account.parent not in names:
            raise ValueError(f"account {account.name}: its parent {account.parent} is not in the tree")
        if account.gpu_limit is not None and account.gpu_limit < 0:
            raise ValueError(f"account {account.name}: the GPU limit must be >= 0 or None")
    if len(names) != len(accounts):
        raise ValueError("an account is listed twice")
    depth = {}

    def level(account: SlurmAccount) -> int:
        if account.name not in depth:
            parent = next((a for a in accounts if a.name == account.parent), None)
            depth[account.name] = 0 if parent is None else level(parent) + 1
        return depth[account.name]

    commands = []
    for account in sorted(accounts, key=lambda a: (level(a), a.name)):
        commands.append(["-i", "add", "account", account.name, f"parent={account.parent}"])
    for account in sorted(accounts, key=lambda a: (level(a), a.name)):
        limit = "-1" if account.gpu_limit is None else str(account.gpu_limit)
        commands.append(
            ["-i", "modify", "account", f"name={account.name}", "set", f"GrpTRES=gres/gpu={limit}"]
        )
    return commands


def render_account_script(accounts: Sequence[SlurmAccount]) -> str:
    """The account tree as the exact sacctmgr commands, one a line (`sacctmgr_account_commands`): a script
    an operator runs on a host with slurmdbd (`sh accounts.sh`)."""
    lines = [
        MANAGED_HEADER,
        "# Slurm accounts: departments under root, their projects under them (needs slurmdbd).",
    ]
    lines += ["sacctmgr " + " ".join(command) for command in sacctmgr_account_commands(accounts)]
    return "\n".join(lines) + "\n"


# --- parsing ------------------------------------------------------------------------------------------

_PAIR = re.compile(r"(\w+)=(\S*)")


def parse_show_topology(text: str) -> list[dict]:
    """Parse `scontrol show topology` of topology/block.

    Each `BlockName=...` / `AggregatedBlock=...` line becomes {"name", "index", "nodes" (as printed),
    "hostnames" (expanded, sorted), "size", "aggregated"}. Blank lines are skipped; any other line is an
    error (the output is not what this parser knows, e.g. another topology plugin).
    """
    result = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        fields = dict(_PAIR.findall(line))
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
        fields = dict(_PAIR.findall(line))
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
        expected=_expected_blocks(rows, base, groups),
    )


def parse_conf_lines(text: str, key: str) -> list[dict[str, str]]:
    """`Key=value` lines of a slurm.conf-style file that start with `key=` (NodeName, PartitionName...)."""
    result = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.lower().startswith(key.lower() + "="):
            result.append({k: v for k, v in _PAIR.findall(line)})
    return result
