"""Gang placement: where a job's GPUs go, all or nothing. Pure Python, shared by the portal and the simulator.

A job asks for `gpus`: 1-4 GPUs on one tray, or a multiple of 4 as whole trays. Its topology requirement:

* ``partition``: all trays in one NVLink partition (multi-node NVLink needs it);
* ``rack``: all trays in one NVLink domain (rack), in as few partitions as possible;
* ``any``: anywhere, in as few partitions and racks as possible; on a cluster with a compute fabric
  (core.fabric, `Cluster.fabric`) a job that fits no rack expands outward only when necessary: whole
  partitions or racks inside one scalable unit when one has room (the unit with the fewest free trays that
  fit: best fit, so the largest free units stay whole), else inside one spine group (the same rule), else
  anywhere. `Request.within` names a level the job stays inside (it waits for one rather than expanding:
  the scheduler's bounded fabric wait, `Options.fabric_wait_s`). Without a fabric, placement is as before.

**Unit packing** (`Request.pack`, on a cluster with a fabric): a job of at most one rack that opens free
trays goes to the *fullest* scalable unit that has room for it (the fewest whole free trays), and inside it
to the partition (or rack) the rules below would choose there. The NVLink rules come first: a multi-tray job
still takes one partition when any has room, in any unit, before it is spread over a rack's partitions; a
small job still packs into partly used trays first, wherever they are (that opens no tray). So single-rack
work fills the busiest units and whole units stay free for the multi-rack jobs. Racks outside the fabric
count as the fullest (no multi-rack job can use them inside a unit).

Policies:

* ``rackplane``: the product. Multi-tray jobs go to the partition that fits them best (fewest whole free
  trays left behind, so big holes stay big); small jobs pack into partly used trays first, then take a
  tray from the partition with the fewest free trays. The department's dedicated partitions come first;
  borrowed work (``Request.borrow``) may also use partitions dedicated to other departments, last.
  Multi-tray jobs never take trays whose fabric is unsettled (see scheduling.engine.cluster).
  Every decision reads the cluster's free-capacity indexes (a few dict lookups), never the whole cluster.
* ``first-fit``: the first free trays in cluster order, ignoring partitions and the requirement (a
  topology-blind scheduler). Scans the trays: a baseline for the simulator, not for 1,000 racks.
* ``block-best-fit``: the smallest NVLink partition that has room (Slurm topology/block), else the first
  free trays in cluster order across partitions, whatever the requirement. Also a scanning baseline.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.hardware import GPUS_PER_TRAY
from scheduling.engine.cluster import Cluster
from scheduling.engine.words import CLAUSES, gettext_noop, listed, plural, say

PARTITION, RACK, ANY = "partition", "rack", "any"
TOPOLOGIES = (PARTITION, RACK, ANY)
RACKPLANE, FIRST_FIT, BLOCK_BEST_FIT = "rackplane", "first-fit", "block-best-fit"
POLICIES = (RACKPLANE, FIRST_FIT, BLOCK_BEST_FIT)

Placement = tuple[tuple[int, int], ...]  # (tray index, GPUs on it)


@dataclass(frozen=True)
class Request:
    gpus: int
    topology: str = PARTITION
    department: str | None = None
    borrow: bool = False  # over quota and preemptible: may use partitions dedicated to other departments
    # A fabric level (core.fabric, e.g. "unit") an `any` job's trays must stay inside, or None: anywhere.
    within: str | None = None
    # Unit packing (the scheduler's `Options.fabric_packing`): on a cluster with a fabric, a job of at most
    # one rack goes to the fullest scalable unit that has room for it, so whole units stay free for the
    # multi-rack jobs. No effect without a fabric.
    pack: bool = False

    def __post_init__(self):
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"topology must be one of {', '.join(TOPOLOGIES)}, not {self.topology!r}")
        check_gpus(self.gpus)

    @property
    def trays(self) -> int:
        """Whole trays a multi-tray job takes (1 for a small job)."""
        return max(1, self.gpus // GPUS_PER_TRAY)

    @property
    def small(self) -> bool:
        return self.gpus <= GPUS_PER_TRAY


NOT_A_GPU_COUNT = gettext_noop("GPUs must be a whole number >= 1, got %(gpus)s")
NOT_WHOLE_TRAYS = gettext_noop(
    "%(gpus)s GPUs: a job above one tray takes whole trays, so a multiple of %(per_tray)s"
)


def check_gpus(gpus: int) -> None:
    """Refuse (ValueError, in a template's English: scheduling.words reads it back) a size no job can have."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(say(NOT_A_GPU_COUNT, gpus=repr(gpus)))
    if gpus > GPUS_PER_TRAY and gpus % GPUS_PER_TRAY:
        raise ValueError(say(NOT_WHOLE_TRAYS, gpus=gpus, per_tray=GPUS_PER_TRAY))


def place(cluster: Cluster, request: Request, policy: str = RACKPLANE) -> Placement | None:
    """Where the job would go now, or None. Does not change the cluster."""
    if request.gpus > cluster.free_gpus:
        return None
    if policy == RACKPLANE:
        if request.small:
            return _small(cluster, request)
        return _rackplane(cluster, request)
    if policy == FIRST_FIT:
        if request.small:
            return _first_tray(cluster, request)
        return _first_trays(cluster, request)
    if policy == BLOCK_BEST_FIT:
        if request.small:
            return _first_tray(cluster, request)
        return _smallest_block(cluster, request) or _first_trays(cluster, request)
    raise ValueError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")


# Why a job goes where it goes (`explain`), and why it does not fit now (`why_not`): clauses of
# scheduling.engine.words, each a template the portal reads back in the viewer's language.
ON_PARTLY_USED_TRAY_ONE = gettext_noop(
    "on a tray already partly in use in %(partition)s, whose %(free)s free GPU fits it best: whole trays "
    "stay free for jobs that span trays"
)
ON_PARTLY_USED_TRAY = gettext_noop(
    "on a tray already partly in use in %(partition)s, whose %(free)s free GPUs fit it best: whole trays "
    "stay free for jobs that span trays"
)
ON_FREE_TRAY = gettext_noop(
    "on a free tray of %(partition)s, the smallest NVLink partition with room: larger ones stay whole"
)
BEST_FIT = gettext_noop(
    "in NVLink partition %(partition)s, the smallest with %(trays)s free trays (best fit)"
)
OTHERS_ONE = gettext_noop(
    "%(others)s other partition could have taken it, kept for larger jobs (the next best, with their free "
    "trays: %(next)s)"
)
OTHERS_MANY = gettext_noop(
    "%(others)s other partitions could have taken it, kept for larger jobs (the next best, with their free "
    "trays: %(next)s)"
)
NO_OTHER = gettext_noop("no other partition could take it")
PACKED_FREE_TRAY = gettext_noop(
    "on a free tray of %(partition)s in scalable unit %(unit)s, the fullest unit with room (%(free)s whole "
    "free trays): emptier units stay whole for jobs that span racks"
)
PACKED_PARTITION = gettext_noop(
    "in NVLink partition %(partition)s of scalable unit %(unit)s, the fullest unit with a partition of "
    "%(trays)s free trays (%(free)s whole free trays in the unit): emptier units stay whole for jobs that "
    "span racks"
)
PACKED_RACK = gettext_noop(
    "no NVLink partition had %(trays)s free trays, so on rack %(rack)s across %(parts)s of its partitions, "
    "in scalable unit %(unit)s, the fullest unit with room (%(free)s whole free trays): emptier units stay "
    "whole for jobs that span racks"
)
TIED_ONE = gettext_noop(
    "%(others)s other partition was equally small (%(next)s): of equally small partitions, the one that "
    "reached that many free trays first is taken"
)
TIED_MANY = gettext_noop(
    "%(others)s other partitions were equally small (%(next)s): of equally small partitions, the one that "
    "reached that many free trays first is taken"
)
LATER_OWNER_ONE = gettext_noop(
    "%(others)s other partition could have taken it but comes later in the order partitions are used (the "
    "department's own, then shared, then borrowed): %(next)s"
)
LATER_OWNER_MANY = gettext_noop(
    "%(others)s other partitions could have taken it but come later in the order partitions are used (the "
    "department's own, then shared, then borrowed): %(next)s"
)
ACROSS_RACK_PARTITIONS = gettext_noop(
    "no NVLink partition had %(trays)s free trays, so on rack %(rack)s across %(parts)s of its partitions: "
    "the rack with the fewest free trays that fit (its %(topology)s topology allowed one rack)"
)
ACROSS_RACKS = gettext_noop(
    "no rack had %(trays)s free trays, so across %(racks)s racks and %(parts)s NVLink partitions, the "
    "largest free blocks first (its topology allowed any trays)"
)
IN_UNIT = gettext_noop(
    "no rack had %(trays)s free trays, so across %(racks)s racks in scalable unit %(unit)s, the unit with "
    "the fewest free trays that fit (%(free)s): larger units stay whole"
)
IN_SPINE = gettext_noop(
    "no scalable unit had %(gpus)s free GPUs, so across %(units)s scalable units of spine group %(spine)s, "
    "the spine group with the fewest free trays that fit (%(free)s)"
)
ACROSS_SPINES = gettext_noop(
    "no spine group had %(gpus)s free GPUs, so across %(spines)s spine groups, the largest free blocks first"
)
NO_UNIT_YET = gettext_noop(
    "no scalable unit has %(trays)s free trays (the most in one is %(most)s): it waits for one rather than "
    "spanning units"
)
NO_SPINE_YET = gettext_noop(
    "no spine group has %(trays)s free trays (the most in one is %(most)s): it waits for one rather than "
    "spanning spine groups"
)
NO_GPU_FREE = gettext_noop("no GPU is free")
NO_TRAY_HAS_ONE = gettext_noop("no tray has %(gpus)s free GPU")
NO_TRAY_HAS_MANY = gettext_noop("no tray has %(gpus)s free GPUs")
LARGEST_BLOCK_ONE = gettext_noop("the largest free block is %(trays)s tray in %(partition)s")
LARGEST_BLOCK_MANY = gettext_noop("the largest free block is %(trays)s trays in %(partition)s")
NO_FREE_TRAY = gettext_noop("no NVLink partition has a free tray")
NO_PARTITION_HAS = gettext_noop("no NVLink partition has %(trays)s free trays")
NO_RACK_HAS = gettext_noop("no rack has %(trays)s free trays (the most in one rack is %(most)s)")
WHOLE_TRAYS_ONE_FREE = gettext_noop("%(trays)s whole trays are needed and %(free)s is free")
WHOLE_TRAYS_FREE = gettext_noop("%(trays)s whole trays are needed and %(free)s are free")
DEGRADED_ONE = gettext_noop(
    "%(partition)s has %(total)s free tray but is degraded (%(why)s): no job spanning trays is placed there "
    "until it recovers"
)
DEGRADED_MANY = gettext_noop(
    "%(partition)s has %(total)s free trays but is degraded (%(why)s): no job spanning trays is placed there "
    "until it recovers"
)
UNSETTLED_ONE = gettext_noop(
    "%(partition)s has %(total)s free tray but %(count)s of them report another NVLink clique than their "
    "partition, unfinished fabric registration or a fabric problem (fabric change in progress, drift or "
    "degraded fabric health): %(hosts)s"
)
UNSETTLED_MANY = gettext_noop(
    "%(partition)s has %(total)s free trays but %(count)s of them report another NVLink clique than their "
    "partition, unfinished fabric registration or a fabric problem (fabric change in progress, drift or "
    "degraded fabric health): %(hosts)s"
)
DEGRADED_LEFT_OUT = gettext_noop("degraded NVLink partitions are left out: %(names)s")
UNSETTLED_LEFT_OUT_ONE = gettext_noop(
    "%(count)s more free tray is left out while its fabric is unsettled (another NVLink clique than the "
    "partition's, unfinished fabric registration, or a fabric problem its node reports): %(hosts)s"
)
UNSETTLED_LEFT_OUT_MANY = gettext_noop(
    "%(count)s more free trays are left out while their fabric is unsettled (another NVLink clique than the "
    "partition's, unfinished fabric registration, or a fabric problem its node reports): %(hosts)s"
)


def explain(cluster: Cluster, request: Request, placement: Placement) -> str:
    """One sentence of why the job goes where `placement` puts it (Rackplane's rule), and what else could
    have taken it, read on the cluster before the job is allocated (the pass's job page and event)."""
    owners = cluster.usable_owners(request.department, request.borrow)
    parts = sorted({cluster.tray_part[t] for t, _ in placement})
    racks = sorted({cluster.part_rack[p] for p in parts})
    if request.pack and len(racks) == 1 and cluster.rack_groups[racks[0]]:
        words = _packed_words(cluster, request, placement, parts, racks[0])
        if words:
            return words
    if request.small:
        ((t, _),) = placement
        label = cluster.partition_label(cluster.tray_part[t])
        if cluster.tray_free[t] < GPUS_PER_TRAY:
            free = cluster.tray_free[t]
            return say(plural(free, ON_PARTLY_USED_TRAY_ONE, ON_PARTLY_USED_TRAY), partition=label, free=free)
        return say(ON_FREE_TRAY, partition=label)
    n = request.trays
    if len(parts) == 1:
        alternatives = _alternatives(cluster, owners, n, parts[0])
        return say(BEST_FIT, partition=cluster.partition_label(parts[0]), trays=n) + CLAUSES + alternatives
    if len(racks) == 1:
        return say(
            ACROSS_RACK_PARTITIONS,
            trays=n,
            rack=cluster.rack_name[racks[0]],
            parts=len(parts),
            topology=request.topology,
        )
    if not cluster.fabric.empty:
        words = _fabric_words(cluster, request, racks)
        if words:
            return words
    return say(ACROSS_RACKS, trays=n, racks=len(racks), parts=len(parts))


def _packed_words(cluster: Cluster, request: Request, placement: Placement, parts, r: int) -> str:
    """Why unit packing (`Request.pack`) put a job of at most one rack where it is, or "" when no tray was
    opened for it (a small job on a partly used tray: the ordinary words)."""
    unit = cluster.rack_groups[r][-1]
    free = cluster.group_whole[cluster.part_owner[parts[0]]][-1][unit]
    name = cluster.group_names[-1][unit]
    if request.small:
        ((t, _),) = placement
        if cluster.tray_free[t] < GPUS_PER_TRAY:
            return ""
        return say(PACKED_FREE_TRAY, partition=cluster.partition_label(parts[0]), unit=name, free=free)
    if len(parts) == 1:
        return say(
            PACKED_PARTITION,
            partition=cluster.partition_label(parts[0]),
            unit=name,
            trays=request.trays,
            free=free,
        )
    return say(
        PACKED_RACK,
        trays=request.trays,
        rack=cluster.rack_name[r],
        parts=len(parts),
        unit=name,
        free=free,
    )


def placed_level(cluster: Cluster, placement: Placement) -> str | None:
    """The narrowest fabric level whose one group holds the whole placement ("unit", "spine"), "rack" when
    it is on one rack, None when it spans the site or a rack the fabric does not know."""
    racks = {cluster.rack_name[cluster.tray_rack[t]] for t, _ in placement}
    if len(racks) == 1:
        return RACK
    return cluster.fabric.common_level(racks)


def _fabric_words(cluster: Cluster, request: Request, racks: list[int]) -> str:
    """Which fabric level a multi-rack placement got and why (read before it is allocated), or "" when a
    rack the fabric does not know is among `racks`."""
    groups = [cluster.rack_groups[r] for r in racks]
    if any(not g for g in groups):
        return ""
    n = request.trays
    owners = cluster.usable_owners(request.department, request.borrow)
    depth = next(
        (d for d in range(len(cluster.fabric.levels) - 1, -1, -1) if len({g[d] for g in groups}) == 1), None
    )
    if depth is None:
        return say(ACROSS_SPINES, gpus=n * GPUS_PER_TRAY, spines=len({g[0] for g in groups}))
    g = groups[0][depth]
    free = sum(cluster.group_whole[owner][depth][g] for owner in owners)
    name = cluster.group_names[depth][g]
    if depth == len(cluster.fabric.levels) - 1:
        return say(IN_UNIT, trays=n, racks=len(racks), unit=name, free=free)
    units = len({gs[depth + 1] for gs in groups})
    return say(IN_SPINE, gpus=n * GPUS_PER_TRAY, units=units, spine=name, free=free)


ALTERNATIVES_SHOWN = 3  # partitions named per reason in `_alternatives` (then how many more)


def _alternatives(cluster: Cluster, owners, n: int, chosen: int) -> str:
    """What else could have taken an n-tray job best fit put in partition `chosen`, and why it did not, each
    reason only for the partitions it is true of: larger ones are kept for larger jobs; equally small ones of
    the same owner lose the tie-break (a bucket keeps its partitions in the order they reached its number of
    free trays, and `_best_partition` takes the first); those of an owner later in `owners` (the department's
    own, shared, borrowed) come later whatever their size. Counted per bucket, the first few named: a
    sentence per start must not visit every partition of the fleet (10,000 racks: tens of thousands)."""
    size, owner = cluster.part_whole[chosen], cluster.part_owner[chosen]
    own_rank = owners.index(owner)
    # Per reason: [how many partitions, the first ALTERNATIVES_SHOWN of them named].
    larger: list = [0, []]
    tied: list = [0, []]
    later: list = [0, []]
    for rank, whose in enumerate(owners):
        for k, bucket in enumerate(cluster.part_buckets[whose][n:], start=n):
            if not bucket:
                continue
            reason = later if rank > own_rank else tied if k == size else larger
            reason[0] += len(bucket) - (chosen in bucket)
            names = reason[1]
            for p in bucket:
                if len(names) >= ALTERNATIVES_SHOWN:
                    break
                if p != chosen:
                    names.append(f"{cluster.partition_label(p)} ({k})")
    clauses = [
        say(plural(count, one, many), others=count, next=listed(names, ALTERNATIVES_SHOWN, total=count))
        for (count, names), one, many in (
            (tied, TIED_ONE, TIED_MANY),
            (larger, OTHERS_ONE, OTHERS_MANY),
            (later, LATER_OWNER_ONE, LATER_OWNER_MANY),
        )
        if count
    ]
    return CLAUSES.join(clauses) if clauses else NO_OTHER


# --- rackplane ---------------------------------------------------------------------------------------


def _best_partition(cluster: Cluster, n: int, owners, pack: bool = False) -> int | None:
    packing = pack and not cluster.fabric.empty
    for owner in owners:
        if packing:
            p = _packed(cluster, n, owner)
            if p is not None:
                return p
            continue
        buckets = cluster.part_buckets[owner]
        for k in range(n, len(buckets)):
            if buckets[k]:
                return next(iter(buckets[k]))
    return None


def _packed(cluster: Cluster, n: int, owner) -> int | None:
    """Unit packing (module docstring): of `owner`'s partitions with n whole free trays or more, one on a
    rack outside the fabric first, else one in the fullest scalable unit that has one (by the whole free
    trays of `owner`'s partitions there: `Cluster.unit_buckets`, so only the units of one count are
    visited, never the fleet); of equally full units' partitions, the best fit (fewest free trays; on a tie,
    the one that reached that count first, as best fit takes it without a fabric). None when no partition of
    `owner` has n."""
    whole, part_owner, rack_parts, moved = (
        cluster.part_whole,
        cluster.part_owner,
        cluster.rack_parts,
        cluster.part_moved,
    )
    best: int | None = None

    def fits(racks) -> bool:
        """Whether `racks` have a partition with n; `best` becomes the best fit so far."""
        nonlocal best
        found = False
        for r in racks:
            for p in rack_parts[r]:
                if part_owner[p] == owner and whole[p] >= n:
                    found = True
                    if best is None or (whole[p], moved[p]) < (whole[best], moved[best]):
                        best = p
        return found

    if fits(cluster.outside_fabric):
        return best
    buckets = cluster.unit_buckets[owner]
    for k in range(n, len(buckets)):
        for unit in buckets[k]:
            fits(cluster.group_racks[-1][unit])
        if best is not None:  # the fullest units with room: no fuller one is left
            return best
    return None


def _take(cluster: Cluster, p: int, n: int) -> list[tuple[int, int]]:
    # Lowest slots first: trays of one job stay together in the rack.
    return [(t, GPUS_PER_TRAY) for t in sorted(cluster.part_free[p])[:n]]


def _small(cluster: Cluster, request: Request) -> Placement | None:
    owners = cluster.usable_owners(request.department, request.borrow)
    for owner in owners:
        partial = cluster.partial[owner]
        # Up to GPUS_PER_TRAY: free trays whose fabric is unsettled serve small jobs before whole trays.
        for free in range(request.gpus, GPUS_PER_TRAY + 1):
            if partial[free]:
                return ((next(iter(partial[free])), request.gpus),)
    p = _best_partition(cluster, 1, owners, request.pack)
    if p is None:
        return None
    return ((min(cluster.part_free[p]), request.gpus),)


def _rackplane(cluster: Cluster, request: Request) -> Placement | None:
    n = request.trays
    owners = cluster.usable_owners(request.department, request.borrow)
    p = _best_partition(cluster, n, owners, request.pack)
    if p is not None:
        return tuple(_take(cluster, p, n))
    if request.topology == PARTITION:
        return None
    placed = _best_rack(cluster, n, request.department, owners, request.pack)
    if placed is not None or request.topology == RACK:
        return placed
    if not cluster.fabric.empty:
        return _outward(cluster, n, owners, request.within)
    return _span(cluster, n, owners)


# --- the compute fabric: expanding outward only when necessary ------------------------------------------


def _best_group(cluster: Cluster, depth: int, n: int, owners) -> tuple[int, int] | None:
    """(group, its whole free trays) of the group at `depth` with the fewest whole free trays usable by
    `owners` that still has n (best fit; the first in fabric order on a tie), or None. O(groups x owners)."""
    counts = [cluster.group_whole[owner][depth] for owner in owners]
    best: tuple[int, int] | None = None
    for g in range(len(cluster.group_names[depth])):
        free = sum(count[g] for count in counts)
        if free >= n and (best is None or free < best[1]):
            best = (g, free)
    return best


def _outward(cluster: Cluster, n: int, owners, within: str | None) -> Placement | None:
    """n whole trays inside the narrowest fabric group that has them (unit, then spine group), else
    anywhere; None when `within` names a level no group of which has them yet (the job waits)."""
    levels = cluster.fabric.levels
    for depth in range(len(levels) - 1, -1, -1):
        best = _best_group(cluster, depth, n, owners)
        if best is not None:
            return _fill_group(cluster, cluster.group_racks[depth][best[0]], n, owners)
        if levels[depth] == within:
            return None
    return _span(cluster, n, owners)


def _fill_group(cluster: Cluster, racks: list[int], n: int, owners) -> Placement:
    """n whole trays from the group's `racks`: the racks with the most usable free trays first (fewest
    racks), in each its largest free partitions first (fewest partitions); the group has n."""
    rank = {owner: i for i, owner in enumerate(owners)}

    def usable(r: int) -> list[int]:
        return [p for p in cluster.rack_parts[r] if cluster.part_owner[p] in rank and cluster.part_whole[p]]

    free = {r: sum(cluster.part_whole[p] for p in usable(r)) for r in racks}
    chosen: list[tuple[int, int]] = []
    for r in sorted(racks, key=lambda r: -free[r]):
        for p in sorted(usable(r), key=lambda p: (rank[cluster.part_owner[p]], -cluster.part_whole[p])):
            chosen.extend(_take(cluster, p, n - len(chosen)))
            if len(chosen) == n:
                return tuple(chosen)
    raise AssertionError("the group's whole free trays were counted wrong")


def _fill(cluster: Cluster, partitions, n: int) -> tuple[tuple[int, int], ...]:
    """Take n whole trays from the given partitions, fullest first (fewest partitions)."""
    chosen: list[tuple[int, int]] = []
    for p in sorted(partitions, key=lambda p: -cluster.part_whole[p]):
        if len(chosen) == n:
            break
        chosen.extend(_take(cluster, p, n - len(chosen)))
    return tuple(chosen)


def _best_rack(cluster: Cluster, n: int, department, owners, pack: bool = False) -> Placement | None:
    # Racks with the department's own partitions: few, so counted directly (own + shared trays).
    best_rack = _fewest_that_fit(cluster, n, owners, [department] if department is not None else [])
    if best_rack is None:
        for k in range(n, len(cluster.rack_buckets)):
            if cluster.rack_buckets[k]:
                if pack and not cluster.fabric.empty:
                    best_rack = _packed_rack(cluster, n)
                else:
                    best_rack = next(iter(cluster.rack_buckets[k]))
                break
    if best_rack is None:
        # Borrowed work: racks holding other departments' dedicated partitions (few), their trays counted with
        # the rack's shared ones, as why_not counts "the most in one rack".
        others = [owner for owner in owners if owner is not None and owner != department]
        best_rack = _fewest_that_fit(cluster, n, owners, others)
    if best_rack is None:
        return None
    usable = [p for p in cluster.rack_parts[best_rack] if cluster.part_owner[p] in owners]
    return _fill(cluster, usable, n)


def _packed_rack(cluster: Cluster, n: int) -> int | None:
    """Unit packing for a job spread over one rack's shared partitions: a rack outside the fabric with n
    whole free shared trays first, else, in the fullest scalable units that have one (by their shared whole
    free trays), the rack with the fewest that still has n."""
    fits = [r for r in cluster.outside_fabric if cluster.rack_whole[r] >= n]
    buckets = cluster.unit_buckets[None]
    for k in range(n, len(buckets)):
        if fits:
            break
        fits = [r for unit in buckets[k] for r in cluster.group_racks[-1][unit] if cluster.rack_whole[r] >= n]
    return min(fits, key=lambda r: cluster.rack_whole[r]) if fits else None


def _fewest_that_fit(cluster: Cluster, n: int, owners, holders) -> int | None:
    """Of the racks holding a partition dedicated to one of `holders`, the one with the fewest whole free
    trays in partitions of `owners` that still has `n` (the first such rack on a tie); None when none has."""
    best_rack, best_free = None, None
    for holder in holders:
        for r in cluster.owner_racks.get(holder, ()):
            parts = cluster.rack_parts[r]
            free = sum(cluster.part_whole[p] for p in parts if cluster.part_owner[p] in owners)
            if free >= n and (best_free is None or free < best_free):
                best_rack, best_free = r, free
    return best_rack


def _span(cluster: Cluster, n: int, owners) -> Placement | None:
    if sum(cluster.whole_by_owner[owner] for owner in owners) < n:
        return None
    chosen: list[tuple[int, int]] = []
    for owner in owners:
        buckets = cluster.part_buckets[owner]
        for k in range(len(buckets) - 1, 0, -1):
            for p in list(buckets[k]):
                chosen.extend(_take(cluster, p, n - len(chosen)))
                if len(chosen) == n:
                    return tuple(chosen)
    return None


# --- baselines (scan the trays in cluster order) -----------------------------------------------------
#
# The scans stop at the first trays that fit, and start only when the indexes say something fits: a request
# that cannot be met costs a few lookups, not a scan of the whole cluster.


def _free_whole(cluster: Cluster, t: int, request: Request) -> bool:
    return (
        not cluster.tray_held[t]
        and cluster.is_whole(t)
        and cluster.usable(t, request.department, request.borrow)
    )


def _first_tray(cluster: Cluster, request: Request) -> Placement | None:
    owners = cluster.usable_owners(request.department, request.borrow)
    if not any(cluster.whole_by_owner[owner] for owner in owners) and not any(
        cluster.partial[owner][free] for owner in owners for free in range(request.gpus, GPUS_PER_TRAY + 1)
    ):
        return None
    for t in range(len(cluster)):
        if (
            cluster.tray_free[t] >= request.gpus
            and not cluster.tray_held[t]
            and cluster.usable(t, request.department, request.borrow)
        ):
            return ((t, request.gpus),)
    return None


def _first_trays(cluster: Cluster, request: Request) -> Placement | None:
    owners = cluster.usable_owners(request.department, request.borrow)
    if sum(cluster.whole_by_owner[owner] for owner in owners) < request.trays:
        return None
    chosen = []
    for t in range(len(cluster)):
        if _free_whole(cluster, t, request):
            chosen.append((t, GPUS_PER_TRAY))
            if len(chosen) == request.trays:
                return tuple(chosen)
    return None


def _smallest_block(cluster: Cluster, request: Request) -> Placement | None:
    n = request.trays
    owners = cluster.usable_owners(request.department, request.borrow)
    best = None
    for p, trays in enumerate(cluster.part_trays):
        whole = cluster.part_whole[p]
        if whole >= n and cluster.part_owner[p] in owners:
            key = (len(trays), whole, p)
            if best is None or key < best:
                best = key
    if best is None:
        return None
    return tuple(_take(cluster, best[2], n))


# --- words -------------------------------------------------------------------------------------------


def describe(cluster: Cluster, placement: Placement) -> dict:
    """Partitions and racks a placement spans (for metrics and the job page)."""
    partitions = {cluster.tray_part[t] for t, _ in placement}
    racks = {cluster.tray_rack[t] for t, _ in placement}
    return {"partitions": len(partitions), "racks": len(racks)}


def fits_when_settled(cluster: Cluster, request: Request) -> bool:
    """True when `request` (multi-tray) would fit now but for free trays whose fabric is unsettled: it waits
    for their nodes to report their partition, not for running work to end."""
    if request.small:
        return False
    unsettled = cluster.unsettled_free(cluster.usable_owners(request.department, request.borrow))
    if request.topology == PARTITION:
        # A degraded partition's trays are not waiting for a report: they wait for the fault to clear.
        return any(
            cluster.part_whole[p] + len(trays) >= request.trays
            for p, trays in unsettled.items()
            if p not in cluster.part_degraded
        )
    return False


def why_not(cluster: Cluster, request: Request) -> str:
    """Why `request` does not fit now, in plain words (after `place` returned None)."""
    owners = cluster.usable_owners(request.department, request.borrow)
    if request.small:
        if cluster.free_gpus == 0:
            return NO_GPU_FREE
        return say(plural(request.gpus, NO_TRAY_HAS_ONE, NO_TRAY_HAS_MANY), gpus=request.gpus)
    n = request.trays
    unsettled = cluster.unsettled_free(owners)
    largest, where = cluster.largest_free_partition(owners)
    block = (
        say(
            plural(largest, LARGEST_BLOCK_ONE, LARGEST_BLOCK_MANY),
            trays=largest,
            partition=cluster.partition_label(where),
        )
        if where is not None
        else NO_FREE_TRAY
    )
    if request.topology == PARTITION:
        # A partition that would fit but for its unsettled trays: that is the reason, not the block size.
        fits = [p for p, trays in unsettled.items() if cluster.part_whole[p] + len(trays) >= n]
        if fits:
            p = max(fits, key=lambda p: (cluster.part_whole[p] + len(unsettled[p]), -p))
            return _unsettled_words(cluster, p, unsettled[p])
        return say(NO_PARTITION_HAS, trays=n) + CLAUSES + block
    if request.topology == RACK:
        most = max(
            (
                sum(cluster.part_whole[p] for p in parts if cluster.part_owner[p] in owners)
                for parts in cluster.rack_parts
            ),
            default=0,
        )
        return say(NO_RACK_HAS, trays=n, most=most) + CLAUSES + block + _left_out(cluster, unsettled)
    free = sum(cluster.whole_by_owner[owner] for owner in owners)
    # Waiting for one unit is the reason only when spanning units would fit: a cluster short of trays
    # as a whole says so, as it does with no fabric.
    if free >= n and request.within is not None and request.within in cluster.fabric.levels:
        depth = cluster.fabric.levels.index(request.within)
        most = max(
            (
                sum(cluster.group_whole[owner][depth][g] for owner in owners)
                for g in range(len(cluster.group_names[depth]))
            ),
            default=0,
        )
        template = NO_UNIT_YET if depth == len(cluster.fabric.levels) - 1 else NO_SPINE_YET
        return say(template, trays=n, most=most) + _left_out(cluster, unsettled)
    return say(plural(free, WHOLE_TRAYS_ONE_FREE, WHOLE_TRAYS_FREE), trays=n, free=free) + _left_out(
        cluster, unsettled
    )


NAMED_TRAYS = 9  # trays named in a reason; the rest are counted


def _hostnames(cluster: Cluster, trays: list[int]) -> str:
    return listed([cluster.tray_host[t] for t in sorted(trays)], NAMED_TRAYS)


def _unsettled_words(cluster: Cluster, p: int, trays: list[int]) -> str:
    total = cluster.part_whole[p] + len(trays)
    if p in cluster.part_degraded:
        return say(
            plural(total, DEGRADED_ONE, DEGRADED_MANY),
            partition=cluster.partition_label(p),
            total=total,
            why=cluster.part_degraded[p],
        )
    return say(
        plural(total, UNSETTLED_ONE, UNSETTLED_MANY),
        partition=cluster.partition_label(p),
        total=total,
        count=len(trays),
        hosts=_hostnames(cluster, trays),
    )


def _left_out(cluster: Cluster, unsettled: dict[int, list[int]]) -> str:
    degraded = [p for p in unsettled if p in cluster.part_degraded]
    words = ""
    if degraded:
        names = ", ".join(cluster.partition_label(p) for p in degraded[:NAMED_TRAYS])
        words = CLAUSES + say(DEGRADED_LEFT_OUT, names=names)
        unsettled = {p: trays for p, trays in unsettled.items() if p not in cluster.part_degraded}
    trays = [t for group in unsettled.values() for t in group]
    if not trays:
        return words
    return (
        words
        + CLAUSES
        + say(
            plural(len(trays), UNSETTLED_LEFT_OUT_ONE, UNSETTLED_LEFT_OUT_MANY),
            count=len(trays),
            hosts=_hostnames(cluster, trays),
        )
    )
