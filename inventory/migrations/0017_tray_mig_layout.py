"""ComputeTray.mig_layout and mig_layout_devices: the MIG layout an admin chose for a tray's GPUs
(inventory.mig_layouts; scheduling.services.mig_layouts). SQLite rebuilds the tray table to add a column: its
same-rack triggers go first and come back after (as in 0006 and 0009)."""

import importlib

from django.db import migrations, models

import inventory.validators

# The same steps 0009 takes around its new tray column (SQLite only; nothing on PostgreSQL).
_0009 = importlib.import_module("inventory.migrations.0009_node_staleness")
drop_sqlite_triggers = _0009.drop_sqlite_triggers
install_sqlite_triggers = _0009.install_sqlite_triggers


class Migration(migrations.Migration):
    dependencies = [("inventory", "0016_maintenance_action")]

    operations = [
        migrations.RunPython(drop_sqlite_triggers, install_sqlite_triggers, elidable=False),
        migrations.AddField(
            model_name="computetray",
            name="mig_layout",
            field=models.CharField(
                blank=True,
                help_text="MIG layout (mig-parted config)",
                max_length=63,
                validators=[inventory.validators.validate_mig_layout_name],
            ),
        ),
        migrations.AddField(
            model_name="computetray",
            name="mig_layout_devices",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(install_sqlite_triggers, drop_sqlite_triggers, elidable=False),
    ]
