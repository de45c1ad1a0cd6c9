"""Columns the lists show and now sort by (core.tables): jobs' "Where / why waiting", departments' network
and storage, plans' partition count, pushes' reason, every column of the notification deliveries but the
last answer; both ways, and unknown sorts fall back without a 500.
Every header of those lists is a sort link except the audit log's "Change" (a diff) and the deliveries'
"Last answer" (a line from the attempt log): no order makes sense there, so they stay plain headers."""

import re
import uuid
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from core.models import (
    AuditAction,
    AuditEvent,
    AuditSource,
    Notification,
    NotificationEvent,
    NotificationStatus,
)
from core.notifications.subscriptions import create_subscription
from integrations.models import ConfigPush, PushStatus
from inventory.models import PartitionPlan, Rack
from scheduling.choices import JobState
from scheduling.models import Job
from tenancy.models import Department
from tests import factories

pytestmark = pytest.mark.django_db

UNKNOWN = ["bogus", "-bogus", "-", "where;drop table", "__class__", "pk"]


def _in_order(html: str, pattern: str) -> list[str]:
    return re.findall(pattern, html)


def _get(client, url, **params) -> str:
    response = client.get(url, params)
    assert response.status_code == 200, (url, params)
    return response.content.decode()


# ------------------------------------------------------------------------------------------------- jobs


@pytest.fixture
def waiting_and_placed(department_a):
    """Two pending jobs with reasons, two finished ones that ran somewhere (no reason)."""
    factories.make_job(department_a, "wait-quota", state=JobState.PENDING, pending_reason="b: over the quota")
    factories.make_job(
        department_a, "wait-room", state=JobState.PENDING, pending_reason="a: no free partition"
    )
    ran_r02 = factories.make_job(department_a, "ran-r02", state=JobState.COMPLETED)
    ran_r01 = factories.make_job(department_a, "ran-r01", state=JobState.COMPLETED)
    Job.objects.filter(pk=ran_r02.pk).update(placement=["gb-r02-n01", "gb-r02-n02"])
    Job.objects.filter(pk=ran_r01.pk).update(placement=["gb-r01-n03"])


def test_jobs_sort_by_where_or_why_waiting_both_ways(client_as, platform_admin, waiting_and_placed):
    client, url = client_as(platform_admin), reverse("scheduling:job-list")
    expected = ["ran-r01", "ran-r02", "wait-room", "wait-quota"]
    assert _in_order(_get(client, url, sort="where"), r'class="job-link"[^>]*>([^<]+)<') == expected
    assert _in_order(_get(client, url, sort="-where"), r'class="job-link"[^>]*>([^<]+)<') == expected[::-1]


@pytest.mark.slow(reason="6 cases, each a full request through the stack")
@pytest.mark.parametrize("raw", UNKNOWN)
def test_jobs_unknown_sort_falls_back_to_newest_first(client_as, platform_admin, waiting_and_placed, raw):
    names = _in_order(
        _get(client_as(platform_admin), reverse("scheduling:job-list"), sort=raw),
        r'class="job-link"[^>]*>([^<]+)<',
    )
    assert names == ["ran-r01", "ran-r02", "wait-room", "wait-quota"]  # -created (then -pk): the newest first


# ------------------------------------------------------------------------------------------ departments


@pytest.fixture
def three_departments(db):
    # name order: Mars, Neptune, Venus; VLAN order: Neptune, Venus, Mars; storage order: Venus, Mars, Neptune.
    for name, vlan, storage in (("Mars", 900, 2048), ("Neptune", 700, 4096), ("Venus", 800, 1024)):
        department = factories.make_department(name, storage_quota_gib=storage)
        Department.objects.filter(pk=department.pk).update(vlan_id=vlan)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize(
    "key, ascending", [("network", ["Neptune", "Venus", "Mars"]), ("storage", ["Venus", "Mars", "Neptune"])]
)
def test_departments_sort_by_network_and_storage(
    client_as, platform_admin, three_departments, key, ascending
):
    client, url = client_as(platform_admin), reverse("scheduling:department-list")
    pattern = r'class="dept-link"[^>]*>([^<]+)<'
    assert _in_order(_get(client, url, sort=key), pattern) == ascending
    assert _in_order(_get(client, url, sort=f"-{key}"), pattern) == ascending[::-1]


@pytest.mark.slow(reason="6 cases, each a full request through the stack")
@pytest.mark.parametrize("raw", UNKNOWN)
def test_departments_unknown_sort_falls_back_to_names(client_as, platform_admin, three_departments, raw):
    html = _get(client_as(platform_admin), reverse("scheduling:department-list"), sort=raw)
    assert _in_order(html, r'class="dept-link"[^>]*>([^<]+)<') == ["Mars", "Neptune", "Venus"]


# ------------------------------------------------------------------------------------------------ plans


@pytest.fixture
def plans(demo_inventory):
    """Plans #a, #b, #c (oldest first) carving 2, 0 and 1 partitions."""
    rack = Rack.objects.get(name="gb-r01")
    layouts = (
        [{"name": "p1", "slots": [1]}, {"name": "p2", "slots": [2]}],
        [],
        [{"name": "solo", "slots": [3]}],
    )
    return [PartitionPlan.objects.create(rack=rack, layout=layout, base_layout="").pk for layout in layouts]


def _plan_ids(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<td><a href="/[^"]*plans/(\d+)/">#', html)]


def test_plans_sort_by_partition_count_both_ways(client_as, platform_admin, plans):
    two, none, one = plans
    client, url = client_as(platform_admin), reverse("integrations:plan-list")
    assert _plan_ids(_get(client, url, sort="partitions")) == [none, one, two]
    assert _plan_ids(_get(client, url, sort="-partitions")) == [two, one, none]


@pytest.mark.slow(reason="6 cases, each a full request through the stack")
@pytest.mark.parametrize("raw", UNKNOWN)
def test_plans_unknown_sort_falls_back_to_newest_first(client_as, platform_admin, plans, raw):
    html = _get(client_as(platform_admin), reverse("integrations:plan-list"), sort=raw)
    assert _plan_ids(html) == plans[::-1]


# ----------------------------------------------------------------------------------------------- pushes


@pytest.fixture
def pushes(db):
    target = factories.local_target()
    return {
        reason: ConfigPush.objects.create(target=target, reason=reason, status=PushStatus.SUCCEEDED).pk
        for reason in ("plan applied", "department changed", "quota edited")
    }


def _push_ids(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr data-push="(\d+)"', html)]


def test_pushes_sort_by_reason_both_ways(client_as, platform_admin, pushes):
    client, url = client_as(platform_admin), reverse("integrations:push-list")
    ascending = [pushes["department changed"], pushes["plan applied"], pushes["quota edited"]]
    assert _push_ids(_get(client, url, sort="reason")) == ascending
    assert _push_ids(_get(client, url, sort="-reason")) == ascending[::-1]


@pytest.mark.slow(reason="6 cases, each a full request through the stack")
@pytest.mark.parametrize("raw", UNKNOWN)
def test_pushes_unknown_sort_falls_back_to_newest_first(client_as, platform_admin, pushes, raw):
    html = _get(client_as(platform_admin), reverse("integrations:push-list"), sort=raw)
    assert _push_ids(html) == sorted(pushes.values(), reverse=True)


# -------------------------------------------------------------------------------- notification deliveries


@pytest.fixture
def deliveries(db):
    """Three deliveries, oldest first, whose columns each order them differently."""
    now = timezone.now()
    rows = (
        ("facilities", NotificationEvent.TRAY_DRAINED, "b: tray drained", NotificationStatus.DELIVERED, 1),
        ("alerts", NotificationEvent.BREAKER_TRIPPED, "c: breaker", NotificationStatus.FAILED, 5),
        ("network", NotificationEvent.NEEDS_SERVICE, "a: needs service", NotificationStatus.PENDING, 0),
    )
    pks = []
    for age, (name, event, subject, status, attempts) in zip((3, 2, 1), rows, strict=True):
        subscription, _ = create_subscription(
            name=name, channel="email", email=f"{name}@example.com", events=[event.value]
        )
        notification = Notification.objects.create(
            uuid=uuid.uuid4(),
            subscription=subscription,
            channel="email",
            destination=f"{name}@example.com",
            event=event,
            subject=subject,
            created_at=now - timedelta(hours=age),
            status=status,
            attempts=attempts,
        )
        pks.append(notification.pk)
    return pks


def _delivery_ids(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr data-notification="(\d+)"', html)]


@pytest.mark.slow(reason="6 cases, each a full request through the stack")
@pytest.mark.parametrize(
    "key, ascending",
    [
        ("when", [0, 1, 2]),
        ("event", [1, 2, 0]),  # breaker_tripped, needs_service, tray_drained
        ("subject", [2, 0, 1]),
        ("to", [1, 0, 2]),  # alerts, facilities, network
        ("status", [0, 1, 2]),  # delivered, failed, pending
        ("attempts", [2, 0, 1]),
    ],
)
def test_deliveries_sort_by_each_column_both_ways(client_as, platform_admin, deliveries, key, ascending):
    client, url = client_as(platform_admin), reverse("notification-list")
    expected = [deliveries[i] for i in ascending]
    assert _delivery_ids(_get(client, url, sort=key)) == expected
    assert _delivery_ids(_get(client, url, sort=f"-{key}")) == expected[::-1]


@pytest.mark.slow(reason="6 cases, each a full request through the stack")
@pytest.mark.parametrize("raw", UNKNOWN)
def test_deliveries_unknown_sort_falls_back_to_newest_first(client_as, platform_admin, deliveries, raw):
    html = _get(client_as(platform_admin), reverse("notification-list"), sort=raw)
    assert _delivery_ids(html) == deliveries[::-1]


def test_deliveries_sort_keeps_the_status_filter(client_as, platform_admin, deliveries):
    html = _get(client_as(platform_admin), reverse("notification-list"), sort="-attempts", status="failed")
    assert _delivery_ids(html) == [deliveries[1]]
    assert "status=failed" in re.search(r'<a class="sort-link" href="([^"]+)"[^>]*>When', html).group(1)


# --------------------------------------------------------------------------- which headers are links


def _plain_headers(html: str) -> list[str]:
    """The text of header cells in the table's head that are not sort links."""
    head = html[html.index("<thead") : html.index("</thead>")]
    cells = re.findall(r"<th\b[^>]*>(.*?)</th>", head, re.S)
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in cells if 'class="sort-link"' not in cell]


def test_every_shown_column_sorts_except_the_audit_change_and_last_answer(
    client_as,
    platform_admin,
    demo_inventory,
    department_a,
    waiting_and_placed,
    three_departments,
    plans,
    pushes,
):
    AuditEvent.objects.create(
        actor_name="lead",
        source=AuditSource.UI,
        action=AuditAction.UPDATE,
        object_type="tenancy.department",
        object_id=str(department_a.pk),
        object_repr=department_a.name,
        department_id=department_a.pk,
        before={"guaranteed_gpus": 8},
        after={"guaranteed_gpus": 16},
    )
    client = client_as(platform_admin)
    for name in (
        "inventory:rack-list",
        "scheduling:job-list",
        "scheduling:department-list",
        "integrations:plan-list",
        "integrations:push-list",
    ):
        html = _get(client, reverse(name))
        assert "<thead" in html, name
        assert _plain_headers(html) == [], name
    assert _plain_headers(_get(client, reverse("audit-list"))) == ["Change"]
    notifications = _get(client, reverse("notification-list"))
    assert _plain_headers(notifications[notifications.index('id="deliveries"') :]) == ["Last answer"]
