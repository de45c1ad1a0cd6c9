"""PostgreSQL: the held-GPU figures' allocation trigger (0031_held_gpus) joins its rows' jobs one lookup per
job, not per allocation row.

The trigger counted each inserted (or deleted) allocation against its job by joining the transition table
to the job table; the planner, expecting as many jobs as rows, hashed the whole job table for it: at 10,000
racks a pass that starts 200 jobs (~2,500 allocations) spent ~30 ms of its insert there, on the pass's
path (issue 32), and the hash grows with every job ever kept. Counting the rows per job first gives a few
hundred jobs, found by their primary key (~1 ms). The figures are the same: a job's rows summed, not
counted one by one.
"""

from importlib import import_module

from django.db import migrations

TABLE = "scheduling_heldgpus"
HOLDING = "('starting', 'running')"  # scheduling.choices.HOLDING_STATES


def _figures(rows: str, sign: str) -> str:
    """The figures of the allocation rows `rows` (a transition table), counted per job, `sign` "" or "-"."""
    return (
        f"SELECT j.department_id, j.project_id, "
        f"{sign}COALESCE(SUM(a.n) FILTER (WHERE j.state IN {HOLDING}), 0), "
        f"{sign}COALESCE(SUM(a.n) FILTER (WHERE j.state IN {HOLDING} AND j.over_quota), 0), "
        f"{sign}SUM(a.n) "
        f"FROM (SELECT job_id, COUNT(*) AS n FROM {rows} GROUP BY job_id) a "
        "JOIN scheduling_job j ON j.id = a.job_id GROUP BY j.department_id, j.project_id"
    )


# 0031's function with its two figure statements counted per job (the rest as it was there).
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
        {_figures("new_rows", "")};
    END IF;
    IF TG_OP <> 'INSERT' THEN
        PERFORM 1 FROM scheduling_job WHERE id IN (SELECT job_id FROM old_rows) ORDER BY id FOR SHARE;
        INSERT INTO {TABLE} (department_id, project_id, in_use, borrowed, allocated)
        {_figures("old_rows", "-")};
    END IF;
    PERFORM scheduling_held_fold();
    RETURN NULL;
END
$$
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(ALLOCATIONS)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":  # 0031's function, as that migration wrote it
        schema_editor.execute(import_module("scheduling.migrations.0031_held_gpus").ALLOCATIONS)


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0039_running_index_covers_figures")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
