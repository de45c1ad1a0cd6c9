"""The database itself refuses impossible inventories (named constraints; composite FK / triggers)."""

import pytest
from django.db import IntegrityError, connection, transaction

from inventory.choices import TrayState
from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack

pytestmark = pytest.mark.django_db


def refused(constraint: str, action) -> None:
    with pytest.raises(IntegrityError) as caught, transaction.atomic():
        action()
    # PostgreSQL names the violated constraint; SQLite names only the columns of a unique one.
    if connection.vendor == "postgresql" or "unique" not in constraint:
        assert constraint in str(caught.value)


def test_a_slot_cannot_be_used_twice_in_a_rack(demo_inventory):
    rack = Rack.objects.get(name="gb-r01")
    refused(
        "inventory_computetray_unique_slot",
        lambda: ComputeTray.objects.create(rack=rack, slot=1, hostname="gb-r01-extra"),
    )


def test_slots_stay_within_the_eighteen_tray_positions(demo_inventory):
    rack = Rack.objects.create(name="gb-r99")
    refused(
        "inventory_computetray_slot_range",
        lambda: ComputeTray.objects.create(rack=rack, slot=19, hostname="x"),
    )
    refused(
        "inventory_computetray_slot_range",
        lambda: ComputeTray.objects.create(rack=rack, slot=0, hostname="y"),
    )


def test_a_gpu_uuid_cannot_exist_twice(demo_inventory):
    existing = Gpu.objects.first()
    refused("inventory_gpu_unique_uuid", lambda: Gpu.objects.create(uuid=existing.uuid))


def test_two_gpus_cannot_share_a_tray_position(demo_inventory):
    gpu = Gpu.objects.get(tray__hostname="gb-r01-t01", index=0)
    refused("inventory_gpu_unique_index", lambda: Gpu.objects.create(uuid="GPU-new", tray=gpu.tray, index=0))


def test_gpu_index_is_zero_to_three_and_only_with_a_tray(demo_inventory):
    tray = ComputeTray.objects.get(hostname="gb-r01-t01")
    refused("inventory_gpu_index_range", lambda: Gpu.objects.create(uuid="GPU-a", tray=tray, index=4))
    refused("inventory_gpu_index_iff_tray", lambda: Gpu.objects.create(uuid="GPU-b", tray=None, index=1))


def test_a_tray_cannot_join_a_partition_of_another_rack(demo_inventory):
    tray = ComputeTray.objects.get(hostname="gb-r01-t01")
    foreign = NVLinkPartition.objects.get(rack__name="gb-r02", name="p1")
    tray.partition = foreign
    refused("inventory_computetray_partition_same_rack", lambda: tray.save(update_fields=["partition"]))
    spare = Rack.objects.create(name="gb-r99")
    refused(
        "inventory_computetray_partition_same_rack",
        lambda: ComputeTray.objects.create(rack=spare, slot=1, hostname="gb-r99-t01", partition=foreign),
    )


def test_a_partition_with_trays_cannot_move_to_another_rack(demo_inventory):
    partition = NVLinkPartition.objects.get(rack__name="gb-r02", name="p1")
    partition.rack = Rack.objects.get(name="gb-r01")
    partition.clique_id = 1
    refused("inventory_computetray_partition_same_rack", lambda: partition.save())


def test_a_tray_is_in_at_most_one_partition(demo_inventory):
    """One foreign key: moving a tray to p2 takes it out of p1; it can never be listed in both."""
    tray = ComputeTray.objects.get(hostname="gb-r02-t01")
    p1 = NVLinkPartition.objects.get(rack__name="gb-r02", name="p1")
    p2 = NVLinkPartition.objects.get(rack__name="gb-r02", name="p2")
    tray.partition = p2
    tray.save()
    assert not p1.trays.filter(pk=tray.pk).exists()
    assert p2.trays.filter(pk=tray.pk).exists()


def test_clique_ids_are_unique_per_rack_and_in_range(demo_inventory):
    rack = Rack.objects.get(name="gb-r02")
    refused(
        "inventory_nvlinkpartition_unique_clique",
        lambda: NVLinkPartition.objects.create(rack=rack, clique_id=1, name="again"),
    )
    refused(
        "inventory_nvlinkpartition_unique_name",
        lambda: NVLinkPartition.objects.create(rack=rack, clique_id=3, name="p1"),
    )
    refused(
        "inventory_nvlinkpartition_clique_id_range",
        lambda: NVLinkPartition.objects.create(rack=rack, clique_id=40000, name="big"),
    )


def test_a_tray_that_is_not_up_needs_a_reason(demo_inventory):
    tray = ComputeTray.objects.get(hostname="gb-r01-t01")
    tray.state = TrayState.DOWN
    refused("inventory_computetray_reason_unless_up", lambda: tray.save())
    tray.state_reason = "PSU failure"
    tray.save()


def test_cluster_uuids_are_unique_across_racks(demo_inventory):
    r1, r2 = Rack.objects.get(name="gb-r01"), Rack.objects.get(name="gb-r02")
    r2.cluster_uuid = r1.cluster_uuid
    refused("inventory_rack_unique_cluster_uuid", lambda: r2.save())
