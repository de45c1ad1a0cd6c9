"""PostgreSQL: log which transactions change what the scheduling pass builds its cluster from.

The pass keeps the engine's cluster (18,000 trays at 1,000 racks) between passes and rebuilds it only when
the inventory it was read from changed (scheduling.pass_cache). Triggers on the tables it reads write the
id of every transaction that changes one of the columns below (or inserts, deletes, truncates) into
`scheduling_inventorychange`; a cached cluster remembers the snapshot it was read under, and any logged
transaction that snapshot did not see means a rebuild. In the database, so nothing can change the inventory
without the pass knowing: a save, a bulk update, raw SQL, the admin, a restore.

The columns are compared inside the function (`to_jsonb(OLD)`), not in a WHEN clause, so that other apps'
migrations may alter or drop these columns freely; a column that is gone counts as changed on every update
(the cache is then rebuilt every pass: slower, never stale). scheduling.pass_cache.CACHED_COLUMNS is the
same list; a test compares the installed triggers with it. SQLite (the embedded default) has no cache.
"""

from django.db import migrations

# Table -> the columns the pass's cluster is built from (scheduling.pass_cache.CACHED_COLUMNS).
COLUMNS = {
    "inventory_rack": ("name",),
    "inventory_computetray": ("hostname", "rack_id", "slot", "partition_id", "state", "fabric_problems"),
    "inventory_gpu": ("tray_id", "index", "health", "fabric_state", "reported_clique_id"),
    "inventory_nvlinkpartition": ("rack_id", "clique_id", "name"),
    "tenancy_dedicatedpartition": ("partition_id", "department_id"),
    "tenancy_department": ("slug",),
}
# Allocations are made and deleted by passes (a kept cluster checks their count and highest id); one changed
# in place (the admin) is logged like an inventory change (scheduling.pass_cache.ALLOCATION_COLUMNS).
ALLOCATION_COLUMNS = {"scheduling_allocation": ("job_id", "gpu_id")}
TRIGGER = "scheduling_inventory_changed"

FUNCTION = f"""
CREATE OR REPLACE FUNCTION {TRIGGER}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    old_row jsonb;
    new_row jsonb;
    name text;
    changed boolean := TG_OP <> 'UPDATE';
BEGIN
    IF NOT changed THEN
        old_row := to_jsonb(OLD);
        new_row := to_jsonb(NEW);
        FOREACH name IN ARRAY TG_ARGV LOOP
            IF NOT old_row ? name OR old_row -> name IS DISTINCT FROM new_row -> name THEN
                changed := true;
                EXIT;
            END IF;
        END LOOP;
    END IF;
    IF changed THEN
        -- One row per transaction; seq moves on with every change, so a pass that reads its own
        -- transaction's changes (a test, a seed) knows whether more came after it read them.
        INSERT INTO scheduling_inventorychange (xid, seq)
        VALUES (txid_current(), nextval('scheduling_inventorychange_seq'))
        ON CONFLICT (xid) DO UPDATE SET seq = EXCLUDED.seq;
    END IF;
    RETURN NULL;
END
$$
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE SEQUENCE scheduling_inventorychange_seq")
    # xid: txid_current() of a transaction that changed the inventory; the row xid 0 is the pruning
    # horizon (scheduling.pass_cache: rows below it are gone, caches read before it rebuild).
    schema_editor.execute(
        "CREATE TABLE scheduling_inventorychange (xid bigint PRIMARY KEY, seq bigint NOT NULL)"
    )
    schema_editor.execute(FUNCTION)
    for table, columns in COLUMNS.items():
        arguments = ", ".join(f"'{column}'" for column in columns)
        schema_editor.execute(
            f"CREATE TRIGGER {TRIGGER}_update AFTER UPDATE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION {TRIGGER}({arguments})"
        )
        schema_editor.execute(
            f"CREATE TRIGGER {TRIGGER}_rows AFTER INSERT OR DELETE OR TRUNCATE ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {TRIGGER}()"
        )
    for table, columns in ALLOCATION_COLUMNS.items():
        arguments = ", ".join(f"'{column}'" for column in columns)
        schema_editor.execute(
            f"CREATE TRIGGER {TRIGGER}_update AFTER UPDATE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION {TRIGGER}({arguments})"
        )


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in [*COLUMNS, *ALLOCATION_COLUMNS]:
        for suffix in ("update", "rows"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}_{suffix} ON {table}")
    schema_editor.execute(f"DROP FUNCTION IF EXISTS {TRIGGER}()")
    schema_editor.execute("DROP TABLE IF EXISTS scheduling_inventorychange")
    schema_editor.execute("DROP SEQUENCE IF EXISTS scheduling_inventorychange_seq")


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0009_whatif_runs"),
        ("inventory", "0001_initial"),
        ("tenancy", "0001_initial"),
    ]
    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
