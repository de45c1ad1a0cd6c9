"""PostgreSQL: the inventory change log of migration 0010 also names the racks each transaction changed, so
that a kept cluster re-reads only those racks (scheduling.pass_cache; issue 32: at 10,000 racks a cold read
is seconds).

`scheduling_inventorychangerack` holds (xid, rack) for every rack a logged transaction changed: the rack of a
changed rack, tray or partition row (before and after, when it moved), of a GPU's tray, of a dedication's
partition. Rack 0 stands for "all": inserts, deletes and truncates (statement triggers), a department's
slug, an allocation changed in place; a kept cluster then reads cold, as before.
"""

from importlib import import_module

from django.db import migrations

TRIGGER = "scheduling_inventory_changed"
TABLE = "scheduling_inventorychangerack"

# Migration 0010's function, and the same with the racks logged after the transaction.
PREVIOUS = import_module("scheduling.migrations.0010_inventory_change_log").FUNCTION
DECLARED = "    changed boolean := TG_OP <> 'UPDATE';\n"
LOGGED = "        ON CONFLICT (xid) DO UPDATE SET seq = EXCLUDED.seq;\n"
RACKS = f"""        IF TG_LEVEL = 'ROW' THEN
            racks := CASE TG_TABLE_NAME
                WHEN 'inventory_rack' THEN
                    ARRAY[(old_row ->> 'id')::bigint, (new_row ->> 'id')::bigint]
                WHEN 'inventory_computetray' THEN
                    ARRAY[(old_row ->> 'rack_id')::bigint, (new_row ->> 'rack_id')::bigint]
                WHEN 'inventory_nvlinkpartition' THEN
                    ARRAY[(old_row ->> 'rack_id')::bigint, (new_row ->> 'rack_id')::bigint]
                WHEN 'inventory_gpu' THEN
                    ARRAY(SELECT rack_id::bigint FROM inventory_computetray
                          WHERE id IN ((old_row ->> 'tray_id')::bigint, (new_row ->> 'tray_id')::bigint))
                WHEN 'tenancy_dedicatedpartition' THEN
                    ARRAY(SELECT rack_id::bigint FROM inventory_nvlinkpartition
                          WHERE id IN ((old_row ->> 'partition_id')::bigint,
                                       (new_row ->> 'partition_id')::bigint))
                ELSE ARRAY[0::bigint]
            END;
        END IF;
        INSERT INTO {TABLE} (xid, rack_id)
        SELECT txid_current(), rack FROM unnest(racks) AS rack WHERE rack IS NOT NULL
        ON CONFLICT DO NOTHING;
"""
assert DECLARED in PREVIOUS and LOGGED in PREVIOUS
FUNCTION = PREVIOUS.replace(DECLARED, DECLARED + "    racks bigint[] := ARRAY[0::bigint];\n").replace(
    LOGGED, LOGGED + RACKS
)


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f"CREATE TABLE {TABLE} (xid bigint NOT NULL, rack_id bigint NOT NULL, PRIMARY KEY (xid, rack_id))"
    )
    schema_editor.execute(FUNCTION)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(PREVIOUS)
    schema_editor.execute(f"DROP TABLE IF EXISTS {TABLE}")


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0026_job_plan_requeues")]

    operations = [migrations.RunPython(forwards, backwards)]
