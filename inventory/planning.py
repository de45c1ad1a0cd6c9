"""NVLink partition plans, judged without Django: layouts, presets, and every finding in plain words.

A plan carves one rack (NVLink domain) into partitions of whole compute trays. The service layer
(integrations.plans.service) feeds it the rack's trays as they are now and applies what it accepts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from core.hardware import DEFAULT_CLIQUE_ID, GPUS_PER_TRAY, TRAYS_PER_RACK
from inventory.names import partition_name_error, service_tier_error

PRESETS = {"1x18": 18, "2x9": 9, "3x6": 6, "6x3": 3, "9x2": 2, "18x1": 1}
# A tray's state as the findings say it ("although it is drained").
STATE_WORDS = {"drain": "drained", "maintenance": "in maintenance", "needs_service": "waiting for service"}


class Level(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"  # neither good nor bad: e.g. the wizard's first steps showing the rack as it is
    OK = "ok"


@dataclass(frozen=True)
class Finding:
    level: Level
    message: str
    job: str = ""  # a running job the finding is about (the wizard offers "drain first" beside it)


@dataclass(frozen=True)
class TrayInfo:
    """A tray as it is now, as the plan needs to see it."""

    slot: int
    hostname: str
    state: str = "up"
    healthy_gpus: int = 4
    problems: tuple[str, ...] = ()
    running_jobs: tuple[str, ...] = ()
    partition: str | None = None  # current partition name
    mig_gpus: int = 0  # GPUs in MIG mode: no NVLink peer-to-peer, so no job spanning trays here
    mig_layout: str = ""  # the MIG layout an admin chose for the tray (ComputeTray.mig_layout), if any
    # Seconds from now until the last of its running jobs reaches its time limit (None: no job, or unknown):
    # when a drain-first plan would apply at the latest, if no job ends earlier.
    work_ends_in_s: float | None = None

    @property
    def schedulable(self) -> bool:
        return self.state == "up" and self.healthy_gpus == 4 and not self.problems


@dataclass(frozen=True)
class PlannedPartition:
    name: str
    slots: tuple[int, ...]
    department: str | None = None  # slug of the department it is dedicated to
    slurm_partition: str = ""  # Slurm partition (service tier); empty: the shared one
    # The clique ID it must keep (a partition the scheduler's re-carve leaves as it is: its running work's
    # fabric partition is not renumbered); None: numbered by its place in the plan (_number_cliques).
    clique_id: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "slots", tuple(sorted(self.slots)))


@dataclass(frozen=True)
class TrayChange:
    slot: int
    hostname: str
    before: str | None
    after: str | None
    running_jobs: tuple[str, ...] = ()


@dataclass
class PlanCheck:
    partitions: list[PlannedPartition]
    clique_ids: dict[str, int]
    findings: list[Finding] = field(default_factory=list)
    changes: list[TrayChange] = field(default_factory=list)
    unchanged: bool = False  # the plan is the rack's layout as it is (integrations.plans.check decides)

    @property
    def ok(self) -> bool:
        return not any(f.level == Level.ERROR for f in self.findings)

    @property
    def busy_trays(self) -> list[TrayChange]:
        """Trays whose partition changes while they run work: drained first, or the plan is refused."""
        return [change for change in self.changes if change.running_jobs]

    def add(self, level: Level, message: str, job: str = "") -> None:
        self.findings.append(Finding(level, message, job))


def preset_layout(preset: str, leave_out: Iterable[int] = ()) -> list[PlannedPartition]:
    """Equal partitions of consecutive trays (`2x9`: slots 1-9 and 10-18), minus the trays left out."""
    if preset not in PRESETS:
        raise ValueError(f"unknown layout {preset!r}; presets are {', '.join(PRESETS)}")
    size, skip = PRESETS[preset], set(leave_out)
    partitions = []
    for number, start in enumerate(range(1, TRAYS_PER_RACK + 1, size), start=1):
        slots = tuple(slot for slot in range(start, start + size) if slot not in skip)
        if slots:
            name = "default" if size == TRAYS_PER_RACK else f"p{number}"
            partitions.append(PlannedPartition(name=name, slots=slots))
    return partitions


_RANGE = re.compile(r"(\d+)\s*(?:-\s*(\d+))?", re.ASCII)


def parse_ranges(text: str, highest: int = TRAYS_PER_RACK) -> tuple[int, ...]:
    """`1-9`, `10-12,15` -> slots; ValueError in plain words otherwise.

    Each range is checked against the rack's slots (1 to `highest`) and the slots already named before it
    is expanded: whatever the text, the result has at most `highest` slots.
    """
    slots: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        # ASCII digits only (int() also reads other scripts' digits, Arabic-Indic ones as 1-9); a number
        # of more than 9 digits is beyond any rack without being converted.
        found = _RANGE.fullmatch(part)
        if found is None:
            raise ValueError(f"{part!r} is not a tray number or range like 1-9")
        first, last = (int(n) if len(n) <= 9 else highest + 1 for n in (found[1], found[2] or found[1]))
        if first > last:
            raise ValueError(f"{part!r} runs backwards")
        if first < 1 or last > highest:
            raise ValueError(f"{part!r} is outside the rack's trays 1-{highest}")
        named = range(first, last + 1)
        again = sorted(set(named).intersection(slots))
        if again:
            raise ValueError(f"{part!r} names tray {again[0]} again")
        slots.extend(named)
    return tuple(slots)


def _ranges(slots: Sequence[int]) -> str:
    out, start, previous = [], None, None
    for slot in sorted(slots):
        if start is None:
            start = previous = slot
        elif slot == previous + 1:
            previous = slot
        else:
            out.append(f"{start}-{previous}" if start != previous else str(start))
            start = previous = slot
    if start is not None:
        out.append(f"{start}-{previous}" if start != previous else str(start))
    return ",".join(out)


def no_tray_changes(rack: str) -> str:
    return f"The plan does not change {rack}'s partitions."


def check_plan(
    rack: str,
    trays: Sequence[TrayInfo],
    partitions: Sequence[PlannedPartition],
    *,
    departments: Iterable[str] = (),
    drain: bool = False,
    check_blocks: Callable[[dict[str, tuple[str, ...]]], str | None] | None = None,
) -> PlanCheck:
    """Judge a layout for one rack. Every finding is a sentence an operator can act on.

    `check_blocks` receives the planned partitions as {name: hostnames} and returns why the scheduler cannot
    express them (Slurm's BlockSizes rule over the whole cluster), or None.
    """
    by_slot = {tray.slot: tray for tray in trays}
    partitions = list(partitions)
    check = PlanCheck(partitions=partitions, clique_ids={})
    if not partitions:
        check.add(Level.ERROR, f"The plan for {rack} has no partitions: give it at least one.")
        return check
    _check_names(check, partitions)
    owner = _assign_trays(check, rack, by_slot, set(departments))
    _check_left_out(check, by_slot, owner)
    _check_unschedulable(check, by_slot, owner)
    _number_cliques(check, by_slot, owner)
    check.changes.extend(_tray_changes(trays, by_slot, partitions, owner))
    if not check.changes:
        check.add(Level.WARNING, no_tray_changes(rack))
    _check_busy_trays(check, drain, by_slot)
    if check.ok and check_blocks is not None:
        hosts = {p.name: tuple(by_slot[s].hostname for s in p.slots) for p in partitions}
        reason = check_blocks(hosts)
        if reason:
            check.add(Level.ERROR, reason)
    if check.ok:
        sizes = ", ".join(f"{p.name} {len(p.slots)} trays" for p in partitions)
        check.add(Level.OK, f"{rack}: {sizes}; no overlaps, names unique, Slurm block sizes valid.")
    return check


def _check_names(check: PlanCheck, partitions: list[PlannedPartition]) -> None:
    """Partition names are unique and usable."""
    names = [p.name for p in partitions]
    for name in sorted({n for n in names if names.count(n) > 1}):
        check.add(Level.ERROR, f"The name {name} is used by more than one partition: names must be unique.")
    for name in names:
        if (why := partition_name_error(name)) is not None:  # the model's rule (inventory.names)
            check.add(Level.ERROR, f"{name!r} is not a usable partition name: {why}.")


def _assign_trays(
    check: PlanCheck, rack: str, by_slot: dict[int, TrayInfo], known_departments: set[str]
) -> dict[int, str]:
    """Slot -> the planned partition that takes it. Trays the rack does not have, trays in two partitions,
    unknown departments and unusable Slurm partition names are errors."""
    owner: dict[int, str] = {}
    for partition in check.partitions:
        if not partition.slots:
            check.add(Level.ERROR, f"Partition {partition.name} has no trays.")
        for slot in partition.slots:
            if slot not in by_slot:
                check.add(
                    Level.ERROR,
                    f"Partition {partition.name} names tray {slot}, which {rack} does not have "
                    f"(it has trays {_ranges(sorted(by_slot))}).",
                )
            elif slot in owner:
                check.add(
                    Level.ERROR,
                    f"Tray {slot} ({by_slot[slot].hostname}) is in both {owner[slot]} and {partition.name}: "
                    "partitions may not overlap.",
                )
            else:
                owner[slot] = partition.name
        if partition.department and partition.department not in known_departments:
            near = [slug for slug in known_departments if slug == partition.department.strip().lower()]
            check.add(
                Level.ERROR,
                f"Partition {partition.name} is given to {partition.department!r}, which is not a department"
                + (f": did you mean {near[0]!r} (departments are named by their slug)?" if near else "."),
            )
        _check_slurm_partition(check, partition)
    return owner


def _check_slurm_partition(check: PlanCheck, partition: PlannedPartition) -> None:
    """A partition given to a department is served by the department's own Slurm partition (its slug, the
    name tenancy.naming derives); any other by a service tier that can never be a department's (`gpu_<name>`,
    inventory.names), so no Slurm partition ever holds two owners' trays."""
    tier = partition.slurm_partition
    if not tier:
        return
    if partition.department:
        if tier != partition.department:
            check.add(
                Level.ERROR,
                f"Partition {partition.name} is given to {partition.department}: it is served by the Slurm "
                f"partition {partition.department}, not {tier!r}. Leave its Slurm partition empty.",
            )
        return
    if (why := service_tier_error(tier)) is not None:
        check.add(Level.ERROR, f"{tier!r} is not a usable Slurm partition name: {why}.")


def _check_left_out(check: PlanCheck, by_slot: dict[int, TrayInfo], owner: dict[int, str]) -> None:
    left_out = sorted(set(by_slot) - set(owner))
    if left_out:
        what = f"Tray {left_out[0]} is" if len(left_out) == 1 else f"Trays {_ranges(left_out)} are"
        they = "it" if len(left_out) == 1 else "they"
        check.add(
            Level.WARNING,
            f"{what} left out: {they} will be in no NVLink partition and get no work until a later plan "
            f"takes {'it' if len(left_out) == 1 else 'them'} back.",
        )


def _check_unschedulable(check: PlanCheck, by_slot: dict[int, TrayInfo], owner: dict[int, str]) -> None:
    """A warning for each planned tray that cannot take work now, saying why."""
    for slot in sorted(owner):
        tray = by_slot[slot]
        if not tray.schedulable:
            why = []
            if tray.state != "up":
                why.append(f"it is {STATE_WORDS.get(tray.state, tray.state)}")
            if tray.healthy_gpus < 4:
                why.append(f"{4 - tray.healthy_gpus} of its GPUs are unhealthy")
            if tray.problems:
                why.append("its fabric reports problems")
            check.add(
                Level.WARNING,
                f"Tray {slot} ({tray.hostname}) is in {owner[slot]} although {' and '.join(why)}: "
                "leave it out unless it will be fixed soon.",
            )
    _check_mig(check, by_slot, owner)


def _check_mig(check: PlanCheck, by_slot: dict[int, TrayInfo], owner: dict[int, str]) -> None:
    """One warning per planned partition of more than one tray that holds trays with GPUs in MIG mode."""
    members: dict[str, list[int]] = {}
    for slot in sorted(owner):
        members.setdefault(owner[slot], []).append(slot)
    for name, slots in members.items():
        mig = [by_slot[slot] for slot in slots if by_slot[slot].mig_gpus]
        if not mig or len(slots) == 1:
            continue
        one = len(mig) == 1
        trays = _and_words(
            [
                f"{tray.slot} ({tray.hostname}, {_gpus(tray.mig_gpus)}"
                + (f", layout {tray.mig_layout}" if tray.mig_layout else "")
                + ")"
                for tray in mig
            ]
        )
        check.add(
            Level.WARNING,
            f"{name} holds {'tray' if one else 'trays'} {trays} in MIG mode. MIG instances have no NVLink "
            "peer-to-peer (every MIG profile reports P2P No), so while MIG is on, jobs spanning trays in "
            f"{name} use only its other {len(slots) - len(mig)} trays"
            + (
                f"; the other GPUs of {'that tray' if one else 'those trays'} still take jobs of one tray"
                if any(tray.mig_gpus < GPUS_PER_TRAY and not tray.mig_layout for tray in mig)
                else ""
            )
            + f". Turn MIG off on "
            f"{'it' if one else 'them'} (the MIG layout all-disabled on the tray page) to give {name} all "
            "its trays.",
        )


def _gpus(n: int) -> str:
    return "1 GPU" if n == 1 else f"{n} GPUs"


def _and_words(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _number_cliques(check: PlanCheck, by_slot: dict[int, TrayInfo], owner: dict[int, str]) -> None:
    """Clique IDs: one partition covering the whole rack is the default partition; others count from 1 in
    the plan's order, except a partition that keeps its clique ID (PlannedPartition.clique_id): the others
    skip the numbers kept."""
    whole = len(check.partitions) == 1 and set(owner) == set(by_slot)
    kept = [p.clique_id for p in check.partitions if p.clique_id is not None and not whole]
    for clique in sorted({c for c in kept if kept.count(c) > 1}):
        check.add(Level.ERROR, f"Clique ID {clique} is kept by two partitions: clique IDs are unique.")
    free = (number for number in range(1, DEFAULT_CLIQUE_ID) if number not in kept)
    for partition in check.partitions:
        if whole:
            check.clique_ids[partition.name] = DEFAULT_CLIQUE_ID
        elif partition.clique_id is not None:
            check.clique_ids[partition.name] = partition.clique_id
        else:
            check.clique_ids[partition.name] = next(free)


def _tray_changes(
    trays: Sequence[TrayInfo],
    by_slot: dict[int, TrayInfo],
    partitions: list[PlannedPartition],
    owner: dict[int, str],
) -> list[TrayChange]:
    """The trays whose NVLink partition changes: its partition's name or membership does."""
    members_now: dict[str | None, set[int]] = {}
    for tray in trays:
        members_now.setdefault(tray.partition, set()).add(tray.slot)
    members_planned = {p.name: set(p.slots) for p in partitions}
    changes = []
    for slot, tray in sorted(by_slot.items()):
        after = owner.get(slot)
        before_members = members_now.get(tray.partition) if tray.partition else None
        after_members = members_planned.get(after) if after else None
        if (tray.partition, before_members) != (after, after_members):
            changes.append(TrayChange(slot, tray.hostname, tray.partition, after, tray.running_jobs))
    return changes


BUSY_SUMMARY_AT = 3  # this many jobs or more on changing trays: one summary finding, not one per job
BUSY_NAMED = 5  # jobs named in that summary


def _duration(seconds: float) -> str:
    minutes = max(1, round(seconds / 60))
    if minutes < 120:
        return f"about {minutes} min"
    return f"about {minutes / 60:.1f} h"


def _check_busy_trays(check: PlanCheck, drain: bool, by_slot: dict[int, TrayInfo] | None = None) -> None:
    """Trays that run work and change partition: drained first (`drain`), else the plan is refused. One
    finding per job, listing its trays (a job on 18 trays is one finding, not 18); from BUSY_SUMMARY_AT jobs
    on, one finding for all of them, with when a drain-first plan applies at the latest (the jobs' time
    limits: `TrayInfo.work_ends_in_s`)."""
    trays_of: dict[str, list[TrayChange]] = {}
    for change in check.busy_trays:
        for job in change.running_jobs:
            trays_of.setdefault(job, []).append(change)
    if len(trays_of) >= BUSY_SUMMARY_AT:
        slots = sorted({c.slot for changes in trays_of.values() for c in changes})
        jobs = sorted(trays_of, key=lambda job: (min(c.slot for c in trays_of[job]), job))  # rack order
        more = len(jobs) - BUSY_NAMED
        named = ", ".join(jobs[:BUSY_NAMED]) + (f" and {more} more" if more > 0 else "")
        ends = [by_slot[slot].work_ends_in_s for slot in slots if by_slot and slot in by_slot]
        when = (
            f". Drained first, the plan applies once they end: within {_duration(max(ends))} at the latest, "
            "when the last reaches its time limit"
            if ends and all(end is not None for end in ends)
            else ""
        )
        what = f"{len(jobs)} jobs run on trays {_ranges(slots)}, which would change partition ({named})"
        if drain:
            check.add(Level.WARNING, f"{what}: they will be drained{when}.")
        else:
            check.add(
                Level.ERROR,
                f"{what}: choose 'drain first' or wait for the work to finish{when}.",
                jobs[0],
            )
        return
    for job, changes in trays_of.items():
        hosts = ", ".join(c.hostname for c in changes)
        if len(changes) == 1:
            trays, verb, they = f"Tray {changes[0].slot} ({hosts})", "runs", "it"
        else:
            trays, verb, they = f"Trays {_ranges([c.slot for c in changes])} ({hosts})", "run", "they"
        if drain:
            check.add(
                Level.WARNING,
                f"{trays} {verb} {job}: {they} will be drained and the plan applied once the work has "
                "finished.",
            )
        else:
            check.add(
                Level.ERROR,
                f"{trays} {verb} {job} and would change partition: choose 'drain first' or wait for the "
                "work to finish.",
                job,
            )
