"""MIG layouts an admin can give a tray: named sets of MIG devices per GPU, built from the profiles the GPUs
reported, in the shape of the GPU Operator's mig-parted configuration.

Pure Python (no Django). Nothing here knows a profile name: the catalogue is made from the `-lgip`/`-lgipp`
profiles a GPU of the same model reported (inventory.discovery.mig.MigProfile), so a driver that renames a
profile (GB200 printed ``1g.24gb`` on early drivers and ``1g.23gb`` later) renames the layouts with it.

A layout is what mig-parted calls a config: ``{"devices": all, "mig-enabled": true, "mig-devices":
{"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1}}`` for every GPU of the tray (the MIG manager applies one config
per node, selected by the node's ``nvidia.com/mig.config`` label). The catalogue offers, named as mig-parted's
own default configs name them:

* ``all-disabled``: MIG off, whole GPUs again;
* ``all-<profile>``: as many instances of one profile as fit one GPU (``all-1g.23gb``: 7);
* ``all-balanced``: two of the smallest one-compute-slice profile, one two-slice and one three-slice profile
  (mig-parted's ``all-balanced`` for A100 to GB300), when the GPU offers them and they fit together.

Every layout is checked against the profiles' possible placements (``-lgipp``: start and size in memory
slices), because placements, not counts, decide what fits: a 3g at 0:4 leaves no room for a 4g, and seven
1g.23gb fill every compute slice. :func:`place` finds one placement of every instance (the largest first) or
says why none exists.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from inventory.discovery.mig import MEMORY_SLICES, MigProfile

DISABLED = "all-disabled"
# A tray with one of these (ComputeTray.mig_layout) is given whole GPUs: none chosen, or MIG off.
WHOLE_GPU_LAYOUTS = ("", "all-disabled")
BALANCED = "all-balanced"
COMPUTE_SLICES = 7  # every MIG-capable part since A100: 7 compute slices, 8 memory slices
MAX_INSTANCES = 7
# A layout name is a Kubernetes label value (nvidia.com/mig.config) and a YAML key of mig-parted's file.
NAME = re.compile(r"^[a-z0-9]([a-z0-9.+-]{0,61}[a-z0-9])?\Z")
# "<g>g.<memory>gb[+me…]": NVIDIA's naming contract gives the compute slices (what Slurm's NVML plugin and
# GFD read too); the memory is never taken from the name (MigProfile.memory_mib is what -lgip printed).
_COMPUTE = re.compile(r"^([0-9]{1,2})g\.")


class LayoutError(ValueError):
    """A layout that cannot be applied to a GPU: the message says why, in an admin's words."""


def compute_slices(profile_name: str) -> int:
    """The compute slices of a GPU instance profile ("3g.93gb" -> 3)."""
    match = _COMPUTE.match(profile_name)
    if not match or not 1 <= int(match.group(1)) <= COMPUTE_SLICES:
        raise LayoutError(f"{profile_name!r} is not a MIG GPU instance profile name (<g>g.<memory>gb)")
    return int(match.group(1))


def gpu_equivalents(profile_name: str) -> float:
    """A slice's share of a whole GPU: its compute slices out of seven (a 1g counts 1/7, a 7g one GPU)."""
    return compute_slices(profile_name) / COMPUTE_SLICES


def slices_within(profile_name: str, gpus: int | None, offered: int) -> int | None:
    """How many slices of a profile a figure in GPU-equivalents (a guarantee or a limit; None: no bound)
    holds, never more than the `offered` slices of it: min(floor(gpus * 7 / g), offered). The one rule by
    which a department's quota becomes a per-profile quota for the schedulers that count each MIG profile on
    its own (Kueue's ClusterQueues, Slurm's typed GRES limits)."""
    if gpus is None:
        return None
    return min(gpus * COMPUTE_SLICES // compute_slices(profile_name), offered)


@dataclass(frozen=True)
class MigLayout:
    """One mig-parted config for every GPU of a tray: `devices` maps profile name -> instances per GPU (empty
    with `enabled` False: MIG off)."""

    name: str
    devices: tuple[tuple[str, int], ...] = ()
    enabled: bool = True

    @property
    def counts(self) -> dict[str, int]:
        return dict(self.devices)

    def per_gpu(self) -> int:
        return sum(count for _, count in self.devices)

    def gpu_equivalents(self) -> float:
        return sum(gpu_equivalents(name) * count for name, count in self.devices)

    def summary(self) -> str:
        if not self.enabled:
            return "MIG off (whole GPUs)"
        return ", ".join(f"{count} x {name}" for name, count in self.devices) + " per GPU"

    def as_dict(self) -> dict:
        """What a tray stores (ComputeTray.mig_layout_devices) and mig-parted's `mig-devices`."""
        return dict(self.devices)

    def mig_parted_entry(self) -> dict:
        """This config as one entry of mig-parted's `mig-configs` (version v1)."""
        if not self.enabled:
            return {"devices": "all", "mig-enabled": False}
        return {"devices": "all", "mig-enabled": True, "mig-devices": dict(self.devices)}


def layout(name: str, devices: Mapping[str, int] | Iterable[tuple[str, int]]) -> MigLayout:
    """A layout from a name and counts, in a stable order (largest profile first, then by name)."""
    items = dict(devices).items()
    if not NAME.match(name):
        raise LayoutError(
            f"{name!r} is not a layout name: lower-case letters, digits, '.', '+' and '-', at most 63"
        )
    ordered = sorted(((str(k), int(v)) for k, v in items if int(v) > 0), key=_order)
    return MigLayout(name=name, devices=tuple(ordered), enabled=name != DISABLED)


def _order(item: tuple[str, int]) -> tuple[int, str]:
    name = item[0]
    try:
        return (-compute_slices(name), name)
    except LayoutError:
        return (0, name)


def disabled() -> MigLayout:
    return MigLayout(name=DISABLED, devices=(), enabled=False)


def place(devices: Mapping[str, int], profiles: Iterable[MigProfile]) -> list[tuple[str, int, int]]:
    """One placement (profile, start, size) of every instance `devices` asks for on one GPU, or LayoutError
    saying why none exists: an unknown profile, more than the driver allows, too many compute slices, or
    placements that cannot all be taken at once (searched exhaustively: at most 7 instances, 8 slots)."""
    by_name = {p.name: p for p in profiles}
    wanted: list[MigProfile] = []
    for name, count in devices.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise LayoutError(f"{name}: the count must be a whole number, 0 or more")
        if count == 0:
            continue
        profile = by_name.get(name)
        if profile is None:
            offered = ", ".join(sorted(by_name)) or "none reported"
            raise LayoutError(f"{name} is not a profile these GPUs offer ({offered})")
        if count > profile.instances_total:
            raise LayoutError(f"{name}: {count} asked, the driver allows at most {profile.instances_total}")
        if not profile.placements:
            raise LayoutError(f"{name}: no possible placements were reported (nvidia-smi mig -lgipp)")
        wanted += [profile] * count
    if len(wanted) > MAX_INSTANCES:
        raise LayoutError(f"{len(wanted)} instances asked: a GPU holds at most {MAX_INSTANCES}")
    slices = sum(compute_slices(p.name) for p in wanted)
    if slices > COMPUTE_SLICES:
        raise LayoutError(f"{slices} compute slices asked: a GPU has {COMPUTE_SLICES}")
    # Largest first: fewer choices early, so the search stays tiny.
    wanted.sort(key=lambda p: (-max(size for _, size in p.placements), p.name))
    chosen = search_placements([(p.name, p.placements) for p in wanted])
    if chosen is None:
        raise LayoutError(
            "these instances cannot be placed together on one GPU: their possible placements overlap "
            f"({', '.join(f'{count} x {name}' for name, count in devices.items() if count)})"
        )
    return chosen


def search_placements(
    wanted: Sequence[tuple[str, Iterable[tuple[int, int]]]],
) -> list[tuple[str, int, int]] | None:
    """One placement (profile, start, size) for each instance of `wanted` (profile name and its allowed
    (start, size) placements, in the order to try them: larger first keeps the search tiny), none sharing a
    memory slice, sorted by start; None when there is none. Exhaustive, depth first, each profile's
    placements in start order, so the answer is deterministic; identical profiles take increasing starts
    (the same set is not searched twice). The one search both the layouts offered to admins (`place`) and
    the simulator's (scheduling.engine.mig.expand) use."""
    used = [False] * MEMORY_SLICES
    chosen: list[tuple[str, int, int]] = []
    options = [(name, sorted(placements)) for name, placements in wanted]

    def search(i: int) -> bool:
        if i == len(options):
            return True
        name, placements = options[i]
        for start, size in placements:
            if start + size > MEMORY_SLICES or any(used[start : start + size]):
                continue
            if i and options[i - 1][0] == name and start < chosen[-1][1]:
                continue
            used[start : start + size] = [True] * size
            chosen.append((name, start, size))
            if search(i + 1):
                return True
            chosen.pop()
            used[start : start + size] = [False] * size
        return False

    return sorted(chosen, key=lambda c: c[1]) if search(0) else None


def _fits(devices: Mapping[str, int], profiles: list[MigProfile]) -> bool:
    try:
        place(devices, profiles)
    except LayoutError:
        return False
    return True


def _most(profile: MigProfile, profiles: list[MigProfile]) -> int:
    count = profile.instances_total
    while count and not _fits({profile.name: count}, profiles):
        count -= 1
    return count


def catalogue(profiles: Iterable[MigProfile]) -> list[MigLayout]:
    """The layouts these profiles allow: all-disabled, all-balanced (when offered), one all-<profile> each.

    Profiles with a media-extension suffix (``+me``, ``-me``, ``+gfx``: one per GPU, for video work) are
    left to a hand-made layout; only plain ``<g>g.<memory>gb`` profiles get an ``all-`` layout."""
    usable = [p for p in profiles if _plain(p.name) and p.placements]
    result = [disabled()]
    ones = sorted((p for p in usable if compute_slices(p.name) == 1), key=lambda p: (p.memory_mib, p.name))
    twos = sorted((p for p in usable if compute_slices(p.name) == 2), key=lambda p: (p.memory_mib, p.name))
    threes = sorted((p for p in usable if compute_slices(p.name) == 3), key=lambda p: (p.memory_mib, p.name))
    if ones and twos and threes:
        balanced = {ones[0].name: 2, twos[0].name: 1, threes[0].name: 1}
        if _fits(balanced, usable):
            result.append(layout(BALANCED, balanced))
    for profile in sorted(usable, key=lambda p: (compute_slices(p.name), p.memory_mib, p.name)):
        count = _most(profile, usable)
        if count:
            result.append(layout(f"all-{profile.name}", {profile.name: count}))
    return result


def _plain(name: str) -> bool:
    return bool(re.match(r"^[0-9]{1,2}g\.[0-9]{1,4}gb\Z", name))


def find(name: str, profiles: Iterable[MigProfile]) -> MigLayout:
    """The catalogue's layout of that name, or LayoutError listing those there are."""
    options = catalogue(profiles)
    for option in options:
        if option.name == name:
            return option
    raise LayoutError(f"{name!r} is not a layout these GPUs allow ({', '.join(o.name for o in options)})")


def mig_parted_config(layouts: Iterable[MigLayout]) -> dict:
    """mig-parted's configuration file (`version: v1`, `mig-configs`) holding these layouts, one entry each;
    all-disabled is always there (a tray taken out of MIG needs it). Two layouts of one name that differ
    (two GPU models whose all-balanced differ) are refused: one label value cannot name both."""
    configs: dict[str, MigLayout] = {DISABLED: disabled()}
    for item in layouts:
        known = configs.setdefault(item.name, item)
        if known != item:
            raise LayoutError(
                f"two different layouts are named {item.name} ({known.summary()}; {item.summary()}): "
                "give GPU models with different profiles differently named layouts"
            )
    return {
        "version": "v1",
        "mig-configs": {name: [configs[name].mig_parted_entry()] for name in sorted(configs)},
    }
