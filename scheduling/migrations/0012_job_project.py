"""Jobs are submitted to a project of their department: Job.project."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0011_job_topology_fallback"), ("tenancy", "0003_projects")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="project",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="jobs",
                to="tenancy.project",
            ),
        ),
    ]
