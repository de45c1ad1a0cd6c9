"""Jobs already running on Slurm when a department got its two QOS were submitted under its one QOS (its
slug, when the target sent the accounting): they are counted in the department's own QOS, as Slurm counts
them, so a job dispatched after the upgrade borrows rather than being held behind them
(integrations.dispatch.job_qos). A job that ran without accounting is counted too: it can only make a new
job borrow, never be held."""

from django.db import migrations
from django.db.models import OuterRef, Subquery


def count_running_slurm_jobs(apps, schema_editor):
    Job = apps.get_model("scheduling", "Job")
    Department = apps.get_model("tenancy", "Department")
    slug = Department.objects.filter(pk=OuterRef("department_id")).values("slug")[:1]
    Job.objects.filter(state="running", backend="slurm", qos="").exclude(backend_id="").exclude(
        backend_id__startswith="rendered/"
    ).update(qos=Subquery(slug))


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0016_job_qos")]

    operations = [migrations.RunPython(count_running_slurm_jobs, migrations.RunPython.noop, elidable=True)]
