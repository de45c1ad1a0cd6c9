"""Identity-provider groups give project roles: GroupRoleRule.project (one of the rule's department's
projects), ProjectMembership.origin (by hand, or an identity provider's group, re-synced at each sign-in)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("tenancy", "0005_people")]

    operations = [
        migrations.RemoveConstraint(
            model_name="grouprolerule",
            name="tenancy_grouprolerule_one_role_per_department",
        ),
        migrations.AddField(
            model_name="grouprolerule",
            name="project",
            field=models.ForeignKey(
                blank=True,
                help_text="Optional, for a lead or member role: one of the department's projects. The group "
                "then makes its people the project's leads or members (and members of the department).",
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="group_rules",
                to="tenancy.project",
            ),
        ),
        migrations.AddField(
            model_name="projectmembership",
            name="origin",
            field=models.CharField(
                choices=[
                    ("manual", "Granted by hand"),
                    ("oidc", "OpenID Connect group"),
                    ("ldap", "LDAP group"),
                ],
                default="manual",
                help_text="Granted by hand (stays until removed by hand), or by an identity provider's group "
                "(re-synced at each sign-in through it, removed when the group is gone). A change by hand "
                "makes it a hand grant.",
                max_length=10,
            ),
        ),
        migrations.AddConstraint(
            model_name="grouprolerule",
            constraint=models.CheckConstraint(
                condition=models.Q(("project__isnull", True), ("department__isnull", False), _connector="OR"),
                name="tenancy_grouprolerule_project_rule_names_department",
                violation_error_message="A project rule names the project's department too.",
            ),
        ),
        migrations.AddConstraint(
            model_name="grouprolerule",
            constraint=models.UniqueConstraint(
                condition=models.Q(("project__isnull", False)),
                fields=("group", "project"),
                name="tenancy_grouprolerule_one_role_per_project",
                violation_error_message="This group already has a rule for this project: change that rule.",
            ),
        ),
        migrations.AddConstraint(
            model_name="grouprolerule",
            constraint=models.UniqueConstraint(
                condition=models.Q(("department__isnull", False), ("project__isnull", True)),
                fields=("group", "department"),
                name="tenancy_grouprolerule_one_role_per_department",
                violation_error_message="This group already has a rule for this department: change that "
                "rule.",
            ),
        ),
    ]
