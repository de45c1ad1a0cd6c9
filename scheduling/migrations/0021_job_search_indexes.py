"""Two indexes on the jobs for the global search (portal.pages.search): the name, which its exact-name
lookup (`_job_named`) reads instead of every job, and (created_at, id), the newest-first order in which it
reads the jobs whose name holds a common word ("pretrain": a tenth of a year's jobs), stopping at the first
21 instead of sorting every match. Built CONCURRENTLY on PostgreSQL: an upgrade does not hold the writes to the jobs while
it builds (docs/deployment/operations.md, Upgrading), hence `atomic = False`; a plain index elsewhere."""

from django.db import migrations, models

from core.migration_ops import AddIndexConcurrentlyOnPostgreSQL


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("scheduling", "0020_pass_queue_and_estimates")]

    operations = [
        AddIndexConcurrentlyOnPostgreSQL(
            model_name="job", index=models.Index(fields=["name"], name="scheduling_job_name_idx")
        ),
        AddIndexConcurrentlyOnPostgreSQL(
            model_name="job",
            index=models.Index(fields=["created_at", "id"], name="scheduling_job_created_idx"),
        ),
    ]
