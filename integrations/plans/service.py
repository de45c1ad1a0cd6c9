"""Partition plans: check, preview, apply. The wizard and the API both call these; views stay thin.

Applying a plan changes the inventory's *intended* layout in one transaction (new NVLinkPartition rows,
trays moved, dedications to departments), then queues a ConfigPush per configured target (fabric, Slurm,
Kubernetes, directory) that brings each system to that intent; the plan's status follows its pushes.
Two admins applying plans to one rack are serialized by a row lock on the rack, and the database allows
one active plan per rack (inventory_partitionplan_one_active_per_rack), so the second gets a clear
conflict and never a mix of both.

Tray changes (drain, partition moves, undrain) are bulk updates recorded in the audit with before and after
(core.audit.update_recorded / recording_changes). A plan that ends (applied, failed, cancelled) asks the
scheduler for a pass: the layout it places on has changed.
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Count, Q
from django.utils import formats, timezone, translation
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from core.audit import recording_changes, update_recorded
from core.blocks import BlockPartition, block_layout_error
from core.diffs import diff_text
from core.fingerprint import fingerprint
from core.sentences import CLAUSES, say
from integrations import kept_rows, words
from integrations.fabric import FabricError, FabricPartition
from integrations.fabric.base import plan_changes
from integrations.kept_rows import RackRows
from integrations.models import ConfigPush, ConfigTarget, PlanWindow, PushStatus
from integrations.pushes import queue_pushes
from integrations.slurm.adapter import tree_left_out_targets
from integrations.state import SLURM_TOPOLOGY_YAML, render_current
from inventory.choices import (
    ACTIVE_PLAN_STATES,
    ActionKind,
    GpuHealth,
    MigMode,
    PlanOrigin,
    PlanStatus,
    TrayState,
)
from inventory.health.actions import record_action
from inventory.mig_layouts import WHOLE_GPU_LAYOUTS
from inventory.models import ComputeTray, Gpu, NVLinkPartition, PartitionPlan, Rack
from inventory.planning import (
    PRESETS,
    Finding,
    Level,
    PlanCheck,
    PlannedPartition,
    TrayChange,
    TrayInfo,
    check_plan,
    no_tray_changes,
    preset_layout,
)
from scheduling.choices import HOLDING_STATES
from scheduling.models import Allocation, SliceAllocation
from scheduling.services.pass_requests import request_pass
from tenancy import naming
from tenancy.models import DedicatedPartition, Department
from tenancy.services import dedicate_partition


class PlanConflict(Exception):
    """Another plan is in flight for the rack, or the rack changed since the plan was checked."""


def drain_reason(plan: PartitionPlan) -> str:
    """The state reason of a tray drained for `plan` (stored in English, Slurm's drain reason too)."""
    return say(words.DRAINING_FOR_PLAN, plan=plan.pk, rack=plan.rack.name)


def _drain_or_return(trays, plan: PartitionPlan, *, drain: bool, reason: str, user) -> int:
    """Drain `trays` for `plan`, or return its drained ones to service, and put the change on each tray's
    health timeline as the plan's (a HealthAction of its own kind: no fault, not counted by the circuit
    breaker nor the repeat offenders). Returns how many trays changed."""
    changed = list(trays)
    count = update_recorded(
        trays,
        state=TrayState.DRAIN if drain else TrayState.UP,
        state_reason=drain_reason(plan) if drain else "",
    )
    kind = ActionKind.PLAN_DRAIN if drain else ActionKind.PLAN_RETURN
    for tray in changed:
        record_action(None, tray, kind, reason, actor=user)
    return count


def holding_on(rack: Rack, model=Allocation, **where):
    """The rack's held devices (`model`: Allocation, whole GPUs; SliceAllocation, MIG slices) of jobs that
    hold them: a plan sees the work on a tray whether it runs on whole GPUs or on MIG slices (a tray's MIG
    slices running work are as much in a re-carve's way: its GPUs leave the partition under them)."""
    return model.objects.filter(job__state__in=HOLDING_STATES, gpu__tray__rack=rack, **where).order_by()


def rack_trays(rack: Rack) -> list[TrayInfo]:
    """The rack's trays as a plan sees them: state, healthy GPUs, problems, running jobs (on whole GPUs or
    MIG slices). Two queries."""
    running: dict[int, set[str]] = {}
    ends: dict[int, float] = {}  # slot -> seconds until its last job reaches its time limit
    now = timezone.now()
    columns = ("gpu__tray__slot", "job__name", "job__started_at", "job__placed_at", "job__time_limit_minutes")
    for slot, job, started, placed, limit in (
        holding_on(rack).values_list(*columns).union(holding_on(rack, SliceAllocation).values_list(*columns))
    ):
        running.setdefault(slot, set()).add(job)
        since = started or placed or now
        ends[slot] = max(ends.get(slot, 0.0), (since - now).total_seconds() + limit * 60)
    trays = (
        ComputeTray.objects.filter(rack=rack)
        .select_related("partition")
        .annotate(
            healthy=Count("gpus", filter=~Q(gpus__health=GpuHealth.UNHEALTHY)),
            mig=Count("gpus", filter=Q(gpus__mig_mode=MigMode.ENABLED)),
            gpu_count=Count("gpus"),
        )
        .order_by("slot")
    )
    return [
        TrayInfo(
            slot=tray.slot,
            hostname=tray.hostname,
            state=tray.state,
            healthy_gpus=tray.healthy,
            problems=tuple(tray.fabric_problems),
            running_jobs=tuple(sorted(running.get(tray.slot, ()))),
            partition=tray.partition.name if tray.partition else None,
            # A tray given a MIG layout counts whole from the choice on (the pass keeps whole-GPU work off).
            mig_gpus=tray.mig if tray.mig_layout in WHOLE_GPU_LAYOUTS else max(tray.mig, tray.gpu_count),
            mig_layout="" if tray.mig_layout in WHOLE_GPU_LAYOUTS else tray.mig_layout,
            work_ends_in_s=ends.get(tray.slot),
        )
        for tray in trays
    ]


def layout_signature(rack: Rack) -> str:
    """The rack's current layout in a few characters: a plan checked against another layout is stale."""
    rows = ComputeTray.objects.filter(rack=rack).order_by("slot").values_list("slot", "partition__clique_id")
    return fingerprint(list(rows))[:16]


def _block_checker(rack: Rack):
    """Slurm 24.11's BlockSizes rule over the whole cluster with this rack's planned partitions in it: the
    rule (core.blocks.block_layout) on each partition's number of trays, read once per rack as one count per
    partition (issue 32: at 10,000 racks, reading and checking the 180,000 trays' hostnames for every
    preset and every check took seconds; the hostnames are the model's, valid and one partition's each, so
    only the sizes can break the rule). Its sentence is `plan_topology`'s for the same layout."""
    others = other_racks_partitions(rack)

    def check(planned: dict[str, tuple[str, ...]]) -> str | None:
        here = [
            BlockPartition(rack.name, f"{rack.name}-{p}", len(hosts)) for p, hosts in planned.items() if hosts
        ]
        return _layout_error(tuple(others + here), translation.get_language())

    return check


def other_racks_partitions(rack: Rack) -> list[BlockPartition]:
    """Every other rack's NVLink partitions that have trays, with their number of trays, racks by name and
    partitions by name in each (a sentence naming one partition names the same one). From the rows the
    render keeps (integrations.kept_rows: the racks changed since read again) when this process keeps them,
    each rack's counted once while its rows are the same objects; else one query counting every tray
    (~150 ms at 10,000 racks, and a plan is checked twice: when made and when applied)."""
    if kept_rows.has_log() and kept_rows.kept() is not None:
        parts = kept_rows.kept_parts()
        found = [
            partition for part in parts if part.rack.id != rack.pk for partition in _rack_partitions(part)
        ]
        if len(_RACK_PARTITIONS) > len(parts):  # racks deleted since
            there = {part.rack.id for part in parts}
            for gone in [rack_id for rack_id in list(_RACK_PARTITIONS) if rack_id not in there]:
                _RACK_PARTITIONS.pop(gone, None)
        return found
    return [
        BlockPartition(rack_name, f"{rack_name}-{partition}", trays)
        for rack_name, partition, trays in ComputeTray.objects.filter(partition__isnull=False)
        .exclude(rack=rack)
        .values_list("rack__name", "partition__name")
        .annotate(trays=Count("pk"))
        .order_by("rack__name", "partition__name")
    ]


_RACK_PARTITIONS: dict[int, tuple[RackRows, tuple[BlockPartition, ...]]] = {}  # rack id -> (rows, partitions)


def _rack_partitions(part: RackRows) -> tuple[BlockPartition, ...]:
    """One rack's partitions that have trays and their sizes (`other_racks_partitions`), kept by its rows."""
    kept = _RACK_PARTITIONS.get(part.rack.id)
    if kept is not None and kept[0] is part:
        return kept[1]
    trays = Counter(tray.partition_id for tray in part.trays if tray.partition_id is not None)
    name = part.rack.name
    made = tuple(
        BlockPartition(name, f"{name}-{p.name}", trays[p.id])
        for p in sorted(part.partitions, key=lambda p: p.name)
        if trays[p.id]
    )
    _RACK_PARTITIONS[part.rack.id] = (part, made)
    return made


@functools.lru_cache(maxsize=8)
def _layout_error(partitions: tuple[BlockPartition, ...], language: str | None) -> str | None:
    """`block_layout_error`, kept for the last layouts (a plan is checked when it is made and again when it is
    applied: ~0.3 s each at 10,000 racks); its sentence is in `language`, the one active when it was made."""
    return block_layout_error(partitions)


# topology/block, which expresses NVLink partitions to Slurm as blocks, came with Slurm 23.11.
BLOCK_TOPOLOGY_SINCE = (23, 11)


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in str(text).split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def slurm_too_old() -> str:
    """Why the fleet's Slurm cannot express NVLink partitions (a sentence), or "" when it can or nobody knows.

    The version is what each enabled Slurm target reported when it was last tested or pushed
    (ConfigTarget.facts, integrations.pushes.remember); the oldest one decides."""
    known = [
        (_version_tuple(t.facts["slurm_version"]), t.facts["slurm_version"], t.name)
        for t in ConfigTarget.objects.filter(enabled=True).only("name", "facts")
        if (t.facts or {}).get("slurm_version")  # only a Slurm kind's adapter reports one
    ]
    if not known:
        return ""
    oldest = min(known)
    if oldest[0] >= BLOCK_TOPOLOGY_SINCE:
        return ""
    return _(
        "Slurm %(version)s on target %(target)s cannot express NVLink partitions: topology/block needs "
        "Slurm 23.11 or later. Upgrade Slurm, or keep the whole rack as one partition."
    ) % {"version": oldest[1], "target": oldest[2]}


@dataclass
class PresetLimits:
    """Which presets the fleet's Slurm cannot express on one rack, said once and then briefly per preset.

    `notes`: the sentences shown once above the presets (the Slurm version, the block-size rule);
    `blocked`: preset -> a short reason about the rack being planned (no other rack named)."""

    notes: list[str] = field(default_factory=list)
    blocked: dict[str, str] = field(default_factory=dict)


def _times_power_of_two(size: int, base: int) -> bool:
    multiple, remainder = divmod(size, base)
    return not remainder and multiple > 0 and multiple & (multiple - 1) == 0


def _trays(sizes) -> str:
    sizes = sorted(set(sizes))
    if len(sizes) > 1:
        words = _("%(sizes)s and %(last)s") % {"sizes": ", ".join(map(str, sizes[:-1])), "last": sizes[-1]}
    else:
        words = str(sizes[-1])
    return ngettext("%(sizes)s tray", "%(sizes)s trays", 1 if sizes == [1] else 2) % {"sizes": words}


def _block_size_reason(here: list[int], elsewhere: list[int]) -> str:
    """Why partitions of `here` trays on this rack beside `elsewhere` on the other racks break Slurm 24.11's
    block sizes (every block the smallest one times a power of two), in a few words naming no rack."""
    if not here:
        return _("Slurm 24.11's block topology cannot express it beside the other racks' partitions.")
    base = min(here + elsewhere)
    bad_here = [size for size in here if not _times_power_of_two(size, base)]
    bad_elsewhere = [size for size in elsewhere if not _times_power_of_two(size, base)]
    # The two noun phrases the sentences below hold (each translated whole, as the sentences are).
    each = (
        _("%(trays)s each") % {"trays": _trays(here)}
        if len(set(here)) == 1
        else _("partitions of %(trays)s") % {"trays": _trays(here)}
    )
    multiple = _("a power of two") if base == 1 else _("%(base)s times a power of two") % {"base": base}
    words = {"each": each, "multiple": multiple, "base": base}
    if bad_here and base not in here:
        return _("%(each)s: not %(multiple)s (%(base)s: the other racks' smallest partition).") % words
    if bad_here:
        return _("%(each)s: not all %(multiple)s.") % words
    if bad_elsewhere:
        return _("%(each)s: the other racks' partitions of %(trays)s are not %(multiple)s.") % {
            **words,
            "trays": _trays(bad_elsewhere),
        }
    return (
        _("%(each)s: Slurm 24.11's block topology cannot express it beside the other racks' partitions.")
        % words
    )


def preset_limits(rack: Rack) -> PresetLimits:
    """The presets the fleet's Slurm cannot express on `rack` (greyed out in the wizard), with why."""
    limits = PresetLimits()
    too_old = slurm_too_old()
    hostnames = {tray.slot: tray.hostname for tray in rack_trays(rack)}
    checker = _block_checker(rack)
    elsewhere = list(
        ComputeTray.objects.filter(partition__isnull=False)
        .exclude(rack=rack)
        .order_by()
        .values("partition")
        .annotate(trays=Count("pk"))
        .values_list("trays", flat=True)
    )
    block_sizes = False
    for preset in PRESETS:
        partitions = preset_layout(preset)
        if too_old and len(partitions) > 1:
            limits.blocked[preset] = _("%(count)s partitions need Slurm 23.11+ (topology/block).") % {
                "count": len(partitions)
            }
            continue
        planned = {p.name: tuple(hostnames[s] for s in p.slots if s in hostnames) for p in partitions}
        if checker(planned):
            here = [len(hosts) for hosts in planned.values() if hosts]
            limits.blocked[preset] = _block_size_reason(here, elsewhere)
            block_sizes = True
    if too_old:
        limits.notes.append(too_old)
    if block_sizes:
        limits.notes.append(
            _(
                "Slurm 24.11 keeps an NVLink partition whole only when, across the cluster, it has the "
                "smallest partition's number of trays times a power of two (1, 2, 4, 8...). Layouts of "
                "%(rack)s that break this beside the other racks' partitions are greyed out; Slurm 25.05 or "
                "later (topology.yaml) lifts the rule."
            )
            % {"rack": rack.name}
        )
    return limits


def check(rack: Rack, partitions: list[PlannedPartition], *, drain: bool = False) -> PlanCheck:
    result = check_plan(
        rack.name,
        rack_trays(rack),
        partitions,
        departments=Department.objects.values_list("slug", flat=True),
        drain=drain,
        check_blocks=_block_checker(rack),
    )
    too_old = slurm_too_old() if len(partitions) > 1 else ""
    if too_old:
        result.findings.insert(0, Finding(Level.ERROR, too_old))
    _check_dedications(rack, result)
    if result.ok and _changes_nothing(rack, result):
        result.unchanged = True
        # The error says all the tray-level warning said ("does not change the partitions"), and more.
        result.findings = [f for f in result.findings if f.message != no_tray_changes(rack.name)]
        result.add(Level.ERROR, already_carved(rack.name))
    elif not result.changes:
        # No tray moves, yet the plan changes something (a dedication, a Slurm partition, a clique ID): the
        # planner's "does not change the partitions" would deny the diff the preview shows; say what changes.
        result.findings = [
            Finding(Level.INFO, _what_changes(rack, result)) if f.message == no_tray_changes(rack.name) else f
            for f in result.findings
        ]
    return result


def _what_changes(rack: Rack, result: PlanCheck) -> str:
    """A plan that moves no tray, in one sentence of templates (integrations.words): whether the fabric's
    partitions stay, then what changes for each planned partition (its dedication, the Slurm partition its
    trays are served from, its clique ID)."""
    current = {p.name: p for p in NVLinkPartition.objects.filter(rack=rack)}
    owners = dict(
        DedicatedPartition.objects.filter(partition__rack=rack).values_list(
            "partition_id", "department__slug"
        )
    )
    clauses, fabric_same = [], True
    for planned in result.partitions:
        partition = current.get(planned.name)
        if partition is None:
            continue
        owner, department = owners.get(partition.pk), planned.department or None
        if department != owner:
            if owner is None:
                clauses.append(say(words.PARTITION_DEDICATED, name=planned.name, department=department))
            elif department is None:
                clauses.append(say(words.PARTITION_UNDEDICATED, name=planned.name, owner=owner))
            else:
                clauses.append(
                    say(words.PARTITION_REDEDICATED, name=planned.name, department=department, owner=owner)
                )
        with contextlib.suppress(ValueError):  # a name the checks refuse: said by its own error
            before = naming.slurm_partition(partition.service_tier, owner)
            after = naming.slurm_partition("" if department else planned.slurm_partition, department)
            if before != after:
                clauses.append(
                    say(
                        words.PARTITION_SLURM_MOVES, name=planned.name, slurm_before=before, slurm_after=after
                    )
                )
        clique = result.clique_ids.get(planned.name)
        if clique is not None and clique != partition.clique_id:
            fabric_same = False
            clauses.append(
                say(words.PARTITION_CLIQUE_MOVES, name=planned.name, kept=partition.clique_id, clique=clique)
            )
    lead = say(words.NO_TRAY_MOVES_FABRIC_SAME if fabric_same else words.NO_TRAY_MOVES, rack=rack.name)
    return CLAUSES.join([lead, *clauses])


def already_carved(rack_name: str) -> str:
    return _(
        "%(rack)s is already carved exactly like this (same partitions, trays, dedications and Slurm "
        "partitions): the plan would change nothing."
    ) % {"rack": rack_name}


def _changes_nothing(rack: Rack, result: PlanCheck) -> bool:
    """Whether the plan leaves every partition of the rack as it is and adds none: a plan that would push
    the same configuration again (e.g. one sent twice, the second made after the first applied)."""
    kept = _unchanged(rack, result)
    return len(kept) == len(result.partitions) == NVLinkPartition.objects.filter(rack=rack).count()


def _check_dedications(rack: Rack, result: PlanCheck) -> None:
    """Warn when a department's dedicated trays on the rack lose their dedication: re-carving deletes the
    rack's partitions and their dedications with them, and only planned partitions given a department are
    dedicated again. A lead's dedicated tier must not vanish without the admin being told."""
    before: dict[str, tuple[str, set[int]]] = {}
    for slug, name, slot in DedicatedPartition.objects.filter(partition__rack=rack).values_list(
        "department__slug", "department__name", "partition__trays__slot"
    ):
        entry = before.setdefault(slug, (name, set()))
        if slot is not None:
            entry[1].add(slot)
    after: dict[str, set[int]] = {}
    for planned in result.partitions:
        if planned.department:
            after.setdefault(planned.department, set()).update(planned.slots)
    for slug, (name, slots) in sorted(before.items()):
        lost = sorted(slots - after.get(slug, set()))
        if lost:
            result.add(
                Level.WARNING,
                _(
                    "%(count)s of %(name)s's dedicated trays on %(rack)s (slots %(slots)s) lose their "
                    "dedication: no planned partition holding them is dedicated to %(slug)s. Give one the "
                    "department %(slug)s to keep %(name)s's dedicated tier."
                )
                % {
                    "count": len(lost),
                    "name": name,
                    "rack": rack.name,
                    "slots": ", ".join(map(str, lost)),
                    "slug": slug,
                },
            )


@dataclass
class Preview:
    check: PlanCheck
    diffs: dict[str, str] = field(default_factory=dict)  # rendered file -> unified diff
    # The requests the fabric manager gets, in the order the push sends them (integrations.fabric.base
    # .plan_changes from the rack's partitions now to the plan's): "delete partition default (ID 32766) ...".
    fabric_steps: list[str] = field(default_factory=list)


class _PreviewDone(Exception):
    """Leaves a preview's atomic block, rolling it back."""


def preview(rack: Rack, partitions: list[PlannedPartition], *, drain: bool = False) -> Preview:
    """Every finding, and the exact diff of every file and object the plan would change.

    The plan is applied inside a savepoint that is always rolled back, and everything Rackplane pushes is
    rendered before and after: the diff is what a push would send, not an approximation of it.
    """
    result = Preview(check=check(rack, partitions, drain=drain))
    if not result.check.ok:
        return result
    # The renderers refuse a row they cannot render safely (a name or a network saved before a rule existed,
    # integrations.state): the preview says so, in their words, instead of failing with a 500.
    try:
        before = render_current()
    except ValueError as error:
        result.check.add(
            Level.ERROR,
            _("Rackplane's configuration cannot be rendered as it is: %(error)s.") % {"error": error},
        )
        return result
    after = before
    # An atomic block left by an exception rolls back, and with it whatever the changes asked to do on
    # commit (a configuration push, a scheduling pass): a preview writes nothing and sends nothing.
    with contextlib.suppress(_PreviewDone), transaction.atomic():
        try:
            _repartition(rack, result.check)
            after = render_current()
        except ValidationError as error:
            result.check.add(Level.ERROR, " ".join(error.messages))
        except ValueError as error:  # the renderers refuse what the plan would make
            result.check.add(
                Level.ERROR,
                _("With this plan the configuration cannot be rendered: %(error)s.") % {"error": error},
            )
        raise _PreviewDone
    if result.check.ok:
        result.fabric_steps = fabric_steps(rack, result.check)
        left_out = tree_left_out_targets() if SLURM_TOPOLOGY_YAML in after else []
        if left_out:
            result.check.add(
                Level.INFO,
                _(
                    "The compute fabric's tree is not sent to %(targets)s: Slurm 24.11 reads one "
                    "topology (topology.conf), the NVLink blocks; its file's header says so. Slurm 25.05 and "
                    "later take both in topology.yaml (the target's topology file)."
                )
                % {"targets": ", ".join(left_out)},
            )
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name, ""), after.get(name, "")
        if old != new:
            result.diffs[name] = diff_text(old, new, f"a/{name}", f"b/{name}")
    return result


def fabric_steps(rack: Rack, check: PlanCheck) -> list[str]:
    """What the push asks the rack's fabric manager to do, step by step, from the partitions the inventory
    holds now (what the fabric reported last) to the plan's; [] for a rack whose NVLink domain is unknown."""
    if rack.cluster_uuid is None:
        return []
    domain = str(rack.cluster_uuid)
    gpus_of_slot: dict[int, list[str]] = defaultdict(list)
    current: dict[tuple[str, int], list[str]] = defaultdict(list)
    for slot, uuid, name, clique in (
        Gpu.objects.filter(tray__rack=rack)
        .order_by("tray__slot", "index")
        .values_list("tray__slot", "uuid", "tray__partition__name", "tray__partition__clique_id")
    ):
        gpus_of_slot[slot].append(uuid)
        if name is not None:
            current[(name, clique)].append(uuid)
    now = [FabricPartition(name, clique, tuple(uuids), domain) for (name, clique), uuids in current.items()]
    planned = [
        FabricPartition(
            p.name,
            check.clique_ids[p.name],
            tuple(uuid for slot in p.slots for uuid in gpus_of_slot[slot]),
            domain,
        )
        for p in check.partitions
    ]
    try:
        diff = plan_changes(domain, now, planned, (u for uuids in gpus_of_slot.values() for u in uuids))
    except FabricError as error:
        return [say(words.FABRIC_WOULD_REFUSE, error=error)]
    return [step.describe() for step in diff.steps]


def _layout_json(check: PlanCheck) -> list[dict]:
    rows = []
    for p in check.partitions:
        row = {
            "name": p.name,
            "slots": list(p.slots),
            "clique_id": check.clique_ids[p.name],
            "department": p.department,
            "slurm_partition": p.slurm_partition,
        }
        if p.clique_id is not None:  # a partition the plan keeps as it is, clique ID included
            row["keeps_clique_id"] = True
        rows.append(row)
    return rows


def partitions_from_rows(rows: list[dict]) -> list[PlannedPartition]:
    """Partitions from their JSON form: a saved plan's layout, or the API's validated `partitions`."""
    return [
        PlannedPartition(
            name=p["name"],
            slots=tuple(p["slots"]),
            department=p.get("department") or None,
            slurm_partition=p.get("slurm_partition") or "",
            # Only a saved plan's row says so (the API's `partitions` have no such field).
            clique_id=p["clique_id"] if p.get("keeps_clique_id") else None,
        )
        for p in rows
    ]


def planned_partitions(plan: PartitionPlan) -> list[PlannedPartition]:
    return partitions_from_rows(plan.layout)


def create_plan(
    rack: Rack, partitions: list[PlannedPartition], *, drain: bool, user, scheduler: Recarve | None = None
) -> PartitionPlan:
    """Save a checked plan as a draft. Raises ValidationError listing the errors if it cannot be applied.

    `scheduler`: the plan is the scheduler's re-carve (integrations.plans.recarve): no user, its reason and
    the job it is for recorded with it."""
    result = check(rack, partitions, drain=drain)
    if not result.ok:
        raise ValidationError([f.message for f in result.findings if f.level == Level.ERROR])
    return PartitionPlan.objects.create(
        rack=rack,
        layout=_layout_json(result),
        base_layout=layout_signature(rack),
        drain_first=drain,
        findings=[{"level": f.level.value, "message": f.message} for f in result.findings],
        created_by=None if scheduler else user,
        origin=PlanOrigin.SCHEDULER if scheduler else PlanOrigin.ADMIN,
        reason=scheduler.reason if scheduler else "",
        for_job_id=scheduler.job_id if scheduler else None,
    )


@dataclass(frozen=True)
class Recarve:
    """What makes a plan the scheduler's: why it was made, and for which waiting job."""

    reason: str
    job_id: int


def waiting_window(rack: Rack, *, but: PartitionPlan | None = None) -> str | None:
    """Why no other plan may be scheduled or applied on `rack`: a plan (not `but`) waits for its maintenance
    window there (one per rack: two would re-carve it in turn, the second undoing the first); None."""
    waiting = PlanWindow.objects.filter(plan__rack=rack, plan__status=PlanStatus.DRAFT)
    if but is not None:
        waiting = waiting.exclude(plan=but)
    window = waiting.order_by("starts_at").first()
    if window is None:
        return None
    return _(
        "Plan #%(plan)s waits for its maintenance window on %(rack)s (from %(start)s): cancel it first, or "
        "wait until it has been applied."
    ) % {
        "plan": window.plan_id,
        "rack": rack.name,
        "start": formats.date_format(timezone.localtime(window.starts_at), "Y-m-d H:i T"),
    }


def in_flight(rack: Rack, *, but: PartitionPlan | None = None) -> str | None:
    """Why no plan can be applied to `rack` now: another plan (not `but`) is draining or applying, or waits
    for its maintenance window (`waiting_window`); None."""
    active = PartitionPlan.objects.filter(rack=rack, status__in=ACTIVE_PLAN_STATES)
    if but is not None:
        active = active.exclude(pk=but.pk)
    other = active.select_related("created_by").first()
    if other is None:
        return waiting_window(rack, but=but)
    who = other.created_by.get_username() if other.created_by else _("someone")
    if other.by_scheduler:
        who = _("the scheduler")
    return _(
        "Plan #%(plan)s by %(who)s is being applied to %(rack)s right now: wait for it to finish (or "
        "cancel it), then preview your plan again."
    ) % {"plan": other.pk, "who": who, "rack": rack.name}


def apply_plan(plan: PartitionPlan, *, user=None) -> PartitionPlan:
    """Apply a draft plan: drain its busy trays first if asked, else repartition and queue the pushes."""
    try:
        with transaction.atomic():
            rack = Rack.objects.select_for_update().get(pk=plan.rack_id)
            plan = PartitionPlan.objects.select_for_update().get(pk=plan.pk)
            if (busy := in_flight(rack, but=plan)) is not None:
                raise PlanConflict(busy)
            if plan.status != PlanStatus.DRAFT:
                raise PlanConflict(
                    _("Plan #%(plan)s is %(status)s, not a draft.")
                    % {"plan": plan.pk, "status": plan.get_status_display().lower()}
                )
            if layout_signature(rack) != plan.base_layout:
                raise PlanConflict(
                    _("%(rack)s's partitions changed since plan #%(plan)s was checked: preview it again.")
                    % {"rack": rack.name, "plan": plan.pk}
                )
            result = check(rack, planned_partitions(plan), drain=plan.drain_first)
            if not result.ok:
                raise ValidationError([f.message for f in result.findings if f.level == Level.ERROR])
            plan.applied_at = timezone.now()
            if result.busy_trays:
                _drain_changing(plan, result, user or plan.created_by)
                plan.status = PlanStatus.DRAINING
                plan.save(update_fields=["status", "applied_at"])
                return plan
            _start(plan, result, user)
            return plan
    except IntegrityError as error:
        # The partial unique index caught a concurrent apply that the row lock did not see (a new plan row).
        raise PlanConflict(
            _("Another plan is already being applied to this rack: %(error)s") % {"error": error}
        ) from error


def continue_draining(plan: PartitionPlan) -> bool:
    """Repartition a draining plan once its trays carry no running work. True when it moved on."""
    with transaction.atomic():
        Rack.objects.select_for_update().get(pk=plan.rack_id)
        plan = PartitionPlan.objects.select_for_update().select_related("rack").get(pk=plan.pk)
        if plan.status != PlanStatus.DRAINING:
            return False
        # A plan with a maintenance window is never applied after it (integrations.plans.windows expires it).
        if PlanWindow.objects.filter(plan=plan, ends_at__lte=timezone.now()).exists():
            return False
        result = check(plan.rack, planned_partitions(plan), drain=True)
        if result.busy_trays:
            # A tray back in service meanwhile (or drained by an older release): drained again.
            _drain_changing(plan, result, plan.created_by)
            return False
        _start(plan, result, plan.created_by)
        return True


def holding_trays(plan: PartitionPlan) -> list[TrayChange]:
    """The trays `plan` changes that still hold work: what a draining plan waits for (continue_draining's
    rule, without the cluster-wide Slurm check a page polling every 2 s need not repeat)."""
    departments = Department.objects.values_list("slug", flat=True)
    trays = rack_trays(plan.rack)
    return check_plan(
        plan.rack.name, trays, planned_partitions(plan), departments=departments, drain=True
    ).busy_trays


def _drain_changing(plan: PartitionPlan, result: PlanCheck, user) -> int:
    """Drain, for `plan`, every tray it changes: the busy ones (whatever their state, as before) and the free
    ones still in service. A waiting plan's free trays take no new work either, so the jobs it waits for
    (those it requeued among them) are never placed again on trays it is about to re-carve, and it applies
    once the work it found has ended. Trays out for another reason (a fault, a maintenance) stay as they are.
    Each drain is on its tray's timeline as the plan's, by `user` (_drain_or_return). In the caller's
    transaction, which holds the rack and the plan; returns how many trays it drained."""
    busy = [change.slot for change in result.busy_trays]
    free = [change.slot for change in result.changes if not change.running_jobs]
    return _drain_or_return(
        ComputeTray.objects.filter(rack=plan.rack_id)
        .filter(Q(slot__in=busy) | Q(slot__in=free, state=TrayState.UP))
        .exclude(state=TrayState.DRAIN, state_reason=drain_reason(plan)),
        plan,
        drain=True,
        reason=drain_reason(plan),
        user=user,
    )


def _start(plan: PartitionPlan, result: PlanCheck, user) -> None:
    _repartition(plan.rack, result)
    _drain_or_return(
        ComputeTray.objects.filter(rack=plan.rack, state_reason=drain_reason(plan)),
        plan,
        drain=False,
        reason=say(words.RETURNED_AFTER_PLAN, plan=plan.pk, rack=plan.rack.name),
        user=user,
    )
    plan.status = PlanStatus.APPLYING
    plan.save(update_fields=["status", "applied_at"])
    reason = say(words.PUSH_FOR_PLAN, plan=plan.pk, rack=plan.rack.name)
    # The plan changes its rack alone: targets that take slices are sent that rack's (issue 32).
    queue_pushes(reason=reason, user=user, plan_id=plan.pk, racks=[plan.rack.name])
    refresh_status(plan)


def _repartition(rack: Rack, result: PlanCheck) -> None:
    """Replace the rack's partitions with the planned ones; dedications go through tenancy's rules.

    A partition the plan leaves exactly as it is (same name, clique ID, trays, dedication and Slurm partition:
    the ones a scheduler's re-carve keeps beside the trays it re-carves) stays untouched, row and all; the
    others are deleted and the planned ones made. Each tray's move is recorded once, from its old partition
    to its new one."""
    kept = _unchanged(rack, result)
    with recording_changes(ComputeTray.objects.filter(rack=rack), "partition"):
        ComputeTray.objects.filter(rack=rack).exclude(partition_id__in=kept.values()).update(partition=None)
        for partition in NVLinkPartition.objects.filter(rack=rack).exclude(pk__in=kept.values()):
            partition.delete()  # one by one: audited, and dedications go with them
        departments = {d.slug: d for d in Department.objects.all()}
        for planned in result.partitions:
            if planned.name in kept:
                continue
            partition = NVLinkPartition.objects.create(
                rack=rack,
                name=planned.name,
                clique_id=result.clique_ids[planned.name],
                # A dedicated partition is served by its department's Slurm partition (tenancy.naming
                # .slurm_partition): the plan check let only that name through for it, stored as "".
                service_tier="" if planned.department else planned.slurm_partition,
            )
            ComputeTray.objects.filter(rack=rack, slot__in=planned.slots).update(partition=partition)
            if planned.department:
                dedicate_partition(departments[planned.department], partition)


def _unchanged(rack: Rack, result: PlanCheck) -> dict[str, int]:
    """Planned name -> pk of the rack's partition that the plan leaves exactly as it is. Three queries."""
    current = {p.name: p for p in NVLinkPartition.objects.filter(rack=rack)}
    slots: dict[int, set[int]] = {}
    for partition_id, slot in ComputeTray.objects.filter(rack=rack, partition__isnull=False).values_list(
        "partition_id", "slot"
    ):
        slots.setdefault(partition_id, set()).add(slot)
    owners = dict(
        DedicatedPartition.objects.filter(partition__rack=rack).values_list(
            "partition_id", "department__slug"
        )
    )
    kept = {}
    for planned in result.partitions:
        partition = current.get(planned.name)
        if (
            partition is not None
            and partition.clique_id == result.clique_ids[planned.name]
            and slots.get(partition.pk, set()) == set(planned.slots)
            and owners.get(partition.pk) == planned.department
            and partition.service_tier == ("" if planned.department else planned.slurm_partition)
        ):
            kept[planned.name] = partition.pk
    return kept


def refresh_status(plan: PartitionPlan) -> PartitionPlan:
    """An applying plan is applied when the latest push of every target succeeded, failed when one failed.

    A failed plan whose failed push was retried successfully becomes applied; a superseded push counts as
    the push that superseded it (which carries the plan's change too).
    """
    if plan.status not in (PlanStatus.APPLYING, PlanStatus.FAILED):
        return plan
    latest: dict[int, ConfigPush] = {}
    for push in ConfigPush.objects.filter(plan_id=plan.pk).select_related("superseded_by").order_by("pk"):
        latest[push.target_id] = push
    statuses = set()
    for push in latest.values():
        seen = set()
        while push.status == PushStatus.SUPERSEDED and push.superseded_by_id and push.pk not in seen:
            seen.add(push.pk)
            push = ConfigPush.objects.select_related("superseded_by").get(pk=push.superseded_by_id)
        statuses.add(push.status)
    if PushStatus.FAILED in statuses:
        status, error = PlanStatus.FAILED, words.PLAN_PUSH_FAILED
    elif statuses <= {PushStatus.SUCCEEDED, PushStatus.SUPERSEDED}:
        status, error = PlanStatus.APPLIED, ""
    else:
        status, error = PlanStatus.APPLYING, ""
    if (status, error) != (plan.status, plan.error):
        plan.status, plan.error = status, error
        plan.finished_at = None if status == PlanStatus.APPLYING else timezone.now()
        plan.save(update_fields=["status", "error", "finished_at"])
        if status != PlanStatus.APPLYING:
            request_pass(f"plan #{plan.pk} {status}")
    return plan


def follow(plan: PartitionPlan) -> PartitionPlan:
    """Move a plan on: a draining one whose work ended starts applying; an applying (or failed, then
    retried) one follows its pushes. Called by tasks only (integrations.tasks: the beat, the end of each of
    the plan's pushes, and the end of a job on a drained tray): the pages and the API only read a plan."""
    if plan.status == PlanStatus.DRAINING:
        continue_draining(plan)
        plan.refresh_from_db()
    return refresh_status(plan)


def cancel_plan(plan: PartitionPlan, *, user=None) -> PartitionPlan:
    """Cancel a draft or a plan still draining (its drained trays return to service); its maintenance
    window, if it had one, goes with it (integrations.plans.windows). The plan returned says in
    `trays_returned` how many drained trays went back into service (none for a plan that drained nothing)."""
    with transaction.atomic():
        plan = PartitionPlan.objects.select_for_update().select_related("rack").get(pk=plan.pk)
        if plan.status not in (PlanStatus.DRAFT, PlanStatus.DRAINING):
            raise PlanConflict(
                _("Plan #%(plan)s is %(status)s: it can no longer be cancelled.")
                % {"plan": plan.pk, "status": plan.get_status_display().lower()}
            )
        PlanWindow.objects.filter(plan=plan).delete()
        plan.trays_returned = withdraw(plan, user=user)
    return plan


def withdraw(plan: PartitionPlan, error: str = "", *, user=None) -> int:
    """End a draft or draining plan (locked by the caller) unapplied: its drained trays return to service,
    and `error` says why when it was not an admin's cancel (a maintenance window that ended). Returns how
    many drained trays returned to service."""
    returned = _drain_or_return(
        ComputeTray.objects.filter(rack=plan.rack, state_reason=drain_reason(plan)),
        plan,
        drain=False,
        reason=say(words.RETURNED_PLAN_NOT_APPLIED, plan=plan.pk),
        user=user,
    )
    drained = plan.status == PlanStatus.DRAINING
    plan.status, plan.finished_at, plan.error = PlanStatus.CANCELLED, timezone.now(), error
    plan.save(update_fields=["status", "finished_at", "error"])
    if drained:  # a draft changed nothing the scheduler sees
        request_pass(f"plan #{plan.pk} {'withdrawn' if error else 'cancelled'}")
    return returned


def create_and_apply(rack: Rack, partitions: list[PlannedPartition], *, drain: bool, user) -> PartitionPlan:
    """Save the plan and apply it, or neither. ValidationError: it cannot be applied; PlanConflict: not now.

    One transaction with the rack locked first: a plan refused (another plan in flight, checks failing)
    leaves no plan and no audit event behind, and a request racing another for the same rack waits for it
    and is then refused as in flight (the admin previews again and gets a new plan).
    """
    with transaction.atomic():
        rack = Rack.objects.select_for_update().get(pk=rack.pk)
        if (busy := in_flight(rack)) is not None:
            raise PlanConflict(busy)
        plan = create_plan(rack, partitions, drain=drain, user=user)
        return apply_plan(plan, user=user)
