"""What-if on the cluster's own history: the portal's recent jobs replayed under other NVLink layouts.

Pure Python (no Django import). `scheduling.whatif_runs` reads the job rows and the trays from the database
and runs the replays (Celery tasks, one per layout); `manage.py simulate --from-history DAYS` does the same
in one process. This module turns job rows into the simulator's input (`history`), lays a candidate layout
over the cluster's trays (`carve`), replays with the simulator (`replay`: `scheduling.simulator.simulate`,
the same admission and placement code as a pass) and compares the figures (`comparison`).

How a job row becomes a replayed job (every figure of a what-if rests on these):

* **Window.** The jobs submitted in the last N days, and the ones submitted before that still running or
  waiting when the window opened: those enter the replay at its start, with the run time they had left.
* **Run time.** A finished job (completed, failed or cancelled) runs for the time it ran: end minus start,
  plus the time it ran before each preemption. A job cancelled or failed before it ever started ran for
  nothing and is left out. A running job runs for its time limit (the longest it may run), or for the time
  it has run so far when that is longer. A waiting job runs for its time limit.
* **Size and locality.** As in every replay (`scheduling.simulator`): 1-4 GPUs on one tray, more in whole
  trays; a job asks for one NVLink partition when it fits the layout's largest, else one rack, else any.
  The job's own topology and priority class are not replayed: every job is preemptible training work, so
  the layouts are compared on the same demand.
* **Departments.** A department's guarantee is the one it has now (scaled down in proportion when a layout
  has fewer GPUs than the guarantees add up to); weights, limits and priorities are the simulator's
  (weight 1, no limit, priority 0).
* **Projects.** A job submitted to a project is replayed in that project (the simulator's `projects`:
  hierarchical fair share, each project with the guarantee it has now). In a department whose projects
  have jobs in the window, its jobs without a project are one more project, ``<slug>/(no project)``,
  guaranteed what the department's projects leave of its guarantee (the engine's own leaf for them). A
  project with no job in the window is not replayed: nothing asks for its guarantee.
* **Trays.** A layout has every tray in one of its partitions, each with 4 GPUs: the comparison is of the
  layouts, not of today's health. Trays in no partition are left out, as the scheduler leaves them.
* **Bounds.** At most `MAX_DAYS` days, and the most recent `MAX_JOBS` jobs of them (the notes say when).
* **Slice jobs.** A job that asked for MIG slices (its profile and count) is replayed as slice requests of
  that profile, one per slice it asked for, each running the job's run time (a job of 2 slices is 2 slice
  requests): no conversion rule decides which jobs ask for slices, the site's jobs did. With MIG trays in
  the layout (`mig_plan`: the trays with a MIG layout, each carved by its own) they take free instances of
  those trays (the simulator's MIG model, docs/simulator.md "Fractional GPUs"); in a layout without MIG
  trays, and in a partition what-if, each runs as a job of 1 whole GPU. Whole-GPU jobs stay whole.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from core.hardware import GPUS_PER_TRAY
from core.sentences import gettext_noop, plural, say
from scheduling.engine.cluster import Cluster, TraySpec
from scheduling.engine.placement import RACKPLANE
from scheduling.simulation_inputs import SimulationError, Trace, TraceJob, round_gpus

DEFAULT_DAYS = 7
MAX_DAYS = 30
MAX_JOBS = 20_000
# Job states, as scheduling.choices.JobState stores them.
PENDING, STARTING, RUNNING = "pending", "starting", "running"
COMPLETED, FAILED, CANCELLED = "completed", "failed", "cancelled"
FINISHED = (COMPLETED, FAILED, CANCELLED)
HISTORY_PATH = "the portal's job history"  # a replayed Trace's `path`: these jobs come from no file


class WhatIfError(ValueError):
    """A what-if that cannot run: the message says why in words an admin can act on."""


# --- job rows -> the replay's input ----------------------------------------------------------------------


@dataclass(frozen=True)
class HistoryJob:
    """One job row as the what-if reads it; times are seconds since the epoch."""

    id: int
    name: str
    department: str  # slug
    gpus: int
    state: str
    submitted_at: float
    started_at: float | None = None  # of its last run (a preemption starts it again)
    finished_at: float | None = None
    time_limit_s: float = 3600.0
    earlier_run_s: float = 0.0  # what it ran before its preemptions
    project: str = ""  # its project's slug ("" for none)
    mig_profile: str = ""  # the MIG profile it asked for ("" for whole GPUs)
    mig_slices: int = 0  # how many slices of it


@dataclass
class History:
    """The jobs a what-if replays, and what the admin must know about how they were chosen."""

    window_start: float
    window_end: float
    jobs: list[TraceJob]  # in submission order
    guarantees: dict[str, int]  # the replayed departments' (and projects') guaranteed GPUs, by trace
    notes: list[str] = field(default_factory=list)
    projects: dict[str, str] = field(default_factory=dict)  # trace -> its department, for projects

    @property
    def departments(self) -> list[str]:
        return sorted({job.department for job in self.jobs})

    def traces(self) -> list[Trace]:
        """One trace per department, as the simulator takes them."""
        by_department: dict[str, list[TraceJob]] = {}
        for job in self.jobs:
            by_department.setdefault(job.department, []).append(job)
        return [Trace(name, HISTORY_PATH, tuple(jobs)) for name, jobs in sorted(by_department.items())]

    def to_json(self) -> dict:
        """A compact form to keep between tasks (`from_json` reads it back)."""
        return {
            "window": [self.window_start, self.window_end],
            "guarantees": self.guarantees,
            "notes": self.notes,
            "projects": self.projects,
            "jobs": [
                [
                    j.id,
                    j.name,
                    j.department,
                    j.submitted_at,
                    j.duration_s,
                    j.trace_gpus,
                    *([j.slice] if j.slice else []),
                ]
                for j in self.jobs
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping) -> History:
        start, end = data["window"]
        jobs = [
            TraceJob(job_id, name, department, submitted, duration, round_gpus(gpus), gpus, *profile)
            for job_id, name, department, submitted, duration, gpus, *profile in data["jobs"]
        ]
        projects = dict(data.get("projects", {}))  # absent from what-ifs saved before projects
        return cls(start, end, jobs, dict(data["guarantees"]), list(data["notes"]), projects)


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _count(n: int, one: str, many: str) -> str:
    """`n` in the template for its number ("1 job", "1,204 jobs")."""
    return say(plural(n, one, many), count=f"{n:,}")


# The notes, the layouts' descriptions and the refusals of a what-if: templates (core.sentences), stored in
# English with the run, shown in the viewer's language by the wizard (core.sentences_i18n).
WINDOW_CAPPED = gettext_noop(
    "The window holds %(total)s jobs: the replay takes the most recent %(kept)s (submitted since %(since)s) "
    "so that it stays quick. Choose fewer days to replay a whole window."
)
CARRIED_ONE = gettext_noop(
    "%(count)s job submitted before the window was still waiting or running when it opened: they enter the "
    "replay at its start with the run time they had left."
)
CARRIED_MANY = gettext_noop(
    "%(count)s jobs submitted before the window were still waiting or running when it opened: they enter the "
    "replay at its start with the run time they had left."
)
NEVER_RAN_ONE = gettext_noop(
    "%(count)s job cancelled or failed before starting: left out, as they never held GPUs."
)
NEVER_RAN_MANY = gettext_noop(
    "%(count)s jobs cancelled or failed before starting: left out, as they never held GPUs."
)
UNFINISHED = gettext_noop(
    "Jobs not finished yet run for their time limit in the replay (a running one for the time it has run so "
    "far when that is longer): %(running)s, %(waiting)s."
)
RUNNING_ONE = gettext_noop("%(count)s running job")
RUNNING_MANY = gettext_noop("%(count)s running jobs")
WAITING_ONE = gettext_noop("%(count)s waiting job")
WAITING_MANY = gettext_noop("%(count)s waiting jobs")
LAYOUT = gettext_noop("%(rack_count)s, %(partition_count)s, %(gpus)s GPUs")
RACK_ONE = gettext_noop("%(count)s rack")
RACK_MANY = gettext_noop("%(count)s racks")
PARTITION_ONE = gettext_noop("%(count)s partition")
PARTITION_MANY = gettext_noop("%(count)s partitions")
SCALED_DOWN = gettext_noop(
    "The replayed departments' guarantees add up to %(total)s GPUs, more than this layout's %(capacity)s: "
    "they are scaled down in proportion."
)
NO_SUCH_RACK = gettext_noop("No rack named %(names)s in the inventory.")
NO_SUCH_SLOT = gettext_noop("%(rack)s has no tray in slot %(slot_list)s.")
NO_JOBS = gettext_noop("There are no jobs in the window to replay.")
NO_TRAYS = gettext_noop("The layout has no tray in any NVLink partition: nothing could run on it.")
TOO_BIG_ONE = gettext_noop(
    "This layout has %(capacity)s GPUs in its partitions, and %(count)s job of the history needs more (the "
    "largest %(largest)s): it could never run it."
)
TOO_BIG_MANY = gettext_noop(
    "This layout has %(capacity)s GPUs in its partitions, and %(count)s jobs of the history need more (the "
    "largest %(largest)s): it could never run them."
)
NOT_FINISHED = gettext_noop("The replay could not finish on this layout: %(error)s.")
SLICE_JOBS_ONE = gettext_noop(
    "%(count)s job asked for MIG slices: replayed as slice requests of its profile, one per slice."
)
SLICE_JOBS_MANY = gettext_noop(
    "%(count)s jobs asked for MIG slices: replayed as slice requests of their profile, one per slice."
)
MIG_TRAY_LEFT_OUT = gettext_noop(
    "%(trays)s: in no NVLink partition of this layout, so left out with its MIG slices."
)


def run_time(job: HistoryJob, window_end: float) -> float | None:
    """How long the job holds its GPUs in the replay (see the module's "run time"); None: it never ran."""
    if job.state in FINISHED:
        if job.started_at is None or job.finished_at is None:
            return job.earlier_run_s or None
        return job.earlier_run_s + max(0.0, job.finished_at - job.started_at)
    if job.state in (STARTING, RUNNING) and job.started_at is not None:
        return job.earlier_run_s + max(job.time_limit_s, window_end - job.started_at)
    return job.time_limit_s  # waiting (or placed, not started yet): its limit


def history(
    rows: Sequence[HistoryJob],
    window_start: float,
    window_end: float,
    guarantees: Mapping[str, int],
    *,
    max_jobs: int = MAX_JOBS,
    older: int = 0,
    projects: Mapping[str, int] | None = None,
) -> History:
    """The replay's input from the job rows that touch the window (submitted before its end, and not
    finished before its start); `guarantees`: every department's guaranteed GPUs, by slug. `older`: rows of
    the window the caller did not read (the oldest, past `max_jobs`): the notes count them. `projects`:
    every project's guaranteed GPUs, by ``<department slug>/<project slug>`` (module docstring, Projects)."""
    projects = dict(projects or {})
    jobs: list[TraceJob] = []
    never_ran = carried = waiting = running = sliced = 0
    extra_id = max((row.id for row in rows), default=0)  # ids for the second and later slices of a job
    for row in rows:
        if row.submitted_at > window_end:
            continue
        if row.state in FINISHED and row.finished_at is not None and row.finished_at < window_start:
            continue
        run = run_time(row, window_end)
        if not run:
            never_ran += 1
            continue
        submitted = row.submitted_at
        if submitted < window_start:
            # It was there when the window opened: it enters at the start with what it had left to run.
            carried += 1
            if row.started_at is not None and row.started_at < window_start:
                run -= window_start - row.started_at
            submitted = window_start
        if run <= 0:
            continue
        waiting += row.state == PENDING
        running += row.state in (STARTING, RUNNING)
        trace = _trace_of(row, projects)
        if row.mig_profile and row.mig_slices > 0:  # one slice request per slice (module docstring)
            sliced += 1
            for k in range(row.mig_slices):
                extra_id += k > 0
                job_id = row.id if k == 0 else extra_id
                jobs.append(
                    TraceJob(job_id, row.name, trace, submitted, max(1.0, run), 1, 1, row.mig_profile)
                )
            continue
        jobs.append(
            TraceJob(
                row.id,
                row.name,
                trace,
                submitted,
                max(1.0, run),
                round_gpus(row.gpus),
                row.gpus,
            )
        )
    jobs.sort(key=lambda job: (job.submitted_at, job.id))
    notes = []
    if len(jobs) > max_jobs or (older and jobs):
        total = len(jobs) + older
        jobs = jobs[-max_jobs:]
        window_start = jobs[0].submitted_at
        notes.append(say(WINDOW_CAPPED, total=f"{total:,}", kept=f"{len(jobs):,}", since=_when(window_start)))
    if carried:
        notes.append(_count(carried, CARRIED_ONE, CARRIED_MANY))
    if never_ran:
        notes.append(_count(never_ran, NEVER_RAN_ONE, NEVER_RAN_MANY))
    if sliced:
        notes.append(_count(sliced, SLICE_JOBS_ONE, SLICE_JOBS_MANY))
    if waiting or running:
        notes.append(
            say(
                UNFINISHED,
                running=_count(running, RUNNING_ONE, RUNNING_MANY),
                waiting=_count(waiting, WAITING_ONE, WAITING_MANY),
            )
        )
    jobs, replayed, parents = _project_traces(jobs, guarantees, projects)
    return History(window_start, window_end, jobs, replayed, notes, parents)


NO_PROJECT = "(no project)"  # a department's work without a project, beside its projects' (tenancy.quota)


def _trace_of(row: HistoryJob, projects: Mapping[str, int]) -> str:
    """The trace a job row is replayed in: its project's (``<slug>/<project>``) or its department's."""
    key = f"{row.department}/{row.project}"
    return key if row.project and key in projects else row.department


def _project_traces(
    jobs: list[TraceJob], guarantees: Mapping[str, int], projects: Mapping[str, int]
) -> tuple[list[TraceJob], dict[str, int], dict[str, str]]:
    """The jobs with project-less work of departments with projects moved to ``<slug>/(no project)``, the
    guarantee of every trace, and the simulator's `projects` (trace -> department)."""
    with_projects = {job.department.split("/")[0] for job in jobs if "/" in job.department}
    moved = [
        replace(job, department=f"{job.department}/{NO_PROJECT}") if job.department in with_projects else job
        for job in jobs
    ]
    replayed: dict[str, int] = {}
    parents: dict[str, str] = {}
    for name in sorted({job.department for job in moved}):
        department, _, project = name.partition("/")
        if not project:
            replayed[name] = int(guarantees.get(name, 0))
            continue
        parents[name] = department
        if project == NO_PROJECT:
            own = sum(gpus for key, gpus in projects.items() if key.split("/")[0] == department)
            replayed[name] = max(0, int(guarantees.get(department, 0)) - own)
        else:
            replayed[name] = int(projects[name])
    return moved, replayed, parents


# --- layouts ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tray:
    """A compute tray of the cluster, where a layout puts it."""

    hostname: str
    rack: str
    slot: int
    partition: str | None  # None: in no partition (the scheduler leaves it out)
    owner: str | None = None  # the department (slug) its partition is dedicated to


@dataclass(frozen=True)
class Carving:
    """One rack's partitions in a candidate layout: (name, slots, department slug or None) each."""

    rack: str
    partitions: tuple[tuple[str, tuple[int, ...], str | None], ...]

    def to_json(self) -> dict:
        return {"rack": self.rack, "partitions": [[n, list(s), d] for n, s, d in self.partitions]}

    @classmethod
    def from_json(cls, data: Mapping) -> Carving:
        return cls(data["rack"], tuple((n, tuple(s), d or None) for n, s, d in data["partitions"]))


def carve(trays: Sequence[Tray], carvings: Sequence[Carving] = ()) -> list[TraySpec]:
    """The engine's trays for the cluster with some racks carved anew: the other racks keep the partitions
    they have; a carved rack's trays take its planned partitions, in their order, and trays in none of them
    are left out. Racks stay in the given order (the portal's pass order)."""
    carved = {c.rack: c for c in carvings}
    unknown = sorted(set(carved) - {t.rack for t in trays})
    if unknown:
        raise WhatIfError(say(NO_SUCH_RACK, names=", ".join(unknown)))
    by_rack: dict[str, list[Tray]] = {}
    for tray in trays:
        by_rack.setdefault(tray.rack, []).append(tray)
    specs: list[TraySpec] = []
    for rack, members in by_rack.items():
        carving = carved.get(rack)
        if carving is None:
            specs += [
                TraySpec(t.hostname, t.rack, t.partition, GPUS_PER_TRAY, t.owner)
                for t in members
                if t.partition
            ]
            continue
        host = {t.slot: t.hostname for t in members}
        for name, slots, owner in carving.partitions:
            missing = [slot for slot in slots if slot not in host]
            if missing:
                raise WhatIfError(say(NO_SUCH_SLOT, rack=rack, slot_list=", ".join(map(str, missing))))
            specs += [TraySpec(host[slot], rack, name, GPUS_PER_TRAY, owner) for slot in sorted(slots)]
    return specs


def describe(specs: Sequence[TraySpec]) -> str:
    """'4 racks, 6 partitions, 288 GPUs' for a layout."""
    racks = {s.rack for s in specs}
    partitions = {(s.rack, s.partition) for s in specs}
    gpus = sum(s.capacity for s in specs)
    return say(
        LAYOUT,
        rack_count=_count(len(racks), RACK_ONE, RACK_MANY),
        partition_count=_count(len(partitions), PARTITION_ONE, PARTITION_MANY),
        gpus=f"{gpus:,}",
    )


def fit_guarantees(guarantees: Mapping[str, int], capacity: int) -> tuple[dict[str, int], str | None]:
    """The guarantees, scaled down in proportion (largest remainder) when they add up to more than the
    layout's GPUs, with a note saying so."""
    total = sum(guarantees.values())
    if total <= capacity:
        return dict(guarantees), None
    shares = {name: capacity * gpus / total for name, gpus in guarantees.items()}
    fitted = {name: math.floor(share) for name, share in shares.items()}
    for name in sorted(shares, key=lambda n: (-(shares[n] - fitted[n]), n))[
        : capacity - sum(fitted.values())
    ]:
        fitted[name] += 1
    return fitted, say(SCALED_DOWN, total=f"{total:,}", capacity=f"{capacity:,}")


# --- the replay and the comparison ------------------------------------------------------------------------

# (key in the simulator's figures, label, unit, lower is better); the labels are templates (core.sentences)
# the wizard shows in the viewer's language.
FIGURES = (
    ("avg_wait_s", gettext_noop("Average wait"), "h", True),
    ("p95_wait_s", gettext_noop("p95 wait"), "h", True),
    ("avg_jct_s", gettext_noop("Average JCT"), "h", True),
    ("multi_tray_in_one_partition", gettext_noop("Multi-tray jobs in one partition"), "%", False),
    ("guarantee_shortfall_gpu_s", gettext_noop("Guarantee shortfall"), "GPU-h", True),
)
KEPT = (
    "jobs",
    "avg_wait_s",
    "p95_wait_s",
    "avg_jct_s",
    "multi_tray_jobs",
    "multi_tray_in_one_partition",
    "guarantee_shortfall_gpu_s",
    "gpu_utilization",
    "cross_rack_jobs",
    "preemptions",
    "spanning_jobs",
    "wall_s",
)


# A MIG what-if's figures (`replay` with `mig`): the small jobs' waits, the slices and the multi-tray work.
MIG_FIGURES = (
    ("small_avg_wait_s", gettext_noop("Average wait, jobs of 1 GPU or smaller"), "h", True),
    ("small_p95_wait_s", gettext_noop("p95 wait, jobs of 1 GPU or smaller"), "h", True),
    ("slice_utilization", gettext_noop("Slice utilisation"), "%", False),
    ("avg_stranded_slices", gettext_noop("Stranded slices (average)"), "slices", True),
    ("multi_tray_avg_wait_s", gettext_noop("Average wait, multi-tray jobs"), "h", True),
    ("multi_tray_in_one_partition", gettext_noop("Multi-tray jobs in one partition"), "%", False),
)


def profiles_json(profiles: Sequence) -> list:
    """SliceProfiles (scheduling.engine.mig) as a run keeps them (`mig_plan` reads them back)."""
    return [
        [
            p.name,
            p.compute_slices,
            p.memory_slices,
            p.memory_mib,
            [list(x) for x in p.placements],
            p.max_count,
            p.profile_id,
        ]
        for p in profiles
    ]


def mig_plan(data: Mapping, hosts: set[str], jobs: Sequence[TraceJob] = ()):
    """The simulator's MigPlan for a MIG what-if's layout: `data` is ``{"profiles": profiles_json(...),
    "trays": [[hostname, layout name, {profile: count}], ...]}``, the trays with a MIG layout in it (each
    carved by its own); trays not among `hosts` (in no partition of the layout) are left out, with a note.
    No conversion: only the jobs that asked for slices ask for them (module docstring, Slice jobs); their
    profiles, counted over `jobs`, are the expected mix the stranded slices and fragmentation are measured
    by (every profile alike when no job asked for a slice)."""
    from scheduling.engine.mig import MigLayout, MigLayoutError, SliceProfile
    from scheduling.simulator import MigPlan, SliceConversion

    try:
        profiles = tuple(
            SliceProfile(name, g, memory, mib, tuple(tuple(x) for x in placements), most, profile_id)
            for name, g, memory, mib, placements, most, profile_id in data["profiles"]
        )
    except MigLayoutError as error:
        raise WhatIfError(say(NOT_FINISHED, error=error)) from error
    trays = [
        (host, MigLayout(name, tuple(sorted(devices.items()))))
        for host, name, devices in data["trays"]
        if devices
    ]
    notes = []
    left_out = sorted(host for host, _ in trays if host not in hosts)
    if left_out:
        notes.append(say(MIG_TRAY_LEFT_OUT, trays=", ".join(left_out)))
    asked = Counter(job.slice for job in jobs if job.slice)
    mix = tuple(sorted(asked.items())) if asked else tuple((p.name, 1.0) for p in profiles)
    plan = MigPlan(
        trays_per_rack=0,
        conversion=SliceConversion(share=0.0, mix=tuple((name, float(w)) for name, w in mix)),
        profiles=profiles,
        trays=tuple((host, layout) for host, layout in trays if host in hosts),
    )
    return plan, notes


def replay(history: History, specs: Sequence[TraySpec], mig: Mapping | None = None, **options) -> dict:
    """Replay the history on one layout under the rackplane policy: the figures the comparison shows, the
    layout's description and its notes. `mig` (`mig_plan`'s data) puts the trays it names in MIG mode and
    adds the MIG_FIGURES. `options` go to `scheduling.simulator.simulate` (span_slowdown, preempted, ...).
    WhatIfError when the layout cannot run the history."""
    from scheduling import simulator  # the replay loop; imported here so the conversion stays light

    if not history.jobs:
        raise WhatIfError(NO_JOBS)
    if not specs:
        raise WhatIfError(NO_TRAYS)
    hosts = {spec.hostname for spec in specs}
    plan, mig_notes = mig_plan(mig, hosts, history.jobs) if mig is not None else (None, [])
    # The MIG trays' GPUs are not given whole: the guarantees split the others.
    capacity = sum(spec.capacity for spec in specs) - (GPUS_PER_TRAY * len(plan.trays) if plan else 0)
    too_big = [job for job in history.jobs if job.gpus > capacity]
    if too_big:
        raise WhatIfError(
            say(
                plural(len(too_big), TOO_BIG_ONE, TOO_BIG_MANY),
                capacity=f"{capacity:,}",
                count=f"{len(too_big):,}",
                largest=f"{max(j.gpus for j in too_big):,}",
            )
        )
    guarantees, note = fit_guarantees(history.guarantees, capacity)
    try:
        run = simulator.simulate(
            history.traces(),
            len({spec.rack for spec in specs}),
            policy=RACKPLANE,
            guarantees=guarantees,
            cluster=Cluster(specs),
            projects=history.projects,
            mig=plan,
            **options,
        )
    except SimulationError as error:
        raise WhatIfError(say(NOT_FINISHED, error=error)) from error
    figures = {key: run.metrics.get(key) for key in KEPT}
    figures["layout"] = describe(specs)
    figures["capacity_gpus"] = capacity
    figures["notes"] = [*mig_notes, *([note] if note else [])]
    if plan is not None:
        figures.update(_mig_figures(run.metrics["mig"]))
    return figures


def _mig_figures(mig: Mapping) -> dict:
    """The simulator's MIG figures (results.json `mig`) a what-if keeps, flat."""
    small, slices, multi = mig["one_gpu_or_smaller"], mig["slices"], mig["multi_tray"]
    return {
        "mig_trays": mig["mig_trays"],
        "mig_gpus": mig["mig_gpus"],
        "small_jobs": small["jobs"],
        "small_avg_wait_s": small["avg_wait_s"],
        "small_p95_wait_s": small["p95_wait_s"],
        "slice_jobs": slices["jobs"],
        "slice_avg_wait_s": slices["avg_wait_s"],
        "slice_utilization": mig["slice_utilization"],
        "avg_stranded_slices": mig["avg_stranded_slices"],
        "stranded_slice_s": mig["stranded_slice_s"],
        "gpu_equivalent_utilization": mig["gpu_equivalent_utilization"],
        "multi_tray_avg_wait_s": multi["avg_wait_s"],
        "multi_tray_p95_wait_s": multi["p95_wait_s"],
        "multi_tray_avg_jct_s": multi["avg_jct_s"],
    }


def _value(key: str, figures: Mapping, unit: str = "") -> float | None:
    value = figures.get(key)
    if value is None:
        return None
    if key.endswith("_s"):
        return value / 3600  # seconds -> hours, GPU-seconds -> GPU-hours
    if unit == "slices":
        return value  # a count, as it is
    return value * 100  # a fraction, shown in %


def _format(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "%":
        return f"{value:.1f}%"
    if unit == "GPU-h":
        return f"{value:,.0f} GPU-h"
    if unit == "slices":
        return f"{value:,.2f}"
    return f"{value:,.2f} h"


def _delta(value: float | None, base: float | None, unit: str, lower_is_better: bool) -> tuple[str, str]:
    """('+1.25 h', 'worse') against the first layout's value."""
    if value is None or base is None:
        return "", ""
    diff = value - base
    if unit == "%":
        text = f"{diff:+.1f} pts"
    elif unit == "GPU-h":
        text = f"{diff:+,.0f} GPU-h"
    elif unit == "slices":
        text = f"{diff:+,.2f}"
    else:
        text = f"{diff:+,.2f} h"
    if abs(diff) < (0.05 if unit == "%" else 0.5 if unit == "GPU-h" else 0.005):
        return "same", "same"
    better = diff < 0 if lower_is_better else diff > 0
    return text, "better" if better else "worse"


def comparison(results: Sequence[tuple[str, Mapping | None]], figures_shown=FIGURES) -> list[dict]:
    """One row per figure (`figures_shown`: FIGURES, or MIG_FIGURES for a MIG what-if): each layout's value
    and its difference to the first layout's (the cluster as it is). `results`: (label, figures, or None
    when that layout's replay did not finish)."""
    rows = []
    for key, label, unit, lower_is_better in figures_shown:
        base = _value(key, results[0][1], unit) if results and results[0][1] else None
        cells = []
        for index, (_name, figures) in enumerate(results):
            value = _value(key, figures, unit) if figures else None
            delta, verdict = ("", "") if index == 0 else _delta(value, base, unit, lower_is_better)
            diff = None if index == 0 or value is None or base is None else value - base
            cells.append(
                {
                    "value": value,
                    "diff": diff,
                    "text": _format(value, unit),
                    "delta": delta,
                    "verdict": verdict,
                }
            )
        rows.append({"key": key, "label": label, "unit": unit, "cells": cells})
    return rows


def comparison_text(results: Sequence[tuple[str, Mapping | None]], figures_shown=FIGURES) -> str:
    """The comparison as a plain-text table (`manage.py simulate --from-history`)."""
    table = comparison(results, figures_shown)
    labels = [name for name, _ in results]
    first = max(len(row["label"]) for row in table)
    widths = [
        max(len(name), *(len(r["cells"][i]["text"]) + len(r["cells"][i]["delta"]) + 3 for r in table))
        for i, name in enumerate(labels)
    ]
    lines = ["  ".join([" " * first, *(name.rjust(w) for name, w in zip(labels, widths, strict=True))])]
    for row in table:
        cells = []
        for cell, width in zip(row["cells"], widths, strict=True):
            text = cell["text"] + (f" ({cell['delta']})" if cell["delta"] else "")
            cells.append(text.rjust(width))
        lines.append("  ".join([row["label"].ljust(first), *cells]))
    return "\n".join(lines)
