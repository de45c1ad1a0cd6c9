"""PostgreSQL: log the racks whose rendered configuration each transaction changed, so that a process keeps
the rows the render reads and reads again only the racks that changed (integrations.kept_rows; issue 32: a
one-rack re-carve at 10,000 racks read and rendered 180,000 trays).

`integrations_renderchange` holds (xid, rack) for every rack a transaction changed a rendered row of. Inserts
and deletes are logged by statement triggers with transition tables (one set-based insert per statement: a
seed's COPY of 180,000 trays is one); updates by row triggers that fire only when a watched column is in the
statement's SET list and changed (`UPDATE OF ... WHEN`: a heartbeat's bulk update of last-seen times never
calls them). Rack 0 stands for "every rack": a rack inserted, deleted or renamed (every rack's Slurm block
names follow from all rack names), a truncate, a dedication whose partition cannot be found. The row
(0, N) is the pruning horizon: the log holds every transaction from N on.

What is watched (integrations.kept_rows.RENDER_COLUMNS, compared by a test with what the render reads):
racks (name, cluster UUID), NVLink partitions, their dedications, compute trays (the columns the render
reads), a GPU moving between trays, allocations made, deleted or moved, and a job entering or leaving the
states that hold GPUs (scheduling.choices.HOLDING_STATES) or changing department: the running (department,
tray) pairs OpenSM's partitions are made of. A watched column dropped or renamed needs this log's
triggers changed with it (PostgreSQL refuses the drop while a trigger names it).
"""

from django.db import migrations

LOG = "integrations_renderchange"
PREFIX = "integrations_render_changed"
HOLDING = ("starting", "running")  # scheduling.choices.HOLDING_STATES (a test holds them equal)

# Table -> watched columns (integrations.kept_rows.RENDER_COLUMNS).
COLUMNS = {
    "inventory_rack": ("name", "cluster_uuid"),
    "inventory_nvlinkpartition": ("rack_id", "clique_id", "name", "service_tier"),
    "tenancy_dedicatedpartition": ("partition_id", "department_id"),
    "inventory_computetray": (
        "hostname",
        "rack_id",
        "slot",
        "partition_id",
        "ib_port_guids",
        "mig_layout",
        "mig_layout_devices",
    ),
    "inventory_gpu": ("tray_id",),
    "scheduling_allocation": ("job_id", "gpu_id"),
    "scheduling_job": ("state", "department_id"),
}


# Per table: the racks a row changed (as SQL over `r`, the row; an update runs it for OLD and for NEW), the
# racks an inserted or deleted set of rows changed (`rows`: the statement's transition table).
_ROW_RACKS = {
    "inventory_nvlinkpartition": "SELECT r.rack_id",
    "inventory_computetray": "SELECT r.rack_id",
    # A partition that cannot be found (never expected: dedications go before their partition): all.
    "tenancy_dedicatedpartition": (
        "SELECT COALESCE((SELECT p.rack_id FROM inventory_nvlinkpartition p WHERE p.id = r.partition_id), 0)"
    ),
    "inventory_gpu": "SELECT t.rack_id FROM inventory_computetray t WHERE t.id = r.tray_id",
    "scheduling_allocation": (
        "SELECT t.rack_id FROM inventory_gpu g JOIN inventory_computetray t ON t.id = g.tray_id "
        "WHERE g.id = r.gpu_id"
    ),
    "scheduling_job": (
        "SELECT t.rack_id FROM scheduling_allocation a JOIN inventory_gpu g ON g.id = a.gpu_id "
        "JOIN inventory_computetray t ON t.id = g.tray_id WHERE a.job_id = r.id"
    ),
}
# Inserted and deleted rows, set-based (the GPU and job rows are not watched for inserts and deletes: a GPU
# that holds nothing renders nothing, and a job's allocations are deleted before it is).
_SET_RACKS = {
    "inventory_rack": "SELECT 0::bigint FROM rows LIMIT 1",
    "inventory_nvlinkpartition": "SELECT r.rack_id FROM rows r",
    "inventory_computetray": "SELECT r.rack_id FROM rows r",
    "tenancy_dedicatedpartition": (
        "SELECT COALESCE(p.rack_id, 0) FROM rows r LEFT JOIN inventory_nvlinkpartition p ON p.id = r.partition_id"
    ),
    "scheduling_allocation": (
        "SELECT t.rack_id FROM rows r JOIN inventory_gpu g ON g.id = r.gpu_id "
        "JOIN inventory_computetray t ON t.id = g.tray_id"
    ),
}


def _holding(row: str) -> str:
    states = ", ".join(f"'{s}'" for s in HOLDING)
    return f"COALESCE({row}.state IN ({states}), false)"


def _when(table: str) -> str:
    """An update's WHEN: a watched column changed (a job: it started or stopped holding GPUs)."""
    if table == "scheduling_job":
        return (
            f"{_holding('OLD')} IS DISTINCT FROM {_holding('NEW')} "
            "OR OLD.department_id IS DISTINCT FROM NEW.department_id"
        )
    return " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in COLUMNS[table])


def _insert(racks: str) -> str:
    return (
        f"    INSERT INTO {LOG} (xid, rack_id)\n"
        f"    SELECT DISTINCT txid_current(), rack FROM ({racks}) AS changed(rack) WHERE rack IS NOT NULL\n"
        "    ON CONFLICT DO NOTHING;\n"
    )


def _update_function(table: str) -> str:
    if table == "inventory_rack":  # a new name changes every rack's Slurm block names: all
        body = (
            "    IF OLD.name IS DISTINCT FROM NEW.name THEN\n"
            f"        INSERT INTO {LOG} (xid, rack_id) VALUES (txid_current(), 0)\n"
            "        ON CONFLICT DO NOTHING;\n"
            "    ELSE\n"
            f"        INSERT INTO {LOG} (xid, rack_id) VALUES (txid_current(), NEW.id)\n"
            "        ON CONFLICT DO NOTHING;\n"
            "    END IF;\n"
        )
    else:
        racks = _ROW_RACKS[table]
        body = _insert(
            f"{racks.replace('r.', 'OLD.')} UNION ALL {racks.replace('r.', 'NEW.')}"
            if table != "scheduling_job"
            else racks.replace("r.", "NEW.")
        )
    return (
        f"CREATE OR REPLACE FUNCTION {PREFIX}_{table}_update() RETURNS trigger LANGUAGE plpgsql AS $$\n"
        f"BEGIN\n{body}    RETURN NULL;\nEND\n$$"
    )


def _set_function(table: str, event: str) -> str:
    rows = "new_rows" if event == "INSERT" else "old_rows"
    racks = _SET_RACKS[table].replace("FROM rows", f"FROM {rows}")
    name = f"{PREFIX}_{table}_{event.lower()}"
    return (
        f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
        f"BEGIN\n{_insert(racks)}    RETURN NULL;\nEND\n$$"
    )


TRUNCATED = (
    f"CREATE OR REPLACE FUNCTION {PREFIX}_truncate() RETURNS trigger LANGUAGE plpgsql AS $$\n"
    f"BEGIN\n    INSERT INTO {LOG} (xid, rack_id) VALUES (txid_current(), 0) ON CONFLICT DO NOTHING;\n"
    "    RETURN NULL;\nEND\n$$"
)


def statements() -> list[str]:
    """The migration's SQL after the log table (a test reads the installed triggers against it)."""
    found = [TRUNCATED]
    for table, columns in COLUMNS.items():
        found.append(_update_function(table))
        found.append(
            f"CREATE TRIGGER {PREFIX}_update AFTER UPDATE OF {', '.join(columns)} ON {table} "
            f"FOR EACH ROW WHEN ({_when(table)}) EXECUTE FUNCTION {PREFIX}_{table}_update()"
        )
        for event in ("INSERT", "DELETE") if table in _SET_RACKS else ():
            rows = "NEW TABLE AS new_rows" if event == "INSERT" else "OLD TABLE AS old_rows"
            found.append(_set_function(table, event))
            found.append(
                f"CREATE TRIGGER {PREFIX}_{event.lower()} AFTER {event} ON {table} REFERENCING {rows} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {PREFIX}_{table}_{event.lower()}()"
            )
        found.append(
            f"CREATE TRIGGER {PREFIX}_truncate AFTER TRUNCATE ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {PREFIX}_truncate()"
        )
    return found


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f"CREATE TABLE {LOG} (xid bigint NOT NULL, rack_id bigint NOT NULL, PRIMARY KEY (xid, rack_id))"
    )
    for sql in statements():
        schema_editor.execute(sql)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in COLUMNS:
        for event in ("update", "insert", "delete", "truncate"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {PREFIX}_{event} ON {table}")
            schema_editor.execute(f"DROP FUNCTION IF EXISTS {PREFIX}_{table}_{event}()")
    schema_editor.execute(f"DROP FUNCTION IF EXISTS {PREFIX}_truncate()")
    schema_editor.execute(f"DROP TABLE IF EXISTS {LOG}")


class Migration(migrations.Migration):
    dependencies = [
        ("integrations", "0010_config_pieces"),
        ("inventory", "0001_initial"),
        ("tenancy", "0001_initial"),
        ("scheduling", "0035_job_running_index"),
    ]
    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
