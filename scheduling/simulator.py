"""Trace replay in virtual time through the portal's own admission and placement code.

Pure Python (no Django import). `manage.py simulate` is the command line; `scheduling.report` draws the
results. Every scheduling decision is made by `scheduling.engine.scheduler.schedule` (fair-share admission,
reclaim by preemption, reservation and backfill) and `scheduling.engine.placement.place` on a
`scheduling.engine.cluster.Cluster`: the same functions, with the same inputs, as a portal pass. This module
only keeps the clock, the queue and the books.

Assumptions, each a choice that any figure rests on:

* **Department = trace file.** Each trace file is one department (named after the file's stem), weight 1,
  priority 0, no limit. Guarantees split the cluster's GPUs in proportion to each file's GPU-hours
  (largest remainder, ties by name) unless given per department.
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
wall-clock time spent in scheduling passes.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from core.hardware import GPUS_PER_TRAY
from scheduling.engine.cluster import Cluster
from scheduling.engine.placement import PARTITION, POLICIES, RACKPLANE
from scheduling.engine.scheduler import Department, PendingJob, RunningJob, schedule
from scheduling.simulation_inputs import (
    RACK_TRAYS,
    SimulationError,
    Trace,
    TraceJob,
    build_cluster,
    fallback,
    load_trace,
    load_traces,
    locality,
    parse_duration,
    parse_guarantees,
    parse_layout,
    round_gpus,
    split_guarantees,
)

__all__ = [
    "DEFAULT_CHECKPOINT_LOSS_S",
    "DEFAULT_FALLBACK_AFTER_S",
    "DEFAULT_SPAN_SLOWDOWN",
    "METRICS",
    "PREEMPTION_MODES",
    "RESTART",
    "RESUME",
    "SIZE_CLASSES",
    "PolicyRun",
    "SimulationError",
    "Trace",
    "TraceJob",
    "build_cluster",
    "fallback",
    "load_trace",
    "load_traces",
    "locality",
    "parse_duration",
    "parse_guarantees",
    "parse_layout",
    "round_gpus",
    "run",
    "simulate",
    "split_guarantees",
]

DEFAULT_SPAN_SLOWDOWN = 1.5
DEFAULT_CHECKPOINT_LOSS_S = 600.0
DEFAULT_FALLBACK_AFTER_S = 3600.0
RESUME, RESTART = "resume", "restart"
PREEMPTION_MODES = (RESUME, RESTART)
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


def _queue_order(job: PendingJob) -> tuple[float, int]:
    return job.submitted_at, job.id


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
        self.departments = [Department(name, guaranteed) for name, guaranteed in guarantees.items()]
        self.guaranteed = dict(guarantees)
        self.topology = {job.id: locality(job.gpus, cluster) for job in jobs}
        self.fallback_after_s = fallback_after_s
        self.fallback = {
            job.id: wider
            for job in jobs
            if fallback_after_s is not None and (wider := fallback(job.gpus, cluster)) is not None
        }
        # What a waiting job's time limit is multiplied by (see the module's "exact time limits").
        self.limit_factor = {
            job.id: (
                span_slowdown
                if job.trays > 1
                and (policy != RACKPLANE or self.topology[job.id] != PARTITION or job.id in self.fallback)
                else 1.0
            )
            for job in jobs
        }
        self.remaining = {job.id: job.duration_s for job in jobs}  # work left, in trace seconds
        self.pending: dict[int, PendingJob] = {}
        self.pending_since: dict[int, float] = {}
        self.running: dict[int, RunningJob] = {}
        self.factor: dict[int, float] = {}  # running job -> its slowdown where it is
        self.epoch = dict.fromkeys(self.by_id, 0)  # bumped on preemption: its completion event is void
        self.events: list[tuple[float, int, int]] = []  # (end, job id, epoch)
        self.wakes: list[tuple[float, int]] = []  # (when, job): a waiting job's fallback bound passes
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
        self.decisions = 0
        self.passes = 0
        self.pass_wall = 0.0
        first = self.jobs[0].submitted_at
        last = self.jobs[-1].submitted_at
        self.window = (first, last)
        self.window_busy = 0.0
        self.bin_s = _bin_width(last - first)
        self.bin_start = first
        self.bins: dict[str, list[float]] = {name: [] for name in self.names}
        self.busy_bins: list[float] = []

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
            gap = min(self.guaranteed[name], self.demand[name]) - self.held[name]
            if gap > 0:
                self.gap[name] += gap * dt
        for label, gpus in self.waiting_in_quota_by_size.items():
            if gpus:
                self.shortfall_by_size[label] += gpus * dt
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
        self.pending[job.id] = PendingJob(
            job.id,
            job.department,
            job.gpus,
            self.topology[job.id],
            "train",
            job.submitted_at,
            self.remaining[job.id] * self.limit_factor[job.id],
            *((self.fallback[job.id], self.fallback_after_s) if job.id in self.fallback else ()),
        )
        self.pending_since[job.id] = now
        if job.id in self.fallback and job.submitted_at + self.fallback_after_s > now:
            heapq.heappush(self.wakes, (job.submitted_at + self.fallback_after_s, job.id))

    def _submit(self, job: TraceJob, now: float) -> None:
        self.demand[job.department] += job.gpus
        self._enqueue(job, now)

    def _finish(self, job_id: int, now: float) -> None:
        job = self.by_id[job_id]
        self.cluster.release(job_id)
        del self.running[job_id]
        self.held[job.department] -= job.gpus
        self.demand[job.department] -= job.gpus
        self.allocated -= job.gpus
        self.end[job_id] = now

    def _start(self, start, now: float) -> None:
        job = self.by_id[start.job_id]
        del self.pending[job.id]
        cluster = self.cluster
        partitions = {cluster.tray_part[t] for t, _ in start.placement}
        racks = {cluster.tray_rack[t] for t, _ in start.placement}
        factor = self.slowdown if len(partitions) > 1 else 1.0
        if len(partitions) > 1:
            self.one_partition[job.id] = False
        if len(racks) > 1:
            self.cross_rack[job.id] = True
        run_s = self.remaining[job.id] * factor
        self.span_extra_gpu_s += (factor - 1.0) * self.remaining[job.id] * job.gpus
        self.factor[job.id] = factor
        self.running[job.id] = RunningJob(
            job.id, job.department, job.gpus, now, now + run_s, start.over_quota, "train"
        )
        heapq.heappush(self.events, (now + run_s, job.id, self.epoch[job.id]))
        self.wait[job.id] += now - self.pending_since.pop(job.id)
        self.held[job.department] += job.gpus
        self.allocated += job.gpus

    def _preempt(self, job_id: int, now: float) -> None:
        job = self.by_id[job_id]
        victim = self.running.pop(job_id)  # the pass already released its GPUs
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
        # Slowdown not yet served is not spent: take it back from the books.
        self.span_extra_gpu_s -= (factor - 1.0) * (victim.expected_end - now) / factor * job.gpus
        self.held[job.department] -= job.gpus
        self.allocated -= job.gpus
        self.preemptions += 1
        self.preempted_jobs.add(job_id)
        self._enqueue(job, now)

    def _pass(self, now: float) -> bool:
        """One scheduling pass; True when it preempted jobs (they wait again: worth another pass)."""
        started = time.perf_counter()
        result = schedule(
            self.cluster,
            self.departments,
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
        for start in result.started:
            self._start(start, now)
        for victim in result.preempted:
            self._preempt(victim, now)
        # The standing the pass gave every running job, as the portal stores it for the next pass.
        running = self.running
        for job_id, over in result.over_quota.items():
            job = running.get(job_id)
            if job is not None and job.over_quota != over:
                running[job_id] = replace(job, over_quota=over)
        self._count_in_quota()
        return bool(result.preempted)

    def _count_in_quota(self) -> None:
        """GPUs of waiting jobs that are within their department's guarantee, per department.

        In queue order (submission time), a waiting job counts when its GPUs fit in what is left of the
        guarantee after what the department holds and the counted jobs before it: the jobs admission would
        call in quota. A job larger than what is left of the guarantee is over quota, not a shortfall.
        """
        room = {name: self.guaranteed[name] - self.held[name] for name in self.names}
        counted = dict.fromkeys(self.names, 0)
        by_size = dict.fromkeys(self.shortfall_by_size, 0)
        if any(left > 0 for left in room.values()):
            for job in sorted(self.pending.values(), key=_queue_order):
                if job.gpus <= room[job.department]:
                    room[job.department] -= job.gpus
                    counted[job.department] += job.gpus
                    by_size[self.size[job.id]] += job.gpus
        self.waiting_in_quota = counted
        self.waiting_in_quota_by_size = by_size

    def run(self) -> None:
        jobs, events, wakes = self.jobs, self.events, self.wakes
        n, i = len(jobs), 0
        now = jobs[0].submitted_at
        while i < n or events or wakes:
            while events and events[0][2] != self.epoch[events[0][1]]:
                heapq.heappop(events)  # the job was preempted: this end never comes
            next_submit = jobs[i].submitted_at if i < n else math.inf
            next_end = events[0][0] if events else math.inf
            while wakes and wakes[0][1] not in self.pending:
                heapq.heappop(wakes)  # the job started before its bound
            next_wake = wakes[0][0] if wakes else math.inf
            t = min(next_submit, next_end, next_wake)
            if t == math.inf:
                break
            self._advance(now, t)
            now = t
            while wakes and wakes[0][0] <= now:
                heapq.heappop(wakes)  # a waiting job's fallback bound: it may start wider now
            while events and events[0][0] <= now:
                _, job_id, epoch = heapq.heappop(events)
                if epoch == self.epoch[job_id]:
                    self._finish(job_id, now)
            while i < n and jobs[i].submitted_at <= now:
                self._submit(jobs[i], now)
                i += 1
            # Preempted jobs are back in the queue: pass again at once. Only in-quota jobs preempt, and
            # each preemption starts one, so this ends.
            while self.pending and self._pass(now):
                pass
        if self.pending:  # nothing runs and nothing will come: the rest can never start
            raise SimulationError(
                f"{len(self.pending)} jobs can never start on this cluster under {self.policy} "
                f"(first: job {self.by_id[next(iter(self.pending))].name})"
            )

    # --- results -------------------------------------------------------------------------------

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
        fitting = [j for j in multi if j.trays <= self.cluster.max_partition_trays]

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
            # Beyond the list: what the figures above rest on.
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
            "scheduling_wall_s": round(self.pass_wall, 3),
            "departments": departments,
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
) -> PolicyRun:
    """Replay `traces` (one department each) on a fresh cluster under one placement policy.

    `guarantees` fixes some departments' guaranteed GPUs; the others share the rest by GPU-hours.
    `cluster`, when given, is the cluster to replay on instead of `racks` racks carved by `layout` (the
    portal's own racks and partitions, for a what-if: scheduling.whatif); it must have nothing allocated.
    `engine_options` go to every `schedule` call (its keyword arguments, e.g. ``max_reservations``): for
    measuring the engine's rules against each other; the default is what the portal runs.
    """
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
    if cluster is None:
        sizes = parse_layout(layout) if isinstance(layout, str) else tuple(layout)
        cluster = build_cluster(racks, sizes)
    guarantees = split_guarantees(cluster.capacity, {t.department: t.gpu_hours for t in traces}, guarantees)
    jobs = [job for trace in traces for job in trace.jobs]
    if not jobs:
        raise SimulationError("no jobs to replay")
    too_big = [job for job in jobs if job.gpus > cluster.capacity]
    if too_big:
        raise SimulationError(
            f"{len(too_big)} jobs need more GPUs than the cluster's {cluster.capacity} (the largest "
            f"needs {max(j.gpus for j in too_big)}): give more racks"
        )
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
    )
    replay.run()
    metrics = replay.metrics()
    metrics["wall_s"] = round(time.perf_counter() - started, 2)
    return PolicyRun(
        policy=policy,
        metrics=metrics,
        departments=list(guarantees),
        bin_s=replay.bin_s,
        bin_start=replay.bin_start,
        busy_gpu_s=replay.busy_bins,
        department_gpu_s=replay.bins,
        waits=[replay.wait[j.id] for j in replay.jobs],
        capacity=cluster.capacity,
    )


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
) -> tuple[dict, list[PolicyRun]]:
    """Replay under each policy; returns (results dict for results.json, the runs for the report)."""
    sizes = parse_layout(layout)
    _check_policies(policies)
    capacity = racks * RACK_TRAYS * GPUS_PER_TRAY
    split = split_guarantees(capacity, {t.department: t.gpu_hours for t in traces}, guarantees)
    runs = []
    started = time.perf_counter()
    for policy in policies:
        one = simulate(
            traces,
            racks,
            sizes,
            policy,
            span_slowdown=span_slowdown,
            guarantees=split,
            preempted=preempted,
            checkpoint_loss_s=checkpoint_loss_s,
            engine_options=engine_options,
            fallback_after_s=fallback_after_s,
        )
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
        **_workload(traces, capacity, split),
        "wall_s": round(time.perf_counter() - started, 2),
    }
    return {"config": config, "policies": {one.policy: one.metrics for one in runs}}, runs


def _check_policies(policies: Sequence[str]) -> None:
    for policy in policies:
        if policy not in POLICIES:
            raise SimulationError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")
    if len(set(policies)) != len(policies):
        raise SimulationError("a policy is listed twice")


def _workload(traces: Sequence[Trace], capacity: int, guarantees: Mapping[str, int]) -> dict:
    """The results' description of what was replayed: jobs, offered load, each department's trace."""
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
            }
            for trace in traces
        ],
    }
