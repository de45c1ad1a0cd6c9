"""Foreign keys in the audit log read as names: an event keeps the related row's id in before/after and its
str() at the time in `labels`, so a partition a plan deleted still shows as "gb-r01 default". The page and
the API show them; bulk paths read them in one query per related model; events recorded before labels were
kept still show their ids."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from core.audit import audit_context, bulk_update_recorded, recording_changes, update_recorded
from core.models import AuditAction, AuditEvent, AuditSource
from inventory.models import ComputeTray, NVLinkPartition, Rack
from tenancy.models import Membership

# Plans push to the embedded `local` directory target (tests/conftest.py).
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("local_target")]

AUDIT_API = "/api/v1/audit-events/"


@pytest.fixture
def staff(demo_inventory, admin_user) -> APIClient:
    client = APIClient()
    client.force_authenticate(admin_user)
    return client


def tray_event(hostname: str) -> AuditEvent:
    return AuditEvent.objects.filter(object_type="inventory.computetray", object_repr=hostname).latest("pk")


def test_a_plans_tray_moves_show_the_partitions_names_on_the_page(staff, client, admin_user):
    default = NVLinkPartition.objects.get(rack__name="gb-r01", name="default")
    response = staff.post(
        "/api/v1/partition-plans/", {"rack": "gb-r01", "layout": {"preset": "2x9"}}, format="json"
    )
    assert response.status_code == 201, response.data
    assert not NVLinkPartition.objects.filter(pk=default.pk).exists()  # the plan deleted it
    p1 = NVLinkPartition.objects.get(rack__name="gb-r01", name="p1")
    p2 = NVLinkPartition.objects.get(rack__name="gb-r01", name="p2")

    t1, t18 = tray_event("gb-r01-t01"), tray_event("gb-r01-t18")
    assert (t1.before, t1.after) == ({"partition": default.pk}, {"partition": p1.pk})  # ids stay the data
    assert t1.labels == {"before": {"partition": "gb-r01 default"}, "after": {"partition": "gb-r01 p1"}}
    assert t18.labels["after"] == {"partition": "gb-r01 p2"} and t18.after == {"partition": p2.pk}

    client.force_login(admin_user)
    page = client.get("/audit/", {"object_type": "inventory.computetray"}).content.decode()
    assert (
        f'partition:</span> <del title="gb-r01 default (ID {default.pk})">gb-r01 default</del>'
        f'<span class="arrow" aria-label="changed to">→</span>'
        f'<ins title="gb-r01 p1 (ID {p1.pk})">gb-r01 p1</ins>'
    ) in page
    assert f'<ins title="gb-r01 p2 (ID {p2.pk})">gb-r01 p2</ins>' in page
    assert f"<del>{default.pk}</del>" not in page


def test_the_api_adds_labels_beside_the_ids(staff):
    rack = Rack.objects.get(name="gb-r01")
    spare = NVLinkPartition.objects.create(rack=rack, name="spare", clique_id=5)
    old = ComputeTray.objects.get(rack=rack, slot=3).partition_id
    update_recorded(ComputeTray.objects.filter(rack=rack, slot=3), partition=spare, state_reason="moved")

    [row] = staff.get(AUDIT_API, {"object_type": "inventory.computetray"}).json()["results"]
    assert (row["before"], row["after"]) == (
        {"partition": old, "state_reason": ""},
        {"partition": spare.pk, "state_reason": "moved"},
    )
    assert row["labels"] == {
        "before": {"partition": "gb-r01 default"},
        "after": {"partition": "gb-r01 spare"},
    }
    # The partition's own create names its rack; an event with no foreign key has both sides empty.
    [created] = staff.get(AUDIT_API, {"object_type": "inventory.nvlinkpartition"}).json()["results"]
    assert created["labels"] == {"before": {}, "after": {"rack": "gb-r01"}}
    assert created["after"]["rack"] == rack.pk
    update_recorded(ComputeTray.objects.filter(rack=rack, slot=4), state_reason="checked")
    latest = staff.get(AUDIT_API, {"object_type": "inventory.computetray"}).json()["results"][0]
    assert latest["object_repr"] == "gb-r01-t04" and latest["labels"] == {"before": {}, "after": {}}


def test_single_saves_and_deletes_record_the_names_of_changed_foreign_keys(demo_inventory, lead_a):
    rack = Rack.objects.get(name="gb-r01")
    spare = NVLinkPartition.objects.create(rack=rack, name="spare", clique_id=5)
    tray = ComputeTray.objects.get(rack=rack, slot=5)
    tray.partition = spare
    tray.save()
    event = tray_event("gb-r01-t05")
    assert event.labels == {"before": {"partition": "gb-r01 default"}, "after": {"partition": "gb-r01 spare"}}
    tray.partition = None
    tray.state_reason = "out"
    tray.save()
    event = tray_event("gb-r01-t05")
    assert event.after == {"partition": None, "state_reason": "out"}
    assert event.labels == {"before": {"partition": "gb-r01 spare"}, "after": {}}

    Membership.objects.get(user=lead_a).delete()
    deleted = AuditEvent.objects.get(object_type="tenancy.membership", action=AuditAction.DELETE)
    assert deleted.labels == {"before": {"user": "lead-a", "department": "Alpha"}, "after": {}}


def test_recording_changes_names_rows_deleted_inside_the_block(demo_inventory):
    rack = Rack.objects.get(name="gb-r01")
    with (
        audit_context(AuditSource.TASK),
        recording_changes(ComputeTray.objects.filter(rack=rack), "partition"),
    ):
        ComputeTray.objects.filter(rack=rack).update(partition=None)
        NVLinkPartition.objects.filter(rack=rack, name="default").delete()
        whole = NVLinkPartition.objects.create(rack=rack, name="whole", clique_id=9)
        ComputeTray.objects.filter(rack=rack).update(partition=whole)
    events = AuditEvent.objects.filter(object_type="inventory.computetray")
    assert events.count() == 18
    assert {tuple(sorted(e.labels["before"].items())) for e in events} == {(("partition", "gb-r01 default"),)}
    assert {tuple(sorted(e.labels["after"].items())) for e in events} == {(("partition", "gb-r01 whole"),)}


def test_bulk_labels_cost_one_query_per_related_model_whatever_the_rows(demo_inventory):
    def move(rack_names: list[str]) -> int:
        """Every tray of these racks to a new partition of its own rack, in one recorded bulk update."""
        racks = list(Rack.objects.filter(name__in=rack_names))
        new = {
            rack.pk: NVLinkPartition.objects.create(
                rack=rack, name=f"n{len(rack_names)}", clique_id=40 + len(rack_names)
            )
            for rack in racks
        }
        trays = list(ComputeTray.objects.filter(rack__in=racks))
        for tray in trays:
            tray.partition = new[tray.rack_id]
        with CaptureQueriesContext(connection) as queries:
            bulk_update_recorded(trays, ["partition"])
        return len(queries)

    one_rack = move(["gb-r01"])
    three_racks = move(["gb-r01", "gb-r02", "gb-r03"])
    assert three_racks == one_rack
    events = AuditEvent.objects.filter(object_type="inventory.computetray", object_repr__startswith="gb-r02")
    assert events.count() == 18
    assert {e.labels["after"]["partition"] for e in events} == {"gb-r02 n3"}
    assert {e.labels["before"]["partition"] for e in events} == {"gb-r02 p1", "gb-r02 p2"}


def test_events_recorded_before_labels_were_kept_still_show_their_ids(staff, client, admin_user):
    tray = ComputeTray.objects.get(rack__name="gb-r01", slot=2)
    old = AuditEvent.objects.create(
        source=AuditSource.TASK,
        action=AuditAction.UPDATE,
        object_type="inventory.computetray",
        object_id=str(tray.pk),
        object_repr=tray.hostname,
        before={"partition": 9},
        after={"partition": 10},
    )
    assert old.labels == {}  # what the migration gives the rows it found
    client.force_login(admin_user)
    page = client.get("/audit/", {"object_type": "inventory.computetray"}).content.decode()
    assert (
        'partition:</span> <del>9</del><span class="arrow" aria-label="changed to">→</span><ins>10</ins>'
    ) in page
    row = staff.get(f"{AUDIT_API}{old.pk}/").json()
    assert (row["before"], row["after"]) == ({"partition": 9}, {"partition": 10})
    assert row["labels"] == {"before": {}, "after": {}}
