"""POST /api/v1/partition-plans/ (dry run and create + apply), list, detail, cancel: staff only."""

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from core.models import AuditEvent
from integrations.models import ConfigPush, PushStatus
from integrations.plans import service as plans
from integrations.tasks import follow_active_plans
from inventory.choices import PlanStatus, TrayState
from inventory.models import ComputeTray, NVLinkPartition, PartitionPlan, Rack
from inventory.planning import preset_layout
from scheduling.choices import JobState
from scheduling.models import Job
from scheduling.services.actions import finish_job
from tenancy.models import Department
from tenancy.services import save_department
from tests.factories import make_department, run_job

# Plans push to the embedded `local` directory target (tests/conftest.py), writing into a temporary directory.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("local_target")]


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

    # List and detail (the detail shows the plan as the tasks left it).
    listed = staff.get(PLANS).json()
    assert [row["id"] for row in listed["results"]] == [plan.pk]
    assert listed["results"][0]["pushes"] == data["pushes"]
    assert staff.get(PLANS, {"rack": "gb-r02"}).json()["results"] == []
    assert [
        r["id"] for r in staff.get(PLANS, {"rack": "gb-r01", "status": data["status"]}).json()["results"]
    ] == [plan.pk]
    pushes.update(status=PushStatus.SUCCEEDED)
    assert staff.get(f"{PLANS}{plan.pk}/").json()["status"] == data["status"]  # reading moves nothing
    follow_active_plans()  # the beat
    detail = staff.get(f"{PLANS}{plan.pk}/").json()
    assert detail["status"] == "applied"


@pytest.mark.slow(reason="12 cases, each a full request through the stack")
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
        # Found by an outside test: leave_out took "1" and 1.0, and a tray named twice; slots took other
        # scripts' digits (Arabic-Indic 1-9); a 5,000-digit integer was refused with Python's own advice.
        ({"rack": "gb-r01", "layout": {"preset": "2x9", "leave_out": ["1"]}}, "layout", "a JSON integer"),
        ({"rack": "gb-r01", "layout": {"preset": "2x9", "leave_out": [1.0]}}, "layout", "a JSON integer"),
        (
            {"rack": "gb-r01", "layout": {"preset": "2x9", "leave_out": [3, 3]}},
            "layout",
            "tray 3 is named twice",
        ),
        (
            {"rack": "gb-r01", "layout": {"partitions": [{"name": "a", "slots": "\u0661-\u0669"}]}},
            "layout",
            "is not a tray number or range like 1-9",
        ),
    ],
)
def test_an_invalid_plan_is_400_naming_the_reason(staff, body, field, reason):
    response = staff.post(PLANS, body, format="json")
    assert response.status_code == 400, response.data
    assert reason in str(response.json()[field])
    assert not PartitionPlan.objects.exists()
    assert layout_of() == DEFAULT


def test_an_integer_of_thousands_of_digits_is_refused_in_words(staff):
    body = '{"rack": "gb-r01", "layout": {"preset": "2x9", "leave_out": [' + "9" * 5000 + "]}}"
    response = staff.post(PLANS, body, content_type="application/json")
    assert response.status_code == 400
    assert "an integer of 5000 digits: no field of this API takes more than 100" in response.json()["detail"]
    assert "sys.set_int_max_str_digits" not in response.json()["detail"]
    assert not PartitionPlan.objects.exists()


def test_a_department_in_the_wrong_case_is_refused_with_its_slug(staff):
    make_department("Research")
    body = {
        "rack": "gb-r01",
        "layout": {"partitions": [{"name": "a", "slots": "1-18", "department": "Research"}]},
    }
    response = staff.post(PLANS, body, format="json")
    assert response.status_code == 400
    assert "did you mean 'research' (departments are named by their slug)?" in str(response.json()["layout"])


def _busy(slot=2) -> Job:
    """A running job of department Ops on gb-r01's tray `slot`."""
    return run_job(make_department("Ops"), trays=[f"gb-r01-t{slot:02d}"], name="ops-train")


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
    body = {"rack": "gb-r01", "layout": layout, "drain_first": True}
    said = f"Plan #{first.json()['id']} by admin is being applied to gb-r01 right now"
    # The preview says it cannot be applied now, as the apply will.
    preview = staff.post(PLANS, {**body, "dry_run": True}, format="json").json()
    assert preview["ok"] is False and said in preview["findings"][0]["message"]
    plans_before, events_before = PartitionPlan.objects.count(), AuditEvent.objects.count()
    second = staff.post(PLANS, body, format="json")
    assert second.status_code == 409
    assert said in second.json()["detail"]
    # A refusal writes nothing: no cancelled plan, no audit event (each retry used to add both).
    assert (PartitionPlan.objects.count(), AuditEvent.objects.count()) == (plans_before, events_before)


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


@pytest.mark.slow(reason="generates the whole OpenAPI schema")
def test_the_schema_describes_partition_plans_without_warnings(tmp_path):
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yml"))
    text = (tmp_path / "schema.yml").read_text()
    assert "/api/v1/partition-plans/{id}/cancel/" in text and "dry_run" in text


def test_reading_a_plan_moves_nothing(staff, django_capture_on_commit_callbacks):
    """A plan whose pushes all succeeded is still applying until a task follows it: GETs only read."""
    plan = staff.post(PLANS, {"rack": "gb-r01", "layout": {"preset": "2x9"}}, format="json").json()
    ConfigPush.objects.filter(plan_id=plan["id"]).update(status=PushStatus.SUCCEEDED)
    before = list(PartitionPlan.objects.filter(pk=plan["id"]).values())
    with CaptureQueriesContext(connection) as queries, django_capture_on_commit_callbacks() as callbacks:
        assert staff.get(f"{PLANS}{plan['id']}/").json()["status"] == "applying"
        assert staff.get(PLANS).json()["results"][0]["status"] == "applying"
    sql = [q["sql"].lstrip().upper() for q in queries.captured_queries]
    assert not [s for s in sql if s.startswith(("INSERT", "UPDATE", "DELETE"))] and callbacks == []
    assert list(PartitionPlan.objects.filter(pk=plan["id"]).values()) == before


def test_a_draining_plan_moves_on_once_its_work_ends_and_the_detail_shows_it(
    staff, django_capture_on_commit_callbacks
):
    job = _busy()
    body = {"rack": "gb-r01", "layout": {"preset": "2x9"}, "drain_first": True}
    plan = staff.post(PLANS, body, format="json").json()
    assert staff.get(f"{PLANS}{plan['id']}/").json()["status"] == "draining"
    with django_capture_on_commit_callbacks(execute=True):  # the job's end enqueues the plan's follow-up
        finish_job(Job.objects.get(pk=job.pk), JobState.COMPLETED)
    detail = staff.get(f"{PLANS}{plan['id']}/").json()
    assert detail["status"] == "applied" and detail["pushes"]
    assert layout_of() == [("p1", 1, list(range(1, 10))), ("p2", 2, list(range(10, 19)))]


def test_a_plan_for_the_layout_the_rack_already_has_is_400_and_saves_nothing(staff):
    # The demo's gb-r02 is carved 2x9 already.
    body = {"rack": "gb-r02", "layout": {"preset": "2x9"}}
    response = staff.post(PLANS, body, format="json")
    assert response.status_code == 400, response.data
    assert "gb-r02 is already carved exactly like this" in str(response.json())
    assert not PartitionPlan.objects.exists()
    preview = staff.post(PLANS, {**body, "dry_run": True}, format="json")
    assert preview.status_code == 200 and preview.json()["ok"] is False
    assert any("already carved exactly like this" in f["message"] for f in preview.json()["findings"])
