"""Which NVLink partition layouts Slurm 24.11's topology/block can express: the one rule.

Pure (no Django, no I/O). The Slurm renderer (integrations/slurm/topology.py `plan_topology`) lays out its
blocks with it, the partition wizard greys out layouts it refuses (integrations/plans/service.py
`_block_checker`, through `plan_topology`), and the scheduler's re-carving (scheduling/engine/recarve.py)
never proposes a layout it refuses: one implementation, so what the scheduler makes the wizard accepts.

The rules (read in Slurm 24.11.5's src/plugins/topology/block/block_record.c and confirmed on the testbed;
integrations/slurm/topology.py's docstring has the whole story):

* the base block size is the smallest NVLink partition's node count; every partition must be the base times
  a power of two, at most 2**15 (Slurm keeps 16 levels): a larger one is written as 2**k base blocks that
  level k aggregates;
* level k aggregates 2**k consecutive blocks in file order, aligned on multiples of 2**k, whatever their
  racks: no aggregated block may hold blocks of two racks, and every split partition must be exactly one
  aggregated block. Blocks are written by rack (NVLink domain), largest partition first, then by name.

So on 18-tray racks a layout with partitions of three sizes or more, or with partitions of two sizes whose
racks do not hold an even number of base blocks, is refused as soon as it spans two racks (e.g. 16+2 on two
racks: rack 2's 16 would start at block 9, not on a multiple of 8).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import hostlist

from core.sentences import CLAUSES, gettext_noop, say

MAX_BLOCK_LEVELS = 16  # Slurm 24.11 block_record.h: levels 0..15


@functools.lru_cache(maxsize=1 << 16)
def natural_key(name: str) -> tuple:
    """hostlist's numeric order of a name (`r2` before `r10`), as a tuple; kept by name: a fleet's 10,000
    rack and 20,000 block names are sorted again at every render (issue 32)."""
    return tuple(hostlist.numeric_sort_key(name))


def is_power_of_two(n: int) -> bool:
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
        if not is_power_of_two(multiple):
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


@dataclass(frozen=True)
class BlockPartition:
    """One NVLink partition as the rule sees it: its rack (NVLink domain), its name and its node count."""

    domain: str
    name: str
    nodes: int


@dataclass(frozen=True)
class BlockLayout:
    """How Slurm 24.11 sees the partitions: the base block size, the base blocks in file order (each the
    index of its partition in the given sequence, and its part number 1.. within a split partition, 0 when
    the partition is one block), the levels kept (exponents) and the aggregated blocks."""

    base: int
    rows: tuple[tuple[int, int], ...]
    levels: tuple[int, ...]
    groups: tuple[tuple[int, tuple[int, ...]], ...]

    @property
    def block_sizes(self) -> tuple[int, ...]:
        return tuple(self.base << level for level in self.levels)


# The refusals the wizard and the what-if show: templates (core.sentences), written in English, shown in the
# viewer's language by the portal. A partition is named by `partition` (a name, or "of 18 nodes").
SIZE_FAULT = gettext_noop(
    "Slurm 24.11 cannot express NVLink partition %(partition)s (%(nodes)s nodes) next to a partition of "
    "%(base)s nodes: a block larger than the base block size is only kept whole when it is the base times a "
    "power of two (Slurm aggregates 2, 4, 8... base blocks), and blocks smaller than the base are refused. "
    "Carve the racks so that every partition is the smallest one times a power of two, or use Slurm 25.05+ "
    "(topology.yaml), where blocks may be smaller than the base."
)
TOO_MANY_LEVELS = gettext_noop("NVLink partition %(partition)s needs more than %(levels)s block levels")
OF_NODES = gettext_noop("of %(nodes)s nodes")
# Why Slurm would aggregate the blocks wrongly: two clauses (a template holds no "; ").
CANNOT_GROUP = gettext_noop(
    "Slurm 24.11 cannot express these NVLink partitions: %(why)s. Slurm groups consecutive blocks by count, "
    "not by rack"
)
CARVE_ALIKE = gettext_noop(
    "carve the racks alike (same partition sizes in every rack) or use Slurm 25.05+ (topology.yaml)."
)
RACKS_GROUPED = gettext_noop("level %(size)s would group blocks of racks %(rack_names)s")
NOT_ONE_BLOCK = gettext_noop("partition %(name)s would not be one aggregated block of %(size)s")


def _size_fault(nodes: int, base: int, partition: str) -> str | None:
    """Why a partition of `nodes` (called `partition`) cannot stand beside a smallest one of `base`."""
    if nodes % base or not is_power_of_two(nodes // base):
        return say(SIZE_FAULT, partition=partition, nodes=nodes, base=base)
    if (nodes // base).bit_length() - 1 >= MAX_BLOCK_LEVELS:
        return say(TOO_MANY_LEVELS, partition=partition, levels=MAX_BLOCK_LEVELS)
    return None


def sizes_error(sizes: Iterable[int]) -> str | None:
    """The size half of the rule alone, for the fleet's partition sizes (a set will do): why some size
    cannot stand beside the smallest one, or None. Necessary, not sufficient: `block_layout` also checks
    how Slurm aggregates the blocks by rack. O(distinct sizes): to search many layouts before the full rule.
    """
    sizes = set(sizes)
    if not sizes:
        return None
    base = min(sizes)
    for nodes in sorted(sizes):
        why = _size_fault(nodes, base, say(OF_NODES, nodes=nodes))
        if why is not None:
            return why
    return None


def block_layout(partitions: Sequence[BlockPartition]) -> BlockLayout:
    """The Slurm 24.11 block layout of these partitions, or ValueError in the words the wizard shows."""
    if not partitions:
        raise ValueError("no NVLink partitions: topology/block needs at least one block")
    base = min(p.nodes for p in partitions)
    if base < 1:
        raise ValueError("an NVLink partition has no nodes (Slurm: 'lacks children')")
    for p in partitions:
        why = _size_fault(p.nodes, base, p.name)
        if why is not None:
            raise ValueError(why)

    order = sorted(
        range(len(partitions)),
        key=lambda i: (
            natural_key(partitions[i].domain),
            -partitions[i].nodes,
            natural_key(partitions[i].name),
        ),
    )
    rows: list[tuple[int, int]] = []
    for i in order:
        parts = partitions[i].nodes // base
        rows.extend([(i, 0)] if parts == 1 else [(i, part) for part in range(1, parts + 1)])

    # Levels that keep a split partition whole.
    levels = {0}
    for p in partitions:
        parts = p.nodes // base
        if parts > 1:
            levels.add(parts.bit_length() - 1)

    def groups_ok(candidate: set[int]) -> tuple[bool, str]:
        kept, groups = slurm_aggregates(len(rows), sorted(candidate))
        alone: set[tuple[int, int]] = set()  # (level, partition) of groups of one partition's blocks only
        for level, members in groups:
            inside = {rows[m][0] for m in members}
            domains = {partitions[i].domain for i in inside}
            if len(domains) > 1:
                return False, say(RACKS_GROUPED, size=base << level, rack_names=", ".join(sorted(domains)))
            if len(inside) == 1:
                alone.add((level, next(iter(inside))))
        for i, p in enumerate(partitions):
            parts = p.nodes // base
            if parts == 1:
                continue
            level = parts.bit_length() - 1
            if level not in kept or (level, i) not in alone:
                return False, say(NOT_ONE_BLOCK, name=p.name, size=base << level)
        return True, ""

    ok, why = groups_ok(levels)
    if not ok:
        raise ValueError(CLAUSES.join([say(CANNOT_GROUP, why=why), CARVE_ALIKE]))

    # The NVLink domain (rack) level, when Slurm would group exactly each rack.
    per_domain: dict[str, int] = {}
    for i, _ in rows:
        domain = partitions[i].domain
        per_domain[domain] = per_domain.get(domain, 0) + 1
    counts = set(per_domain.values())
    if len(counts) == 1:
        count = counts.pop()
        if count > 1:
            rack_level = (count - 1).bit_length()  # ceil(log2(count))
            candidate = levels | {rack_level}
            if rack_level < MAX_BLOCK_LEVELS and groups_ok(candidate)[0]:
                _, groups = slurm_aggregates(len(rows), sorted(candidate))
                rack_groups = {frozenset(m) for lvl, m in groups if lvl == rack_level}
                spans: dict[str, set[int]] = {}
                for k, (i, _) in enumerate(rows):
                    spans.setdefault(partitions[i].domain, set()).add(k)
                if all(frozenset(span) in rack_groups for span in spans.values()):
                    levels = candidate

    kept, groups = slurm_aggregates(len(rows), sorted(levels))
    return BlockLayout(
        base=base,
        rows=tuple(rows),
        levels=tuple(kept),
        groups=tuple((level, tuple(members)) for level, members in groups),
    )


def block_layout_error(partitions: Sequence[BlockPartition]) -> str | None:
    """Why Slurm 24.11 (and so the partition wizard) refuses this fleet's layout; None when it accepts it."""
    try:
        block_layout(partitions)
    except ValueError as error:
        return str(error)
    return None
