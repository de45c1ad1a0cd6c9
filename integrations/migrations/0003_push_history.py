"""Pushes you can trust: what Rackplane learned about each target when it last tested or pushed it
(ConfigTarget.facts: the Slurm version the partition wizard reads). Pushes already keep what they rendered
(ConfigPush.payload); integrations.push_history bounds how many keep it."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("integrations", "0002_kinds_from_registry")]

    operations = [
        migrations.AddField(
            model_name="configtarget",
            name="facts",
            field=models.JSONField(blank=True, default=dict, editable=False),
        ),
    ]
