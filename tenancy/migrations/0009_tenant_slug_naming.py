"""One derivation for every name made from tenant slugs (tenancy.naming, docs/identifiers.md).

Slugs become 1-30 lower-case letters, digits and single hyphens starting with a letter; department slugs may
not be reserved names (Kubernetes' own namespaces, Slurm's root account...). A project's namespace and Slurm
account become `<department>--<project>` (was `<department>-<project>`, which could collide).

Before changing anything, `check_existing_slugs` refuses to migrate, naming every row to fix, when a saved
slug breaks the new rules (rename it in the previous release: its namespace and Slurm account change with
it), or when a project's jobs still hold GPUs: their namespace is renamed at the next push, and a Kubernetes
target prunes the old `<department>-<project>` namespace with what runs in it. Let them finish (or cancel
them), or set RACKPLANE_ALLOW_PROJECT_RENAME=1 to migrate anyway.
"""

from django.conf import settings
from django.db import migrations, models

import tenancy.models.departments
import tenancy.models.projects
from tenancy import naming

HOLDING_STATES = ("starting", "running")  # scheduling.choices.HOLDING_STATES


def check_existing_slugs(apps, schema_editor):
    Department = apps.get_model("tenancy", "Department")
    Project = apps.get_model("tenancy", "Project")
    Job = apps.get_model("scheduling", "Job")
    problems = []
    for pk, name, slug in Department.objects.order_by("slug").values_list("pk", "name", "slug"):
        if (why := naming.slug_error(slug)) is not None:
            problems.append(f"department {name!r} (id {pk}) has the slug {slug!r}: {why}")
    for pk, name, slug, department in Project.objects.order_by("department__slug", "slug").values_list(
        "pk", "name", "slug", "department__slug"
    ):
        if (why := naming.slug_error(slug, department=False)) is not None:
            problems.append(f"project {name!r} (id {pk}) of {department!r} has the slug {slug!r}: {why}")
    if problems:
        raise RuntimeError(
            "Rackplane cannot derive collision-free namespaces and Slurm accounts from these slugs "
            "(docs/identifiers.md). Change them with the previous release (a department's or project's slug "
            "is its namespace and Slurm account: they change with it), then migrate again:\n  - "
            + "\n  - ".join(problems)
        )
    running = list(
        Job.objects.filter(project__isnull=False, state__in=HOLDING_STATES)
        .order_by("pk")
        .values_list("pk", "project__department__slug", "project__slug")
    )
    if running and not settings.RACKPLANE_ALLOW_PROJECT_RENAME:
        jobs = ", ".join(f"job {pk} in {d}-{p}" for pk, d, p in running[:20])
        raise RuntimeError(
            f"{len(running)} job(s) of projects still hold GPUs ({jobs}). This release renames every "
            "project's Kubernetes namespace and Slurm account from <department>-<project> to "
            "<department>--<project>; the next push to a Kubernetes target deletes the old namespaces with "
            "what runs in them. Let these jobs finish (or cancel them) and migrate again, or set "
            "RACKPLANE_ALLOW_PROJECT_RENAME=1 to migrate anyway."
        )


class Migration(migrations.Migration):
    dependencies = [
        ("tenancy", "0008_storage_path_validation"),
        ("scheduling", "0012_job_project"),  # Job.project, read by the check
    ]

    operations = [
        migrations.RunPython(check_existing_slugs, migrations.RunPython.noop, elidable=False),
        migrations.AlterField(
            model_name="department",
            name="slug",
            field=models.SlugField(
                help_text="Its Kubernetes namespace, Slurm account and QOS (tenancy.naming): up to 30 "
                "lower-case letters, digits and single hyphens, starting with a letter.",
                max_length=30,
                validators=[tenancy.models.departments.validate_department_slug],
            ),
        ),
        migrations.AlterField(
            model_name="project",
            name="slug",
            field=models.SlugField(
                help_text="Up to 30 lower-case letters, digits and single hyphens, starting with a letter; "
                "with the department's slug, the Kubernetes namespace and Slurm account "
                "<department>--<project> (tenancy.naming).",
                max_length=30,
                validators=[tenancy.models.projects.validate_project_slug],
            ),
        ),
        migrations.AddConstraint(
            model_name="department",
            constraint=models.CheckConstraint(
                condition=models.Q(("slug__regex", "\\A[a-z](?:-?[a-z0-9])*\\Z")),
                name="tenancy_department_slug_form",
                violation_error_message="A department's slug is lower-case letters, digits and single "
                "hyphens, starting with a letter and ending with a letter or digit.",
            ),
        ),
        migrations.AddConstraint(
            model_name="department",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        (
                            "slug__in",
                            [
                                "all",
                                "default",
                                "gpu",
                                "gpu-operator",
                                "kube",
                                "kueue-system",
                                "none",
                                "normal",
                                "nvidia-dra-driver-gpu",
                                "rackplane",
                                "root",
                            ],
                        ),
                        _negated=True,
                    ),
                    models.Q(("slug__startswith", "kube-"), _negated=True),
                ),
                name="tenancy_department_slug_not_reserved",
                violation_error_message="This slug is reserved (Kubernetes, Slurm or Rackplane use the "
                "name).",
            ),
        ),
        migrations.AddConstraint(
            model_name="project",
            constraint=models.CheckConstraint(
                condition=models.Q(("slug__regex", "\\A[a-z](?:-?[a-z0-9])*\\Z")),
                name="tenancy_project_slug_form",
                violation_error_message="A project's slug is lower-case letters, digits and single hyphens, "
                "starting with a letter and ending with a letter or digit.",
            ),
        ),
    ]
