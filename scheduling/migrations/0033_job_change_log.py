"""PostgreSQL: log which jobs each transaction changed, so that a pass that keeps its cluster reads only the
running jobs that changed since its last pass (scheduling.pass_cache; issue 32: at 10,000 racks the running
jobs are ~47,700 rows, read whole every pass, and a row count of ~488,000 allocations checked the kept ones).

`scheduling_jobchange` holds (xid, job) for every job a transaction inserted, deleted, or changed a column of
that the pass reads of a running job (`JOB_COLUMNS`, scheduling.pass_cache.JOB_COLUMNS), and (xid, -job) for
every job whose allocations it inserted or deleted (an allocation changed in place is an inventory change
already: migration 0010): a job whose standing changed is read again, its allocations only when they did. Statement triggers with transition tables: one INSERT per statement, whatever the number of
rows (a pass's batched writes stay batched). Job 0 stands for "all": a truncate (the next pass reads every
running job). The row (xid 0, job N) is the pruning horizon: a pass that read before transaction N reads every
running job again.

The columns are named in the function: a migration that renames or drops one must re-create it (a test
compares the installed function with scheduling.pass_cache.JOB_COLUMNS).
"""

from django.db import migrations

TABLE = "scheduling_jobchange"
TRIGGER = "scheduling_job_changed"
# The columns a pass reads of a running job (scheduling.pass_inputs.read_running), and what makes a job
# one: its state and whether it holds MIG slices.
JOB_COLUMNS = (
    "state",
    "mig_slices",
    "department_id",
    "gpus",
    "time_limit_minutes",
    "over_quota",
    "priority_class",
    "project_id",
    "placed_at",
    "started_at",
)


def _changed(columns) -> str:
    old = ", ".join(f"o.{column}" for column in columns)
    new = ", ".join(f"n.{column}" for column in columns)
    return f"({old}) IS DISTINCT FROM ({new})"


def _rows_function(name: str, column: str) -> str:
    """The function of the statement triggers on inserts, deletes and truncates: the job of each row."""
    return f"""
CREATE OR REPLACE FUNCTION {TRIGGER}_{name}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        INSERT INTO {TABLE} (xid, job_id) VALUES (txid_current(), 0) ON CONFLICT DO NOTHING;
    ELSIF TG_OP = 'INSERT' THEN
        INSERT INTO {TABLE} (xid, job_id)
        SELECT DISTINCT txid_current(), {column} FROM new_rows ON CONFLICT DO NOTHING;
    ELSE
        INSERT INTO {TABLE} (xid, job_id)
        SELECT DISTINCT txid_current(), {column} FROM old_rows ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END
$$;
"""


FUNCTIONS = (
    _rows_function("rows", "id")
    + _rows_function("allocations", "-job_id")
    + f"""
CREATE OR REPLACE FUNCTION {TRIGGER}_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {TABLE} (xid, job_id)
    SELECT txid_current(), n.id FROM new_rows n JOIN old_rows o ON o.id = n.id
    WHERE {_changed(JOB_COLUMNS)}
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
"""
)

# (table, event, transition table, function)
TRIGGERS = (
    ("scheduling_job", "INSERT", "NEW TABLE AS new_rows", "rows"),
    ("scheduling_job", "DELETE", "OLD TABLE AS old_rows", "rows"),
    ("scheduling_job", "UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows", "update"),
    ("scheduling_job", "TRUNCATE", "", "rows"),
    ("scheduling_allocation", "INSERT", "NEW TABLE AS new_rows", "allocations"),
    ("scheduling_allocation", "DELETE", "OLD TABLE AS old_rows", "allocations"),
    ("scheduling_allocation", "TRUNCATE", "", "allocations"),
)


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f"CREATE TABLE {TABLE} (xid bigint NOT NULL, job_id bigint NOT NULL, PRIMARY KEY (xid, job_id))"
    )
    schema_editor.execute(FUNCTIONS)
    for table, event, transition, function in TRIGGERS:
        referencing = f"REFERENCING {transition} " if transition else ""
        schema_editor.execute(
            f"CREATE TRIGGER {TRIGGER}_{event.lower()} AFTER {event} ON {table} {referencing}"
            f"FOR EACH STATEMENT EXECUTE FUNCTION {TRIGGER}_{function}()"
        )


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, event, _, _ in TRIGGERS:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}_{event.lower()} ON {table}")
    for function in ("rows", "allocations", "update"):
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {TRIGGER}_{function}()")
    schema_editor.execute(f"DROP TABLE IF EXISTS {TABLE}")


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0032_job_submitter_index")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
