"""PostgreSQL: changes to the fabric in use (issue 33's tables) are logged like inventory changes, so a pass
that keeps its cluster no longer reads the whole fabric (a row per placed rack: 10,000 at 10,000 racks) to
compare it with the kept cluster's (issue 32). The fabric is read with the cluster, on a cold read only.

The same trigger function as migration 0027: these tables are not a rack's, so a change logs rack 0 ("all":
the next pass reads cold, fabric included). An import replaces a source's rows and switches the one in use
(rare); a rack's rename is logged already (inventory_rack.name: that rack is read again, its trays' rack
name differs, a cold read).
"""

from django.db import migrations

TRIGGER = "scheduling_inventory_changed"

# Table -> the columns `inventory.fabric.current_fabric()` reads (scheduling.pass_cache.FABRIC_COLUMNS).
COLUMNS = {
    "inventory_fabricimport": ("in_use",),
    "inventory_fabricgroup": ("name", "parent_id"),
    "inventory_rackplace": ("fabric_id", "rack_id", "unit_id"),
}


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
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


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in COLUMNS:
        for suffix in ("update", "rows"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}_{suffix} ON {table}")


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0029_whatif_mig"), ("inventory", "0023_fabric")]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
