"""The NVLink partition wizard: admins only, every step, the live drawing, preview, apply, progress."""

import re
from datetime import timedelta
from html import unescape
from urllib.parse import urlencode

import hostlist
import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from core.models import AuditEvent
from integrations.fabric.base import FabricStep
from integrations.models import ConfigPush, PushStatus
from integrations.plans import service as plans
from integrations.plans.progress_views import NODES_SETTLE_WINDOW
from integrations.tasks import follow_active_plans
from inventory.choices import GpuHealth, PlanStatus, TrayState
from inventory.models import ComputeTray, Gpu, NVLinkPartition, PartitionPlan, Rack
from inventory.planning import Level, preset_layout
from scheduling.choices import JobState
from scheduling.models import Allocation, Job
from scheduling.services.actions import finish_job
from tenancy.models import Department
from tenancy.services import save_department
from tests.factories import make_department, mig_tray, nodes_report_their_partitions, run_job
from tests.i18n_check import assert_japanese

# Plans push to the embedded `local` directory target (tests/conftest.py), writing into a temporary directory.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("local_target")]


HTMX = {"HX-Request": "true"}


def url(view, /, *args, **params) -> str:
    query = urlencode(params, doseq=True)
    return reverse(f"integrations:{view}", args=args) + (f"?{query}" if query else "")


def rows(response) -> dict[int, str | None]:
    """Slot -> planned partition, as the drawing shows it."""
    return {row.tray.slot: row.planned for row in response.context["rows"]}


def findings(response) -> str:
    return " ".join(f.message for f in response.context["check"].findings)


@pytest.fixture
def admin(admin_client_logged_in, demo_inventory):
    return admin_client_logged_in


def layout_of(rack_name: str) -> list[tuple[str, int]]:
    return list(NVLinkPartition.objects.filter(rack__name=rack_name).values_list("name", "clique_id"))


# --- who may ------------------------------------------------------------------------------------------------


def wizard_urls():
    return [
        url("plan-list"),
        url("plan-new"),
        url("plan-layout", "gb-r01"),
        url("plan-names", "gb-r01", preset="2x9"),
        url("plan-preview", "gb-r01", preset="2x9"),
    ]


def test_only_admins_may_use_the_wizard(client, user_client, demo_inventory, admin_user):
    plan = plans.create_plan(
        Rack.objects.get(name="gb-r01"), preset_layout("2x9"), drain=False, user=admin_user
    )
    for page in [*wizard_urls(), url("plan-detail", plan.pk)]:
        assert user_client.get(page).status_code == 403, page
        assert user_client.get(page, headers=HTMX).status_code == 403, page
    assert user_client.post(url("plan-apply", "gb-r01"), {"preset": "2x9"}).status_code == 403
    assert user_client.post(url("plan-cancel", plan.pk)).status_code == 403
    assert layout_of("gb-r01") == [("default", 32766)]
    assert PartitionPlan.objects.get(pk=plan.pk).status == PlanStatus.DRAFT
    client.logout()
    response = client.get(url("plan-layout", "gb-r01"))
    assert response.status_code == 302 and response["Location"].startswith(reverse("login"))


def test_the_rack_page_offers_the_wizard_to_admins_only(admin, user):
    carve = f'href="{url("plan-layout", "gb-r01")}"'
    rack_page = reverse("scheduling:rack-detail", args=["gb-r01"])
    assert carve in admin.get(rack_page).content.decode()
    operator = Client()
    operator.force_login(user)
    assert carve not in operator.get(rack_page).content.decode()


# --- the steps ----------------------------------------------------------------------------------------------


def test_step_1_lists_racks_with_partitions_health_and_running_work(admin):
    run_job(make_department("Ops"), trays=["gb-r02-t01"], name="ops-job")
    response = admin.get(url("plan-new"))
    assert response.status_code == 200
    racks = {rack.name: rack for rack in response.context["page"].object_list}
    assert list(racks) == ["gb-r01", "gb-r02", "gb-r03"]
    assert racks["gb-r02"].partition_names == ["p1", "p2"]
    assert (racks["gb-r02"].running_jobs, racks["gb-r02"].busy_gpus) == (1, 4)
    assert racks["gb-r01"].trays_up == 17
    html = response.content.decode()
    assert url("plan-layout", "gb-r01") in html
    assert admin.get(url("plan-new", name="r03")).context["page"].object_list[0].name == "gb-r03"


def test_step_2_starts_from_the_rack_as_it_is(admin):
    response = admin.get(url("plan-layout", "gb-r02"))
    assert response.status_code == 200
    assert response.context["form"].cleaned_data["preset"] == "2x9"
    assert rows(response) == {slot: "p1" if slot <= 9 else "p2" for slot in range(1, 19)}
    # The rack as it is is where the admin starts, not a mistake: said as information, no error, no
    # repeated warning (the preview refuses it: test_a_preview_of_the_layout_the_rack_already_has_...).
    check = response.context["check"]
    assert [(f.level, f.message) for f in check.findings if f.level != Level.OK] == [
        (
            Level.INFO,
            "This is gb-r02 as it is carved now: choose another layout, or change a name, department or "
            "Slurm partition, to make a plan.",
        )
    ]
    assert check.ok and check.unchanged
    names = admin.get(url("plan-names", "gb-r02", preset="2x9", name=["p1", "p2"], department=["", ""]))
    assert [f.level for f in names.context["check"].findings if f.level != Level.OK] == [Level.INFO]
    html = response.content.decode()
    assert 'class="finding finding-info"' in html
    assert 'id="preset-2x9" checked' in html.replace('hx-get="/inventory/racks/gb-r02/plan/" ', "")
    assert "<html" in html and 'id="plan-check"' in html


def test_step_2_marks_trays_to_leave_out(admin):
    response = admin.get(url("plan-layout", "gb-r01"))
    attention = {row.tray.slot for row in response.context["rows"] if row.attention}
    trays = ComputeTray.objects.filter(rack__name="gb-r01")
    expected = set(trays.exclude(state=TrayState.UP).values_list("slot", flat=True))
    expected |= set(trays.filter(gpus__health=GpuHealth.UNHEALTHY).values_list("slot", flat=True))
    assert 7 in expected and attention == expected  # the seed's drained tray and its broken GPUs
    html = response.content.decode()
    assert re.search(r'class="plan-row [^"]*attention[^"]*" data-slot="7"', html)
    assert 'name="leave_out" value="7" id="leave-out-7"' in html


@pytest.fixture
def unhealthy_gpu(demo_inventory):
    gpu = Gpu.objects.get(tray__hostname="gb-r01-t12", index=0)
    gpu.health = GpuHealth.UNHEALTHY
    gpu.save()
    ComputeTray.objects.filter(hostname="gb-r01-t15").update(fabric_problems=["NVLink 3 down"])
    return gpu


def test_unhealthy_and_fabric_inconsistent_trays_are_marked(admin, unhealthy_gpu):
    response = admin.get(url("plan-layout", "gb-r01", preset="2x9"), headers=HTMX)
    marked = {row.tray.slot for row in response.context["rows"] if row.attention}
    assert {7, 12, 15} <= marked
    text = findings(response)
    assert "Tray 12 (gb-r01-t12) is in p2 although 1 of its GPUs is unhealthy" in text
    assert "Tray 15 (gb-r01-t15) is in p2 although its fabric reports problems" in text


def test_htmx_gets_the_drawing_and_findings_only(admin):
    response = admin.get(url("plan-layout", "gb-r01", preset="2x9"), headers=HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" not in html and "<form" not in html
    assert html.lstrip().startswith('<div class="plan-workspace">')
    assert "HX-Request" in response["Vary"]
    # A preset change also refreshes the custom rows (out of band); typing in them does not.
    assert 'id="custom-rows" hx-swap-oob="true"' in html
    typing = admin.get(
        url("plan-layout", "gb-r01", preset="custom", slots=["1-9"]),
        headers={**HTMX, "HX-Trigger-Name": "slots"},
    )
    assert "hx-swap-oob" not in typing.content.decode()


@pytest.mark.slow(reason="7 cases, each a full request through the stack")
@pytest.mark.parametrize(
    "params, expected",
    [
        ({"preset": "2x9"}, {**dict.fromkeys(range(1, 10), "p1"), **dict.fromkeys(range(10, 19), "p2")}),
        ({"preset": "3x6"}, {s: f"p{(s - 1) // 6 + 1}" for s in range(1, 19)}),
        ({"preset": "18x1"}, {s: f"p{s}" for s in range(1, 19)}),
        ({"preset": "1x18"}, dict.fromkeys(range(1, 19), "default")),
        (
            {"preset": "2x9", "leave_out": ["7", "12"]},
            {
                **dict.fromkeys(range(1, 10), "p1"),
                **dict.fromkeys(range(10, 19), "p2"),
                7: None,
                12: None,
            },
        ),
        (
            {"preset": "custom", "slots": ["1-6", "7-12,13", ""]},
            {**dict.fromkeys(range(1, 7), "p1"), **dict.fromkeys(range(7, 14), "p2"), 14: None, 15: None}
            | dict.fromkeys(range(16, 19)),
        ),
        (
            {"preset": "custom", "slots": ["1-9", "10-18"], "leave_out": ["18"]},
            {**dict.fromkeys(range(1, 10), "p1"), **dict.fromkeys(range(10, 18), "p2"), 18: None},
        ),
    ],
)
def test_the_live_drawing_follows_presets_ranges_and_left_out_trays(admin, params, expected):
    response = admin.get(url("plan-layout", "gb-r01", **params), headers=HTMX)
    assert rows(response) == expected
    html = response.content.decode()
    for slot, planned in expected.items():
        assert f'data-slot="{slot}" data-planned="{planned or ""}"' in html


def test_nonsense_in_the_url_is_a_finding_not_an_error_page(admin):
    response = admin.get(url("plan-layout", "gb-r01", preset="4x4", leave_out=["x"]), headers=HTMX)
    assert response.status_code == 200
    text = findings(response)
    assert "Select a valid choice. 4x4 is not one of the available choices." in text
    assert not response.context["check"].ok
    assert admin.get(url("plan-preview", "gb-r01", preset="4x4")).status_code == 200
    assert admin.post(url("plan-apply", "gb-r01"), {"preset": "4x4"}).status_code == 400
    assert admin.get(url("plan-layout", "gb-r99")).status_code == 404


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_left_out_trays_are_warned_about_and_bad_ranges_explained(admin):
    response = admin.get(url("plan-layout", "gb-r01", preset="2x9", leave_out=["7"]), headers=HTMX)
    assert "Tray 7 is left out" in findings(response)
    response = admin.get(url("plan-layout", "gb-r01", preset="custom", slots=["9-3", "1-2"]), headers=HTMX)
    assert "Partition 1: '9-3' runs backwards." in findings(response)
    assert not response.context["check"].ok
    response = admin.get(url("plan-layout", "gb-r01", preset="custom", slots=["1-9", "9-18"]), headers=HTMX)
    assert "Tray 9 (gb-r01-t09) is in both p1 and p2: partitions may not overlap." in findings(response)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_step_3_names_partitions_and_keeps_the_layout_in_hidden_fields(admin):
    save_department(Department(name="Research", slug="research", guaranteed_gpus=40))
    response = admin.get(url("plan-names", "gb-r01", preset="2x9", leave_out=["7"], drain_first="on"))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'name="name" id="name-1" value="p1"' in html and 'id="name-2" value="p2"' in html
    assert '<option value="research">Research (guarantee 40 GPUs)</option>' in html
    for hidden in (
        'name="preset" value="2x9"',
        'name="leave_out" value="7"',
        'name="drain_first" value="on"',
    ):
        assert f'<input type="hidden" {hidden}>' in html
    # Names, departments and Slurm partitions given are kept (and checked) as the user types.
    named = admin.get(
        url(
            "plan-names",
            "gb-r01",
            preset="2x9",
            name=["train", "Bad Name"],
            department=["research", ""],
            slurm=["", "batch"],
        ),
        headers=HTMX,
    )
    assert rows(named)[1] == "train"
    assert "'Bad Name' is not a usable partition name" in findings(named)
    planned = named.context["form"].partitions
    assert (planned[0].department, planned[1].slurm_partition) == ("research", "batch")


def test_names_reset_when_the_number_of_partitions_changes(admin):
    response = admin.get(url("plan-layout", "gb-r01", preset="3x6", name=["a", "b"]), headers=HTMX)
    assert sorted(set(rows(response).values())) == ["p1", "p2", "p3"]
    response = admin.get(url("plan-layout", "gb-r01", preset="2x9", name=["a", "b"]), headers=HTMX)
    assert sorted(set(rows(response).values())) == ["a", "b"]


def slurm_placeholders(html: str) -> dict[str, str]:
    """Slurm field id -> its placeholder, as the page (or an htmx answer, out of band) has them."""
    fields = re.finditer(
        r'<input type="text" name="slurm" id="(slurm-\d+)"[^>]*? placeholder="([^"]*)"', html
    )
    return {field[1]: unescape(field[2]) for field in fields}


@pytest.mark.slow(reason="six requests through the wizard: over 0.3 s on 2 cores")
def test_step_3_each_slurm_placeholder_says_what_the_field_left_empty_gives(admin):
    """A walkthrough: a partition given to a department, its Slurm partition left empty, showed the
    placeholder "shared, or gpu_name" while the sidebar (and the rendered slurm.conf) said its department's
    partition serves it. Each row's placeholder names what its empty field gives, by the sidebar's rule
    (views.served_by), and follows the department chosen: the htmx answer to a department's change brings
    the Slurm fields anew, out of band (typing in a field does not replace it)."""
    make_department("Vision", guaranteed_gpus=36)
    make_department("Speech", guaranteed_gpus=36)
    params = {"preset": "2x9", "name": ["p1", "p2"], "department": ["", "vision"], "slurm": ["", ""]}
    page = admin.get(url("plan-names", "gb-r01", **params))
    html = page.content.decode()
    assert slurm_placeholders(html) == {
        "slurm-1": "gpu (shared), or gpu_name",
        "slurm-2": "vision (its department's)",
    }
    assert [row["served_by"] for row in page.context["planned"]] == ["gpu", "vision"]
    assert "· Slurm vision" in html

    chosen = admin.get(
        url("plan-names", "gb-r01", **{**params, "department": ["speech", "vision"]}),
        headers={**HTMX, "HX-Trigger-Name": "department"},
    )
    html = chosen.content.decode()
    assert slurm_placeholders(html) == {
        "slurm-1": "speech (its department's)",
        "slurm-2": "vision (its department's)",
    }
    assert html.count('name="slurm"') == html.count('hx-swap-oob="true"') == 2
    assert "· Slurm speech" in html
    for trigger in ("slurm", "name"):
        typing = admin.get(
            url("plan-names", "gb-r01", **{**params, "slurm": ["gpu_batch", ""]}),
            headers={**HTMX, "HX-Trigger-Name": trigger},
        )
        assert 'name="slurm"' not in typing.content.decode()
    # In Japanese too.
    japanese = admin.get(url("plan-names", "gb-r01", **params), headers={"Accept-Language": "ja"})
    assert slurm_placeholders(japanese.content.decode()) == {
        "slurm-1": "gpu（共有）、または gpu_名前",  # noqa: RUF001
        "slurm-2": "vision（部門のパーティション）",  # noqa: RUF001
    }


def test_step_4_previews_findings_and_diffs_without_writing(admin):
    before = layout_of("gb-r01")
    response = admin.get(url("plan-preview", "gb-r01", preset="2x9"))
    assert response.status_code == 200
    assert layout_of("gb-r01") == before and not PartitionPlan.objects.exists()
    html = response.content.decode()
    assert "gb-r01: p1 9 trays, p2 9 trays; no overlaps, names unique, Slurm block sizes valid." in html
    assert "Tray 7 (gb-r01-t07) is in p1 although it is drain" in html
    files = {f.path: f for f in response.context["files"]}
    assert "slurm/topology.conf" in files
    assert '<span class="diff-add">+BlockName=r01p1 Nodes=gb-r01-t[01-09]</span>' in html
    assert '<span class="diff-add">+BlockName=r01p2 Nodes=gb-r01-t[10-18]</span>' in html
    assert 'class="diff-del"' in html
    assert files["slurm/topology.conf"].group == "Slurm topology"
    assert response.context["can_apply"]
    assert 'class="primary apply-button">Apply plan</button>' in html
    # The apply form carries the whole plan in hidden fields.
    assert '<input type="hidden" name="preset" value="2x9">' in html


def test_a_preview_with_errors_shows_them_and_cannot_be_applied(admin):
    response = admin.get(url("plan-preview", "gb-r01", preset="custom", slots=["1-9", "5-18"]))
    assert response.status_code == 200
    assert not response.context["can_apply"] and response.context["files"] == []
    html = response.content.decode()
    assert "is in both p1 and p2" in html
    assert 'apply-button" disabled' in html


# --- apply and follow ---------------------------------------------------------------------------------------


def test_apply_saves_applies_and_redirects_to_the_progress_page(admin):
    response = admin.post(url("plan-apply", "gb-r01"), {"preset": "2x9", "name": ["p1", "p2"]})
    plan = PartitionPlan.objects.get()
    assert response.status_code == 302
    assert response["Location"] == url("plan-detail", plan.pk)
    assert plan.status in (PlanStatus.APPLYING, PlanStatus.APPLIED)
    assert layout_of("gb-r01") == [("p1", 1), ("p2", 2)]
    assert ConfigPush.objects.filter(plan_id=plan.pk).exists()


def test_apply_conflicts_say_what_to_do(admin, admin_user):
    other = plans.create_plan(Rack.objects.get(name="gb-r01"), preset_layout("2x9"), drain=False, user=None)
    PartitionPlan.objects.filter(pk=other.pk).update(status=PlanStatus.APPLYING)
    response = admin.post(url("plan-apply", "gb-r01"), {"preset": "2x9"})
    assert response.status_code == 409
    html = response.content.decode()
    assert f"Plan #{other.pk} by someone is being applied to gb-r01 right now" in html
    assert "preview again" in html and url("plan-detail", other.pk) in html
    # Nothing is left behind: no draft, no cancelled plan.
    assert list(PartitionPlan.objects.values_list("pk", flat=True)) == [other.pk]
    assert layout_of("gb-r01") == [("default", 32766)]


def test_apply_of_an_invalid_plan_is_400_with_the_reason(admin):
    response = admin.post(url("plan-apply", "gb-r01"), {"preset": "custom", "slots": ["1-9", "9-18"]})
    assert response.status_code == 400
    assert "is in both p1 and p2" in response.content.decode()
    assert not PartitionPlan.objects.exists()
    assert admin.get(url("plan-apply", "gb-r01")).status_code == 405


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_progress_polls_until_every_push_is_done_then_stops(admin):
    admin.post(url("plan-apply", "gb-r01"), {"preset": "2x9"})
    plan = PartitionPlan.objects.get()
    page = admin.get(url("plan-detail", plan.pk))
    assert page.status_code == 200 and "<html" in page.content.decode()
    pushes = ConfigPush.objects.filter(plan_id=plan.pk)
    if plan.status == PlanStatus.APPLYING:
        poll = admin.get(url("plan-detail", plan.pk), headers=HTMX)
        assert poll.status_code == 200
        html = poll.content.decode()
        assert 'hx-trigger="every 2s"' in html and "<html" not in html
        for push in pushes:
            assert f'data-target="{push.target}"' in html
        pushes.update(status=PushStatus.SUCCEEDED)
        # The page only reads: until a task follows the plan it still polls.
        assert admin.get(url("plan-detail", plan.pk), headers=HTMX).status_code == 200
    follow_active_plans()  # the beat

    # Applied, but the rack's nodes still report the old partition's clique: the page follows them.
    waiting = admin.get(url("plan-detail", plan.pk), headers=HTMX)
    assert waiting.status_code == 200
    html = waiting.content.decode()
    assert 'data-status="applied"' in html and 'hx-trigger="every 2s"' in html
    assert "Waiting for the nodes: 0 of 72 GPUs report their new partition" in html

    nodes_report_their_partitions(plan.rack)
    done = admin.get(url("plan-detail", plan.pk), headers=HTMX)
    assert done.status_code == 286  # htmx stops polling
    html = done.content.decode()
    assert "every 2s" not in html and 'data-status="applied"' in html
    assert "Every node reports its new partition: all 72 GPUs" in html
    assert PartitionPlan.objects.get(pk=plan.pk).status == PlanStatus.APPLIED


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_progress_stops_waiting_for_nodes_that_never_report_and_says_which(admin):
    admin.post(url("plan-apply", "gb-r01"), {"preset": "2x9"})
    plan = PartitionPlan.objects.get()
    ConfigPush.objects.filter(plan_id=plan.pk).update(status=PushStatus.SUCCEEDED)
    follow_active_plans()
    plan.refresh_from_db()
    assert plan.status == PlanStatus.APPLIED
    nodes_report_their_partitions(plan.rack)
    Gpu.objects.filter(tray__hostname="gb-r01-t18").update(reported_clique_id=1)  # a node on the old clique
    assert admin.get(url("plan-detail", plan.pk), headers=HTMX).status_code == 200  # still waiting

    PartitionPlan.objects.filter(pk=plan.pk).update(
        finished_at=plan.finished_at - NODES_SETTLE_WINDOW - timedelta(seconds=1)
    )
    given_up = admin.get(url("plan-detail", plan.pk), headers=HTMX)
    assert given_up.status_code == 286
    assert "4 of 72 GPUs still report another clique" in given_up.content.decode()


def writes(queries) -> list[str]:
    return [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))]


def test_the_progress_page_only_reads(admin, django_capture_on_commit_callbacks):
    """A plan ready to move on (its work ended, its pushes done) stays as it is while the page is read."""
    job = run_job(make_department("Ops"), trays=["gb-r01-t02"], name="ops-train")
    admin.post(url("plan-apply", "gb-r01"), {"preset": "2x9", "drain_first": "on"})
    plan = PartitionPlan.objects.get()
    Allocation.objects.filter(job=job).delete()  # its work ended, but no task has run yet
    before = list(PartitionPlan.objects.filter(pk=plan.pk).values())
    audit = AuditEvent.objects.count()
    with CaptureQueriesContext(connection) as queries, django_capture_on_commit_callbacks() as callbacks:
        for headers in ({}, HTMX):
            assert admin.get(url("plan-detail", plan.pk), headers=headers).status_code == 200
    assert writes(queries.captured_queries) == [] and callbacks == []
    assert list(PartitionPlan.objects.filter(pk=plan.pk).values()) == before
    assert AuditEvent.objects.count() == audit and layout_of("gb-r01") == [("default", 32766)]


def test_a_failed_push_links_to_its_page_to_retry(admin):
    admin.post(url("plan-apply", "gb-r01"), {"preset": "2x9"})
    plan = PartitionPlan.objects.get()
    pushes = ConfigPush.objects.filter(plan_id=plan.pk)
    assert pushes.exists()
    pushes.update(status=PushStatus.FAILED, error="scontrol reconfigure: connection refused")
    follow_active_plans()  # the beat
    response = admin.get(url("plan-detail", plan.pk), headers=HTMX)
    assert response.status_code == 286
    html = response.content.decode()
    assert PartitionPlan.objects.get(pk=plan.pk).status == PlanStatus.FAILED
    assert "The plan failed:" in html and "scontrol reconfigure: connection refused" in html
    push = pushes.first()
    assert (
        "retry it there" in html and f'href="{reverse("integrations:push-detail", args=[push.pk])}"' in html
    )

    # Retried from the push page: the progress page follows the retry again (no dead end, no stale stop).
    from integrations.pushes import retry_now

    retry = retry_now(push)[0]
    assert retry.plan_id == plan.pk
    again = admin.get(url("plan-detail", plan.pk), headers=HTMX)
    assert again.status_code == 200 and 'hx-trigger="every 2s"' in again.content.decode()
    assert f"retried as #{retry.pk}" in again.content.decode()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_draining_plan_can_be_followed_and_cancelled(admin):
    run_job(make_department("Ops"), trays=["gb-r01-t02"], name="ops-train")
    refused = admin.post(url("plan-apply", "gb-r01"), {"preset": "2x9"})
    assert refused.status_code == 400 and "choose &#x27;drain first&#x27;" in refused.content.decode()

    response = admin.post(url("plan-apply", "gb-r01"), {"preset": "2x9", "drain_first": "on"})
    plan = PartitionPlan.objects.exclude(status=PlanStatus.CANCELLED).get()
    assert response["Location"] == url("plan-detail", plan.pk)
    assert plan.status == PlanStatus.DRAINING
    poll = admin.get(url("plan-detail", plan.pk), headers=HTMX)
    assert poll.status_code == 200
    html = poll.content.decode()
    assert "ops-train" in html and "gb-r01-t02" in html and "Cancel the plan" in html

    # Asked first (walkthrough: the button acted at once): htmx asks by hx-confirm, a plain post on a page.
    drained = ComputeTray.objects.filter(state_reason=plans.drain_reason(plan)).count()
    question = f"Cancel plan #{plan.pk} for gb-r01? Its {drained} drained trays return to service"
    assert f'hx-confirm="{question}' in html
    asked = admin.post(url("plan-cancel", plan.pk))
    assert asked.status_code == 200 and question in asked.content.decode()
    assert PartitionPlan.objects.get(pk=plan.pk).status == PlanStatus.DRAINING
    cancelled = admin.post(url("plan-cancel", plan.pk), headers=HTMX)  # the hx-confirm answered: done
    assert cancelled.headers["HX-Redirect"] == url("plan-detail", plan.pk)
    assert PartitionPlan.objects.get(pk=plan.pk).status == PlanStatus.CANCELLED
    assert ComputeTray.objects.get(hostname="gb-r01-t02").state == TrayState.UP
    assert admin.get(url("plan-detail", plan.pk), headers=HTMX).status_code == 286


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_draining_plan_moves_on_when_its_work_ends(admin, django_capture_on_commit_callbacks):
    job = run_job(make_department("Ops"), trays=["gb-r01-t02"], name="ops-train")
    admin.post(url("plan-apply", "gb-r01"), {"preset": "2x9", "drain_first": "on"})
    plan = PartitionPlan.objects.get()
    assert admin.get(url("plan-detail", plan.pk), headers=HTMX).status_code == 200
    # The job's end on the drained tray moves the plan on (a task, eager here), its pushes run and
    # settle it: the page, which only reads, shows it applied.
    with django_capture_on_commit_callbacks(execute=True):
        finish_job(Job.objects.get(pk=job.pk), JobState.COMPLETED)
    assert PartitionPlan.objects.get(pk=plan.pk).status == PlanStatus.APPLIED
    assert layout_of("gb-r01") == [("p1", 1), ("p2", 2)]
    nodes_report_their_partitions(plan.rack)
    done = admin.get(url("plan-detail", plan.pk), headers=HTMX)
    assert done.status_code == 286 and 'data-status="applied"' in done.content.decode()


def test_plan_list_shows_recent_plans(admin):
    admin.post(url("plan-apply", "gb-r01"), {"preset": "2x9"})
    plan = PartitionPlan.objects.get()
    html = admin.get(url("plan-list")).content.decode()
    assert url("plan-detail", plan.pk) in html and "gb-r01" in html


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_pushes_run_and_the_progress_page_reports_the_plan_applied(
    admin, django_capture_on_commit_callbacks, render_dir
):
    # The embedded `local` directory target, pushed for real (Celery is eager in tests).
    with django_capture_on_commit_callbacks(execute=True):
        response = admin.post(url("plan-apply", "gb-r01"), {"preset": "2x9"})
    plan = PartitionPlan.objects.get()
    pushes = list(ConfigPush.objects.filter(plan_id=plan.pk))
    assert pushes and all(push.status == PushStatus.SUCCEEDED for push in pushes), [p.error for p in pushes]
    topology = (render_dir / "current" / "slurm" / "topology.conf").read_text()
    assert "BlockName=r01p1 Nodes=gb-r01-t[01-09]" in topology

    nodes_report_their_partitions(plan.rack)
    done = admin.get(response["Location"], headers=HTMX)
    assert done.status_code == 286
    html = done.content.decode()
    assert 'data-status="applied"' in html and "every target has the new configuration" in html
    assert reverse("integrations:push-detail", args=[pushes[0].pk]) in html


def test_a_draft_plan_page_does_not_poll(admin, admin_user):
    plan = plans.create_plan(
        Rack.objects.get(name="gb-r01"), preset_layout("2x9"), drain=False, user=admin_user
    )
    response = admin.get(url("plan-detail", plan.pk), headers=HTMX)
    assert response.status_code == 286
    html = response.content.decode()
    assert "every 2s" not in html and "Preview it again" in html and "Cancel the plan" in html


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_plan_that_only_dedicates_a_partition_can_be_applied(admin, local_target):
    """Same layout, a new dedication: no tray changes partition, yet what is pushed does (a walkthrough saw
    the preview show the diff and say "The plan changes nothing" with Apply disabled)."""
    make_department("Research", guaranteed_gpus=72)
    params = {"preset": "1x18", "name": ["default"], "department": ["research"], "slurm": [""]}
    preview = admin.get(url("plan-preview", "gb-r01", **params))
    assert preview.context["check"].changes == [] and preview.context["files"]
    assert preview.context["can_apply"] is True
    assert "The plan changes nothing." not in preview.content.decode()

    applied = admin.post(url("plan-apply", "gb-r01"), params)
    assert applied.status_code == 302
    partition = NVLinkPartition.objects.get(rack__name="gb-r01")
    assert (partition.name, partition.dedication.department.slug) == ("default", "research")


def test_a_preview_of_the_layout_the_rack_already_has_says_so_and_cannot_apply(admin):
    """The demo's gb-r02 is carved 2x9 (p1, p2): previewing 2x9 again names the reason and Apply is off."""
    params = {"preset": "2x9", "name": ["p1", "p2"], "department": ["", ""], "slurm": ["", ""]}
    preview = admin.get(url("plan-preview", "gb-r02", **params))
    assert preview.status_code == 200
    html = preview.content.decode()
    assert "gb-r02 is already carved exactly like this" in html
    assert "does not change gb-r02's partitions" not in html  # the error says it; no second line repeats it
    assert preview.context["can_apply"] is False and "Fix the errors in the checks first." in html
    assert admin.post(url("plan-apply", "gb-r02"), params).status_code == 400
    assert not PartitionPlan.objects.exists()


def rendered_slurm_partitions(render_dir) -> dict[str, set[str]]:
    """Slurm partition -> its hosts, as the rendered rackplane.conf pushed to the `local` target says."""
    conf = (render_dir / "current" / "slurm" / "rackplane.conf").read_text()
    return {
        line.split()[0].split("=", 1)[1]: set(
            hostlist.expand_hostlist(re.search(r"\bNodes=(\S+)", line).group(1))
        )
        for line in conf.splitlines()
        if line.startswith("PartitionName=")
    }


@pytest.mark.slow(reason="a plan applied and rendered: over 0.3 s on 2 cores")
def test_every_layout_row_names_the_slurm_partition_the_rendered_configuration_serves_it_from(
    admin, django_capture_on_commit_callbacks, render_dir
):
    """The wizard showed a partition given to a department, its Slurm partition left empty, as served by the
    shared partition while the rendered slurm.conf gave it the department's own (a walkthrough found it).
    Every row the preview and the plan page show is checked against the rendered PartitionName lines."""
    make_department("Research", guaranteed_gpus=72)
    params = {
        "preset": "2x9",
        "name": ["train", "open"],
        "department": ["research", ""],
        "slurm": ["", ""],
    }
    preview = admin.get(url("plan-preview", "gb-r01", **params))
    shown = {row["partition"].name: row["served_by"] for row in preview.context["planned"]}
    assert shown == {"train": "research", "open": "gpu"}
    html = preview.content.decode()
    assert "· Slurm research" in html and "· Slurm gpu" in html

    with django_capture_on_commit_callbacks(execute=True):
        applied = admin.post(url("plan-apply", "gb-r01"), params)
    assert applied.status_code == 302
    plan = PartitionPlan.objects.latest("pk")
    page = admin.get(url("plan-detail", plan.pk))
    rows = {row["name"]: (row["served_by"], row["slots"]) for row in page.context["layout"]}
    assert {name: served for name, (served, _) in rows.items()} == shown
    served = rendered_slurm_partitions(render_dir)
    for name, (slurm_partition, slots) in rows.items():
        hosts = {f"gb-r01-t{slot:02d}" for slot in slots}
        assert hosts <= served[slurm_partition], (name, slurm_partition, served)
    assert '<td class="served-by">research</td>' in page.content.decode()


@pytest.mark.slow(reason="a plan applied and rendered: over 0.3 s on 2 cores")
def test_the_wizard_names_the_mig_partition_serving_a_partitions_trays_in_mig_mode(
    admin, django_capture_on_commit_callbacks, render_dir
):
    """A tray given a MIG layout is served by its partition's MIG partition (`<partition>--mig`, where slice
    jobs share the node): the layout step and the preview say which trays and which Slurm partition, and the
    rendered PartitionName lines put the tray there and nowhere else."""
    make_department("Research", guaranteed_gpus=72)
    mig_tray("gb-r01-t03")
    params = {"preset": "2x9", "name": ["train", "open"], "department": ["research", ""], "slurm": ["", ""]}
    for step in ("plan-layout", "plan-preview"):
        page = admin.get(url(step, "gb-r01", **params))
        rows = {row["partition"].name: row for row in page.context["planned"]}
        assert (rows["train"]["mig_served_by"], rows["train"]["mig_ranges"]) == ("research--mig", "3")
        assert rows["open"]["mig_served_by"] == ""
        assert "MIG trays 3: Slurm research--mig" in page.content.decode(), step
    with django_capture_on_commit_callbacks(execute=True):
        assert admin.post(url("plan-apply", "gb-r01"), params).status_code == 302
    served = rendered_slurm_partitions(render_dir)
    assert served["research--mig"] == {"gb-r01-t03"}
    assert "gb-r01-t03" not in served["research"] and "gb-r01-t04" in served["research"]


NO_TRAY_MOVES = {
    # The walkthrough's plan: the existing p2 only dedicated to a department, its Slurm partition left empty.
    "dedicated": (
        {"preset": "2x9", "name": ["p1", "p2"], "department": ["", "inference"], "slurm": ["", ""]},
        ["p2 is dedicated to inference", "p2's trays move from the Slurm partition gpu to inference"],
        {"p1": "gpu", "p2": "inference"},
    ),
    "slurm partition": (
        {"preset": "2x9", "name": ["p1", "p2"], "department": ["", ""], "slurm": ["gpu_fast", ""]},
        ["p1's trays move from the Slurm partition gpu to gpu_fast"],
        {"p1": "gpu_fast", "p2": "gpu"},
    ),
    "clique IDs swapped": (
        {"preset": "custom", "slots": ["10-18", "1-9"], "name": ["p2", "p1"], "department": ["", ""]},
        ["p2's clique ID changes from 2 to 1", "p1's clique ID changes from 1 to 2"],
        {"p1": "gpu", "p2": "gpu"},
    ),
}


@pytest.mark.slow(reason="a plan previewed, applied and rendered: over 0.3 s on 2 cores")
@pytest.mark.parametrize("case", list(NO_TRAY_MOVES))
def test_a_plan_that_moves_no_tray_says_what_it_changes_as_the_rendered_configuration_does(
    admin, case, django_capture_on_commit_callbacks, render_dir
):
    """gb-r02 is carved 2x9 (p1, p2). A plan that keeps every tray in its partition but changes what is
    pushed (the walkthrough: p2 only dedicated to a department) was checked "this plan does not change
    gb-r02's partitions" above a diff of three files. The check says what changes, and the rendered
    configuration agrees with it, row by row."""
    make_department("Inference", guaranteed_gpus=36)
    params, said, served = NO_TRAY_MOVES[case]
    preview = admin.get(url("plan-preview", "gb-r02", **params))
    assert preview.status_code == 200
    check = preview.context["check"]
    assert check.ok and check.changes == [] and preview.context["files"]
    text = findings(preview)
    assert "does not change" not in text and "changes nothing" not in text
    assert "No tray of gb-r02 changes NVLink partition" in text
    assert ("the fabric's NVLink partitions stay as they are" in text) == (case != "clique IDs swapped")
    for clause in said:
        assert clause in text
    # Every rendered file the diff shows changing is named by the check (the fabric's by the clique IDs).
    named = {
        "slurm/": "Slurm partition",
        "kubernetes/": "Kubernetes labels",
        "opensm/": "InfiniBand partition",
    }
    for diff in preview.context["files"]:
        assert any(diff.path.startswith(folder) and words in text for folder, words in named.items()), (
            diff.path
        )
    html = preview.content.decode()
    assert "does not change gb-r02" not in html and "No tray of gb-r02 changes NVLink partition" in html
    assert {row["partition"].name: row["served_by"] for row in preview.context["planned"]} == served
    # In Japanese too: the sentence is stored in English and read back clause by clause.
    japanese = assert_japanese(admin, url("plan-preview", "gb-r02", **params))
    assert (
        "NVLink パーティションが変わるトレイは" in japanese and "パーティションは変わりません" not in japanese
    )

    with django_capture_on_commit_callbacks(execute=True):
        assert admin.post(url("plan-apply", "gb-r02"), params).status_code == 302
    partitions = rendered_slurm_partitions(render_dir)
    for name, slots in (("p1", range(1, 10)), ("p2", range(10, 19))):
        assert {f"gb-r02-t{slot:02d}" for slot in slots} <= partitions[served[name]], (name, partitions)
    cliques = {"p1": 2, "p2": 1} if case == "clique IDs swapped" else {"p1": 1, "p2": 2}
    assert dict(layout_of("gb-r02")) == cliques


def test_the_preview_lists_the_fabric_managers_operations_in_order(admin):
    """gb-r01 is one default partition (clique 32766): 2x9 takes every GPU out of it, then makes p1 and p2."""
    params = {"preset": "2x9", "name": ["p1", "p2"], "department": ["", ""], "slurm": ["", ""]}
    preview = admin.get(url("plan-preview", "gb-r01", **params))
    assert preview.context["fabric_steps"] == [
        "remove 72 GPUs from the default partition (ID 32766), 0 stay",  # it stays, empty
        "create partition p1: 36 GPUs",
        "create partition p2: 36 GPUs",
    ]
    # The push's log names the default partition as the preview does, whatever the fabric calls it (the
    # walkthrough's preview said "partition default", its push log "partition clique-32766").
    for fabric_name in ("default", "Default Partition", "clique-32766"):
        step = FabricStep("shrink", fabric_name, 32766, (), removed=tuple(str(n) for n in range(72)))
        assert step.describe() == preview.context["fabric_steps"][0]
    html = preview.content.decode()
    # The steps are sentences of templates, their partition names data a translator leaves alone.
    assert "Fabric manager operations" in html
    assert '<li>create partition <span translate="no">p1</span>: 36 GPUs</li>' in html


def test_a_partition_made_again_under_its_name_reads_as_re_made_not_unchanged(admin):
    """Walkthrough: gb-r08's "default" (18 trays, clique 32766) planned as "default" on trays 1-9 listed its
    trays as "default -> default", although the partition is made again on another clique."""
    params = {"preset": "custom", "slots": ["1-9", "10-18"], "name": ["default", "p2"]}
    params |= {"department": ["", ""], "slurm": ["", ""]}
    html = admin.get(url("plan-preview", "gb-r01", **params)).content.decode()
    rows = dict(re.findall(r'<tr><td class="num">(\d+)</td>(.*?)</tr>', html, re.S))
    assert "re-made with other trays, as clique 1" in rows["1"]
    assert "re-made" not in rows["10"] and "<b>p2</b>" in rows["10"]  # a new partition's name says it


def test_each_tray_row_shows_the_work_on_it(admin):
    """The drawing's Work column: a busy tray names its jobs (data), an idle one says so."""
    run_job(make_department("Ops"), trays=["gb-r01-t02"], name="ops-busy")
    html = admin.get(url("plan-layout", "gb-r01", preset="2x9")).content.decode()
    row = re.search(r'<li class="plan-row[^"]*" data-slot="2".*?</li>', html, re.S).group(0)
    assert re.search(
        r'<span class="work-cell"><span class="job mono"[^>]*translate="no">ops-busy</span>', row
    )
    idle = re.search(r'<li class="plan-row[^"]*" data-slot="3".*?</li>', html, re.S).group(0)
    assert '<span class="work-cell"><span class="muted">idle</span></span>' in idle
