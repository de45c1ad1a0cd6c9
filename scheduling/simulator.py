"""Trace replay in virtual time through the portal's own admission and placement code.

Pure Python (no Django import). `manage.py simulate` is the command line; `scheduling.report` draws the
results. Every scheduling decision is made by `scheduling.engine.scheduler.schedule` (fair-share admission,
reclaim by preemption, reservation and backfill) and `scheduling.engine.placement.place` on a
`scheduling.engine.cluster.Cluster`: the same functions, with the same inputs, as a portal pass. This module
only keeps the clock, the queue and the books.

Assumptions, each a choice that any figure rests on:

* **Department = trace file.** Each trace file is one department (named after the file's stem), weight 1,
  priority 0, no limit. Guarantees split the cluster's GPUs in proportion to each file's GPU-hours
  (largest remainder, ties by name) unless given per department. With `projects` (trace -> department),
  traces are projects of a department instead (hierarchical fair share): each keeps its own
  guarantee and books, and the department is guaranteed the sum of its projects'.
* **GPUs.** A job of 1-4 GPUs takes that many GPUs on one tray; above 4 it takes whole trays, so its GPU
  count is rounded up to a multiple of 4.
* **Locality.** A job asks for ``partition`` when its trays fit in the largest NVLink partition, else
  ``rack`` when they fit in a rack, else ``any``. Every job is a preemptible training job.
* **Fallback.** A gang of more than half the largest partition accepts a rack instead of one partition,
  and one that asks for a rack accepts any trays, once it has waited `fallback_after_s` since its
  submission (default 1 h; None: every job stays strict). The engine grants it only to in-quota jobs
  (`PendingJob.fallback_topology`): it is how a department's large gang gets its guarantee when no
  partition frees up. Smaller gangs keep their partition: their waits are short.
* **Span slowdown.** A job whose trays span NVLink partitions (and so racks too, when it spans racks) runs
  `span_slowdown` times longer than in the trace (default 1.5: communication-bound training over
  InfiniBand instead of NVLink; 1.0 turns it off). It holds its GPUs for that longer time.
* **Compute fabric** (optional, `fabric`; the command's ``--fabric``): the racks hang under scalable units
  and spine groups (`simulation_fabric.parse_fabric`); rackplane keeps multi-rack jobs inside one unit when
  it can (scheduling.engine.placement), and a job whose racks span units runs `cross_unit_slowdown` times
  longer again (default 1.25). `fabric_blind` places as if the fabric were flat (the topology-blind
  baseline). `simulation_fabric.large_jobs` is the stated synthetic large-job mix.
* **Exact time limits.** A running job's time limit (what reservations and backfill plan with) is exactly
  its run time where it was placed: the trace duration, times the slowdown when it spans. A waiting job's
  limit is the time it would need wherever the policy may put it: times the slowdown when the policy can
  spread its trays over partitions (any multi-tray job under first-fit and block-best-fit; under rackplane
  a job that fits no single partition or may fall back), else the bare duration.
* **Preemption.** A preempted job goes back to the queue with its original submission time (it keeps its
  place in line). By default it *resumes* from its last checkpoint: the last `checkpoint_loss_s` of the run
  that was cut (default 600 s: the work since the checkpoint and the restart from it; never more than the
  run lasted) are lost and done again, the rest is kept (``checkpoint_loss_s=0``: it checkpointed at the
  moment it was stopped). ``preempted="restart"`` makes it start over, losing all its work. Each
  preemption is counted, and the GPU-seconds whose work was lost (`lost_work_gpu_s`). The engine is told
  the same price (``checkpoint_loss_s``): reclaim frees the partition that loses the least work.
* **Node faults** (optional, `FaultPlan`): a real fault trace replayed with the jobs, each server of the
  trace standing for one compute tray (`simulation_inputs.map_faults`); from a fault on, the tray takes no
  work and its jobs stop, then either requeue from their last checkpoint and the tray returns after a
  check (automated) or die and are resubmitted by hand later, the tray returning at the repair (manual):
  `_Replay._fail`. `run` replays each policy without faults and with both.
* **Historical fair share** (optional, `half_life_s`; the command's ``--half-life``): every trace accrues
  its GPU-seconds in virtual time, halved every half-life (`tenancy.usage_decay.accrue`, exact between
  events), and each pass gets them as the departments' (and projects') `decayed_usage`: borrowers are then
  ordered by recent usage as well as the instant's share (scheduling.engine.scheduler).
* **Passes.** A pass runs after every instant at which something happened (submissions, completions, a
  waiting job's fallback bound passing) while jobs are waiting, with ``explain=False``; all events of one
  instant are applied before the pass. A pass that preempted jobs is followed at once by another, in which
  they may start elsewhere.

Figures (`METRICS`, then extras): a job's *wait* is all the time it spent queued (after a preemption too),
its *JCT* is completion minus submission; p95 is the nearest rank. *Wait by size* gives the waits of jobs of
1-4, 8-16, 20-36 and more than 36 GPUs apart, and the *GPU-weighted wait* weighs each job's wait by its
GPUs, so large jobs' waits cannot hide behind many small jobs' short ones. *GPU utilization* is allocated
GPU-seconds over capacity from the first to the last submission. *Multi-tray in one partition* counts a job
only when every placement it ran on was inside one NVLink partition; the ``fitting_`` variant looks only at
jobs that fit the largest partition. *Guarantee shortfall* integrates, per department, the GPUs of its
waiting jobs that admission would call in quota (see `_Replay._count_in_quota`); *guarantee gap* is the
cruder ``min(guarantee, demand) - held``, which also counts gang jobs larger than what is left of the
guarantee. *Decisions per second* is placement decisions (the engine's `PassResult.decisions`) over the
wall-clock time spent in scheduling passes. *Stranded NVLink capacity* integrates the free GPUs no waiting
job could be given (scheduling.engine.stranded, by cause) from each instant's passes to the next
(`_Replay._sample_stranded`).
"""

from __future__ import annotations

import hashlib
import heapq
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter

from core.blocks import BlockPartition, block_layout_error, sizes_error
from core.fabric import Fabric
from core.hardware import GPUS_PER_TRAY
from scheduling.engine.cluster import Cluster
from scheduling.engine.mig import (
    BEST_FIT,
    COMPUTE_SLICES,
    GB200_LAYOUTS,
    GB200_PROFILES,
    SLICE_RULES,
    MigLayout,
    MigLayoutError,
    SliceFleet,
    SliceProfile,
    fragmentation,
    normalised_mix,
    profile_table,
)
from scheduling.engine.mig_sizing import (
    DEFAULT_HEADROOM,
    DEFAULT_HISTORY_S,
    DEFAULT_PLACEMENT,
    MIG_PARTITION_TRAYS,
    PLACEMENTS,
    MigSizing,
    size_mig,
)
from scheduling.engine.placement import PARTITION, POLICIES, RACK, RACKPLANE, Request
from scheduling.engine.recarve import RecarvePolicy, cluster_block_check, propose, waiting_gangs
from scheduling.engine.scheduler import Department, Options, PendingJob, Project, RunningJob, schedule
from scheduling.engine.stranded import CAUSES, stranded
from scheduling.simulation_fabric import LARGE_DEPARTMENT, large_jobs, parse_fabric
from scheduling.simulation_inputs import (
    RACK_TRAYS,
    FaultTrace,
    SimulationError,
    Trace,
    TraceJob,
    TrayFault,
    build_cluster,
    dedicated_owners,
    fallback,
    fit_traces,
    jitter_traces,
    load_faults,
    load_trace,
    load_traces,
    locality,
    map_faults,
    parse_duration,
    parse_guarantees,
    parse_layout,
    round_gpus,
    split_guarantees,
)
from tenancy.usage_decay import DEFAULT_HALF_LIFE_S, accrue

__all__ = [
    "ALL_WORK",
    "AUTOMATED",
    "BEST_FIT",
    "DEFAULT_CHECKPOINT_LOSS_S",
    "DEFAULT_CHECK_S",
    "DEFAULT_CROSS_UNIT_SLOWDOWN",
    "DEFAULT_DETECT_S",
    "DEFAULT_FALLBACK_AFTER_S",
    "DEFAULT_HALF_LIFE_S",
    "DEFAULT_MANUAL_DELAY_S",
    "DEFAULT_RECARVE_DELAY_S",
    "DEFAULT_SPAN_SLOWDOWN",
    "FAULT_MODES",
    "GUARANTEE_SPLITS",
    "LARGE_DEPARTMENT",
    "MANUAL",
    "METRICS",
    "PREEMPTION_MODES",
    "RECARVE_RULES",
    "RESTART",
    "RESUME",
    "SIZE_CLASSES",
    "SLICE_RULES",
    "WHOLE_WORK",
    "FaultPlan",
    "FaultTrace",
    "MigPlan",
    "PolicyRun",
    "RecarvePlan",
    "SimulationError",
    "SliceConversion",
    "Trace",
    "TraceJob",
    "auto_mig_plan",
    "build_cluster",
    "concentrated_mig_trays",
    "fallback",
    "guarantee_hours",
    "jitter_traces",
    "large_jobs",
    "load_faults",
    "load_trace",
    "load_traces",
    "locality",
    "map_faults",
    "mig_tray_gpus",
    "mig_trays",
    "named_mig_trays",
    "parse_duration",
    "parse_fabric",
    "parse_guarantees",
    "parse_layout",
    "parse_mig_plan",
    "round_gpus",
    "run",
    "simulate",
    "split_guarantees",
]

DEFAULT_SPAN_SLOWDOWN = 1.5
# A job whose racks span scalable units runs this many times longer again (its collectives cross the spine
# layer); only with a fabric (`fabric`). An assumption, varied in docs/simulator.md.
DEFAULT_CROSS_UNIT_SLOWDOWN = 1.25
DEFAULT_CHECKPOINT_LOSS_S = 600.0
DEFAULT_FALLBACK_AFTER_S = 3600.0
RESUME, RESTART = "resume", "restart"
PREEMPTION_MODES = (RESUME, RESTART)
# Node faults: how a failed tray is handled, automated by Rackplane or by hand.
AUTOMATED, MANUAL = "automated", "manual"
FAULT_MODES = (AUTOMATED, MANUAL)
DEFAULT_DETECT_S = 60.0  # automated: the agent's report interval (the pass drains the tray at once)
DEFAULT_CHECK_S = 1800.0  # automated: healthy reports for 10 min, then an active check (dcgmi diag -r 2)
DEFAULT_MANUAL_DELAY_S = 7200.0  # manual: a person sees the dead jobs, resubmits them and drains the tray
FAULT_METRICS = (
    "goodput_gpu_s",
    "lost_work_gpu_s",
    "jobs_hit",
    "avg_jct_s",
    "time_to_quarantine_s",
    "time_to_service_s",
)
METRICS = (
    "jobs",
    "makespan_s",
    "gpu_utilization",
    "avg_wait_s",
    "p95_wait_s",
    "avg_jct_s",
    "multi_tray_jobs",
    "multi_tray_in_one_partition",
    "cross_rack_jobs",
    "preemptions",
    "guarantee_shortfall_gpu_s",
    "decisions_per_s",
    "lost_work_gpu_s",
    "wait_by_size",
    "gpu_weighted_wait_s",
)
# Job sizes (GPUs, after rounding to whole trays above 4) the waits are also given for.
SIZE_CLASSES = (("1-4", 1, 4), ("8-16", 5, 16), ("20-36", 17, 36), (">36", 37, math.inf))
# Time-series bin widths for the report, smallest first: the first that gives at most MAX_BINS bins.
BIN_WIDTHS = (60, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400)
MAX_BINS = 1500


# --- the replay --------------------------------------------------------------------------------------


@dataclass
class PolicyRun:
    """One policy's replay: its metrics (the results.json entry) and the series the report draws."""

    policy: str
    metrics: dict
    departments: list[str]
    bin_s: int
    bin_start: float
    busy_gpu_s: list[float]  # per bin: allocated GPU-seconds
    department_gpu_s: dict[str, list[float]]  # per department, per bin: GPU-seconds it held
    waits: list[float] = field(repr=False)  # per job: seconds spent waiting
    capacity: int = 0
    faults: dict | None = None  # with a fault plan: `_Replay.fault_metrics`


_QUEUE_ORDER = attrgetter("submitted_at", "id")  # a waiting job's place in line


def _percentile(ordered: Sequence[float], fraction: float) -> float:
    """Nearest rank: the smallest value with at least `fraction` of the values at or below it."""
    if not ordered:
        return 0.0
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def size_class(gpus: int) -> str:
    """The `SIZE_CLASSES` label of a job of `gpus` (rounded) GPUs."""
    for label, low, high in SIZE_CLASSES:
        if low <= gpus <= high:
            return label
    raise ValueError(f"{gpus} GPUs")


def _bin_width(span: float) -> int:
    for width in BIN_WIDTHS:
        if span / width <= MAX_BINS:
            return width
    return math.ceil(span / MAX_BINS)


@dataclass(frozen=True)
class FaultPlan:
    """A node fault trace replayed with the jobs (each node onto a tray: `map_faults`, day 0 at the first
    submission), and how faults are handled (`mode`, see `_Replay._fail`)."""

    trace: FaultTrace
    mode: str = AUTOMATED
    detect_s: float = DEFAULT_DETECT_S
    check_s: float = DEFAULT_CHECK_S
    manual_delay_s: float = DEFAULT_MANUAL_DELAY_S


# Carving that follows demand (docs/simulator.md): how long a re-carve keeps its trays out of service. NMX-M
# partition operations are asynchronous (POST/PUT/DELETE /nmx/v1/partitions answer 202 with an operationId,
# polled at /nmx/v1/operations/<id>: pending, in-progress, completed); then each tray's GPUs re-register
# with the fabric (nvidia-smi Fabric State In Progress -> Completed, the new CliqueId) and the node agent
# reports it. No duration is published: 2 minutes is assumed (about one minute for the operation and one
# agent report interval, DEFAULT_DETECT_S), and `RecarvePlan.delay_s` / `--recarve-delay` changes it.
DEFAULT_RECARVE_DELAY_S = 120.0
# The fleet-wide rule every layout a re-carve makes obeys: Slurm 24.11 topology/block as the partition
# wizard checks it (core.blocks), or none (what Slurm 25.05+'s topology.yaml accepts: blocks of any size;
# the wizard still refuses such layouts today, so figures under it are a what-if, labelled so).
SLURM_24_11, NO_BLOCK_RULE = "slurm-24.11", "none"
RECARVE_RULES = (SLURM_24_11, NO_BLOCK_RULE)


@dataclass(frozen=True)
class RecarvePlan:
    """Carving that follows demand in the replay: every rack under `policy` (scheduling.engine.recarve),
    each re-carve taking `delay_s`, layouts held to `rule` (RECARVE_RULES). Only rackplane re-carves: the
    baselines keep the layout they started with."""

    policy: RecarvePolicy = field(default_factory=RecarvePolicy)
    delay_s: float = DEFAULT_RECARVE_DELAY_S
    rule: str = SLURM_24_11
    # How long an in-quota gang that only a re-carve can give one partition waits for one before it takes
    # a rack (its fallback); None: the replay's fallback bound, like every other gang.
    wait_s: float | None = None


@dataclass(frozen=True)
class SliceConversion:
    """Which trace jobs become MIG slice requests, and of which profile. The ITP traces record no GPU
    utilisation or memory (columns job_id, submission_time, duration, num_gpu), so the rule is a stated
    share, not a measurement: a job of 1 GPU becomes a slice request with probability `share`, and its
    profile is drawn from `mix` (profile name -> weight). Both draws are a hash of the job's department and
    trace id (SHA-256), not a random generator: the same jobs become the same requests in every
    configuration and every jittered sample. A slice job runs as long as the trace's 1-GPU run (its work fits
    the slice: the request is right-sized by assumption)."""

    share: float = 1.0
    mix: tuple[tuple[str, float], ...] = (("1g.23gb", 5.0), ("2g.47gb", 3.0), ("3g.93gb", 2.0))

    def request(self, job: TraceJob, profiles: Mapping[str, SliceProfile]) -> SliceProfile | None:
        """The slice `job` asks for, or None: it stays a whole-GPU job."""
        if job.trace_gpus != 1 or job.gpus != 1:
            return None
        digest = hashlib.sha256(f"{job.department}/{job.name}".encode()).digest()
        if int.from_bytes(digest[:8], "big") / 2**64 >= self.share:
            return None
        draw = int.from_bytes(digest[8:16], "big") / 2**64
        weights = normalised_mix(dict(self.mix), profiles)
        total = 0.0
        for name, weight in weights.items():
            total += weight
            if draw < total:
                return profiles[name]
        return profiles[next(reversed(weights))]


# How the guarantees split the whole GPUs when there are MIG trays (MigPlan.whole_work_guarantees).
ALL_WORK, WHOLE_WORK = "all-work", "whole-work"
GUARANTEE_SPLITS = (ALL_WORK, WHOLE_WORK)


@dataclass(frozen=True)
class MigPlan:
    """MIG in the replay: the last `trays_per_rack` trays of every rack are in MIG mode, every GPU of them
    carved by `layout` (static: never re-made), and the jobs `conversion` picks ask for slices, which take
    free instances by `rule` (scheduling.engine.mig). The MIG trays must be whole NVLink partitions at the
    end of the rack's layout (``9+8+1`` with 1 MIG tray): chosen by the layout, never by where work
    happens to be. The engine sees them as trays with no schedulable GPU, so no whole-GPU job and no
    multi-tray job ever lands there (every MIG profile has P2P No). `gpus_per_tray` of each MIG tray's GPUs
    are in MIG mode (the first ones); the tray's other GPUs stay whole for jobs of 1-3 GPUs, and the tray
    is never whole, so no gang takes it. ``trays_per_rack=0`` is whole-GPU placement on the same hardware,
    with the same figures (slice requests then run as 1-GPU jobs)."""

    trays_per_rack: int = 1
    layout: MigLayout = GB200_LAYOUTS["all-balanced"]
    rule: str = BEST_FIT
    conversion: SliceConversion = field(default_factory=SliceConversion)
    profiles: tuple[SliceProfile, ...] = GB200_PROFILES
    gpus_per_tray: int = GPUS_PER_TRAY
    # The history window (seconds from the replay's first submission) the MIG capacity was sized from
    # (`auto_mig_plan`): its jobs run, but the MIG figures of jobs (waits, JCT, in one partition) count only
    # the jobs submitted after it, in every configuration compared (whole-GPU placement too: trays 0).
    history_s: float = 0.0
    # The MIG trays named instead (hostname, its layout), each carved by its own layout: the portal's trays
    # in a what-if of its own history (scheduling.whatif). `trays_per_rack` must then be 0; a named tray
    # may sit in any partition (the live pass keeps a MIG tray in its partition and never gives it whole).
    trays: tuple[tuple[str, MigLayout], ...] = ()
    # MIG trays on some racks only (scheduling.engine.mig_sizing.concentrate): per rack, in rack order, the
    # MIG GPUs of each of its MIG trays, which are the rack's last trays and lie in its last partition (the
    # rack keeps its layout; the partition's other trays stay whole for gangs). `trays_per_rack` must be 0.
    rack_trays: tuple[tuple[int, ...], ...] = ()
    # Guarantees split the whole GPUs by the departments' whole-GPU work only (`guarantee_hours`); False:
    # by all their work, slice requests counted as the whole GPUs the trace gave them.
    whole_work_guarantees: bool = False

    @property
    def layout_name(self) -> str:
        return (
            ", ".join(sorted({layout.name for _, layout in self.trays})) if self.trays else self.layout.name
        )


def parse_mig_plan(
    trays_per_rack: int,
    layout: str = "all-balanced",
    rule: str = BEST_FIT,
    share: float = 1.0,
    mix: str | None = None,
    gpus_per_tray: int = GPUS_PER_TRAY,
    history_s: float = 0.0,
) -> MigPlan:
    """A MigPlan from the command's words: `layout` a GB200 layout's name (GB200_LAYOUTS) or instances as
    mig-parted writes them (``1g.23gb:2,2g.47gb:1,3g.93gb:1``), `mix` ``PROFILE=WEIGHT`` joined with ','."""
    try:
        chosen = GB200_LAYOUTS.get(layout.strip()) or MigLayout.parse(layout)
    except MigLayoutError as error:
        raise SimulationError(str(error)) from error
    conversion = SliceConversion(share=share)
    if mix is not None:
        weights: list[tuple[str, float]] = []
        for term in mix.replace(" ", "").split(","):
            name, sep, weight = term.partition("=")
            try:
                value = float(weight)
            except ValueError:
                value = math.nan
            if not sep or not name or not (math.isfinite(value) and value >= 0):
                raise SimulationError(f"slice mix {mix!r}: write PROFILE=WEIGHT joined with ',' (1g.23gb=5)")
            weights.append((name, value))
        conversion = replace(conversion, mix=tuple(weights))
    plan = MigPlan(trays_per_rack, chosen, rule, conversion, gpus_per_tray=gpus_per_tray, history_s=history_s)
    _check_mig(plan)
    return plan


def auto_mig_plan(
    traces: Sequence[Trace],
    racks: int,
    plan: MigPlan | None = None,
    history_s: float = DEFAULT_HISTORY_S,
    headroom: float = DEFAULT_HEADROOM,
    placement: str = DEFAULT_PLACEMENT,
    cap: int = MIG_PARTITION_TRAYS,
) -> tuple[MigPlan, MigSizing]:
    """`plan` (default MigPlan()) with its MIG trays sized by the rule (scheduling.engine.mig_sizing) from
    the traces' first `history_s` seconds: the GPU-hours of the jobs its conversion turns into slice
    requests over all GPU-hours submitted in that window. The plan keeps the window (`history_s`), so the
    replay does not score the jobs the operator sized from; the sizing's `layout` is the rack layout to
    replay on; `placement` and `cap` choose how the MIG trays are laid out (mig_sizing.size_mig)."""
    plan = plan or MigPlan()
    if placement not in PLACEMENTS:
        raise SimulationError(f"MIG placement {placement!r}? (known: {', '.join(PLACEMENTS)})")
    if not (isinstance(cap, int) and 1 <= cap <= MIG_PARTITION_TRAYS):
        raise SimulationError(f"MIG trays a rack must be 1-{MIG_PARTITION_TRAYS}, not {cap!r}")
    if not (isinstance(history_s, int | float) and math.isfinite(history_s) and history_s >= 0):
        raise SimulationError(f"the MIG history window must be a number of seconds >= 0, not {history_s!r}")
    if not (isinstance(headroom, int | float) and math.isfinite(headroom) and headroom > 0):
        raise SimulationError(f"the MIG headroom must be a number > 0, not {headroom!r}")
    if racks < 1:
        raise SimulationError("at least one rack")
    profiles = _check_mig(plan)
    jobs = [job for trace in traces for job in trace.jobs]
    if not jobs:
        raise SimulationError("no jobs to size MIG from")
    end = min(job.submitted_at for job in jobs) + history_s
    sub = every = 0.0
    for job in jobs:
        if job.submitted_at < end:
            every += job.gpus * job.duration_s
            if plan.conversion.request(job, profiles) is not None:
                sub += job.gpus * job.duration_s
    sizing = size_mig(sub / 3600, every / 3600, racks, headroom, placement, cap)
    sized = replace(
        plan,
        trays_per_rack=sizing.trays_per_rack,
        gpus_per_tray=sizing.gpus_per_tray,
        history_s=history_s,
        rack_trays=sizing.rack_trays,
    )
    return sized, sizing


def guarantee_hours(traces: Sequence[Trace], mig: MigPlan | None = None) -> dict[str, float]:
    """Each department's GPU-hours, by which the guarantees split the GPUs the engine may give whole. With
    `mig.whole_work_guarantees` and MIG trays, only its whole-GPU work counts: its slice requests run on
    the MIG GPUs, outside the guarantees, so a department whose work became slices is not guaranteed whole
    GPUs for it (without MIG trays the slice requests run as 1-GPU jobs and count as before)."""
    if (
        mig is None
        or not mig.whole_work_guarantees
        or not (mig.trays_per_rack or mig.trays or mig.rack_trays)
    ):
        return {t.department: t.gpu_hours for t in traces}
    profiles = profile_table(mig.profiles)
    return {
        t.department: sum(
            job.gpus * job.duration_s
            for job in t.jobs
            if not job.slice and mig.conversion.request(job, profiles) is None
        )
        / 3600
        for t in traces
    }


def mig_trays(cluster: Cluster, trays_per_rack: int) -> list[int]:
    """The trays a MigPlan puts in MIG mode: the last `trays_per_rack` of every rack, which must be whole
    partitions (SimulationError otherwise)."""
    chosen: list[int] = []
    if trays_per_rack <= 0:
        return chosen
    for r, parts in enumerate(cluster.rack_parts):
        trays = sorted(t for p in parts for t in cluster.part_trays[p])
        if trays_per_rack >= len(trays):
            raise SimulationError(f"{trays_per_rack} MIG trays per rack leave no tray of rack {r + 1} whole")
        last = set(trays[-trays_per_rack:])
        for p in parts:
            own = set(cluster.part_trays[p])
            if own & last and not own <= last:
                raise SimulationError(
                    f"the last {trays_per_rack} trays of each rack must be whole partitions of the layout to "
                    f"be MIG trays (e.g. layout 9+8+1 for 1, 9+7+2 for 2): partition "
                    f"{cluster.part_name[p]} has {len(own & last)} of its {len(own)} trays among them"
                )
        chosen.extend(sorted(last))
    return chosen


def concentrated_mig_trays(cluster: Cluster, rack_trays: Sequence[Sequence[int]]) -> list[int]:
    """The trays a concentrated MigPlan puts in MIG mode: rack r's last len(rack_trays[r]) trays, which must
    lie in its last partition (SimulationError otherwise: the layout would be split, not kept)."""
    if len(rack_trays) != len(cluster.rack_parts):
        raise SimulationError(
            f"MIG trays are given for {len(rack_trays)} racks, the cluster has {len(cluster.rack_parts)}"
        )
    chosen: list[int] = []
    for r, (parts, mine) in enumerate(zip(cluster.rack_parts, rack_trays, strict=True)):
        if not mine:
            continue
        trays = sorted(t for p in parts for t in cluster.part_trays[p])
        last = max(parts, key=lambda p: max(cluster.part_trays[p]))
        if len(mine) > len(cluster.part_trays[last]):
            raise SimulationError(
                f"{len(mine)} MIG trays on rack {r + 1} do not fit its last partition "
                f"({len(cluster.part_trays[last])} trays)"
            )
        chosen.extend(trays[-len(mine) :])
    return chosen


def mig_tray_gpus(cluster: Cluster, plan: MigPlan) -> dict[int, int]:
    """Each MIG tray of `plan` on `cluster` (a tray index) and how many of its GPUs are in MIG mode."""
    if plan.rack_trays:
        gpus = [n for rack in plan.rack_trays for n in rack]
        return dict(zip(concentrated_mig_trays(cluster, plan.rack_trays), gpus, strict=True))
    return dict.fromkeys(named_mig_trays(cluster, plan), plan.gpus_per_tray)


def named_mig_trays(cluster: Cluster, plan: MigPlan) -> list[int]:
    """The trays a MigPlan puts in MIG mode: the named ones (`plan.trays`), the concentrated ones
    (`plan.rack_trays`) or the last `trays_per_rack` of every rack (`mig_trays`)."""
    if plan.rack_trays:
        return concentrated_mig_trays(cluster, plan.rack_trays)
    if not plan.trays:
        return mig_trays(cluster, plan.trays_per_rack)
    index = {host: t for t, host in enumerate(cluster.tray_host)}
    unknown = [host for host, _ in plan.trays if host not in index]
    if unknown:
        raise SimulationError(f"MIG tray {', '.join(unknown)} is not a tray of the replayed cluster")
    return [index[host] for host, _ in plan.trays]


def _check_mig(
    plan: MigPlan, faults: FaultPlan | None = None, recarve: RecarvePlan | None = None
) -> dict[str, SliceProfile]:
    if faults is not None:
        raise SimulationError("MIG trays and a fault trace are not replayed together")
    if recarve is not None:  # a re-carve could merge a MIG tray's partition into a gang's
        raise SimulationError("MIG trays and re-carving are not replayed together")
    if plan.rule not in SLICE_RULES:
        raise SimulationError(f"slice rule {plan.rule!r}? (known: {', '.join(SLICE_RULES)})")
    if not (isinstance(plan.trays_per_rack, int) and 0 <= plan.trays_per_rack < RACK_TRAYS):
        raise SimulationError(f"MIG trays per rack must be 0-{RACK_TRAYS - 1}, not {plan.trays_per_rack!r}")
    if not (isinstance(plan.gpus_per_tray, int) and 1 <= plan.gpus_per_tray <= GPUS_PER_TRAY):
        raise SimulationError(f"MIG GPUs per MIG tray must be 1-{GPUS_PER_TRAY}, not {plan.gpus_per_tray!r}")
    history_s = plan.history_s
    if not (isinstance(history_s, int | float) and math.isfinite(history_s) and history_s >= 0):
        raise SimulationError(f"the MIG history window must be seconds >= 0, not {plan.history_s!r}")
    share = plan.conversion.share
    if not (isinstance(share, int | float) and 0 <= share <= 1):
        raise SimulationError(f"the slice share must be a number from 0 to 1, not {share!r}")
    try:
        profiles = profile_table(plan.profiles)
        normalised_mix(dict(plan.conversion.mix), profiles)
        fleet = SliceFleet.build(1, plan.layout, profiles)
    except MigLayoutError as error:
        raise SimulationError(str(error)) from error
    if plan.trays:
        if plan.trays_per_rack:
            raise SimulationError("name the MIG trays or give MIG trays per rack, not both")
        if len({host for host, _ in plan.trays}) != len(plan.trays):
            raise SimulationError("a MIG tray is named twice")
        try:
            for _host, layout in plan.trays:
                SliceFleet.build(1, layout, profiles)
        except MigLayoutError as error:
            raise SimulationError(str(error)) from error
    if plan.rack_trays:
        if plan.trays_per_rack or plan.trays:
            raise SimulationError("give MIG trays rack by rack, per rack or by name: one of them")
        counts = [n for rack in plan.rack_trays for n in rack]
        if not all(isinstance(n, int) and 1 <= n <= GPUS_PER_TRAY for n in counts):
            raise SimulationError(f"a MIG tray's MIG GPUs must be 1-{GPUS_PER_TRAY}")
        if any(len(rack) >= RACK_TRAYS for rack in plan.rack_trays):
            raise SimulationError("MIG trays must leave a tray of every rack whole")
    if plan.trays_per_rack or plan.rack_trays:
        never = [name for name, w in plan.conversion.mix if w > 0 and not fleet.hostable(profiles[name])]
        if never:
            raise SimulationError(
                f"MIG layout {plan.layout.name} has no instance a {', '.join(never)} request fits: "
                "those slice jobs could never start"
            )
    return profiles


def layout_error(cluster: Cluster) -> str | None:
    """Why the partition wizard (Slurm 24.11's block rule, core.blocks) would refuse the cluster's layout."""
    return block_layout_error(
        [
            BlockPartition(cluster.rack_name[cluster.part_rack[p]], cluster.part_name[p], len(trays))
            for p, trays in enumerate(cluster.part_trays)
            if trays
        ]
    )


def _layout_summary(cluster: Cluster) -> dict[str, int]:
    """How many racks are carved each way, e.g. {"9+9": 2, "18": 2}."""
    layouts: dict[str, int] = {}
    for parts in cluster.rack_parts:
        key = "+".join(str(n) for n in sorted((len(cluster.part_trays[p]) for p in parts), reverse=True))
        layouts[key] = layouts.get(key, 0) + 1
    return dict(sorted(layouts.items()))


# Fault events at one instant, in this order: a tray comes back, a tray fails, a job is resubmitted by hand.
_RETURN, _FAIL, _RESUBMIT = 0, 1, 2


class _Replay:
    def __init__(
        self,
        jobs: list[TraceJob],
        cluster: Cluster,
        guarantees: Mapping[str, int],
        policy: str,
        span_slowdown: float,
        preempted: str,
        checkpoint_loss_s: float = DEFAULT_CHECKPOINT_LOSS_S,
        engine_options: Mapping | None = None,
        fallback_after_s: float | None = None,
        faults: FaultPlan | None = None,
        projects: Mapping[str, str] | None = None,
        half_life_s: float | None = None,
        recarve: RecarvePlan | None = None,
        mig: MigPlan | None = None,
        mig_tray_list: Sequence[int] = (),
        cross_unit_slowdown: float = DEFAULT_CROSS_UNIT_SLOWDOWN,
        fabric: Fabric | None = None,
    ):
        self.jobs = sorted(jobs, key=lambda j: (j.submitted_at, j.id))
        self.by_id = {job.id: job for job in jobs}
        self.cluster = cluster
        self.policy = policy
        self.slowdown = span_slowdown
        self.preempted_mode = preempted
        self.checkpoint_loss_s = checkpoint_loss_s
        self.engine_options = dict(engine_options or {})
        # The engine weighs a preemption by the work it loses: all of it when preempted jobs restart.
        self.engine_options.setdefault(
            "checkpoint_loss_s", math.inf if preempted == RESTART else checkpoint_loss_s
        )
        self.names = list(guarantees)
        self.departments = _engine_departments(guarantees, projects or {})
        # Historical fair share (module docstring): each trace's decayed GPU-seconds, accrued in virtual time.
        self.half_life_s = half_life_s
        self.usage = dict.fromkeys(self.names, 0.0)
        if half_life_s is not None:
            self.engine_options["half_life_s"] = half_life_s
        self.parent = dict(projects or {})  # trace -> its department, when the trace is a project
        self.guaranteed = dict(guarantees)
        # The largest partition of the layout the replay starts with: the "fitting" figures' yardstick,
        # whatever re-carving makes later.
        self.max_partition_trays = cluster.max_partition_trays
        self.topology = {job.id: locality(job.gpus, cluster) for job in jobs}
        # The compute fabric (simulation_fabric): a job whose racks span scalable units runs
        # `cross_unit_slowdown` times longer again; the engine's fabric wait needs a pass when it ends.
        # `fabric` is the racks' real fabric, also when the cluster the policy places on does not know it (a
        # topology-blind baseline): the figures and the slowdown follow the real one.
        self.fabric = fabric if fabric is not None else cluster.fabric
        self.rack_path = [self.fabric.path(name) for name in cluster.rack_name]
        self.fabric_units = len(self.fabric.members(self.fabric.levels[-1]))
        self.cross_unit_slowdown = cross_unit_slowdown if self.fabric_units > 1 else 1.0
        self.fabric_wait_s = float(self.engine_options.get("fabric_wait_s", Options.fabric_wait_s))
        # A unit reserved after the fabric wait (Options.fabric_unit_reservation_s) ends that much later.
        self.unit_reservation_s = float(
            self.engine_options.get("fabric_unit_reservation_s", Options.fabric_unit_reservation_s)
        )
        unit_trays: dict[str, int] = {}
        for r, path in enumerate(self.rack_path):
            if path is not None:
                trays = sum(len(cluster.part_trays[p]) for p in cluster.rack_parts[r])
                unit_trays[path[-1]] = unit_trays.get(path[-1], 0) + trays
        self.unit_trays = max(unit_trays.values(), default=0)
        self.cross_unit: dict[
            int, bool
        ] = {}  # job -> it ran across scalable units (its traffic crossed spines)
        self.cross_spine: dict[int, bool] = {}  # job -> it ran across spine groups
        self.cross_unit_extra_gpu_s = 0.0
        self.fallback_after_s = fallback_after_s
        self.fallback = {
            job.id: wider
            for job in jobs
            if fallback_after_s is not None and (wider := fallback(job.gpus, cluster)) is not None
        }
        # When each job's fallback is due (in quota), and as a borrower where it has one (re-carving).
        self.fallback_after = dict.fromkeys(self.fallback, fallback_after_s)
        self.borrower_fallback_after: dict[int, float] = {}
        # What a waiting job's time limit is multiplied by (see the module's "exact time limits").
        self.limit_factor = {
            job.id: (
                span_slowdown
                if job.trays > 1
                and (policy != RACKPLANE or self.topology[job.id] != PARTITION or job.id in self.fallback)
                else 1.0
            )
            * (self.cross_unit_slowdown if job.trays > cluster.max_rack_trays else 1.0)
            for job in jobs
        }
        self._init_recarve(recarve if policy == RACKPLANE else None, jobs)
        self.remaining = {job.id: job.duration_s for job in jobs}  # work left, in trace seconds
        self.pending: dict[int, PendingJob] = {}
        self.waiting_of: dict[str, dict[int, PendingJob]] = {name: {} for name in self.names}  # by trace
        # Stranded capacity (`_sample_stranded`): the waiting jobs' distinct requests, counted, and the
        # stranded GPUs by cause as the last instant left them.
        self.waiting_shapes: dict[Request, int] = {}
        self.stranded_now: dict[str, int] = {}
        self.stranded_gpu_s = dict.fromkeys(CAUSES, 0.0)
        self.stranded_stale = False  # the cluster or the set of waiting shapes changed since the sample
        self.pending_since: dict[int, float] = {}
        self.running: dict[int, RunningJob] = {}
        self.factor: dict[int, float] = {}  # running job -> its slowdown where it is
        self.epoch = dict.fromkeys(self.by_id, 0)  # bumped on preemption: its completion event is void
        self.events: list[tuple[float, int, int]] = []  # (end, job id, epoch)
        self.wakes: list[tuple[float, int]] = []  # (when, job): a waiting job's fallback bound passes
        # When a borrower's minimum run time ends (engine option `min_runtime_s`): a waiting in-quota job may
        # preempt it from then, so a pass runs then if jobs wait.
        self.timers: list[float] = []
        self.min_runtime_s = float(dict(self.engine_options.get("min_runtime_s") or {}).get("train", 0.0))
        self.preempt_after_s = float(self.engine_options.get("preempt_after_s") or 0.0)
        self.held = dict.fromkeys(self.names, 0)
        self.demand = dict.fromkeys(self.names, 0)  # GPUs of running and waiting jobs
        self.allocated = 0
        # Books.
        self.wait = dict.fromkeys(self.by_id, 0.0)
        self.end: dict[int, float] = {}
        self.one_partition = dict.fromkeys(self.by_id, True)
        self.cross_rack = dict.fromkeys(self.by_id, False)
        self.preemptions = 0
        self.preempted_jobs: set[int] = set()
        self.lost_gpu_s = 0.0
        self.unsaved_gpu_s: dict[int, float] = {}  # restart mode: GPU-seconds run since the job's first start
        self.size = {job.id: size_class(job.gpus) for job in jobs}
        self.shortfall_by_size = {label: 0.0 for label, _, _ in SIZE_CLASSES}
        self.waiting_in_quota_by_size = dict.fromkeys(self.shortfall_by_size, 0)
        self.span_extra_gpu_s = 0.0
        self.shortfall = dict.fromkeys(self.names, 0.0)
        self.waiting_in_quota = dict.fromkeys(self.names, 0)  # see `_count_in_quota`
        self.gap = dict.fromkeys(self.names, 0.0)
        self.in_quota_gpu_s = dict.fromkeys(self.names, 0.0)  # held within the guarantee
        self.owed_gpu_s = dict.fromkeys(self.names, 0.0)  # min(guarantee, demand): what it was owed
        self.decisions = 0
        self.passes = 0
        # Estimated starts as the portal shows them (a waiting job's reservation: when its trays should
        # free up): the first one a job was given, and how far its real start fell from it
        # (`estimate_metrics`).
        self.first_estimate: dict[int, float] = {}
        self.estimate_error_s: list[float] = []
        self.pass_wall = 0.0
        first = self.jobs[0].submitted_at
        last = self.jobs[-1].submitted_at
        self.window = (first, last)
        self.window_busy = 0.0
        self.bin_s = _bin_width(last - first)
        self.bin_start = first
        self.bins: dict[str, list[float]] = {name: [] for name in self.names}
        self.busy_bins: list[float] = []
        # Node faults (None: none replayed).
        self.queued_at = {job.id: job.submitted_at for job in jobs}  # place in line (a resubmission: later)
        self.fault_plan = faults
        self.fault_events: list[tuple[float, int, int]] = []  # (when, kind, fault order or job id)
        self.down = [0] * len(cluster)  # faults open per tray (out of service while > 0)
        self.fault_lost_gpu_s = 0.0
        self.window_lost_gpu_s = 0.0  # work lost (faults and preemptions) by events within the window
        self.hit_jobs: set[int] = set()
        self.hits = 0
        self.awaiting_resubmit = 0
        self.quarantine_s: list[float] = []
        self.service_s: list[float] = []
        self.out_gpu_s = 0.0  # GPU-seconds of trays out of service
        self.cluster_gpus = cluster.capacity  # before any fault
        self.tray_faults: list[TrayFault] = []
        if faults is not None:
            self.tray_faults = map_faults(faults.trace, len(cluster), first)
            for order, fault in enumerate(self.tray_faults):
                heapq.heappush(self.fault_events, (fault.start, _FAIL, order))
        self._init_mig(mig, mig_tray_list)

    # --- MIG slices (MigPlan) ------------------------------------------------------------------

    def _init_mig(self, plan: MigPlan | None, trays: Sequence[int]) -> None:
        """Slice jobs and the MIG GPUs (the engine never sees either: the MIG trays have no schedulable
        GPU for it, and slice jobs are placed by `_mig_pass`)."""
        self.mig = plan
        self.slice_of: dict[int, SliceProfile] = {}
        self.slice_waiting: dict[int, SliceProfile] = {}  # in queue order (never preempted: arrival order)
        self.slice_events: list[tuple[float, int]] = []  # (end, job id)
        self.slice_busy = 0  # compute slices held
        self.window_slice_busy = 0.0
        self.stranded_slices_now = 0
        self.stranded_slice_s = 0.0
        self.fragmentation_now = 0.0
        self.fragmentation_s = 0.0
        self.slice_started: dict[int, tuple[float, str]] = {}  # job -> (start, instance profile)
        self.slices_changed = False  # a slice job came or went since the last `_mig_pass`
        self.mig_tray_list = list(trays)
        if plan is None:
            self.fleet = None
            return
        self.slice_profiles = profile_table(plan.profiles)
        self.slice_mix = normalised_mix(dict(plan.conversion.mix), self.slice_profiles)
        unknown = sorted(
            {job.slice for job in self.jobs if job.slice and job.slice not in self.slice_profiles}
        )
        if unknown:
            raise SimulationError(f"slice jobs ask for {', '.join(unknown)}: not a profile the GPUs offer")
        requests = {
            job.id: self.slice_profiles[job.slice]
            if job.slice
            else plan.conversion.request(job, self.slice_profiles)
            for job in self.jobs
        }
        self.converted = {job_id: r for job_id, r in requests.items() if r is not None}
        if plan.trays:  # each named tray's GPUs carved by its own layout
            self.fleet = SliceFleet.of_gpus(
                [layout for _, layout in plan.trays for _gpu in range(plan.gpus_per_tray)],
                self.slice_profiles,
            )
        else:
            gpus = sum(n for rack in plan.rack_trays for n in rack) or len(trays) * plan.gpus_per_tray
            self.fleet = SliceFleet.build(gpus, plan.layout, self.slice_profiles)
        never = sorted({r.name for r in self.converted.values() if not self.fleet.hostable(r)})
        if trays and never:
            raise SimulationError(
                f"no instance of the MIG trays can host {', '.join(never)}: those slice jobs could never "
                "start"
            )
        if trays:  # MIG trays: slice jobs take instances there; without them they run as 1-GPU jobs
            self.slice_of = self.converted

    def _mig_pass(self, now: float) -> None:
        """Waiting slice jobs, in queue order, each take a free instance that can host them (by the plan's
        rule) or keep waiting; a later job may take an instance an earlier one cannot use (no reservation:
        instances are exclusive and static, so a larger request is not helped by holding smaller ones)."""
        fleet, plan = self.fleet, self.mig
        free = fleet.free()
        failed: set[str] = set()
        for job_id, request in list(self.slice_waiting.items()):
            if not free:
                break
            if request.name in failed:
                continue
            chosen = fleet.place(job_id, request, plan.rule, self.slice_mix, free=free)
            if chosen is None:
                failed.add(request.name)
                continue
            free.remove(chosen)
            del self.slice_waiting[job_id]
            self.wait[job_id] += now - self.pending_since.pop(job_id)
            self.slice_busy += chosen.profile.compute_slices
            self.slice_started[job_id] = (now, chosen.profile.name)
            heapq.heappush(self.slice_events, (now + self.remaining[job_id], job_id))
        self._sample_slices(free)

    def _sample_slices(self, free=None) -> None:
        """Stranded slices (the compute slices of free instances no waiting slice request can use; 0 while
        none waits) and the fleet's fragmentation for the expected mix, held until the next instant."""
        fleet = self.fleet
        free_profiles = [i.profile for i in free] if free is not None else fleet.free_profiles()
        self.fragmentation_now = fragmentation(free_profiles, self.slice_mix, self.slice_profiles)
        wanted = {request.name: request for request in self.slice_waiting.values()}
        self.stranded_slices_now = (
            sum(p.compute_slices for p in free_profiles if not any(p.can_host(r) for r in wanted.values()))
            if wanted
            else 0
        )

    def _finish_slice(self, job_id: int, now: float) -> None:
        self.fleet.release(job_id)
        self.slice_busy -= self.slice_profiles[self.slice_started[job_id][1]].compute_slices
        self.end[job_id] = now
        self.slices_changed = True

    # --- accounting between events -------------------------------------------------------------

    def _advance(self, t0: float, t1: float) -> None:
        if t1 <= t0:
            return
        dt = t1 - t0
        lo, hi = max(t0, self.window[0]), min(t1, self.window[1])
        if hi > lo:
            self.window_busy += self.allocated * (hi - lo)
        for name in self.names:
            if self.waiting_in_quota[name]:
                self.shortfall[name] += self.waiting_in_quota[name] * dt
            owed = min(self.guaranteed[name], self.demand[name])
            gap = owed - self.held[name]
            if gap > 0:
                self.gap[name] += gap * dt
            self.owed_gpu_s[name] += owed * dt
            self.in_quota_gpu_s[name] += min(self.held[name], self.guaranteed[name]) * dt
        for label, gpus in self.waiting_in_quota_by_size.items():
            if gpus:
                self.shortfall_by_size[label] += gpus * dt
        for cause, gpus in self.stranded_now.items():
            self.stranded_gpu_s[cause] += gpus * dt
        if self.half_life_s is not None:
            usage, held, half_life = self.usage, self.held, self.half_life_s
            for name in self.names:
                usage[name] = accrue(usage[name], held[name], dt, half_life)
        if self.fault_plan is not None:
            self.out_gpu_s += GPUS_PER_TRAY * sum(1 for n in self.down if n) * dt
        if self.fleet is not None:
            if hi > lo:
                self.window_slice_busy += self.slice_busy * (hi - lo)
            self.stranded_slice_s += self.stranded_slices_now * dt
            self.fragmentation_s += self.fragmentation_now * dt
        if self.allocated == 0:
            return
        width = self.bin_s
        b = int((t0 - self.bin_start) // width)
        last = int((t1 - self.bin_start) // width)
        need = last + 1 - len(self.busy_bins)
        if need > 0:
            self.busy_bins.extend([0.0] * need)
            for series in self.bins.values():
                series.extend([0.0] * need)
        busy = self.busy_bins
        while b <= last:
            lo = max(t0, self.bin_start + b * width)
            hi = min(t1, self.bin_start + (b + 1) * width)
            if hi > lo:
                busy[b] += self.allocated * (hi - lo)
                for name in self.names:
                    if self.held[name]:
                        self.bins[name][b] += self.held[name] * (hi - lo)
            b += 1

    # --- events --------------------------------------------------------------------------------

    def _enqueue(self, job: TraceJob, now: float) -> None:
        self.pending[job.id] = self.waiting_of[job.department][job.id] = PendingJob(
            job.id,
            self.parent.get(job.department, job.department),
            job.gpus,
            self.topology[job.id],
            "train",
            self.queued_at[job.id],
            self.remaining[job.id] * self.limit_factor[job.id],
            *((self.fallback[job.id], self.fallback_after[job.id]) if job.id in self.fallback else ()),
            project=job.department if job.department in self.parent else None,
            borrower_fallback_after_s=self.borrower_fallback_after.get(job.id),
        )
        self.pending_since[job.id] = now
        shape = self._shape(job)
        if shape not in self.waiting_shapes:
            self.waiting_shapes[shape] = 0
            self.stranded_stale = True
        self.waiting_shapes[shape] += 1
        if (
            job.id in self.fallback
            and now < (wake := self.queued_at[job.id] + self.fallback_after[job.id]) < math.inf
        ):
            heapq.heappush(self.wakes, (wake, job.id))
        if self.preempt_after_s and self.queued_at[job.id] + self.preempt_after_s > now:
            heapq.heappush(self.wakes, (self.queued_at[job.id] + self.preempt_after_s, job.id))
        if self.promoted and job.id in self.promoted:
            self._promoted_enqueued(job.id, now)

    def _submit(self, job: TraceJob, now: float) -> None:
        if job.id in self.slice_of:  # a slice job: `_mig_pass` places it, the engine never sees it
            self.slice_waiting[job.id] = self.slice_of[job.id]
            self.pending_since[job.id] = now
            self.slices_changed = True
            return
        self.demand[job.department] += job.gpus
        self._enqueue(job, now)

    def _finish(self, job_id: int, now: float) -> None:
        job = self.by_id[job_id]
        self.cluster.release(job_id)
        self.stranded_stale = True
        del self.running[job_id]
        self.held[job.department] -= job.gpus
        self.demand[job.department] -= job.gpus
        self.allocated -= job.gpus
        self.end[job_id] = now

    def _start(self, start, now: float) -> None:
        job = self.by_id[start.job_id]
        estimate = self.first_estimate.pop(job.id, None)
        if estimate is not None:
            self.estimate_error_s.append(now - estimate)
        del self.pending[job.id]
        del self.waiting_of[job.department][job.id]
        shape = self._shape(job)
        self.waiting_shapes[shape] -= 1
        if not self.waiting_shapes[shape]:
            del self.waiting_shapes[shape]
        self.stranded_stale = True  # the cluster changed
        cluster = self.cluster
        partitions = {cluster.tray_part[t] for t, _ in start.placement}
        racks = {cluster.tray_rack[t] for t, _ in start.placement}
        if self.recarved_for and job.id in self.recarved_for and partitions & self.recarved_for.pop(job.id):
            self.recarved_starts += 1
        factor = self.slowdown if len(partitions) > 1 else 1.0
        if self.fabric_units and len(racks) > 1:
            groups = [self.rack_path[r] or () for r in racks]
            if len({g[-1] if g else None for g in groups}) > 1:
                self.cross_unit[job.id] = True
                self.cross_unit_extra_gpu_s += (
                    factor * (self.cross_unit_slowdown - 1.0) * self.remaining[job.id] * job.gpus
                )
                factor *= self.cross_unit_slowdown
            if len({g[0] if g else None for g in groups}) > 1:
                self.cross_spine[job.id] = True
        if len(partitions) > 1:
            self.one_partition[job.id] = False
        if len(racks) > 1:
            self.cross_rack[job.id] = True
        run_s = self.remaining[job.id] * factor
        self.span_extra_gpu_s += (factor - 1.0) * self.remaining[job.id] * job.gpus
        self.factor[job.id] = factor
        self.running[job.id] = RunningJob(
            job.id,
            self.parent.get(job.department, job.department),
            job.gpus,
            now,
            now + run_s,
            start.over_quota,
            "train",
            job.department if job.department in self.parent else None,
        )
        heapq.heappush(self.events, (now + run_s, job.id, self.epoch[job.id]))
        if self.min_runtime_s and start.over_quota and run_s > self.min_runtime_s:
            heapq.heappush(self.timers, now + self.min_runtime_s)
        self.wait[job.id] += now - self.pending_since.pop(job.id)
        self.held[job.department] += job.gpus
        self.allocated += job.gpus

    def _preempt(self, job_id: int, now: float) -> None:
        job = self.by_id[job_id]
        victim = self.running.pop(job_id)  # the pass already released its GPUs
        self.stranded_stale = True
        self.epoch[job_id] += 1
        factor = self.factor.pop(job_id)
        ran = now - victim.started_at
        if self.preempted_mode == RESTART:
            self.remaining[job_id] = job.duration_s
            lost = self.unsaved_gpu_s.get(job_id, 0.0) + ran * job.gpus
            self.unsaved_gpu_s[job_id] = lost
        else:
            # The last `checkpoint_loss_s` of this run are done again (never more than the run lasted).
            lost_s = min(self.checkpoint_loss_s, ran)
            lost = lost_s * job.gpus
            self.remaining[job_id] = max(0.0, self.remaining[job_id] - (ran - lost_s) / factor)
        self.lost_gpu_s += lost
        if self.window[0] <= now <= self.window[1]:
            self.window_lost_gpu_s += lost
        # Slowdown not yet served is not spent: take it back from the books.
        self.span_extra_gpu_s -= (factor - 1.0) * (victim.expected_end - now) / factor * job.gpus
        self.held[job.department] -= job.gpus
        self.allocated -= job.gpus
        self.preemptions += 1
        self.preempted_jobs.add(job_id)
        self._enqueue(job, now)

    # --- node faults ---------------------------------------------------------------------------

    def _fail(self, order: int, now: float) -> None:
        """A node fault on its tray (`map_faults`): the node is unavailable from the trace's fault_start, so
        the scheduler places nothing there from now on and the jobs on it stop now, whatever the mode:

        * automated: the agent reports the fault within `detect_s` and the pass drains the tray (its time to
          quarantine); each job on it is requeued at once from its last checkpoint, keeping its place in
          line, and loses what a preemption loses (at most the checkpoint loss); the tray returns `check_s`
          after the trace's repair (healthy reports, then an active check that passes).
        * manual: the jobs on it die and lose all their work; a person resubmits them `manual_delay_s`
          later (new submissions: the back of the line) and drains the tray then (its time to quarantine);
          the tray returns when the trace says it was repaired.
        """
        plan = self.fault_plan
        fault = self.tray_faults[order]
        t = fault.tray
        for job_id in list(self.cluster.tray_jobs[t]):
            self._hit(job_id, now)
        self.down[t] += 1
        if self.down[t] == 1:
            self.cluster.set_capacity(t, 0)
            self.stranded_stale = True
        self.quarantine_s.append(plan.detect_s if plan.mode == AUTOMATED else plan.manual_delay_s)
        if fault.end is not None:
            back = max(fault.end, now) + (plan.check_s if plan.mode == AUTOMATED else 0.0)
            heapq.heappush(self.fault_events, (back, _RETURN, order))

    def _return(self, order: int, now: float) -> None:
        fault = self.tray_faults[order]
        self.service_s.append(now - fault.start)
        self.down[fault.tray] -= 1
        if self.down[fault.tray] == 0:
            self.cluster.set_capacity(fault.tray, GPUS_PER_TRAY)
            self.stranded_stale = True

    def _hit(self, job_id: int, now: float) -> None:
        """A running job on a failed tray stops (all its trays are released)."""
        job = self.by_id[job_id]
        victim = self.running.pop(job_id)
        self.cluster.release(job_id)
        self.stranded_stale = True
        self.epoch[job_id] += 1
        factor = self.factor.pop(job_id)
        ran = now - victim.started_at
        self.span_extra_gpu_s -= (factor - 1.0) * (victim.expected_end - now) / factor * job.gpus
        self.held[job.department] -= job.gpus
        self.allocated -= job.gpus
        self.hits += 1
        self.hit_jobs.add(job_id)
        if self.fault_plan.mode == AUTOMATED and self.preempted_mode == RESUME:
            lost_s = min(self.checkpoint_loss_s, ran)  # as a preemption: back to the last checkpoint
            lost = lost_s * job.gpus
            self.remaining[job_id] = max(0.0, self.remaining[job_id] - (ran - lost_s) / factor)
        else:  # it starts over: this run and whatever earlier runs had kept are lost
            lost = (ran + job.duration_s - self.remaining[job_id]) * job.gpus
            self.remaining[job_id] = job.duration_s
        self.fault_lost_gpu_s += lost
        if self.window[0] <= now <= self.window[1]:
            self.window_lost_gpu_s += lost
        if self.fault_plan.mode == AUTOMATED:
            self._enqueue(job, now)  # requeued with its place in line
            return
        self.demand[job.department] -= job.gpus  # nobody asks for it until it is resubmitted
        self.awaiting_resubmit += 1
        heapq.heappush(self.fault_events, (now + self.fault_plan.manual_delay_s, _RESUBMIT, job_id))

    def _resubmit(self, job_id: int, now: float) -> None:
        job = self.by_id[job_id]
        self.awaiting_resubmit -= 1
        self.queued_at[job_id] = now
        self.demand[job.department] += job.gpus
        self._enqueue(job, now)

    def _fault_events_until(self, now: float) -> None:
        faults = self.fault_events
        while faults and faults[0][0] <= now:
            _, kind, key = heapq.heappop(faults)
            if kind == _RETURN:
                self._return(key, now)
            elif kind == _FAIL:
                self._fail(key, now)
            else:
                self._resubmit(key, now)

    def _pass(self, now: float) -> bool:
        """One scheduling pass; True when it preempted jobs (they wait again: worth another pass)."""
        started = time.perf_counter()
        result = schedule(
            self.cluster,
            self.departments if self.half_life_s is None else self._departments_with_usage(),
            list(self.running.values()),
            list(self.pending.values()),
            now,
            self.policy,
            explain=False,
            **self.engine_options,
        )
        self.pass_wall += time.perf_counter() - started
        self.passes += 1
        self.decisions += result.decisions
        first_estimate = self.first_estimate
        for reservation in result.reservations:
            first_estimate.setdefault(reservation.job_id, reservation.start_at)
        for start in result.started:
            self._start(start, now)
        for victim in result.preempted:
            self._preempt(victim, now)
        for job_id, since in result.fabric_held_since.items():
            self._held_for_fabric(job_id, since)
        # The standing the pass gave every running job, as the portal stores it for the next pass: only the
        # jobs whose standing it changed (the started ones came with theirs).
        running = self.running
        for job_id, over in result.standing_changes.items():
            job = running.get(job_id)
            if job is not None and job.over_quota != over:
                running[job_id] = replace(job, over_quota=over)
        self._count_in_quota()
        if self.recarve is not None and result.in_quota_gangs:
            self._recarve(result, now)
        return bool(result.preempted)

    def _held_for_fabric(self, job_id: int, since: float | None) -> None:
        """The engine held waiting `job_id` for the fabric for the first time (scheduling.engine.scheduler,
        Fabric wait): kept on its PendingJob, as the portal keeps it on the job, until it starts; its wait
        ends `fabric_wait_s` later (and a unit reserved for it then `unit_reservation_s` later still), when a
        pass lets it expand."""
        job = self.pending.get(job_id)
        if job is None:
            return
        job = replace(job, fabric_held_since=since)
        self.pending[job_id] = self.waiting_of[self.by_id[job_id].department][job_id] = job
        if since is None:  # its wait ran out while it could not start: forgotten (Options.fabric_wait_again)
            return
        heapq.heappush(self.wakes, (since + self.fabric_wait_s, job_id))
        if self.unit_reservation_s:
            heapq.heappush(self.wakes, (since + self.fabric_wait_s + self.unit_reservation_s, job_id))

    def _shape(self, job: TraceJob) -> Request:
        """The request a waiting job's shape is judged by for stranded capacity: its own topology (not its
        fallback), as borrowed work (every job here is preemptible training, so it may use any partition)."""
        return Request(job.gpus, self.topology[job.id], self.parent.get(job.department, job.department), True)

    def _sample_stranded(self) -> None:
        """Stranded GPUs by cause (scheduling.engine.stranded) on the cluster as this instant's passes left
        it, held until the next instant; none while nothing waits. Judged by the engine's placement rules
        (the job's topology), whatever the policy replayed. Computed again only when the cluster or the set
        of waiting shapes changed: most instants change neither (a submission of a shape already waiting)."""
        if not self.stranded_stale:
            return
        self.stranded_stale = False
        if not self.waiting_shapes:
            self.stranded_now = {}
            return
        by_cause = stranded(self.cluster, self.waiting_shapes).by_cause
        self.stranded_now = {cause: gpus for cause, gpus in by_cause.items() if gpus}

    def _departments_with_usage(self) -> list[Department]:
        """The engine's departments carrying their decayed usage as of now (a department with projects:
        the sum of its projects', each project its own). O(traces) per pass."""
        usage = self.usage
        departments = []
        for department in self.departments:
            if department.projects:
                projects = tuple(replace(p, decayed_usage=usage[p.name]) for p in department.projects)
                total = sum(p.decayed_usage for p in projects)
                departments.append(replace(department, projects=projects, decayed_usage=total))
            else:
                departments.append(replace(department, decayed_usage=usage[department.name]))
        return departments

    def _count_in_quota(self) -> None:
        """GPUs of waiting jobs that are within their department's guarantee, per department.

        In queue order (submission time), a waiting job counts when its GPUs fit in what is left of the
        guarantee after what the department holds and the counted jobs before it: the jobs admission would
        call in quota. A job larger than what is left of the guarantee is over quota, not a shortfall.
        """
        counted = dict.fromkeys(self.names, 0)
        by_size = dict.fromkeys(self.shortfall_by_size, 0)
        size = self.size
        # Each trace's count depends on its own waiting jobs only (a project's books are its own): only the
        # traces with room left are looked at, each its own jobs in queue order, until no room is left.
        for name in self.names:
            left = self.guaranteed[name] - self.held[name]
            waiting = self.waiting_of[name]
            if left <= 0 or not waiting:
                continue  # a job of >= 1 GPU cannot count
            for job in sorted(waiting.values(), key=_QUEUE_ORDER):
                gpus = job.gpus
                if gpus <= left:
                    left -= gpus
                    counted[name] += gpus
                    by_size[size[job.id]] += gpus
                    if left <= 0:
                        break  # no later job of this trace counts
        self.waiting_in_quota = counted
        self.waiting_in_quota_by_size = by_size

    # --- carving that follows demand (RecarvePlan) ------------------------------------------------

    def _init_recarve(self, plan: RecarvePlan | None, jobs: list[TraceJob]) -> None:
        """With a plan, gangs that fit the largest partition a re-carve can make ask for one partition (a
        gang larger than the layout's largest partition then waits for a merge, and accepts a rack after
        `fallback_after_s` like any gang above half a partition); every rack is under the plan's policy."""
        self.recarve = plan
        self.recarve_ends: list[tuple[float, int, tuple[int, ...]]] = []  # (when, order, trays)
        self.recarves: list[dict] = []  # one entry per re-carve, as results.json lists them
        self.recarve_times: dict[str, list[float]] = {}  # rack -> when its re-carves began
        self.recarving_gpu_s = 0.0
        self.recarved_starts = 0  # gangs started on a partition a re-carve made for them
        self.recarved_for: dict[int, set[int]] = {}  # job -> partitions re-carved for it
        # Gangs asking for one partition only because a re-carve can make it: job -> (how long it waits for
        # one in quota, its fallback without re-carving), and when each waiting one stops waiting.
        self.promoted: dict[int, tuple[float, str | None]] = {}
        self.demotions: list[tuple[float, int]] = []
        if plan is None:
            return
        cluster = self.cluster
        if plan.rule == SLURM_24_11 and (why := layout_error(cluster)) is not None:
            raise SimulationError(
                f"re-carving keeps the partition wizard's block rule, and this layout breaks it: {why}"
            )
        self.block_check = (
            cluster_block_check(cluster) if plan.rule == SLURM_24_11 else (lambda rack, planned: None)
        )
        self.recarve_policies = dict.fromkeys(cluster.rack_name, plan.policy)
        largest = self._largest_recarved()
        self.max_recarved_trays = largest
        if largest <= cluster.max_partition_trays:
            return
        if plan.wait_s is not None:
            wait = plan.wait_s
        else:
            wait = math.inf if self.fallback_after_s is None else self.fallback_after_s
        for job in jobs:
            if self.topology[job.id] == RACK and job.trays <= largest:
                # In quota it waits for a re-carve up to `wait`, then asks for what it asks without
                # re-carving (a rack, any trays after the fallback bound: `_demote`); as a borrower
                # (re-carving never serves one) it takes a rack at once, in as few partitions as possible.
                self.promoted[job.id] = (wait, self.fallback.get(job.id))
                self.topology[job.id] = PARTITION
                self.fallback[job.id] = RACK
                self.fallback_after[job.id] = wait
                self.borrower_fallback_after[job.id] = 0.0

    def _largest_recarved(self) -> int:
        """The largest partition a re-carve may make: one rack's trays carved as one partition of the most
        trays the rule accepts beside the other racks as they start (at least the policy's floor)."""
        cluster = self.cluster
        r = 0
        rack = cluster.rack_name[r]
        hosts = tuple(cluster.tray_host[t] for p in cluster.rack_parts[r] for t in cluster.part_trays[p])
        floor = max(1, self.recarve.policy.smallest_trays)
        for size in range(len(hosts), cluster.max_partition_trays, -1):
            rest = len(hosts) - size
            if rest and rest < floor:
                continue
            planned = {"big": hosts[:size], **({"rest": hosts[size:]} if rest else {})}
            if self.block_check(rack, planned) is None:
                return size
        return cluster.max_partition_trays

    def _recarve(self, result, now: float) -> None:
        """After a pass: re-carve idle partitions for the in-quota gangs it left waiting (engine.recarve),
        as the portal does after its pass; the trays stay out of service for the plan's delay."""
        plan = self.recarve
        gangs = waiting_gangs(result, self.pending.values())
        if not gangs:
            return
        hour = now - 3600.0
        recent = {}
        for rack, times in self.recarve_times.items():
            while times and times[0] <= hour:
                times.pop(0)
            if times:
                recent[rack] = len(times)
        proposals = propose(
            self.cluster,
            gangs,
            self.recarve_policies,
            recent=recent,
            block_check=self.block_check,
            now=now,
            size_rule=sizes_error if plan.rule == SLURM_24_11 else None,
        )
        cluster = self.cluster
        for recarve in proposals:
            donors = {name for name, _ in recarve.taken}
            before = sorted(
                len(cluster.part_trays[p])
                for p in cluster.rack_parts[cluster.rack_index(recarve.rack)]
                if cluster.part_name[p] in recarve.removed or cluster.part_name[p] in donors
            )
            new = cluster.replace_partitions(
                recarve.rack,
                recarve.removed,
                [(p.name, p.hostnames, p.owner) for p in recarve.created],
                taken=recarve.taken,
            )
            trays = tuple(t for p in new for t in cluster.part_trays[p])
            heapq.heappush(self.recarve_ends, (now + plan.delay_s, len(self.recarves), trays))
            self.recarve_times.setdefault(recarve.rack, []).append(now)
            self.recarving_gpu_s += len(trays) * GPUS_PER_TRAY * plan.delay_s
            self.recarved_for.setdefault(recarve.job_id, set()).add(new[0])
            self.recarves.append(
                {
                    "at_s": round(now - self.window[0], 1),
                    "rack": recarve.rack,
                    "from_trays": before,
                    "to_trays": [len(p.hostnames) for p in recarve.created]
                    + [len(cluster.part_trays[p]) for p in self._partitions(recarve.rack, donors)],
                    "job": self.by_id[recarve.job_id].name,
                    "gpus": recarve.gpus,
                    "reason": recarve.reason,
                }
            )
            self.stranded_stale = True

    def _partitions(self, rack: str, names: set[str]) -> list[int]:
        cluster = self.cluster
        return [p for p in cluster.rack_parts[cluster.rack_index(rack)] if cluster.part_name[p] in names]

    def _promoted_enqueued(self, job_id: int, now: float) -> None:
        wait, _ = self.promoted[job_id]
        due = self.queued_at[job_id] + wait
        if now >= due:
            self._demote(job_id, now)
        elif due < math.inf:
            heapq.heappush(self.demotions, (due, job_id))  # a wake at `due` runs a pass (its fallback bound)

    def _demote(self, job_id: int, now: float) -> None:
        """A promoted gang has waited for a re-carve as long as it may: from now on it asks for exactly what
        it asks for without re-carving (a rack; any trays once the fallback bound passes)."""
        job = self.pending.get(job_id)
        if job is None or job.topology != PARTITION:
            return
        _, base = self.promoted[job_id]
        after = self.fallback_after_s if base is not None and self.fallback_after_s is not None else 0.0
        self.pending[job_id] = replace(
            job, topology=RACK, fallback_topology=base, fallback_after_s=after, borrower_fallback_after_s=None
        )
        if base is not None and now < self.queued_at[job_id] + after:
            heapq.heappush(self.wakes, (self.queued_at[job_id] + after, job_id))

    def _demotions_due(self, now: float) -> None:
        demotions = self.demotions
        while demotions and demotions[0][0] <= now:
            _, job_id = heapq.heappop(demotions)
            self._demote(job_id, now)

    def _recarves_settle(self, now: float) -> None:
        ends = self.recarve_ends
        while ends and ends[0][0] <= now:
            _, _, trays = heapq.heappop(ends)
            self.cluster.end_change(trays)
            self.stranded_stale = True

    def _fitting(self, trays: int, name: str) -> dict:
        fitting = [j for j in self.jobs if 1 < j.trays <= trays]
        share = sum(self.one_partition[j.id] for j in fitting) / len(fitting) if fitting else None
        return {
            f"multi_tray_jobs_fitting_{name}": len(fitting),
            f"fitting_{name}_in_one_partition": None if share is None else round(share, 4),
        }

    def recarve_metrics(self) -> dict:
        """The re-carving figures of a replay with a RecarvePlan (results.json `recarve` per policy)."""
        return {
            "recarves": len(self.recarves),
            "merges": sum(len(r["from_trays"]) > 1 and len(r["to_trays"]) == 1 for r in self.recarves),
            "recarving_gpu_s": round(self.recarving_gpu_s, 1),
            "gangs_started_on_recarved_partition": self.recarved_starts,
            "largest_partition_trays": self.max_recarved_trays,
            # Multi-tray jobs that fit the largest partition a re-carve can make, and the share of them that
            # ran in one partition (the "fitting" figures keep the starting layout's largest partition).
            **self._fitting(self.max_recarved_trays, "recarvable"),
            "racks_recarved": len(self.recarve_times),
            "final_layout": _layout_summary(self.cluster),
            "log": self.recarves[:200],  # the first 200, with their reasons
        }

    def run(self) -> None:
        jobs, events, wakes, faults = self.jobs, self.events, self.wakes, self.fault_events
        n, i = len(jobs), 0
        now = jobs[0].submitted_at
        # Fault events matter while jobs run, wait, or wait to be resubmitted.
        recarve_ends = self.recarve_ends
        slice_events = self.slice_events
        while (
            i < n
            or events
            or wakes
            or recarve_ends
            or slice_events
            or (faults and (self.pending or self.awaiting_resubmit))
        ):
            while events and events[0][2] != self.epoch[events[0][1]]:
                heapq.heappop(events)  # the job was preempted: this end never comes
            next_submit = jobs[i].submitted_at if i < n else math.inf
            next_end = events[0][0] if events else math.inf
            while wakes and wakes[0][1] not in self.pending:
                heapq.heappop(wakes)  # the job started before its bound
            next_wake = wakes[0][0] if wakes else math.inf
            next_fault = faults[0][0] if faults else math.inf
            timers = self.timers
            next_timer = timers[0] if timers and self.pending else math.inf
            next_recarve = recarve_ends[0][0] if recarve_ends else math.inf
            next_slice = slice_events[0][0] if slice_events else math.inf
            t = min(next_submit, next_end, next_wake, next_fault, next_timer, next_recarve, next_slice)
            if t == math.inf:
                break
            self._advance(now, t)
            now = t
            while wakes and wakes[0][0] <= now:
                heapq.heappop(wakes)  # a waiting job's fallback bound or preemption grace: it may start now
            while timers and timers[0] <= now:
                heapq.heappop(timers)  # a borrower's minimum run time ended: it may be preempted now
            while events and events[0][0] <= now:
                _, job_id, epoch = heapq.heappop(events)
                if epoch == self.epoch[job_id]:
                    self._finish(job_id, now)
            while slice_events and slice_events[0][0] <= now:
                self._finish_slice(heapq.heappop(slice_events)[1], now)
            if faults and faults[0][0] <= now:
                self._fault_events_until(now)
            if recarve_ends and recarve_ends[0][0] <= now:
                self._recarves_settle(now)
            if self.demotions and self.demotions[0][0] <= now:
                self._demotions_due(now)
            while i < n and jobs[i].submitted_at <= now:
                self._submit(jobs[i], now)
                i += 1
            # Preempted jobs are back in the queue: pass again at once. Only in-quota jobs preempt, and
            # each preemption starts one, so this ends.
            while self.pending and self._pass(now):
                pass
            self._sample_stranded()
            if self.slices_changed:
                self.slices_changed = False
                self._mig_pass(now)
        stuck = [*self.pending, *self.slice_waiting]
        if stuck:  # nothing runs and nothing will come: the rest can never start
            raise SimulationError(
                f"{len(stuck)} jobs can never start on this cluster under {self.policy} "
                f"(first: job {self.by_id[stuck[0]].name})"
            )

    # --- results -------------------------------------------------------------------------------

    def fault_metrics(self) -> dict:
        """The fault replay's figures (results.json `faults.<mode>`)."""
        jobs = self.jobs
        first, last = self.window

        def mean(values):
            return round(sum(values) / len(values), 1) if values else None

        goodput = self.window_busy - self.window_lost_gpu_s
        return {
            "goodput_gpu_s": round(goodput, 1),
            "lost_work_gpu_s": round(self.fault_lost_gpu_s, 1),
            "jobs_hit": len(self.hit_jobs),
            "avg_jct_s": round(sum(self.end[j.id] - j.submitted_at for j in jobs) / len(jobs), 1),
            "time_to_quarantine_s": mean(self.quarantine_s),
            "time_to_service_s": mean(self.service_s),
            # What the figures above rest on.
            "faults": len(self.quarantine_s),
            "faults_returned": len(self.service_s),
            "hits": self.hits,
            "goodput_share": round(goodput / (self.cluster_gpus * (last - first)), 4)
            if last > first
            else None,
            "out_of_service_gpu_s": round(self.out_gpu_s, 1),
            "preemption_lost_work_gpu_s": round(self.lost_gpu_s, 1),
            "avg_wait_s": round(sum(self.wait.values()) / len(jobs), 1),
            "makespan_s": round(max(self.end.values()) - first, 1),
        }

    def fabric_metrics(self) -> dict:
        """The compute fabric's figures (issue 33): multi-rack jobs (more trays than a rack), those of them
        that fit one scalable unit and how many ran inside one (every placement they had), their waits and
        JCTs, and the jobs whose traffic crossed the spine layer (spanning units) or spine groups."""
        rack = self.cluster.max_rack_trays
        multi = [j for j in self.jobs if j.trays > rack]
        fitting = [j for j in multi if j.trays <= self.unit_trays]

        def mean(values: list[float]) -> float | None:
            return round(sum(values) / len(values), 1) if values else None

        def group(jobs: list[TraceJob]) -> dict:
            return {
                "jobs": len(jobs),
                "avg_wait_s": mean([self.wait[j.id] for j in jobs]),
                "avg_jct_s": mean([self.end[j.id] - j.submitted_at for j in jobs]),
            }

        inside = [j for j in fitting if not self.cross_unit.get(j.id)]
        return {
            "units": self.fabric_units,
            "unit_trays": self.unit_trays,
            "cross_unit_slowdown": self.cross_unit_slowdown,
            "multi_rack": group(multi),
            "fitting_one_unit": group(fitting),
            "fitting_in_one_unit": round(len(inside) / len(fitting), 4) if fitting else None,
            # Of the fitting jobs that ran across units, those preempted at least once (a resumed job waits no
            # more for a unit: its fabric wait runs from its submission).
            "fitting_across_units_preempted": sum(
                1 for j in fitting if self.cross_unit.get(j.id) and j.id in self.preempted_jobs
            ),
            "cross_unit_jobs": sum(1 for j in self.jobs if self.cross_unit.get(j.id)),
            "cross_spine_jobs": sum(1 for j in self.jobs if self.cross_spine.get(j.id)),
            "cross_unit_slowdown_gpu_s": round(self.cross_unit_extra_gpu_s, 1),
            # The single-rack figures the issue keeps: jobs of at most one rack's trays.
            "single_rack": group([j for j in self.jobs if j.trays <= rack]),
        }

    def metrics(self) -> dict:
        jobs = self.jobs
        first, last = self.window
        end = max(self.end.values())
        capacity = self.cluster.capacity
        if last > first:
            utilization = self.window_busy / (capacity * (last - first))
        else:  # one instant of submissions: over the whole run instead
            utilization = sum(self.busy_bins) / (capacity * (end - first)) if end > first else 0.0
        waits = sorted(self.wait.values())
        jct = [self.end[j.id] - j.submitted_at for j in jobs]
        multi = [j for j in jobs if j.trays > 1]
        fitting = [j for j in multi if j.trays <= self.max_partition_trays]

        def fraction(group):
            return sum(self.one_partition[j.id] for j in group) / len(group) if group else None

        by_size: dict[str, dict] = {}
        for label, _, _ in SIZE_CLASSES:
            own = sorted(self.wait[j.id] for j in jobs if self.size[j.id] == label)
            by_size[label] = {
                "jobs": len(own),
                "avg_wait_s": round(sum(own) / len(own), 1) if own else None,
                "p50_wait_s": round(_percentile(own, 0.5), 1) if own else None,
                "p95_wait_s": round(_percentile(own, 0.95), 1) if own else None,
            }
        gpu_total = sum(j.gpus for j in jobs)

        departments = {}
        for name in self.names:
            own = [j for j in jobs if j.department == name]
            departments[name] = {
                "guaranteed_gpus": self.guaranteed[name],
                "jobs": len(own),
                "gpu_hours": round(sum(j.gpus * j.duration_s for j in own) / 3600, 1),
                "held_gpu_hours": round(sum(self.bins[name]) / 3600, 1),
                "avg_wait_s": round(sum(self.wait[j.id] for j in own) / len(own), 1) if own else 0.0,
                "avg_jct_s": round(sum(self.end[j.id] - j.submitted_at for j in own) / len(own), 1)
                if own
                else 0.0,
                "guarantee_shortfall_gpu_s": round(self.shortfall[name], 1),
                "guarantee_gap_gpu_s": round(self.gap[name], 1),
                **self._guarantee_figures(name),
            }
        projects = {
            name: {"department": parent, **departments[name]} for name, parent in sorted(self.parent.items())
        }
        return {
            "jobs": len(jobs),
            "makespan_s": round(end - first, 1),
            "gpu_utilization": round(utilization, 4),
            "avg_wait_s": round(sum(waits) / len(waits), 1),
            "p95_wait_s": round(_percentile(waits, 0.95), 1),
            "avg_jct_s": round(sum(jct) / len(jct), 1),
            "multi_tray_jobs": len(multi),
            "multi_tray_in_one_partition": None if not multi else round(fraction(multi), 4),
            "cross_rack_jobs": sum(self.cross_rack[j.id] for j in jobs),
            "preemptions": self.preemptions,
            "guarantee_shortfall_gpu_s": round(sum(self.shortfall.values()), 1),
            "decisions_per_s": round(self.decisions / self.pass_wall) if self.pass_wall > 0 else None,
            "lost_work_gpu_s": round(self.lost_gpu_s, 1),
            "wait_by_size": by_size,
            "gpu_weighted_wait_s": round(sum(self.wait[j.id] * j.gpus for j in jobs) / gpu_total, 1),
            # Beyond the issue's list: what the figures above rest on.
            "multi_tray_jobs_fitting_a_partition": len(fitting),
            "fitting_multi_tray_in_one_partition": None if not fitting else round(fraction(fitting), 4),
            "spanning_jobs": sum(not self.one_partition[j.id] for j in multi),
            "span_slowdown_gpu_s": round(self.span_extra_gpu_s, 1),
            "preempted_jobs": len(self.preempted_jobs),
            "guarantee_gap_gpu_s": round(sum(self.gap.values()), 1),
            "guarantee_shortfall_by_size_gpu_s": {
                label: round(gpu_s, 1) for label, gpu_s in self.shortfall_by_size.items()
            },
            "decisions": self.decisions,
            "passes": self.passes,
            # Stranded NVLink capacity (`_sample_stranded`): GPU-seconds of free GPUs no waiting job could be
            # given, and their average over the makespan, by cause and in all.
            "stranded_gpu_s": round(sum(self.stranded_gpu_s.values()), 1),
            "avg_stranded_gpus": round(sum(self.stranded_gpu_s.values()) / (end - first), 2)
            if end > first
            else 0.0,
            "stranded_by_cause_gpu_s": {
                cause: round(gpu_s, 1) for cause, gpu_s in self.stranded_gpu_s.items()
            },
            "scheduling_wall_s": round(self.pass_wall, 3),
            **({"fabric": self.fabric_metrics()} if self.fabric_units else {}),
            "estimated_starts": self.estimate_metrics(),
            "departments": departments,
            **({"projects": projects} if projects else {}),
        }

    def estimate_metrics(self) -> dict:
        """How true the estimated starts were: for every job that was given one (a reservation) and then
        started, its real start minus the first estimate it was given (positive: later than said).

        Running jobs end here exactly when the engine expects (the trace's run time is known), so the error is
        the scheduler's own: work arriving later with a better claim (in-quota before borrowed), reclaim,
        faults. The portal estimates from time limits, which users set longer than their jobs run: its
        estimates err early on that account too (Slurm's `squeue --start` has the same caveat).
        """
        errors = sorted(self.estimate_error_s)
        if not errors:
            return {"jobs_with_estimate": 0}
        absolute = sorted(abs(error) for error in errors)
        return {
            "jobs_with_estimate": len(errors),
            "share_of_jobs": round(len(errors) / len(self.jobs), 4),
            "median_abs_error_s": round(_percentile(absolute, 0.5), 1),
            "p90_abs_error_s": round(_percentile(absolute, 0.9), 1),
            "within_15_min": round(sum(e <= 900 for e in absolute) / len(errors), 4),
            "later_than_estimate": round(sum(e > 60 for e in errors) / len(errors), 4),
            "earlier_than_estimate": round(sum(e < -60 for e in errors) / len(errors), 4),
        }

    def mig_metrics(self) -> dict:
        """The MIG figures (results.json `mig`): slice use, stranded slices, the waits of jobs of 1 GPU or
        smaller, and the multi-tray figures to compare configurations by."""
        plan = self.mig
        first, last = self.window
        # Scored: the jobs submitted after the history window the MIG capacity was sized from.
        jobs = [j for j in self.jobs if j.submitted_at >= first + plan.history_s]
        end = max(self.end.values())
        slices = len(self.fleet) * COMPUTE_SLICES

        def waits(group) -> dict:
            own = sorted(self.wait[j.id] for j in group)
            jct = [self.end[j.id] - j.submitted_at for j in group]
            return {
                "jobs": len(own),
                "avg_wait_s": round(sum(own) / len(own), 1) if own else None,
                "p95_wait_s": round(_percentile(own, 0.95), 1) if own else None,
                "avg_jct_s": round(sum(jct) / len(jct), 1) if jct else None,
            }

        multi = [j for j in jobs if j.trays > 1]
        fitting = [j for j in multi if j.trays <= self.max_partition_trays]
        taken: dict[str, int] = {}
        for job_id, (_, instance) in self.slice_started.items():
            key = f"{self.slice_of[job_id].name} on {instance}"
            taken[key] = taken.get(key, 0) + 1
        span = last - first
        cluster, in_mig = self.cluster, set(self.mig_tray_list)
        gang_blocks = [
            BlockPartition(cluster.rack_name[cluster.part_rack[p]], cluster.part_name[p], len(trays))
            for p, trays in enumerate(cluster.part_trays)
            if trays and not set(trays) <= in_mig
        ]
        return {
            "mig_trays": len(self.mig_tray_list),
            # Whether Slurm 24.11's topology/block can express the gang partitions, the MIG trays left out
            # of every block (P2P No): None when it can, else why not (core.blocks, the wizard's check).
            "slurm_24_11_blocks": block_layout_error(gang_blocks),
            # The same as the portal renders it (integrations.state._slurm_blocks): a tray in MIG mode keeps
            # its NVLink partition, and its block, so a partition of MIG trays is a block too. This is what
            # the wizard checks; None when Slurm 24.11's topology.conf takes it (25.05's topology.yaml takes
            # blocks smaller than the base, so any layout).
            "slurm_24_11_blocks_as_rendered": layout_error(cluster),
            "mig_gpus": len(self.fleet),
            "layout": plan.layout_name,
            "rule": plan.rule,
            "slice_share": plan.conversion.share,
            "slice_mix": dict(plan.conversion.mix),
            "history_s": plan.history_s,
            "scored_jobs": len(jobs),
            "converted_jobs": len(self.converted),
            "slice_jobs": len(self.slice_of),
            # Busy compute slices over the MIG GPUs' 7 each, from the first to the last submission.
            "slice_utilization": round(self.window_slice_busy / (slices * span), 4)
            if slices and span
            else None,
            # Free instances' compute slices no waiting slice job could use, integrated; and averaged.
            "stranded_slice_s": round(self.stranded_slice_s, 1),
            "avg_stranded_slices": round(self.stranded_slice_s / (end - first), 3) if end > first else 0.0,
            # The fleet's fragmentation for the expected mix (scheduling.engine.mig.fragmentation), averaged.
            "avg_fragmentation_slices": round(self.fragmentation_s / (end - first), 3)
            if end > first
            else 0.0,
            # Whole GPUs allocated plus slices as g/7, over the whole hardware's GPUs.
            "gpu_equivalent_utilization": round(
                (self.window_busy + self.window_slice_busy / COMPUTE_SLICES)
                / ((self.cluster_gpus + len(self.fleet)) * span),
                4,
            )
            if span
            else None,
            "one_gpu_or_smaller": waits([j for j in jobs if j.gpus == 1]),
            "slices": waits([j for j in jobs if j.id in self.slice_of]),
            "instances_taken": dict(sorted(taken.items())),
            "multi_tray": {
                **waits(multi),
                "in_one_partition": round(sum(self.one_partition[j.id] for j in multi) / len(multi), 4)
                if multi
                else None,
                "fitting_in_one_partition": round(
                    sum(self.one_partition[j.id] for j in fitting) / len(fitting), 4
                )
                if fitting
                else None,
                "cross_rack_jobs": sum(self.cross_rack[j.id] for j in multi),
            },
        }

    def _guarantee_figures(self, name: str) -> dict:
        """How well a trace's (department's or project's) guarantee was honoured: `in_quota_gpu_hours`,
        the GPU-hours it held within its guarantee; `guarantee_met`, the share of what it was owed (at
        each instant the smaller of its guarantee and its demand) that it held (1.0: always had its
        guarantee when it asked; None: never owed anything)."""
        owed = self.owed_gpu_s[name]
        return {
            "in_quota_gpu_hours": round(self.in_quota_gpu_s[name] / 3600, 1),
            "guarantee_met": round(1 - self.gap[name] / owed, 4) if owed > 0 else None,
        }


def simulate(
    traces: Sequence[Trace],
    racks: int,
    layout: str | Sequence[int] = "1x18",
    policy: str = RACKPLANE,
    *,
    span_slowdown: float = DEFAULT_SPAN_SLOWDOWN,
    guarantees: Mapping[str, int] | None = None,
    preempted: str = RESUME,
    checkpoint_loss_s: float = DEFAULT_CHECKPOINT_LOSS_S,
    cluster: Cluster | None = None,
    engine_options: Mapping | None = None,
    fallback_after_s: float | None = DEFAULT_FALLBACK_AFTER_S,
    faults: FaultPlan | None = None,
    projects: Mapping[str, str] | None = None,
    half_life_s: float | None = None,
    recarve: RecarvePlan | None = None,
    dedicated: Mapping[str, int] | None = None,
    mig: MigPlan | None = None,
    fabric: str | None = None,
    cross_unit_slowdown: float = DEFAULT_CROSS_UNIT_SLOWDOWN,
    fabric_blind: bool = False,
) -> PolicyRun:
    """Replay `traces` (one department each) on a fresh cluster under one placement policy.

    `guarantees` fixes some departments' guaranteed GPUs; the others share the rest by GPU-hours.
    `cluster`, when given, is the cluster to replay on instead of `racks` racks carved by `layout` (the
    portal's own racks and partitions, for a what-if: scheduling.whatif); it must have nothing allocated.
    `engine_options` go to every `schedule` call (its keyword arguments, e.g. ``max_reservations``): for
    measuring the engine's rules against each other; the default is what the portal runs.
    `faults` replays a node fault trace with the jobs (the run's `faults` are then its fault figures).
    `projects` maps a trace to the department it is a project of (module docstring).
    `half_life_s` turns on historical fair share (module docstring); None: off.
    `recarve` turns on carving that follows demand for rackplane (RecarvePlan); its run's metrics then have
    `recarve` (`_Replay.recarve_metrics`). `dedicated` (department -> racks) dedicates whole racks' partitions
    to departments (the first racks, in the order given; `simulation_inputs.dedicated_owners`).
    `mig` puts trays in MIG mode and turns jobs into slice requests (MigPlan); the run's metrics then have
    `mig` (`_Replay.mig_metrics`).
    `fabric` (``units=U,racks-per-unit=R,spines=S``: simulation_fabric.parse_fabric) hangs the racks under a
    compute fabric: rackplane keeps multi-rack jobs inside one scalable unit when it can (the baselines
    ignore it), a job spanning units runs `cross_unit_slowdown` times longer, and the metrics get `fabric`
    (`_Replay.fabric_metrics`). `fabric_blind`: the policy places as if the fabric were flat (rackplane
    before issue 33: the topology-blind baseline), the figures and slowdown still following the fabric.
    """
    if faults is not None:
        _check_fault_plan(faults)
    if mig is not None:
        _check_mig(mig, faults, recarve)
    if recarve is not None:
        _check_recarve(recarve)
    if policy not in POLICIES:
        raise SimulationError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")
    if preempted not in PREEMPTION_MODES:
        raise SimulationError(f"preempted jobs {preempted!r}? (known: {', '.join(PREEMPTION_MODES)})")
    if not (isinstance(span_slowdown, int | float) and math.isfinite(span_slowdown) and span_slowdown >= 1):
        raise SimulationError(f"the span slowdown must be a number >= 1.0, not {span_slowdown!r}")
    if not (
        isinstance(checkpoint_loss_s, int | float)
        and math.isfinite(checkpoint_loss_s)
        and checkpoint_loss_s >= 0
    ):
        raise SimulationError(
            f"the checkpoint loss must be a number of seconds >= 0, not {checkpoint_loss_s!r}"
        )
    if fallback_after_s is not None and not (
        isinstance(fallback_after_s, int | float)
        and math.isfinite(fallback_after_s)
        and fallback_after_s >= 0
    ):
        raise SimulationError(
            f"the fallback bound must be a number of seconds >= 0, not {fallback_after_s!r}"
        )
    _check_half_life(half_life_s)
    cluster_given, real = cluster, None
    if cluster is None:
        sizes = parse_layout(layout) if isinstance(layout, str) else tuple(layout)
        owners = dedicated_owners(dedicated, racks, {t.department for t in traces}) if dedicated else ()
        real = parse_fabric(fabric, racks) if fabric else None
        cluster = build_cluster(racks, sizes, owners, None if fabric_blind else real)
    if not (
        isinstance(cross_unit_slowdown, int | float)
        and math.isfinite(cross_unit_slowdown)
        and cross_unit_slowdown >= 1
    ):
        raise SimulationError(f"the cross-unit slowdown must be a number >= 1.0, not {cross_unit_slowdown!r}")
    if not any(trace.jobs for trace in traces):
        raise SimulationError("no jobs to replay")
    mig_gpus_of = mig_tray_gpus(cluster, mig) if mig is not None else {}
    mig_tray_list = list(mig_gpus_of)
    for t, n in mig_gpus_of.items():  # the MIG GPUs are not the engine's; the tray is never whole: no gang
        cluster.set_capacity(t, GPUS_PER_TRAY - n)
    traces = fit_traces(traces, cluster.capacity)  # jobs larger than the cluster: left out, counted
    guarantees = split_guarantees(cluster.capacity, guarantee_hours(traces, mig), guarantees)
    jobs = [job for trace in traces for job in trace.jobs]
    started = time.perf_counter()
    replay = _Replay(
        jobs,
        cluster,
        guarantees,
        policy,
        float(span_slowdown),
        preempted,
        float(checkpoint_loss_s),
        engine_options,
        fallback_after_s,
        faults,
        projects,
        half_life_s,
        recarve,
        mig,
        mig_tray_list,
        float(cross_unit_slowdown),
        real if cluster_given is None else None,
    )
    replay.run()
    metrics = replay.metrics()
    if replay.recarve is not None:
        metrics["recarve"] = replay.recarve_metrics()
    if mig is not None:
        metrics["mig"] = replay.mig_metrics()
    metrics["wall_s"] = round(time.perf_counter() - started, 2)
    fault_metrics = None
    if faults is not None:
        fault_metrics = {**replay.fault_metrics(), "wall_s": metrics["wall_s"]}
    return PolicyRun(
        policy=policy,
        metrics=metrics,
        departments=list(guarantees),
        bin_s=replay.bin_s,
        bin_start=replay.bin_start,
        busy_gpu_s=replay.busy_bins,
        department_gpu_s=replay.bins,
        waits=[replay.wait[j.id] for j in replay.jobs],
        capacity=replay.cluster_gpus,
        faults=fault_metrics,
    )


def _engine_departments(guarantees: Mapping[str, int], projects: Mapping[str, str]) -> list[Department]:
    """The engine's departments: a trace is one, or a project of the department `projects` names (which is
    guaranteed the sum of its projects' guarantees)."""
    clash = sorted(set(projects.values()) & (set(guarantees) - set(projects)))
    unknown = sorted(set(projects) - set(guarantees))
    if clash or unknown:
        words = f"{', '.join(unknown)}: no such trace" if unknown else f"{', '.join(clash)}: a trace's own"
        raise SimulationError(f"projects: {words} (a project's department is not a trace)")
    departments = [Department(name, g) for name, g in guarantees.items() if name not in projects]
    for parent in sorted(set(projects.values())):
        own = tuple(Project(name, guarantees[name]) for name in guarantees if projects.get(name) == parent)
        departments.append(Department(parent, sum(p.guaranteed for p in own), projects=own))
    return departments


def _check_half_life(half_life_s: float | None) -> None:
    if half_life_s is not None and not (
        isinstance(half_life_s, int | float) and math.isfinite(half_life_s) and half_life_s > 0
    ):
        raise SimulationError(f"the half-life must be a number of seconds > 0 (or off), not {half_life_s!r}")


def _check_recarve(plan: RecarvePlan) -> None:
    if plan.rule not in RECARVE_RULES:
        raise SimulationError(f"re-carving rule {plan.rule!r}? (known: {', '.join(RECARVE_RULES)})")
    if not (isinstance(plan.delay_s, int | float) and math.isfinite(plan.delay_s) and plan.delay_s >= 0):
        raise SimulationError(f"the re-carve delay must be a number of seconds >= 0, not {plan.delay_s!r}")
    if plan.wait_s is not None and not (isinstance(plan.wait_s, int | float) and plan.wait_s >= 0):
        raise SimulationError(f"the re-carve wait must be a number of seconds >= 0, not {plan.wait_s!r}")
    if plan.policy.smallest_trays < 1 or plan.policy.max_per_hour < 1:
        raise SimulationError(
            "re-carving needs a smallest partition of at least 1 tray and at least 1 per hour"
        )


def _check_fault_plan(plan: FaultPlan) -> None:
    if plan.mode not in FAULT_MODES:
        raise SimulationError(f"fault handling {plan.mode!r}? (known: {', '.join(FAULT_MODES)})")
    for name in ("detect_s", "check_s", "manual_delay_s"):
        value = getattr(plan, name)
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise SimulationError(f"the fault plan's {name} must be a number of seconds >= 0, not {value!r}")


def run(
    traces: Sequence[Trace],
    racks: int,
    layout: str = "1x18",
    policies: Sequence[str] = POLICIES,
    *,
    span_slowdown: float = DEFAULT_SPAN_SLOWDOWN,
    guarantees: Mapping[str, int] | None = None,
    preempted: str = RESUME,
    checkpoint_loss_s: float = DEFAULT_CHECKPOINT_LOSS_S,
    engine_options: Mapping | None = None,
    fallback_after_s: float | None = DEFAULT_FALLBACK_AFTER_S,
    progress=None,
    faults: FaultPlan | None = None,
    workers: int | None = None,
    projects: Mapping[str, str] | None = None,
    half_life_s: float | None = None,
    recarve: RecarvePlan | None = None,
    dedicated: Mapping[str, int] | None = None,
    mig: MigPlan | None = None,
    fabric: str | None = None,
    cross_unit_slowdown: float = DEFAULT_CROSS_UNIT_SLOWDOWN,
    fabric_blind: bool = False,
) -> tuple[dict, list[PolicyRun]]:
    """Replay under each policy; returns (results dict for results.json, the runs for the report).

    With `faults` (a plan whose mode is ignored), each policy is replayed twice more with the fault trace,
    automated and manual (FaultPlan), and its results get ``faults: {automated: {...}, manual: {...}}``.
    `workers` > 1 runs the replays in that many processes (the figures are the same).
    `projects` maps a trace to the department it is a project of (module docstring); each policy's results
    then have `projects` (per project: its department and figures, as `departments` has per trace).
    `mig` (MigPlan) puts trays in MIG mode; each policy's results then have `mig` (figures) and the config
    says which trays and how jobs became slice requests."""
    if faults is not None:
        _check_fault_plan(faults)
    if recarve is not None:
        _check_recarve(recarve)
    sizes = parse_layout(layout)
    _check_policies(policies)
    if fabric:
        parse_fabric(fabric, racks)  # a wrong fabric fails here, before any replay
    capacity = racks * RACK_TRAYS * GPUS_PER_TRAY
    mig_config = None
    if mig is not None:
        _check_mig(mig, faults, recarve)
        chosen = mig_tray_gpus(build_cluster(racks, sizes), mig)  # a layout that cannot: here
        capacity -= sum(chosen.values())  # what the engine may give whole (guarantees split it)
        mig_config = {
            "trays_per_rack": mig.trays_per_rack,
            # Concentrated: per rack, the MIG GPUs of each of its MIG trays ([] for a rack without).
            "rack_trays": [list(rack) for rack in mig.rack_trays],
            "trays": len(chosen),
            "gpus_per_tray": mig.gpus_per_tray,
            "layout": mig.layout.name,
            "instances": [
                f"{p.profile}@{p.start}:{p.size}"
                for p in SliceFleet.build(1, mig.layout, profile_table(mig.profiles)).instances[0]
            ],
            "rule": mig.rule,
            "conversion": "a job of 1 GPU becomes a slice request with probability slice_share, its profile "
            "drawn from slice_mix (both by a SHA-256 hash of department/job id); a slice job runs the "
            "trace's duration on the instance it takes",
            "slice_share": mig.conversion.share,
            "slice_mix": dict(mig.conversion.mix),
            # Jobs submitted in this window from the first submission run but are not scored (MigPlan).
            "history_s": mig.history_s,
            # How the guarantees split the whole GPUs (guarantee_hours).
            "guarantees": WHOLE_WORK if mig.whole_work_guarantees else ALL_WORK,
        }
    traces = fit_traces(traces, capacity)
    split = split_guarantees(capacity, guarantee_hours(traces, mig), guarantees)
    options = {
        "span_slowdown": span_slowdown,
        "guarantees": split,
        "preempted": preempted,
        "checkpoint_loss_s": checkpoint_loss_s,
        "engine_options": engine_options,
        "fallback_after_s": fallback_after_s,
        "projects": dict(projects or {}),
        "half_life_s": half_life_s,
        "recarve": recarve,
        "dedicated": dict(dedicated or {}),
        "mig": mig,
        "fabric": fabric,
        "cross_unit_slowdown": cross_unit_slowdown,
        "fabric_blind": fabric_blind,
    }
    _check_half_life(half_life_s)
    if dedicated:
        dedicated_owners(dedicated, racks, {t.department for t in traces})  # a wrong name fails here
    _engine_departments(split, options["projects"])  # a wrong mapping fails here, before any replay
    # Per policy its replay, then with faults handled each way: independent replays, run side by side in
    # `workers` processes (spawned: the replay is pure Python and shares nothing with the caller).
    modes = (None, *(FAULT_MODES if faults is not None else ()))
    tasks = [
        (traces, racks, sizes, policy, options, None if mode is None else replace(faults, mode=mode))
        for policy in policies
        for mode in modes
    ]
    started = time.perf_counter()
    if workers is not None and workers > 1 and len(tasks) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=context) as pool:
            done = list(pool.map(_simulate_task, tasks))
    else:
        done = [_simulate_task(task) for task in tasks]
    runs = []
    for index in range(len(policies)):
        own = done[index * len(modes) : (index + 1) * len(modes)]
        one = own[0]
        if faults is not None:
            one.metrics["faults"] = {mode: run.faults for mode, run in zip(modes[1:], own[1:], strict=True)}
        runs.append(one)
        if progress is not None:
            progress(one)
    config = {
        "racks": racks,
        "layout": layout,
        "partition_trays": list(sizes),
        "capacity_gpus": capacity,
        "span_slowdown": span_slowdown,
        "preempted_jobs": preempted,
        "checkpoint_loss_s": checkpoint_loss_s,
        "fallback_after_s": fallback_after_s,
        # The preemption bounds (engine options; 0: none): a borrower's minimum run time, an in-quota job's
        # grace before it may preempt.
        "min_runtime_s": dict((engine_options or {}).get("min_runtime_s") or {}),
        "preempt_after_s": float((engine_options or {}).get("preempt_after_s") or 0.0),
        "half_life_s": half_life_s,
        # Carving that follows demand (RecarvePlan; None: off): rackplane only, every rack under one policy.
        "recarve": None
        if recarve is None
        else {
            "policies": [RACKPLANE],
            "smallest_trays": recarve.policy.smallest_trays,
            "max_per_hour": recarve.policy.max_per_hour,
            "delay_s": recarve.delay_s,
            "rule": recarve.rule,
            "wait_s": recarve.wait_s,
        },
        "dedicated_racks": dict(dedicated or {}),  # department -> whole racks dedicated to it
        # The compute fabric (simulation_fabric; None: flat) and what crossing its units costs a job.
        "fabric": fabric,
        "cross_unit_slowdown": cross_unit_slowdown if fabric else None,
        "fabric_wait_s": float((engine_options or {}).get("fabric_wait_s", Options.fabric_wait_s)),
        "fabric_blind": fabric_blind if fabric else None,
        **({"mig": mig_config} if mig_config is not None else {}),
        **({"faults": _fault_config(faults, racks * RACK_TRAYS)} if faults is not None else {}),
        # What of the traces was left out or merged so that they replay (load_trace, fit_traces): by file.
        "trace_quirks": {trace.path: dict(trace.quirks) for trace in traces if trace.quirks},
        "projects": options["projects"],  # trace -> its department, for the traces that are projects
        **_workload(traces, capacity, split, options["projects"]),
        "wall_s": round(time.perf_counter() - started, 2),
    }
    return {"config": config, "policies": {one.policy: one.metrics for one in runs}}, runs


def _simulate_task(task: tuple) -> PolicyRun:
    traces, racks, sizes, policy, options, faults = task
    return simulate(traces, racks, sizes, policy, faults=faults, **options)


def _fault_config(plan: FaultPlan, trays: int) -> dict:
    """The results' description of the fault replay: the trace, its mapping and the two modes' delays."""
    mapped = map_faults(plan.trace, trays, 0.0)
    return {
        "trace": plan.trace.path,
        "fleet_nodes": plan.trace.fleet,
        "trace_faults": len(plan.trace.faults),
        "trace_quirks": dict(plan.trace.quirks),  # overlapping faults merged, events left out (load_faults)
        "cluster_faults": len(mapped),
        "trays_with_faults": len({f.tray for f in mapped}),
        "mapping": "each fleet node onto one compute tray: tray t replays the node in place t of the fleet "
        "(SHA-256 of its id modulo the fleet size); day 0 of the fault trace is the first job submission",
        "detect_s": plan.detect_s,
        "check_s": plan.check_s,
        "manual_delay_s": plan.manual_delay_s,
    }


def quirks(config: dict) -> list[str]:
    """What of the inputs was left out or merged so that the replay runs (results `config.trace_quirks`
    per job trace, `config.faults.trace_quirks`), one sentence each: "FILE: N QUIRK"."""
    lines = [
        f"{path}: {count:,} {quirk}"
        for path, found in (config.get("trace_quirks") or {}).items()
        for quirk, count in found.items()
    ]
    faults = config.get("faults") or {}
    lines += [
        f"{faults['trace']}: {count:,} {quirk}" for quirk, count in (faults.get("trace_quirks") or {}).items()
    ]
    return lines


def _check_policies(policies: Sequence[str]) -> None:
    for policy in policies:
        if policy not in POLICIES:
            raise SimulationError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")
    if len(set(policies)) != len(policies):
        raise SimulationError("a policy is listed twice")


def _workload(
    traces: Sequence[Trace], capacity: int, guarantees: Mapping[str, int], projects: Mapping[str, str]
) -> dict:
    """The results' description of what was replayed: jobs, offered load, each department's trace (a
    project's names its department: `project_of`)."""
    jobs = [job for trace in traces for job in trace.jobs]
    first = min(job.submitted_at for job in jobs)
    last = max(job.submitted_at for job in jobs)
    offered = sum(job.gpus * job.duration_s for job in jobs)
    return {
        "jobs": len(jobs),
        "offered_load": round(offered / (capacity * (last - first)), 4) if last > first else None,
        "departments": [
            {
                "name": trace.department,
                "trace": trace.path,
                "jobs": len(trace.jobs),
                "gpu_hours": round(trace.gpu_hours, 1),
                "guaranteed_gpus": guarantees[trace.department],
                **({"project_of": projects[trace.department]} if trace.department in projects else {}),
            }
            for trace in traces
        ],
    }
