"""Pushes follow tenancy changes (integrations.signals): what the configuration renders from a department,
a dedication, the tenancy settings or who may submit under a Slurm account (memberships, POSIX accounts, who
is active or an admin) queues one push per transaction, on commit, saying what changed; what nothing renders
queues nothing; a partition plan's own push is not doubled."""

import contextlib
from decimal import Decimal

import pytest
import yaml
from django.db import transaction
from django.urls import reverse

from integrations import signals
from integrations.contents import payload_of
from integrations.models import ConfigPush, ConfigTarget, PushStatus
from integrations.plans import service as plans
from integrations.pushes import queue_pushes
from integrations.state import KUBERNETES_FILES, build_state, render_current
from inventory.models import NVLinkPartition, Rack
from inventory.planning import PlannedPartition
from tenancy.models import (
    DedicatedPartition,
    Department,
    Membership,
    PosixAccount,
    ProjectMembership,
    TenancySettings,
)
from tenancy.projects import create_project
from tenancy.services import dedicate_partition, save_department
from tests.factories import make_department, make_member, make_user
from tests.forms import department_form

pytestmark = pytest.mark.django_db

CLUSTER_QUEUES = KUBERNETES_FILES["ClusterQueue"]


@pytest.fixture
def research(demo_inventory, django_capture_on_commit_callbacks) -> Department:
    """Research, its own push done and forgotten: each test starts with no push and no change waiting."""
    with django_capture_on_commit_callbacks(execute=True):
        department = make_department("Research", guaranteed_gpus=96)
    ConfigPush.objects.all().delete()
    return department


def edit_form(department: Department, **changes) -> dict:
    """The edit page's form as the browser posts it: the stored values, with `changes`."""
    fields = {
        name: getattr(department, name)
        for name in (
            "name",
            "slug",
            "guaranteed_gpus",
            "over_quota_weight",
            "priority",
            "vlan_id",
            "vxlan_vni",
            "ib_pkey",
            "network_cidr",
            "export_path",
            "storage_quota_gib",
        )
    }
    fields["limit_gpus"] = "" if department.limit_gpus is None else department.limit_gpus
    return department_form(**{**fields, **changes})


def nominal_quota(render_dir, slug: str) -> int:
    """The GPU nominalQuota of `slug`'s ClusterQueue in the live rendered configuration."""
    text = (render_dir / "current" / CLUSTER_QUEUES).read_text()
    [queue] = [q for q in yaml.safe_load_all(text) if q["metadata"]["name"] == slug]
    [resource] = [
        r
        for group in queue["spec"]["resourceGroups"]
        for f in group["flavors"]
        for r in f["resources"]
        if r["name"] == "nvidia.com/gpu"
    ]
    return int(resource["nominalQuota"])


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_raising_a_guarantee_on_the_edit_page_pushes_the_new_quota(
    research, local_target, render_dir, client_as, platform_admin, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = client_as(platform_admin).post(
            reverse("integrations:department-edit", args=["research"]),
            edit_form(research, guaranteed_gpus=120),
            follow=True,
        )

    [push] = ConfigPush.objects.all()
    assert push.reason == "department research: guarantee 96 -> 120"
    assert push.requested_by == platform_admin  # who changed it, as for a plan's pushes
    assert push.status == PushStatus.SUCCEEDED and push.target == local_target
    assert nominal_quota(render_dir, "research") == 120
    page = response.content.decode()
    assert "A configuration push was queued (department research: guarantee 96 -&gt; 120)" in page
    assert f'<a href="{reverse("integrations:push-list")}">see the pushes</a>' in page


@pytest.mark.slow(reason="runs migrations")
def test_without_an_enabled_target_the_edit_page_says_nothing_was_pushed(
    research, client_as, platform_admin, django_capture_on_commit_callbacks
):
    ConfigTarget.objects.update(enabled=False)  # the data migration's local target, among others
    with django_capture_on_commit_callbacks(execute=True):
        response = client_as(platform_admin).post(
            reverse("integrations:department-edit", args=["research"]),
            edit_form(research, guaranteed_gpus=104),
            follow=True,
        )
    assert not ConfigPush.objects.exists()
    assert "No configuration target is enabled, so nothing was pushed" in response.content.decode()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_change_nothing_renders_queues_nothing(
    research, local_target, client_as, platform_admin, django_capture_on_commit_callbacks
):
    """Weight and priority are scheduling decisions: no file holds them, nor the idle window."""
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = client_as(platform_admin).post(
            reverse("integrations:department-edit", args=["research"]),
            edit_form(research, over_quota_weight="2.50", priority=3),
            follow=True,
        )
        settings = TenancySettings.load()
        settings.idle_window_minutes = 45
        settings.save()
    research.refresh_from_db()
    assert (research.over_quota_weight, research.priority) == (Decimal("2.50"), 3)
    assert not any(isinstance(c, signals._PushOnCommit) for c in callbacks)
    assert not ConfigPush.objects.exists()
    assert "Department Research saved." in response.content.decode()
    assert "A configuration push was queued" not in response.content.decode()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_two_changes_in_one_transaction_queue_one_push(
    research, local_target, render_dir, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        research.guaranteed_gpus = 100
        save_department(research)  # its own atomic block: a savepoint inside this transaction
        make_department("Vision", guaranteed_gpus=8)
        settings = TenancySettings.load()
        settings.nfs_server = "nfs2.storage.internal"
        settings.save()
    [push] = ConfigPush.objects.all()
    assert push.reason == (
        "department research: guarantee 96 -> 100; department vision added; "
        "tenancy settings: NFS server nfs.storage.internal -> nfs2.storage.internal"
    )
    assert nominal_quota(render_dir, "research") == 100
    assert nominal_quota(render_dir, "vision") == 8
    assert (
        "nfs2.storage.internal" in (render_dir / "current" / KUBERNETES_FILES["PersistentVolume"]).read_text()
    )


def test_a_change_rolled_back_with_its_savepoint_pushes_nothing(
    research, local_target, django_capture_on_commit_callbacks
):
    with (
        django_capture_on_commit_callbacks(execute=True),
        transaction.atomic(),
        contextlib.suppress(RuntimeError),
        transaction.atomic(),  # the savepoint that rolls back
    ):
        research.guaranteed_gpus = 100
        research.save()
        raise RuntimeError("the rest of the request failed")
    assert not ConfigPush.objects.exists()


def test_a_long_list_of_changes_says_how_many_did_not_fit():
    reasons = [f"department team{n:02d}: guarantee 8 -> 16" for n in range(20)]
    reason = signals._reason(reasons)
    assert len(reason) <= signals.REASON_LENGTH
    kept = reason.split("; ")
    assert kept[:-1] == reasons[: len(kept) - 1]
    assert kept[-1] == f"and {len(reasons) - len(kept) + 1} more"
    assert signals._reason(reasons[:2]) == "; ".join(reasons[:2])


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_dedications_and_deleted_departments_push(research, local_target, django_capture_on_commit_callbacks):
    partition = NVLinkPartition.objects.get(rack__name="gb-r02", name="p1")
    with django_capture_on_commit_callbacks(execute=True):
        dedicate_partition(research, partition)
    assert ConfigPush.objects.get().reason == f"dedication {partition} -> Research added"

    with django_capture_on_commit_callbacks(execute=True):
        research.delete()
    push = ConfigPush.objects.latest("pk")
    assert push.reason == f"dedication {partition} -> Research deleted; department research deleted"
    assert "research" not in payload_of(push.payload)["files"].get(CLUSTER_QUEUES, "")


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_plan_that_dedicates_a_partition_pushes_once(
    research, local_target, admin_user, django_capture_on_commit_callbacks
):
    """The plan queues its own push after the dedication it makes: that push already renders it."""
    rack = Rack.objects.get(name="gb-r01")
    planned = [
        PlannedPartition("p1", tuple(range(1, 10)), department="research"),
        PlannedPartition("p2", tuple(range(10, 19))),
    ]
    with django_capture_on_commit_callbacks(execute=True):
        plan = plans.create_and_apply(rack, planned, drain=False, user=admin_user)
    assert DedicatedPartition.objects.filter(department=research, partition__rack=rack).exists()
    [push] = ConfigPush.objects.all()
    assert push.plan_id == plan.pk and push.status == PushStatus.SUCCEEDED


def test_a_change_after_a_push_in_the_same_transaction_is_pushed_too(
    research, local_target, render_dir, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        queue_pushes(reason="pushed from the portal")
        research.guaranteed_gpus = 112
        save_department(research)
    assert [p.reason for p in ConfigPush.objects.order_by("pk")] == [
        "pushed from the portal",
        "department research: guarantee 96 -> 112",
    ]
    assert nominal_quota(render_dir, "research") == 112


# Every stored field of the models the configuration reads from, with another valid value. A field added to
# one of them fails here until it is listed: then say whether it renders (integrations.signals.RENDERED).
OTHER_VALUES = {
    Department: {
        "name": "Research Two",
        "slug": "research2",
        "guaranteed_gpus": 104,
        "over_quota_weight": Decimal("2.50"),
        "limit_gpus": 200,
        "priority": 5,
        "vlan_id": 3000,
        "vxlan_vni": 15000,
        "ib_pkey": 0x4000,
        "network_cidr": "10.64.200.0/24",
        "export_path": "/exports/tenants/elsewhere",
        "storage_quota_gib": 20480,
    },
    TenancySettings: {
        "vlan_first": 200,
        "vlan_last": 3000,
        "vni_first": 11000,
        "vni_last": 18000,
        "pkey_first": 0x0200,
        "pkey_last": 0x7000,
        "tenant_supernet": "10.128.0.0/16",
        "tenant_prefix": 25,
        "export_root": "/exports",  # still holds Research's export (a root that does not is refused)
        "nfs_server": "nfs2.storage.internal",
        "default_storage_quota_gib": 2048,
        "idle_threshold_percent": 9.0,
        "idle_window_minutes": 45,
        "utilization_history_hours": 48,
        "quota_history_days": 60,
    },
}
SET_BY_DJANGO = {"id", "created_at", "updated_at"}


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("model", [Department, TenancySettings], ids=lambda m: m.__name__)
def test_the_watched_fields_are_exactly_those_the_configuration_renders(model, research):
    row = research if model is Department else TenancySettings.load()
    stored = {f.name for f in model._meta.concrete_fields} - SET_BY_DJANGO
    assert set(OTHER_VALUES[model]) == stored
    baseline = render_current()
    rendered = set()
    for name, value in OTHER_VALUES[model].items():
        assert getattr(row, name) != value, name
        sid = transaction.savepoint()
        model.objects.filter(pk=row.pk).update(**{name: value})
        if render_current() != baseline:
            rendered.add(name)
        transaction.savepoint_rollback(sid)
    assert rendered == set(signals.RENDERED[model])


def test_a_dedication_renders_both_its_fields(research):
    vision = make_department("Vision", guaranteed_gpus=40)
    p1, p2 = NVLinkPartition.objects.filter(rack__name="gb-r02").order_by("clique_id")[:2]
    dedication = dedicate_partition(research, p1)
    baseline = render_current()
    for name, value in {"partition": p2, "department": vision}.items():
        sid = transaction.savepoint()
        DedicatedPartition.objects.filter(pk=dedication.pk).update(**{name: value})
        assert render_current() != baseline, name
        transaction.savepoint_rollback(sid)
    assert set(signals.RENDERED[DedicatedPartition]) == {"partition", "department"}


def test_adding_and_changing_a_project_pushes_its_queue_and_account(
    research, local_target, render_dir, platform_admin, django_capture_on_commit_callbacks
):
    from tenancy.projects import create_project, update_project

    with django_capture_on_commit_callbacks(execute=True):
        project = create_project(platform_admin, research, name="Vision", guaranteed_gpus=48)
    [push] = ConfigPush.objects.all()
    assert push.reason == "project research/vision added"
    assert push.status == PushStatus.SUCCEEDED
    accounts = (render_dir / "current" / "slurm" / "accounts.sh").read_text()
    assert "add account research--vision parent=research" in accounts

    with django_capture_on_commit_callbacks(execute=True):
        update_project(platform_admin, project, guaranteed_gpus=40)
    latest = ConfigPush.objects.order_by("-pk").first()
    assert latest.reason == "project research/vision: guarantee 48 -> 40"


def submitters() -> set[tuple[str, str]]:
    """Who may submit under which Slurm account: slurmdbd's associations, as a push writes them."""
    return {(a.account, a.user) for a in build_state().associations}


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_who_may_submit_is_watched_exactly_as_the_associations_read_it(research, django_user_model):
    """Each watched field of a membership, a project membership, a POSIX account and a person changes who may
    submit under some Slurm account (so a change of it must reach slurmdbd), and each is in RENDERED."""
    vision = make_department("Vision", guaranteed_gpus=8)
    admin = make_user("root-admin", staff=True)
    alice = make_member("alice", research)
    project = create_project(admin, research, name="Lens", guaranteed_gpus=4)
    create_project(admin, research, name="Mirror", guaranteed_gpus=2)  # a lead's, not alice's as a member
    in_project = ProjectMembership.objects.create(user=alice, project=project)
    other_project = create_project(admin, vision, name="Optics", guaranteed_gpus=4)
    membership = Membership.objects.get(user=alice)
    changes = [
        (Membership, membership.pk, {"user": admin, "department": vision, "role": "lead"}),
        (ProjectMembership, in_project.pk, {"user": admin, "project": other_project}),
        (
            PosixAccount,
            alice.posix_account.pk,
            {"user": make_user("no-login", posix=False), "name": "alice2"},
        ),
        (django_user_model, alice.pk, {"is_active": False, "is_staff": True, "is_superuser": True}),
    ]
    baseline = submitters()
    for model, pk, values in changes:
        for name, value in values.items():
            sid = transaction.savepoint()
            model.objects.filter(pk=pk).update(**{name: value})
            assert submitters() != baseline, (model.__name__, name)
            transaction.savepoint_rollback(sid)
        assert set(signals.RENDERED[model]) == set(values), model.__name__


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_new_member_and_a_person_leaving_reach_slurmdbd_with_a_push_of_their_own(
    research, local_target, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        alice = make_member("alice", research)
    [push] = ConfigPush.objects.all()
    assert push.reason == "alice in department research added"
    assert ("research", "alice") in submitters()

    with django_capture_on_commit_callbacks(execute=True):
        Membership.objects.filter(user=alice).delete()
    assert ConfigPush.objects.count() == 2
    assert ConfigPush.objects.latest("pk").reason == "alice in department research deleted"
    assert ("research", "alice") not in submitters()

    with django_capture_on_commit_callbacks(execute=True):
        alice.is_active = False
        alice.save()
    assert ConfigPush.objects.latest("pk").reason == "person alice: active True -> False"
