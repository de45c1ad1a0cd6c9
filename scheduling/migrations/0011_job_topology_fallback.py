"""Jobs may opt in to a wider topology after a bounded wait: Job.fallback_topology and
Job.fallback_after_minutes, with their constraints."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0010_inventory_change_log")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="fallback_after_minutes",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="fallback_topology",
            field=models.CharField(
                blank=True,
                choices=[
                    ("partition", "One NVLink partition"),
                    ("rack", "One NVLink domain (rack)"),
                    ("any", "Anywhere"),
                ],
                default="",
                max_length=16,
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(("fallback_topology__in", ["", "partition", "rack", "any"])),
                name="scheduling_job_fallback_topology_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("fallback_topology", ""),
                    models.Q(("fallback_after_minutes__gte", 1), ("fallback_after_minutes__lte", 10080)),
                    _connector="OR",
                ),
                name="scheduling_job_fallback_after_in_range",
            ),
        ),
    ]
