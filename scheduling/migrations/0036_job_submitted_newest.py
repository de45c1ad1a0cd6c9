"""The search's submitters at 21 million jobs (issue 32, portal.pages.search): a submitter's jobs newest first
(scheduling_job_submitted_idx, on (submitted_by, created_at, id)), and the probe for a submitter's newest job
in one department, one index entry in the order the index gives (scheduling_job_submit_dept_idx, on
(submitted_by, department, created_at), in place of scheduling_job_submitter_idx on (submitted_by,
department)). The foreign key's own index goes: both new ones start with its column.

Built and dropped CONCURRENTLY on PostgreSQL, so an upgrade does not hold the writes to the jobs while it
builds (two indexes on 21 million jobs: about two minutes; docs/deployment/operations.md, Upgrading), hence
`atomic = False`; the new indexes are made before the old ones go. Plain elsewhere (SQLite)."""

from django.conf import settings
from django.db import migrations, models

from core.migration_ops import (
    AddIndexConcurrentlyOnPostgreSQL,
    RemoveIndexConcurrentlyOnPostgreSQL,
    concurrently,
)


def _foreign_key_index(schema_editor) -> str | None:
    """The name of the index Django made for scheduling_job.submitted_by_id alone, if there is one."""
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, "scheduling_job")
    for name, constraint in constraints.items():
        if constraint["index"] and not constraint["unique"] and constraint["columns"] == ["submitted_by_id"]:
            return name
    return None


def drop_foreign_key_index(apps, schema_editor):
    name = _foreign_key_index(schema_editor)
    if name is not None:
        how = "CONCURRENTLY " if concurrently(schema_editor) else ""
        schema_editor.execute(f"DROP INDEX {how}{schema_editor.quote_name(name)}")


def make_foreign_key_index(apps, schema_editor):
    if _foreign_key_index(schema_editor) is None:
        schema_editor.execute(
            "CREATE INDEX scheduling_job_submitted_by_id_0f473460 ON scheduling_job (submitted_by_id)"
        )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("scheduling", "0035_job_running_index"),
        ("tenancy", "0015_field_verbose_names"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgreSQL(
            model_name="job",
            index=models.Index(
                fields=["submitted_by", "created_at", "id"], name="scheduling_job_submitted_idx"
            ),
        ),
        AddIndexConcurrentlyOnPostgreSQL(
            model_name="job",
            index=models.Index(
                fields=["submitted_by", "department", "created_at"], name="scheduling_job_submit_dept_idx"
            ),
        ),
        RemoveIndexConcurrentlyOnPostgreSQL(model_name="job", name="scheduling_job_submitter_idx"),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="job",
                    name="submitted_by",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=models.SET_NULL,
                        related_name="jobs",
                        to=settings.AUTH_USER_MODEL,
                        verbose_name="submitted by",
                    ),
                )
            ],
            database_operations=[migrations.RunPython(drop_foreign_key_index, make_foreign_key_index)],
        ),
    ]
