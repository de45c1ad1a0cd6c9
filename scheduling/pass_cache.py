"""The cluster a process keeps between scheduling passes (PostgreSQL), checked with one query and brought up
to date instead of read cold (scheduling.pass_cluster):

* **the inventory** (racks, trays, GPUs, NVLink partitions, dedications, department slugs): triggers
  (migration scheduling 0010) log the id of every transaction that changes a column the cluster is built
  from (`CACHED_COLUMNS`), whatever made the change (a save, a bulk update, raw SQL, the admin). A kept
  cluster remembers the snapshot its inventory was read under; a logged transaction that snapshot did not
  see, or the log pruned past it, means a cold read. Exact: never a heuristic on counts or times.
* **the running jobs and their GPUs** change at every pass: triggers (migration scheduling 0033) log in
  `JOB_LOG` every job a transaction inserts, deletes or changes a column of that a pass reads
  (`JOB_COLUMNS`), and every job whose allocations it inserts or deletes. Each pass takes a job mark (the
  same kind of snapshot) and reads again only the rows of the jobs logged by transactions the last mark did
  not see (and by its own transaction: what it saw of that may be rolled back), and the allocations of the
  ones placed again or whose allocations changed; the other ~47,700 running jobs at 10,000 racks are kept
  as they are. When the log cannot say (pruned past the mark, a truncate, the last read's own transaction
  rolled back), every running job is read and compared, and the kept allocations must match the table's
  row count and highest id, else a cold read.

The engine changes the cluster it is given (starts, preemptions, held trays). After the pass `keep` puts it
back as it was read, by the difference of its jobs, so the next pass starts from the database's state
whether this one committed or rolled back; its own allocations arrive through the second point above.
Whatever the cache believes, Allocation's unique GPU constraint still refuses a GPU given twice.

Only the racks that changed are read again (issue 32: a cold read of 10,000 racks is seconds): the
triggers also log the racks each transaction changed (migration scheduling 0027, `CHANGE_RACKS`). When the
check finds changes, a new mark is taken, the racks the unseen transactions changed are read with the cold
read's own queries limited to them, and, when their trays are the same trays in the same partitions
(otherwise: a cold read), their GPUs, fabric and degradation are replaced and the running jobs holding GPUs
there are released and allocated again from their rows. A change the log cannot place on a rack (rack 0:
inserts, deletes, a department's slug, an allocation changed by hand) reads cold.

The fabric above the racks (inventory.fabric.current_fabric: a row per placed rack) is read with the cluster,
on a cold read only: its tables are logged too (migration scheduling 0030, `FABRIC_COLUMNS`; any change is
rack 0), so a kept cluster built on the fabric in use still has it while the log shows no change.

SQLite (the embedded default) has no triggers: every pass reads cold.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterable

from django.db import connection
from django.utils import timezone

from core import change_logs
from core.change_logs import database_key
from core.fabric import Fabric
from inventory.models import ComputeTray, Gpu
from inventory.staleness import silent_policy, silent_tray_pks
from scheduling.models import Allocation
from scheduling.pass_cluster import (
    RACK_PK,
    RUNNING_COLUMNS,
    ClusterState,
    Held,
    Mark,
    _rows,
    allocation_rows,
    build,
    degraded_tray_rows,
    group_allocations,
    read_running,
    schedulable_gpus_by_tray,
    tray_rows,
    unsettled_tray_rows,
)

# Table -> the columns the cluster is built from; the triggers of migration scheduling 0010 watch exactly
# these (tests/scheduling/test_pass_cache.py compares both with the SQL of the cold read's queries,
# scheduling.pass_cluster.INVENTORY_QUERIES).
CACHED_COLUMNS: dict[str, tuple[str, ...]] = {
    "inventory_rack": ("name",),
    "inventory_computetray": (
        "hostname",
        "rack_id",
        "slot",
        "partition_id",
        "state",
        "fabric_problems",
        "mig_layout",
    ),
    "inventory_gpu": ("tray_id", "index", "health", "fabric_state", "reported_clique_id", "mig_mode"),
    "inventory_nvlinkpartition": ("rack_id", "clique_id", "name", "degraded_reason"),
    "tenancy_dedicatedpartition": ("partition_id", "department_id"),
    "tenancy_department": ("slug",),
}
# The tables and columns of the fabric in use (inventory.fabric.current_fabric) the triggers of migration
# scheduling 0030 watch: any change logs rack 0 (a cold read, the fabric read again with the cluster).
FABRIC_COLUMNS: dict[str, tuple[str, ...]] = {
    "inventory_fabricimport": ("in_use",),
    "inventory_fabricgroup": ("name", "parent_id"),
    "inventory_rackplace": ("fabric_id", "rack_id", "unit_id"),
}
# Allocations changed in place (never by a pass: the admin) are logged too; made and deleted ones are not.
ALLOCATION_COLUMNS: dict[str, tuple[str, ...]] = {"scheduling_allocation": ("job_id", "gpu_id")}
# The columns of a job a pass reads of a running job (scheduling.pass_cluster.read_running) and what makes
# it one; the triggers of migration scheduling 0033 log the jobs whose columns here change, and the jobs
# whose allocations are inserted or deleted (as -pk), in JOB_LOG.
JOB_COLUMNS = ("state", "mig_slices", *RUNNING_COLUMNS[1:], "placed_at", "started_at")
JOB_LOG = "scheduling_jobchange"  # (xid, job): job 0 is every job; (0, N) the pruning horizon
JOB_PRUNE_AT = 20000  # job log rows: past this many a pass deletes the ones every snapshot since has seen
JOB_READ_ALL_AT = 5000  # changed jobs: past this many every running job is read (one scan, not a long list)
CHANGE_LOG = "scheduling_inventorychange"
CHANGE_RACKS = "scheduling_inventorychangerack"  # (xid, rack): rack 0 is every rack (migration 0027)
PRUNE_AT = 1000  # log rows: a cold read past this many deletes the ones every snapshot since has seen

_kept: dict[tuple, ClusterState] = {}
_kept_lock = threading.Lock()


def _database() -> tuple:
    return database_key()


def forget() -> None:
    """Drop every kept cluster in this process (the next pass reads cold)."""
    with _kept_lock:
        _kept.clear()


def kept() -> ClusterState | None:
    """The cluster this process keeps for the database in use, if any (for tests and the benchmark)."""
    with _kept_lock:
        return _kept.get(_database())


# --- PostgreSQL: the change log -------------------------------------------------------------------------


def has_log() -> bool:
    """Whether the database in use has the change log (PostgreSQL with migration scheduling 0010)."""
    return change_logs.has_log(CHANGE_LOG)


def _mark(prune: bool = True) -> Mark:
    """Where a read starts: taken before its first query, so whatever it reads was committed by then
    or later (never earlier than the snapshot says). Prunes the log now and then (`prune`: a cold read;
    a rack re-read still needs the rows of the transactions it reads about)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT txid_current_snapshot()::text, txid_current_if_assigned(), "
            f"(SELECT seq FROM {CHANGE_LOG} WHERE xid = txid_current_if_assigned()), "
            "pg_postmaster_start_time(), "
            f"(SELECT count(*) FROM (SELECT 1 FROM {CHANGE_LOG} LIMIT {PRUNE_AT + 1}) AS logged), "
            f"ARRAY(SELECT job_id FROM {JOB_LOG} WHERE xid = txid_current_if_assigned())"
        )
        snapshot, own, own_seq, postmaster, logged, own_jobs = cursor.fetchone()
        mark = Mark(snapshot, int(snapshot.split(":", 1)[0]), own, own_seq, postmaster, _own_jobs(own_jobs))
        if prune and logged > PRUNE_AT:
            # Every transaction older than this snapshot's oldest running one had ended before it; caches
            # read before the horizon (row xid 0) can no longer be checked and read cold.
            cursor.execute(f"DELETE FROM {CHANGE_LOG} WHERE xid > 0 AND xid < %s", [mark.xmin])
            cursor.execute(f"DELETE FROM {CHANGE_RACKS} WHERE xid < %s", [mark.xmin])
            cursor.execute(
                f"INSERT INTO {CHANGE_LOG} (xid, seq) VALUES (0, %s) ON CONFLICT (xid) "
                f"DO UPDATE SET seq = GREATEST({CHANGE_LOG}.seq, EXCLUDED.seq)",
                [mark.xmin],
            )
    return mark


# (unchanged, racks may be re-read; then the job log: a new mark's snapshot, own transaction and server
# start, whether the jobs it names since the kept mark are all that changed, those jobs, the log's rows)
_CHECK = f"""
SELECT
    pg_postmaster_start_time() = %(postmaster)s
    AND NOT EXISTS (
        SELECT 1 FROM {CHANGE_LOG}
        WHERE xid >= %(xmin)s
          AND NOT txid_visible_in_snapshot(xid, %(snapshot)s::txid_snapshot)
          AND (xid, seq) IS DISTINCT FROM (%(own)s::bigint, %(own_seq)s::bigint)
    )
    AND COALESCE((SELECT seq FROM {CHANGE_LOG} WHERE xid = 0), 0) <= %(xmin)s
    AND (
        %(own_seq)s::bigint IS NULL
        OR (
            EXISTS (SELECT 1 FROM {CHANGE_LOG} WHERE xid = %(own)s::bigint AND seq = %(own_seq)s::bigint)
            AND (
                %(own)s::bigint = txid_current_if_assigned()
                OR txid_status(%(own)s::bigint) = 'committed'
            )
        )
    ),
    pg_postmaster_start_time() = %(postmaster)s
    AND COALESCE((SELECT seq FROM {CHANGE_LOG} WHERE xid = 0), 0) <= %(xmin)s
    AND (
        %(own_seq)s::bigint IS NULL
        OR %(own)s::bigint = txid_current_if_assigned()
        OR txid_status(%(own)s::bigint) = 'committed'
    ),
    txid_current_snapshot()::text,
    txid_current_if_assigned(),
    pg_postmaster_start_time(),
    %(job_xmin)s::bigint IS NOT NULL
    AND pg_postmaster_start_time() = %(job_postmaster)s
    AND COALESCE((SELECT max(job_id) FROM {JOB_LOG} WHERE xid = 0), 0) <= %(job_xmin)s
    AND (
        %(job_own)s::bigint IS NULL
        OR (
            (
                %(job_own)s::bigint = txid_current_if_assigned()
                OR COALESCE(txid_status(%(job_own)s::bigint) = 'committed', false)
            )
            AND %(job_own_jobs)s::bigint[]
                <@ ARRAY(SELECT job_id FROM {JOB_LOG} WHERE xid = %(job_own)s::bigint)
        )
    ),
    ARRAY(
        SELECT DISTINCT job_id FROM {JOB_LOG}
        WHERE (xid >= %(job_xmin)s AND NOT txid_visible_in_snapshot(xid, %(job_snapshot)s::txid_snapshot))
           OR xid = %(job_own)s::bigint
    ),
    (SELECT count(*) FROM (SELECT 1 FROM {JOB_LOG} LIMIT %(job_cap)s) AS logged),
    ARRAY(SELECT job_id FROM {JOB_LOG} WHERE xid = txid_current_if_assigned())
"""
# The kept allocations' figures when every running job is read again (the job log cannot say which changed).
_ALLOCATIONS = "SELECT count(*), COALESCE(max(id), 0) FROM scheduling_allocation"

# The racks the transactions a mark did not see changed, and every rack its own transaction changed (a
# snapshot counts its own transaction as seen: a test, a seed; all of them, not only those after the read).
_RACKS = f"""
SELECT DISTINCT rack_id FROM {CHANGE_RACKS}
WHERE xid IN (
    SELECT xid FROM {CHANGE_LOG}
    WHERE xid >= %(xmin)s AND NOT txid_visible_in_snapshot(xid, %(snapshot)s::txid_snapshot)
) OR xid = %(own)s::bigint
"""


def _check(state: ClusterState) -> tuple[bool, bool, Mark, set[int] | None]:
    """(the inventory is as the kept mark read it, else whether the racks changed since may be re-read; a
    new job mark; the jobs changed since the kept job mark: their pk when their row changed, -pk when their
    allocations did, None when that cannot be told: read every running job): one query.

    Unchanged means: no transaction the snapshot did not see has changed the inventory since, but the
    reader's own, if its changes before the read are all it made and it committed (or is still this one).
    Every job its own transaction changed is read again (what a kept read saw of them may be rolled back
    since: then, if it read any, every job is)."""
    mark, jobs = state.mark, state.job_mark
    with connection.cursor() as cursor:
        cursor.execute(
            _CHECK,
            {
                "postmaster": mark.postmaster,
                "xmin": mark.xmin,
                "snapshot": mark.snapshot,
                "own": mark.own,
                "own_seq": mark.own_seq,
                "job_postmaster": jobs.postmaster if jobs else None,
                "job_xmin": jobs.xmin if jobs else None,
                "job_snapshot": jobs.snapshot if jobs else None,
                "job_own": jobs.own if jobs else None,
                # None (too many to keep): the check fails if the mark had an own transaction
                "job_own_jobs": list(jobs.own_jobs) if jobs and jobs.own_jobs is not None else None,
                # Counted up to one past the pruning bound: after a bulk load of jobs (a restore, an import)
                # the log holds millions of rows, and counting them all took 350 ms of every pass.
                "job_cap": JOB_PRUNE_AT + 1,
            },
        )
        unchanged, rereadable, snapshot, own, postmaster, logged, changed, rows, own_jobs = cursor.fetchone()
    job_mark = Mark(snapshot, int(snapshot.split(":", 1)[0]), own, None, postmaster, _own_jobs(own_jobs))
    if rows > JOB_PRUNE_AT:
        _prune_jobs(job_mark)
    if not logged or 0 in changed or len(changed) > JOB_READ_ALL_AT:
        return bool(unchanged), bool(rereadable), job_mark, None
    return bool(unchanged), bool(rereadable), job_mark, set(changed)


def _own_jobs(jobs: list[int]) -> tuple[int, ...] | None:
    return tuple(jobs) if len(jobs) <= JOB_READ_ALL_AT else None


def _prune_jobs(mark: Mark) -> None:
    """Delete the job log's rows every snapshot since `mark`'s has seen; a kept read older than it reads every
    running job again (the horizon row)."""
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {JOB_LOG} WHERE xid < %s", [mark.xmin])
        cursor.execute(f"INSERT INTO {JOB_LOG} (xid, job_id) VALUES (0, %s)", [mark.xmin])


def prune_job_log() -> None:
    """Delete the job log's rows every snapshot has seen now, whatever their number: what the next committed
    pass does past JOB_PRUNE_AT rows, for a caller that has just loaded jobs in bulk (a benchmark's year of
    history, whose passes roll back and so never prune). Nothing on SQLite."""
    if has_log():
        _prune_jobs(_mark(prune=False))


def _changed_racks(mark: Mark) -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute(_RACKS, {"xmin": mark.xmin, "snapshot": mark.snapshot, "own": mark.own})
        return {row[0] for row in cursor.fetchall()}


def _reread(state: ClusterState, racks: set[int], placed: dict[int, object]) -> bool:
    """Read `racks` again and put what changed there into the kept cluster; False when their trays are not
    the same trays in the same partitions (the caller reads cold)."""
    cluster = state.cluster
    if cluster.changing or True in cluster.tray_held:
        return False
    if not racks:  # changes to rows on no rack (a GPU out of any tray)
        return True
    rows = _rows(tray_rows(racks))
    old = _trays_of_racks(state, racks)
    if [state.tray_row[t] for t in old] != rows:
        return False
    trays = set(old)
    gpus: dict[int, tuple[int, ...]] = dict.fromkeys(old, ())
    for tray_id, tray_gpus in schedulable_gpus_by_tray(racks):
        gpus[state.tray_index[tray_id]] = tray_gpus
    unsettled = set(unsettled_tray_rows(racks))
    degraded = dict(_rows(degraded_tray_rows(racks)))
    unsettled |= set(degraded)
    # The running jobs holding GPUs there (as kept, or as the rows say now) leave the cluster, and come back
    # from their rows once the trays are up to date.
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT a.job_id FROM {Allocation._meta.db_table} a "
            f"JOIN {Gpu._meta.db_table} g ON g.id = a.gpu_id "
            f"JOIN {ComputeTray._meta.db_table} t ON t.id = g.tray_id WHERE t.rack_id = ANY(%s::bigint[])",
            ["{" + ",".join(map(str, racks)) + "}"],
        )
        there = {row[0] for row in cursor.fetchall()}
    # The kept jobs on those trays, from the cluster's own index of each tray's jobs (it holds exactly the
    # kept placements), not by walking every running job's placement (~70 ms at 10,000 racks); the ones
    # holding GPUs there that are not schedulable (not in that index) only when a tray has such GPUs.
    holders = set(there)
    for t in trays:
        holders.update(cluster.tray_jobs[t])
    if any(state.held_unschedulable[t] for t in trays):
        holders.update(
            job_id for job_id, held in state.held.items() if any(t in trays for t, _ in held.unschedulable)
        )
    moved = [job_id for job_id in state.held if job_id in holders]  # in the kept order, as before
    versions = {job_id: state.held[job_id].placed for job_id in moved}
    for job_id in moved:
        _drop(state, job_id)
    for t in old:
        for gpu in state.tray_gpus[t]:
            del state.gpu_tray[gpu]
        state.tray_gpus[t] = tuple(gpus[t])
        for gpu in gpus[t]:
            state.gpu_tray[gpu] = t
    for p in {cluster.tray_part[t] for t in old}:
        cluster.part_degraded.pop(p, None)
    for t in old:
        pk = state.tray_pk[t]
        if cluster.tray_settled[t] != (pk not in unsettled):
            cluster.set_fabric_ok(t, pk not in unsettled)
        if pk in degraded:
            cluster.part_degraded[cluster.tray_part[t]] = degraded[pk]
        _set_capacity(state, t)
    if moved:
        jobs = group_allocations(allocation_rows(moved), state, state.tray_index)
        for job_id in moved:
            _add(state, job_id, versions[job_id], jobs.get(job_id, ((), (), (), 0)))
    return True


def _trays_of_racks(state: ClusterState, racks: set[int]) -> list[int]:
    """The indexes of the trays of `racks` (pks) in the kept cluster, in order: its racks' partitions'
    trays (the cold read's, unchanged while it is kept: a re-read that finds other trays reads cold), each
    rack found by its pk (`ClusterState.rack_index`, made by the first re-read from the rack's first tray:
    ~10,000 racks, where grouping the 180,000 trays' rows by rack took ~25 ms of that pass)."""
    cluster = state.cluster
    if not state.rack_index:
        tray_row, part_trays = state.tray_row, cluster.part_trays
        state.rack_index = {
            tray_row[part_trays[parts[0]][0]][RACK_PK]: r
            for r, parts in enumerate(cluster.rack_parts)
            if parts and part_trays[parts[0]]
        }
    indexes = [r for r in map(state.rack_index.get, racks) if r is not None]
    return sorted(t for r in indexes for p in cluster.rack_parts[r] for t in cluster.part_trays[p])


# --- kept clusters brought up to date -------------------------------------------------------------------


def _set_capacity(state: ClusterState, t: int) -> None:
    state.cluster.set_capacity(t, state.capacity(t))


def _drop(state: ClusterState, job_id: int) -> None:
    held = state.held.pop(job_id)
    if held.placement:
        state.cluster.release(job_id)
    for t, n in held.unschedulable:
        state.held_unschedulable[t] -= n
        _set_capacity(state, t)
    state.allocated.difference_update(held.gpus)


def _add(state: ClusterState, job_id: int, placed, allocation: tuple) -> None:
    placement, unschedulable, gpus, last = allocation
    for t, n in unschedulable:
        state.held_unschedulable[t] += n
        _set_capacity(state, t)
    if placement:
        state.cluster.allocate(job_id, placement)
    state.held[job_id] = Held(placed, placement, unschedulable, gpus, last)
    state.allocated.update(gpus)


def _running(state: ClusterState, changed: set[int] | None) -> tuple[dict[int, tuple], dict[int, object]]:
    """The running jobs' rows and when each was placed (its version): the kept ones with the `changed`
    jobs' read again, changed in place (None: every job read)."""
    if changed is None:
        rows = {row[0]: row for row in read_running()}
        return rows, {pk: row[-1] for pk, row in rows.items()}
    rows, placed = state.running_rows, state.running_placed
    again = {abs(job_id) for job_id in changed if job_id > 0}
    for job_id in again:
        rows.pop(job_id, None)
        placed.pop(job_id, None)
    if again:
        for row in read_running(again):
            rows[row[0]] = row
            placed[row[0]] = row[-1]
    return rows, placed


def _catch_up(state: ClusterState, placed: dict[int, object], changed: set[int] | None) -> bool:
    """Release the jobs that left, were placed again or whose allocations changed, allocate the new ones;
    True when the result is the database's (else the caller reads cold). `changed`: the jobs the job log
    names (pk: its row, -pk: its allocations; None: every job was read again, so every kept job is compared
    and the allocations' row count and highest id must match the table's)."""
    gone = object()
    if changed is None:
        candidates = list(state.held)
        moved: set[int] = set()
    else:
        moved = {-job_id for job_id in changed if job_id < 0}
        candidates = [job_id for job_id in {abs(job_id) for job_id in changed} if job_id in state.held]
    for job_id in candidates:
        if job_id in moved or placed.get(job_id, gone) != state.held[job_id].placed:
            _drop(state, job_id)
    if changed is None:
        new = [job_id for job_id in placed if job_id not in state.held]
    else:
        new = [job_id for job_id in {abs(job_id) for job_id in changed} if job_id in placed]
        new = [job_id for job_id in new if job_id not in state.held]
    recorded, state.recorded = state.recorded, {}
    if recorded:  # placed by this process's last pass, which committed: no need to read them
        known = [job_id for job_id in new if job_id in recorded and recorded[job_id][0] == placed[job_id]]
        for job_id in known:
            _add(state, job_id, placed[job_id], recorded[job_id][1:])
        if known:
            new = [job_id for job_id in new if job_id not in state.held]
    if new:  # their GPUs by tray, as a cold read reads them (one that is not schedulable any more too)
        jobs = group_allocations(allocation_rows(new), state, state.tray_index)
        for job_id in new:
            _add(state, job_id, placed[job_id], jobs.get(job_id, ((), (), (), 0)))
    if changed is not None:
        return True
    with connection.cursor() as cursor:
        cursor.execute(_ALLOCATIONS)
        rows, last = cursor.fetchone()
    highest = max((held.last for held in state.held.values()), default=0)
    return state.rows == rows and highest == last


def _reread_changed(state: ClusterState, placed: dict[int, object]) -> ClusterState | None:
    """The kept cluster with the racks changed since its mark read again, under a new mark; None: read
    cold."""
    mark = _mark(prune=False)  # before the racks are looked up: a change after it is seen next time
    racks = _changed_racks(state.mark)
    if 0 in racks or not _reread(state, racks, placed):
        return None
    state.mark = mark
    state.reread = len(racks)
    return state


def _same_fabric(state: ClusterState, fabric: Fabric | Callable[[], Fabric] | None) -> bool:
    """Whether a kept cluster was built on `fabric` (as `read` takes it)."""
    if callable(fabric):  # the fabric in use: kept while the log shows no change to its tables
        return state.fabric_source is fabric
    return state.cluster.fabric == (fabric if fabric is not None else Fabric())


def read(fabric: Fabric | Callable[[], Fabric] | None = None) -> ClusterState:
    """The cluster for a pass, with the running jobs' rows (`ClusterState.running_rows`, read as
    scheduling.pass_cluster.read_running reads them) and their allocations: the one this process kept,
    checked and brought up to date (the inventory's racks and the jobs the change logs name since), or read
    cold. `fabric`: the compute fabric above the racks (core.fabric; none by default), or the function that
    reads the one in use (inventory.fabric.current_fabric), called on a cold read only: a kept cluster built
    on it is kept while the change log shows no change to the fabric's tables (`FABRIC_COLUMNS`), one built
    on another fabric is read cold again."""
    key = _database()
    with _kept_lock:
        state = _kept.pop(key, None)
    if state is not None and not _same_fabric(state, fabric):
        state = None
    rows, placed, job_mark, changed = None, None, None, None
    if state is not None:
        state.cold = False
        state.reread = 0
        try:
            unchanged, rereadable, job_mark, changed = _check(state)
            rows, placed = _running(state, changed)
            if not unchanged:
                state = _reread_changed(state, placed) if rereadable else None
            if state is not None and not _catch_up(state, placed, changed):
                state = None
        except (ValueError, KeyError):  # the cluster's own checks refused a change (never expected)
            state = None
    if state is None:
        mark = _mark() if has_log() else None  # before the first query of the read, the fabric's too
        if mark is not None:  # to be kept: frozen once read (below)
            gc.collect()
        if rows is None:  # else read under the job mark taken before them
            job_mark, changed = mark, None
        # Its inventory queries on other connections when this transaction changed none of it (core.apart);
        # the running jobs read with their allocations when not read above.
        apart = mark is not None and mark.own_seq is None
        state = build(placed, mark, fabric() if callable(fabric) else fabric, apart=apart)
        if rows is None:
            rows, placed = state.running_rows, state.running_placed
        state.fabric_source = fabric if callable(fabric) else None
        if mark is not None:
            # What lives now (the cluster to keep: about a million objects at 10,000 racks) is moved out of
            # the cyclic collector's reach, as a render's kept state is (integrations.state.settle): it was
            # walked when the pass turned the collector back on (~180 ms of a cold pass) and by every later
            # full collection (~170 ms, one pass in several). The collection just before the read leaves
            # nothing collectable to freeze but what the read itself made, which makes no reference cycles
            # (tests/scheduling/test_pass_cache.py); frozen objects are still freed by reference counting
            # (this cluster when a later cold read replaces it).
            gc.freeze()
    state.running_rows, state.job_mark, state.changed_jobs = rows, job_mark, changed
    assert placed is not None  # set with the rows above
    state.running_placed = placed
    cluster = state.cluster
    state.jobs_before = dict(cluster.jobs)
    state.free_before = cluster.free_gpus
    state.cap_before = list(cluster.tray_cap)
    state.settled_before = list(cluster.tray_settled)
    return state


def silence(state: ClusterState) -> None:
    """After `read`, for the pass: trays whose node stopped reporting get no new work while an enabled
    node_silent rule says "hold" (inventory.staleness.silent_policy; computed from last-seen times, never
    written, so no change the kept cluster's check could see): they are held out of the engine's indexes
    for the pass (as a reservation holds trays), which keep() undoes. Jobs there keep running. One query,
    two when the rule holds."""
    policy = silent_policy()
    if not policy.hold:
        return
    cluster = state.cluster
    for pk in silent_tray_pks(policy, timezone.now()):
        t = state.tray_index.get(pk)
        if t is not None:
            state.silenced[t] = cluster.tray_cap[t]
    # Held, not shrunk: GPUs a preemption frees there during the pass must not take new work either.
    cluster.hold(list(state.silenced))


def _put_back(cluster, before: dict, jobs) -> None:
    """Release the `jobs` whose placement differs from `before`, allocate back the ones that had one."""
    for job_id in jobs:
        placement = cluster.jobs.get(job_id)
        if placement is not None and before.get(job_id) != placement:
            cluster.release(job_id)
    for job_id in jobs:
        placement = before.get(job_id)
        if placement is not None and job_id not in cluster.jobs:
            cluster.allocate(job_id, placement)


def keep(state: ClusterState, touched: Iterable[int] | None = None) -> None:
    """Put the cluster back as `read` returned it (undoing the engine's starts, preemptions and held trays)
    and keep it for this process's next pass. `touched`: the jobs the engine started or preempted (its
    result): only those are put back, then the jobs compared whole (in C; every job walked when they
    differ). Not kept when it cannot be (SQLite) or does not come back exactly."""
    if state.mark is None:
        return
    cluster = state.cluster
    before = state.jobs_before
    try:
        silenced, state.silenced = state.silenced, {}
        for t, capacity in silenced.items():
            cluster.set_capacity(t, capacity)
        if True in cluster.tray_held:
            cluster.unhold([t for t, held in enumerate(cluster.tray_held) if held])
        if touched is not None:
            _put_back(cluster, before, list(touched))
        if cluster.jobs != before:
            _put_back(cluster, before, [*cluster.jobs, *before])
    except (ValueError, KeyError):  # the cluster's own checks refused: read cold next time
        return
    if (
        cluster.jobs != before
        or cluster.free_gpus != state.free_before
        or cluster.tray_cap != state.cap_before
        or cluster.tray_settled != state.settled_before
    ):
        return
    with _kept_lock:
        _kept[_database()] = state
