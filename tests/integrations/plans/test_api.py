"""POST /api/v1/partition-plans/ (dry run and create + apply), list, detail, cancel: staff only."""

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from integrations.models import ConfigPush, PushStatus
from integrations.plans import service as plans
from inventory.choices import PlanStatus, TrayState
from inventory.models import ComputeTray, Gpu, NVLinkPartition, PartitionPlan, Rack
from inventory.planning import preset_layout
from scheduling.choices import JobState
from scheduling.models import Allocation, Job
from tenancy.models import Department
from tenancy.services import save_department

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def render_dir(settings, tmp_path):
    """The embedded `local` directory target (made by a data migration, so gone after any transactional
    test's flush: made again here) writes under tmp_path, not the project's var/."""
    from integrations.models import ConfigTarget

    settings.RACKPLANE_RENDER_DIR = tmp_path / "rendered"
    ConfigTarget.objects.get_or_create(
        name="local", defaults={"kind": "directory", "settings": {"path": "", "keep": 5}}
    )
    return settings.RACKPLANE_RENDER_DIR


PLANS = "/api/v1/partition-plans/"


@pytest.fixture
def staff(demo_inventory, admin_user) -> APIClient:
    client = APIClient()
    client.force_authenticate(admin_user)
    return client


@pytest.fixture
def operator(demo_inventory, user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def layout_of(rack_name="gb-r01") -> list[tuple[str, int, list[int]]]:
    return [
        (p.name, p.clique_id, list(p.trays.order_by("slot").values_list("slot", flat=True)))
        for p in NVLinkPartition.objects.filter(rack__name=rack_name).order_by("clique_id")
    ]


DEFAULT = [("default", 32766, list(range(1, 19)))]


def test_dry_run_previews_findings_changes_and_diffs_and_saves_nothing(staff):
    body = {"rack": "gb-r01", "layout": {"preset": "2x9"}, "dry_run": True}
    response = staff.post(PLANS, body, format="json")
    assert response.status_code == 200, response.data
    data = response.json()
    assert data["ok"] is True, data["findings"]
    messages = [f["message"] for f in data["findings"]]
    assert "gb-r01: p1 9 trays, p2 9 trays; no overlaps, names unique, Slurm block sizes valid." in messages
    assert any(m.startswith("Tray 7 (gb-r01-t07) is in p1 although it is drain") for m in messages)
    assert {f["level"] for f in data["findings"]} == {"ok", "warning"}
    changes = {c["slot"]: c for c in data["changes"]}
    assert changes[7] == {
        "slot": 7,
        "hostname": "gb-r01-t07",
        "before": "default",
        "after": "p1",
        "running_jobs": [],
    }
    assert len(changes) == 18 and changes[18]["after"] == "p2"
    topology = data["diffs"]["slurm/topology.conf"]
    assert "+BlockName=r01p1 Nodes=gb-r01-t[01-09]" in topology
    assert "+BlockName=r01p2 Nodes=gb-r01-t[10-18]" in topology
    assert not PartitionPlan.objects.exists()
    assert layout_of() == DEFAULT


def test_dry_run_with_a_tray_left_out_explains_why_slurm_cannot_take_it(staff):
    # gb-r02 is carved 2x9: an 8-tray partition next to 9-tray ones is not a 24.11 block layout.
    body = {"rack": "gb-r01", "layout": {"preset": "2x9", "leave_out": [7]}, "dry_run": True}
    data = staff.post(PLANS, body, format="json").json()
    assert data["ok"] is False and data["diffs"] == {}
    assert data["changes"][6] == {
        "slot": 7,
        "hostname": "gb-r01-t07",
        "before": "default",
        "after": None,
        "running_jobs": [],
    }
    assert any(f["message"].startswith("Tray 7 is left out") for f in data["findings"])
    errors = [f["message"] for f in data["findings"] if f["level"] == "error"]
    assert len(errors) == 1 and errors[0].startswith("Slurm 24.11 cannot express NVLink partition")


def test_dry_run_of_a_bad_plan_is_200_with_errors(staff):
    layout = {"partitions": [{"name": "a", "slots": "1-9"}, {"name": "b", "slots": [9, 10]}]}
    response = staff.post(PLANS, {"rack": "gb-r01", "layout": layout, "dry_run": True}, format="json")
    assert response.status_code == 200
    data = response.json()
    assert data["ok"] is False and data["diffs"] == {}
    assert any("Tray 9 (gb-r01-t09) is in both a and b" in f["message"] for f in data["findings"])


def test_create_applies_the_plan_and_answers_201_with_it(staff, admin_user):
    save_department(Department(name="Research", slug="research", guaranteed_gpus=40))
    layout = {
        "partitions": [
            {"name": "train", "slots": "1-9", "department": "research", "slurm_partition": "research"},
            {"name": "shared", "slots": list(range(10, 19))},
        ]
    }
    response = staff.post(PLANS, {"rack": "gb-r01", "layout": layout}, format="json")
    assert response.status_code == 201, response.data
    data = response.json()
    plan = PartitionPlan.objects.get()
    assert data["id"] == plan.pk and data["rack"] == "gb-r01"
    assert data["status"] in ("applying", "applied")
    assert data["created_by"] == admin_user.username
    assert [(p["name"], p["slots"], p["clique_id"], p["department"]) for p in data["layout"]] == [
        ("train", list(range(1, 10)), 1, "research"),
        ("shared", list(range(10, 19)), 2, None),
    ]
    assert any(f["level"] == "ok" for f in data["findings"])
    pushes = ConfigPush.objects.filter(plan_id=plan.pk)
    assert data["pushes"] and len(data["pushes"]) == pushes.count()
    assert {(p["target"], p["status"]) for p in data["pushes"]} == {(str(p.target), p.status) for p in pushes}
    assert layout_of() == [("train", 1, list(range(1, 10))), ("shared", 2, list(range(10, 19)))]

    # List and detail (the detail follows the pushes).
    listed = staff.get(PLANS).json()
    assert [row["id"] for row in listed["results"]] == [plan.pk]
    assert listed["results"][0]["pushes"] == data["pushes"]
    assert staff.get(PLANS, {"rack": "gb-r02"}).json()["results"] == []
    assert [
        r["id"] for r in staff.get(PLANS, {"rack": "gb-r01", "status": data["status"]}).json()["results"]
    ] == [plan.pk]
    pushes.update(status=PushStatus.SUCCEEDED)
    detail = staff.get(f"{PLANS}{plan.pk}/").json()
    assert detail["status"] == "applied"


@pytest.mark.parametrize(
    "body, field, reason",
    [
        ({"rack": "gb-r99", "layout": {"preset": "2x9"}}, "rack", "no rack named 'gb-r99'"),
        ({"rack": "gb-r01", "layout": {"preset": "4x4"}}, "layout", "not a valid choice"),
        ({"rack": "gb-r01", "layout": {}}, "layout", "give exactly one of 'preset' or 'partitions'"),
        (
            {"rack": "gb-r01", "layout": {"preset": "2x9", "partitions": []}},
            "layout",
            "give exactly one of 'preset' or 'partitions'",
        ),
        (
            {"rack": "gb-r01", "layout": {"partitions": [{"name": "a", "slots": "9-3"}]}},
            "layout",
            "runs backwards",
        ),
        (
            {
                "rack": "gb-r01",
                "layout": {"partitions": [{"name": "a", "slots": "1-9"}, {"name": "a", "slots": "10-18"}]},
            },
            "layout",
            "The name a is used by more than one partition",
        ),
        (
            {
                "rack": "gb-r01",
                "layout": {"partitions": [{"name": "a", "slots": "1-9", "department": "nope"}]},
            },
            "layout",
            "is given to 'nope', which is not a department",
        ),
        (
            {"rack": "gb-r01", "layout": {"preset": "3x6"}},
            "layout",
            "Slurm 24.11 cannot express",
        ),
    ],
)
def test_an_invalid_plan_is_400_naming_the_reason(staff, body, field, reason):
    response = staff.post(PLANS, body, format="json")
    assert response.status_code == 400, response.data
    assert reason in str(response.json()[field])
    assert not PartitionPlan.objects.exclude(status=PlanStatus.CANCELLED).exists()
    assert layout_of() == DEFAULT


def _busy(slot=2) -> Job:
    department = save_department(Department(name="Ops", slug="ops"))
    job = Job.objects.create(department=department, name="ops-train", gpus=4, state=JobState.RUNNING)
    Allocation.objects.bulk_create(
        [
            Allocation(job=job, gpu=gpu)
            for gpu in Gpu.objects.filter(tray__rack__name="gb-r01", tray__slot=slot)
        ]
    )
    return job


def test_busy_trays_need_drain_first_then_the_plan_drains_and_can_be_cancelled(staff):
    _busy()
    refused = staff.post(PLANS, {"rack": "gb-r01", "layout": {"preset": "2x9"}}, format="json")
    assert refused.status_code == 400
    assert "runs ops-train and would change partition: choose 'drain first'" in str(refused.json()["layout"])

    response = staff.post(
        PLANS, {"rack": "gb-r01", "layout": {"preset": "2x9"}, "drain_first": True}, format="json"
    )
    assert response.status_code == 201
    plan = response.json()
    assert plan["status"] == "draining" and plan["pushes"] == []
    assert ComputeTray.objects.get(hostname="gb-r01-t02").state == TrayState.DRAIN

    cancelled = staff.post(f"{PLANS}{plan['id']}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert ComputeTray.objects.get(hostname="gb-r01-t02").state == TrayState.UP
    again = staff.post(f"{PLANS}{plan['id']}/cancel/")
    assert again.status_code == 409 and "can no longer be cancelled" in again.json()["detail"]


def test_a_plan_while_another_is_in_flight_is_409(staff):
    _busy()
    first = staff.post(
        PLANS, {"rack": "gb-r01", "layout": {"preset": "2x9"}, "drain_first": True}, format="json"
    )
    assert first.json()["status"] == "draining"
    layout = {"partitions": [{"name": "a", "slots": "1-9"}, {"name": "b", "slots": "10-18"}]}
    second = staff.post(PLANS, {"rack": "gb-r01", "layout": layout, "drain_first": True}, format="json")
    assert second.status_code == 409
    assert (
        f"Plan #{first.json()['id']} by admin is being applied to gb-r01 right now" in second.json()["detail"]
    )
    # The refused plan is cancelled, not left as a draft.
    assert PartitionPlan.objects.filter(status=PlanStatus.CANCELLED).count() == 1


def test_only_staff_may_use_partition_plans(client, operator, demo_inventory, admin_user):
    plan = plans.create_plan(
        Rack.objects.get(name="gb-r01"), preset_layout("2x9"), drain=False, user=admin_user
    )
    body = {"rack": "gb-r01", "layout": {"preset": "2x9"}, "dry_run": True}
    assert operator.get(PLANS).status_code == 403
    assert operator.get(f"{PLANS}{plan.pk}/").status_code == 403
    assert operator.post(PLANS, body, format="json").status_code == 403
    assert operator.post(f"{PLANS}{plan.pk}/cancel/").status_code == 403
    anonymous = APIClient()
    assert anonymous.get(PLANS).status_code == 401
    assert anonymous.post(PLANS, body, format="json").status_code == 401
    assert PartitionPlan.objects.get(pk=plan.pk).status == PlanStatus.DRAFT


def test_the_schema_describes_partition_plans_without_warnings(tmp_path):
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yml"))
    text = (tmp_path / "schema.yml").read_text()
    assert "/api/v1/partition-plans/{id}/cancel/" in text and "dry_run" in text


def test_the_detail_moves_a_draining_plan_on_once_its_work_ends(staff):
    job = _busy()
    body = {"rack": "gb-r01", "layout": {"preset": "2x9"}, "drain_first": True}
    plan = staff.post(PLANS, body, format="json").json()
    assert staff.get(f"{PLANS}{plan['id']}/").json()["status"] == "draining"
    Job.objects.filter(pk=job.pk).update(state=JobState.COMPLETED)
    Allocation.objects.filter(job=job).delete()
    detail = staff.get(f"{PLANS}{plan['id']}/").json()
    assert detail["status"] in ("applying", "applied") and detail["pushes"]
    assert layout_of() == [("p1", 1, list(range(1, 10))), ("p2", 2, list(range(10, 19)))]
