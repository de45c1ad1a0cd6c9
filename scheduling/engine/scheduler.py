"""One scheduling pass: quota-aware admission, gang placement, reclaim by preemption, reservation, backfill.

Pure Python, shared by the portal (scheduling.services.passes.run_pass builds the inputs from the database)
and the simulator (scheduling.simulator replays traces in virtual time). Times are seconds on any clock.

Admission follows `tenancy.quota.fair_share` (Run:ai / KAI semantics):

1. **In quota first.** Pending jobs are taken in order (department priority, then submission time). A job
   is *in quota* when its department's GPUs, with it, stay within the department's in-quota share (its
   guarantee, scaled down only when failures leave less capacity than was promised). In-quota work is not
   preemptible.
2. **Then over quota.** Preemptible (training) jobs beyond the guarantee borrow free GPUs, departments
   furthest below their fair share first, never past a department's limit. Non-preemptible classes
   (build, inference) only run in quota. Borrowed work may also use partitions dedicated to other
   departments (after its own and the shared ones). With a half-life (`Options.half_life_s`) "furthest
   below" also counts the recent past (Historical fair share, below).
3. **Reclaim.** An in-quota job that does not fit preempts over-quota work of other departments: first
   the borrowers on partitions dedicated to the job's department, then the least-priority department's,
   most recently started first, until the job fits. Of the placements the borrowers taken so far leave
   room for, a multi-tray job gets the one that loses the least work (each victim's GPUs times the work
   it loses, at most `Options.checkpoint_loss_s`): one whole partition freed by a few new borrowers rather
   than one freed by an old large one. Victims whose trays the job does not use keep running. When the
   trays the job needs free up by themselves (by the running jobs' time limits) soon enough that its GPUs
   waiting cost no more GPU-seconds than the
   preempted work would lose, the job may wait instead (`Options.reclaim_when_cheaper`, measured, off by
   default: the guarantee comes first). A build or inference job is in quota while its department's (its
   leaf's) non-preemptible work and it fit in the in-quota share, whatever training the department runs:
   Standing puts non-preemptible work first. When the department's own borrowed training holds the GPUs it
   needs, that training gives way, newest first, before any other department's (a 1-GPU build job used to
   wait behind its own department's borrowed jobs for as long as they ran).
4. **Reservation and backfill.** The first jobs that still do not fit (the head of the queue; two by
   default, `max_reservations`) get reservations: the trays that free up earliest for each (by the running
   jobs' time limits) are held for the rest of the pass. A later job may use held trays only if its time
   limit ends before the earliest reservation starts, so backfilling never delays the head jobs. Two
   rather than one (EASY backfill) because the trace replay showed a single reservation starving large
   jobs behind a stream of in-quota work (docs/simulator.md). Options measured and left off by default:
   more reservations for in-quota gangs, reservations that count the borrowers an in-quota job would
   reclaim as gone (`_staying_borrowers`), backfill into any reservation that starts after the job ends.
5. **Fallback.** An in-quota job that has waited `PendingJob.fallback_after_s` since its submission may
   take its `fallback_topology` (a wider one it accepts, e.g. a rack instead of one partition); jobs that
   give none keep theirs. Borrowers keep theirs (`Options.fallback_borrowers` lets them fall back too).
6. **Fabric wait.** On a cluster with a compute fabric (core.fabric), a job that may go anywhere and
   needs more trays than one rack has (or finds no partition or rack with room for it) expands outward
   only when necessary (scheduling.engine.placement): one scalable unit, then one spine group, then
   anywhere. With `Options.fabric_wait_s`, such a job that could fit one scalable unit later (a unit has
   that many trays, busy or not) waits for one up to that long, counted from the first pass that held it
   for the fabric: the first in which it could have started spanning units (its quota allowed it and the
   free trays were there across units) but no unit had room (`PendingJob.fabric_held_since`, reported in
   `PassResult.fabric_held_since` and given back by the caller at the next pass); then it expands. A job
   that waits for its quota or for trays anywhere is not held, and its wait has not begun. The same
   trade-off as the fallback's NVLink locality wait, measured (docs/simulator.md). 0: at once.

**Projects.** A department may split its share among projects (`Department.projects`; jobs name theirs in
`project`): quotas are then hierarchical (`tenancy.quota.hierarchical_fair_share`): a job is in quota when
its project's GPUs, with it, stay within the project's in-quota share inside the department's, and its
department's and project's limits both hold; over-quota jobs go in order of their project's distance below
its fair share. Standing has two levels (Run:ai's): towards other departments, the department is judged
against its own guarantee, whatever its projects (`over_quota`: its jobs within its in-quota share are in
quota, its projects' in-quota work first); inside it, a project (or the work without one) holding more than
its own share borrows its siblings' unused guarantee (`sibling_borrowed`): only a sibling's in-quota job
reclaims that, never another department's. Work of such a department without a project is one more
leaf (`tenancy.quota.NO_PROJECT`). A department without projects is its own single leaf: exactly as before.

**Historical fair share.** With `Options.half_life_s` set, each department (and project) may carry its
`decayed_usage` (GPU-seconds, each halved every half-life: Slurm's PriorityDecayHalfLife, KAI's time-aware
fairness; tenancy.usage_decay). Over-quota work is then ordered by the sum of two standings in GPUs, lowest
first: the instant one (GPUs held minus fair share now, as without history) and the historical one (GPUs
held on average over the decayed window minus the guarantee, per unit of over-quota weight; a project
leaf adds its own to its department's). A department that lent its guarantee lately borrows before one
that borrowed a lot. Only that order changes: in-quota admission, guarantees, limits and reclaim (whose
victims are chosen by standing and least lost work) are the same, and without a half-life, or without
usage, the order is exactly the instant one. O(departments + projects) per pass.

**Standing.** Every pass recomputes which running jobs are in quota and which borrow (`standing`), before
admission (so reclaim preempts today's borrowers, not the ones of when they started) and after it (the
result's `over_quota`): per department, its running jobs are in quota while their GPUs stay within the
department's in-quota share, non-preemptible classes first (they run only in quota), then oldest first;
the rest borrow (with projects: each leaf's in-quota jobs first, then its other jobs in the same order). A
job on a partition dedicated to another department always borrows. Raising a guarantee
turns the oldest borrowers into in-quota work at the next pass; lowering it turns the newest in-quota jobs
into borrowers.

The pass changes the given cluster (allocations for started jobs, releases for preempted ones) and returns
what it decided; the caller makes it so.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import accumulate, compress, filterfalse
from operator import attrgetter, is_not, itemgetter

from core.hardware import GPUS_PER_TRAY
from scheduling.engine.cluster import Cluster
from scheduling.engine.placement import (
    ANY,
    PARTITION,
    RACK,
    RACKPLANE,
    Placement,
    Request,
    fits_when_settled,
    place,
    why_not,
)
from scheduling.engine.placement import explain as explain_placement
from scheduling.engine.standing import STANDING_KEY, StandingOrder
from scheduling.engine.words import CLAUSES, WAITING, gettext_noop, minutes, say, utc_words
from tenancy.quota import DepartmentQuota, hierarchical_fair_share, in_quota_prefix
from tenancy.usage_decay import history_standing

PREEMPTIBLE_CLASSES = ("train",)
CHECKPOINT_LOSS_S = 600.0  # work lost per preemption, by default (the simulator's --checkpoint-loss)


@dataclass(frozen=True)
class Project:
    """A project inside a department: its share of the department's (same fields, one level down)."""

    name: str
    guaranteed: int
    weight: float = 1.0
    limit: int | None = None
    priority: int = 0
    decayed_usage: float | None = None  # GPU-seconds, decayed (Historical fair share); None: unknown


@dataclass(frozen=True)
class Department:
    name: str
    guaranteed: int
    weight: float = 1.0
    limit: int | None = None
    priority: int = 0
    projects: tuple[Project, ...] = ()  # empty: the department is its own single leaf
    # Its GPU-seconds, decayed with `Options.half_life_s` (tenancy.usage_decay); None: no history known.
    decayed_usage: float | None = None


@dataclass(frozen=True)
class PendingJob:
    id: int
    department: str
    gpus: int
    topology: str = PARTITION
    priority_class: str = "train"
    submitted_at: float = 0.0
    time_limit_s: float = 3600.0
    # A wider topology the job accepts once it has waited `fallback_after_s` since submission (in quota).
    fallback_topology: str | None = None
    fallback_after_s: float = 0.0
    project: str | None = None  # its project inside the department (None: none)
    # Its fallback granted as a borrower too, once it has waited this long (None: only with
    # `Options.fallback_borrowers`). The simulator gives it to gangs only a re-carve can give one partition
    # (re-carving serves in-quota gangs only: scheduling.engine.recarve).
    borrower_fallback_after_s: float | None = None
    # The fabric level its trays must stay inside for now (the pass sets it: `Options.fabric_wait_s`).
    within: str | None = None
    # When a pass first held it for the fabric (it could have started across scalable units, but waited for
    # one: module docstring, Fabric wait), on the pass's clock; None: never held. Its wait runs out at this
    # plus `Options.fabric_wait_s`. The caller keeps it from `PassResult.fabric_held_since`.
    fabric_held_since: float | None = None

    @property
    def preemptible(self) -> bool:
        return self.priority_class in PREEMPTIBLE_CLASSES

    def request(self, borrow: bool = False, pack: bool = False) -> Request:
        return Request(self.gpus, self.topology, self.department, borrow, self.within, pack)


@dataclass(frozen=True)
class RunningJob:
    id: int
    department: str
    gpus: int
    started_at: float
    expected_end: float  # start + time limit
    over_quota: bool = False
    priority_class: str = "train"
    project: str | None = None
    # Its place in its department's standing order (`_standing_order`), made once per object: the pass keeps
    # the objects of unchanged jobs (scheduling.pass_inputs.engine_running_jobs) and sorts 47,700 of them
    # twice a pass at 10,000 racks, by this key alone (a sort key made per job per sort took half the sort).
    standing_key: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "standing_key", (self.department, *_standing_order(self)))

    @property
    def preemptible(self) -> bool:
        return self.over_quota and self.priority_class in PREEMPTIBLE_CLASSES


@dataclass(frozen=True)
class Start:
    job_id: int
    placement: Placement
    over_quota: bool
    preempted: tuple[int, ...] = ()  # jobs preempted to make room for it
    # The job's own topology when it was placed by its fallback beyond it (e.g. "partition" for a job
    # placed on two partitions of a rack as its submitter allowed); None when its own topology held.
    fell_back_from: str | None = None
    # Why there, in one sentence (scheduling.engine.placement.explain; with `explain` only).
    why: str = ""


@dataclass(frozen=True)
class Reservation:
    job_id: int
    trays: tuple[int, ...]
    start_at: float


@dataclass
class PassResult:
    started: list[Start] = field(default_factory=list)
    preempted: dict[int, int] = field(default_factory=dict)  # victim job id -> the job it made room for
    waiting: dict[int, str] = field(default_factory=dict)  # job id -> why it waits (plain words)
    reservation: Reservation | None = None  # the first of `reservations`
    reservations: list[Reservation] = field(default_factory=list)  # every reservation of the pass, in order
    decisions: int = 0  # placement decisions made (calls of `place`)
    # Every job running after the pass (started ones included) -> True when it borrows (see Standing).
    over_quota: dict[int, bool] = field(default_factory=dict)
    # The jobs running before the pass and after it whose standing the pass changed -> True when it borrows
    # now (a few of `over_quota`: what a caller storing the standing writes).
    standing_changes: dict[int, bool] = field(default_factory=dict)
    in_quota_share: dict[str, int] = field(default_factory=dict)  # department -> its in-quota share
    # (department, project) -> the project's in-quota share, for departments with projects (see Projects).
    project_in_quota_share: dict[tuple[str, str | None], int] = field(default_factory=dict)
    on_dedicated: dict[int, str] = field(default_factory=dict)  # job -> owner of the dedicated partition
    # Running jobs in quota for their department but beyond their project's (or the work without a project's)
    # in-quota share: they borrow their siblings' unused guarantee, which only a sibling reclaims (Projects).
    sibling_borrowed: set[int] = field(default_factory=set)
    # In-quota jobs that wait although borrowed work could make room, only because of the preemption grace
    # (`Options.preempt_after_s`) or borrowers' minimum run time (`Options.min_runtime_s`) -> the time
    # (the pass's clock) from which they may preempt.
    may_preempt_at: dict[int, float] = field(default_factory=dict)
    # In-quota multi-tray jobs left waiting, in the pass's order: the gangs a re-carve may serve
    # (scheduling.engine.recarve.propose).
    in_quota_gangs: list[int] = field(default_factory=list)
    # The jobs left waiting in the order the pass considered them last (with `explain`; empty without): in
    # quota first, in queue order, then the over-quota sweep, departments furthest below their fair share
    # first. A job's place here is its position in the queue: who the pass serves before it.
    queue: list[int] = field(default_factory=list)
    # Jobs the fabric wait held for the first time in this pass (they could have started across scalable
    # units but wait for one, and came without `PendingJob.fabric_held_since`) -> this pass's clock. The
    # caller keeps it on the job (its `fabric_held_since` at the next passes) until the job starts.
    # With `Options.fabric_wait_again`, None for a job whose wait ran out while it could not start anywhere:
    # the caller forgets its hold, and its next hold begins a new wait.
    fabric_held_since: dict[int, float | None] = field(default_factory=dict)
    # The running jobs (started ones too) in standing order, when no department has projects (else None):
    # the next pass starts from it (`schedule`'s `standing`; StandingOrder: the same result, sooner).
    standing: StandingOrder | None = None


def _standing_order(job: RunningJob) -> tuple:
    """A department's running jobs in the order they hold its in-quota share (Standing): non-preemptible
    classes first (they run only in quota), then oldest first, and within one start time the pass's own
    decision first (a job started in quota next to a borrower it outranks)."""
    return (job.priority_class in PREEMPTIBLE_CLASSES, job.started_at, job.over_quota, job.id)


_QUEUE_ORDER = attrgetter("submitted_at", "id")  # a waiting job's place in line, within one priority
_OVER_QUOTA = attrgetter("over_quota")
_GPUS = attrgetter("gpus")
_ID = attrgetter("id")
_NOT_NONE = partial(is_not, None)


def _getter(trays: list[int]) -> Callable:
    """A function giving the items at `trays` of a list, as a tuple (in C: `itemgetter`)."""
    if len(trays) > 1:
        return itemgetter(*trays)
    if trays:
        only = trays[0]
        return lambda values: (values[only],)
    return lambda values: ()


def _sort_standing(jobs: list[RunningJob]) -> None:
    """Sort `jobs` by department, then in `_standing_order` (each job's `standing_key`, made once: the jobs
    of one department, as every caller but `_flips_plain` gives, in standing order)."""
    jobs.sort(key=STANDING_KEY)


# Why a job waits (scheduling.engine.words: clauses joined by "; ", each a template read back by the portal).
UNKNOWN_DEPARTMENT = gettext_noop("department %(department)s is unknown")
DEPARTMENT_LIMIT = gettext_noop("the department's limit is %(limit)s GPUs")
PROJECT_LIMIT = gettext_noop("the project's limit is %(limit)s GPUs")
HOLDS_AND_NEEDS = gettext_noop("it holds %(held)s and this job needs %(gpus)s")
GUARANTEE_ONLY = gettext_noop(
    "%(priority_class)s jobs run only within the department's guarantee (%(guaranteed)s GPUs)"
)
# The same inside a department shared among projects: the job's own leaf's guarantee is what it is held to
# (its in-quota share, which is the guarantee unless the schedulable GPUs fall short of the guarantees).
PROJECT_GUARANTEE_ONLY = gettext_noop(
    "%(priority_class)s jobs run only within their project's guarantee (project %(project)s: %(guaranteed)s "
    "GPUs)"
)
DEFAULT_PROJECT_GUARANTEE_ONLY = gettext_noop(
    "%(priority_class)s jobs run only within their project's guarantee (the default project: %(guaranteed)s "
    "GPUs, what the named projects' guarantees leave of the department's %(department_guaranteed)s)"
)
PROJECT_SHARE_ONLY = gettext_noop(
    "%(priority_class)s jobs run only within their project's in-quota share (project %(project)s: "
    "%(share)s GPUs now, less than its guarantee while the schedulable GPUs fall short of the guarantees)"
)
DEFAULT_PROJECT_SHARE_ONLY = gettext_noop(
    "%(priority_class)s jobs run only within their project's in-quota share (the default project: %(share)s "
    "GPUs now, less than its guarantee while the schedulable GPUs fall short of the guarantees)"
)
PREEMPTION_GRACE = gettext_noop("a job preempts only after waiting %(grace)s (the preemption grace)")
STARTS_WHEN_SETTLED = gettext_noop(
    "it starts as soon as their nodes report the new partition (failing that, trays are reserved for it, "
    "expected to start in %(wait)s)"
)
RESERVED_FOR_IT = gettext_noop("trays are reserved for it, expected to start in %(wait)s")
MAY_PREEMPT_LATER = gettext_noop("borrowed work could make room, but %(why)s: it may preempt in %(wait)s")
RESERVED_FOR_HEAD = gettext_noop(
    "the free trays it fits on are reserved for job #%(job)s, which should start in %(wait)s"
)
WOULD_DELAY_HEAD = gettext_noop("this job's time limit would delay it")
HELD_FOR_UNIT = gettext_noop(
    "waiting for one scalable unit (since %(at)s, until %(ends_at)s: the fabric wait)"
)
UNIT_RESERVED = gettext_noop(
    "scalable unit %(unit)s is reserved for it until %(ends_at)s: no new work starts there but in-quota work "
    "that fits nowhere else"
)


class _Pass:
    def __init__(
        self, cluster, departments, running, pending, now, policy, explain, options: Options, standing=None
    ):
        self.cluster = cluster
        self.departments = {d.name: d for d in departments}
        self.running = dict(zip(map(_ID, running), running, strict=True))
        self.pending = pending
        self.now = now
        self.policy = policy
        self.explain = explain
        self.options = options
        self.max_reservations = options.max_reservations
        self.in_quota_reservations = options.in_quota_reservations
        self.fallback_borrowers = options.fallback_borrowers
        self.checkpoint_loss_s = options.checkpoint_loss_s
        self.fabric_wait_s = options.fabric_wait_s
        self.min_runtime = {name: s for name, s in options.min_runtime_s.items() if s > 0}
        self.preempt_why: dict[int, str] = {}  # job -> why it may not preempt yet (see may_preempt_at)
        # Non-preemptible jobs in quota only because their leaf's training gives way (`_consider`).
        self.displacing: set[int] = set()
        self.result = PassResult()
        self.own_topology: dict[int, str] = {}  # job -> its own topology, when it takes its fallback
        # Leaves (module docstring, Projects): (department, project) in departments with projects, work
        # there without a known project (department, None); (department, None) for the others. The quota
        # figures are per leaf; `held` stays per department (its limit, reclaim's guard).
        # A department whose projects' guarantees exceed its own (the services refuse it; a database edited
        # by hand could hold it) is scheduled as one leaf rather than failing the whole pass.
        self.projects = {
            d.name: {p.name: p for p in d.projects}
            for d in departments
            if d.projects and sum(p.guaranteed for p in d.projects) <= d.guaranteed
        }
        self.leaf_guaranteed: dict[tuple[str, str | None], int] = {}
        for d in departments:
            self.leaf_guaranteed[(d.name, None)] = d.guaranteed
            for p in d.projects if d.name in self.projects else ():
                self.leaf_guaranteed[(d.name, p.name)] = p.guaranteed
                self.leaf_guaranteed[(d.name, None)] -= p.guaranteed
        self.held: dict[str, int] = {name: 0 for name in self.departments}
        self.leaf_held: dict[tuple[str, str | None], int] = dict.fromkeys(self.leaf_guaranteed, 0)
        # Per leaf, the GPUs its non-preemptible jobs hold: they hold its in-quota share first (Standing), so
        # a new one is in quota while these and it fit, whatever training the leaf runs (`_consider`).
        self.leaf_firm: dict[tuple[str, str | None], int] = dict.fromkeys(self.leaf_guaranteed, 0)
        self.standing_order: StandingOrder | None = None  # see _flips_plain
        # The running jobs started, preempted or restood since `standing_order` was made (None: not made
        # yet): all its next look compares (StandingOrder.updated).
        self.moved: set[int] | None = None
        # The running jobs as given, of those the pass restood (`PassResult.standing_changes`).
        self.given: dict[int, RunningJob] = {}
        # The last pass's standing order (`PassResult.standing`), which the first look starts from.
        self.standing_hint: StandingOrder | None = standing
        # Each waiting job's leaf, looked up once per pass (sweeps and sorts read it; job ids are unique).
        self.pending_leaf: dict[int, tuple[str, str | None]] = {}
        if not self.projects:
            demand = self._count_plain(self._standing_now(), pending)
            leaf_demand = {}  # read only for the projects' split: none here
        else:
            for job in running:
                if job.department in self.held:
                    leaf = self._leaf(job)
                    self.held[job.department] += job.gpus
                    self.leaf_held[leaf] += job.gpus
                    if job.priority_class not in PREEMPTIBLE_CLASSES:
                        self.leaf_firm[leaf] += job.gpus
            demand = dict(self.held)
            leaf_demand = dict(self.leaf_held)
            for job in pending:
                leaf = self._leaf(job)
                self.pending_leaf[job.id] = leaf
                if job.department in demand:
                    demand[job.department] += job.gpus
                    leaf_demand[leaf] += job.gpus
        shares = hierarchical_fair_share(
            cluster.capacity,
            [
                DepartmentQuota(
                    name=d.name,
                    guaranteed=d.guaranteed,
                    weight=d.weight,
                    limit=d.limit,
                    priority=d.priority,
                    demand=demand[d.name],
                    allocated=self.held[d.name],
                )
                for d in departments
            ],
            {
                name: [
                    DepartmentQuota(
                        name=p.name,
                        guaranteed=p.guaranteed,
                        weight=p.weight,
                        limit=p.limit,
                        priority=p.priority,
                        demand=leaf_demand[(name, p.name)],
                        allocated=self.leaf_held[(name, p.name)],
                    )
                    for p in projects.values()
                ]
                for name, projects in self.projects.items()
            },
        )
        self.department_in_quota = {name: s.in_quota for name, s in shares.departments.shares.items()}
        self.in_quota = {leaf: shares.leaf(*leaf).in_quota for leaf in self.leaf_guaranteed}
        self.fair = {leaf: shares.leaf(*leaf).fair_share for leaf in self.leaf_guaranteed}
        self._restand()
        self.reserved: list[Reservation] = []
        self.reserved_ids: set[int] = set()  # their jobs
        self.reserved_until = -math.inf  # the latest start of a reservation
        self.reserved_from = math.inf  # the earliest start of a reservation
        self.all_reserved: tuple[int, ...] = ()  # indexes of every reservation in `reserved`
        self.held_trays: set[int] = set()
        self.in_quota_reserved = 0
        self.fabric_reserved = 0  # reservations beyond max_reservations for jobs waiting inside a unit
        # Unit reservations (`Options.fabric_unit_reservation_s`, `_reserve_units`): job -> the unit reserved
        # for it, and every tray of those units, held for the whole pass.
        self.unit_reserved: dict[int, int] = {}
        self.unit_trays: list[int] = []
        self.staying: list[RunningJob] | None = None  # see _staying_borrowers
        self.ends: list[float] | None = None  # see _reserve (None: not computed since the last change)
        self.requests: dict[tuple, Request] = {}  # see _request
        self.ready_base: dict[bool, list[float | None]] = {}  # see _reserve: by single-tray or not
        self.group_cache: dict[tuple, list] = {}  # see _reservation_groups
        # Shapes that did not fit in this pass: nothing frees up during a pass except by preemption.
        self.failed: dict[tuple, str] = {}
        # (GPUs, topology, department) whose reclaim failed in this pass. Within a pass only in-quota jobs
        # reclaim, and what happens between two attempts (in-quota starts, which are not preemptible and
        # keep their department within its guarantee; reservations) only takes capacity away, so a failed
        # reclaim fails again until capacity moves (a reclaim succeeds): then both caches are cleared.
        self.reclaim_failed: set[tuple] = set()

    def _count_plain(self, order: StandingOrder, pending: list[PendingJob]) -> dict[str, int]:
        """`held`, `leaf_held`, `leaf_firm` and `pending_leaf` when no department has projects (every leaf is
        (department, None)): the loops of `__init__` without a leaf per job, the running jobs summed per
        department from their standing order (its non-preemptible jobs first). Returns the demand per
        department (running and waiting GPUs)."""
        held = self.held
        firm: dict[str, int] = {}
        for name, (keys, jobs) in order.lists.items():
            if name in held:
                held[name] += sum(map(_GPUS, jobs))
                preemptible = bisect_left(keys, (name, True))  # standing_key: (department, preemptible, ...)
                if preemptible:
                    firm[name] = sum(map(_GPUS, jobs[:preemptible]))
        demand = dict(held)
        # One tuple per department, shared by its jobs.
        leaf_of: dict[str, tuple[str, str | None]] = {name: (name, None) for name in held}
        pending_leaf = self.pending_leaf
        for waiting in pending:
            name = waiting.department
            leaf = leaf_of.get(name)
            if leaf is None:  # an unknown department: its own leaf, counted nowhere
                pending_leaf[waiting.id] = (name, None)
            else:
                pending_leaf[waiting.id] = leaf
                demand[name] += waiting.gpus
        for name, leaf in leaf_of.items():
            self.leaf_held[leaf] = held[name]
        for name, gpus in firm.items():
            self.leaf_firm[leaf_of[name]] = gpus
        return demand

    # --- standing: in quota or borrowed ------------------------------------------------------------

    def _leaf_guarantee_only(self, job, leaf: tuple[str, str | None], department_guaranteed: int) -> str:
        """Why a non-preemptible job of a department shared among projects waits: its leaf's guarantee, or
        its in-quota share when the schedulable GPUs fall short of the guarantees (then the smaller)."""
        share, guaranteed = self.in_quota[leaf], self.leaf_guaranteed[leaf]
        cls = job.priority_class
        if leaf[1] is None:
            if share < guaranteed:
                return say(DEFAULT_PROJECT_SHARE_ONLY, priority_class=cls, share=share)
            return say(
                DEFAULT_PROJECT_GUARANTEE_ONLY,
                priority_class=cls,
                guaranteed=guaranteed,
                department_guaranteed=department_guaranteed,
            )
        project = f"{leaf[0]}-{leaf[1]}"
        if share < guaranteed:
            return say(PROJECT_SHARE_ONLY, priority_class=cls, project=project, share=share)
        return say(PROJECT_GUARANTEE_ONLY, priority_class=cls, project=project, guaranteed=guaranteed)

    def _leaf(self, job) -> tuple[str, str | None]:
        """The quota leaf `job` is admitted against (module docstring, Projects)."""
        projects = self.projects.get(job.department)
        if projects is None or job.project not in projects:
            return (job.department, None)
        return (job.department, job.project)

    def _dedicated_owner(self, job: RunningJob) -> str | None:
        """The owner of another department's dedicated partition the job holds trays on, if any."""
        cluster = self.cluster
        if not cluster.dedicated_owners:
            return None  # no partition is dedicated: nothing to look up per tray
        for t, _ in cluster.jobs.get(job.id, ()):
            if cluster.dedicated_to_other(t, job.department):
                return cluster.part_owner[cluster.tray_part[t]]
        return None

    def _on_dedicated(self) -> dict[int, str]:
        """Running job -> `_dedicated_owner`, for the jobs that have one: found from the trays of dedicated
        partitions (few) instead of every running job's trays (thousands of jobs at 1,000 racks)."""
        cluster = self.cluster
        found: dict[int, str] = {}
        if not cluster.dedicated_owners:
            return found
        for p, owner in enumerate(cluster.part_owner):
            if owner is None:
                continue
            for t in cluster.part_trays[p]:
                for job_id in cluster.tray_jobs[t]:
                    job = self.running.get(job_id)
                    if job is not None and job.department != owner and job_id not in found:
                        first = self._dedicated_owner(job)  # its first such tray's owner
                        if first is not None:  # always: this tray is one
                            found[job_id] = first
        return found

    def _restand(self) -> None:
        """Recompute every running job's over_quota (module docstring, Standing)."""
        on_dedicated = self._on_dedicated()
        self.leaf_over: set[int] = set()
        running = self.running
        flips: Iterable[int]
        if not self.projects:  # every leaf is (department, None)
            flips = self._flips_plain(on_dedicated)
            self.result.sibling_borrowed = set()  # no leaf below a department
        else:
            in_quota = self._in_quota_by_leaf(on_dedicated)
            # The jobs whose standing changes: borrowing now and not before, or the other way round (found
            # with set operations: thousands of running jobs at 1,000 racks, few of them changing).
            borrowing = set(compress(running, map(_OVER_QUOTA, running.values())))
            flips = borrowing.symmetric_difference(running.keys() - in_quota)
            self.result.sibling_borrowed = {j for j in self.leaf_over if j in running and j in in_quota}
        given, moved = self.given, self.moved
        for job_id in flips:
            job = running[job_id]
            given.setdefault(job_id, job)
            running[job_id] = replace(job, over_quota=not job.over_quota)
            if moved is not None:
                moved.add(job_id)
        self.result.on_dedicated = on_dedicated
        self.result.in_quota_share = dict(self.department_in_quota)
        self.result.project_in_quota_share = {
            leaf: share for leaf, share in self.in_quota.items() if leaf[0] in self.projects
        }

    def _standing_now(self) -> StandingOrder:
        """The running jobs' standing order as they are now (`StandingOrder`): made from this pass's last
        one (moving the jobs it started, preempted or restood since: `moved`), or the last pass's
        (`standing_hint`, comparing every job), moving only the jobs that changed since."""
        if self.standing_order is not None:
            order = self.standing_order.updated(self.running, self.moved)
        elif self.standing_hint is not None:
            order = self.standing_hint.updated(self.running)
        else:
            order = StandingOrder.of(self.running)
        self.standing_hint = None
        self.moved = set()
        self.standing_order = order
        self.result.standing = order
        return order

    def _flips_plain(self, on_dedicated: dict[int, str]) -> list[int]:
        """The running jobs whose standing `_in_quota_by_leaf` would change, when no department has
        projects, in one walk: each department's running jobs in standing order (`StandingOrder`: made from
        the pass's last look, else from the last pass's, moving only the jobs that changed), its longest
        prefix within its in-quota share (`in_quota_prefix`) in quota and the rest borrowing, the jobs on
        other departments' dedicated partitions left out (borrowing). Only the jobs whose flag differs are
        named (found in C: 47,700 running jobs at 10,000 racks, a few changing)."""
        order = self._standing_now()
        share = {leaf[0]: share for leaf, share in self.in_quota.items()}
        flips: list[int] = []
        for name, (_keys, jobs) in order.lists.items():
            if name not in share:  # unknown department: nothing is guaranteed to it
                flips.extend(map(_ID, filterfalse(_OVER_QUOTA, jobs)))
                continue
            if on_dedicated:
                flips.extend(job.id for job in jobs if job.id in on_dedicated and not job.over_quota)
                jobs = [job for job in jobs if job.id not in on_dedicated]
            # The longest prefix whose GPUs stay within the share (the running sums only grow: GPUs >= 0).
            within = bisect_right(list(accumulate(map(_GPUS, jobs))), share[name])
            head, tail = jobs[:within], jobs[within:]
            flips.extend(map(_ID, compress(head, map(_OVER_QUOTA, head))))
            flips.extend(map(_ID, filterfalse(_OVER_QUOTA, tail)))
        return flips

    def _in_quota_by_leaf(self, on_dedicated: dict[int, str]) -> set[int]:
        """The running jobs in quota (module docstring, Standing): per leaf, the longest prefix in standing
        order within its in-quota share; then, towards other departments, a department with projects."""
        by_department: dict[tuple[str, str | None], list[RunningJob]] = {}  # by leaf
        plain = not self.projects  # every leaf is (department, None)
        for job in self.running.values():
            if job.id not in on_dedicated:
                leaf = (job.department, None) if plain else self._leaf(job)
                group = by_department.get(leaf)
                if group is None:
                    by_department[leaf] = [job]
                else:
                    group.append(job)
        in_quota: set[int] = set()  # in quota within its leaf
        for leaf, jobs in by_department.items():
            if leaf not in self.in_quota:
                continue  # unknown department: nothing is guaranteed to it
            _sort_standing(jobs)
            in_quota |= in_quota_prefix(self.in_quota[leaf], [(j.id, j.gpus) for j in jobs])
        # Towards other departments a department with projects is judged against its own in-quota share:
        # its leaves' in-quota jobs hold it first (they add up to no more than it), then its other jobs in
        # standing order while they fit. Without projects a leaf is its department: nothing changes.
        if not plain:
            leaves_of: dict[str, list[tuple[str, str | None]]] = {}
            for leaf in by_department:
                if leaf[0] in self.projects and leaf in self.in_quota:
                    leaves_of.setdefault(leaf[0], []).append(leaf)
            for name, leaves in leaves_of.items():
                rest = [j for leaf in leaves for j in by_department[leaf] if j.id not in in_quota]
                if not rest:
                    continue
                self.leaf_over.update(j.id for j in rest)
                held = sum(j.gpus for leaf in leaves for j in by_department[leaf] if j.id in in_quota)
                _sort_standing(rest)
                in_quota |= in_quota_prefix(
                    self.department_in_quota[name] - held, [(j.id, j.gpus) for j in rest]
                )
        return in_quota

    # --- placement with reservations respected ---------------------------------------------------

    def _place(
        self, job: PendingJob, borrow: bool, key: tuple, backfill: tuple[int, ...]
    ) -> Placement | None:
        """Place `job` as the pass may (its shape `key` is not in `failed`; `backfill`: the reservations
        whose trays it may use, see `_backfill`), counting the decision and caching a failure."""
        trays = [t for i in backfill for t in self.reserved[i].trays]
        if job.id in self.unit_reserved:  # the units reserved for jobs waiting for one (its own among them)
            trays += self.unit_trays
        placement = self._place_unholding(job, borrow, trays)
        if placement is None and self.unit_trays and not borrow and job.id not in self.unit_reserved:
            # In-quota work that fits nowhere else starts in a reserved unit: a unit reservation never
            # holds a department's work within its guarantee.
            placement = self._place_unholding(job, borrow, trays + self.unit_trays)
        if placement is None:
            self.failed[key] = ""
        return placement

    def _place_unholding(self, job: PendingJob, borrow: bool, trays: list[int]) -> Placement | None:
        """`place` with the held `trays` given back to the cluster for the decision (counted)."""
        self.result.decisions += 1
        if not trays:
            return place(self.cluster, self._request(job, borrow), self.policy)
        self.cluster.unhold(trays)
        try:
            return place(self.cluster, self._request(job, borrow), self.policy)
        finally:
            self.cluster.hold(trays)

    def _request(self, job: PendingJob, borrow: bool) -> Request:
        """`job.request(borrow)`, made once per shape in the pass (a long queue asks for few shapes)."""
        key = (job.gpus, job.topology, job.department, borrow, job.within)
        request = self.requests.get(key)
        if request is None:
            request = self.requests[key] = job.request(borrow, self.options.fabric_packing)
        return request

    def _backfill(self, job: PendingJob) -> tuple[int, ...]:
        """The reservations (indexes in `reserved`) whose trays `job` may use: those that start after it
        ends, by its time limit, so that it never delays them."""
        end = self.now + job.time_limit_s
        if end > self.reserved_until:
            return ()
        if not self.options.per_reservation_backfill:  # all reservations, or none (the earliest decides)
            return self.all_reserved if end <= self.reserved_from else ()
        return tuple(i for i, r in enumerate(self.reserved) if end <= r.start_at)

    def _start(self, job: PendingJob, placement: Placement, over_quota: bool, victims=()) -> None:
        fell_back_from = None
        own = self.own_topology.get(job.id)
        if own is not None and not self._within(placement, own):
            fell_back_from = own
        why = ""
        if self.explain and self.policy == RACKPLANE:
            why = explain_placement(self.cluster, self._request(job, over_quota), placement)
        self.cluster.allocate(job.id, placement)
        if self.ends is not None:  # it runs until its time limit: its trays end no earlier
            ends, at, bases = self.ends, self.now + job.time_limit_s, self.ready_base.values()
            for t, _ in placement:
                if at > ends[t]:
                    ends[t] = at
                    for base in bases:  # the ready times kept with them (None stays None)
                        if base[t] is not None:
                            base[t] = at
        self.held[job.department] += job.gpus
        self.leaf_held[self._leaf(job)] += job.gpus
        if not job.preemptible:
            self.leaf_firm[self._leaf(job)] += job.gpus
        if over_quota:
            self.leaf_over.add(job.id)
        if self.moved is not None:
            self.moved.add(job.id)
        self.running[job.id] = RunningJob(
            job.id,
            job.department,
            job.gpus,
            self.now,
            self.now + job.time_limit_s,
            over_quota,
            job.priority_class,
            job.project,
        )
        self.result.started.append(Start(job.id, placement, over_quota, tuple(victims), fell_back_from, why))

    def _within(self, placement: Placement, topology: str) -> bool:
        """True when `placement` meets `topology` (one partition, one rack, or anywhere)."""
        cluster = self.cluster
        if topology == PARTITION:
            return len({cluster.tray_part[t] for t, _ in placement}) <= 1
        if topology == RACK:
            return len({cluster.tray_rack[t] for t, _ in placement}) <= 1
        return True

    # --- reclaim -----------------------------------------------------------------------------------

    def _reclaim(self, job: PendingJob) -> bool:
        """Preempt over-quota work of other departments until the in-quota `job` fits (once it has waited
        out `Options.preempt_after_s`, and only work past its minimum run time: `_may_lose`)."""
        grace_ends = job.submitted_at + self.options.preempt_after_s
        # No grace set: no wait either, even for a job submitted after the pass's clock was read.
        if self.options.preempt_after_s and self.now < grace_ends:
            if self._could_reclaim(job):
                self.result.may_preempt_at[job.id] = grace_ends
                grace = minutes(self.options.preempt_after_s)
                self.preempt_why[job.id] = say(PREEMPTION_GRACE, grace=grace)
            return False
        key = (job.gpus, job.topology, self._leaf(job), job.id in self.displacing)
        if key in self.reclaim_failed:
            return False
        if self.cluster.free_gpus + self._reclaimable() < job.gpus or not self._try_reclaim(job):
            self.reclaim_failed.add(key)
            if self.min_runtime and self.explain:
                young = self._protected_until(job)
                if young is not None:
                    self.result.may_preempt_at[job.id] = young
                    self.preempt_why[job.id] = "that work has not run its minimum run time yet"
            return False
        return True

    def _could_reclaim(self, job: PendingJob) -> bool:
        """Whether some borrowed work is there for `job` to preempt, minimum run times aside (a cheap
        test: enough such GPUs; the reason and a replay's wake need no more)."""
        return self.cluster.free_gpus + self._reclaimable(job.department, young_too=True) >= job.gpus

    def _protected_until(self, job: PendingJob) -> float | None:
        """When `job`, whose reclaim failed, might preempt: the first borrower it may not preempt yet only
        because of its minimum run time reaches it (None: none is protected so, or even all of them
        would not make room)."""
        young = [
            r
            for r in self.running.values()
            if self._may_lose(r, job.department, young_too=True) and not self._ran_enough(r)
        ]
        if not young or not self._could_reclaim(job):
            return None
        return min(r.started_at + self.min_runtime[r.priority_class] for r in young)

    def _ran_enough(self, r: RunningJob) -> bool:
        """Whether running `r` is past its class's minimum run time (`Options.min_runtime_s`)."""
        least = self.min_runtime.get(r.priority_class)
        return least is None or self.now - r.started_at >= least

    def _victims(self, job: PendingJob, leaf: tuple[str, str | None], displacing: bool) -> list:
        """The running jobs `job` may preempt, as (elsewhere, job) in the order they are taken: its leaf's
        own borrowed training when displacing, those on its department's dedicated partitions, then the
        least-priority department's, newest first."""
        cluster = self.cluster

        def on_its_partitions(r: RunningJob) -> bool:  # a borrower on the job's department's dedicated ones
            return any(
                cluster.part_owner[cluster.tray_part[t]] == job.department for t, _ in cluster.jobs[r.id]
            )

        def own(r: RunningJob) -> bool:
            return displacing and r.over_quota and self._leaf(r) == leaf

        if not displacing and not self.projects and job.department not in cluster.owners:
            # The common case, the same victims in the same order, found with less: no project (a leaf is
            # its department), not displacing (none is its own), no partition dedicated to its department
            # (none is on them), so every victim is another department's, and `elsewhere`.
            department, may_lose, departments = job.department, self._may_lose, self.departments
            borrowers = [
                r
                for r in self.running.values()
                if r.department != department and may_lose(r, department) and r.id in cluster.jobs
            ]
            borrowers.sort(key=lambda r: (departments[r.department].priority, -r.started_at, -r.id))
            return [(True, r) for r in borrowers]
        return sorted(
            (
                (not own(r) and not on_its_partitions(r), r)
                for r in self.running.values()
                if self._may_lose(r, job.department)
                and (self._leaf(r) != leaf or own(r))
                and r.id in cluster.jobs
            ),
            key=lambda v: (
                v[0],
                not own(v[1]),
                self.departments[v[1].department].priority,
                -v[1].started_at,
                -v[1].id,
            ),
        )

    def _try_reclaim(self, job: PendingJob) -> bool:
        # A non-preemptible job in quota over its leaf's training (`displacing`) takes that leaf's borrowed
        # training first, newest first: it is what holds the share the job is owed.
        victims = self._victims(job, self._leaf(job), job.id in self.displacing)
        if not victims:
            return False
        natural = None  # when the job would start without preempting (by time limits), if asked for
        if self.options.reclaim_when_cheaper:
            reservation = self._reserve(job, in_quota=False)
            natural = reservation.start_at if reservation is not None else math.inf
        released: list[tuple[RunningJob, tuple]] = []
        placement = None
        request = job.request()
        for elsewhere, victim in victims:
            # Only departments holding more than their guarantee give GPUs back, except from partitions
            # dedicated to the job's department: work there is always borrowed. Inside the job's own
            # department, only sibling projects holding more than theirs.
            if elsewhere and not self._over_guarantee(victim, job):
                continue
            released.append((victim, self.cluster.release(victim.id)))
            self._hold(victim, -victim.gpus)
            self.result.decisions += 1
            placement = place(self.cluster, request, self.policy)
            if placement is not None:
                break
        if placement is None:
            for victim, trays in reversed(released):
                self.cluster.allocate(victim.id, trays)
                self._hold(victim, victim.gpus)
            return False
        if self.options.least_loss_reclaim:
            placement = self._cheapest(request, released) or placement
        used = {t for t, _ in placement}
        if natural is not None:
            lost = sum(
                victim.gpus * min(self.checkpoint_loss_s, max(0.0, self.now - victim.started_at))
                for victim, trays in released
                if not used.isdisjoint(t for t, _ in trays)
            )
            if (natural - self.now) * job.gpus <= lost:  # waiting costs less than the work it would lose
                for victim, trays in reversed(released):
                    self.cluster.allocate(victim.id, trays)
                    self._hold(victim, victim.gpus)
                return False
        preempted = []
        for victim, trays in reversed(released):
            if used.isdisjoint(t for t, _ in trays):
                self.cluster.allocate(victim.id, trays)  # not needed: it keeps running
                self._hold(victim, victim.gpus)
            else:
                preempted.append(victim.id)
                del self.running[victim.id]
                if self.moved is not None:
                    self.moved.add(victim.id)
                self.result.preempted[victim.id] = job.id
        self.failed.clear()  # capacity moved: earlier failures may fit now
        self.reclaim_failed.clear()
        self.staying = None
        self.ends = None
        self.ready_base.clear()
        self._start(job, placement, over_quota=False, victims=preempted)
        return True

    def _hold(self, job: RunningJob, gpus: int) -> None:
        self.held[job.department] += gpus
        self.leaf_held[self._leaf(job)] += gpus

    def _over_guarantee(self, victim: RunningJob, job: PendingJob) -> bool:
        """Whether the victim's department (its project, inside the job's own department) holds more than
        its guarantee: only then does it give GPUs back to an in-quota job (Projects)."""
        if victim.department != job.department:
            return self.held[victim.department] > self.departments[victim.department].guaranteed
        leaf = self._leaf(victim)
        return self.leaf_held[leaf] > self.leaf_guaranteed[leaf]

    def _cheapest(self, request: Request, released: list[tuple[RunningJob, tuple]]) -> Placement | None:
        """Of the whole partitions (or racks, for a `rack` job) the released borrowers leave room in, the
        placement that loses the least of their work (rackplane, multi-tray jobs; None: keep `place`'s).

        Trays are taken greedily by what they add: a tray that was free costs nothing, a released tray
        the cost of its borrowers not stopped yet (all of them go, or the tray is not free). Ties go to
        the lower slot, then to the best fit (fewest whole free trays left in the partition or rack).
        """
        cluster = self.cluster
        n = request.trays
        if self.policy != RACKPLANE or request.small or request.topology not in (PARTITION, RACK):
            return None
        victims_on: dict[int, list[RunningJob]] = {}
        # What stopping each costs: its GPUs times the work it loses (at most the checkpoint loss), plus a
        # second per GPU so that a borrower that has only just started still counts.
        lost = {
            v.id: v.gpus * (min(self.checkpoint_loss_s, max(0.0, self.now - v.started_at)) + 1.0)
            for v, _ in released
        }
        for victim, trays in released:
            for t, _ in trays:
                victims_on.setdefault(t, []).append(victim)
        owners = cluster.usable_owners(request.department)
        parts = {cluster.tray_part[t] for t in victims_on}
        if request.topology == PARTITION:
            groups = [[p] for p in parts if cluster.part_owner[p] in owners and cluster.part_whole[p] >= n]
        else:
            groups = []
            for r in {cluster.part_rack[p] for p in parts}:
                group = [p for p in cluster.rack_parts[r] if cluster.part_owner[p] in owners]
                if sum(cluster.part_whole[p] for p in group) >= n:
                    groups.append(group)
        best = None
        for group in groups:
            left = sorted(t for p in group for t in cluster.part_free[p])
            stopped: set[int] = set()
            cost = 0.0
            chosen: list[int] = []
            while len(chosen) < n:
                pick: int | None = None
                add: float | None = None
                for t in left:
                    extra = sum(lost[v.id] for v in victims_on.get(t, ()) if v.id not in stopped)
                    if add is None or extra < add:
                        pick, add = t, extra
                        if extra == 0:
                            break
                assert pick is not None and add is not None, "the group has n trays free or released"
                left.remove(pick)
                chosen.append(pick)
                cost += add
                stopped.update(v.id for v in victims_on.get(pick, ()))
            key = (cost, sum(cluster.part_whole[p] for p in group) - n)
            if best is None or key < best[0]:
                best = (key, tuple((t, GPUS_PER_TRAY) for t in sorted(chosen)))
        return best[1] if best is not None else None

    # --- reservation -------------------------------------------------------------------------------

    def _reserve(self, job: PendingJob, in_quota: bool) -> Reservation | None:
        """The trays that free up earliest for `job`, by the running jobs' time limits. For an in-quota job,
        other departments' borrowed work counts as gone now: the job reclaims it when the rest is free."""
        cluster = self.cluster
        n = max(1, job.gpus // GPUS_PER_TRAY)  # job.request().trays; its GPUs were checked by `_place`
        gone: set[int] = set()  # borrowers counted as ended now
        if in_quota and self.options.reclaim_aware_reservations:
            gone = {
                r.id
                for r in self._staying_borrowers()
                if self._leaf(r) != self._leaf(job) and (r.over_quota or r.department == job.department)
            }

        # When each tray is ready for the job (None: never in this pass): full GPUs, not held by another
        # reservation, settled fabric for a multi-tray job, usable by the job's department.
        held, cap, settled = self.held_trays, cluster.tray_cap, cluster.tray_settled
        if self.unit_trays and job.id not in self.unit_reserved:  # reserved units are not for it
            held = held.union(self.unit_trays)
        part_owner, tray_part, department = cluster.part_owner, cluster.tray_part, job.department
        ready: list[float | None]
        if not cluster.dedicated_owners:  # every partition is shared: the same test, tray by tray in C
            if gone:
                ready = self._ready_shared(self._tray_ends(gone), n == 1)
            else:  # kept for the pass with the trays' end times: `_start` updates both
                if self.ends is None:
                    self.ends = self._tray_ends(gone)
                base = self.ready_base.get(n == 1)
                if base is None:
                    base = self.ready_base[n == 1] = self._ready_shared(self.ends, n == 1)
                ready = base.copy()
            for t in held:
                ready[t] = None
        else:
            if gone:
                ends = self._tray_ends(gone)
            else:
                if self.ends is None:
                    self.ends = self._tray_ends(gone)
                ends = self.ends
            ready = [
                ends[t]
                if cap[t] == GPUS_PER_TRAY
                and t not in held
                and (n == 1 or settled[t])
                and ((owner := part_owner[tray_part[t]]) is None or owner == department)
                else None
                for t in range(len(cluster))
            ]

        # Each group's start: when its n earliest ready trays are all ready (not before now); the first
        # group with the earliest start wins, and gets its n earliest trays (ties: the lower slot).
        now = self.now
        best: list[int] | None = None
        best_start = 0.0
        for trays, ready_of in self._reservation_groups(job, n):
            times = sorted(filter(_NOT_NONE, ready_of(ready)))
            if len(times) < n:
                continue
            start = max(now, times[n - 1])
            if best is None or start < best_start:
                best, best_start = trays, start
        if best is None:
            return None
        chosen = sorted([(at, t) for t in best if (at := ready[t]) is not None])[:n]
        return Reservation(job.id, tuple(sorted([t for _, t in chosen])), best_start)

    def _ready_shared(self, ends: list[float], single: bool) -> list[float | None]:
        """`_reserve`'s ready times with no partition dedicated to anyone, before the held trays: a tray's
        end time when it has all its GPUs (and, for a multi-tray job, its fabric settled), else None."""
        cluster, full = self.cluster, GPUS_PER_TRAY
        if single:
            return [at if c == full else None for at, c in zip(ends, cluster.tray_cap, strict=True)]
        return [
            at if c == full and ok else None
            for at, c, ok in zip(ends, cluster.tray_cap, cluster.tray_settled, strict=True)
        ]

    def _reservation_groups(self, job: PendingJob, n: int) -> list[tuple[list[int], Callable]]:
        """The groups of trays a reservation for `job` (n trays) may take, each with a function giving the
        ready times of its trays from the list of all: every partition of at least n trays for a
        partition job under rackplane, every rack for a rack job, else the whole cluster. Made once per
        pass and kind."""
        cluster = self.cluster
        kind: tuple[str | None, int]
        if self.policy == RACKPLANE and job.topology == PARTITION and job.gpus > GPUS_PER_TRAY:
            kind = (PARTITION, n)
        elif self.policy == RACKPLANE and job.topology == RACK and job.gpus > GPUS_PER_TRAY:
            kind = (RACK, 0)
        elif self.policy == RACKPLANE and job.within in cluster.fabric.levels:
            kind = (job.within, cluster.fabric.levels.index(job.within))
        else:
            kind = (None, 0)
        groups = self.group_cache.get(kind)
        if groups is None:
            if kind[0] == PARTITION:
                trays_of = [trays for trays in cluster.part_trays if len(trays) >= n]
            elif kind[0] == RACK:
                trays_of = [[t for p in parts for t in cluster.part_trays[p]] for parts in cluster.rack_parts]
            elif kind[0] is not None:  # a fabric level the job waits inside: each of its groups
                trays_of = [
                    [t for r in racks for p in cluster.rack_parts[r] for t in cluster.part_trays[p]]
                    for racks in cluster.group_racks[kind[1]]
                ]
            else:
                trays_of = [list(range(len(cluster)))]
            groups = self.group_cache[kind] = [(trays, _getter(trays)) for trays in trays_of]
        return groups

    def _tray_ends(self, gone: set[int]) -> list[float]:
        """When each tray's jobs have all ended, by the running jobs' time limits (now when none runs there,
        or its jobs are `gone` or not known to the pass)."""
        cluster, running = self.cluster, self.running
        ends = [self.now] * len(cluster)
        for job_id, placed in cluster.jobs.items():
            r = running.get(job_id)
            if r is None or job_id in gone:
                continue  # ends now (or is not known to the pass)
            at = r.expected_end
            for t, _ in placed:
                if at > ends[t]:
                    ends[t] = at
        return ends

    def _staying_borrowers(self) -> list[RunningJob]:
        """The borrowers that stay borrowers until they end, by the running jobs' time limits: reclaimable
        whenever an in-quota job needs their trays.

        A borrower turns into in-quota work (Standing) once its department's older jobs that still run
        leave room for it in the department's in-quota share; they only end, so it stays a borrower to
        its end exactly when the older jobs still running then, with it, exceed the share.
        """
        if self.staying is not None:
            return self.staying
        by_department: dict[tuple[str, str | None], list[RunningJob]] = {}  # by leaf
        for r in self.running.values():
            by_department.setdefault(self._leaf(r), []).append(r)
        staying = []
        for name, jobs in by_department.items():
            share = self.in_quota.get(name)
            if share is None or not any(self._may_lose(r) for r in jobs):
                continue
            _sort_standing(jobs)
            ends = sorted({r.expected_end for r in jobs})
            rank = {e: i for i, e in enumerate(ends)}
            tree = [0] * (len(ends) + 1)  # Fenwick tree: GPUs of the older jobs, by end time
            older = 0
            for r in jobs:
                k = rank[r.expected_end]
                if self._may_lose(r):
                    # GPUs of older jobs ending before this one.
                    before, i = 0, k
                    while i > 0:
                        before += tree[i]
                        i -= i & -i
                    if older - before + r.gpus > share:
                        staying.append(r)
                older += r.gpus
                i = k + 1
                while i <= len(ends):
                    tree[i] += r.gpus
                    i += i & -i
        self.staying = staying
        return staying

    # --- the pass ----------------------------------------------------------------------------------

    def _consider(self, job: PendingJob, sweep: int) -> bool:
        """Try one job; True when it is settled for this pass (started or waiting with a reason)."""
        department = self.departments.get(job.department)
        if department is None:
            self.result.waiting[job.id] = say(
                WAITING, reason=say(UNKNOWN_DEPARTMENT, department=job.department)
            )
            return True
        held = self.held[job.department]
        if department.limit is not None and held + job.gpus > department.limit:
            self.result.waiting[job.id] = (
                say(WAITING, reason=say(DEPARTMENT_LIMIT, limit=department.limit))
                + CLAUSES
                + say(HOLDS_AND_NEEDS, held=held, gpus=job.gpus)
            )
            return True
        leaf = self.pending_leaf.get(job.id) or self._leaf(job)
        if leaf[1] is not None:
            project = self.projects[job.department][leaf[1]]
            project_held = self.leaf_held[leaf]
            if project.limit is not None and project_held + job.gpus > project.limit:
                self.result.waiting[job.id] = (
                    say(WAITING, reason=say(PROJECT_LIMIT, limit=project.limit))
                    + CLAUSES
                    + say(HOLDS_AND_NEEDS, held=project_held, gpus=job.gpus)
                )
                return True
        in_quota = self.leaf_held[leaf] + job.gpus <= self.in_quota[leaf]
        if not in_quota and not job.preemptible and self.leaf_firm[leaf] + job.gpus <= self.in_quota[leaf]:
            # Its own training holds the share: non-preemptible work holds it first (Standing), so this job
            # is in quota, and its leaf's borrowed training gives way to it if it must (`_try_reclaim`).
            in_quota = True
            self.displacing.add(job.id)
        if sweep == 1 and not in_quota:
            return False  # over quota: the second sweep, after every in-quota job
        if not in_quota and not job.preemptible:
            if leaf[0] not in self.projects:  # the department is its own single leaf
                reason = say(
                    GUARANTEE_ONLY, priority_class=job.priority_class, guaranteed=department.guaranteed
                )
            else:  # its project's, or its default project's (what the named ones leave)
                reason = self._leaf_guarantee_only(job, leaf, department.guaranteed)
                held = self.leaf_held[leaf]
            self.result.waiting[job.id] = (
                say(WAITING, reason=reason) + CLAUSES + say(HOLDS_AND_NEEDS, held=held, gpus=job.gpus)
            )
            return True
        if (
            job.fallback_topology is not None
            and (in_quota or self.fallback_borrowers or job.borrower_fallback_after_s is not None)
            and job.fallback_topology != job.topology
            and self.now - job.submitted_at
            >= (
                job.fallback_after_s if in_quota or self.fallback_borrowers else job.borrower_fallback_after_s
            )
        ):
            self.own_topology[job.id] = job.topology
            job = replace(job, topology=job.fallback_topology)
        if (
            self.fabric_wait_s
            and job.topology == ANY
            and (not self._fabric_wait_over(job) or job.id in self.unit_reserved)
        ):
            within = self._fabric_level(job)
            if within is not None:
                job = replace(job, within=within)
        borrow = not in_quota
        # `_place`, inlined: in a long queue most jobs stop at the cache of shapes that did not fit.
        backfill: tuple[int, ...] = ()
        if self.reserved:
            if self.options.per_reservation_backfill:
                backfill = self._backfill(job)
            elif self.now + job.time_limit_s <= self.reserved_from:  # so before `reserved_until` too
                backfill = self.all_reserved
        name = job.department
        key: tuple = (job.gpus, job.topology, name if name in self.cluster.owners else None, backfill, borrow)
        if job.within is not None:  # a shape of its own while it waits inside a fabric level
            key += (job.within,)
        if job.id in self.unit_reserved:  # it may use the reserved units' trays: a shape of its own
            key += (job.id,)
        placement = None if key in self.failed else self._place(job, borrow, key, backfill)
        held = False  # the fabric wait holds it: it could start across units now
        if placement is None and job.within is not None:
            wide = replace(job, within=None)
            wide_placement = None if key[:5] in self.failed else self._place(wide, borrow, key[:5], backfill)
            held = wide_placement is not None
            if held and self.options.fabric_wait_slowdown > 1 and not self._a_unit_is_near(job, borrow):
                placement = wide_placement
        if placement is not None:
            self._start(job, placement, over_quota=borrow)
            return True
        if in_quota and self._reclaim(job):
            return True
        if held and job.fabric_held_since is None:  # held for the first time: its fabric wait begins
            self.result.fabric_held_since[job.id] = self.now
            job = replace(job, fabric_held_since=self.now)
        elif (
            job.within is None
            and job.fabric_held_since is not None
            and self.options.fabric_wait_again
            and job.topology == ANY
        ):  # its wait ran out and it cannot start anywhere now: its next hold waits again
            self.result.fabric_held_since[job.id] = None
        if in_quota and job.gpus > GPUS_PER_TRAY:
            self.result.in_quota_gangs.append(job.id)  # what re-carving may serve (engine.recarve)
        if (
            not self.explain
            and len(self.reserved) >= self.max_reservations
            and not (
                in_quota and job.gpus > GPUS_PER_TRAY and self.in_quota_reserved < self.in_quota_reservations
            )
            and not self._fabric_reservation(job)
        ):
            self.result.waiting[job.id] = ""  # `_wait` when `_may_reserve` says no, without the words
            return True
        self._wait(job, borrow=borrow)
        return True

    def _history(self) -> dict[tuple[str, str | None], float]:
        """Each leaf's historical standing (module docstring, Historical fair share): its department's,
        plus its project's own when the project's history is known. O(departments + projects)."""
        half_life = self.options.half_life_s
        assert half_life is not None  # asked only with a half-life (run)
        history: dict[tuple[str, str | None], float] = {}
        for leaf in self.fair:
            department = self.departments[leaf[0]]
            standing = 0.0
            if department.decayed_usage is not None:
                standing = history_standing(
                    department.decayed_usage, department.guaranteed, department.weight, half_life
                )
            project = self.projects.get(leaf[0], {}).get(leaf[1]) if leaf[1] is not None else None
            if project is not None and project.decayed_usage is not None:
                standing += history_standing(
                    project.decayed_usage, project.guaranteed, project.weight, half_life
                )
            if standing:
                history[leaf] = standing
        return history

    def _reclaimable(self, department: str | None = None, young_too: bool = False) -> int:
        """GPUs of the running jobs `_may_lose` gives up (for an in-quota job of `department`)."""
        return sum(r.gpus for r in self.running.values() if self._may_lose(r, department, young_too))

    def _may_lose(self, r: RunningJob, department: str | None = None, young_too: bool = False) -> bool:
        """Whether running `r` may be preempted for an in-quota job (of `department`, None: of any): it
        borrows from other departments, or (the job's sibling, or any) from its siblings (Projects), and it
        has run its minimum run time (`young_too`: whatever it has run)."""
        if r.priority_class not in PREEMPTIBLE_CLASSES:
            return False
        if self.min_runtime and not young_too and not self._ran_enough(r):
            return False
        if r.over_quota:
            return True
        return r.id in self.leaf_over and (department is None or department == r.department)

    def _wait(self, job: PendingJob, borrow: bool = False) -> None:
        """Record why `job` waits (for the trays a borrower may use too, when it would borrow), and reserve
        trays for it if it is one of the first that do not fit."""
        reason = ""
        if self.explain:
            request = job.request(borrow)
            reason = say(
                WAITING,
                reason=why_not(self.cluster, request)
                if not self.held_trays
                else self._why_with_reservation(request),
            )
        if self._may_reserve(job, in_quota=not borrow):
            reservation = self._reserve(job, in_quota=not borrow)
            if reservation is not None:
                if len(self.reserved) >= self.max_reservations:
                    if self._fabric_reservation(job):
                        self.fabric_reserved += 1  # one of the jobs waiting inside a unit
                    else:
                        self.in_quota_reserved += 1  # one of the in-quota gangs' own
                self.reserved.append(reservation)
                self.reserved_ids.add(reservation.job_id)
                self.result.reservations.append(reservation)
                self.reserved_until = max(self.reserved_until, reservation.start_at)
                self.reserved_from = min(self.reserved_from, reservation.start_at)
                self.all_reserved = tuple(range(len(self.reserved)))
                self.held_trays.update(reservation.trays)
                self.cluster.hold(reservation.trays)
                self.failed.clear()
                self.reclaim_failed.clear()
                if self.result.reservation is None:
                    self.result.reservation = reservation
                if self.explain:
                    wait = minutes(reservation.start_at - self.now)
                    if fits_when_settled(self.cluster, request):
                        reason += CLAUSES + say(STARTS_WHEN_SETTLED, wait=wait)
                    else:
                        reason += CLAUSES + say(RESERVED_FOR_IT, wait=wait)
        if self.explain and job.id in self.result.may_preempt_at:
            reason += CLAUSES + say(
                MAY_PREEMPT_LATER,
                why=self.preempt_why[job.id],
                wait=minutes(self.result.may_preempt_at[job.id] - self.now),
            )
        if self.explain and job.within is not None and job.fabric_held_since is not None:
            since = job.fabric_held_since
            unit = self.unit_reserved.get(job.id)
            if unit is None:
                reason += CLAUSES + say(
                    HELD_FOR_UNIT, at=utc_words(since), ends_at=utc_words(since + self.fabric_wait_s)
                )
            else:
                ends = since + self.fabric_wait_s + self.options.fabric_unit_reservation_s
                reason += CLAUSES + say(
                    UNIT_RESERVED, unit=self.cluster.group_names[-1][unit], ends_at=utc_words(ends)
                )
        self.result.waiting[job.id] = reason

    def _a_unit_is_near(self, job: PendingJob, borrow: bool) -> bool:
        """Whether `job`, waiting inside a unit none of which has room now but which could start across
        units, should wait on: a unit has room for it (by the running jobs' time limits) sooner than spanning
        units would cost it (its time limit times `Options.fabric_wait_slowdown` - 1: the site's estimate of
        how much slower a job runs across units)."""
        reservation = self._reserve(job, in_quota=not borrow)
        cost = (self.options.fabric_wait_slowdown - 1.0) * job.time_limit_s
        return reservation is not None and reservation.start_at - self.now <= cost

    def _reserve_units(self, order: list[PendingJob]) -> None:
        """Unit reservations (`Options.fabric_unit_reservation_s`): each job whose fabric wait has run out
        less than that long ago, in queue order, gets the scalable unit with the most whole free trays it may
        use (of the units large enough for it and not yet reserved; the first in fabric order on a tie); every
        tray of those units is held for the pass, so no new work starts there but the job itself and in-quota
        work that fits nowhere else (`_place`). The unit frees up as its jobs end, and the job starts there
        when it fits. Computed afresh each pass from `PendingJob.fabric_held_since`: nothing else is kept."""
        cluster = self.cluster
        if cluster.fabric.empty:
            return
        depth = len(cluster.fabric.levels) - 1
        bound = self.fabric_wait_s + self.options.fabric_unit_reservation_s
        taken: set[int] = set()
        for job in order:
            since = job.fabric_held_since
            if (
                since is None
                or job.topology != ANY
                or not self.fabric_wait_s <= self.now - since < bound
                or self._fabric_level(job) is None
            ):
                continue
            n = job.gpus // GPUS_PER_TRAY
            owners = cluster.usable_owners(job.department, borrow=True)
            counts = [cluster.group_whole[owner][depth] for owner in owners]
            best: tuple[int, int] | None = None  # (whole free trays, unit)
            for g, trays in enumerate(cluster.group_trays[depth]):
                if g in taken or trays < n:
                    continue
                free = sum(count[g] for count in counts)
                if best is None or free > best[0]:
                    best = (free, g)
            if best is None:
                continue
            taken.add(best[1])
            self.unit_reserved[job.id] = best[1]
        for g in taken:
            self.unit_trays.extend(
                t
                for r in cluster.group_racks[depth][g]
                for p in cluster.rack_parts[r]
                for t in cluster.part_trays[p]
                if not cluster.tray_held[t]
            )
        cluster.hold(self.unit_trays)

    def _fabric_wait_over(self, job: PendingJob) -> bool:
        """`job`'s fabric wait has run out: `Options.fabric_wait_s` since a pass first held it (module
        docstring, Fabric wait); never before it was held."""
        since = job.fabric_held_since
        return since is not None and self.now - since >= self.fabric_wait_s

    def _fabric_level(self, job: PendingJob) -> str | None:
        """The fabric's lowest level (the scalable unit) when `job` needs more than one rack's trays and one
        unit has that many (busy or not): what it may wait for (`Options.fabric_wait_s`); else None (a job
        larger than any unit expands at once, to the narrowest wider group with room)."""
        cluster = self.cluster
        n = max(1, job.gpus // GPUS_PER_TRAY)
        if cluster.fabric.empty or job.gpus <= GPUS_PER_TRAY or n <= cluster.max_rack_trays:
            return None
        if any(trays >= n for trays in cluster.group_trays[-1]):
            return cluster.fabric.levels[-1]
        return None

    def _may_reserve(self, job: PendingJob, in_quota: bool) -> bool:
        """The head of the queue (the first `max_reservations` jobs that wait) gets reservations, and so
        does each in-quota multi-tray job that waits, up to `in_quota_reservations` more."""
        if (
            len(self.reserved) >= self.max_reservations
            and not (
                in_quota and job.gpus > GPUS_PER_TRAY and self.in_quota_reserved < self.in_quota_reservations
            )
            and not self._fabric_reservation(job)
        ):
            return False  # the most common answer, found without looking at the reservations
        return job.id not in self.reserved_ids

    def _fabric_reservation(self, job: PendingJob) -> bool:
        """`job` waits inside a unit (the fabric wait) and one of `Options.fabric_reservations` is left."""
        return job.within is not None and self.fabric_reserved < self.options.fabric_reservations

    def _why_with_reservation(self, request: Request) -> str:
        self.cluster.unhold(self.held_trays)
        try:
            fits = place(self.cluster, request, self.policy) is not None
            words = why_not(self.cluster, request)
        finally:
            self.cluster.hold(self.held_trays)
        if fits:
            head = self.reserved[0]
            return (
                say(RESERVED_FOR_HEAD, job=head.job_id, wait=minutes(head.start_at - self.now))
                + CLAUSES
                + WOULD_DELAY_HEAD
            )
        return words

    def run(self) -> PassResult:
        # Negated department priorities, looked up once per job (unknown departments: 0).
        rank = {name: -department.priority for name, department in self.departments.items()}
        if any(rank.values()):
            order = sorted(self.pending, key=lambda j: (rank.get(j.department, 0), j.submitted_at, j.id))
        else:  # every priority 0 (unknown departments too): the same order, sorted in C
            order = sorted(self.pending, key=attrgetter("submitted_at", "id"))
        # The sweeps answer the commonest cases of `_consider` inline (a long queue is mostly over-quota
        # work whose shape did not fit); every other job goes through `_consider`. Same decisions.
        departments, leaves, leaf_held, in_quota = (
            self.departments,
            self.pending_leaf,
            self.leaf_held,
            self.in_quota,
        )
        if self.options.fabric_unit_reservation_s and self.fabric_wait_s and self.policy == RACKPLANE:
            self._reserve_units(order)
        # Over-quota jobs wait for the second sweep, by leaf, each leaf's in queue order.
        later: dict[tuple[str, str | None], list[PendingJob]] = defaultdict(list)
        # The departments the inline test applies to, by name -> their leaf without a project (no limit; a
        # job of a department with projects looks its own leaf up).
        unlimited: dict[str, tuple[str, str | None]] = {
            name: (name, None)
            for name, department in departments.items()
            if department.limit is None and name not in self.projects
        }
        # Their room in the in-quota share: what `leaf_held[leaf] + gpus > in_quota[leaf]` compares, kept
        # as it changes (only `_consider` changes what a leaf holds).
        room = {name: in_quota[leaf] - leaf_held[leaf] for name, leaf in unlimited.items()}
        leaf: tuple[str, str | None] | None
        for job in order:
            left = room.get(job.department)
            if left is not None:
                if job.gpus > left and job.priority_class in PREEMPTIBLE_CLASSES:
                    later[unlimited[job.department]].append(job)  # over quota: the second sweep
                    continue
                leaf = None  # a candidate: `_consider` below
            else:
                leaf = None
                department = departments.get(job.department)
                if department is not None and department.limit is None and leaves[job.id][1] is None:
                    leaf = leaves[job.id]
            if (
                leaf is not None
                and leaf_held[leaf] + job.gpus > in_quota[leaf]
                and job.priority_class in PREEMPTIBLE_CLASSES  # else its training may give way
            ):
                later[leaf].append(job)  # over quota: the second sweep, after every in-quota job
                continue
            if not self._consider(job, sweep=1):
                later[leaves[job.id]].append(job)
            for name, own in unlimited.items():
                room[name] = in_quota[own] - leaf_held[own]
        # Over quota: departments furthest below their fair share first, in (priority, standing, submission,
        # id) order: a leaf's jobs are in queue order, and leaves whose (priority, standing) ties are merged
        # back into queue order (submission, id: their priorities are equal), as a stable sort of them all
        # in queue order by (priority, standing) would leave them.
        below: dict[tuple[str, str | None], float] = {
            leaf: leaf_held[leaf] - self.fair[leaf] for leaf in self.fair
        }
        if self.options.half_life_s is not None:
            for leaf, standing in self._history().items():
                below[leaf] += standing
        tied: dict[tuple, list[tuple[str, str | None]]] = {}
        for leaf in later:
            tied.setdefault((rank.get(leaf[0], 0), below.get(leaf, 0)), []).append(leaf)
        segments: list[tuple[tuple[str, str | None] | None, list[PendingJob]]] = []
        for key in sorted(tied):
            group = tied[key]
            if len(group) == 1:
                segments.append((group[0], later[group[0]]))
            else:
                merged = sorted((job for leaf in group for job in later[leaf]), key=_QUEUE_ORDER)
                segments.append((None, merged))
        # An over-quota job stops at `failed` and waits without a reservation when its shape did not fit,
        # no more reservations are taken, and neither its fallback nor words are asked for: answered here,
        # with what depends only on the job's leaf looked up once per leaf.
        quick = not self.explain and not self.fallback_borrowers and not self.options.per_reservation_backfill
        failed, reserved, waiting, owners = (
            self.failed,
            self.reserved,
            self.result.waiting,
            self.cluster.owners,
        )
        now, max_reservations, consider = self.now, self.max_reservations, self._consider

        def plain(leaf: tuple[str, str | None]) -> tuple[bool, str | None]:
            """Whether the first sweep's test applies to the leaf's jobs (a department without a limit, no
            project), and the owner its jobs' shapes are cached under."""
            department = departments.get(leaf[0])
            simple = leaf[1] is None and department is not None and department.limit is None
            return simple, leaf[0] if leaf[0] in owners else None

        plain_of = {leaf: plain(leaf) for leaf in later}
        for one_leaf, jobs in segments:
            if one_leaf is not None:
                sweep_leaf = one_leaf
                simple, owner = plain_of[sweep_leaf]
                # Its room in the in-quota share (`leaf_held[leaf] + gpus > in_quota[leaf]` compares it), read
                # again after each `_consider`: nothing else changes what the leaf holds.
                room_left = in_quota[sweep_leaf] - leaf_held[sweep_leaf] if simple else 0
            for job in jobs:
                if quick and len(reserved) >= max_reservations:
                    if one_leaf is None:
                        sweep_leaf = leaves[job.id]
                        simple, owner = plain_of[sweep_leaf]
                        room_left = in_quota[sweep_leaf] - leaf_held[sweep_leaf] if simple else 0
                    if (
                        simple
                        and job.gpus > room_left
                        and job.priority_class in PREEMPTIBLE_CLASSES
                        and job.borrower_fallback_after_s is None  # else its fallback may be due
                        and job.id not in self.unit_reserved  # else a reserved unit may take it
                    ):
                        backfill = self.all_reserved if now + job.time_limit_s <= self.reserved_from else ()
                        if (job.gpus, job.topology, owner, backfill, True) in failed:
                            waiting[job.id] = ""
                            continue
                consider(job, sweep=2)
                if one_leaf is not None and simple:
                    room_left = in_quota[sweep_leaf] - leaf_held[sweep_leaf]
        self.cluster.unhold(self.held_trays)
        self.cluster.unhold(self.unit_trays)
        if self.explain:
            deferred = {job.id for jobs in later.values() for job in jobs}
            self.result.queue = [job.id for job in order if job.id in waiting and job.id not in deferred] + [
                job.id for _, jobs in segments for job in jobs if job.id in waiting
            ]
        if self.result.started or self.result.preempted:  # else the standing is the one of the start
            self._restand()
        if self.standing_order is not None and self.moved:  # the order the next pass starts from: as it
            self._standing_now()  # stands after this one (the last look's restood jobs moved)
        running = self.running
        self.result.over_quota = dict(zip(running, map(_OVER_QUOTA, running.values()), strict=True))
        started = {start.job_id for start in self.result.started}
        self.result.standing_changes = {
            job_id: job.over_quota
            for job_id, given in self.given.items()
            if (job := running.get(job_id)) is not None
            and job.over_quota != given.over_quota
            and job_id not in started
        }
        # A start is reported with its standing after the pass (same as the jobs already running).
        self.result.started = [
            replace(s, over_quota=self.result.over_quota.get(s.job_id, s.over_quota))
            for s in self.result.started
        ]
        return self.result


@dataclass(frozen=True)
class Options:
    """The pass's rules that can be tuned (the portal runs the defaults; the simulator measures others)."""

    max_reservations: int = 2  # reservations for the first jobs that wait, whatever their standing
    in_quota_reservations: int = 0  # more, for in-quota multi-tray jobs that wait (see _may_reserve)
    checkpoint_loss_s: float = CHECKPOINT_LOSS_S  # the work a preempted job loses (reclaim weighs it)
    least_loss_reclaim: bool = True  # reclaim: the placement that loses the least work (see _cheapest)
    # Measured and not adopted (docs/simulator.md): no better on the replay, so off by default.
    reclaim_aware_reservations: bool = False  # an in-quota job's reservation counts staying borrowers gone
    per_reservation_backfill: bool = False  # backfill may use a reservation's trays if it ends before it
    fallback_borrowers: bool = False  # borrowers may take their fallback topology too
    # Reclaim only when waiting for trays to free up (by time limits) would cost the job's GPUs more
    # GPU-seconds than the preempted work loses. Off: it trades guarantee shortfall for lost work under
    # every policy (docs/simulator.md), and the guarantee comes first.
    reclaim_when_cheaper: bool = False
    # A running job is not preempted (reclaimed) before it has run this long, per priority class (KAI's
    # reclaim-min-runtime, Slurm's PreemptExemptTime): work that just started keeps running long enough to
    # make progress (and checkpoint) instead of thrashing. Absent or 0: preemptible at once.
    min_runtime_s: Mapping[str, float] = field(default_factory=dict)
    # An in-quota job may preempt borrowed work only once it has waited this long since its submission
    # (trays that free up by themselves meanwhile cost nobody any work). 0: at once.
    preempt_after_s: float = 0.0
    # Historical fair share (module docstring): the half-life the departments' `decayed_usage` was decayed
    # with; None: over-quota work is ordered by the instant's standing only (the usage is ignored).
    half_life_s: float | None = None
    # A multi-rack job that could fit one scalable unit (the fabric's lowest level) waits for one up to this
    # long from the first pass that held it (when it could have started across units), then expands
    # (module docstring, Fabric wait); 0: at once. 2 h: measured on
    # the replay's tuning half (docs/simulator.md, The compute fabric). No effect without a fabric.
    fabric_wait_s: float = 7200.0
    # More reservations (beyond max_reservations) for jobs waiting inside a unit: the trays that free up
    # earliest in one unit are held for them, so small jobs do not keep every unit fragmented while they wait
    # (backfill may still use them when it ends first).
    fabric_reservations: int = 0
    # With a value above 1 (the site's estimate of how much slower a job runs across scalable units), a job
    # in its fabric wait expands at once when no unit will have room for it sooner than spanning units
    # would cost it (`_a_unit_is_near`); it waits only for a unit that frees up soon enough.
    fabric_wait_slowdown: float = 0.0
    # Unit packing (scheduling.engine.placement, `Request.pack`): work of at most one rack opens trays in the
    # fullest scalable unit that has room, so whole units stay free for multi-rack jobs. No effect without a
    # fabric.
    fabric_packing: bool = False
    # Unit reservation after the fabric wait (module docstring, Fabric wait): a job whose fabric wait has run
    # out waits up to this much longer for one unit, with the unit that has the most whole free trays
    # reserved for it (no new work starts there but in-quota work that fits nowhere else); then it expands.
    # 0: it expands when its fabric wait runs out.
    fabric_unit_reservation_s: float = 0.0
    # A job whose fabric wait (and unit reservation) ran out while it could not start anywhere (its quota,
    # or trays taken by other work) is held again from when it next could start across units: each hold is
    # bounded by the wait, and a wait that ran out while the job could not have started anyway is not spent.
    fabric_wait_again: bool = False


def schedule(
    cluster: Cluster,
    departments: list[Department],
    running: list[RunningJob],
    pending: list[PendingJob],
    now: float,
    policy: str = RACKPLANE,
    *,
    explain: bool = True,
    standing: StandingOrder | None = None,
    **options,
) -> PassResult:
    """Run one pass. `cluster` must hold the running jobs' allocations (by job id); it is changed in place.
    `standing`: the last pass's `PassResult.standing`, if kept (the standing order starts from it: the
    same result, sooner). `options`: fields of `Options` (e.g. ``max_reservations=1``)."""
    return _Pass(
        cluster, departments, running, pending, now, policy, explain, Options(**options), standing
    ).run()
