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
from core.sentences import AND_MORE, CLAUSES, gettext_noop, minutes, plural, say
from inventory.names import partition_name_error, service_tier_error

PRESETS = {"1x18": 18, "2x9": 9, "3x6": 6, "6x3": 3, "9x2": 2, "18x1": 1}
# A tray's state as the findings say it ("although it is drained").
STATE_WORDS = {
    "drain": gettext_noop("drained"),
    "maintenance": gettext_noop("in maintenance"),
    "needs_service": gettext_noop("waiting for service"),
}

# Every finding is a sentence of templates (core.sentences): stored and sent in English, shown in the
# viewer's language by the portal (core.sentences_i18n).
# A tray drained while a plan waits for the work on the trays it changes (the tray's state reason, also
# Slurm's drain reason; written by integrations.plans.service.drain_reason, read by the tray page).
PLAN_DRAIN = gettext_noop("Rackplane plan #%(plan)s: draining before repartitioning %(rack)s")
NO_CHANGE = gettext_noop("The plan does not change %(rack)s's partitions.")
NO_PARTITIONS = gettext_noop("The plan for %(rack)s has no partitions: give it at least one.")
SIZES = gettext_noop("%(rack)s: %(sizes)s")
PARTITION_SIZE = gettext_noop("%(name)s %(trays)s trays")
ALL_VALID = gettext_noop("no overlaps, names unique, Slurm block sizes valid.")
NAME_TWICE = gettext_noop("The name %(name)s is used by more than one partition: names must be unique.")
NAME_UNUSABLE = gettext_noop("%(name)s is not a usable partition name: %(why)s.")
NO_TRAYS = gettext_noop("Partition %(name)s has no trays.")
NO_SUCH_TRAY = gettext_noop(
    "Partition %(name)s names tray %(slot)s, which %(rack)s does not have (it has trays %(trays)s)."
)
OVERLAP = gettext_noop(
    "Tray %(slot)s (%(host)s) is in both %(first)s and %(second)s: partitions may not overlap."
)
NOT_A_DEPARTMENT = gettext_noop("Partition %(name)s is given to %(department)s, which is not a department.")
NOT_A_DEPARTMENT_NEAR = gettext_noop(
    "Partition %(name)s is given to %(department)s, which is not a department: did you mean %(near)s "
    "(departments are named by their slug)?"
)
DEPARTMENT_SERVED = gettext_noop(
    "Partition %(name)s is given to %(department)s: it is served by the Slurm partition "
    "%(department_slurm)s, not %(tier)s. Leave its Slurm partition empty."
)
TIER_UNUSABLE = gettext_noop("%(tier)s is not a usable Slurm partition name: %(why)s.")
LEFT_OUT_ONE = gettext_noop(
    "Tray %(trays)s is left out: it will be in no NVLink partition and get no work until a later plan takes "
    "it back."
)
LEFT_OUT_MANY = gettext_noop(
    "Trays %(trays)s are left out: they will be in no NVLink partition and get no work until a later plan "
    "takes them back."
)
IT_IS = gettext_noop("it is %(state)s")
UNHEALTHY_GPU = gettext_noop("%(count)s of its GPUs is unhealthy")
UNHEALTHY_GPUS = gettext_noop("%(count)s of its GPUs are unhealthy")
FABRIC_PROBLEMS = gettext_noop("its fabric reports problems")
BOTH = gettext_noop("%(first)s and %(second)s")
UNSCHEDULABLE = gettext_noop(
    "Tray %(slot)s (%(host)s) is in %(partition)s although %(why)s: leave it out unless it will be fixed "
    "soon."
)
MIG_TRAY = gettext_noop("%(slot)s (%(host)s, %(mig_gpus)s)")
MIG_TRAY_LAYOUT = gettext_noop("%(slot)s (%(host)s, %(mig_gpus)s, layout %(layout)s)")
ONE_GPU = gettext_noop("1 GPU")
GPUS = gettext_noop("%(count)s GPUs")
MIG_ONE = gettext_noop(
    "%(name)s holds tray %(tray_list)s in MIG mode. MIG instances have no NVLink peer-to-peer (every MIG "
    "profile reports P2P No), so while MIG is on, jobs spanning trays in %(name_again)s use only its other "
    "%(others)s trays"
)
MIG_MANY = gettext_noop(
    "%(name)s holds trays %(tray_list)s in MIG mode. MIG instances have no NVLink peer-to-peer (every MIG "
    "profile reports P2P No), so while MIG is on, jobs spanning trays in %(name_again)s use only its other "
    "%(others)s trays"
)
MIG_REST_ONE = gettext_noop(
    "the other GPUs of that tray still take jobs of one tray. Turn MIG off on it (the MIG layout "
    "all-disabled on the tray page) to give %(name)s all its trays."
)
MIG_REST_MANY = gettext_noop(
    "the other GPUs of those trays still take jobs of one tray. Turn MIG off on them (the MIG layout "
    "all-disabled on the tray page) to give %(name)s all its trays."
)
MIG_OFF_ONE = gettext_noop(
    "%(sentence)s. Turn MIG off on it (the MIG layout all-disabled on the tray page) to give %(name)s all "
    "its trays."
)
MIG_OFF_MANY = gettext_noop(
    "%(sentence)s. Turn MIG off on them (the MIG layout all-disabled on the tray page) to give %(name)s all "
    "its trays."
)
CLIQUE_TWICE = gettext_noop("Clique ID %(clique)s is kept by two partitions: clique IDs are unique.")
DRAIN_WHEN = gettext_noop(
    "Drained first, the plan applies once they end: within %(wait)s at the latest, when the last reaches its "
    "time limit"
)
BUSY_JOBS = gettext_noop("%(count)s jobs run on trays %(trays)s, which would change partition (%(jobs)s)")
BUSY_DRAINED = gettext_noop("%(what)s: they will be drained.")
BUSY_DRAINED_WHEN = gettext_noop("%(what)s: they will be drained. %(when)s.")
BUSY_REFUSED = gettext_noop("%(what)s: choose 'drain first' or wait for the work to finish.")
BUSY_REFUSED_WHEN = gettext_noop("%(what)s: choose 'drain first' or wait for the work to finish. %(when)s.")
TRAY_RUNS_DRAINED = gettext_noop(
    "Tray %(slot)s (%(hosts)s) runs %(job_name)s: it will be drained and the plan applied once the work has "
    "finished."
)
TRAYS_RUN_DRAINED = gettext_noop(
    "Trays %(slots)s (%(hosts)s) run %(job_name)s: they will be drained and the plan applied once the work "
    "has finished."
)
TRAY_RUNS_REFUSED = gettext_noop(
    "Tray %(slot)s (%(hosts)s) runs %(job_name)s and would change partition: choose 'drain first' or wait "
    "for the work to finish."
)
TRAYS_RUN_REFUSED = gettext_noop(
    "Trays %(slots)s (%(hosts)s) run %(job_name)s and would change partition: choose 'drain first' or wait "
    "for the work to finish."
)


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

    @property
    def remade(self) -> bool:
        """Its partition keeps its name but not its trays: it is deleted and made again (a new clique)."""
        return self.before is not None and self.before == self.after


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
    def change_rows(self) -> list[tuple[TrayChange, int | None]]:
        """Each tray change with the clique ID of its planned partition (None: left out); a change whose
        partition keeps its name (`TrayChange.remade`) is a partition made again, on another clique."""
        return [(change, self.clique_ids.get(change.after or "")) for change in self.changes]

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
    return say(NO_CHANGE, rack=rack)


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
        check.add(Level.ERROR, say(NO_PARTITIONS, rack=rack))
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
        sizes = ", ".join(say(PARTITION_SIZE, name=p.name, trays=len(p.slots)) for p in partitions)
        check.add(Level.OK, say(SIZES, rack=rack, sizes=sizes) + CLAUSES + ALL_VALID)
    return check


def _check_names(check: PlanCheck, partitions: list[PlannedPartition]) -> None:
    """Partition names are unique and usable."""
    names = [p.name for p in partitions]
    for name in sorted({n for n in names if names.count(n) > 1}):
        check.add(Level.ERROR, say(NAME_TWICE, name=name))
    for name in names:
        if (why := partition_name_error(name)) is not None:  # the model's rule (inventory.names)
            check.add(Level.ERROR, say(NAME_UNUSABLE, name=repr(name), why=why))


def _assign_trays(
    check: PlanCheck, rack: str, by_slot: dict[int, TrayInfo], known_departments: set[str]
) -> dict[int, str]:
    """Slot -> the planned partition that takes it. Trays the rack does not have, trays in two partitions,
    unknown departments and unusable Slurm partition names are errors."""
    owner: dict[int, str] = {}
    for partition in check.partitions:
        if not partition.slots:
            check.add(Level.ERROR, say(NO_TRAYS, name=partition.name))
        for slot in partition.slots:
            if slot not in by_slot:
                check.add(
                    Level.ERROR,
                    say(
                        NO_SUCH_TRAY,
                        name=partition.name,
                        slot=slot,
                        rack=rack,
                        trays=_ranges(sorted(by_slot)),
                    ),
                )
            elif slot in owner:
                check.add(
                    Level.ERROR,
                    say(
                        OVERLAP,
                        slot=slot,
                        host=by_slot[slot].hostname,
                        first=owner[slot],
                        second=partition.name,
                    ),
                )
            else:
                owner[slot] = partition.name
        if partition.department and partition.department not in known_departments:
            near = [slug for slug in known_departments if slug == partition.department.strip().lower()]
            check.add(
                Level.ERROR,
                say(
                    NOT_A_DEPARTMENT_NEAR,
                    name=partition.name,
                    department=repr(partition.department),
                    near=repr(near[0]),
                )
                if near
                else say(NOT_A_DEPARTMENT, name=partition.name, department=repr(partition.department)),
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
                say(
                    DEPARTMENT_SERVED,
                    name=partition.name,
                    department=partition.department,
                    department_slurm=partition.department,
                    tier=repr(tier),
                ),
            )
        return
    if (why := service_tier_error(tier)) is not None:
        check.add(Level.ERROR, say(TIER_UNUSABLE, tier=repr(tier), why=why))


def _check_left_out(check: PlanCheck, by_slot: dict[int, TrayInfo], owner: dict[int, str]) -> None:
    left_out = sorted(set(by_slot) - set(owner))
    if left_out:
        check.add(
            Level.WARNING, say(plural(len(left_out), LEFT_OUT_ONE, LEFT_OUT_MANY), trays=_ranges(left_out))
        )


def _check_unschedulable(check: PlanCheck, by_slot: dict[int, TrayInfo], owner: dict[int, str]) -> None:
    """A warning for each planned tray that cannot take work now, saying why."""
    for slot in sorted(owner):
        tray = by_slot[slot]
        if not tray.schedulable:
            why = []
            if tray.state != "up":
                why.append(say(IT_IS, state=STATE_WORDS.get(tray.state, tray.state)))
            if tray.healthy_gpus < 4:
                unhealthy = 4 - tray.healthy_gpus
                why.append(say(plural(unhealthy, UNHEALTHY_GPU, UNHEALTHY_GPUS), count=unhealthy))
            if tray.problems:
                why.append(FABRIC_PROBLEMS)
            reasons = why[0]
            for more in why[1:]:
                reasons = say(BOTH, first=reasons, second=more)
            check.add(
                Level.WARNING,
                say(UNSCHEDULABLE, slot=slot, host=tray.hostname, partition=owner[slot], why=reasons),
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
                say(
                    MIG_TRAY_LAYOUT,
                    slot=tray.slot,
                    host=tray.hostname,
                    mig_gpus=_gpus(tray.mig_gpus),
                    layout=tray.mig_layout,
                )
                if tray.mig_layout
                else say(MIG_TRAY, slot=tray.slot, host=tray.hostname, mig_gpus=_gpus(tray.mig_gpus))
                for tray in mig
            ]
        )
        sentence = say(
            MIG_ONE if one else MIG_MANY,
            name=name,
            tray_list=trays,
            name_again=name,
            others=len(slots) - len(mig),
        )
        if any(tray.mig_gpus < GPUS_PER_TRAY and not tray.mig_layout for tray in mig):
            message = sentence + CLAUSES + say(MIG_REST_ONE if one else MIG_REST_MANY, name=name)
        else:
            message = say(MIG_OFF_ONE if one else MIG_OFF_MANY, sentence=sentence, name=name)
        check.add(Level.WARNING, message)


def _gpus(n: int) -> str:
    return ONE_GPU if n == 1 else say(GPUS, count=n)


def _and_words(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else say(BOTH, first=", ".join(items[:-1]), second=items[-1])


def _number_cliques(check: PlanCheck, by_slot: dict[int, TrayInfo], owner: dict[int, str]) -> None:
    """Clique IDs: one partition covering the whole rack is the default partition; others count from 1 in
    the plan's order, except a partition that keeps its clique ID (PlannedPartition.clique_id): the others
    skip the numbers kept."""
    whole = len(check.partitions) == 1 and set(owner) == set(by_slot)
    kept = [p.clique_id for p in check.partitions if p.clique_id is not None and not whole]
    for clique in sorted({c for c in kept if kept.count(c) > 1}):
        check.add(Level.ERROR, say(CLIQUE_TWICE, clique=clique))
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
        named = ", ".join(jobs[:BUSY_NAMED])
        if more > 0:
            named = say(AND_MORE, names=named, more=more)
        ends = [by_slot[slot].work_ends_in_s for slot in slots if by_slot and slot in by_slot]
        when = (
            say(DRAIN_WHEN, wait=minutes(max(end for end in ends if end is not None)))
            if ends and all(end is not None for end in ends)
            else ""
        )
        what = say(BUSY_JOBS, count=len(jobs), trays=_ranges(slots), jobs=named)
        if drain:
            check.add(
                Level.WARNING,
                say(BUSY_DRAINED_WHEN, what=what, when=when) if when else say(BUSY_DRAINED, what=what),
            )
        else:
            check.add(
                Level.ERROR,
                say(BUSY_REFUSED_WHEN, what=what, when=when) if when else say(BUSY_REFUSED, what=what),
                jobs[0],
            )
        return
    for job, changes in trays_of.items():
        hosts = ", ".join(c.hostname for c in changes)
        one = len(changes) == 1
        slots = {"slot": changes[0].slot} if one else {"slots": _ranges([c.slot for c in changes])}
        if drain:
            check.add(
                Level.WARNING,
                say(TRAY_RUNS_DRAINED if one else TRAYS_RUN_DRAINED, hosts=hosts, job_name=job, **slots),
            )
        else:
            check.add(
                Level.ERROR,
                say(TRAY_RUNS_REFUSED if one else TRAYS_RUN_REFUSED, hosts=hosts, job_name=job, **slots),
                job,
            )
