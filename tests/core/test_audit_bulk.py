"""Bulk changes are audited: update_recorded, bulk_update_recorded and recording_changes record one event
per changed row of an audited model with before and after, under the current audit context, and send
bulk_changed for any model (audited or not) with exactly the changed fields."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.audit import (
    audit_context,
    bulk_changed,
    bulk_update_recorded,
    record_bulk_change,
    recording_changes,
    update_recorded,
)
from core.models import AuditAction, AuditEvent, AuditSource
from inventory.choices import GpuHealth, TrayState
from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack

pytestmark = pytest.mark.django_db


@pytest.fixture
def rack(demo_inventory) -> Rack:
    return Rack.objects.get(name="gb-r01")


@pytest.fixture
def sent():
    """Every bulk_changed signal sent during the test: [(sender, changes)]."""
    received = []

    def receiver(sender, changes, **kwargs):
        received.append((sender, changes))

    bulk_changed.connect(receiver, dispatch_uid="test_audit_bulk")
    yield received
    bulk_changed.disconnect(dispatch_uid="test_audit_bulk")


def tray_events():
    return AuditEvent.objects.filter(object_type="inventory.computetray").order_by("pk")


def test_update_recorded_records_each_changed_row_with_before_after_actor_and_source(rack, admin_user, sent):
    trays = ComputeTray.objects.filter(rack=rack, slot__in=[1, 2, 7])  # 7 is the seed's drained tray
    reason7 = ComputeTray.objects.get(rack=rack, slot=7).state_reason
    with audit_context(AuditSource.API, actor=admin_user):
        count = update_recorded(trays, state=TrayState.DRAIN, state_reason="maintenance")

    assert count == 3
    events = {e.object_repr: e for e in tray_events()}
    assert set(events) == {"gb-r01-t01", "gb-r01-t02", "gb-r01-t07"}
    t1 = events["gb-r01-t01"]
    assert (t1.action, t1.source, t1.actor, t1.actor_name) == (AuditAction.UPDATE, "api", admin_user, "admin")
    assert t1.object_id == str(ComputeTray.objects.get(rack=rack, slot=1).pk)
    assert t1.before == {"state": "up", "state_reason": ""}
    assert t1.after == {"state": "drain", "state_reason": "maintenance"}
    # Tray 7 was drained already: only its reason changed.
    assert events["gb-r01-t07"].before == {"state_reason": reason7}
    assert events["gb-r01-t07"].after == {"state_reason": "maintenance"}
    [(model, changes)] = sent
    assert model is ComputeTray
    assert changes[int(t1.object_id)] == {
        "state": ("up", TrayState.DRAIN),
        "state_reason": ("", "maintenance"),
    }
    assert ComputeTray.objects.filter(rack=rack, slot__in=[1, 2, 7], state=TrayState.DRAIN).count() == 3


def test_an_update_that_changes_nothing_records_and_sends_nothing(rack, sent):
    update_recorded(ComputeTray.objects.filter(rack=rack, slot=1), state=TrayState.UP)
    update_recorded(ComputeTray.objects.none(), state=TrayState.DRAIN)
    assert not tray_events().exists()
    assert sent == []


def test_foreign_keys_are_recorded_as_the_related_pk(rack, sent):
    partition = NVLinkPartition.objects.create(rack=rack, name="spare", clique_id=5)
    old = ComputeTray.objects.get(rack=rack, slot=3).partition_id
    update_recorded(ComputeTray.objects.filter(rack=rack, slot=3), partition=partition)
    [event] = tray_events()
    assert (event.before, event.after) == ({"partition": old}, {"partition": partition.pk})
    assert sent[-1][1] == {int(event.object_id): {"partition": (old, partition.pk)}}


def test_a_model_that_is_not_audited_is_announced_but_not_recorded(rack, sent):
    gpus = Gpu.objects.filter(tray__rack=rack, tray__slot=4)
    pks = sorted(gpus.values_list("pk", flat=True))
    health = dict(gpus.values_list("pk", "health"))
    update_recorded(Gpu.objects.filter(pk__in=pks), health=GpuHealth.UNHEALTHY)
    assert not AuditEvent.objects.filter(object_type="inventory.gpu").exists()
    [(model, changes)] = sent
    assert model is Gpu
    changed = [pk for pk in pks if health[pk] != GpuHealth.UNHEALTHY]
    assert changes == {pk: {"health": (health[pk], GpuHealth.UNHEALTHY)} for pk in changed}


def test_volatile_fields_are_announced_but_not_audited(rack, sent):
    tray = ComputeTray.objects.get(rack=rack, slot=5)
    record_bulk_change(ComputeTray, {tray.pk: {"last_report": ({}, {"host": "x"})}})
    assert not tray_events().exists()
    assert sent == [(ComputeTray, {tray.pk: {"last_report": ({}, {"host": "x"})}})]


def test_bulk_update_recorded(rack, sent):
    trays = list(ComputeTray.objects.filter(rack=rack, slot__in=[8, 9]).order_by("slot"))
    trays[0].state, trays[0].state_reason = TrayState.DOWN, "PSU"
    with audit_context(AuditSource.TASK):
        bulk_update_recorded(trays, ["state", "state_reason"])
    [event] = tray_events()  # tray 9 did not change
    assert (event.object_repr, event.source) == ("gb-r01-t08", AuditSource.TASK)
    assert (event.before, event.after) == (
        {"state": "up", "state_reason": ""},
        {"state": "down", "state_reason": "PSU"},
    )
    assert ComputeTray.objects.get(pk=trays[0].pk).state == TrayState.DOWN


def test_recording_changes_records_the_net_change_over_several_updates(rack, sent):
    spare = NVLinkPartition.objects.create(rack=rack, name="spare", clique_id=5)
    before = dict(ComputeTray.objects.filter(rack=rack).values_list("slot", "partition_id"))
    with recording_changes(ComputeTray.objects.filter(rack=rack), "partition"):
        ComputeTray.objects.filter(rack=rack).update(partition=None)
        ComputeTray.objects.filter(rack=rack).exclude(slot__in=[1, 2]).update(partition_id=before[3])
        ComputeTray.objects.filter(rack=rack, slot__in=[1, 2]).update(partition=spare)
    events = list(tray_events())
    assert sorted(e.object_repr for e in events) == ["gb-r01-t01", "gb-r01-t02"]
    assert all((e.before, e.after) == ({"partition": before[1]}, {"partition": spare.pk}) for e in events)
    assert len(sent) == 1


def test_bulk_recording_costs_a_fixed_number_of_queries(demo_inventory):
    trays = ComputeTray.objects.filter(rack__name__in=["gb-r01", "gb-r02"])
    with CaptureQueriesContext(connection) as one_rack:
        update_recorded(trays.filter(rack__name="gb-r01"), state_reason="a")
    with CaptureQueriesContext(connection) as two_racks:
        update_recorded(trays, state_reason="b")
    assert len(two_racks) == len(one_rack)
    assert AuditEvent.objects.filter(object_type="inventory.computetray").count() == 18 + 36
