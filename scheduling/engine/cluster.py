"""The cluster as the placement engine sees it: racks, NVLink partitions, trays and their free GPUs.

Pure Python (no Django import): the portal builds one from the database for a scheduling pass, the
simulator keeps one for a whole trace replay. Both call the same placement and admission code on it.

A placement decision must not scan the cluster (72,000 GPUs at 1,000 racks), so every change of a tray's
free GPUs keeps these indexes exact, each update O(1):

* ``part_buckets[owner][k]``: the NVLink partitions of that owner (a department name, or None for shared
  partitions) with exactly k whole free trays. Best fit is the first non-empty bucket at k >= n.
* ``part_free[p]``: the whole free trays of partition p.
* ``rack_buckets[k]``: the racks with exactly k whole free trays in shared partitions.
* ``partial[owner][g]``: trays with exactly g free GPUs that are not whole free: partly used trays, trays
  with an unhealthy GPU (g = 1-3), and free trays whose fabric is unsettled (g = 4, below). Small jobs pack
  into these first.

* ``group_whole[owner][depth][g]``: whole free trays of that owner's partitions in fabric group g at level
  ``fabric.levels[depth]`` (a scalable unit, a spine group: core.fabric), for multi-rack placement that
  expands outward only when necessary (scheduling.engine.placement). Empty without a fabric.
* ``unit_buckets[owner][k]``: the scalable units (the fabric's lowest level) where that owner's partitions
  have exactly k whole free trays, for unit packing (the fullest unit with room: the first non-empty bucket
  at k >= n whose unit has a partition with n). Empty without a fabric.

Ordered sets are dicts (insertion-ordered, O(1) add/remove), so a run is deterministic.

A tray is *whole free* when it has all ``GPUS_PER_TRAY`` GPUs schedulable and free, and its fabric is
settled (``TraySpec.fabric_ok``: its GPUs report their partition's clique and completed fabric
registration). Multi-tray jobs take whole free trays only: a job spread over trays needs the NVLink
partition it was promised, and a tray whose GPUs report another clique (a fabric change in progress, or
drift) is not in it. Single-tray jobs may use unsettled trays. Trays can be *held* (kept out of the indexes)
by a reservation for the rest of a pass.

**Re-carving** (scheduling.engine.recarve): `replace_partitions` swaps wholly idle partitions of one rack,
and idle trays taken out of partitions that keep their running ones, for new partitions over those trays;
those trays are then *changing* (held and unsettled: no job of any size
until `end_change`, which the fabric's report of the new cliques brings) so the partition a waiting gang
was re-carved for is still whole when the change settles. A changing tray stays held through a pass's own
holds and unholds. The old partitions' indexes stay allocated but empty (no trays, in no bucket and no
rack), so partition indexes held elsewhere never shift.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import groupby, repeat
from operator import attrgetter
from typing import NamedTuple

from core.fabric import Fabric
from core.hardware import GPUS_PER_TRAY

Owner = str | None  # a department name for a dedicated partition, None for a shared one


class TraySpec(NamedTuple):
    """One compute tray as the cluster is built from: the order of specs is the cluster order. A named
    tuple (a cold read at 10,000 racks makes 180,000: ~100 ms less than a frozen dataclass)."""

    hostname: str
    rack: str
    partition: str  # NVLink partition name, unique within its rack
    capacity: int = GPUS_PER_TRAY  # schedulable GPUs (0 when the tray is down or drained)
    owner: Owner = None  # the department the partition is dedicated to
    fabric_ok: bool = True  # False: a GPU reports another clique than the partition's, or unfinished fabric


_FIELDS = tuple(attrgetter(name) for name in TraySpec._fields)


def _refuse(specs: list[TraySpec]) -> None:
    """Raise for the first tray that is listed twice, out of range, or of another owner than its
    partition's first tray (`Cluster._add_trays`' checks, tray by tray)."""
    hosts: set[str] = set()
    owner_of: dict[tuple[str, str], Owner] = {}
    for spec in specs:
        if spec.hostname in hosts:
            raise ValueError(f"tray {spec.hostname} is listed twice")
        if not 0 <= spec.capacity <= GPUS_PER_TRAY:
            raise ValueError(f"tray {spec.hostname}: capacity must be 0-{GPUS_PER_TRAY} GPUs")
        hosts.add(spec.hostname)
        key = (spec.rack, spec.partition)
        if owner_of.setdefault(key, spec.owner) != spec.owner:
            raise ValueError(f"partition {spec.rack} {spec.partition} has trays of different owners")
    raise AssertionError("no tray to refuse")  # never: the caller found one


class TrayColumns(NamedTuple):
    """The trays as columns, one list per TraySpec field, in cluster order (`Cluster(columns)`): a cold read
    at 10,000 racks has its rows as columns already, and 180,000 TraySpecs made only to be taken apart again
    cost ~0.1 s."""

    hostnames: list[str]
    racks: list[str]
    partitions: list[str]
    capacities: list[int]
    owners: list[Owner]
    fabric_ok: list[bool]

    def specs(self) -> list[TraySpec]:
        return list(map(TraySpec, *self))


class Cluster:
    def __init__(self, trays: Iterable[TraySpec] | TrayColumns, fabric: Fabric | None = None):
        # The compute fabric above the racks (core.fabric): each known rack's groups, by level, as indexes.
        self.fabric = fabric if fabric is not None else Fabric()
        self.group_names: list[list[str]] = [[] for _ in self.fabric.levels]  # depth -> group names
        self.group_of: list[dict[str, int]] = [{} for _ in self.fabric.levels]  # depth -> name -> index
        self.group_racks: list[list[list[int]]] = [[] for _ in self.fabric.levels]  # depth -> group -> racks
        self.rack_groups: list[tuple[int, ...]] = []  # rack -> its group at each depth; () when unknown
        self.part_groups: list[tuple[int, ...]] = []  # partition -> its rack's groups
        # Trays, by index in cluster order.
        self.tray_host: list[str] = []
        self.tray_part: list[int] = []
        self.tray_rack: list[int] = []
        self.tray_cap: list[int] = []
        self.tray_free: list[int] = []
        self.tray_held: list[bool] = []
        self.tray_settled: list[bool] = []  # TraySpec.fabric_ok
        self.tray_jobs: list[dict[int, int]] = []  # tray -> {job id: GPUs it holds there}
        # Partitions.
        self.part_name: list[str] = []
        self.part_rack: list[int] = []
        self.part_owner: list[Owner] = []
        self.part_trays: list[list[int]] = []
        self.part_whole: list[int] = []  # whole free trays now
        self.part_free: list[dict[int, None]] = []
        # When each partition last changed bucket (a count of moves): of equally good partitions, the one that
        # reached its bucket first is taken, also when unit packing compares partitions of several units.
        self.part_moved: list[int] = []
        self.moves = 0
        # Partitions the health rules marked degraded (an NVLink fault): partition -> why. Their trays come
        # with fabric_ok False (no job spanning trays); the reasons name the degradation.
        self.part_degraded: dict[int, str] = {}
        # Racks.
        self.rack_name: list[str] = []
        self.rack_parts: list[list[int]] = []
        self.rack_whole: list[int] = []  # whole free trays in shared partitions
        self.host_index: dict[str, int] = {}
        self.jobs: dict[int, tuple[tuple[int, int], ...]] = {}
        self.changing: set[int] = set()  # trays whose partition is being re-carved (`replace_partitions`)

        self._add_trays(trays)
        self._build_indexes()

    # --- building ----------------------------------------------------------------------------------

    def _add_trays(self, specs: Iterable[TraySpec] | TrayColumns) -> None:
        """Append the trays in order, with their racks and partitions the first time they appear; the
        per-tray lists are filled whole (a cold pass builds 180,000 trays at 10,000 racks). A tray listed
        twice, a capacity out of range or a partition with trays of different owners is refused at the first
        tray that shows it (`_refuse`).

        The trays come partition by partition (cluster order): each run of trays of one partition is looked
        up once, its owners compared at once, and the checks made over whole lists, in C where they can be
        (~0.15 s less at 10,000 racks than a walk tray by tray)."""
        if isinstance(specs, TrayColumns):  # a cold read's rows, as columns (no TraySpec per tray)
            columns = specs
            if len({len(column) for column in columns}) > 1:
                raise ValueError("tray columns of different lengths")
        else:
            listed = list(specs)
            columns = TrayColumns(*(list(map(get, listed)) for get in _FIELDS))
        hostnames, rack_of, partition_of, capacities, owners, fabric_ok = columns
        count = len(hostnames)
        if len(set(hostnames)) < count or (
            count and not (min(capacities) >= 0 and max(capacities) <= GPUS_PER_TRAY)
        ):
            _refuse(columns.specs())
        racks: dict[str, int] = {}
        parts: dict[tuple[str, str], int] = {}
        tray_part: list[int] = []
        tray_rack: list[int] = []
        part_owner, part_rack, part_trays = self.part_owner, self.part_rack, self.part_trays
        start = 0
        for key, run in groupby(zip(rack_of, partition_of, strict=True)):
            n = len(list(run))
            p = parts.get(key)
            if p is None:
                r = racks.get(key[0])
                if r is None:
                    r = racks[key[0]] = self._add_rack(key[0])
                p = parts[key] = self._add_partition(key[1], r, owners[start])
            if owners[start : start + n].count(part_owner[p]) != n:
                _refuse(columns.specs())
            tray_part.extend(repeat(p, n))
            tray_rack.extend(repeat(part_rack[p], n))
            part_trays[p].extend(range(start, start + n))
            start += n
        self.host_index = dict(zip(hostnames, range(count), strict=True))
        self.tray_host = list(hostnames)
        self.tray_part = tray_part
        self.tray_rack = tray_rack
        self.tray_cap = list(capacities)
        self.tray_free = list(capacities)
        self.tray_held = [False] * count
        self.tray_settled = list(fabric_ok)
        self.tray_jobs = [{} for _ in range(count)]

    def _add_rack(self, name: str) -> int:
        r = len(self.rack_name)
        self.rack_name.append(name)
        self.rack_parts.append([])
        self.rack_whole.append(0)
        path = self.fabric.path(name)
        groups: list[int] = []
        for depth, group in enumerate(path or ()):
            g = self.group_of[depth].get(group)
            if g is None:
                g = self.group_of[depth][group] = len(self.group_names[depth])
                self.group_names[depth].append(group)
                self.group_racks[depth].append([])
            self.group_racks[depth][g].append(r)
            groups.append(g)
        self.rack_groups.append(tuple(groups))
        return r

    def _add_partition(self, name: str, r: int, owner: Owner) -> int:
        p = len(self.part_name)
        self.part_name.append(name)
        self.part_rack.append(r)
        self.part_owner.append(owner)
        self.part_trays.append([])
        self.part_whole.append(0)
        self.part_free.append({})
        self.part_moved.append(0)
        self.part_groups.append(self.rack_groups[r])
        self.rack_parts[r].append(p)
        return p

    def _build_indexes(self) -> None:
        """Size the buckets for the largest partition and rack, then index every tray's free GPUs."""
        self.max_partition_trays = max((len(t) for t in self.part_trays), default=0)
        self.max_rack_trays = max(
            (sum(len(self.part_trays[p]) for p in parts) for parts in self.rack_parts), default=0
        )
        self.owners: set[Owner] = {None, *self.part_owner}
        self.part_buckets: dict[Owner, list[dict[int, None]]] = {
            owner: [{} for _ in range(self.max_partition_trays + 1)] for owner in self.owners
        }
        self.rack_buckets: list[dict[int, None]] = [{} for _ in range(self.max_rack_trays + 1)]
        self.partial: dict[Owner, list[dict[int, None]]] = {
            owner: [{} for _ in range(GPUS_PER_TRAY + 1)] for owner in self.owners
        }
        self.whole_by_owner: dict[Owner, int] = dict.fromkeys(self.owners, 0)
        self.group_whole: dict[Owner, list[list[int]]] = {
            owner: [[0] * len(names) for names in self.group_names] for owner in self.owners
        }
        # Trays in each fabric group (all of them, busy or not): what a group could give a job some day.
        self.group_trays: list[list[int]] = [[0] * len(names) for names in self.group_names]
        for r, groups in enumerate(self.rack_groups):
            trays = sum(len(self.part_trays[p]) for p in self.rack_parts[r])
            for depth, g in enumerate(groups):
                self.group_trays[depth][g] += trays
        # The racks on no scalable unit of the fabric (usually none): unit packing uses them first.
        fabric = bool(self.group_names)
        self.outside_fabric = [r for r, groups in enumerate(self.rack_groups) if fabric and not groups]
        # Unit packing's index (module docstring): every unit starts with no whole free tray.
        units = self.group_trays[-1] if self.group_trays else []
        self.unit_buckets: dict[Owner, list[dict[int, None]]] = {
            owner: [dict.fromkeys(range(len(units))), *({} for _ in range(max(units, default=0)))]
            for owner in (self.owners if units else ())
        }
        self.dedicated_owners: list[str] = sorted(owner for owner in self.owners if owner is not None)
        # Racks that hold partitions dedicated to an owner (few): checked before the shared rack index.
        self.owner_racks: dict[Owner, list[int]] = {}
        for p, owner in enumerate(self.part_owner):
            if owner is not None and self.part_rack[p] not in self.owner_racks.setdefault(owner, []):
                self.owner_racks[owner].append(self.part_rack[p])
        for p in range(len(self.part_name)):
            self.part_buckets[self.part_owner[p]][0][p] = None
        for r in range(len(self.rack_name)):
            self.rack_buckets[0][r] = None
        self.capacity = sum(self.tray_cap)
        self.free_gpus = 0
        # Every tray indexed, each partition (and rack) moved once by its count of whole free trays (as
        # `unhold` moves them: the same buckets in the same order as tray by tray with `_index`).
        self.tray_held = [True] * len(self.tray_host)
        self._hold_or_unhold(range(len(self.tray_host)), False)

    # --- facts -------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.tray_host)

    def is_whole(self, t: int) -> bool:
        """All GPUs schedulable and free, and the fabric settled: a tray a multi-tray job may take."""
        return (
            self.tray_cap[t] == GPUS_PER_TRAY and self.tray_free[t] == GPUS_PER_TRAY and self.tray_settled[t]
        )

    def partition_label(self, p: int) -> str:
        return f"{self.rack_name[self.part_rack[p]]} {self.part_name[p]}"

    def usable_owners(self, department: str | None, borrow: bool = False) -> list[Owner]:
        """Whose partitions a department's jobs may use, in order: its own dedicated ones first, then shared,
        then, for borrowed work only (`borrow`: over quota, preemptible), partitions dedicated to others.

        A dedicated partition serves its owner: another department's work runs there only as borrowed work,
        and the owner's in-quota work reclaims it first (scheduling.engine.scheduler).
        """
        owners: list[Owner] = (
            [department, None] if department is not None and department in self.owners else [None]
        )
        if borrow:
            owners += [owner for owner in self.dedicated_owners if owner != department]
        return owners

    def usable(self, t: int, department: str | None, borrow: bool = False) -> bool:
        owner = self.part_owner[self.tray_part[t]]
        return owner is None or owner == department or borrow

    def dedicated_to_other(self, t: int, department: str | None) -> bool:
        """The tray is in a partition dedicated to a department other than `department`."""
        owner = self.part_owner[self.tray_part[t]]
        return owner is not None and owner != department

    # --- index maintenance -------------------------------------------------------------------------

    def _part_move(self, p: int, delta: int) -> None:
        buckets = self.part_buckets[self.part_owner[p]]
        k = self.part_whole[p]
        del buckets[k][p]
        self.part_whole[p] = k + delta
        buckets[k + delta][p] = None
        self.moves += 1
        self.part_moved[p] = self.moves
        if self.part_owner[p] is None:
            r = self.part_rack[p]
            k = self.rack_whole[r]
            del self.rack_buckets[k][r]
            self.rack_whole[r] = k + delta
            self.rack_buckets[k + delta][r] = None
        self.whole_by_owner[self.part_owner[p]] += delta
        groups = self.part_groups[p]
        if groups:
            owner = self.part_owner[p]
            counts = self.group_whole[owner]
            for depth, g in enumerate(groups):
                counts[depth][g] += delta
            unit, buckets = groups[-1], self.unit_buckets[owner]
            k = counts[-1][unit]
            del buckets[k - delta][unit]
            buckets[k][unit] = None

    def _index(self, t: int) -> None:
        if self.tray_held[t]:
            return
        free = self.tray_free[t]
        self.free_gpus += free
        if free == 0:
            return
        p = self.tray_part[t]
        if self.is_whole(t):
            self.part_free[p][t] = None
            self._part_move(p, +1)
        else:
            self.partial[self.part_owner[p]][free][t] = None

    def _unindex(self, t: int) -> None:
        if self.tray_held[t]:
            return
        free = self.tray_free[t]
        self.free_gpus -= free
        if free == 0:
            return
        p = self.tray_part[t]
        if self.is_whole(t):
            del self.part_free[p][t]
            self._part_move(p, -1)
        else:
            del self.partial[self.part_owner[p]][free][t]

    # --- changes -----------------------------------------------------------------------------------

    def allocate(self, job_id: int, trays: Iterable[tuple[int, int]]) -> None:
        """Give a job `gpus` GPUs on each `(tray, gpus)`; all or nothing."""
        trays = tuple(trays)
        if job_id in self.jobs:
            raise ValueError(f"job {job_id} already holds GPUs")
        for t, gpus in trays:
            if gpus < 1 or gpus > self.tray_free[t]:
                raise ValueError(
                    f"job {job_id}: tray {self.tray_host[t]} has {self.tray_free[t]} free GPUs, not {gpus}"
                )
        if len({t for t, _ in trays}) != len(trays):
            raise ValueError(f"job {job_id}: a tray is listed twice")
        # `_unindex`, take the GPUs, `_index`, tray by tray, with each partition moved once (see `_moved`).
        held, free_of, settled, part_of, jobs_of = self._tray_lists()
        moved: dict[int, int] = {}
        taken = 0
        for t, gpus in trays:
            free = free_of[t]
            free_of[t] = free - gpus
            jobs_of[t][job_id] = gpus
            if held[t]:
                continue  # out of every index until unheld
            taken += gpus
            p = part_of[t]
            partial = self.partial[self.part_owner[p]]
            if free == GPUS_PER_TRAY and settled[t]:  # it was whole
                del self.part_free[p][t]
                moved[p] = moved.pop(p, 0) - 1
            else:
                del partial[free][t]
            if free > gpus:  # partly used now (never whole: some GPUs are taken)
                partial[free - gpus][t] = None
        self.free_gpus -= taken
        self._moved(moved)
        self.jobs[job_id] = trays

    def allocate_all(self, jobs: Iterable[tuple[int, Iterable[tuple[int, int]]]]) -> None:
        """`allocate` of each job in turn (a cold read places 47,700 running jobs at 10,000 racks), with each
        tray re-indexed once and each partition (its rack, its unit) moved once by the sum of its moves, in
        the order of its last move: every index as job by job, order included (tests/scheduling/
        test_engine.py). The same checks and refusals, made for every job before any is placed. A held tray
        (none after a cold read) gives way to job by job."""
        listed = [(job_id, tuple(trays)) for job_id, trays in jobs]
        held, free_of, settled, part_of, jobs_of = self._tray_lists()
        if any(held[t] for _, trays in listed for t, _ in trays):
            for job_id, trays in listed:
                self.allocate(job_id, trays)
            return
        free: dict[int, int] = {}  # tray -> its free GPUs after the jobs checked so far (touched trays)
        seen: set[int] = set()
        for job_id, trays in listed:  # `allocate`'s checks, job by job
            if job_id in self.jobs or job_id in seen:
                raise ValueError(f"job {job_id} already holds GPUs")
            seen.add(job_id)
            for t, gpus in trays:
                now = free.get(t, free_of[t])
                if gpus < 1 or gpus > now:
                    raise ValueError(
                        f"job {job_id}: tray {self.tray_host[t]} has {now} free GPUs, not {gpus}"
                    )
            if len({t for t, _ in trays}) != len(trays):
                raise ValueError(f"job {job_id}: a tray is listed twice")
            for t, gpus in trays:
                free[t] = free.get(t, free_of[t]) - gpus
        first_free: dict[
            int, int
        ] = {}  # touched tray -> its free GPUs before, in the order of its last touch
        moves: dict[int, int] = {}  # partition -> its whole trays moved, in the order of its last move
        taken = 0
        for job_id, trays in listed:
            moved: dict[int, int] = {}  # this job's, ordered as `allocate` orders them
            for t, gpus in trays:
                before = free_of[t]
                free_of[t] = before - gpus
                jobs_of[t][job_id] = gpus
                taken += gpus
                first_free[t] = first_free.pop(t, before)
                if before == GPUS_PER_TRAY and settled[t]:  # it was whole (only ever at its first touch)
                    p = part_of[t]
                    moved[p] = moved.pop(p, 0) - 1
            for p, delta in moved.items():
                moves[p] = moves.pop(p, 0) + delta
            self.jobs[job_id] = trays
        partial, part_free, part_owner = self.partial, self.part_free, self.part_owner
        for t, before in first_free.items():  # out of the index each was in before the jobs
            p = part_of[t]
            if before == GPUS_PER_TRAY and settled[t]:
                del part_free[p][t]
            else:
                del partial[part_owner[p]][before][t]
        for t in first_free:  # into the one it is in after, in the order each was last placed there
            if free_of[t]:
                partial[part_owner[part_of[t]]][free_of[t]][t] = None
        self.free_gpus -= taken
        self._moved(moves)

    def _tray_lists(self) -> tuple[list[bool], list[int], list[bool], list[int], list[dict[int, int]]]:
        """The per-tray lists `allocate` and `release` read, as locals."""
        return self.tray_held, self.tray_free, self.tray_settled, self.tray_part, self.tray_jobs

    def release(self, job_id: int) -> tuple[tuple[int, int], ...]:
        """Free the GPUs of a job; returns what it held."""
        trays = self.jobs.pop(job_id)
        # `_unindex`, give the GPUs back, `_index`, tray by tray, with each partition moved once (`_moved`).
        held, free_of, settled, part_of, jobs_of = self._tray_lists()
        moved: dict[int, int] = {}
        given = 0
        for t, gpus in trays:
            free = free_of[t]
            free_of[t] = free + gpus
            del jobs_of[t][job_id]
            if held[t]:
                continue  # out of every index until unheld
            given += gpus
            p = part_of[t]
            partial = self.partial[self.part_owner[p]]
            if free:  # partly used (never whole: the job held GPUs here)
                del partial[free][t]
            free += gpus
            if free == GPUS_PER_TRAY and settled[t]:  # whole again
                self.part_free[p][t] = None
                moved[p] = moved.pop(p, 0) + 1
            else:
                partial[free][t] = None
        self.free_gpus += given
        self._moved(moved)
        return trays

    def hold(self, trays: Iterable[int]) -> None:
        """Keep trays out of every index (a reservation) until `unhold`."""
        self._hold_or_unhold(trays, True)

    def unhold(self, trays: Iterable[int]) -> None:
        """Give held trays back to the indexes; trays whose partition is being re-carved stay held."""
        if self.changing:
            trays = [t for t in trays if t not in self.changing]
        self._hold_or_unhold(trays, False)

    def _hold_or_unhold(self, trays: Iterable[int], hold: bool) -> None:
        """`_unindex` (hold) or `_index` (unhold) each tray not already so, with each partition (and rack)
        moved between buckets once by its count of whole trays instead of once per tray (`_moved`): a pass
        holds and frees its reservations' trays again and again. Partial trays are added or removed in the
        same order as tray by tray."""
        held, free_of, settled, part_of = self.tray_held, self.tray_free, self.tray_settled, self.tray_part
        part_free, part_owner, partial = self.part_free, self.part_owner, self.partial
        step = -1 if hold else 1
        moved: dict[int, int] = {}  # partition -> whole trays moved, in the order of its last tray
        gpus = 0
        for t in trays:
            if held[t] == hold:
                continue
            held[t] = hold
            free = free_of[t]
            if not free:
                continue
            gpus += free
            p = part_of[t]
            if free == GPUS_PER_TRAY and settled[t]:  # whole (free == GPUS_PER_TRAY: so is its capacity)
                if hold:
                    del part_free[p][t]
                else:
                    part_free[p][t] = None
                moved[p] = moved.pop(p, 0) + step
            elif hold:
                del partial[part_owner[p]][free][t]
            else:
                partial[part_owner[p]][free][t] = None
        self.free_gpus += -gpus if hold else gpus
        self._moved(moved)

    def _moved(self, moved: dict[int, int]) -> None:
        """Move each partition (and its rack) by its change of whole free trays, `moved` in the order of
        each partition's last changed tray. Moving once by the sum instead of once per tray leaves every
        bucket in the same order: a partition (rack) that moved lands at the end of its final bucket, after
        the others that did, in the order of their last move, exactly as tray by tray."""
        for p, delta in moved.items():
            self._part_move(p, delta)

    # --- re-carving (scheduling.engine.recarve) ------------------------------------------------------

    def rack_index(self, rack: str) -> int:
        for r, name in enumerate(self.rack_name):
            if name == rack:
                return r
        raise ValueError(f"no rack {rack}")

    def wholly_idle(self, p: int) -> bool:
        """Every tray of partition p is whole free (all GPUs schedulable and free, fabric settled, not held):
        no job runs there and nothing is reserved or changing. O(1)."""
        return bool(self.part_trays[p]) and self.part_whole[p] == len(self.part_trays[p])

    def replace_partitions(
        self,
        rack: str,
        removed: Iterable[str],
        created: Iterable[tuple[str, Iterable[str], Owner]],
        *,
        taken: Iterable[tuple[str, Iterable[str]]] = (),
        change: bool = True,
    ) -> list[int]:
        """Re-carve: partitions `removed` of `rack` give way to `created` ((name, hostnames, owner) each), the
        same trays carved anew, with the trays `taken` ((partition, hostnames) each) out of partitions that
        keep their other trays; returns the new partitions' indexes. No tray re-carved may run work. With
        `change` (the default) the trays are then changing (held, unsettled) until `end_change`; without it
        the new partitions are settled at once. Every index stays exact."""
        r = self.rack_index(rack)
        removed = list(removed)
        carved = [(name, tuple(hosts), owner) for name, hosts, owner in created]
        by_name = {self.part_name[p]: p for p in self.rack_parts[r]}
        given = [(name, tuple(hosts)) for name, hosts in taken]
        missing = [name for name in removed + [name for name, _ in given] if name not in by_name]
        donors = [name for name, _ in given]
        if (
            missing
            or len(set(removed)) != len(removed)
            or len(set(donors)) != len(donors)
            or set(removed) & set(donors)
            or not (removed or given)
        ):
            raise ValueError(f"rack {rack}: no partitions {', '.join(missing) or '(none given)'} to re-carve")
        old = [by_name[name] for name in removed]
        shrunk: list[tuple[int, set[int]]] = []
        for name, hosts in given:
            p = by_name[name]
            ts = {self.host_index.get(h, -1) for h in hosts}
            if not hosts or len(ts) != len(hosts) or not ts < set(self.part_trays[p]):
                raise ValueError(f"rack {rack}: trays taken from {name} must be some of its trays, not all")
            shrunk.append((p, ts))
        trays = sorted([t for p in old for t in self.part_trays[p]] + [t for _, ts in shrunk for t in ts])
        busy = [self.tray_host[t] for t in trays if self.tray_jobs[t]]
        if busy:
            raise ValueError(f"rack {rack}: trays {', '.join(busy)} run work; a re-carve never touches them")
        members_given = [h for _, members, _ in carved for h in members]
        if sorted(self.host_index.get(h, -1) for h in members_given) != trays:
            raise ValueError(f"rack {rack}: the new partitions must hold exactly the trays re-carved")
        names = [name for name, _, _ in carved]
        kept = set(by_name) - set(removed)
        if len(set(names)) != len(names) or kept & set(names) or any(not members for _, members, _ in carved):
            raise ValueError(f"rack {rack}: new partition names must be unique in the rack, each with trays")
        unknown = {owner for _, _, owner in carved} - self.owners
        if unknown:
            raise ValueError(f"rack {rack}: unknown owners {unknown}")
        for t in trays:
            self._unindex(t)
        for p in old:
            del self.part_buckets[self.part_owner[p]][self.part_whole[p]][p]
            self.rack_parts[r].remove(p)
            self.part_trays[p] = []
            self.part_degraded.pop(p, None)
        for p, ts in shrunk:
            self.part_trays[p] = [t for t in self.part_trays[p] if t not in ts]
        largest = max(len(members) for _, members, _ in carved)
        if largest > self.max_partition_trays:
            for buckets in self.part_buckets.values():
                buckets.extend({} for _ in range(largest - self.max_partition_trays))
        new = []
        for name, members, owner in carved:
            p = self._add_partition(name, r, owner)
            self.part_buckets[owner][0][p] = None
            for host in members:
                t = self.host_index[host]
                self.tray_part[t] = p
                self.part_trays[p].append(t)
            new.append(p)
        self.max_partition_trays = max(len(t) for t in self.part_trays)
        for t in trays:
            self._index(t)
        if change:
            self.begin_change(trays)
        return new

    def begin_change(self, trays: Iterable[int]) -> None:
        """The trays' fabric is being changed (a re-carve): no job of any size until `end_change`."""
        trays = list(trays)
        self.hold(trays)
        for t in trays:
            self.changing.add(t)
            self.tray_settled[t] = False  # held: no index reads it until the change ends

    def end_change(self, trays: Iterable[int]) -> None:
        """The trays report their new partition's clique: settled and back in the indexes."""
        trays = [t for t in trays if t in self.changing]
        for t in trays:
            self.changing.discard(t)
            self.tray_settled[t] = True
        self.unhold(trays)

    def set_fabric_ok(self, t: int, ok: bool) -> None:
        """The tray's fabric became settled (ok) or unsettled (a fabric change began, or drift)."""
        self._unindex(t)
        self.tray_settled[t] = ok
        self._index(t)

    def set_capacity(self, t: int, capacity: int) -> None:
        """A tray went down or came back, or a GPU turned unhealthy; never below what jobs hold there."""
        held = self.tray_cap[t] - self.tray_free[t]
        if not held <= capacity <= GPUS_PER_TRAY:
            raise ValueError(f"tray {self.tray_host[t]}: capacity {capacity} is below the {held} GPUs in use")
        self._unindex(t)
        self.capacity += capacity - self.tray_cap[t]
        self.tray_cap[t] = capacity
        self.tray_free[t] = capacity - held
        self._index(t)

    # --- summaries for reasons ---------------------------------------------------------------------

    def largest_free_partition(self, owners: list[Owner]) -> tuple[int, int | None]:
        """(whole free trays, partition) of the partition with the most whole free trays."""
        best, where = 0, None
        for owner in owners:
            buckets = self.part_buckets[owner]
            for k in range(len(buckets) - 1, best, -1):
                if buckets[k]:
                    best, where = k, next(iter(buckets[k]))
                    break
        return best, where

    def unsettled_free(self, owners: list[Owner]) -> dict[int, list[int]]:
        """Free trays left out of multi-tray placement because their fabric is unsettled, by partition.

        Read from the partial index (few trays), so it costs nothing when every fabric is settled.
        """
        by_partition: dict[int, list[int]] = {}
        for owner in owners:
            for t in self.partial[owner][GPUS_PER_TRAY]:
                by_partition.setdefault(self.tray_part[t], []).append(t)
        return by_partition
