"""Seed the health rules with the safe defaults from NVIDIA's XID catalog for GB200 (inventory.discovery.faults
.default_rules): drain for XIDs that need a GPU reset or a reboot and for NVML recovery actions, warn only for
application XIDs, degrade the NVLink partition for NVLink5 and fabric health faults. Rules an admin already
has (same name) are left alone; reversing removes only rules still exactly as seeded."""

from django.db import migrations

from inventory.discovery.rule_defaults import default_rules


def _fields(rule) -> dict:
    return {
        "kind": rule.kind,
        "action": rule.action,
        "xid_first": rule.xid_first,
        "xid_last": rule.xid_last,
        "code": rule.code,
        "threshold": rule.threshold,
        "note": rule.note,
    }


def seed(apps, schema_editor):
    HealthRule = apps.get_model("inventory", "HealthRule")
    for rule in default_rules():
        HealthRule.objects.get_or_create(name=rule.name, defaults={"enabled": True, **_fields(rule)})


def unseed(apps, schema_editor):
    HealthRule = apps.get_model("inventory", "HealthRule")
    for rule in default_rules():
        HealthRule.objects.filter(name=rule.name, **_fields(rule)).delete()


class Migration(migrations.Migration):
    dependencies = [("inventory", "0006_health")]

    operations = [migrations.RunPython(seed, unseed)]
