"""The compute fabric above the NVLink domain: the one shape every layer shares (issue 33).

Pure (no Django, no I/O). A site's InfiniBand/Ethernet compute fabric is a tree: racks (NVLink domains) hang
under leaf groups (a *scalable unit*: the leaves a rail-optimized fabric gives one group of racks), scalable
units under spine groups, spine groups under the site. The inventory imports it (ibnetdiscover, Topograph's
node labels, a site file) and gives it as a :class:`Fabric`; the placement engine uses it to keep a multi-rack
job "as close as possible, only expanding outward when necessary"; the Slurm and Kubernetes renderers write it
as a tree topology and Kueue Topology levels. One shape, so what the inventory shows is what is placed on and
what is rendered.

Levels are named top-down, without the site (one site per portal) and without the rack (the NVLink level the
rest of Rackplane already knows): ``levels == ("spine", "unit")`` on a two-tier fabric, so
``Fabric.path(rack) == ("spine-a", "su-1")``. A rack the fabric does not know has no path (placed "anywhere",
as before). Group names are unique within their level, not across levels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# The two levels a GB200/GB300 rail-optimized fabric has above the rack, top-down: what the importers give
# when the source names no levels of its own.
SPINE = "spine"
UNIT = "unit"
DEFAULT_LEVELS: tuple[str, ...] = (SPINE, UNIT)


@dataclass(frozen=True, slots=True)
class Fabric:
    """Each known rack's place in the fabric, top-down, one group name per level."""

    levels: tuple[str, ...] = DEFAULT_LEVELS
    racks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.levels or len(set(self.levels)) != len(self.levels):
            raise ValueError("a fabric needs at least one level and distinct level names")
        for rack, path in self.racks.items():
            if len(path) != len(self.levels):
                raise ValueError(f"rack {rack!r} has {len(path)} levels, the fabric {len(self.levels)}")

    def path(self, rack: str) -> tuple[str, ...] | None:
        return self.racks.get(rack)

    def group(self, rack: str, level: str) -> str | None:
        """The name of the rack's group at ``level`` (e.g. its scalable unit), or None when unknown."""
        path = self.racks.get(rack)
        return None if path is None else path[self.levels.index(level)]

    def members(self, level: str) -> dict[str, list[str]]:
        """Group name at ``level`` -> its racks (sorted), for every group with a known rack."""
        depth = self.levels.index(level)
        out: dict[str, list[str]] = {}
        for rack, path in self.racks.items():
            out.setdefault(path[depth], []).append(rack)
        for racks in out.values():
            racks.sort()
        return out

    def common_level(self, racks: Iterable[str]) -> str | None:
        """The lowest level whose one group holds all ``racks``; None if they span the site or one is unknown.

        ``common_level(["r1"]) == levels[-1]`` for a known rack: a one-rack set lies inside its unit.
        """
        paths = [self.racks.get(rack) for rack in racks]
        if not paths or any(p is None for p in paths):
            return None
        for depth in range(len(self.levels) - 1, -1, -1):
            if len({p[: depth + 1] for p in paths if p is not None}) == 1:
                return self.levels[depth]
        return None

    @property
    def empty(self) -> bool:
        return not self.racks
