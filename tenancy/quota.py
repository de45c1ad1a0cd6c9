"""Department GPU fair share and reclaim, with Run:ai / KAI quota semantics.

Pure arithmetic (stdlib only, no Django import) so the portal, the placement engine and the simulator all
compute the same numbers.

How a capacity of GPUs is shared:

1. In quota. Every department first gets ``min(guaranteed, demand)``. If those asks do not fit the
   capacity, the capacity is divided among the asking departments in proportion to their guarantee
   (water-filling: nobody gets more than it asks, what it cannot use goes to the others).
2. Over quota. The remaining capacity (surplus) is offered tier by tier, highest priority first; a tier
   takes what it can use before the next tier sees anything. Within a tier the surplus is split in
   proportion to the over-quota weight, never past a department's limit or its demand; what one department
   cannot use is redistributed among the others of the tier by weight. A weight of 0 never borrows.

GPUs are whole: every split is a largest-remainder apportionment of exact fractions, with ties broken by
department name, so the result does not depend on the order departments are listed in.

Reclaim: a department holding less than its in-quota share is starved. It is served from free GPUs first
(capacity minus what all departments hold), then takes back GPUs from departments holding more than their
fair share, lowest priority donor first, then largest excess first, then by name. Starved departments are
served highest priority first, then by name.

Projects (hierarchical fair share, `hierarchical_fair_share`): a department's projects share what the
department is entitled to, with the same semantics one level down. The departments are shared first, with
each department's demand and holdings the sum of its projects'; then each department's fair share is the
capacity its projects (and its work without a project, as one more leaf, ``NO_PROJECT``, guaranteed what
the projects' guarantees leave of the department's) are shared over, by their own guarantee, over-quota
weight, limit and priority. The projects' guarantees fit inside the department's, so their in-quota shares
add up to no more than the department's: work in quota in its project is in quota in its department.
Reclaims inside a department are between sibling projects. The converse does not hold, and the department
level does not depend on it: towards other departments a department is judged against its own in-quota
share whatever its projects (in quota: up to min(in use, guarantee)); a project (or the work without one)
in quota for its department beyond its own share uses its siblings' unused guarantee, which only they
reclaim (scheduling.engine.scheduler, Projects). A department without projects is not split:
its numbers are exactly those of `fair_share`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

__all__ = [
    "NO_PROJECT",
    "DepartmentQuota",
    "FairShareResult",
    "GuaranteePosition",
    "HierarchicalResult",
    "Reclaim",
    "Share",
    "beyond_guarantee",
    "fair_share",
    "guarantee_positions",
    "hierarchical_fair_share",
    "in_quota_prefix",
]


def _check_count(owner: str, field: str, value: object) -> None:
    # bool is an int subclass, but True GPUs is always a bug in the caller.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{owner}: {field} must be a whole number of GPUs, got {value!r}")
    if value < 0:
        raise ValueError(f"{owner}: {field} must not be negative, got {value}")


@dataclass(frozen=True)
class DepartmentQuota:
    """One department's quota settings and its current demand and holdings, in GPUs."""

    name: str
    guaranteed: int
    weight: float = 1.0  # over-quota weight (>= 0; 0 means never borrows)
    limit: int | None = None  # most GPUs it may hold, borrowing included; None: no limit
    priority: int = 0  # higher is served first
    demand: int = 0  # GPUs its pending and running work asks for
    allocated: int = 0  # GPUs it holds now

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"department name must be a non-empty string, got {self.name!r}")
        owner = f"department {self.name!r}"
        _check_count(owner, "guaranteed", self.guaranteed)
        _check_count(owner, "demand", self.demand)
        _check_count(owner, "allocated", self.allocated)
        if self.limit is not None:
            _check_count(owner, "limit", self.limit)
            if self.limit < self.guaranteed:
                raise ValueError(
                    f"{owner}: limit ({self.limit}) must not be below guaranteed ({self.guaranteed})"
                )
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise ValueError(f"{owner}: priority must be an integer, got {self.priority!r}")
        if isinstance(self.weight, bool) or not isinstance(self.weight, int | float):
            raise ValueError(f"{owner}: weight must be a number, got {self.weight!r}")
        if not math.isfinite(self.weight) or self.weight < 0:
            raise ValueError(f"{owner}: weight must be a finite number >= 0, got {self.weight!r}")

    @property
    def cap(self) -> int:
        """The most GPUs it can use now: its demand, bounded by its limit."""
        return self.demand if self.limit is None else min(self.demand, self.limit)


@dataclass(frozen=True)
class Share:
    name: str
    fair_share: int  # what it is entitled to now = in_quota + over_quota
    in_quota: int  # min(guaranteed, demand) part (after capacity scaling)
    over_quota: int  # borrowed surplus part
    allocated: int
    reclaimable: int  # GPUs it holds beyond its fair share that others may take back (0 if none)
    starved: int  # GPUs it is owed within its guarantee but does not hold (max(0, in_quota - allocated))


@dataclass(frozen=True)
class Reclaim:
    from_department: str
    to_department: str
    gpus: int


@dataclass(frozen=True)
class FairShareResult:
    capacity: int
    shares: dict[str, Share]
    reclaims: list[Reclaim]  # what may be taken from whom to give starved departments what they are owed
    unallocated: int  # capacity - sum(fair_share)


def _water_fill(amount: int, claims: list[tuple[str, int | Fraction, int]]) -> dict[str, int]:
    """Split ``amount`` GPUs among ``(name, weight, cap)`` claims in proportion to weight, never past a cap.

    Claims whose exact proportional quota reaches their cap get the cap, and the rest is split again among
    the others until nobody is capped; the final split is a largest-remainder apportionment (ties by
    name). Since an uncapped quota is strictly below an integer cap, rounding it up never passes the cap.
    Returns whole GPUs per name; their sum is ``min(amount, sum of caps of positive-weight claims)``.
    """
    given = {name: 0 for name, _, _ in claims}
    active = sorted((c for c in claims if c[1] > 0 and c[2] > 0), key=lambda c: c[0])
    remaining = amount
    while active and remaining > 0:
        if sum(cap for _, _, cap in active) <= remaining:
            for name, _, cap in active:
                given[name] = cap
            return given
        total_weight = sum(weight for _, weight, _ in active)
        capped = [c for c in active if remaining * c[1] >= c[2] * total_weight]
        if capped:
            for name, _, cap in capped:
                given[name] = cap
                remaining -= cap
            active = [c for c in active if c not in capped]
            continue
        if all(type(weight) is int for _, weight, _ in active):
            # Whole weights (the usual case: guarantees, weight 1): the same split in integers, each exact
            # quota's remainder over the common denominator `total_weight` instead of as a Fraction.
            floors, remainders = {}, {}
            for name, weight, _ in active:
                floors[name], remainders[name] = divmod(remaining * weight, total_weight)
        else:
            quotas = {name: remaining * weight / total_weight for name, weight, _ in active}
            floors = {name: math.floor(q) for name, q in quotas.items()}
            remainders = {name: q - floors[name] for name, q in quotas.items()}
        leftover = remaining - sum(floors.values())
        by_remainder = sorted(floors, key=lambda name: (-remainders[name], name))
        for name in floors:
            given[name] = floors[name]
        for name in by_remainder[:leftover]:
            given[name] += 1
        return given
    return given


def _exact(weight: int | float) -> int | Fraction:
    """A weight as `_water_fill` splits by: a whole number as an int, anything else as an exact Fraction."""
    if type(weight) is int:
        return weight
    if isinstance(weight, float) and weight.is_integer():
        return int(weight)
    return Fraction(weight)


def _reclaims(capacity: int, departments: list[DepartmentQuota], shares: dict[str, Share]) -> list[Reclaim]:
    # Holdings may exceed capacity for a while (GPUs drained under running work); then nothing is free.
    free = max(0, capacity - sum(d.allocated for d in departments))
    donors = sorted(
        (d for d in departments if shares[d.name].reclaimable > 0),
        key=lambda d: (d.priority, -shares[d.name].reclaimable, d.name),
    )
    left = {d.name: shares[d.name].reclaimable for d in donors}
    starved = sorted(
        (d for d in departments if shares[d.name].starved > 0), key=lambda d: (-d.priority, d.name)
    )
    reclaims: list[Reclaim] = []
    for department in starved:
        need = shares[department.name].starved
        from_free = min(free, need)
        free -= from_free
        need -= from_free
        for donor in donors:
            if need == 0:
                break
            take = min(need, left[donor.name])
            if take:
                left[donor.name] -= take
                need -= take
                reclaims.append(Reclaim(donor.name, department.name, take))
    return reclaims


def fair_share(capacity: int, departments: Iterable[DepartmentQuota]) -> FairShareResult:
    """Each department's fair share of ``capacity`` GPUs, and the reclaims that restore its guarantee."""
    if isinstance(capacity, bool) or not isinstance(capacity, int):
        raise ValueError(f"capacity must be a whole number of GPUs, got {capacity!r}")
    if capacity < 0:
        raise ValueError(f"capacity must not be negative, got {capacity}")
    departments = list(departments)
    for department in departments:
        if not isinstance(department, DepartmentQuota):
            raise ValueError(f"expected a DepartmentQuota, got {type(department).__name__}")
    departments.sort(key=lambda d: d.name)
    names = [d.name for d in departments]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"duplicate department names: {', '.join(duplicates)}")

    # 1. In quota: min(guaranteed, demand), scaled down by guarantee when the asks exceed the capacity.
    asks = {d.name: min(d.guaranteed, d.demand) for d in departments}
    if sum(asks.values()) <= capacity:
        in_quota = asks
    else:
        in_quota = _water_fill(capacity, [(d.name, _exact(d.guaranteed), asks[d.name]) for d in departments])
    surplus = capacity - sum(in_quota.values())

    # 2. Over quota: priority tiers, highest first; by weight within a tier, capped by limit and demand.
    over_quota = {d.name: 0 for d in departments}
    for priority in sorted({d.priority for d in departments}, reverse=True):
        if surplus == 0:
            break
        tier = [d for d in departments if d.priority == priority]
        given = _water_fill(
            surplus, [(d.name, _exact(d.weight), max(0, d.cap - in_quota[d.name])) for d in tier]
        )
        over_quota.update(given)
        surplus -= sum(given.values())

    shares = {}
    for d in departments:
        entitled = in_quota[d.name] + over_quota[d.name]
        shares[d.name] = Share(
            name=d.name,
            fair_share=entitled,
            in_quota=in_quota[d.name],
            over_quota=over_quota[d.name],
            allocated=d.allocated,
            reclaimable=max(0, d.allocated - entitled),
            starved=max(0, in_quota[d.name] - d.allocated),
        )
    return FairShareResult(
        capacity=capacity,
        shares=shares,
        reclaims=_reclaims(capacity, departments, shares),
        unallocated=capacity - sum(s.fair_share for s in shares.values()),
    )


def beyond_guarantee(guaranteed: int, jobs: Iterable[tuple[object, int, bool]]) -> list:
    """The keys of a project's (or the default project's) running jobs beyond its own guarantee, in quota for
    its department on its siblings' unused guarantee: the one answer the projects panel's rows, the
    confirmation pages' sentences and their tables' marks all come from (their GPUs are these jobs' GPUs).

    `jobs` are (key, GPUs, borrowing) in standing order (scheduling.engine.scheduler, Standing: not
    preemptible first, then oldest first): the longest prefix within `guaranteed` holds it
    (`in_quota_prefix`, as every pass); every later job beyond it is counted whole, since a job holds the
    guarantee whole or not at all, except the ones borrowing from other departments (`borrowing`), which
    are not in quota for the department at all.
    """
    jobs = list(jobs)
    within = in_quota_prefix(guaranteed, [(key, gpus) for key, gpus, _ in jobs])
    return [key for key, _, borrowing in jobs if key not in within and not borrowing]


def in_quota_prefix(share: int, jobs: Iterable[tuple[object, int]]) -> set:
    """The keys of a department's running jobs that are in quota: `jobs` are (key, GPUs), oldest first; the
    longest prefix whose GPUs stay within `share` (its in-quota share) is in quota, the rest borrows.

    Run:ai / KAI: the department holds its guarantee with its oldest work, so a raised guarantee turns the
    oldest borrowers into in-quota work and a lowered one turns the newest in-quota work into borrowers.
    """
    chosen: set = set()
    total = 0
    for key, gpus in jobs:
        total += gpus
        if total > share:
            break
        chosen.add(key)
    return chosen


@dataclass(frozen=True)
class GuaranteePosition:
    """Where one department stands against its guarantee: the one answer to "who is short"."""

    name: str
    guaranteed: int
    promised: int  # what capacity can honour of its guarantee (guarantees scaled down when they exceed it)
    in_quota: int  # its in-quota share now: the promised part its demand asks for
    held: int  # GPUs it holds

    @property
    def cut(self) -> int:
        """GPUs of its guarantee that failures have left no capacity for."""
        return self.guaranteed - self.promised

    @property
    def owed(self) -> int:
        """GPUs of its in-quota share it asks for and does not hold (reclaimed from borrowers, or freed)."""
        return max(0, self.in_quota - self.held)

    @property
    def short(self) -> bool:
        return self.cut > 0 or self.owed > 0


def guarantee_positions(
    capacity: int, departments: Iterable[DepartmentQuota]
) -> dict[str, GuaranteePosition]:
    """Every department's guarantee position, by name, from the same arithmetic the scheduler admits with.

    `in_quota` is `fair_share`'s in-quota share (guarantees met up to demand, scaled down by guarantee when
    they do not fit the capacity); `promised` is the same with every department asking its full guarantee.
    """
    departments = list(departments)
    result = fair_share(capacity, departments)
    full = fair_share(
        capacity,
        [
            DepartmentQuota(name=d.name, guaranteed=d.guaranteed, demand=d.guaranteed, priority=d.priority)
            for d in departments
        ],
    )
    return {
        d.name: GuaranteePosition(
            name=d.name,
            guaranteed=d.guaranteed,
            promised=full.shares[d.name].in_quota,
            in_quota=result.shares[d.name].in_quota,
            held=d.allocated,
        )
        for d in departments
    }


# The leaf of a department's work that names no project: guaranteed what its projects' guarantees leave of
# the department's. Not a possible project slug (tenancy.models.projects.PROJECT_SLUG_PATTERN), so it
# never clashes.
NO_PROJECT = "(no project)"


@dataclass(frozen=True)
class HierarchicalResult:
    departments: FairShareResult  # the first level, exactly `fair_share` of the departments
    # Department name -> the split of its fair share among its projects (NO_PROJECT included), for the
    # departments that have projects; a department without projects is absent (it is its own leaf).
    projects: dict[str, FairShareResult]

    def leaf(self, department: str, project: str | None = None) -> Share:
        """The share of the leaf that work of `department` (in `project`, or none) is admitted against:
        the project's inside a department with projects, else the department's own."""
        split = self.projects.get(department)
        if split is None:
            return self.departments.shares[department]
        return split.shares[project or NO_PROJECT]


def hierarchical_fair_share(
    capacity: int,
    departments: Iterable[DepartmentQuota],
    projects: Mapping[str, Iterable[DepartmentQuota]] | None = None,
) -> HierarchicalResult:
    """Departments first, then each department's fair share among its projects (module docstring).

    `projects` maps a department's name to its projects' quotas (name, guarantee, weight, limit, priority,
    demand, holdings). Each department's demand and holdings include its projects'; the rest is its work
    without a project (the NO_PROJECT leaf). A department absent from `projects`, or with no projects, is
    not split. Raises ValueError when the projects do not fit their department (guarantees, demand or
    holdings adding up to more than the department's) or name a department that is not given.
    """
    departments = list(departments)
    result = fair_share(capacity, departments)
    by_name = {d.name: d for d in departments}
    splits: dict[str, FairShareResult] = {}
    for name, given in sorted((projects or {}).items()):
        leaves = list(given)
        if not leaves:
            continue
        if name not in by_name:
            raise ValueError(f"projects given for department {name!r}, which is not among the departments")
        department = by_name[name]
        for leaf in leaves:
            if not isinstance(leaf, DepartmentQuota):
                raise ValueError(f"expected a DepartmentQuota for a project, got {type(leaf).__name__}")
            if leaf.name == NO_PROJECT:
                raise ValueError(f"department {name!r}: {NO_PROJECT!r} is not a project name")
        rest = {}
        for field in ("guaranteed", "demand", "allocated"):
            total = sum(getattr(leaf, field) for leaf in leaves)
            rest[field] = getattr(department, field) - total
            if rest[field] < 0:
                raise ValueError(
                    f"department {name!r}: its projects' {field} GPUs ({total}) are more than the "
                    f"department's ({getattr(department, field)})"
                )
        unassigned = DepartmentQuota(name=NO_PROJECT, **rest)
        splits[name] = fair_share(result.shares[name].fair_share, [*leaves, unassigned])
    return HierarchicalResult(departments=result, projects=splits)
