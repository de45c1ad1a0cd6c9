"""A tray may only be in an NVLink partition of its own rack, enforced by the database.

PostgreSQL: a composite foreign key (partition_id, rack_id) -> nvlinkpartition (id, rack_id), backed by the
unique constraint inventory_nvlinkpartition_unique_id_rack. SQLite cannot add a foreign key to an existing
table, so there the same rule is two triggers. (Django rebuilds SQLite tables on some ALTERs, which drops
triggers: a later migration that alters inventory_computetray must re-run `_sqlite_install`.)
"""

from django.db import migrations

NAME = "inventory_computetray_partition_same_rack"
MESSAGE = "a compute tray may only be in an NVLink partition of its own rack"

SQLITE_WHEN = (
    "NEW.partition_id IS NOT NULL AND NEW.rack_id IS NOT "
    "(SELECT rack_id FROM inventory_nvlinkpartition WHERE id = NEW.partition_id)"
)


def _sqlite_install(schema_editor):
    for event in ("INSERT", "UPDATE OF partition_id, rack_id"):
        suffix = event.split()[0].lower()
        schema_editor.execute(
            f"CREATE TRIGGER IF NOT EXISTS {NAME}_{suffix} BEFORE {event} ON inventory_computetray "
            f"FOR EACH ROW WHEN {SQLITE_WHEN} BEGIN SELECT RAISE(ABORT, '{NAME}: {MESSAGE}'); END"
        )
    schema_editor.execute(
        f"CREATE TRIGGER IF NOT EXISTS {NAME}_move BEFORE UPDATE OF rack_id ON inventory_nvlinkpartition "
        "FOR EACH ROW WHEN EXISTS (SELECT 1 FROM inventory_computetray WHERE partition_id = NEW.id "
        f"AND rack_id IS NOT NEW.rack_id) BEGIN SELECT RAISE(ABORT, '{NAME}: {MESSAGE}'); END"
    )


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(
            f"ALTER TABLE inventory_computetray ADD CONSTRAINT {NAME} FOREIGN KEY (partition_id, rack_id) "
            "REFERENCES inventory_nvlinkpartition (id, rack_id)"
        )
    elif vendor == "sqlite":
        _sqlite_install(schema_editor)


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE inventory_computetray DROP CONSTRAINT {NAME}")
    elif vendor == "sqlite":
        for suffix in ("insert", "update", "move"):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {NAME}_{suffix}")


class Migration(migrations.Migration):
    dependencies = [("inventory", "0001_initial")]
    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
