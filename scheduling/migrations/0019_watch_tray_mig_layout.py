"""PostgreSQL: the pass's cluster is built from ComputeTray.mig_layout too (a tray given a MIG layout is not
given whole: tenancy.services.schedulable_gpus_q), so the inventory change trigger of migration 0010 on
inventory_computetray watches it (scheduling.pass_cache.CACHED_COLUMNS)."""

from django.db import migrations

TRIGGER = "scheduling_inventory_changed"
TRAY_TABLE = "inventory_computetray"
BEFORE = ("hostname", "rack_id", "slot", "partition_id", "state", "fabric_problems")
AFTER = (*BEFORE, "mig_layout")


def _tray_trigger(schema_editor, columns) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    arguments = ", ".join(f"'{column}'" for column in columns)
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}_update ON {TRAY_TABLE}")
    schema_editor.execute(
        f"CREATE TRIGGER {TRIGGER}_update AFTER UPDATE ON {TRAY_TABLE} "
        f"FOR EACH ROW EXECUTE FUNCTION {TRIGGER}({arguments})"
    )


def watch_mig_layout(apps, schema_editor):
    _tray_trigger(schema_editor, AFTER)


def unwatch_mig_layout(apps, schema_editor):
    _tray_trigger(schema_editor, BEFORE)


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0018_watch_gpu_mig_mode"), ("inventory", "0017_tray_mig_layout")]

    operations = [migrations.RunPython(watch_mig_layout, unwatch_mig_layout)]
