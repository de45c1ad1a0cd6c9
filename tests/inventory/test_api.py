"""The read API under /api/v1/: authentication, content, filters, pagination and query counts."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token

from core.hardware import DEFAULT_CLIQUE_ID
from inventory.choices import GpuHealth, TrayState
from inventory.demo import seed_datacenter
from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack

pytestmark = pytest.mark.django_db

LISTS = ["/api/v1/racks/", "/api/v1/trays/", "/api/v1/gpus/", "/api/v1/partitions/"]


@pytest.fixture
def client(api_client, user):
    api_client.force_login(user)
    return api_client


def results(response):
    assert response.status_code == 200, response.content
    return response.json()["results"]


def everything(client, url, **params):
    """All rows of a list endpoint in one page."""
    return results(client.get(url, {"page_size": 1000, **params}))


# --- authentication ---------------------------------------------------------------------------------


def detail_urls():
    tray = ComputeTray.objects.first()
    return [
        "/api/v1/racks/gb-r01/",
        f"/api/v1/trays/{tray.pk}/",
        f"/api/v1/gpus/{Gpu.objects.first().pk}/",
        f"/api/v1/partitions/{tray.partition_id}/",
    ]


def test_anonymous_is_refused_everywhere_in_json_without_a_redirect(demo_inventory, api_client):
    for url in ["/api/v1/", *LISTS, *detail_urls(), "/api/v1/racks/no-such-rack/"]:
        response = api_client.get(url)
        assert response.status_code in (401, 403), url
        assert response["Content-Type"] == "application/json", url
        assert "Location" not in response, url
        assert response.json()["detail"], url


def test_session_login_works(demo_inventory, api_client, user):
    assert api_client.login(username="operator", password="operator-password-1")
    response = api_client.get("/api/v1/racks/")
    assert response.status_code == 200
    assert response.json()["count"] == 3


def test_token_auth_works_and_a_wrong_token_is_refused(demo_inventory, api_client, user):
    token = Token.objects.create(user=user)
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    for url in LISTS:
        assert api_client.get(url).status_code == 200, url

    api_client.credentials(HTTP_AUTHORIZATION="Token 0000000000000000000000000000000000000000")
    response = api_client.get("/api/v1/racks/")
    assert response.status_code in (401, 403)
    assert response.json()["detail"] == "Invalid token."


def test_the_api_is_read_only(demo_inventory, client):
    assert client.post("/api/v1/racks/", {"name": "gb-r99"}).status_code == 405
    assert client.delete("/api/v1/racks/gb-r01/").status_code == 405
    assert Rack.objects.filter(name="gb-r01").exists()


def test_api_root_lists_the_endpoints(client):
    body = client.get("/api/v1/").json()
    assert set(body) >= {"racks", "trays", "gpus", "partitions"}


# --- racks ------------------------------------------------------------------------------------------


def test_rack_list_carries_summary_counts(demo_inventory, client):
    rows = {row["name"]: row for row in everything(client, "/api/v1/racks/")}
    assert list(rows) == ["gb-r01", "gb-r02", "gb-r03"]
    for name, row in rows.items():
        rack = Rack.objects.get(name=name)
        assert row["cluster_uuid"] == str(rack.cluster_uuid)
        assert row["system_model"] == "gb200_nvl72"
        assert row["location"] == rack.location
        assert row["trays"] == 18
        assert row["gpus"] == 72
        assert row["healthy_gpus"] == Gpu.objects.filter(tray__rack=rack, health=GpuHealth.HEALTHY).count()
        assert row["healthy_gpus"] <= 72
    assert rows["gb-r01"]["partitions"] == 1
    assert rows["gb-r02"]["partitions"] == 2
    assert sum(72 - row["healthy_gpus"] for row in rows.values()) >= 3  # the seed degrades a few GPUs


def test_an_empty_rack_counts_zero(demo_inventory, client):
    Rack.objects.create(name="gb-r99")
    row = client.get("/api/v1/racks/gb-r99/").json()
    assert (row["trays"], row["gpus"], row["healthy_gpus"], row["partitions"]) == (0, 0, 0, 0)


def test_rack_detail_is_looked_up_by_name_and_unknown_is_404(demo_inventory, client):
    response = client.get("/api/v1/racks/gb-r02/")
    assert response.status_code == 200
    assert response.json()["name"] == "gb-r02"
    assert response.json()["partitions"] == 2
    missing = client.get("/api/v1/racks/gb-r42/")
    assert missing.status_code == 404
    assert missing["Content-Type"] == "application/json"


def test_rack_filters(demo_inventory, client):
    assert [r["name"] for r in everything(client, "/api/v1/racks/", name="r02")] == ["gb-r02"]
    assert len(everything(client, "/api/v1/racks/", system_model="gb200_nvl72")) == 3
    assert everything(client, "/api/v1/racks/", system_model="gb300_nvl72") == []

    # has_problems: a tray reporting fabric problems or a GPU that is not healthy.
    with_problems = {
        rack.name
        for rack in Rack.objects.all()
        if rack.trays.exclude(fabric_problems=[]).exists()
        or Gpu.objects.filter(tray__rack=rack)
        .exclude(health__in=[GpuHealth.HEALTHY, GpuHealth.NOT_SUPPORTED])
        .exists()
    }
    assert "gb-r03" in with_problems  # one of its GPUs is still registering with the fabric
    assert {r["name"] for r in everything(client, "/api/v1/racks/", has_problems="true")} == with_problems
    assert {r["name"] for r in everything(client, "/api/v1/racks/", has_problems="false")} == {
        "gb-r01",
        "gb-r02",
        "gb-r03",
    } - with_problems


# --- trays ------------------------------------------------------------------------------------------


def test_tray_list_content(demo_inventory, client):
    rows = everything(client, "/api/v1/trays/")
    assert len(rows) == 54
    first = rows[0]
    tray = ComputeTray.objects.get(hostname="gb-r01-t01")
    assert first == {
        "id": tray.pk,
        "hostname": "gb-r01-t01",
        "rack": "gb-r01",
        "slot": 1,
        "state": "up",
        "state_reason": "",
        "ib_port_guids": tray.ib_port_guids,
        "partition": {"id": tray.partition_id, "name": "default", "clique_id": DEFAULT_CLIQUE_ID},
        "reported_clique": f"{tray.rack.cluster_uuid}.{DEFAULT_CLIQUE_ID}",
        "fabric_problems": [],
        "last_report_at": first["last_report_at"],
        "stale": False,
        "silent_for_s": None,
        "holds_new_work": False,
        "mig_layout": "",
        "mig_layout_devices": {},
    }
    assert first["last_report_at"]
    assert len(first["ib_port_guids"]) == 4


def test_tray_without_a_partition_shows_null(demo_inventory, client):
    tray = ComputeTray.objects.get(hostname="gb-r01-t03")
    tray.partition = None
    tray.save()
    assert client.get(f"/api/v1/trays/{tray.pk}/").json()["partition"] is None


def test_tray_filters(demo_inventory, client):
    def hostnames(**params):
        return [row["hostname"] for row in everything(client, "/api/v1/trays/", **params)]

    assert len(hostnames(rack="gb-r02")) == 18
    assert all(h.startswith("gb-r02-") for h in hostnames(rack="gb-r02"))

    drained = everything(client, "/api/v1/trays/", state=TrayState.DRAIN)
    assert [row["hostname"] for row in drained] == ["gb-r01-t07"]
    assert "XID 79" in drained[0]["state_reason"]
    assert len(hostnames(state=[TrayState.UP, TrayState.DRAIN])) == 54
    assert len(hostnames(state=TrayState.UP)) == 53

    assert hostnames(clique_id=1) == [f"gb-r02-t{slot:02d}" for slot in range(1, 10)]
    assert hostnames(clique_id=2) == [f"gb-r02-t{slot:02d}" for slot in range(10, 19)]
    assert len(hostnames(clique_id=DEFAULT_CLIQUE_ID)) == 36

    problems = everything(client, "/api/v1/trays/", has_problems="true")
    assert [row["hostname"] for row in problems] == ["gb-r03-t05"]
    assert "registration" in problems[0]["fabric_problems"][0]
    assert len(hostnames(has_problems="false")) == 53
    assert hostnames(hostname="r03-t05") == ["gb-r03-t05"]


def test_tray_detail_and_404(demo_inventory, client):
    tray = ComputeTray.objects.get(hostname="gb-r02-t10")
    body = client.get(f"/api/v1/trays/{tray.pk}/").json()
    assert body["hostname"] == "gb-r02-t10"
    assert body["partition"] == {"id": tray.partition_id, "name": "p2", "clique_id": 2}
    assert client.get("/api/v1/trays/999999/").status_code == 404


def test_invalid_filter_value_is_a_400(demo_inventory, client):
    response = client.get("/api/v1/trays/", {"state": "exploded"})
    assert response.status_code == 400
    assert "state" in response.json()


# --- GPUs -------------------------------------------------------------------------------------------


def test_gpu_list_content(demo_inventory, client):
    rows = everything(client, "/api/v1/gpus/")
    assert len(rows) == 216
    gpu = Gpu.objects.get(tray__hostname="gb-r02-t10", index=3)
    row = next(r for r in rows if r["uuid"] == gpu.uuid)
    assert row == {
        "id": gpu.pk,
        "uuid": gpu.uuid,
        "rack": "gb-r02",
        "tray": "gb-r02-t10",
        "index": 3,
        "serial": gpu.serial,
        "product": "NVIDIA GB200",
        "memory_mib": 189471,
        "health": gpu.health,
        "fabric_state": "completed",
        "fabric_status": "Success",
        "reported_cluster_uuid": str(gpu.tray.rack.cluster_uuid),
        "reported_clique_id": 2,
        "intended_clique_id": 2,
        "drift": False,
        "mig_mode": "disabled",
        "mig_pending": "disabled",
        "mig": None,
        "last_report_at": row["last_report_at"],
    }
    assert not any(r["drift"] for r in rows)


def test_gpu_reporting_another_clique_drifts(demo_inventory, client):
    gpu = Gpu.objects.get(tray__hostname="gb-r01-t02", index=0)
    Gpu.objects.filter(pk=gpu.pk).update(reported_clique_id=7)

    body = client.get(f"/api/v1/gpus/{gpu.pk}/").json()
    assert (body["reported_clique_id"], body["intended_clique_id"], body["drift"]) == (
        7,
        DEFAULT_CLIQUE_ID,
        True,
    )
    drifted = [row["uuid"] for row in everything(client, "/api/v1/gpus/") if row["drift"]]
    assert drifted == [gpu.uuid]


def test_gpu_drift_when_its_tray_leaves_the_partition_but_not_before_a_report(demo_inventory, client):
    tray = ComputeTray.objects.get(hostname="gb-r01-t03")
    tray.partition = None
    tray.save()
    rows = everything(client, "/api/v1/gpus/", tray="gb-r01-t03")
    assert [(r["intended_clique_id"], r["drift"]) for r in rows] == [(None, True)] * 4

    Gpu.objects.filter(tray=tray).update(reported_clique_id=None, reported_cluster_uuid=None)
    rows = everything(client, "/api/v1/gpus/", tray="gb-r01-t03")
    assert [r["drift"] for r in rows] == [False] * 4


def test_gpu_removed_from_its_tray_has_no_rack_tray_or_intent(demo_inventory, client):
    gpu = Gpu.objects.get(tray__hostname="gb-r01-t01", index=0)
    Gpu.objects.filter(pk=gpu.pk).update(tray=None, index=None)
    body = client.get(f"/api/v1/gpus/{gpu.pk}/").json()
    assert (body["rack"], body["tray"], body["index"], body["intended_clique_id"], body["drift"]) == (
        None,
        None,
        None,
        None,
        False,
    )
    assert len(everything(client, "/api/v1/gpus/")) == 216


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_gpu_filters(demo_inventory, client):
    def uuids(**params):
        return {row["uuid"] for row in everything(client, "/api/v1/gpus/", **params)}

    assert uuids(rack="gb-r03") == set(
        Gpu.objects.filter(tray__rack__name="gb-r03").values_list("uuid", flat=True)
    )
    assert len(uuids(rack="gb-r03")) == 72
    assert len(uuids(tray="gb-r02-t01")) == 4

    healthy = set(Gpu.objects.filter(health=GpuHealth.HEALTHY).values_list("uuid", flat=True))
    assert uuids(health=GpuHealth.HEALTHY) == healthy
    degraded = uuids(health=[GpuHealth.UNHEALTHY, GpuHealth.LIMITED_CAPACITY])
    assert degraded and degraded.isdisjoint(healthy)
    assert len(degraded) + len(healthy) == 216

    assert len(uuids(fabric_state="in_progress")) == 1
    assert len(uuids(clique_id=1)) == 36
    assert len(uuids(intended_clique_id=2)) == 36
    assert len(uuids(clique_id=DEFAULT_CLIQUE_ID)) == 144

    gpu = Gpu.objects.get(tray__hostname="gb-r01-t01", index=2)
    assert uuids(uuid=gpu.uuid) == {gpu.uuid}


def test_gpu_detail_404(demo_inventory, client):
    assert client.get("/api/v1/gpus/999999/").status_code == 404


# --- partitions -------------------------------------------------------------------------------------


def test_partition_list_content(demo_inventory, client):
    rows = everything(client, "/api/v1/partitions/")
    assert [(r["rack"], r["name"], r["clique_id"], r["is_default"]) for r in rows] == [
        ("gb-r01", "default", DEFAULT_CLIQUE_ID, True),
        ("gb-r02", "p1", 1, False),
        ("gb-r02", "p2", 2, False),
        ("gb-r03", "default", DEFAULT_CLIQUE_ID, True),
    ]
    p2 = rows[2]
    assert p2["tray_count"] == 9
    assert p2["trays"] == [f"gb-r02-t{slot:02d}" for slot in range(10, 19)]
    assert rows[0]["tray_count"] == len(rows[0]["trays"]) == 18


def test_partition_filters_detail_and_404(demo_inventory, client):
    rows = everything(client, "/api/v1/partitions/", rack="gb-r02")
    assert [r["name"] for r in rows] == ["p1", "p2"]
    assert [r["rack"] for r in everything(client, "/api/v1/partitions/", clique_id=DEFAULT_CLIQUE_ID)] == [
        "gb-r01",
        "gb-r03",
    ]
    assert [r["name"] for r in everything(client, "/api/v1/partitions/", rack="gb-r02", clique_id=1)] == [
        "p1"
    ]
    assert [r["rack"] for r in everything(client, "/api/v1/partitions/", name="p2")] == ["gb-r02"]

    partition = NVLinkPartition.objects.get(rack__name="gb-r02", clique_id=1)
    body = client.get(f"/api/v1/partitions/{partition.pk}/").json()
    assert body["trays"] == [f"gb-r02-t{slot:02d}" for slot in range(1, 10)]
    assert body["tray_count"] == 9
    assert client.get("/api/v1/partitions/999999/").status_code == 404


def test_an_empty_partition_has_no_trays(demo_inventory, client):
    rack = Rack.objects.create(name="gb-r99")
    partition = NVLinkPartition.objects.create(rack=rack, clique_id=5, name="spare")
    body = client.get(f"/api/v1/partitions/{partition.pk}/").json()
    assert (body["tray_count"], body["trays"]) == (0, [])


# --- pagination -------------------------------------------------------------------------------------


def test_pagination_count_next_previous_and_page_size(demo_inventory, client):
    # Page numbers when asked for (the GPU list pages by cursor by default: test_api_cursor.py).
    first = client.get("/api/v1/gpus/", {"page": 1, "page_size": 50}).json()
    assert first["count"] == 216
    assert len(first["results"]) == 50
    assert first["previous"] is None
    assert "page=2" in first["next"] and "page_size=50" in first["next"]

    last = client.get(first["next"].replace("page=2", "page=5")).json()
    assert len(last["results"]) == 16
    assert last["next"] is None

    seen = set()
    url = "/api/v1/gpus/?page_size=100"
    while url:
        page = client.get(url).json()
        seen.update(row["uuid"] for row in page["results"])
        url = page["next"]
    assert len(seen) == 216

    assert client.get("/api/v1/gpus/", {"page": 99}).status_code == 404


def test_default_page_size_and_filters_keep_count_and_next(demo_inventory, client):
    body = client.get("/api/v1/gpus/", {"page": 1}).json()
    assert (body["count"], len(body["results"])) == (216, 100)
    body = client.get("/api/v1/gpus/").json()  # by cursor: no count
    assert ("count" in body, len(body["results"])) == (False, 100)

    body = client.get("/api/v1/trays/", {"rack": "gb-r02", "page_size": 5, "page": 1}).json()
    assert body["count"] == 18
    assert "rack=gb-r02" in body["next"]
    body = client.get("/api/v1/trays/", {"rack": "gb-r02", "page_size": 5}).json()  # by cursor
    assert "count" not in body and "rack=gb-r02" in body["next"] and "cursor=" in body["next"]
    assert [row["hostname"] for row in body["results"]] == [f"gb-r02-t{slot:02d}" for slot in range(1, 6)]

    body = client.get("/api/v1/racks/", {"page_size": 2}).json()
    assert body["count"] == 3
    assert [r["name"] for r in body["results"]] == ["gb-r01", "gb-r02"]
    assert body["next"]


# --- query counts -----------------------------------------------------------------------------------

# Session + user (authentication), COUNT(*) for the paginator, the page itself; the partitions page adds
# one prefetch of its trays. Never one query per row. The GPU list pages by cursor: no COUNT(*).
EXPECTED_QUERIES = {
    "/api/v1/racks/": 4,
    "/api/v1/trays/": 4,  # + the node silent policy (stale), once per page; by cursor: no COUNT(*)
    "/api/v1/gpus/": 3,
    "/api/v1/partitions/": 5,
}


def queries_for(client, url, page_size):
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, {"page_size": page_size})
    assert response.status_code == 200
    return len(captured), len(response.json()["results"])


def wipe_inventory():
    Gpu.objects.all().delete()
    ComputeTray.objects.all().delete()
    NVLinkPartition.objects.all().delete()
    Rack.objects.all().delete()


@pytest.mark.slow(reason="grows the data to compare query counts")
@pytest.mark.parametrize("url", LISTS)
def test_list_query_count_does_not_grow_with_rows_or_page_size(
    url, demo_inventory, client, django_assert_num_queries
):
    expected = EXPECTED_QUERIES[url]
    measured = {}
    for page_size in (10, 200):
        measured[(3, page_size)] = queries_for(client, url, page_size)

    wipe_inventory()
    seed_datacenter(racks=6)
    for page_size in (10, 200):
        measured[(6, page_size)] = queries_for(client, url, page_size)
    with django_assert_num_queries(expected):
        client.get(url, {"page_size": 200})

    counts = {key: queries for key, (queries, _rows) in measured.items()}
    assert set(counts.values()) == {expected}, counts
    # The pages really did differ in size: more rows with more racks and a larger page.
    rows = {key: n for key, (_queries, n) in measured.items()}
    assert rows[(3, 10)] < rows[(6, 200)]
    assert rows[(3, 200)] < rows[(6, 200)] or rows[(3, 200)] == 200


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (lambda: "/api/v1/racks/gb-r02/", 3),
        (lambda: f"/api/v1/trays/{ComputeTray.objects.get(hostname='gb-r02-t01').pk}/", 4),  # + stale policy
        (lambda: f"/api/v1/gpus/{Gpu.objects.filter(tray__hostname='gb-r02-t01').first().pk}/", 3),
        # The default partition of a whole rack: 18 trays, still one prefetch.
        (lambda: f"/api/v1/partitions/{NVLinkPartition.objects.get(rack__name='gb-r01').pk}/", 4),
    ],
    ids=["rack", "tray", "gpu", "partition"],
)
def test_detail_query_count_is_constant(url, expected, demo_inventory, client, django_assert_num_queries):
    url = url()
    with django_assert_num_queries(expected):
        assert client.get(url).status_code == 200
