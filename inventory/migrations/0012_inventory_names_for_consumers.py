"""Inventory names valid for every consumer at save (inventory.names, docs/identifiers.md).

Rack names and NVLink partition names become DNS-1123 labels (63 and 31 characters at most), tray hostnames
DNS-1123 subdomains of at most 63 characters, and a service tier is empty, `gpu` or `gpu_<name>`: no tier can
name a department's Slurm partition (its slug, which never holds `_`). Validators on the fields, and the same
patterns as check constraints.

Before changing anything, `check_existing_names` refuses to migrate, listing every row to fix, while a saved
name breaks these rules: such a name already stops every push at render time (or, for a tier without `_`,
can merge with a department's Slurm partition). Rename them with the previous release (the Django admin),
then migrate again.
"""

import importlib

import core.text
import inventory.validators
from django.db import migrations, models

from inventory import names

SAME_RACK = "inventory.migrations.0002_tray_partition_same_rack"


def drop_sqlite_triggers(apps, schema_editor):
    """SQLite rebuilds the tray and partition tables to add check constraints: the same-rack triggers go
    first and come back after (as in 0006, 0009)."""
    if schema_editor.connection.vendor == "sqlite":
        importlib.import_module(SAME_RACK).backwards(apps, schema_editor)


def install_sqlite_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        importlib.import_module(SAME_RACK)._sqlite_install(schema_editor)


def check_existing_names(apps, schema_editor):
    Rack = apps.get_model("inventory", "Rack")
    NVLinkPartition = apps.get_model("inventory", "NVLinkPartition")
    ComputeTray = apps.get_model("inventory", "ComputeTray")
    problems = []
    for pk, name in Rack.objects.order_by("name").values_list("pk", "name"):
        if (why := names.rack_name_error(name)) is not None:
            problems.append(f"rack {name!r} (id {pk}): name: {why}")
    for pk, rack, name, tier in NVLinkPartition.objects.order_by("rack__name", "name").values_list(
        "pk", "rack__name", "name", "service_tier"
    ):
        if (why := names.partition_name_error(name)) is not None:
            problems.append(f"NVLink partition {name!r} of rack {rack!r} (id {pk}): name: {why}")
        if (why := names.service_tier_error(tier)) is not None:
            problems.append(
                f"NVLink partition {name!r} of rack {rack!r} (id {pk}): service tier {tier!r}: {why}"
            )
    for pk, rack, hostname in ComputeTray.objects.order_by("rack__name", "slot").values_list(
        "pk", "rack__name", "hostname"
    ):
        if (why := names.hostname_error(hostname)) is not None:
            problems.append(f"compute tray {hostname!r} of rack {rack!r} (id {pk}): hostname: {why}")
    if problems:
        raise RuntimeError(
            "Rackplane cannot render these inventory names for Slurm and Kubernetes (docs/identifiers.md). "
            "Change them with the previous release (Django admin), then migrate again:\n  - "
            + "\n  - ".join(problems)
        )


class Migration(migrations.Migration):

    dependencies = [
        ('inventory', '0011_text_rule_validators'),
    ]

    operations = [
        migrations.RunPython(check_existing_names, migrations.RunPython.noop, elidable=False),
        migrations.RunPython(drop_sqlite_triggers, install_sqlite_triggers, elidable=False),
        migrations.AlterField(
            model_name='computetray',
            name='hostname',
            field=models.CharField(help_text="Up to 63 lower-case letters, digits, '-' and '.' (a DNS name): the Kubernetes node's name and the Slurm NodeName.", max_length=128, validators=[inventory.validators.validate_hostname]),
        ),
        migrations.AlterField(
            model_name='nvlinkpartition',
            name='name',
            field=models.CharField(help_text="Up to 31 lower-case letters, digits and '-', starting and ending with a letter or digit.", max_length=64, validators=[core.text.TextValidator(), inventory.validators.validate_partition_name]),
        ),
        migrations.AlterField(
            model_name='nvlinkpartition',
            name='service_tier',
            field=models.CharField(blank=True, help_text="Slurm partition serving it when it is dedicated to no department: 'gpu_<name>' (e.g. gpu_interactive); empty: the shared partition 'gpu'. A dedicated partition is always served by its department's Slurm partition.", max_length=64, validators=[core.text.TextValidator(), inventory.validators.validate_service_tier]),
        ),
        migrations.AlterField(
            model_name='rack',
            name='name',
            field=models.CharField(help_text="Up to 63 lower-case letters, digits and '-', starting and ending with a letter or digit (a Kubernetes label value and part of Slurm block names).", max_length=64, validators=[core.text.TextValidator(), inventory.validators.validate_rack_name]),
        ),
        migrations.AddConstraint(
            model_name='computetray',
            constraint=models.CheckConstraint(condition=models.Q(('hostname__regex', '\\A[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*\\Z')), name='inventory_computetray_hostname_form', violation_error_message="A tray's hostname is lower-case letters, digits, '-' and '.' (a DNS name)."),
        ),
        migrations.AddConstraint(
            model_name='nvlinkpartition',
            constraint=models.CheckConstraint(condition=models.Q(('name__regex', '\\A[a-z0-9](?:[-a-z0-9]*[a-z0-9])?\\Z')), name='inventory_nvlinkpartition_name_form', violation_error_message="An NVLink partition's name is lower-case letters, digits and '-', starting and ending with a letter or digit."),
        ),
        migrations.AddConstraint(
            model_name='nvlinkpartition',
            constraint=models.CheckConstraint(condition=models.Q(('service_tier', ''), ('service_tier__regex', '\\Agpu(?:_[a-z0-9](?:-?[a-z0-9])*)?\\Z'), _connector='OR'), name='inventory_nvlinkpartition_service_tier_form', violation_error_message="A service tier is empty, 'gpu' or 'gpu_<name>'."),
        ),
        migrations.AddConstraint(
            model_name='rack',
            constraint=models.CheckConstraint(condition=models.Q(('name__regex', '\\A[a-z0-9](?:[-a-z0-9]*[a-z0-9])?\\Z')), name='inventory_rack_name_form', violation_error_message="A rack's name is lower-case letters, digits and '-', starting and ending with a letter or digit."),
        ),
        migrations.RunPython(install_sqlite_triggers, drop_sqlite_triggers, elidable=False),
    ]
