"""The tenancy API under /api/v1/: departments (through save_department), members (through set_membership
and remove_membership), the fair-share position, the audit events list, and constant query counts.

Who may see and do what is tested in test_rbac_api.py; here a platform admin (`staff`, an API client) and a
lead exercise the behaviour.
"""

from decimal import Decimal

import pytest
import yaml
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.access import Role
from core.models import AuditEvent
from inventory.models import Gpu, NVLinkPartition
from scheduling.choices import JobState
from tenancy.models import Department, Membership, TenancySettings
from tenancy.quota import DepartmentQuota, fair_share
from tenancy.services import dedicate_partition, schedulable_gpus, schedulable_gpus_q
from tests.factories import make_department, make_job, make_member, make_user, run_job, token_client

pytestmark = pytest.mark.django_db

DEPARTMENTS = "/api/v1/departments/"


def job(department, gpus, state=JobState.RUNNING, name=None):
    """A job; a running one holds `gpus` free schedulable GPUs (Allocation rows: what "in use" counts)."""
    name = name or f"{department.slug}-{state}-{gpus}"
    if state == JobState.RUNNING:
        free = Gpu.objects.filter(schedulable_gpus_q(), allocations__isnull=True).order_by("pk")[:gpus]
        return run_job(department, free, name)
    return make_job(department, name, state, gpus=gpus)


@pytest.fixture
def department_a(demo_inventory):
    return make_department(
        "Alpha", guaranteed_gpus=40, limit_gpus=96, over_quota_weight=Decimal("2.00"), priority=2
    )


@pytest.fixture
def department_b(demo_inventory):
    return make_department("Beta", guaranteed_gpus=20)


@pytest.fixture
def workload(department_a, department_b, lead_a, lead_b, member_b):
    """Jobs: Alpha (guarantee 40) runs 48 (a 40-GPU job in quota, a newer 8-GPU one borrowing) with 16
    pending; Beta (guarantee 20) runs 8 with 12 pending. With the personas lead of each and member of Beta."""
    job(department_a, 40)
    job(department_a, 8)
    job(department_a, 16, JobState.PENDING)
    job(department_a, 8, JobState.COMPLETED)  # history: counts for nothing
    job(department_b, 8)
    job(department_b, 12, JobState.PENDING)


@pytest.fixture
def staff(platform_admin):
    return token_client(platform_admin)


def results(response):
    assert response.status_code == 200, response.content
    return response.json()["results"]


# --- departments: reading -----------------------------------------------------------------------------------


def test_department_list_shows_quota_isolation_and_usage(workload, staff, department_a):
    rows = {row["slug"]: row for row in results(staff.get(DEPARTMENTS))}
    assert list(rows) == ["alpha", "beta"]
    alpha = department_a
    pools = TenancySettings.load()
    assert rows["alpha"] == {
        "id": alpha.pk,
        "name": "Alpha",
        "slug": "alpha",
        "guaranteed_gpus": 40,
        "over_quota_weight": "2.00",
        "limit_gpus": 96,
        "priority": 2,
        "vlan_id": pools.vlan_first,
        "vxlan_vni": pools.vni_first,
        "ib_pkey": pools.pkey_first,
        "pkey_hex": f"0x{pools.pkey_first:04x}",
        "network_cidr": "10.64.0.0/24",
        "export_path": "/exports/tenants/alpha",
        "storage_quota_gib": pools.default_storage_quota_gib,
        "dedicated_partitions": [],
        "in_use": 48,
        "in_quota": 40,
        "borrowed": 8,
        "pending_demand": 16,
        "created_at": rows["alpha"]["created_at"],
        "updated_at": rows["alpha"]["updated_at"],
    }
    beta = rows["beta"]
    assert (beta["in_use"], beta["in_quota"], beta["borrowed"], beta["pending_demand"]) == (8, 8, 0, 12)
    assert beta["limit_gpus"] is None


def test_department_without_jobs_counts_zero(workload, staff):
    make_department("Gamma", guaranteed_gpus=4)
    row = staff.get(f"{DEPARTMENTS}gamma/").json()
    assert (row["in_use"], row["in_quota"], row["borrowed"], row["pending_demand"]) == (0, 0, 0, 0)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_department_detail_by_slug_lists_dedicated_partitions(workload, staff, department_a):
    partition = NVLinkPartition.objects.get(rack__name="gb-r02", clique_id=2)
    dedicate_partition(department_a, partition)
    body = staff.get(f"{DEPARTMENTS}alpha/").json()
    assert body["dedicated_partitions"] == [
        {"partition_id": partition.pk, "rack": "gb-r02", "name": "p2", "clique_id": 2, "gpus": 36}
    ]
    assert staff.get(f"{DEPARTMENTS}nope/").status_code == 404


def test_department_filters(workload, staff):
    assert [r["slug"] for r in results(staff.get(DEPARTMENTS, {"name": "lph"}))] == ["alpha"]
    assert [r["slug"] for r in results(staff.get(DEPARTMENTS, {"has_limit": "true"}))] == ["alpha"]
    assert [r["slug"] for r in results(staff.get(DEPARTMENTS, {"has_limit": "false"}))] == ["beta"]
    assert [r["slug"] for r in results(staff.get(DEPARTMENTS, {"priority": 2}))] == ["alpha"]


# --- departments: writing through save_department -----------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_create_allocates_isolation_when_omitted(workload, staff):
    TenancySettings.objects.filter(pk=1).update(default_storage_quota_gib=2048)
    response = staff.post(
        DEPARTMENTS, {"name": "Gamma", "slug": "gamma", "guaranteed_gpus": 8}, format="json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    pools = TenancySettings.load()
    assert body["vlan_id"] == pools.vlan_first + 2
    assert body["vxlan_vni"] == pools.vni_first + 2
    assert body["ib_pkey"] == pools.pkey_first + 2
    assert body["pkey_hex"] == f"0x{pools.pkey_first + 2:04x}"
    assert body["network_cidr"] == "10.64.2.0/24"
    assert body["export_path"] == "/exports/tenants/gamma"
    assert body["storage_quota_gib"] == 2048
    assert (body["in_use"], body["pending_demand"], body["dedicated_partitions"]) == (0, 0, [])
    assert body["over_quota_weight"] == "1.00" and body["limit_gpus"] is None
    assert Department.objects.get(slug="gamma").guaranteed_gpus == 8


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_create_with_chosen_isolation_values(workload, staff):
    body = {
        "name": "Gamma",
        "slug": "gamma",
        "guaranteed_gpus": 8,
        "over_quota_weight": "0.50",
        "limit_gpus": 16,
        "priority": -1,
        "vlan_id": 3000,
        "vxlan_vni": 70000,
        "ib_pkey": 0x7000,
        "network_cidr": "10.80.0.0/22",
        "export_path": "/exports/tenants/nfs-gamma",
        "storage_quota_gib": 100,
    }
    response = staff.post(DEPARTMENTS, body, format="json")
    assert response.status_code == 201, response.content
    saved = response.json()
    assert {key: saved[key] for key in body} == body
    assert saved["pkey_hex"] == "0x7000"


@pytest.mark.slow(reason="11 cases, each a full request through the stack")
@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"guaranteed_gpus": 100_000}, "guaranteed_gpus", "schedulable healthy GPUs exist"),
        (
            {"guaranteed_gpus": 8, "limit_gpus": 4},
            "limit_gpus",
            "the limit (4) may not be below the guarantee",
        ),
        ({"vlan_id": "alpha"}, "vlan_id", "is already assigned to Alpha"),
        ({"vlan_id": 5000}, "vlan_id", "VLAN ID 5000 is outside 1-4094"),
        ({"ib_pkey": "alpha"}, "ib_pkey", "is already assigned to Alpha"),
        ({"network_cidr": "10.64.0.0/20"}, "network_cidr", "overlaps Alpha's network"),
        ({"network_cidr": "not-a-network"}, "network_cidr", "not a network address"),
        ({"export_path": "/exports/tenants/alpha/gamma"}, "export_path", "overlaps Alpha's export"),
        ({"over_quota_weight": "-1"}, "over_quota_weight", ""),
        ({"name": "Alpha"}, "name", ""),
        ({"slug": "not a slug"}, "slug", ""),
    ],
)
def test_create_refusals_are_400_naming_the_field(workload, staff, department_a, body, field, message):
    alpha = department_a
    payload = {"name": "Gamma", "slug": "gamma", "guaranteed_gpus": 0}
    payload.update({key: getattr(alpha, key) if value == "alpha" else value for key, value in body.items()})
    response = staff.post(DEPARTMENTS, payload, format="json")
    assert response.status_code == 400, response.content
    errors = response.json()
    assert field in errors, errors
    assert message in " ".join(errors[field])
    assert not Department.objects.filter(slug="gamma").exists()


def test_the_shortfall_message_gives_the_numbers(workload, staff):
    capacity = schedulable_gpus()
    response = staff.post(
        DEPARTMENTS, {"name": "Gamma", "slug": "gamma", "guaranteed_gpus": capacity - 50}, format="json"
    )
    assert response.status_code == 400
    (message,) = response.json()["guaranteed_gpus"]
    assert message == (
        f"guarantees would total {capacity + 10} GPUs but only {capacity} schedulable healthy GPUs exist: "
        "10 short (60 already guaranteed to other departments)"
    )


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_update_goes_through_the_service(workload, staff, department_a):
    url = f"{DEPARTMENTS}beta/"
    response = staff.patch(url, {"guaranteed_gpus": 24, "limit_gpus": 48}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["guaranteed_gpus"], body["limit_gpus"]) == (24, 48)
    assert (body["in_use"], body["pending_demand"]) == (8, 12)  # the response carries the usage figures

    response = staff.patch(url, {"limit_gpus": 10}, format="json")
    assert response.status_code == 400
    assert "may not be below the guarantee (24)" in response.json()["limit_gpus"][0]

    alpha = department_a
    response = staff.patch(url, {"vxlan_vni": alpha.vxlan_vni}, format="json")
    assert response.status_code == 400
    assert "already assigned to Alpha" in response.json()["vxlan_vni"][0]

    response = staff.patch(url, {"vlan_id": 777, "network_cidr": "10.65.0.0/24"}, format="json")
    assert response.status_code == 200
    beta = Department.objects.get(slug="beta")
    assert (beta.vlan_id, beta.network_cidr, beta.guaranteed_gpus, beta.limit_gpus) == (
        777,
        "10.65.0.0/24",
        24,
        48,
    )


def test_put_replaces_the_quota_fields(workload, staff, department_b):
    beta = department_b
    body = {
        "name": "Beta Team",
        "slug": "beta",
        "guaranteed_gpus": 12,
        "over_quota_weight": "3.00",
        "limit_gpus": None,
        "priority": 4,
    }
    response = staff.put(f"{DEPARTMENTS}beta/", body, format="json")
    assert response.status_code == 200, response.content
    beta_after = Department.objects.get(pk=beta.pk)
    assert (
        beta_after.name,
        beta_after.guaranteed_gpus,
        beta_after.over_quota_weight,
        beta_after.priority,
    ) == (
        "Beta Team",
        12,
        Decimal("3.00"),
        4,
    )
    assert beta_after.vlan_id == beta.vlan_id  # isolation values left out stay as they were


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_lowering_a_guarantee_is_allowed_when_capacity_shrank(workload, staff):
    from inventory.models import ComputeTray

    response = staff.patch(
        f"{DEPARTMENTS}alpha/",
        {"guaranteed_gpus": schedulable_gpus() - 20, "limit_gpus": None},
        format="json",
    )
    assert response.status_code == 200, response.content
    ComputeTray.objects.filter(rack__name="gb-r03").update(state="down", state_reason="power")
    assert staff.patch(f"{DEPARTMENTS}beta/", {"guaranteed_gpus": 21}, format="json").status_code == 400
    assert staff.patch(f"{DEPARTMENTS}beta/", {"guaranteed_gpus": 10}, format="json").status_code == 200


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_delete_a_department_without_jobs_and_refuse_one_with_jobs(workload, staff):
    make_department("Gamma")
    assert staff.delete(f"{DEPARTMENTS}gamma/").status_code == 204
    assert not Department.objects.filter(slug="gamma").exists()

    response = staff.delete(f"{DEPARTMENTS}alpha/")
    assert response.status_code == 409
    assert "Alpha still has 4 jobs on record" in response.json()["detail"]
    assert Department.objects.filter(slug="alpha").exists()


# --- fair-share position ------------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_quota_is_the_fair_share_position_from_the_database(workload, staff):
    capacity = schedulable_gpus()
    body = staff.get(f"{DEPARTMENTS}alpha/quota/").json()
    expected = fair_share(
        capacity,
        [
            DepartmentQuota("alpha", 40, weight=2.0, limit=96, priority=2, demand=64, allocated=48),
            DepartmentQuota("beta", 20, weight=1.0, limit=None, priority=0, demand=20, allocated=8),
        ],
    ).shares
    assert body == {
        "department": "alpha",
        "capacity": capacity,
        "guaranteed": 40,
        "limit": 96,
        "in_use": 48,
        "in_quota": 40,
        "borrowed": 8,
        "pending_demand": 16,
        "fair_share": expected["alpha"].fair_share,
        "entitled_in_quota": expected["alpha"].in_quota,
        "entitled_over_quota": expected["alpha"].over_quota,
        "reclaimable": 0,
        "starved": 0,
        "slices": 0,  # no slice job (tests/scheduling/test_slice_jobs.py counts them)
        "slice_gpu_equivalents": 0.0,
        "in_use_gpu_equivalents": 48.0,
    }
    # Enough capacity: Alpha gets all it asks for, 40 in quota and 24 borrowed.
    assert (body["fair_share"], body["entitled_in_quota"], body["entitled_over_quota"]) == (64, 40, 24)

    beta = staff.get(f"{DEPARTMENTS}beta/quota/").json()
    # Beta asks for 20 (8 running, 12 pending) within its guarantee of 20 but holds 8: owed 12.
    assert (beta["fair_share"], beta["entitled_in_quota"], beta["starved"], beta["reclaimable"]) == (
        20,
        20,
        12,
        0,
    )


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_quota_shows_what_can_be_reclaimed_when_capacity_is_short(workload, staff):
    # Alpha borrows while Beta waits; then the fleet shrinks to 56 schedulable GPUs.
    from inventory.models import ComputeTray

    keep = list(
        ComputeTray.objects.filter(state="up")
        .order_by("rack__name", "slot")
        .values_list("pk", flat=True)[:14]
    )
    ComputeTray.objects.exclude(pk__in=keep).update(state="down", state_reason="maintenance window")
    capacity = schedulable_gpus()
    assert capacity <= 56
    alpha = staff.get(f"{DEPARTMENTS}alpha/quota/").json()
    beta = staff.get(f"{DEPARTMENTS}beta/quota/").json()
    assert alpha["capacity"] == beta["capacity"] == capacity
    assert alpha["fair_share"] + beta["fair_share"] <= capacity
    assert alpha["reclaimable"] == 48 - alpha["fair_share"] > 0
    assert beta["starved"] == beta["entitled_in_quota"] - 8 > 0


# --- members ------------------------------------------------------------------------------------------------


def members_url(slug, username=None):
    return f"{DEPARTMENTS}{slug}/members/" + (f"{username}/" if username else "")


@pytest.fixture
def lead_api(workload, lead_a):
    return token_client(lead_a)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_lead_lists_adds_changes_and_removes_members(lead_api, department_a):
    make_user("newbie")
    rows = results(lead_api.get(members_url("alpha")))
    assert rows == [
        {"username": "lead-a", "department": "alpha", "role": "lead", "created_at": rows[0]["created_at"]}
    ]

    response = lead_api.post(members_url("alpha"), {"username": "newbie"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["role"] == "member"
    # Adding an existing member again sets the role: 200, not a duplicate.
    response = lead_api.post(members_url("alpha"), {"username": "newbie", "role": "lead"}, format="json")
    assert response.status_code == 200
    assert response.json()["role"] == "lead"

    response = lead_api.patch(members_url("alpha", "newbie"), {"role": "member"}, format="json")
    assert response.status_code == 200
    assert Membership.objects.get(user__username="newbie", department=department_a).role == Role.MEMBER
    response = lead_api.put(members_url("alpha", "newbie"), {"role": "lead"}, format="json")
    assert response.status_code == 200 and response.json()["role"] == "lead"

    assert lead_api.get(members_url("alpha", "newbie")).json()["role"] == "lead"
    assert [r["username"] for r in results(lead_api.get(members_url("alpha"), {"role": "lead"}))] == [
        "lead-a",
        "newbie",
    ]

    assert lead_api.delete(members_url("alpha", "newbie")).status_code == 204
    assert not Membership.objects.filter(user__username="newbie").exists()


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_member_refusals(lead_api):
    response = lead_api.post(members_url("alpha"), {"username": "ghost"}, format="json")
    assert response.status_code == 400
    assert "no user named 'ghost'" in response.json()["username"][0]
    response = lead_api.post(members_url("alpha"), {"username": "member-b", "role": "owner"}, format="json")
    assert response.status_code == 400 and "role" in response.json()
    response = lead_api.patch(members_url("alpha", "member-b"), {"role": "lead"}, format="json")
    assert response.status_code == 404  # not a member of Alpha: add with POST
    # The last lead can neither be demoted nor removed (not even by themselves).
    response = lead_api.patch(members_url("alpha", "lead-a"), {"role": "member"}, format="json")
    assert response.status_code == 400
    assert "lead-a is the only lead of Alpha" in response.json()["role"][0]
    response = lead_api.delete(members_url("alpha", "lead-a"))
    assert response.status_code == 400
    assert "lead-a is the only lead of Alpha" in response.json()["non_field_errors"][0]
    assert Membership.objects.filter(user__username="lead-a").exists()


# --- audit events -------------------------------------------------------------------------------------------


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_audit_events_list_and_filters(workload, staff, department_a, department_b):
    staff.patch(f"{DEPARTMENTS}alpha/", {"guaranteed_gpus": 44}, format="json")
    staff.patch(f"{DEPARTMENTS}beta/", {"priority": 7}, format="json")

    rows = results(staff.get("/api/v1/audit-events/", {"source": "api"}))
    assert [(r["object_repr"], r["action"]) for r in rows] == [("Beta", "update"), ("Alpha", "update")]
    latest = rows[1]
    assert latest["actor"] == "platform-admin"
    assert latest["department"] == "alpha"
    assert latest["department_id"] == department_a.pk
    assert latest["object_type"] == "tenancy.department"
    assert latest["object_id"] == str(department_a.pk)
    assert (latest["before"], latest["after"]) == ({"guaranteed_gpus": 40}, {"guaranteed_gpus": 44})

    def reprs(**params):
        return [r["object_repr"] for r in results(staff.get("/api/v1/audit-events/", params))]

    assert reprs(source="api", department="beta") == ["Beta"]
    assert reprs(source="api", actor="PLATFORM-ADMIN") == ["Beta", "Alpha"]
    assert reprs(source="api", actor="lead-a") == []
    assert reprs(action="update", object_type="tenancy.department") == ["Beta", "Alpha"]
    assert "Alpha" in reprs(action="create", object_type="tenancy.department")
    assert reprs(source="api", department_id=department_b.pk) == ["Beta"]
    assert reprs(source="api", object="alp") == ["Alpha"]
    assert len(reprs(source=["api", "command"])) > 2
    today = AuditEvent.objects.first().at.date().isoformat()
    assert reprs(source="api", date_after=today, date_before=today) == ["Beta", "Alpha"]
    assert reprs(source="api", date_before="2000-01-01") == []
    assert reprs(source="api", since=AuditEvent.objects.filter(source="api").last().at.isoformat()) == [
        "Beta",
        "Alpha",
    ]
    assert staff.get("/api/v1/audit-events/", {"source": "carrier-pigeon"}).status_code == 400
    assert staff.get("/api/v1/audit-events/", {"department": "nope"}).status_code == 400

    event = AuditEvent.objects.filter(source="api").last()
    assert staff.get(f"/api/v1/audit-events/{event.pk}/").json()["id"] == event.pk
    assert staff.post("/api/v1/audit-events/", {}).status_code == 405
    assert staff.delete(f"/api/v1/audit-events/{event.pk}/").status_code == 405


def test_audit_event_of_a_deleted_department_keeps_its_id(workload, staff):
    make_department("Gamma")
    gamma_id = Department.objects.get(slug="gamma").pk
    staff.delete(f"{DEPARTMENTS}gamma/")
    rows = results(staff.get("/api/v1/audit-events/", {"department_id": gamma_id}))
    # The department's, and its default project's (made with it, deleted with it).
    assert [(r["object_type"], r["action"]) for r in rows] == [
        ("tenancy.department", "delete"),
        ("tenancy.project", "delete"),
        ("tenancy.project", "create"),
        ("tenancy.department", "create"),
    ]
    assert all(r["department"] is None for r in rows)
    assert rows[0]["after"] is None and rows[0]["before"]["slug"] == "gamma"


# --- query counts -------------------------------------------------------------------------------------------


def queries_for(client, url, params) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, params)
    assert response.status_code == 200, response.content
    return len(captured), len(response.json()["results"])


def grow(extra: int, lead_a, alpha):
    """More departments with jobs, dedicated partitions, members and audit events; `lead_a` is a member of
    each and Alpha gets `extra` more members."""
    partitions = iter(NVLinkPartition.objects.filter(rack__name="gb-r02").order_by("clique_id"))
    for number in range(extra):
        dept = make_department(f"Extra{number}", guaranteed_gpus=36 if number < 2 else 1)
        job(dept, 4)
        job(dept, 4, JobState.PENDING)
        if number < 2:
            dedicate_partition(dept, next(partitions))
        Membership.objects.create(user=lead_a, department=dept, role=Role.MEMBER)
    for number in range(extra):
        make_member(f"extra-member-{number}", alpha)


@pytest.mark.slow(reason="grows the data to compare query counts")
@pytest.mark.parametrize(
    ("url", "params"),
    [
        (DEPARTMENTS, {}),
        ("/api/v1/audit-events/", {}),
        ("/api/v1/audit-events/", {"source": "command", "department": "alpha"}),
        (members_url("alpha"), {}),
    ],
    ids=["departments", "audit-events", "audit-events-filtered", "members"],
)
def test_list_query_count_does_not_grow_with_rows_or_page_size(
    workload, staff, lead_a, department_a, url, params
):
    measured = {}
    for page_size in (2, 100):
        measured[("small", page_size)] = queries_for(staff, url, {**params, "page_size": page_size})
    grow(6, lead_a, department_a)
    for page_size in (2, 100):
        measured[("large", page_size)] = queries_for(staff, url, {**params, "page_size": page_size})
    counts = {key: queries for key, (queries, _) in measured.items()}
    assert len(set(counts.values())) == 1, counts
    rows = {key: n for key, (_, n) in measured.items()}
    assert rows[("small", 100)] < rows[("large", 100)], rows


@pytest.mark.slow(reason="grows the data to compare query counts")
def test_lead_list_query_counts_are_constant_too(lead_api, lead_a, department_a):
    before = queries_for(lead_api, DEPARTMENTS, {})
    audit_before = queries_for(lead_api, "/api/v1/audit-events/", {})
    grow(4, lead_a, department_a)
    after = queries_for(lead_api, DEPARTMENTS, {})
    audit_after = queries_for(lead_api, "/api/v1/audit-events/", {})
    assert before[0] == after[0] and before[1] < after[1]
    assert audit_before[0] == audit_after[0]


# --- schema -------------------------------------------------------------------------------------------------


@pytest.mark.slow(reason="generates the whole OpenAPI schema")
def test_schema_describes_the_tenancy_and_audit_api(workload, client_as, platform_admin):
    client = client_as(platform_admin)
    schema = yaml.safe_load(client.get("/api/schema/").content)
    for path in [
        "/api/v1/departments/",
        "/api/v1/departments/{slug}/",
        "/api/v1/departments/{slug}/quota/",
        "/api/v1/departments/{department_slug}/members/",
        "/api/v1/departments/{department_slug}/members/{username}/",
        "/api/v1/audit-events/",
        "/api/v1/audit-events/{id}/",
    ]:
        assert path in schema["paths"], path
    department = schema["components"]["schemas"]["Department"]["properties"]
    for name in ("in_use", "in_quota", "borrowed", "pending_demand", "pkey_hex", "dedicated_partitions"):
        assert department[name]["readOnly"], name
    assert department["in_use"]["type"] == "integer"
    assert "vlan_id" not in schema["components"]["schemas"]["Department"].get("required", [])
    audit_params = {p["name"] for p in schema["paths"]["/api/v1/audit-events/"]["get"]["parameters"]}
    assert {
        "object_type",
        "action",
        "source",
        "actor",
        "department",
        "date_after",
        "date_before",
    } <= audit_params
