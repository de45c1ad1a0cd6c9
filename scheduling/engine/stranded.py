"""Stranded NVLink capacity: the free GPUs no waiting gang can use now, and the largest gang that could start.

Pure Python (no Django import), read from the engine's `Cluster` indexes: the portal computes it after every
scheduling pass (scheduling.services.passes), the simulator after every instant with waiting jobs
(scheduling.simulator), both on the cluster the engine has just decided on. docs/metrics.md and
docs/simulator.md define the figures for readers; this docstring is the reference.

Per rack (and summed, or the largest, for the fleet):

* **free GPUs**: schedulable GPUs no running job holds, on trays not held out of the indexes (a node that
  stopped reporting under the node-silent rule's "hold", or a reservation during a pass):
  ``Cluster.free_gpus`` split by rack.
* **largest gang in one partition**: the most GPUs one job could be given now inside one NVLink partition of
  the rack, by someone: 4 x the most whole free trays of one partition (``Cluster.part_whole``, whatever the
  partition's owner: its own department's work, or borrowed work, may run there), or, when no partition has
  a whole free tray, the most free GPUs of one tray (a 1-4 GPU job). ``place`` places a request of exactly
  that size (topology ``partition``, borrowed) and none larger (tests/scheduling/test_stranded.py).
* **largest gang in one rack**: the same inside one rack, partitions spanned (topology ``rack``): 4 x the
  whole free trays of all the rack's partitions, or the partition figure when larger.
* **stranded GPUs**: free GPUs that no waiting job could be given now, by the engine's own placement rules
  (the rackplane policy's): a small job (1-4 GPUs) may use a tray with at least its GPUs free; a multi-tray
  job only whole free trays, in one partition with enough of them (any topology), or in one rack whose
  trays it may use number enough (topology ``rack``: the department's own and shared partitions in a rack
  where it has dedicated ones, else the shared ones: `placement._best_rack`), or anywhere (topology
  ``any``, when it fits at all); always in partitions `Cluster.usable_owners` lets its department use
  (borrowed work: every partition). Whether a shape fits at all is asked of `place` itself; a shape that
  does not fit now can use no tray now. Quota is left aside: a job waiting for its department's limit still
  counts as able to use the trays its shape fits (those GPUs are idle by policy, not stranded by NVLink).
  **When nothing waits, nothing is stranded**: the figure is 0, and the largest-gang figures still say what
  could start.

Each stranded GPU is given one cause, decided in this order:

* ``dedicated``: its partition is dedicated to a department and no waiting job may use that department's
  partitions (none of its own waits, and no borrower).
* on a tray that is not whole free (its free GPUs fit no waiting small job, and multi-tray jobs need whole
  trays): ``unavailable`` when the tray has unschedulable GPUs (down, drained, unhealthy) or an unsettled
  fabric (a partition change in progress, drift, a degraded partition), else ``running``: work running on
  the tray's other GPUs.
* on a whole free tray: its partition has fewer whole free trays than ``n``, the smallest waiting multi-tray
  job (in trays) that may use the partition; then ``fragments`` when the rack's whole free trays in the
  partitions of the same owner number ``n`` or more (merging the rack's free trays would fit it now), or
  the partition has fewer than ``n`` trays at all (only a re-carve fits it there); else ``unavailable``
  when the partition's trays that hold no work but are not whole free (down, drained, unhealthy, unsettled,
  held) would make up ``n``; else ``running``: the partition fits the job once work running there ends.

Cost: one walk of the partitions and of the trays that are not whole free (the ``partial`` index), and a
look at the trays of partitions that strand whole trays: about 3 ms at 1,000 racks (`make bench`'s
`placement.stranded`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

from core.hardware import GPUS_PER_TRAY
from scheduling.engine.cluster import Cluster, Owner
from scheduling.engine.placement import ANY, RACK, Request, place

FRAGMENTS, UNAVAILABLE, RUNNING, DEDICATED = "fragments", "unavailable", "running", "dedicated"
CAUSES = (FRAGMENTS, UNAVAILABLE, RUNNING, DEDICATED)
WORST_RACKS = 10  # racks listed by `Stranded.worst` on the dashboard and in the pass's summary


@dataclass
class RackStranded:
    """One rack's figures (module docstring)."""

    rack: str
    free_gpus: int = 0
    stranded_gpus: int = 0
    largest_partition_gang: int = 0
    largest_rack_gang: int = 0
    by_cause: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0))

    def as_dict(self) -> dict:
        return {
            "rack": self.rack,
            "free_gpus": self.free_gpus,
            "stranded_gpus": self.stranded_gpus,
            "largest_partition_gang": self.largest_partition_gang,
            "largest_rack_gang": self.largest_rack_gang,
            "by_cause": dict(self.by_cause),
        }


@dataclass
class Stranded:
    """Every rack's figures and the fleet's (each summed once: 10,000 racks), as `stranded` made them, not
    changed after. `waiting_shapes`: distinct waiting requests it was judged against (0: nothing waits, so
    nothing is stranded)."""

    racks: list[RackStranded]
    waiting_shapes: int

    @cached_property
    def free_gpus(self) -> int:
        return sum(r.free_gpus for r in self.racks)

    @cached_property
    def stranded_gpus(self) -> int:
        return sum(r.stranded_gpus for r in self.racks)

    @cached_property
    def largest_partition_gang(self) -> int:
        return max((r.largest_partition_gang for r in self.racks), default=0)

    @cached_property
    def largest_rack_gang(self) -> int:
        return max((r.largest_rack_gang for r in self.racks), default=0)

    @cached_property
    def by_cause(self) -> dict[str, int]:
        return {cause: sum(r.by_cause[cause] for r in self.racks) for cause in CAUSES}

    @cached_property
    def racks_stranding(self) -> int:
        """Racks with at least one stranded GPU."""
        return sum(1 for r in self.racks if r.stranded_gpus)

    def worst(self, n: int = WORST_RACKS) -> list[RackStranded]:
        """The racks stranding the most GPUs (then the most free ones, then by name); none stranding none."""
        ranked = sorted(
            (r for r in self.racks if r.stranded_gpus), key=lambda r: (-r.stranded_gpus, -r.free_gpus, r.rack)
        )
        return ranked[:n]

    def as_dict(self, worst: int = WORST_RACKS) -> dict:
        """The fleet's figures and the `worst` racks', as JSON (the pass's summary, results.json)."""
        return {
            "free_gpus": self.free_gpus,
            "stranded_gpus": self.stranded_gpus,
            "by_cause": self.by_cause,
            "largest_partition_gang": self.largest_partition_gang,
            "largest_rack_gang": self.largest_rack_gang,
            "waiting_shapes": self.waiting_shapes,
            "racks": len(self.racks),
            "racks_stranding": self.racks_stranding,
            "worst_racks": [r.as_dict() for r in self.worst(worst)],
        }


def _lower(table: dict, key, value: int) -> None:
    if value < table.get(key, value + 1):
        table[key] = value


class _Shapes:
    """What the waiting requests ask of each owner's partitions (owner: a department, or None for shared)."""

    def __init__(self, cluster: Cluster, requests: Iterable[Request]):
        shapes = set(requests)
        self.count = len(shapes)
        self.wanted: set[Owner] = set()  # owners some waiting job may use
        self.multi_min: dict[Owner, int] = {}  # smallest waiting multi-tray job (trays), fitting or not
        # Of the shapes that fit now (`place`): the smallest small job, the smallest multi-tray job
        # (a partition with that many whole free trays serves it), the owners an `any` job's trays may
        # come from, and the `rack` jobs (owners, department, trays).
        self.small_min: dict[Owner, int] = {}
        self.part_min: dict[Owner, int] = {}
        self.anywhere: set[Owner] = set()
        self.rack_shapes: list[tuple[frozenset, str | None, int]] = []
        for q in shapes:
            owners = cluster.usable_owners(q.department, q.borrow)
            self.wanted.update(owners)
            if not q.small:
                for o in owners:
                    _lower(self.multi_min, o, q.trays)
            if place(cluster, q) is None:
                continue
            for o in owners:
                _lower(self.small_min if q.small else self.part_min, o, q.gpus if q.small else q.trays)
            if q.topology == ANY and not q.small:
                self.anywhere.update(owners)
            elif q.topology == RACK and not q.small:
                self.rack_shapes.append((frozenset(owners), q.department, q.trays))


def stranded(cluster: Cluster, requests: Iterable[Request]) -> Stranded:
    """Per rack and for the fleet: free GPUs, stranded ones by cause, the largest gangs (module docstring).
    `requests`: the waiting jobs' requests (duplicates are judged once). Does not change the cluster."""
    shapes = _Shapes(cluster, requests)
    waiting = shapes.count > 0
    part_whole, part_owner = cluster.part_whole, cluster.part_owner
    tray_free, tray_cap, tray_settled = cluster.tray_free, cluster.tray_cap, cluster.tray_settled
    partial_by_rack: dict[int, list[int]] = {}
    for buckets in cluster.partial.values():
        for g in range(1, GPUS_PER_TRAY + 1):
            for t in buckets[g]:
                partial_by_rack.setdefault(cluster.tray_rack[t], []).append(t)
    racks = []
    for r, parts in enumerate(cluster.rack_parts):
        figures = RackStranded(cluster.rack_name[r])
        by_cause = figures.by_cause
        whole_total = 0
        most = 0
        for p in parts:
            k = part_whole[p]
            whole_total += k
            most = max(most, k)
        free = GPUS_PER_TRAY * whole_total
        small_most = 0
        for t in partial_by_rack.get(r, ()):
            g = tray_free[t]
            free += g
            small_most = max(small_most, g)
            if not waiting:
                continue
            owner = part_owner[cluster.tray_part[t]]
            if g >= shapes.small_min.get(owner, GPUS_PER_TRAY + 1):
                continue
            if owner is not None and owner not in shapes.wanted:
                cause = DEDICATED
            elif tray_cap[t] < GPUS_PER_TRAY or not tray_settled[t]:
                cause = UNAVAILABLE
            else:
                cause = RUNNING
            by_cause[cause] += g
        if waiting and whole_total:
            _strand_whole(cluster, shapes, r, parts, by_cause)
        figures.free_gpus = free
        figures.stranded_gpus = sum(by_cause.values())
        figures.largest_partition_gang = max(GPUS_PER_TRAY * most, small_most)
        figures.largest_rack_gang = max(GPUS_PER_TRAY * whole_total, figures.largest_partition_gang)
        racks.append(figures)
    return Stranded(racks, shapes.count)


def _rack_usable(cluster: Cluster, shapes: _Shapes, r: int, parts: list[int]) -> set[Owner]:
    """Owners whose whole free trays in rack r a fitting `rack` job may use (`placement._best_rack`'s rule:
    in a rack holding its department's dedicated partitions, every partition it may use counts; elsewhere
    the shared ones)."""
    usable: set[Owner] = set()
    for owners, department, n in shapes.rack_shapes:
        if department is not None and r in cluster.owner_racks.get(department, ()):
            if sum(cluster.part_whole[p] for p in parts if cluster.part_owner[p] in owners) >= n:
                usable |= owners
        elif cluster.rack_whole[r] >= n:
            usable.add(None)
    return usable


def _strand_whole(cluster: Cluster, shapes: _Shapes, r: int, parts: list[int], by_cause: dict) -> None:
    """Count the rack's whole free trays no waiting job may use, by cause (module docstring)."""
    rack_usable = _rack_usable(cluster, shapes, r, parts) if shapes.rack_shapes else set()
    same_owner: dict[Owner, int] | None = None
    for p in parts:
        k = cluster.part_whole[p]
        if not k:
            continue
        owner = cluster.part_owner[p]
        if (
            owner in shapes.small_min
            or owner in shapes.anywhere
            or owner in rack_usable
            or k >= shapes.part_min.get(owner, len(cluster.part_trays[p]) + 1)
        ):
            continue
        n = shapes.multi_min.get(owner)
        if n is None:  # nobody waiting may use this owner's partitions (else a small job would fit here)
            cause = DEDICATED
        else:
            if same_owner is None:
                same_owner = {}
                for q in parts:
                    o = cluster.part_owner[q]
                    same_owner[o] = same_owner.get(o, 0) + cluster.part_whole[q]
            trays = cluster.part_trays[p]
            if same_owner[owner] >= n or len(trays) < n:
                cause = FRAGMENTS
            else:
                # Trays holding no work that are not counted whole free: down, drained, unhealthy,
                # unsettled, or held out (a held tray's index entry is gone even when it is whole).
                idle = sum(
                    1
                    for t in trays
                    if not cluster.tray_jobs[t] and (cluster.tray_held[t] or not cluster.is_whole(t))
                )
                cause = UNAVAILABLE if k + idle >= n else RUNNING
        by_cause[cause] += GPUS_PER_TRAY * k
