"""ConfigPush.has_pieces: whether a push row's payload names stored pieces (integrations.contents), so that
the garbage collection reads only those rows (a fabric push's payload is 37 MB at 10,000 racks)."""

from django.db import migrations, models


def mark(apps, schema_editor):
    ConfigPush = apps.get_model("integrations", "ConfigPush")
    ConfigPush.objects.filter(payload__has_key="file_pieces").update(has_pieces=True)


class Migration(migrations.Migration):
    dependencies = [("integrations", "0011_render_change_log")]

    operations = [
        migrations.AddField(
            model_name="configpush",
            name="has_pieces",
            field=models.BooleanField(default=False, editable=False, verbose_name="has stored pieces"),
        ),
        migrations.RunPython(mark, migrations.RunPython.noop),
    ]
