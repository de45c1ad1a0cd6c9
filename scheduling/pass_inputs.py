"""The scheduling pass's inputs from the database.

`gather` reads everything a pass decides from (departments, projects, running and pending jobs, the cluster
with the silent trays held out: scheduling.pass_cluster, kept between passes by scheduling.pass_cache) and
`PassInputs.engine_args` turns it into the engine's inputs. The pass (scheduling.services) and the job form's
dry run (scheduling.preview) both read through it, so the dry run cannot drift from the pass.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from itertools import compress
from operator import is_, itemgetter, not_

from django.conf import settings
from django.utils import timezone

from core.fabric import Fabric
from inventory.fabric import current_fabric
from scheduling import pass_cache
from scheduling.checks import minutes_of
from scheduling.choices import JobState
from scheduling.engine.cluster import Cluster
from scheduling.engine.scheduler import Department as EngineDepartment
from scheduling.engine.scheduler import PassResult, PendingJob, RunningJob, schedule
from scheduling.engine.scheduler import Project as EngineProject
from scheduling.jobspec import JobSpec
from scheduling.models import Job
from scheduling.pass_cluster import (  # noqa: F401  (read_running, OVER_QUOTA: read here by callers)
    OVER_QUOTA,
    RUNNING_COLUMNS,
    ClusterState,
    build,
    read_running,
    seconds_of,
)
from scheduling.usage import decayed_usage, department_usage
from tenancy.models import Department, Project


def epoch(value) -> float:
    """A timestamp in seconds since 1970 (now when None)."""
    return value.timestamp() if value is not None else time.time()


# The columns a pass reads of the pending jobs (the engine's PendingJob): the submitter's fields the engine
# reads (scheduling.jobspec: a field marked for the engine is read here without another list), and the
# queue's own.
PENDING_COLUMNS = ("pk", *JobSpec.ENGINE_COLUMNS, "created_at", "pending_reason", "fabric_held_since")


def project_rows() -> list[tuple]:
    """Every project as the engine reads it: (pk, department, slug, guarantee, weight, limit); one query."""
    return list(
        Project.objects.named()
        .order_by("pk")
        .values_list("pk", "department_id", "slug", "guaranteed_gpus", "over_quota_weight", "limit_gpus")
    )


def project_slugs(projects: list[tuple] | None = None) -> dict[int, str]:
    return {row[0]: row[2] for row in (project_rows() if projects is None else projects)}


def engine_departments(
    departments: list[Department],
    projects: list[tuple] | None = None,
    usage: dict[tuple[int, int | None], float] | None = None,
) -> list[EngineDepartment]:
    """The engine's departments, each with its projects (`project_rows`; read when not given), and, given
    `usage` (scheduling.usage.decayed_usage), their decayed usage (Historical fair share)."""
    by_department: dict[int, list[EngineProject]] = {}
    for pk, department_id, slug, guaranteed, weight, limit in (
        project_rows() if projects is None else projects
    ):
        by_department.setdefault(department_id, []).append(
            EngineProject(
                slug,
                guaranteed,
                float(weight),
                limit,
                decayed_usage=None if usage is None else usage.get((department_id, pk), 0.0),
            )
        )
    totals = None if usage is None else department_usage(usage)
    return [
        EngineDepartment(
            d.slug,
            d.guaranteed_gpus,
            float(d.over_quota_weight),
            d.limit_gpus,
            d.priority,
            tuple(by_department.get(d.pk, ())),
            decayed_usage=None if totals is None else totals.get(d.pk, 0.0),
        )
        for d in departments
    ]


_PK = itemgetter(0)  # of a `read_running` row


def engine_running_jobs(
    rows, slug: dict[int, str], kept: dict, projects: dict[int, str] | None = None
) -> list[RunningJob]:
    """The engine's RunningJob of each row. `kept` (the rows and RunningJobs of the last pass, under "rows"
    and "jobs" by pk, and the department and project slugs under None; brought up to this pass's in place)
    gives back the RunningJob of each row that is the very row read then (a kept cluster keeps the rows of
    unchanged jobs: scheduling.pass_cache): 47,700 at 10,000 racks, found in C, the few others made again.
    A row without a start ("started now") is made again at every pass. `projects`: project slugs by pk
    (`project_slugs`; read when not given)."""
    projects = project_slugs() if projects is None else projects
    if kept.get(None) != (slug, projects):  # a department renamed: every job may read differently
        kept.clear()
        kept.update({None: (slug, projects), "rows": {}, "jobs": {}})
    kept_rows, kept_jobs = kept["rows"], kept["jobs"]
    rows = list(rows)
    pks = list(map(_PK, rows))
    jobs = list(map(kept_jobs.get, pks))
    same = map(is_, map(kept_rows.get, pks), rows)
    started_now = 0
    for at in compress(range(len(rows)), map(not_, same)):
        pk = pks[at]
        _, department_id, gpus, limit, over_quota, priority_class, project_id, since, _ = rows[at]
        started = since if since is not None else time.time()
        jobs[at] = RunningJob(
            id=pk,
            department=slug[department_id],
            gpus=gpus,
            started_at=started,
            expected_end=started + limit * 60,
            over_quota=over_quota,
            priority_class=priority_class,
            project=projects.get(project_id),
        )
        if since is not None:
            kept_rows[pk], kept_jobs[pk] = rows[at], jobs[at]
        else:  # started now: made again next time
            started_now += 1
            kept_rows.pop(pk, None)
            kept_jobs.pop(pk, None)
    if len(kept_rows) != len(rows) - started_now:  # jobs gone since the last pass
        for pk in kept_rows.keys() - set(pks):
            del kept_rows[pk]
        for pk in kept_jobs.keys() - kept_rows.keys():
            del kept_jobs[pk]
    return jobs


def engine_pending_jobs(
    rows, slug: dict[int, str], projects: dict[int, str] | None = None
) -> list[PendingJob]:
    """The engine's PendingJob of each row (`PENDING_COLUMNS`, or a Job). `projects`: as for
    `engine_running_jobs`."""
    projects = project_slugs() if projects is None else projects
    return [
        PendingJob(
            id=j.pk,
            department=slug[j.department_id],
            gpus=j.gpus,
            topology=j.topology,
            priority_class=j.priority_class,
            submitted_at=epoch(j.created_at),
            time_limit_s=j.time_limit_minutes * 60,
            fallback_topology=j.fallback_topology or None,
            fallback_after_s=(j.fallback_after_minutes or 0) * 60,
            project=projects.get(j.project_id),
            fabric_held_since=seconds_of(j.fabric_held_since),
        )
        for j in rows
    ]


@dataclass
class PassInputs:
    """What a pass decides from, as `gather` read it."""

    state: ClusterState  # the cluster (silent trays held out), and what it was built from
    departments: list[Department]
    slug: dict[int, str]  # department pk -> slug
    project_rows: list[tuple]  # `project_rows`
    project_slug: dict[int, str]  # project pk -> slug
    running: dict[int, tuple]  # pk -> `read_running` row, of the running jobs on the cluster
    pending: dict[int, tuple]  # pk -> `PENDING_COLUMNS` row (named), of the pending jobs
    # Historical fair share, when the pass orders borrowers by it (settings): decayed GPU-seconds per
    # (department pk, project pk or None), and the engine's options that go with it.
    usage: dict[tuple[int, int | None], float] | None = None
    options: dict = field(default_factory=dict)

    @property
    def cluster(self) -> Cluster:
        return self.state.cluster

    def decide(self, now: datetime, extra_pending: Iterable = (), args: tuple | None = None) -> PassResult:
        """Run the engine on these inputs with the site's rules (`engine_options`, and `options`: the
        historical fair share's): the pass and the dry run both call this, so they cannot decide by
        different rules. `args`: `engine_args(now, extra_pending)` when the caller made them already (the
        pass reads the pending jobs it gave)."""
        return schedule(
            *(args or self.engine_args(now, extra_pending)),
            standing=self.state.standing or None,
            **engine_options(),
            **self.options,
        )

    def engine_args(self, now: datetime, extra_pending: Iterable = ()) -> tuple:
        """The engine's `schedule` arguments: (cluster, departments, running jobs, pending jobs, now); its
        keyword arguments are `options`. `extra_pending`: jobs (Job objects) queued behind the pending ones
        (the dry run's proposed job)."""
        return (
            self.cluster,
            engine_departments(self.departments, self.project_rows, self.usage),
            engine_running_jobs(self.running.values(), self.slug, self.state.running_jobs, self.project_slug),
            engine_pending_jobs([*self.pending.values(), *extra_pending], self.slug, self.project_slug),
            now.timestamp(),
        )


def engine_options() -> dict:
    """The site's scheduling rules that differ from the engine's defaults (scheduling.engine.scheduler.
    Options), from settings: the minimum run time before a running job of a class may be preempted
    (RACKPLANE_MIN_RUNTIME_MINUTES, per priority class), the grace an in-quota job waits before it may
    preempt (RACKPLANE_PREEMPT_AFTER_MINUTES). Checked at start-up (scheduling.checks)."""
    options: dict = {}
    min_runtime = {
        name: minutes * 60.0
        for name, value in settings.RACKPLANE_MIN_RUNTIME_MINUTES.items()
        if (minutes := minutes_of(value))
    }
    if min_runtime:
        options["min_runtime_s"] = min_runtime
    if grace := minutes_of(settings.RACKPLANE_PREEMPT_AFTER_MINUTES):
        options["preempt_after_s"] = grace * 60.0
    return options


def gather(*, kept: bool = True, fabric: Fabric | None = None) -> PassInputs:
    """Read everything a pass decides from, in a fixed handful of queries (tests/scheduling/
    test_pass_queries.py): the departments, the projects, the running jobs, the cluster with their GPUs
    (`read`: the one this process keeps when `kept`, else cold and not to be kept: a dry run must not touch
    the pass's), the silent trays held out (`silence`), the pending jobs, and the departments' decayed
    usage when the pass orders borrowers by it (settings.RACKPLANE_FAIRSHARE_ORDERS_BORROWERS: one query
    more). `fabric`: the compute fabric above the racks (core.fabric) multi-rack jobs are placed on: by
    default the inventory's (inventory.fabric.current_fabric, one query, made with a cold read of the
    cluster only: a kept cluster keeps it while its tables are unchanged; empty on a site that imported
    none: placed as if the fabric were flat). A pass calls `keep(state)` after."""
    departments = list(Department.objects.all())
    projects = project_rows()
    half_life_s = settings.RACKPLANE_FAIRSHARE_HALF_LIFE_S
    ordered = settings.RACKPLANE_FAIRSHARE_ORDERS_BORROWERS and half_life_s is not None
    usage = decayed_usage(timezone.now(), half_life_s) if ordered else None  # one query, when used
    if kept:
        state = pass_cache.read(current_fabric if fabric is None else fabric)
        holding = dict(state.running_rows)
    else:
        holding = {row[0]: row for row in read_running()}
        placed = {pk: row[-1] for pk, row in holding.items()}
        state = build(placed, fabric=current_fabric() if fabric is None else fabric)
    pass_cache.silence(state)  # nodes that stopped reporting: no new work there (node_silent rule)
    cluster = state.cluster
    for pk in holding.keys() - cluster.jobs.keys():  # running jobs not on the cluster (set operations: in C)
        del holding[pk]
    return PassInputs(
        state=state,
        departments=departments,
        slug={d.pk: d.slug for d in departments},
        project_rows=projects,
        project_slug=project_slugs(projects),
        running=holding,
        pending={
            row.pk: row
            for row in Job.objects.filter(state=JobState.PENDING, mig_slices=0)
            .order_by()
            .values_list(*PENDING_COLUMNS, named=True)
        },
        usage=usage,
        options={"half_life_s": half_life_s} if ordered else {},
    )
