"""PostgreSQL: the pass's cluster is built from Gpu.mig_mode too (a GPU in MIG mode is not given whole:
tenancy.services.schedulable_gpus_q), so the inventory change trigger of migration 0010 on inventory_gpu
watches it (scheduling.pass_cache.CACHED_COLUMNS)."""

from django.db import migrations

TRIGGER = "scheduling_inventory_changed"
GPU_TABLE = "inventory_gpu"
BEFORE = ("tray_id", "index", "health", "fabric_state", "reported_clique_id")
AFTER = (*BEFORE, "mig_mode")


def _gpu_trigger(schema_editor, columns) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    arguments = ", ".join(f"'{column}'" for column in columns)
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}_update ON {GPU_TABLE}")
    schema_editor.execute(
        f"CREATE TRIGGER {TRIGGER}_update AFTER UPDATE ON {GPU_TABLE} "
        f"FOR EACH ROW EXECUTE FUNCTION {TRIGGER}({arguments})"
    )


def watch_mig_mode(apps, schema_editor):
    _gpu_trigger(schema_editor, AFTER)


def unwatch_mig_mode(apps, schema_editor):
    _gpu_trigger(schema_editor, BEFORE)


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0017_running_slurm_jobs_qos"), ("inventory", "0014_gpu_mig")]

    operations = [migrations.RunPython(watch_mig_mode, unwatch_mig_mode)]
