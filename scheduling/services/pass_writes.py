"""What a scheduling pass writes back, under the row locks of the jobs it decides about: the decisions still
valid once locked, each started job's GPUs (Allocation rows) and placement, each preempted job back in the
queue (its backend job stopped), running jobs' in-quota/borrowed standing, waiting jobs' reasons and the job
events of it all. Set-based: one statement per kind of change (the audit and job events in bulk), whatever
the number of jobs; Allocation's unique GPU constraint makes giving one GPU twice impossible.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable
from datetime import UTC, datetime

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.db.models import F
from django.utils import timezone

from core.enqueue import enqueue
from core.notifications.recording import enabled_subscriptions
from core.task_names import SYNC_JOBS
from scheduling import pass_cluster, pass_inputs
from scheduling.choices import HOLDING_STATES, JobEventKind, JobState, Topology
from scheduling.engine import placement as engine_placement
from scheduling.engine.cluster import Cluster
from scheduling.engine.scheduler import PREEMPTIBLE_CLASSES, PassResult, Start
from scheduling.engine.words import CLAUSES, WAITING, plural, say
from scheduling.models import Allocation, BackendCancel, Job, JobEvent
from scheduling.services.actions import notify_job
from scheduling.services.admission import wait_words
from scheduling.words import (
    BACK_IN_QUEUE,
    IN_QUOTA,
    OVER_QUOTA,
    PLACED_ACROSS,
    PLACED_MANY,
    PLACED_ONE,
    PLACED_WHY,
    PREEMPTED,
    RECLAIMED_BY,
)
from tenancy.models import Department

# The columns a pass reads of the jobs it decides about, under their row locks (the audit's before-values).
# What it reads of the running and pending jobs: pass_inputs (`gather`).
_LOCKED = (
    "pk",
    "name",
    "state",
    "department_id",
    "gpus",
    "priority_class",
    "backend",
    "backend_id",
    "placement",
    "placed_at",
    "started_at",
    "over_quota",
    "pending_reason",
    "fabric_held_since",
    "backend_message",
    "dispatch_attempts",
    "next_dispatch_at",
    "project_id",
    "preemptions",
    "submitted_by_id",  # who hears of a preemption (notify_job)
)
# What a preemption sets on its victim (besides counting it), and a start on its job (besides where it
# goes and its standing).
REQUEUED = {
    "state": JobState.PENDING,
    "over_quota": False,
    "backend_id": "",
    "backend_message": "",
    "placed_at": None,
    "started_at": None,
    "next_dispatch_at": None,
    "pending_reason": say(WAITING, reason=PREEMPTED) + CLAUSES + BACK_IN_QUEUE,
}


def _placed(now) -> dict:
    return {
        "state": JobState.STARTING,
        "placed_at": now,
        "pending_reason": "",
        "fabric_held_since": None,
        "backend_message": "",
        "dispatch_attempts": 0,
        "next_dispatch_at": None,
    }


def _event(job_id: int, kind: str, message: str = "", placement=None) -> dict:
    """A JobEvent's values (`insert_events` writes them all at once)."""
    return {"job_id": job_id, "kind": kind, "message": message[:500], "placement": placement or []}


def _recordset(model, rows: list[dict]) -> tuple[str, str]:
    """PostgreSQL: rows of column values as one JSON parameter and its `jsonb_to_recordset` column list.

    One string to quote: the driver quotes every element of an array parameter in Python (a regular
    expression per quote character), which costs more than the query for rows of text and JSON."""
    columns = {f.column: f for f in model._meta.concrete_fields}
    names = list(rows[0])
    typed = ", ".join(f'"{name}" {columns[name].db_type(connection)}' for name in names)
    return json.dumps(rows, cls=DjangoJSONEncoder), typed


def insert_events(events: list[dict]) -> None:
    """The pass's job events, made now: one INSERT (PostgreSQL) or bulk_create."""
    if not events:
        return
    at = timezone.now()
    if connection.vendor != "postgresql":
        JobEvent.objects.bulk_create(JobEvent(**event, at=at) for event in events)
        return
    data, typed = _recordset(JobEvent, events)
    names = ", ".join(f'"{name}"' for name in events[0])
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {JobEvent._meta.db_table} ({names}, at) "
            f"SELECT {names}, %s FROM jsonb_to_recordset(%s::jsonb) AS v({typed})",
            [at, data],
        )


def _update_each(rows: dict[int, dict], common: dict | None = None) -> None:
    """Set `common` on the jobs `rows` names and each its own values ({pk: {field: value}}, the same fields
    in each). PostgreSQL: one UPDATE joined to the values (Django's bulk_update writes a CASE per row and
    field, which costs more to build than to run); elsewhere bulk_update."""
    if not rows:
        return
    common = common or {}
    names = list(next(iter(rows.values())))
    if connection.vendor != "postgresql":
        jobs = [Job(pk=pk, **common, **values) for pk, values in rows.items()]
        Job.objects.bulk_update(jobs, [*common, *names], batch_size=500)
        return
    meta = Job._meta
    sets, params = [], []
    for name, value in common.items():
        model_field = meta.get_field(name)
        sets.append(f'"{model_field.column}" = %s')
        params.append(model_field.get_db_prep_save(value, connection))
    columns = [meta.get_field(name).column for name in names]
    sets += [f'"{column}" = v."{column}"' for column in columns]
    data, typed = _recordset(
        Job,
        [{"id": pk, **dict(zip(columns, values.values(), strict=True))} for pk, values in rows.items()],
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {meta.db_table} SET {', '.join(sets)} FROM jsonb_to_recordset(%s::jsonb) AS v({typed}) "
            f"WHERE {meta.db_table}.id = v.id",
            [*params, data],
        )


def _int_array(values) -> str:
    """A PostgreSQL array literal of integers: one string to quote, not one parameter per element."""
    return "{" + ",".join(map(str, map(int, values))) + "}"


@contextlib.contextmanager
def pipelined():
    """PostgreSQL: the statements made inside are sent without waiting for each one's answer (psycopg's
    pipeline mode): the server runs them while the pass goes on with its Python work (the audit's and the
    job events' rows, the kept cluster), and the block waits for them all as it ends. A statement's error
    raises there at the latest (as Django's error: IntegrityError for a GPU given twice), inside the pass's
    transaction, which rolls back as before. Only writes belong inside: a read waits for everything sent
    before it, and Django's `save()` and `update()` cannot count the rows of an unanswered statement.
    Elsewhere: nothing changes."""
    if connection.vendor != "postgresql":
        yield
        return
    connection.ensure_connection()
    with connection.wrap_database_errors, connection.connection.pipeline():
        yield


@functools.cache
def _allocation_foreign_keys() -> str:
    """Allocation's foreign-key constraints (to its job and to its GPU), as SET CONSTRAINTS names them:
    the names Django's schema editor gave them."""
    editor = connection.SchemaEditorClass(connection)
    return ", ".join(
        str(editor._fk_constraint_name(Allocation, field, "_fk_%(to_table)s_%(to_column)s"))
        for field in (Allocation._meta.get_field("job"), Allocation._meta.get_field("gpu"))
    )


def _insert_allocations(allocations: list[tuple], now) -> Callable[[], dict[int, int]]:
    """Allocation rows for (job, GPU, ...) tuples, made at `now`; returns what gives each job's highest
    allocation id (the kept cluster's check, scheduling.pass_cache), to call once the id is needed (inside
    `pipelined`, the insert's answer is waited for then). PostgreSQL: one INSERT from two arrays (no model
    instance per row), then its rows' foreign keys checked at once: the checks a commit would make (deferred
    constraints), the same ones, made while the pass goes on (`pipelined`) instead of after it; elsewhere
    bulk_create."""
    if not allocations:
        return dict
    if connection.vendor != "postgresql":
        made = Allocation.objects.bulk_create(Allocation(job_id=row[0], gpu_id=row[1]) for row in allocations)
        last: dict[int, int] = {}
        for allocation in made:
            last[allocation.job_id] = max(last.get(allocation.job_id, 0), allocation.pk or 0)
        return lambda: last
    cursor = connection.cursor()
    cursor.execute(
        f"WITH made AS (INSERT INTO {Allocation._meta.db_table} (job_id, gpu_id, created_at) "
        "SELECT job_id, gpu_id, %s FROM unnest(%s::bigint[], %s::bigint[]) AS v(job_id, gpu_id) "
        "RETURNING job_id, id) SELECT job_id, max(id) FROM made GROUP BY job_id",
        [now, _int_array(row[0] for row in allocations), _int_array(row[1] for row in allocations)],
    )
    constraints = _allocation_foreign_keys()
    with connection.cursor() as checks:
        # Back to deferred after: Allocation's constraints are (Django's default), and the pass makes no
        # other allocation after these.
        checks.execute(f"SET CONSTRAINTS {constraints} IMMEDIATE")
        checks.execute(f"SET CONSTRAINTS {constraints} DEFERRED")

    def last_ids() -> dict[int, int]:
        with cursor:
            return dict(cursor.fetchall())

    return last_ids


def _changes(before: dict[int, tuple], after: dict[int, dict]) -> dict[int, dict]:
    """{pk: {field: (before, after)}} of the fields that change (for core.audit.record_bulk_change)."""
    changes = {}
    for pk, values in after.items():
        row = before[pk]
        diff = {
            name: (getattr(row, name), value) for name, value in values.items() if getattr(row, name) != value
        }
        if diff:
            changes[pk] = diff
    return changes


def lock_decided(result: PassResult, restand: dict[int, bool]) -> dict:
    """Lock the jobs the decisions change (in pk order, one query) and read them as they are now."""
    touched = {s.job_id for s in result.started} | set(result.preempted) | set(restand)
    if not touched:
        return {}
    return {
        row.pk: row
        for row in Job.objects.select_for_update()
        .filter(pk__in=touched)
        .order_by("pk")
        .values_list(*_LOCKED, named=True)
    }


def keep_decisions_still_valid(result: PassResult, locked: dict) -> dict:
    """Drop the decisions on jobs no longer as they were read; the locked holding jobs by pk.

    The decisions were made on rows read without locks: a job may have been cancelled, finished or handed
    to its backend meanwhile (a dispatch or cancel in flight holds the row lock; `lock_decided` waited for it
    and reads its outcome)."""
    holding = {pk: row for pk, row in locked.items() if row.state in HOLDING_STATES}
    result.preempted = {v: j for v, j in result.preempted.items() if v in holding}
    result.started = [s for s in result.started if locked[s.job_id].state == JobState.PENDING]
    return holding


def cancel_preempted(victims, for_job: dict[int, int]) -> None:
    """Ask each preempted job's backend to stop it (`for_job`: victim pk -> the job it gives way to); a
    cancel already asked for the same backend job stays as it is."""
    cancels = [
        BackendCancel(
            job_id=victim.pk,
            backend=victim.backend,
            backend_id=victim.backend_id,
            reason=f"preempted for job {for_job[victim.pk]}"[:200],
        )
        for victim in victims
        if victim.backend_id
    ]
    if cancels:
        BackendCancel.objects.bulk_create(cancels, ignore_conflicts=True)
        enqueue(SYNC_JOBS)


def preempt(result: PassResult, holding: dict, pending: dict, slug: dict[int, str]):
    """Stop each victim in its backend, free its GPUs and put it back in the queue; (changes, events)."""
    victims = [holding[pk] for pk in result.preempted]
    if not victims:
        return {}, []
    cancel_preempted(victims, result.preempted)
    events = []
    subscriptions = enabled_subscriptions()  # once for every victim's notification
    for victim in victims:
        for_job = result.preempted[victim.pk]
        events.append(
            _event(
                victim.pk,
                JobEventKind.PREEMPTED,
                f"preempted: its GPUs were borrowed (over quota) and {slug[pending[for_job].department_id]} "
                f"reclaimed them for job #{for_job} within its guarantee; back in the queue",
                victim.placement,
            )
        )
        notify_job(
            victim,
            JobEventKind.PREEMPTED,
            say(RECLAIMED_BY, department=slug[pending[for_job].department_id]) + CLAUSES + BACK_IN_QUEUE,
            department_slug=slug[victim.department_id],
            subscriptions=subscriptions,
        )
    pks = [victim.pk for victim in victims]
    Allocation.objects.filter(job_id__in=pks).delete()
    Job.objects.filter(pk__in=pks).update(**REQUEUED, preemptions=F("preemptions") + 1)
    after = {victim.pk: {**REQUEUED, "preemptions": victim.preemptions + 1} for victim in victims}
    return _changes(holding, after), events


_ONE = {Topology.PARTITION: "one NVLink partition", Topology.RACK: "one rack"}
WHY_HERE = " · why here: "  # before the engine's sentence in a placed event (the job page reads it back)


def _placed_event(
    job_id: int, start: Start, cluster: Cluster, hosts: list[str], waited_s: float | None = None
) -> dict:
    shape = engine_placement.describe(cluster, start.placement)
    where = ", ".join(sorted({cluster.partition_label(cluster.tray_part[t]) for t, _ in start.placement}))
    fallback = ""
    if start.fell_back_from is not None:
        racks = sorted({cluster.rack_name[cluster.tray_rack[t]] for t, _ in start.placement})
        on = f"rack {racks[0]}" if len(racks) == 1 else f"racks {', '.join(racks)}"
        waited = f"waited {wait_words(waited_s)}" if waited_s is not None else "waited"
        fallback = (
            f"{waited} for {_ONE.get(start.fell_back_from, start.fell_back_from)}; placed on {on} as its "
            "submitter allowed: "
        )
    return _event(
        job_id,
        JobEventKind.PLACED,
        fallback + placed_words(start.over_quota, len(hosts), where, shape["partitions"], start.why),
        hosts,
    )


def placed_words(over_quota: bool, trays: int, where: str, partitions: int = 1, why: str = "") -> str:
    """A placed event's sentence (scheduling.words' templates, read back on the job's page)."""
    standing = OVER_QUOTA if over_quota else IN_QUOTA
    words = say(plural(trays, PLACED_ONE, PLACED_MANY), standing=standing, trays=trays, partitions=where)
    if partitions > 1:
        words = say(PLACED_ACROSS, placed=words, parts=partitions)
    return say(PLACED_WHY, placed=words, why=why) if why else words


def start_jobs(
    result: PassResult, state: pass_cluster.ClusterState, locked: dict, now, pending: dict | None = None
):
    """Allocate each started job its GPUs and mark it placed (STARTING, for dispatch); (changes, events,
    `record`: to call once the pass has sent its writes, it notes the allocations for the kept cluster).

    The free GPUs of the trays come from the cluster as it was read (with the preempted jobs' GPUs free);
    each start takes from the front of its trays' lists, so two small jobs packed on one tray get
    different GPUs."""
    if not result.started:
        return {}, [], lambda: None
    cluster = state.cluster
    freed = {gpu for victim in result.preempted if victim in state.held for gpu in state.held[victim].gpus}
    free_on = state.free_gpus({t for start in result.started for t, _ in start.placement}, freed)
    allocations: list[tuple[int, int, int]] = []  # (job, GPU, tray index)
    own: dict[int, dict] = {}
    events: list[dict] = []
    for start in result.started:
        for t, n in start.placement:
            gpus = free_on.get(t, [])
            allocations.extend((start.job_id, gpu_id, t) for gpu_id in gpus[:n])
            del gpus[:n]
        own[start.job_id] = {
            "placement": [cluster.tray_host[t] for t, _ in start.placement],
            "over_quota": start.over_quota,
        }
    # The unique GPU constraint refuses a double allocation outright (the whole pass rolls back).
    last = _insert_allocations(allocations, now)
    common = _placed(now)
    _update_each(own, common)
    # The job events once the writes are sent (inside `pipelined`, the database makes them meanwhile).
    for start in result.started:
        waited = None
        if start.fell_back_from is not None and pending and start.job_id in pending:
            waited = now.timestamp() - pass_inputs.epoch(pending[start.job_id].created_at)
        events.append(_placed_event(start.job_id, start, cluster, own[start.job_id]["placement"], waited))

    def record() -> None:
        # The next pass of this process finds them here (if this one commits) instead of reading them; their
        # version is placed_at as pass_inputs.read_running gives it.
        state.record(now.timestamp(), allocations, last())

    return _changes(locked, {pk: {**common, **values} for pk, values in own.items()}), events, record


def _standing_words(
    job,
    over_quota: bool,
    result: PassResult,
    departments: dict[int, Department],
    projects: dict | None = None,
) -> str:
    department = departments[job.department_id]
    share = result.in_quota_share.get(department.slug, 0)
    quota = f"{department.slug}'s guarantee is {department.guaranteed_gpus} GPUs (in-quota share now {share})"
    project = (projects or {}).get(getattr(job, "project_id", None))  # (pk, department, slug, guarantee, ...)
    key = (department.slug, project[2]) if project is not None else None
    if not over_quota and job.pk in result.sibling_borrowed:  # in quota for the department, not its leaf
        own = (
            f"project {key[0]}-{key[1]}'s own guarantee of {project[3]} GPUs"
            if project is not None
            else "what its projects leave to work without a project"
        )
        return (
            f"now in quota: {quota}; this job's {job.gpus} GPUs fit within it beyond {own}, in its sibling "
            "projects' unused guarantee, which their in-quota work may take back"
        )
    if key in result.project_in_quota_share and not over_quota:  # within its project's own share
        share = result.project_in_quota_share[key]
        quota = f"project {key[0]}-{key[1]}'s guarantee is {project[3]} GPUs (in-quota share now {share})"
    if not over_quota:
        return f"now in quota: {quota}; with its older running jobs this job's {job.gpus} GPUs fit within it"
    preemptible = " (preemptible)" if job.priority_class in PREEMPTIBLE_CLASSES else ""
    owner = result.on_dedicated.get(job.pk)
    if owner is not None:
        return (
            f"now borrowed{preemptible}: it runs on a partition dedicated to {owner}, whose in-quota work "
            "reclaims it first"
        )
    return f"now borrowed{preemptible}: {quota} and its older running jobs hold it"


def write_standing(
    result: PassResult,
    restand: dict[int, bool],
    holding: dict,
    departments: dict[int, Department],
    projects: dict | None = None,
):
    """Write the pass's in-quota/borrowed standing of the running jobs whose standing changed (`restand`:
    not started or preempted by this pass); (changes, their QUOTA events)."""
    changed = {pk: over for pk, over in restand.items() if pk in holding and holding[pk].over_quota != over}
    events = []
    for over in (False, True):
        pks = [pk for pk, value in changed.items() if value == over]
        if pks:
            Job.objects.filter(pk__in=pks).update(over_quota=over)
    for pk, over in changed.items():
        words = _standing_words(holding[pk], over, result, departments, projects)
        events.append(_event(pk, JobEventKind.QUOTA, words))
    return _changes(holding, {pk: {"over_quota": over} for pk, over in changed.items()}), events


def record_waiting_reasons(
    waiting: dict[int, str], stored: dict[int, tuple], held: dict[int, float | None] | None = None
) -> None:
    """Store why each job still waits and, for the jobs the fabric wait held for the first time (`held`: job
    -> since, on the pass's clock: PassResult.fabric_held_since), since when; one statement, writing only
    the jobs whose reason or hold changed. `stored`: each pending job's (reason, held since) as read."""
    held = held or {}
    rows = {}
    for job_id, reason in waiting.items():
        if job_id not in stored:
            continue
        was_reason, was_held = stored[job_id]
        if job_id in held:  # None: its hold is forgotten (the engine's Options.fabric_wait_again)
            at = held[job_id]
            since = datetime.fromtimestamp(at, UTC) if at is not None else None
        else:
            since = was_held
        if was_reason != reason[:500] or since != was_held:
            rows[job_id] = {"pending_reason": reason[:500], "fabric_held_since": since}
    _update_each(rows)
