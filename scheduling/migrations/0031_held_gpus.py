"""PostgreSQL: each department's held and borrowed GPUs kept by the database as allocations and jobs change
(issue 32: at 10,000 racks the dashboards and the department list read the running jobs' 487,000
allocations on every request to count them).

`scheduling_heldgpus` holds rows (department, project, in use, borrowed) whose sums per department (and
project) are, at every moment and in every transaction's snapshot, what counting the allocations gives:
the GPUs allocated to its starting or running jobs, and of those the ones held by jobs flagged over quota.
Triggers keep it, in the transaction that changes an allocation or a job, so nothing can change either
without the sums following: the pass, a job's end, cancel, requeue or preemption, the admin, raw SQL,
COPY, a restore.

* **Allocation rows inserted, deleted or updated** (statement triggers over the transition tables): +1 / -1
  per row to its job's department when the job is starting or running (and to borrowed when it is over
  quota). The jobs are first locked FOR SHARE: a concurrent change of one of those jobs' state, over_quota
  or department (which counts the job's allocations, below) waits for this transaction to end, or this one
  waits for it and reads the job as it committed. Either way one of the two sees the other's rows, so no
  allocation is counted twice or missed.
* **Jobs updated** whose holding (state starting/running), over_quota, department or project changed: their
  allocations, counted then (the job rows are locked by the update), moved between in use/borrowed/nothing.
* **Allocations truncated** (Django's flush): every row goes (no allocation: nothing held).

`allocated` counts every allocation whatever its job's state (a job that stopped holding may keep its rows
until the pass deletes them): only its sum over the whole table means something (the allocations there
are, for the free-GPU count), as a job's moves leave it where its rows were counted.

Why rows to sum and not one row per department updated in place: an in-place row would be locked by every
writer touching the department until it commits (the pass, a cancel, a requeue would queue on it and could
deadlock with the job-row locks they take in other orders). Each change adds rows instead, and folds the
rows of each (department, project) that has more than one, and that no one else is folding, into one
(`FOR UPDATE SKIP LOCKED`: never waits); rows another writer is folding are left for the next. So a change
rewrites only the few rows of what it touched, readers never wait and see whole transactions only, and the
table stays about a row per department and project.

SQLite (the embedded default) has no triggers here: `scheduling.usage` counts the allocations there.
"""

from django.db import migrations

TABLE = "scheduling_heldgpus"
HOLDING = "('starting', 'running')"  # scheduling.choices.HOLDING_STATES (the tests compare with counts)
# Each job's own figures (no allocation read): column -> its value for a job row `r` (JOB_COLUMNS), as
# scheduling.usage.departments_with_jobs sums them.
SLICE_G = "r.mig_slices * r.mig_compute_slices"
JOB_COLUMNS = {
    "running_jobs": f"CASE WHEN r.state IN {HOLDING} THEN 1 ELSE 0 END",
    "pending_jobs": "CASE WHEN r.state = 'pending' THEN 1 ELSE 0 END",
    "pending_gpus": "CASE WHEN r.state = 'pending' THEN r.gpus ELSE 0 END",
    "held_slices": f"CASE WHEN r.state IN {HOLDING} THEN r.mig_slices ELSE 0 END",
    "held_slice_g": f"CASE WHEN r.state IN {HOLDING} THEN {SLICE_G} ELSE 0 END",
    "borrowed_slice_g": f"CASE WHEN r.state IN {HOLDING} AND r.over_quota THEN {SLICE_G} ELSE 0 END",
}
COLUMNS = ("in_use", "borrowed", "allocated", *JOB_COLUMNS)
NAMES = ", ".join(COLUMNS)
SUMS = ", ".join(f"SUM({c})" for c in COLUMNS)
ANY_SUM = " OR ".join(f"SUM({c}) <> 0" for c in COLUMNS)

FOLD = f"""
CREATE OR REPLACE FUNCTION scheduling_held_fold() RETURNS void LANGUAGE sql AS $$
    WITH gone AS (
        DELETE FROM {TABLE} WHERE id IN (
            SELECT id FROM {TABLE} WHERE (department_id, COALESCE(project_id, 0)) IN (
                SELECT department_id, COALESCE(project_id, 0) FROM {TABLE} GROUP BY 1, 2 HAVING COUNT(*) > 1
            )
            FOR UPDATE SKIP LOCKED
        )
        RETURNING department_id, project_id, {NAMES}
    )
    INSERT INTO {TABLE} (department_id, project_id, {NAMES})
    SELECT department_id, project_id, {SUMS} FROM gone GROUP BY department_id, project_id
    HAVING {ANY_SUM}
$$
"""

# One function for the three statement triggers on allocations; each runs only the statements naming the
# transition tables its event has (PL/pgSQL plans a statement when it first runs).
ALLOCATIONS = f"""
CREATE OR REPLACE FUNCTION scheduling_held_allocations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM {TABLE};
        RETURN NULL;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        PERFORM 1 FROM scheduling_job WHERE id IN (SELECT job_id FROM new_rows) ORDER BY id FOR SHARE;
        INSERT INTO {TABLE} (department_id, project_id, in_use, borrowed, allocated)
        SELECT j.department_id, j.project_id, COUNT(*) FILTER (WHERE j.state IN {HOLDING}),
               COUNT(*) FILTER (WHERE j.state IN {HOLDING} AND j.over_quota), COUNT(*)
        FROM new_rows a JOIN scheduling_job j ON j.id = a.job_id GROUP BY j.department_id, j.project_id;
    END IF;
    IF TG_OP <> 'INSERT' THEN
        PERFORM 1 FROM scheduling_job WHERE id IN (SELECT job_id FROM old_rows) ORDER BY id FOR SHARE;
        INSERT INTO {TABLE} (department_id, project_id, in_use, borrowed, allocated)
        SELECT j.department_id, j.project_id, -COUNT(*) FILTER (WHERE j.state IN {HOLDING}),
               -COUNT(*) FILTER (WHERE j.state IN {HOLDING} AND j.over_quota), -COUNT(*)
        FROM old_rows a JOIN scheduling_job j ON j.id = a.job_id GROUP BY j.department_id, j.project_id;
    END IF;
    PERFORM scheduling_held_fold();
    RETURN NULL;
END
$$
"""

# What a job row counts for, summed with `sign` (+1 the new row, -1 the old one) per department and project.
_SIGNED = [f"SUM(r.sign * ({value}))" for value in JOB_COLUMNS.values()]
JOB_FIGURES = (
    f"INSERT INTO {TABLE} (department_id, project_id, {', '.join(JOB_COLUMNS)}) "
    f"SELECT r.department_id, r.project_id, {', '.join(_SIGNED)} "
    "FROM ({rows}) r GROUP BY r.department_id, r.project_id "
    f"HAVING {' OR '.join(f'{signed} <> 0' for signed in _SIGNED)}"
)
# An updated job row whose figures may differ (`o` old, `n` new).
JOB_CHANGED = " OR ".join(
    f"o.{c} IS DISTINCT FROM n.{c}"
    for c in (
        "state",
        "over_quota",
        "department_id",
        "project_id",
        "gpus",
        "mig_slices",
        "mig_compute_slices",
    )
)
CHANGED_IDS = f"SELECT o.id FROM old_rows o JOIN new_rows n ON n.id = o.id WHERE {JOB_CHANGED}"

JOBS = f"""
CREATE OR REPLACE FUNCTION scheduling_held_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        {JOB_FIGURES.format(rows="SELECT 1 AS sign, * FROM new_rows")};
    ELSIF TG_OP = 'DELETE' THEN
        {JOB_FIGURES.format(rows="SELECT -1 AS sign, * FROM old_rows")};
    ELSE
        {
    JOB_FIGURES.format(
        rows=f"SELECT 1 AS sign, * FROM new_rows WHERE id IN ({CHANGED_IDS}) "
        f"UNION ALL SELECT -1, * FROM old_rows WHERE id IN ({CHANGED_IDS})"
    )
};
        -- The GPUs the changed jobs hold move between in use, borrowed and nothing (the jobs are locked).
        WITH changed AS (
            SELECT o.id, o.department_id AS old_department, o.project_id AS old_project,
                   o.state IN {HOLDING} AS old_holding, o.over_quota AS old_over,
                   n.department_id AS new_department, n.project_id AS new_project,
                   n.state IN {HOLDING} AS new_holding, n.over_quota AS new_over
            FROM old_rows o JOIN new_rows n ON n.id = o.id
            WHERE (o.state IN {HOLDING} OR n.state IN {HOLDING})
              AND ((o.state IN {HOLDING}) IS DISTINCT FROM (n.state IN {HOLDING})
                   OR o.over_quota IS DISTINCT FROM n.over_quota
                   OR o.department_id IS DISTINCT FROM n.department_id
                   OR o.project_id IS DISTINCT FROM n.project_id)
        ),
        held AS (
            SELECT c.*, (SELECT COUNT(*) FROM scheduling_allocation a WHERE a.job_id = c.id) AS gpus
            FROM changed c
        ),
        moves (department_id, project_id, in_use, borrowed) AS (
            SELECT new_department, new_project, gpus, CASE WHEN new_over THEN gpus ELSE 0 END
            FROM held WHERE new_holding
            UNION ALL
            SELECT old_department, old_project, -gpus, CASE WHEN old_over THEN -gpus ELSE 0 END
            FROM held WHERE old_holding
        )
        INSERT INTO {TABLE} (department_id, project_id, in_use, borrowed)
        SELECT department_id, project_id, SUM(in_use), SUM(borrowed) FROM moves
        GROUP BY department_id, project_id HAVING SUM(in_use) <> 0 OR SUM(borrowed) <> 0;
    END IF;
    PERFORM scheduling_held_fold();
    RETURN NULL;
END
$$
"""


TRANSITIONS = (
    ("INSERT", "NEW TABLE AS new_rows"),
    ("DELETE", "OLD TABLE AS old_rows"),
    ("UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows"),
)


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    execute = schema_editor.execute
    # No foreign key to the department: Django's flush truncates departments without this table.
    execute(
        f"CREATE TABLE {TABLE} (id bigserial PRIMARY KEY, department_id bigint NOT NULL, project_id bigint, "
        + ", ".join(f"{column} integer NOT NULL DEFAULT 0" for column in COLUMNS)
        + ")"
    )
    execute(FOLD)
    execute(ALLOCATIONS)
    execute(JOBS)
    for event, tables in TRANSITIONS:
        execute(
            f"CREATE TRIGGER scheduling_held_{event.lower()} AFTER {event} ON scheduling_allocation "
            f"REFERENCING {tables} FOR EACH STATEMENT EXECUTE FUNCTION scheduling_held_allocations()"
        )
    execute(
        "CREATE TRIGGER scheduling_held_truncate AFTER TRUNCATE ON scheduling_allocation "
        "FOR EACH STATEMENT EXECUTE FUNCTION scheduling_held_allocations()"
    )
    for event, tables in TRANSITIONS:
        execute(
            f"CREATE TRIGGER scheduling_held_jobs_{event.lower()} AFTER {event} ON scheduling_job "
            f"REFERENCING {tables} FOR EACH STATEMENT EXECUTE FUNCTION scheduling_held_jobs()"
        )
    # The figures of the allocations and jobs there are now: the triggers above hold both tables' write locks
    # until this migration commits, so no change falls between the count and the triggers.
    execute(
        f"INSERT INTO {TABLE} (department_id, project_id, in_use, borrowed, allocated) "
        f"SELECT j.department_id, j.project_id, COUNT(*) FILTER (WHERE j.state IN {HOLDING}), "
        f"COUNT(*) FILTER (WHERE j.state IN {HOLDING} AND j.over_quota), COUNT(*) "
        "FROM scheduling_allocation a JOIN scheduling_job j ON j.id = a.job_id "
        "GROUP BY j.department_id, j.project_id"
    )
    execute(JOB_FIGURES.format(rows="SELECT 1 AS sign, * FROM scheduling_job"))
    execute("SELECT scheduling_held_fold()")


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for event in ("insert", "delete", "update", "truncate"):
        schema_editor.execute(f"DROP TRIGGER IF EXISTS scheduling_held_{event} ON scheduling_allocation")
    for event, _tables in TRANSITIONS:
        schema_editor.execute(
            f"DROP TRIGGER IF EXISTS scheduling_held_jobs_{event.lower()} ON scheduling_job"
        )
    for function in ("scheduling_held_allocations", "scheduling_held_jobs", "scheduling_held_fold"):
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {function}()")
    schema_editor.execute(f"DROP TABLE IF EXISTS {TABLE}")


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0030_fabric_change_log")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
