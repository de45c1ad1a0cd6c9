"""The embedded default target: a directory named `local` (var/rendered, or RACKPLANE_RENDER_DIR), so that
`make run` pushes somewhere without any setup."""

from django.db import migrations

LOCAL = "local"


def create_local_target(apps, schema_editor):
    ConfigTarget = apps.get_model("scheduling", "ConfigTarget")
    ConfigTarget.objects.get_or_create(
        name=LOCAL, defaults={"kind": "directory", "enabled": True, "settings": {"path": "", "keep": 5}}
    )


def remove_local_target(apps, schema_editor):
    ConfigTarget = apps.get_model("scheduling", "ConfigTarget")
    ConfigTarget.objects.filter(name=LOCAL, kind="directory", pushes__isnull=True).delete()


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0003_config_targets_and_pushes")]

    operations = [migrations.RunPython(create_local_target, remove_local_target)]
