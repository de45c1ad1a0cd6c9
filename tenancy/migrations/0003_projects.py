"""Projects under departments: tenancy.Project and tenancy.ProjectMembership."""

import django.core.validators
import django.db.models.deletion
import django.db.models.functions.text
from decimal import Decimal
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenancy", "0002_identity_providers"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Project",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=100)),
                (
                    "slug",
                    models.SlugField(
                        help_text="Lower-case letters, digits and hyphens; with the department's slug, the "
                        "Kubernetes namespace (<department>-<project>) and the Slurm account name.",
                        max_length=30,
                        validators=[
                            django.core.validators.RegexValidator(
                                "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$",
                                "Use lower-case letters, digits and hyphens, starting and ending with a letter "
                                "or digit.",
                            )
                        ],
                    ),
                ),
                (
                    "guaranteed_gpus",
                    models.PositiveIntegerField(default=0, help_text="Always available; reclaimed if lent."),
                ),
                (
                    "over_quota_weight",
                    models.DecimalField(
                        decimal_places=2,
                        default=Decimal("1.00"),
                        help_text="Share of the department's idle GPUs it may borrow, relative to its sibling "
                        "projects.",
                        max_digits=6,
                        validators=[django.core.validators.MinValueValidator(Decimal("0"))],
                    ),
                ),
                (
                    "limit_gpus",
                    models.PositiveIntegerField(
                        blank=True,
                        help_text="Most GPUs it may hold, borrowing included; empty for no limit.",
                        null=True,
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "department",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="projects",
                        to="tenancy.department",
                    ),
                ),
            ],
            options={"ordering": ["department__name", "name"]},
        ),
        migrations.CreateModel(
            name="ProjectMembership",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "role",
                    models.CharField(
                        choices=[("lead", "Project lead"), ("member", "Project member")],
                        default="member",
                        max_length=10,
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memberships",
                        to="tenancy.project",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="project_memberships",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={"ordering": ["project__name", "role", "user__username"]},
        ),
        migrations.AddConstraint(
            model_name="project",
            constraint=models.UniqueConstraint(
                django.db.models.functions.text.Lower("name"),
                models.F("department"),
                name="tenancy_project_unique_name_per_department",
                violation_error_message="The department already has a project of this name.",
            ),
        ),
        migrations.AddConstraint(
            model_name="project",
            constraint=models.UniqueConstraint(
                fields=("department", "slug"),
                name="tenancy_project_unique_slug_per_department",
                violation_error_message="The department already has a project with this slug.",
            ),
        ),
        migrations.AddConstraint(
            model_name="project",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("limit_gpus__isnull", True),
                    ("limit_gpus__gte", models.F("guaranteed_gpus")),
                    _connector="OR",
                ),
                name="tenancy_project_limit_not_below_guarantee",
                violation_error_message="A project's limit may not be below its guarantee.",
            ),
        ),
        migrations.AddConstraint(
            model_name="project",
            constraint=models.CheckConstraint(
                condition=models.Q(("over_quota_weight__gte", 0)), name="tenancy_project_weight_not_negative"
            ),
        ),
        migrations.AddConstraint(
            model_name="projectmembership",
            constraint=models.UniqueConstraint(
                fields=("user", "project"), name="tenancy_projectmembership_unique_member"
            ),
        ),
    ]
