"""Apply a parsed fabric (inventory.discovery.fabric) to the inventory: all or nothing (issue 33).

`plan(parsed)` resolves what a reader gave against the inventory (racks by name, hosts by hostname) and says
what would change, refusing the whole input in words when it names a rack the inventory does not have, a
host in the wrong case, or nothing the inventory knows. `apply(parsed, ...)` writes it in one transaction:
the source's previous rows are replaced whole. The first import is put in use; a later one of another source
is kept beside it and compared (inventory.fabric.conflicts) unless `use` says to put it in use, so one source
never silently overwrites another. Both the management command and the import page call these.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.fabric import Fabric
from core.hardware import GPUS_PER_TRAY
from inventory.choices import FabricLevel
from inventory.discovery.fabric.parsed import FabricInputError, ParsedFabric
from inventory.fabric import disagreements, fabric_of
from inventory.models import ComputeTray, FabricGroup, FabricImport, GpuRail, Rack, RackPlace, TrayPlace

SHOWN = 20  # unknown hosts named in a refusal or a plan


@dataclass
class Plan:
    """What an import would write, and what it changes against the source's last import and the fabric in
    use."""

    parsed: ParsedFabric
    racks: dict[int, str] = field(default_factory=dict)  # rack pk -> unit
    rack_names: dict[int, str] = field(default_factory=dict)
    trays: dict[int, str] = field(default_factory=dict)  # tray pk -> unit, where it differs from its rack's
    rails: dict[tuple[int, int], tuple[int, str]] = field(default_factory=dict)  # (tray pk, GPU) -> rail
    unknown_hosts: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # against the source's previous import, in words
    conflicts: dict[str, str] = field(default_factory=dict)  # against the fabric in use (another source)
    becomes_in_use: bool = False

    @property
    def fabric(self) -> Fabric:
        units = self.parsed.units
        return Fabric(racks={self.rack_names[pk]: (units[unit], unit) for pk, unit in self.racks.items()})


def _resolve_racks(parsed: ParsedFabric, plan: Plan) -> None:
    known = dict(Rack.objects.filter(name__in=list(parsed.racks)).values_list("name", "pk"))
    missing = [name for name in parsed.racks if name not in known]
    if missing:
        raise FabricInputError(
            f"{len(missing)} rack(s) not in the inventory: {', '.join(sorted(missing)[:SHOWN])} "
            "(nothing was imported)"
        )
    for name, unit in parsed.racks.items():
        plan.racks[known[name]] = unit
        plan.rack_names[known[name]] = name


def _resolve_hosts(parsed: ParsedFabric, plan: Plan) -> dict[str, tuple[int, int]]:
    """Hostname -> (tray pk, rack pk) for the hosts the inventory has; the others listed (a fabric has
    storage and management hosts too) unless one differs from a tray's hostname only in case."""
    hosts = list(parsed.hosts) + [host for host, _ in parsed.rails if host not in parsed.hosts]
    trays = {
        hostname: (pk, rack)
        for hostname, pk, rack in ComputeTray.objects.filter(hostname__in=hosts).values_list(
            "hostname", "pk", "rack_id"
        )
    }
    unknown = sorted(set(hosts) - set(trays))
    if unknown:
        lowered = {host.lower() for host in unknown if host != host.lower()}
        wrong_case = sorted(
            ComputeTray.objects.filter(hostname__in=list(lowered)).values_list("hostname", flat=True)
        )
        if wrong_case:
            raise FabricInputError(
                f"host(s) named in another case than the inventory's trays: {', '.join(wrong_case[:SHOWN])} "
                "(hostnames are lower case; nothing was imported)"
            )
    plan.unknown_hosts = unknown
    return trays


def plan(parsed: ParsedFabric, *, use: bool = False) -> Plan:
    """What importing `parsed` would write; FabricInputError (nothing written) when it cannot be applied."""
    result = Plan(parsed=parsed)
    if parsed.racks:
        _resolve_racks(parsed, result)
    trays = _resolve_hosts(parsed, result)
    if parsed.hosts and not parsed.racks:
        # A rack's unit: the one most of its trays' NICs reach; a tray elsewhere keeps its own place.
        votes: dict[int, Counter[str]] = {}
        for host, unit in parsed.hosts.items():
            if host in trays:
                votes.setdefault(trays[host][1], Counter())[unit] += 1
        if not votes:
            raise FabricInputError(
                f"none of the {len(parsed.hosts)} host(s) is a tray of the inventory (e.g. "
                f"{', '.join(sorted(parsed.hosts)[:3])}); nothing was imported"
            )
        names = dict(Rack.objects.filter(pk__in=list(votes)).values_list("pk", "name"))
        for rack, counter in votes.items():
            result.racks[rack] = min(counter.items(), key=lambda item: (-item[1], item[0]))[0]
            result.rack_names[rack] = names[rack]
    for host, unit in parsed.hosts.items():
        if host in trays and result.racks.get(trays[host][1]) != unit:
            result.trays[trays[host][0]] = unit
    for (host, index), rail in parsed.rails.items():
        if host in trays:
            result.rails[(trays[host][0], index)] = rail
    if parsed.unit_leaves:
        # A site file's leaves: rail n of every tray of the unit's racks (and of the trays placed there).
        unit_of_tray = {
            pk: result.racks[rack]
            for pk, rack in ComputeTray.objects.filter(rack__in=list(result.racks)).values_list(
                "pk", "rack_id"
            )
        }
        unit_of_tray.update(result.trays)
        for tray, unit in unit_of_tray.items():
            for index, leaf in enumerate(parsed.unit_leaves.get(unit, [])[:GPUS_PER_TRAY]):
                result.rails[(tray, index)] = (index, leaf)
    _compare(result, use)
    return result


def _path_words(path: tuple[str, ...] | None) -> str:
    return "/".join(path) if path else "not placed"


def _compare(result: Plan, use: bool) -> None:
    mine = FabricImport.objects.filter(source=result.parsed.source).first()
    in_use = FabricImport.objects.filter(in_use=True).first()
    new = result.fabric
    if mine is not None:
        before = fabric_of(mine)
        for rack in sorted(set(before.racks) | set(new.racks)):
            old, now = before.path(rack), new.path(rack)
            if old != now:
                result.changed.append(f"{rack}: {_path_words(old)} -> {_path_words(now)}")
    result.becomes_in_use = use or in_use is None or in_use.source == result.parsed.source
    if in_use is not None and in_use.source != result.parsed.source:
        result.conflicts = disagreements(fabric_of(in_use), new)


def apply(parsed: ParsedFabric, *, label: str = "", user=None, use: bool = False) -> Plan:
    """Write `parsed` as its source's import, replacing that source's previous one; put it in use when no
    import is, when its source is the one in use, or when `use`. All or nothing."""
    try:
        return _apply(parsed, label=label, user=user, use=use)
    except IntegrityError:
        # Two first imports at once (no row to lock yet): the one-in-use constraint refused the second.
        raise FabricInputError(
            "another fabric import was applied at the same moment: nothing was imported; try again"
        ) from None


@transaction.atomic
def _apply(parsed: ParsedFabric, *, label: str, user, use: bool) -> Plan:
    # One import at a time: the rows of every import are locked, so two imports cannot both decide to be
    # the one in use (the partial unique constraint would refuse the second anyway).
    list(FabricImport.objects.select_for_update().order_by("pk").values_list("pk", flat=True))
    result = plan(parsed, use=use)
    now = timezone.now()
    FabricImport.objects.filter(source=parsed.source).delete()
    if result.becomes_in_use:
        FabricImport.objects.filter(in_use=True).update(in_use=False)
    fabric = FabricImport(
        source=parsed.source,
        label=label[:200],
        imported_at=now,
        imported_by=user if getattr(user, "is_authenticated", False) else None,
        in_use=result.becomes_in_use,
        notes=[
            *parsed.notes,
            *(
                [f"{len(result.unknown_hosts)} host(s) not in the inventory left aside"]
                if result.unknown_hosts
                else []
            ),
        ],
    )
    fabric.full_clean()
    fabric.save()
    spines = {
        name: FabricGroup(fabric=fabric, level=FabricLevel.SPINE, name=name) for name in parsed.spine_groups()
    }
    FabricGroup.objects.bulk_create(spines.values())
    units = {
        name: FabricGroup(fabric=fabric, level=FabricLevel.UNIT, name=name, parent=spines[spine])
        for name, spine in sorted(parsed.units.items())
    }
    FabricGroup.objects.bulk_create(units.values())
    RackPlace.objects.bulk_create(
        RackPlace(fabric=fabric, rack_id=rack, unit=units[unit])
        for rack, unit in sorted(result.racks.items())
    )
    TrayPlace.objects.bulk_create(
        TrayPlace(fabric=fabric, tray_id=tray, unit=units[unit])
        for tray, unit in sorted(result.trays.items())
    )
    GpuRail.objects.bulk_create(
        GpuRail(fabric=fabric, tray_id=tray, gpu_index=index, rail=rail, leaf=leaf)
        for (tray, index), (rail, leaf) in sorted(result.rails.items())
    )
    return result


@transaction.atomic
def use_source(source: str) -> FabricImport:
    """Put the last import of `source` in use (an admin settling a conflict for it)."""
    imports = {one.source: one for one in FabricImport.objects.select_for_update().order_by("pk")}
    chosen = imports.get(source)
    if chosen is None:
        raise FabricInputError(f"no import of {source!r} to use")
    if not chosen.in_use:
        FabricImport.objects.filter(in_use=True).update(in_use=False)
        chosen.in_use = True
        chosen.save(update_fields=["in_use"])
    return chosen


def summary(result: Plan, dry_run: bool) -> list[str]:
    """What an import did (or would do, `dry_run`), a line a fact: the commands print it."""
    parsed = result.parsed
    lines = [
        ("Would import" if dry_run else "Imported")
        + f" {parsed.source}: {len(parsed.spine_groups())} spine group(s), {len(parsed.units)} unit(s), "
        f"{len(result.racks)} rack(s), {len(result.trays)} tray(s) placed apart from their rack, "
        f"{len(result.rails)} GPU rail(s)"
        + ("; in use" if result.becomes_in_use else "; kept beside the fabric in use (not in use)"),
    ]
    lines += [f"changed: {line}" for line in result.changed]
    lines += [
        f"conflict with the fabric in use: {rack}: {why}" for rack, why in sorted(result.conflicts.items())
    ]
    if result.unknown_hosts:
        shown = ", ".join(result.unknown_hosts[:SHOWN])
        lines.append(f"{len(result.unknown_hosts)} host(s) not in the inventory left aside: {shown}")
    lines += [f"note: {note}" for note in parsed.notes]
    return lines
