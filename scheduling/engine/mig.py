"""MIG slices: profiles, layouts and which free instance a slice request takes.

Pure Python (no Django import), used by the trace simulator (scheduling.simulator) and meant for the live
pass. Facts from docs (operations.md 1.1, the MIG User Guide): a GPU in MIG mode has 7 compute slices and 8
memory slices and holds at most 7 GPU instances; each GPU instance profile takes a fixed number of compute
slices (its ``g``) and of memory slices, and may only be created at the placements the driver lists
(``nvidia-smi mig -lgipp``: ``{starts}:size`` in memory slices). Placements are what make MIG fragment: a
3g at 0:4 blocks the 4g, a 1g at slot 4 blocks the second 3g.

**Profiles are data, never derived from a name** (names changed with drivers: GB200 printed ``1g.24gb``, then
``1g.23gb``). A `SliceProfile` comes from a table (`GB200_PROFILES`, the simulator's default) or from what a
node reported (`profiles_from_discovery`).

**Layouts** (`MigLayout`) are named sets of instances per GPU, like mig-parted's ``all-balanced``
(``1g.23gb:2, 2g.47gb:1, 3g.93gb:1``). `expand` checks one and turns it into concrete placements: every
instance at a placement its profile allows, none overlapping, at most 7 instances, at most 7 compute and 8
memory slices, no profile more often than its maximum.

**Slice placement.** Slurm and the GPU Operator do not repartition a GPU while it runs work (static MIG): a
slice job takes one of the instances that exist. A request is a profile (or `smallest_fitting` a memory
size); an instance *can host* it when it has at least its compute slices and its memory slices (and memory).
`choose` picks, among the free instances that can host the request, by one of two rules:

* ``best-fit``: the instance leaving the least unused (fewest spare compute slices, then spare memory
  slices), then the GPU left with the fewest free compute slices (packing), then GPU and start order.
* ``fragmentation-aware`` (in the spirit of FGD, Weng et al., ATC'23, "Beware of Fragmentation: Scheduling
  GPU-Sharing Workloads with Fragmentation Gradient Descent"): given the *expected mix* of requests
  (profile -> probability), the **fragmentation** of a free instance ``i`` is the expected number of its
  compute slices a request drawn from the mix cannot use: ``F(i) = g(i) * P(request does not fit i)`` (an
  instance is exclusive: a request that fits uses all of it, one that does not fit can use none). The
  fleet's fragmentation is the sum over its free instances, and its **usable capacity** for the mix is
  ``U = free compute slices - F = sum over free i of g(i) * P(request fits i)``. Taking instance ``i``
  lowers ``U`` by ``g(i) * P(request fits i)``; the rule takes the instance that lowers it least (FGD's
  "least fragmentation growth" for exclusive instances: the whole instance is consumed, of which ``F(i)``
  was already unusable), ties broken as best-fit. With the mix concentrated on small requests it takes
  the small instances; an instance no expected request fits (a 2g when only 1g and 3g are expected) is
  taken before a small one the mix still needs.

**GPU-equivalents**: a slice counts its share of the GPU's compute slices, ``g / 7`` (`gpu_equivalents`),
so quotas and utilisation can add slices and whole GPUs.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

# Per GPU in MIG mode (A100 to Blackwell: operations.md 1.1), and the one placement search: the inventory's
# (the layouts admins choose from), which this module's simulator layouts share.
from inventory.mig_layouts import COMPUTE_SLICES, MAX_INSTANCES, MEMORY_SLICES, search_placements

BEST_FIT = "best-fit"
FRAGMENTATION_AWARE = "fragmentation-aware"
SLICE_RULES = (BEST_FIT, FRAGMENTATION_AWARE)


class MigLayoutError(ValueError):
    """A MIG layout that cannot exist on a GPU; the message says why."""


@dataclass(frozen=True)
class SliceProfile:
    """One GPU instance profile, as data: its name as the driver prints it, compute slices (``g``), memory
    slices, memory, the placements it may be created at ((start, size) in memory slices) and how many of it
    one GPU holds at most."""

    name: str
    compute_slices: int
    memory_slices: int
    memory_mib: int
    placements: tuple[tuple[int, int], ...]
    max_count: int
    profile_id: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.compute_slices <= COMPUTE_SLICES:
            raise MigLayoutError(f"{self.name}: {self.compute_slices} compute slices (1-{COMPUTE_SLICES})")
        if not 1 <= self.memory_slices <= MEMORY_SLICES:
            raise MigLayoutError(f"{self.name}: {self.memory_slices} memory slices (1-{MEMORY_SLICES})")
        if not 1 <= self.max_count <= MAX_INSTANCES:
            raise MigLayoutError(f"{self.name}: at most {self.max_count} instances (1-{MAX_INSTANCES})")
        if self.memory_mib < 0:
            raise MigLayoutError(f"{self.name}: negative memory")
        for start, size in self.placements:
            if size != self.memory_slices or start < 0 or start + size > MEMORY_SLICES:
                raise MigLayoutError(
                    f"{self.name}: placement {start}:{size} (size must be its {self.memory_slices} memory "
                    f"slices, inside 0-{MEMORY_SLICES})"
                )

    def can_host(self, request: SliceProfile) -> bool:
        """An instance of this profile can run a job asking for `request`."""
        return (
            self.compute_slices >= request.compute_slices
            and self.memory_slices >= request.memory_slices
            and self.memory_mib >= request.memory_mib
        )


def _slots(starts: Iterable[int], size: int) -> tuple[tuple[int, int], ...]:
    return tuple((start, size) for start in starts)


# GB200 (HGX/NVL, PCI 0x294110DE, 186 GB), the simulator's default. Source: operations.md 1.1 (the
# project's shared reference notes, read from NVIDIA/gpu-operator's default-mig-parted-config after PR
# #1590 and the GB200 `nvidia-smi mig -lgip` in NVIDIA/mig-parted#227): names, IDs, instance counts, the
# 22.00 / 45.50 GiB memory of the 1g and 2g profiles; the 3g/4g/7g memory (91.75 / 91.75 / 184.75 GiB) is
# the repository's lgip fixture (tests/inventory/fixtures/mig), extrapolated there, not captured.
# Placements: the A100/H100 geometry GB200 shares (operations.md 1.1).
GB200_PROFILES: tuple[SliceProfile, ...] = (
    SliceProfile("1g.23gb", 1, 1, 22528, _slots(range(7), 1), 7, 19),
    SliceProfile("1g.23gb+me", 1, 1, 22528, _slots(range(7), 1), 1, 20),
    SliceProfile("1g.47gb", 1, 2, 46592, _slots((0, 2, 4, 6), 2), 4, 15),
    SliceProfile("2g.47gb", 2, 2, 46592, _slots((0, 2, 4), 2), 3, 14),
    SliceProfile("3g.93gb", 3, 4, 93952, _slots((0, 4), 4), 2, 9),
    SliceProfile("4g.93gb", 4, 4, 93952, _slots((0,), 4), 1, 5),
    SliceProfile("7g.186gb", 7, 8, 189184, _slots((0,), 8), 1, 0),
)

# Compute slices by GPU instance profile ID, the IDs `nvidia-smi mig -lgip` prints (the same from A100 to
# Blackwell: operations.md 1.1); -lgip prints no slice count, so a reported profile gets its g from here.
COMPUTE_SLICES_BY_PROFILE_ID: Mapping[int, int] = {19: 1, 20: 1, 15: 1, 14: 2, 9: 3, 5: 4, 0: 7}


def profiles_from_discovery(
    reported: Iterable[Any], compute_slices: Mapping[int, int] = COMPUTE_SLICES_BY_PROFILE_ID
) -> tuple[SliceProfile, ...]:
    """SliceProfiles from what a node reported (inventory.discovery.mig.MigProfile: ``profile_id``,
    ``name``, ``instances_total``, ``memory_mib``, ``placements``), in profile-ID order. A profile with no
    placement reported or no known compute-slice count is left out (it cannot be laid out)."""
    profiles = []
    for profile in sorted(reported, key=lambda p: p.profile_id):
        g = compute_slices.get(profile.profile_id)
        placements = tuple(sorted(tuple(p) for p in profile.placements))
        if g is None or not placements:
            continue
        profiles.append(
            SliceProfile(
                profile.name,
                g,
                placements[0][1],
                profile.memory_mib,
                placements,
                profile.instances_total,
                profile.profile_id,
            )
        )
    return tuple(profiles)


def profile_table(profiles: Iterable[SliceProfile]) -> dict[str, SliceProfile]:
    """Profiles by name (a name twice is an error)."""
    table: dict[str, SliceProfile] = {}
    for profile in profiles:
        if profile.name in table:
            raise MigLayoutError(f"profile {profile.name} twice")
        table[profile.name] = profile
    return table


@dataclass(frozen=True)
class MigLayout:
    """A named set of instances for every GPU it is applied to: ``counts`` is (profile name, how many)."""

    name: str
    counts: tuple[tuple[str, int], ...]

    @classmethod
    def parse(cls, text: str, name: str | None = None) -> MigLayout:
        """``"1g.23gb:2,2g.47gb:1,3g.93gb:1"`` (mig-parted's ``mig-devices``; a count of 1 may be
        left out)."""
        counts: dict[str, int] = {}
        for term in text.replace(" ", "").split(","):
            profile, _, count = term.partition(":")
            if not profile or (count and not count.isdigit()):
                raise MigLayoutError(f"MIG layout {text!r}: write PROFILE:COUNT joined with ',' (1g.23gb:7)")
            counts[profile] = counts.get(profile, 0) + (int(count) if count else 1)
        return cls(name or text, tuple(counts.items()))


@dataclass(frozen=True)
class Placement:
    """One GPU instance of a layout: its profile and where it sits (start, size in memory slices)."""

    profile: str
    start: int
    size: int


def _layouts(entries: Mapping[str, str]) -> dict[str, MigLayout]:
    return {name: MigLayout.parse(counts, name) for name, counts in entries.items()}


# GB200's named layouts of gpu-operator's default-mig-parted-config (operations.md 1.1).
GB200_LAYOUTS: Mapping[str, MigLayout] = _layouts(
    {
        "all-1g.23gb": "1g.23gb:7",
        "all-1g.47gb": "1g.47gb:4",
        "all-2g.47gb": "2g.47gb:3",
        "all-3g.93gb": "3g.93gb:2",
        "all-4g.93gb": "4g.93gb:1",
        "all-7g.186gb": "7g.186gb:1",
        "all-balanced": "1g.23gb:2,2g.47gb:1,3g.93gb:1",
    }
)


def check_placements(placements: Sequence[Placement], profiles: Mapping[str, SliceProfile]) -> None:
    """Raise MigLayoutError unless `placements` can exist together on one GPU."""
    if len(placements) > MAX_INSTANCES:
        raise MigLayoutError(f"{len(placements)} instances: a GPU holds at most {MAX_INSTANCES}")
    used = [False] * MEMORY_SLICES
    compute = 0
    count: dict[str, int] = {}
    for placement in placements:
        profile = profiles.get(placement.profile)
        if profile is None:
            raise MigLayoutError(f"no profile {placement.profile!r} (known: {', '.join(profiles)})")
        where = (placement.start, placement.size)
        if where not in profile.placements:
            allowed = ", ".join(f"{s}:{n}" for s, n in profile.placements)
            raise MigLayoutError(
                f"{profile.name} at {where[0]}:{where[1]}: not a placement it allows ({allowed})"
            )
        for s in range(placement.start, placement.start + placement.size):
            if used[s]:
                raise MigLayoutError(f"{profile.name} at {where[0]}:{where[1]} overlaps memory slice {s}")
            used[s] = True
        compute += profile.compute_slices
        count[profile.name] = count.get(profile.name, 0) + 1
        if count[profile.name] > profile.max_count:
            raise MigLayoutError(f"{count[profile.name]} x {profile.name}: at most {profile.max_count}")
    if compute > COMPUTE_SLICES:
        raise MigLayoutError(f"{compute} compute slices: a GPU has {COMPUTE_SLICES}")


def expand(layout: MigLayout, profiles: Mapping[str, SliceProfile]) -> tuple[Placement, ...]:
    """The layout's instances at concrete placements (larger profiles first, each at the lowest start that
    leaves the rest placeable: a depth-first search, deterministic), or MigLayoutError saying why none
    exists. Checked with `check_placements`."""
    wanted: list[SliceProfile] = []
    for name, n in layout.counts:
        if name not in profiles:
            raise MigLayoutError(f"layout {layout.name}: no profile {name!r} (known: {', '.join(profiles)})")
        if n < 0:
            raise MigLayoutError(f"layout {layout.name}: {n} x {name}")
        wanted.extend([profiles[name]] * n)
    if not wanted:
        raise MigLayoutError(f"layout {layout.name}: no instance")
    if len(wanted) > MAX_INSTANCES:
        raise MigLayoutError(
            f"layout {layout.name}: {len(wanted)} instances, a GPU holds at most {MAX_INSTANCES}"
        )
    compute = sum(p.compute_slices for p in wanted)
    memory = sum(p.memory_slices for p in wanted)
    if compute > COMPUTE_SLICES or memory > MEMORY_SLICES:
        raise MigLayoutError(
            f"layout {layout.name}: {compute} compute and {memory} memory slices "
            f"(a GPU has {COMPUTE_SLICES} and {MEMORY_SLICES})"
        )
    for profile in {p.name: p for p in wanted}.values():
        n = sum(1 for p in wanted if p.name == profile.name)
        if n > profile.max_count:
            raise MigLayoutError(f"layout {layout.name}: {n} x {profile.name}, at most {profile.max_count}")
    wanted.sort(key=lambda p: (-p.memory_slices, -p.compute_slices, p.name))
    found = search_placements([(p.name, p.placements) for p in wanted])
    if found is None:
        raise MigLayoutError(f"layout {layout.name}: its instances fit no set of allowed placements")
    chosen = [Placement(name, start, size) for name, start, size in found]
    result = tuple(sorted(chosen, key=lambda p: p.start))
    check_placements(result, profiles)
    return result


def gpu_equivalents(profile: SliceProfile | int) -> Fraction:
    """What a slice counts for in GPUs: its share of the compute slices, g / 7 (a whole GPU: 1)."""
    g = profile if isinstance(profile, int) else profile.compute_slices
    return Fraction(g, COMPUTE_SLICES)


def smallest_fitting(
    profiles: Iterable[SliceProfile], memory_mib: int, compute_slices: int = 1
) -> SliceProfile | None:
    """The profile with the least memory (then fewest compute slices, then name) that has at least
    `memory_mib` MiB and `compute_slices`; None when none does."""
    fitting = [p for p in profiles if p.memory_mib >= memory_mib and p.compute_slices >= compute_slices]
    return min(fitting, key=lambda p: (p.memory_mib, p.compute_slices, p.memory_slices, p.name), default=None)


@dataclass(frozen=True)
class FreeInstance:
    """A free GPU instance: on which GPU (any key; GPUs are ordered by `order`), at which start, of which
    profile."""

    gpu: Hashable
    start: int
    profile: SliceProfile
    order: int = 0  # the GPU's place in the fleet: the last tie-break


def normalised_mix(mix: Mapping[str, float], profiles: Mapping[str, SliceProfile]) -> dict[str, float]:
    """The expected mix of requests as probabilities (weights >= 0, not all 0, known profiles)."""
    unknown = sorted(set(mix) - set(profiles))
    if unknown:
        raise MigLayoutError(f"mix: no profile {', '.join(unknown)}")
    total = sum(mix.values())
    if any(w < 0 for w in mix.values()) or total <= 0:
        raise MigLayoutError("mix: weights must be >= 0 and not all 0")
    return {name: w / total for name, w in mix.items() if w > 0}


def fit_probability(
    instance: SliceProfile, mix: Mapping[str, float], profiles: Mapping[str, SliceProfile]
) -> float:
    """P(a request drawn from the (normalised) mix fits an instance of `instance`)."""
    return sum(p for name, p in mix.items() if instance.can_host(profiles[name]))


def fragmentation(
    free: Iterable[SliceProfile], mix: Mapping[str, float], profiles: Mapping[str, SliceProfile]
) -> float:
    """The fleet's fragmentation for the mix: over its free instances, the expected compute slices a request
    drawn from the (normalised) mix cannot use, sum of g(i) * P(request does not fit i)."""
    return sum(i.compute_slices * (1.0 - fit_probability(i, mix, profiles)) for i in free)


def _best_fit_key(instance: FreeInstance, request: SliceProfile, gpu_free: Mapping[Hashable, int]) -> tuple:
    return (
        instance.profile.compute_slices - request.compute_slices,
        instance.profile.memory_slices - request.memory_slices,
        instance.profile.memory_mib - request.memory_mib,
        gpu_free.get(instance.gpu, 0) - instance.profile.compute_slices,
        instance.order,
        instance.start,
    )


def choose(
    free: Iterable[FreeInstance],
    request: SliceProfile,
    rule: str = BEST_FIT,
    *,
    mix: Mapping[str, float] | None = None,
    profiles: Mapping[str, SliceProfile] | None = None,
    gpu_free: Mapping[Hashable, int] | None = None,
) -> FreeInstance | None:
    """The free instance `request` takes under `rule` (module docstring), or None when no free instance can
    host it. `gpu_free` (GPU -> its free compute slices) lets best-fit pack onto the fullest GPU; without it
    each GPU's free slices are summed from `free`. The fragmentation-aware rule needs the expected `mix`
    (profile name -> weight) and the `profiles` it names."""
    if rule not in SLICE_RULES:
        raise MigLayoutError(f"rule {rule!r}? (known: {', '.join(SLICE_RULES)})")
    free = list(free)
    candidates = [i for i in free if i.profile.can_host(request)]
    if not candidates:
        return None
    if gpu_free is None:
        sums: dict[Hashable, int] = {}
        for i in free:
            sums[i.gpu] = sums.get(i.gpu, 0) + i.profile.compute_slices
        gpu_free = sums
    if rule == BEST_FIT:
        return min(candidates, key=lambda i: _best_fit_key(i, request, gpu_free))
    if mix is None or profiles is None:
        raise MigLayoutError("the fragmentation-aware rule needs the expected mix and its profiles")
    weights = normalised_mix(mix, profiles)
    return min(
        candidates,
        key=lambda i: (
            round(i.profile.compute_slices * fit_probability(i.profile, weights, profiles), 12),
            *_best_fit_key(i, request, gpu_free),
        ),
    )


@dataclass
class SliceFleet:
    """The MIG GPUs of a fleet, each carved by one layout, and which job holds which instance (static MIG:
    instances are never re-made). `place` takes a free instance for a job by a rule, `release` frees it."""

    profiles: Mapping[str, SliceProfile]
    instances: list[list[Placement]] = field(default_factory=list)  # per GPU, by start
    holder: list[list[Hashable | None]] = field(default_factory=list)  # per GPU, per instance: the job
    where: dict[Hashable, tuple[int, int]] = field(default_factory=dict)  # job -> (GPU, instance)
    gpu_free: list[int] = field(default_factory=list)  # per GPU: free compute slices in free instances

    @classmethod
    def build(cls, gpus: int, layout: MigLayout, profiles: Mapping[str, SliceProfile]) -> SliceFleet:
        placements = list(expand(layout, profiles))
        fleet = cls(profiles)
        for _ in range(gpus):
            fleet.instances.append(list(placements))
            fleet.holder.append([None] * len(placements))
            fleet.gpu_free.append(sum(profiles[p.profile].compute_slices for p in placements))
        return fleet

    @classmethod
    def of_gpus(cls, layouts: Sequence[MigLayout], profiles: Mapping[str, SliceProfile]) -> SliceFleet:
        """A fleet whose GPUs are carved each by its own layout (`layouts`: one per GPU, in GPU order): trays
        of a site that carry different layouts."""
        fleet = cls(profiles)
        for layout in layouts:
            one = cls.build(1, layout, profiles)
            fleet.instances += one.instances
            fleet.holder += one.holder
            fleet.gpu_free += one.gpu_free
        return fleet

    def __len__(self) -> int:
        return len(self.instances)

    def free(self) -> list[FreeInstance]:
        return [
            FreeInstance(g, placement.start, self.profiles[placement.profile], g)
            for g, placements in enumerate(self.instances)
            for k, placement in enumerate(placements)
            if self.holder[g][k] is None
        ]

    def free_profiles(self) -> list[SliceProfile]:
        return [
            self.profiles[placement.profile]
            for g, placements in enumerate(self.instances)
            for k, placement in enumerate(placements)
            if self.holder[g][k] is None
        ]

    def hostable(self, request: SliceProfile) -> bool:
        """Some instance of the fleet (free or not) can host `request`."""
        return any(
            self.profiles[p.profile].can_host(request) for placements in self.instances for p in placements
        )

    def place(
        self,
        job: Hashable,
        request: SliceProfile,
        rule: str = BEST_FIT,
        mix: Mapping[str, float] | None = None,
        free: Sequence[FreeInstance] | None = None,
    ) -> FreeInstance | None:
        """Give `job` a free instance for `request` by `rule`; None (nothing changed) when none can host
        it. `free`, when given, is the fleet's free instances as the caller keeps them (`free()`)."""
        if job in self.where:
            raise MigLayoutError(f"job {job!r} already holds an instance")
        chosen = choose(
            self.free() if free is None else free,
            request,
            rule,
            mix=mix,
            profiles=self.profiles,
            gpu_free=dict(enumerate(self.gpu_free)),
        )
        if chosen is None:
            return None
        g = int(chosen.order)
        k = next(k for k, p in enumerate(self.instances[g]) if p.start == chosen.start)
        if self.holder[g][k] is not None:
            raise MigLayoutError(f"GPU {g} instance at {chosen.start} is not free")
        self.holder[g][k] = job
        self.where[job] = (g, k)
        self.gpu_free[g] -= chosen.profile.compute_slices
        return chosen

    def release(self, job: Hashable) -> None:
        g, k = self.where.pop(job)
        self.holder[g][k] = None
        self.gpu_free[g] += self.profiles[self.instances[g][k].profile].compute_slices

    @property
    def compute_slices(self) -> int:
        return sum(
            self.profiles[p.profile].compute_slices for placements in self.instances for p in placements
        )

    @property
    def busy_compute_slices(self) -> int:
        return self.compute_slices - sum(self.gpu_free)
