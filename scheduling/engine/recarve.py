"""Carving that follows demand: which wholly idle NVLink partitions to re-carve for a waiting gang.

Pure Python (no Django import), shared by the portal (after its pass, on the racks whose admin enabled
re-carving: the portal turns each proposal into a partition plan, the same path as the wizard's) and the
simulator (which models the fabric change with a delay). The pass decides first; `propose` then looks at
the in-quota multi-tray jobs it left waiting (`PassResult.in_quota_gangs`, in the pass's order) and at the
cluster as the pass left it.

The rules (issue 28; each a bound the admin's per-rack `RecarvePolicy` or the design sets):

* **Never touch work.** Only *wholly idle* partitions are re-carved: every tray whole free (no job, all GPUs
  schedulable, fabric settled, nothing reserved or already changing; `Cluster.wholly_idle`). A partition
  with any running work is never modified, not even its idle trays.
* **Owners stay apart.** Partitions are merged only with partitions of the same owner (a department's
  dedicated ones together, shared ones together), and the new partitions keep that owner. A gang is served
  only from partitions its in-quota work may use (its department's own, then shared: `usable_owners`).
* **Moves.** Merge idle partitions of one rack into a partition of at least the gang's trays, carving
  what is left over into more partitions (a merge, a split, or both: "9+9 -> 18", "8+8 -> 16",
  "16 -> 8+4+2+2"...). Each new partition is at least `RecarvePolicy.smallest_trays`, and the whole fleet's
  layout with it passes the rule the partition wizard enforces (Slurm 24.11 topology/block: core/blocks.py,
  or the caller's `block_check`). Of the moves that work, the tightest: the smallest partition for the gang,
  then the fewest trays and partitions touched, then the gang's department's own partitions before shared
  ones, then rack order.
* **How often.** At most `RecarvePolicy.max_per_hour` re-carves of a rack in any rolling hour (the caller
  counts them: `recent`), at most one per rack per pass, one per waiting gang; no partition is in two.
* **The portal's side** (scheduling.services.recarving): after its pass, `propose(cluster,
  waiting_gangs(result, pending), policies, recent=..., now=...)` with `policies` from the racks whose admin
  enabled re-carving, the default block check over the pass's cluster (core.blocks); integrations turns each
  `Recarve` into the scheduler's partition plan through the wizard's own path, which checks the same rule
  again on the database's racks under the rack's lock (integrations.plans.recarve). The simulator applies
  a proposal with `Cluster.replace_partitions` and holds its trays (`Cluster.begin_change`) until the
  fabric change settles, so that no job, however small, takes the trays the gang is waiting for.
* **Only when carving is what is missing.** A gang is served only when no partition it may use has its
  trays whole free now (otherwise it waits for something else: a reservation, its department's limit).
  A gang that asks for more than one partition's worth of topology (`rack`, `any`) is not served: it does
  not need one partition.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from core.blocks import BlockPartition, block_layout_error, sizes_error
from core.hardware import GPUS_PER_TRAY
from inventory.names import partition_name_error
from scheduling.engine.cluster import Cluster, Owner
from scheduling.engine.placement import PARTITION
from scheduling.engine.scheduler import PassResult, PendingJob

# Subsets of one rack's idle partitions looked at per gang (a rack has at most 18 partitions; 2x9 or 8+8+2
# racks give a handful, so this bounds only pathological carvings such as 18x1).
MAX_SUBSETS = 512
NAME_PREFIX = "rc"  # new partitions are named rc1, rc2...: the first names free in the rack


@dataclass(frozen=True)
class RecarvePolicy:
    """One rack's bounds, from the admin's per-rack policy (racks without one are never re-carved)."""

    smallest_trays: int = 1  # no partition it makes is smaller
    max_per_hour: int = 2  # re-carves of this rack in any rolling hour
    # Also take idle trays out of partitions whose other trays run work (never a tray that runs work; the
    # partition keeps its name, its running trays and their jobs): "merge free trays split across
    # partitions". Off: only wholly idle partitions are re-carved.
    idle_trays: bool = False


@dataclass(frozen=True)
class NewPartition:
    name: str  # unique within the rack; valid under inventory.names.partition_name_error
    hostnames: tuple[str, ...]
    owner: str | None  # department (as Cluster.part_owner names it) or None: shared


@dataclass(frozen=True)
class Recarve:
    rack: str
    removed: tuple[str, ...]  # names of the partitions it replaces (each wholly idle now)
    created: tuple[NewPartition, ...]  # the same trays, carved anew; the first is the gang's
    job_id: int  # the waiting gang it is for
    gpus: int
    reason: str  # one plain sentence for the plan page and the audit log
    # Idle trays taken out of partitions that keep running work (RecarvePolicy.idle_trays): (partition name,
    # hostnames taken); they go to the first created partition with the removed partitions' trays.
    taken: tuple[tuple[str, tuple[str, ...]], ...] = ()


# The fleet's partition sizes -> why the size rule refuses them, or None (core.blocks.sizes_error).
SizeRule = Callable[[Iterable[int]], str | None]
# (rack name, {partition name: hostnames} the rack would have) -> why the fleet's layout would be refused
# (the wizard's words), or None when it would be accepted.
BlockCheck = Callable[[str, Mapping[str, tuple[str, ...]]], str | None]


def waiting_gangs(result: PassResult, pending: Iterable[PendingJob]) -> list[PendingJob]:
    """The in-quota multi-tray jobs `result`'s pass left waiting, in the pass's order, as `propose` takes
    them (`pending`: the jobs the pass was given)."""
    by_id = {job.id: job for job in pending}
    return [by_id[job_id] for job_id in result.in_quota_gangs if job_id in by_id]


def cluster_block_check(cluster: Cluster) -> BlockCheck:
    """The fleet-wide block rule (core.blocks) over `cluster`'s partitions, one rack carved as planned.

    The portal passes the wizard's own check instead (integrations.plans.service: the database's racks,
    which may hold racks the pass's cluster leaves out); the rule is the same function. Answers are cached
    by the fleet's sizes (the rule depends on nothing else)."""
    cache: dict[tuple, str | None] = {}

    def check(rack: str, planned: Mapping[str, tuple[str, ...]]) -> str | None:
        partitions = []
        for r, name in enumerate(cluster.rack_name):
            if name == rack:
                partitions += [BlockPartition(rack, p, len(h)) for p, h in planned.items() if h]
            else:
                partitions += [
                    BlockPartition(name, cluster.part_name[p], len(cluster.part_trays[p]))
                    for p in cluster.rack_parts[r]
                    if cluster.part_trays[p]
                ]
        key = tuple((p.domain, p.nodes) for p in partitions)
        if key not in cache:
            cache[key] = block_layout_error(partitions)
        return cache[key]

    return check


def _minutes(seconds: float) -> str:
    minutes = max(0, round(seconds / 60))
    if minutes == 0:
        return "under a minute"
    return f"{minutes} min" if minutes < 120 else f"{minutes / 60:.1f} h"


def _and(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _free_names(taken: set[str], count: int) -> list[str]:
    names: list[str] = []
    i = 1
    while len(names) < count:
        name = f"{NAME_PREFIX}{i}"
        if name not in taken and partition_name_error(name) is None:
            names.append(name)
        i += 1
    return names


def _sizes(bases: Iterable[int], smallest: int, total: int) -> list[int]:
    """Partition sizes worth trying: each base times a power of two, at least `smallest`, at most `total`."""
    sizes = set()
    for base in bases:
        size = base
        while 0 < size <= total:
            if size >= smallest:
                sizes.add(size)
            size *= 2
    return sorted(sizes)


def _carvings(total: int, need: int, sizes: list[int]) -> Iterable[tuple[int, ...]]:
    """Ways to carve `total` trays into partitions of `sizes`, the first (the gang's) at least `need`, the
    rest as few as possible (largest first), tightest gang partition first."""
    for first in sizes:
        if first < need:
            continue
        rest, left = [], total - first
        for size in reversed(sizes):
            while size <= left:
                rest.append(size)
                left -= size
        if left == 0:
            yield (first, *rest)


@dataclass(frozen=True)
class _Option:
    key: tuple
    rack: int
    owner: Owner
    removed: tuple[int, ...]
    carving: tuple[int, ...]
    # A gather (RecarvePolicy.idle_trays): partition -> its idle trays taken (partitions that keep running
    # work), and the gang's partition's trays in slot order.
    taken: tuple[tuple[int, tuple[int, ...]], ...] = ()
    trays: tuple[int, ...] = ()


def propose(
    cluster: Cluster,
    waiting: Sequence[PendingJob],
    policies: Mapping[str, RecarvePolicy],
    *,
    recent: Mapping[str, int] | None = None,
    block_check: BlockCheck | None = None,
    now: float = 0.0,
    size_rule: SizeRule | None = sizes_error,
) -> list[Recarve]:
    """The re-carves to make now, at most one per rack and per gang (module docstring).

    `cluster`: the engine's cluster as the pass left it (its allocations made). `waiting`: the in-quota
    multi-tray gangs the pass left waiting, in its order (`waiting_gangs`); only those asking for one
    partition (`PendingJob.topology == "partition"`) are served, with `gpus // 4` trays, for `department`
    (its usable partitions: its own dedicated ones, then shared), `submitted_at` giving the wait the reason
    states. `policies`: rack name -> its bounds, only racks whose admin enabled re-carving. `recent`: rack
    name -> re-carves of it in the last hour. `block_check`: the fleet-wide block rule (default: core.blocks
    over `cluster`, `cluster_block_check`). `now`: the pass's clock (same clock as `submitted_at`).
    `size_rule`: the size half of the same rule over the fleet's partition sizes (core.blocks.sizes_error),
    asked first because it is cheap (O(distinct sizes)); None only with a `block_check` that has no size
    rule (the simulator's what-if without a fleet rule).

    Does not change the cluster: the caller applies each proposal (`Cluster.replace_partitions`, or a plan).
    """
    if not policies or not waiting:
        return []
    recent = recent or {}
    racks = [
        r
        for r, name in enumerate(cluster.rack_name)
        if name in policies and recent.get(name, 0) < policies[name].max_per_hour
    ]
    if not racks:
        return []
    check = block_check or cluster_block_check(cluster)
    fleet = Counter(len(trays) for trays in cluster.part_trays if trays)  # partitions by size
    proposals: list[Recarve] = []
    used: set[int] = set()  # racks re-carved in this pass
    for job in waiting:
        if len(used) == len(racks):
            break
        if job.topology != PARTITION or job.gpus <= GPUS_PER_TRAY:
            continue
        need = job.gpus // GPUS_PER_TRAY
        owners = cluster.usable_owners(job.department)
        if cluster.largest_free_partition(owners)[0] >= need:
            continue  # a partition has its trays free: it waits for something else than carving
        # Each rack's best move by arithmetic alone first (cheap), then the block rule on the racks in that
        # order, until no rack's unchecked move can beat the best checked one (a check only makes it worse).
        candidates = []
        for rank, owner in enumerate(owners):
            for r in racks:
                if r in used:
                    continue
                policy = policies[cluster.rack_name[r]]
                bound = _best_in_rack(cluster, r, owner, need, policy, fleet, size_rule, None)
                if bound is not None:
                    candidates.append(((*bound.key, rank, r), r, owner, policy))
        candidates.sort(key=lambda c: c[0])
        best: _Option | None = None
        for bound_key, r, owner, policy in candidates:
            if best is not None and bound_key >= best.key:
                break
            option = _best_in_rack(cluster, r, owner, need, policy, fleet, size_rule, check)
            if option is not None:
                key = (*option.key, *bound_key[3:])
                if best is None or key < best.key:
                    best = _Option(key, r, owner, option.removed, option.carving)
        if best is None:
            best = _best_gather(cluster, racks, used, owners, need, policies, fleet, size_rule, check)
        if best is None:
            continue
        used.add(best.rack)
        fleet.subtract(len(cluster.part_trays[p]) for p in best.removed)
        for p, trays in best.taken:
            fleet.subtract([len(cluster.part_trays[p])])
            fleet.update([len(cluster.part_trays[p]) - len(trays)])
        fleet.update(best.carving)
        proposals.append(_recarve(cluster, best, job, now))
    return proposals


def _best_gather(
    cluster: Cluster,
    racks: Sequence[int],
    used: set[int],
    owners: Sequence[Owner],
    need: int,
    policies: Mapping[str, RecarvePolicy],
    fleet: Counter[int],
    size_rule: SizeRule | None,
    check: BlockCheck,
) -> _Option | None:
    """Where no idle partition can be re-carved for the gang: gather `need` idle trays of one rack's
    partitions into one partition, on racks whose policy allows it (`idle_trays`). Of the racks where it
    works, the one touching the fewest partitions, then the fewest that run work, then the gang's
    department's own partitions before shared ones, then rack order."""
    best: _Option | None = None
    for rank, owner in enumerate(owners):
        for r in racks:
            policy = policies[cluster.rack_name[r]]
            if r in used or not policy.idle_trays:
                continue
            option = _gather_in_rack(cluster, r, owner, need, policy, fleet, size_rule, check)
            if option is not None:
                key = (*option.key, rank, r)
                if best is None or key < best.key:
                    best = _Option(key, r, owner, option.removed, option.carving, option.taken, option.trays)
    return best


def _gather_in_rack(
    cluster: Cluster,
    r: int,
    owner: Owner,
    need: int,
    policy: RecarvePolicy,
    fleet: Counter[int],
    size_rule: SizeRule | None,
    check: BlockCheck,
) -> _Option | None:
    """`need` idle trays of rack r's partitions of `owner` as one new partition of exactly `need` trays.

    Idle is whole free (`Cluster.part_free`: no job, every GPU schedulable, fabric settled, nothing held or
    changing); trays that run work stay where they are. Partitions with the most idle trays give first (the
    fewest touched); a partition left with no tray is removed, one left with fewer than the policy's
    smallest is not a move. Key: (partitions touched, of them running work, trays taken)."""
    smallest = max(1, policy.smallest_trays)
    if need < smallest:
        return None
    donors = [
        (p, sorted(cluster.part_free[p]))
        for p in cluster.rack_parts[r]
        if cluster.part_owner[p] == owner and cluster.part_free[p]
    ]
    if sum(len(trays) for _, trays in donors) < need:
        return None
    # Most idle trays first; among equals a wholly idle partition (removed whole) before one that runs work.
    donors.sort(key=lambda d: (-len(d[1]), not cluster.wholly_idle(d[0]), cluster.part_trays[d[0]][0]))
    left = need
    removed: list[int] = []
    taken: list[tuple[int, tuple[int, ...]]] = []
    trays: list[int] = []
    for p, idle in donors:
        if left == 0:
            break
        give = idle[:left]
        remains = len(cluster.part_trays[p]) - len(give)
        if 0 < remains < smallest:
            continue
        trays += give
        left -= len(give)
        if remains == 0:
            removed.append(p)
        else:
            taken.append((p, tuple(give)))
    if left:
        return None
    if not taken:
        return None  # wholly idle partitions only: the move `_best_in_rack` looks at
    if size_rule is not None:
        after = Counter(fleet)
        after.subtract(len(cluster.part_trays[p]) for p in removed)
        for p, given in taken:
            after.subtract([len(cluster.part_trays[p])])
            after.update([len(cluster.part_trays[p]) - len(given)])
        after.update([need])
        if size_rule({size for size, count in after.items() if count > 0}) is not None:
            return None
    gone = set(trays)
    planned = {
        cluster.part_name[p]: tuple(cluster.tray_host[t] for t in cluster.part_trays[p] if t not in gone)
        for p in cluster.rack_parts[r]
        if p not in removed
    }
    [name] = _free_names(set(planned) | {cluster.part_name[p] for p in removed}, 1)
    planned[name] = tuple(cluster.tray_host[t] for t in sorted(trays))
    if check(cluster.rack_name[r], planned) is not None:
        return None
    key = (len(removed) + len(taken), len(taken), len(trays))
    return _Option(key, r, owner, tuple(removed), (need,), tuple(taken), tuple(sorted(trays)))


def _assign(cluster: Cluster, subset: Sequence[int], carving: Sequence[int]) -> list[tuple[str, ...]]:
    """The trays of `subset` (lowest slots first) dealt out to partitions of the `carving`'s sizes."""
    trays = sorted(t for p in subset for t in cluster.part_trays[p])
    hosts, start = [], 0
    for size in carving:
        hosts.append(tuple(cluster.tray_host[t] for t in trays[start : start + size]))
        start += size
    return hosts


def _best_in_rack(
    cluster: Cluster,
    r: int,
    owner: Owner,
    need: int,
    policy: RecarvePolicy,
    fleet: Counter[int],
    size_rule: SizeRule | None,
    check: BlockCheck | None,
) -> _Option | None:
    """The tightest re-carve of rack r's idle partitions of `owner` that gives a partition of `need` trays:
    key (trays beyond the need, trays touched, partitions touched), smallest first. Without `check`, by
    arithmetic alone (a lower bound of the key with it)."""
    idle = [p for p in cluster.rack_parts[r] if cluster.part_owner[p] == owner and cluster.wholly_idle(p)]
    size = {p: len(cluster.part_trays[p]) for p in idle}
    if sum(size.values()) < need:
        return None
    rack = cluster.rack_name[r]
    kept = cluster.rack_parts[r]
    smallest = max(1, policy.smallest_trays)
    # Sizes worth trying: the fleet's partition sizes (and the policy's floor) times powers of two; the
    # block rule has the last word on each carving.
    bases = {size for size, count in fleet.items() if count > 0} | {smallest}
    best: _Option | None = None
    looked = 0
    for count in range(1, len(idle) + 1):
        for subset in itertools.combinations(idle, count):
            looked += 1
            if looked > MAX_SUBSETS:
                return best
            total = sum(size[p] for p in subset)
            if total < need or (best is not None and (0, total, count) >= best.key):
                continue
            now_sizes = sorted(size[p] for p in subset)
            for carving in _carvings(total, need, _sizes(bases, smallest, total)):
                key = (carving[0] - need, total, count)
                if best is not None and key >= best.key:
                    break
                if sorted(carving) == now_sizes:
                    continue  # the same partitions: nothing to change
                if size_rule is not None:
                    gone = Counter(now_sizes)
                    after = {size for size, count in fleet.items() if count - gone[size] > 0}
                    if size_rule(after | set(carving)) is not None:
                        continue
                if check is None:
                    best = _Option(key, r, owner, tuple(subset), carving)
                    break
                planned = {cluster.part_name[p]: _hosts(cluster, p) for p in kept if p not in subset}
                names = _free_names(set(planned) | {cluster.part_name[p] for p in subset}, len(carving))
                planned.update(zip(names, _assign(cluster, subset, carving), strict=True))
                if check(rack, planned) is None:
                    best = _Option(key, r, owner, tuple(subset), carving)
                    break
    return best


def _hosts(cluster: Cluster, p: int) -> tuple[str, ...]:
    return tuple(cluster.tray_host[t] for t in cluster.part_trays[p])


def _recarve(cluster: Cluster, option: _Option, job: PendingJob, now: float) -> Recarve:
    if option.taken:
        return _gathered(cluster, option, job, now)
    r = option.rack
    rack = cluster.rack_name[r]
    removed = tuple(cluster.part_name[p] for p in option.removed)
    taken = {cluster.part_name[p] for p in cluster.rack_parts[r]}
    names = _free_names(taken, len(option.carving))
    created = tuple(
        NewPartition(name, hosts, option.owner)
        for name, hosts in zip(names, _assign(cluster, option.removed, option.carving), strict=True)
    )
    need = job.gpus // GPUS_PER_TRAY
    sizes = [len(cluster.part_trays[p]) for p in option.removed]
    idle = "idle partition" if len(removed) == 1 else "idle partitions"
    where = f"{idle} {_and(removed)} of {rack}"
    if len(removed) > 1:
        where += f" ({' + '.join(str(s) for s in sizes)} trays)"
    else:
        where += f" ({sizes[0]} trays)"
    verb = (
        "merging"
        if len(removed) > 1 and len(created) == 1
        else "splitting"
        if len(removed) == 1
        else "re-carving"
    )
    rest = option.carving[1:]
    makes = f"one of {option.carving[0]}" + (f" (and {' + '.join(str(s) for s in rest)})" if rest else "")
    owner = f", dedicated to {option.owner}" if option.owner is not None else ""
    reason = (
        f"job {job.id} ({job.department}, {job.gpus} GPUs in quota) has waited "
        f"{_minutes(now - job.submitted_at)}: "
        f"no partition it may use has {need} free trays; {verb} {where}{owner} makes {makes}"
    )
    return Recarve(rack, removed, created, job.id, job.gpus, reason)


def _gathered(cluster: Cluster, option: _Option, job: PendingJob, now: float) -> Recarve:
    """A gather as a Recarve: the new partition holds the removed partitions' trays and the trays taken."""
    r = option.rack
    rack = cluster.rack_name[r]
    [name] = _free_names({cluster.part_name[p] for p in cluster.rack_parts[r]}, 1)
    hosts = tuple(cluster.tray_host[t] for t in option.trays)
    taken = tuple(
        (cluster.part_name[p], tuple(cluster.tray_host[t] for t in trays)) for p, trays in option.taken
    )
    removed = tuple(cluster.part_name[p] for p in option.removed)
    need = job.gpus // GPUS_PER_TRAY
    sources = [f"{len(trays)} of {name_} (its other trays run work)" for name_, trays in taken]
    sources += [f"all {len(cluster.part_trays[p])} of {cluster.part_name[p]}" for p in option.removed]
    owner = f", dedicated to {option.owner}" if option.owner is not None else ""
    reason = (
        f"job {job.id} ({job.department}, {job.gpus} GPUs in quota) has waited "
        f"{_minutes(now - job.submitted_at)}: no partition it may use has {need} free trays; "
        f"gathering idle trays of {rack} ({_and(sources)}) makes one of {len(hosts)}{owner}"
    )
    return Recarve(rack, removed, (NewPartition(name, hosts, option.owner),), job.id, job.gpus, reason, taken)
