"""Trays an admin took out for planned maintenance before it had a state of its own were left in "drain":
move them to "maintenance" (the schedulers keep them drained either way: nothing is pushed). A tray counts
as one when it is out for Rackplane's own reason and the last decision that took it out was a maintenance
drain (inventory.health.actions.drain_tray with maintenance=True). Backwards: they go back to "drain"."""

from django.db import migrations

REASON_PREFIX = "rackplane: "
TAKEN_OUT = ("drain", "maintenance", "needs_service")


def to_maintenance(apps, schema_editor):
    ComputeTray = apps.get_model("inventory", "ComputeTray")
    HealthAction = apps.get_model("inventory", "HealthAction")
    moved = []
    for tray_id in ComputeTray.objects.filter(
        state="drain", state_reason__startswith=REASON_PREFIX
    ).values_list("pk", flat=True):
        last = (
            HealthAction.objects.filter(tray_id=tray_id, kind__in=TAKEN_OUT, dry_run=False)
            .order_by("-created_at", "-pk")
            .values_list("kind", flat=True)
            .first()
        )
        if last == "maintenance":
            moved.append(tray_id)
    ComputeTray.objects.filter(pk__in=moved).update(state="maintenance")


def to_drain(apps, schema_editor):
    ComputeTray = apps.get_model("inventory", "ComputeTray")
    ComputeTray.objects.filter(state="maintenance", state_reason__startswith=REASON_PREFIX).update(
        state="drain"
    )


class Migration(migrations.Migration):
    dependencies = [("inventory", "0018_service_tracking")]

    operations = [migrations.RunPython(to_maintenance, to_drain, elidable=True)]
