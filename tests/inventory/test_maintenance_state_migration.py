"""inventory 0019: trays an admin took out for maintenance before maintenance had a state of its own (they
were left in "drain") move to "maintenance"; a health drain, a drain by hand and another owner's drain stay
drained; backwards, they go back to "drain". The migration's functions run on today's models (the fields
they read are unchanged since)."""

import importlib

import pytest
from django.apps import apps

from inventory.choices import ActionKind, TrayState
from inventory.models import ComputeTray, HealthAction

pytestmark = pytest.mark.django_db
migration = importlib.import_module("inventory.migrations.0019_maintenance_state")


def _out(hostname: str, reason: str, *kinds: str) -> ComputeTray:
    tray = ComputeTray.objects.get(hostname=hostname)
    ComputeTray.objects.filter(pk=tray.pk).update(state=TrayState.DRAIN, state_reason=reason)
    for kind in kinds:
        HealthAction.objects.create(tray=tray, kind=kind, reason=reason)
    return tray


def test_maintenance_drains_of_before_move_to_the_maintenance_state_and_back(demo_inventory):
    maintenance = _out("gb-r01-t01", "rackplane: alice: maintenance: fan swap", ActionKind.MAINTENANCE)
    # Returned from one maintenance, then drained by hand: a drain.
    by_hand = _out(
        "gb-r01-t02", "rackplane: alice: PSU", ActionKind.MAINTENANCE, ActionKind.RETURN, ActionKind.DRAIN
    )
    foreign = _out("gb-r01-t03", "slurm: maintenance", ActionKind.MAINTENANCE)  # not Rackplane's reason
    fault = ComputeTray.objects.get(state=TrayState.DRAIN, state_reason__startswith="XID 79")

    migration.to_maintenance(apps, None)
    states = dict(ComputeTray.objects.exclude(state=TrayState.UP).values_list("hostname", "state"))
    assert states == {
        maintenance.hostname: TrayState.MAINTENANCE,
        by_hand.hostname: TrayState.DRAIN,
        foreign.hostname: TrayState.DRAIN,
        fault.hostname: TrayState.DRAIN,
    }

    migration.to_drain(apps, None)
    assert ComputeTray.objects.get(pk=maintenance.pk).state == TrayState.DRAIN
