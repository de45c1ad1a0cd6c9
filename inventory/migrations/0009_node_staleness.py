"""Discovery at fleet scale and nodes that stop reporting.

* ComputeTray.report_key: what an unchanged report is compared with (inventory.ingest.heartbeats);
* HealthSettings.node_silent_after_s and the node_silent rule kind with its "hold" action (place no new work);
  the default rule "node silent hold" is seeded here for databases migrated past 0007 (0007 seeds it in new
  ones: it reads the live default list).
"""

import importlib

import django.core.validators
from django.db import migrations, models

from inventory.discovery.rule_defaults import NODE_SILENT_RULE

SAME_RACK = "inventory.migrations.0002_tray_partition_same_rack"


def drop_sqlite_triggers(apps, schema_editor):
    """SQLite rebuilds the tray table to add a column: its same-rack triggers go first (as in 0006)."""
    if schema_editor.connection.vendor == "sqlite":
        importlib.import_module(SAME_RACK).backwards(apps, schema_editor)


def install_sqlite_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        importlib.import_module(SAME_RACK)._sqlite_install(schema_editor)


def seed(apps, schema_editor):
    HealthRule = apps.get_model("inventory", "HealthRule")
    rule = NODE_SILENT_RULE
    HealthRule.objects.get_or_create(
        name=rule.name,
        defaults={"enabled": True, "kind": rule.kind, "action": rule.action, "note": rule.note},
    )


def unseed(apps, schema_editor):
    HealthRule = apps.get_model("inventory", "HealthRule")
    HealthRule.objects.filter(kind=NODE_SILENT_RULE.kind).delete()  # the old kinds do not include it


KINDS = [
    ("xid", "XID"),
    ("recovery_action", "Recovery action"),
    ("fabric", "Fabric health"),
    ("dcgm_field", "DCGM field"),
    ("check_failed", "Active check failed"),
    ("node_silent", "Node silent (stopped reporting)"),
]


class Migration(migrations.Migration):
    dependencies = [("inventory", "0008_fault_requeue")]

    operations = [
        migrations.RunPython(drop_sqlite_triggers, install_sqlite_triggers, elidable=False),
        migrations.AddField(
            model_name="computetray",
            name="report_key",
            field=models.CharField(blank=True, editable=False, max_length=64),
        ),
        migrations.RunPython(install_sqlite_triggers, drop_sqlite_triggers, elidable=False),
        migrations.AddField(
            model_name="healthsettings",
            name="node_silent_after_s",
            field=models.PositiveIntegerField(
                default=300,
                help_text="A tray whose node has reported before but not for this many seconds is stale "
                "(node silent); the node_silent health rule says what the scheduler does with it.",
                validators=[django.core.validators.MinValueValidator(30)],
            ),
        ),
        migrations.AlterField(
            model_name="healthevent",
            name="kind",
            field=models.CharField(choices=KINDS, max_length=20),
        ),
        migrations.AlterField(
            model_name="healthrule",
            name="action",
            field=models.CharField(
                choices=[
                    ("drain", "Drain the tray"),
                    ("degrade", "Mark the NVLink partition degraded"),
                    ("warn", "Warn only"),
                    ("hold", "Place no new work on the tray"),
                ],
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="healthrule",
            name="kind",
            field=models.CharField(choices=KINDS, help_text="What the event is.", max_length=20),
        ),
        migrations.RunPython(seed, unseed),
        migrations.AddConstraint(
            model_name="healthrule",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("action__in", ["hold", "warn"]), ("kind", "node_silent")),
                    models.Q(
                        models.Q(("kind", "node_silent"), _negated=True),
                        models.Q(("action", "hold"), _negated=True),
                    ),
                    _connector="OR",
                ),
                name="inventory_healthrule_node_silent_actions",
                violation_error_message="A node silent rule either holds the tray (places no new work) or "
                "only warns; hold is for node silent rules only.",
            ),
        ),
    ]
