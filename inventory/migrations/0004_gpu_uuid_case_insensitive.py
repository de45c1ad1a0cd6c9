"""GPU UUIDs: one row per GPU whatever case a report used.

Existing UUIDs are first brought to the canonical form ("GPU-" + lower-case hex). Rows that were upper-case
copies of another row (the bug this closes: a report in upper case created a second row for a known GPU) are
deleted when nothing but telemetry refers to them; a copy a job allocation refers to stops the migration
with the UUIDs to resolve by hand. Reversing drops the constraints and leaves the canonical UUIDs (valid
before too).
"""

from django.db import migrations, models
from django.db.models.functions import Concat, Lower, Substr


def canonical(uuid: str) -> str:
    return "GPU-" + uuid[4:].lower() if uuid[:4].upper() == "GPU-" else uuid.lower()


def lower_case_uuids(apps, schema_editor):
    Gpu = apps.get_model("inventory", "Gpu")
    Allocation = apps.get_model("scheduling", "Allocation")
    rows = list(Gpu.objects.order_by("pk").values_list("pk", "uuid"))
    keep: dict[str, int] = {}  # canonical UUID -> the row kept: the one already canonical, else the oldest
    for pk, uuid in sorted(rows, key=lambda row: (row[1] != canonical(row[1]), row[0])):
        keep.setdefault(canonical(uuid), pk)
    copies = [pk for pk, uuid in rows if keep[canonical(uuid)] != pk]
    held = sorted(set(Allocation.objects.filter(gpu_id__in=copies).values_list("gpu__uuid", flat=True)))
    if held:
        raise RuntimeError(
            "these GPUs have a case-only duplicate that job allocations refer to; keep one row per GPU "
            f"(re-point the allocations, delete the other) and migrate again: {', '.join(held)}"
        )
    Gpu.objects.filter(pk__in=copies).delete()
    for pk, uuid in rows:
        if pk not in copies and uuid != canonical(uuid):
            Gpu.objects.filter(pk=pk).update(uuid=canonical(uuid))
    if schema_editor.connection.vendor == "postgresql":
        # The tray/partition foreign keys are deferred: fire their checks now, or PostgreSQL refuses the
        # index below in the same transaction ("pending trigger events").
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0003_partition_plans"),
        ("scheduling", "0005_jobs_dispatch_events"),
    ]

    operations = [
        migrations.RunPython(lower_case_uuids, migrations.RunPython.noop, elidable=False),
        migrations.AddConstraint(
            model_name="gpu",
            constraint=models.UniqueConstraint(Lower("uuid"), name="inventory_gpu_unique_uuid_ci"),
        ),
        migrations.AddConstraint(
            model_name="gpu",
            constraint=models.CheckConstraint(
                condition=models.Q(uuid=Concat(models.Value("GPU-"), Lower(Substr("uuid", 5)))),
                name="inventory_gpu_uuid_lower_case",
            ),
        ),
    ]
