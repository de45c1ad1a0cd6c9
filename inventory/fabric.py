"""The fabric in use, as the rest of Rackplane reads it (issue 33).

`current_fabric()` is the one seam: the scheduling pass and the renderers call it once each and get a pure
`core.fabric.Fabric` (one query, nothing kept between calls, so it can never be stale: an import, a switch of
the source in use or a rack's rename is seen by the next call). `overview()` and `conflicts()` are what the
fabric page and the rack page show; `rack_fabric()` one rack's place.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from django.db.models import OuterRef, Subquery
from django.utils.translation import gettext, gettext_lazy

from core.fabric import DEFAULT_LEVELS, Fabric
from core.sentences import AND_MORE
from inventory.models import FabricImport, RackPlace, TrayPlace


def fabric_of(fabric_import: FabricImport | int | None) -> Fabric:
    """One import's racks as a Fabric (one query); the empty Fabric for None."""
    if fabric_import is None:
        return Fabric()
    rows = RackPlace.objects.filter(fabric=fabric_import).values_list(
        "rack__name", "unit__parent__name", "unit__name"
    )
    return Fabric(levels=DEFAULT_LEVELS, racks={rack: (spine, unit) for rack, spine, unit in rows})


def current_fabric() -> Fabric:
    """The fabric in use (`FabricImport.in_use`): each known rack's (spine group, unit); one query. A site
    that imported none gets the empty Fabric (every rack placed "anywhere", as before issue 33)."""
    rows = RackPlace.objects.filter(fabric__in_use=True).values_list(
        "rack__name", "unit__parent__name", "unit__name"
    )
    return Fabric(levels=DEFAULT_LEVELS, racks={rack: (spine, unit) for rack, spine, unit in rows})


def tray_places(fabric_import: FabricImport | int) -> dict[str, str]:
    """Hostname -> unit for the trays cabled elsewhere than their rack's unit (one query)."""
    return dict(TrayPlace.objects.filter(fabric=fabric_import).values_list("tray__hostname", "unit__name"))


@dataclass
class Unit:
    name: str
    racks: list[str]
    free_gpus: int = 0
    total_gpus: int = 0
    conflicted: list[str] = field(default_factory=list)  # its racks another source groups differently


@dataclass
class SpineGroup:
    name: str
    units: list[Unit]

    @property
    def racks(self) -> int:
        return sum(len(unit.racks) for unit in self.units)

    @property
    def free_gpus(self) -> int:
        return sum(unit.free_gpus for unit in self.units)


def overview(
    fabric: Fabric, free: Mapping[str, int], total: Mapping[str, int], conflicted: set[str] = frozenset()
) -> list[SpineGroup]:
    """Spine groups -> units -> racks, with the free and total GPUs per unit from per-rack counts."""
    spines: dict[str, list[Unit]] = defaultdict(list)
    for unit_name, racks in sorted(fabric.members(DEFAULT_LEVELS[-1]).items()):
        spine = fabric.group(racks[0], DEFAULT_LEVELS[0]) or ""
        spines[spine].append(
            Unit(
                name=unit_name,
                racks=racks,
                free_gpus=sum(free.get(rack, 0) for rack in racks),
                total_gpus=sum(total.get(rack, 0) for rack in racks),
                conflicted=[rack for rack in racks if rack in conflicted],
            )
        )
    return [SpineGroup(name, units) for name, units in sorted(spines.items())]


LEVEL_WORDS = {"spine": gettext_lazy("spine group"), "unit": gettext_lazy("unit")}
SHOWN_RACKS = 3  # racks named in one clause of a disagreement, then "and N more"
DIFFER_BOTH = gettext_lazy(
    "%(level)s %(mine)s in use, %(other)s there: with %(only_in_use)s only in use, "
    "with %(only_there)s only there"
)
DIFFER_IN_USE = gettext_lazy("%(level)s %(mine)s in use, %(other)s there: with %(only_in_use)s only in use")
DIFFER_THERE = gettext_lazy("%(level)s %(mine)s in use, %(other)s there: with %(only_there)s only there")


def _listed(racks: list[str]) -> str:
    """The first SHOWN_RACKS racks, then how many more (in the viewer's language)."""
    text = ", ".join(racks[:SHOWN_RACKS])
    more = len(racks) - SHOWN_RACKS
    return gettext(AND_MORE) % {"names": text, "more": more} if more > 0 else text


def _differ(level: str, mine: str, other: str, only_in_use: list[str], only_there: list[str]) -> str:
    """Why a rack is grouped differently: its group in each source and the racks that share only one of
    them with it (at least one of the two lists is not empty, else the sources would agree)."""
    template = DIFFER_BOTH if only_in_use and only_there else DIFFER_IN_USE if only_in_use else DIFFER_THERE
    return str(template) % {
        "level": LEVEL_WORDS[level],
        "mine": mine,
        "other": other,
        "only_in_use": _listed(only_in_use),
        "only_there": _listed(only_there),
    }


def disagreements(ours: Fabric, theirs: Fabric) -> dict[str, str]:
    """Racks the two fabrics group differently -> why, in words (group names differ between sources, so
    what is compared is which racks share a group: two racks together in one source and apart in the other;
    the words name the racks that share the rack's group in one source only). Only racks both know are
    compared."""
    shared = sorted(set(ours.racks) & set(theirs.racks))
    out: dict[str, str] = {}
    # The lowest level first: a rack in another unit is said so, rather than only in another spine group.
    for depth, level in reversed(list(enumerate(DEFAULT_LEVELS))):
        mine_members: dict[str, set[str]] = defaultdict(set)
        other_members: dict[str, set[str]] = defaultdict(set)
        for rack in shared:
            mine_members[ours.racks[rack][depth]].add(rack)
            other_members[theirs.racks[rack][depth]].add(rack)
        for rack in shared:
            mine, other = ours.racks[rack][depth], theirs.racks[rack][depth]
            if rack in out or mine_members[mine] == other_members[other]:
                continue
            out[rack] = _differ(
                level,
                mine,
                other,
                sorted(mine_members[mine] - other_members[other]),
                sorted(other_members[other] - mine_members[mine]),
            )
    return out


@dataclass
class Conflict:
    source: FabricImport
    racks: dict[str, str]  # rack -> why


def conflicts() -> tuple[FabricImport | None, list[FabricImport], list[Conflict]]:
    """The import in use, the others, and where each other one groups racks differently from it."""
    imports = list(FabricImport.objects.select_related("imported_by").order_by("-in_use", "source"))
    in_use = next((one for one in imports if one.in_use), None)
    others = [one for one in imports if not one.in_use]
    if in_use is None:
        return None, others, []
    ours = fabric_of(in_use)
    found = []
    for other in others:
        racks = disagreements(ours, fabric_of(other))
        if racks:
            found.append(Conflict(other, racks))
    return in_use, others, found


@dataclass
class RackFabric:
    """What the rack page says of a rack's fabric place: its (spine group, unit) in use, and where another
    source places it differently."""

    spine: str | None
    unit: str | None
    disagreements: list[tuple[str, str]]  # (source's label, why)


def rack_fabric(rack) -> RackFabric:
    """One query when at most one source places the rack (the usual case); the comparison of the sources
    (`conflicts`) only when several do."""
    places = list(
        RackPlace.objects.filter(rack=rack).values_list("fabric__in_use", "unit__parent__name", "unit__name")
    )
    in_use = next(((spine, unit) for used, spine, unit in places if used), (None, None))
    disagreeing = []
    if len(places) > 1:
        disagreeing = [
            (str(conflict.source.get_source_display()), conflict.racks[rack.name])
            for conflict in conflicts()[2]
            if rack.name in conflict.racks
        ]
    return RackFabric(in_use[0], in_use[1], disagreeing)


def rack_place_in_use(rack_path: str = "rack") -> dict:
    """Annotations giving each row's rack's spine group (`fabric_spine`) and scalable unit (`fabric_unit`) in
    the fabric in use (None where it has none), so a page reading trays or racks learns their fabric place
    in the same query (`rack_path`: the lookup from the row to its Rack, e.g. "rack")."""
    place = RackPlace.objects.filter(rack=OuterRef(rack_path), fabric__in_use=True)
    return {
        "fabric_spine": Subquery(place.values("unit__parent__name")[:1]),
        "fabric_unit": Subquery(place.values("unit__name")[:1]),
    }


@dataclass(frozen=True)
class Span:
    """Where a set of racks (a job's) sits in the fabric in use: `level` is the narrowest level whose one
    group holds them all ("unit", "spine"), or None when they span spine groups; `unknown` are the racks
    the fabric does not place (then the level is None too)."""

    level: str | None
    units: list[str]
    spines: list[str]
    unknown: list[str]


def span(places: Mapping[str, tuple[str | None, str | None]]) -> Span | None:
    """The Span of racks -> their (spine group, unit) in use (None, None where unplaced); None when the fabric
    in use places none of them (no fabric, or racks outside it): nothing to say."""
    known = {rack: (spine, unit) for rack, (spine, unit) in places.items() if spine and unit}
    if not known:
        return None
    unknown = sorted(set(places) - set(known))
    level = None if unknown else Fabric(levels=DEFAULT_LEVELS, racks=known).common_level(known)
    return Span(
        level=level,
        units=sorted({unit for _spine, unit in known.values()}),
        spines=sorted({spine for spine, _unit in known.values()}),
        unknown=unknown,
    )
