"""The GPU list API's cursor pages (core.pagination.CursorOrPagePagination): the default at 10,000 racks,
where a page-number page counts 720,000 GPUs and skips up to all of them; page numbers still answer."""

import base64
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import pagination
from inventory.demo import seed_datacenter
from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack

pytestmark = pytest.mark.django_db
URL = "/api/v1/gpus/"


@pytest.fixture
def client(api_client, user):
    api_client.force_login(user)
    return api_client


def walk(client, url, params):
    """Every page from the first, following `next`: (pages, rows)."""
    pages, rows = [], []
    response = client.get(url, params)
    while True:
        assert response.status_code == 200, response.content
        body = response.json()
        pages.append(body)
        rows += body["results"]
        if not body["next"]:
            return pages, rows
        response = client.get(body["next"])


def cursor_of(link: str) -> str:
    return parse_qs(urlsplit(link).query)["cursor"][0]


def test_the_default_pages_by_cursor_without_a_count_and_reach_every_gpu_once(demo_inventory, client):
    pages, rows = walk(client, URL, {"page_size": 50})
    assert [len(page["results"]) for page in pages] == [50, 50, 50, 50, 16]
    assert all("count" not in page for page in pages)
    assert all("cursor=" in page["next"] and "page_size=50" in page["next"] for page in pages[:-1])
    ids = [row["id"] for row in rows]
    assert ids == sorted(ids) == sorted(Gpu.objects.values_list("pk", flat=True))
    # Back from the second page: the first again.
    second = client.get(pages[0]["next"]).json()
    assert [row["id"] for row in client.get(second["previous"]).json()["results"]] == ids[:50]
    assert pages[0]["previous"] is None


def test_a_cursor_is_stable_when_rows_before_it_go_or_come(demo_inventory, client):
    """Page numbers shift when a row before the page goes (one GPU is skipped); a cursor does not."""
    first = client.get(URL, {"page_size": 50}).json()
    expected = [row["id"] for row in client.get(first["next"]).json()["results"]]
    Gpu.objects.filter(pk=first["results"][0]["id"]).delete()
    after = [row["id"] for row in client.get(first["next"]).json()["results"]]
    assert after == expected
    numbered = client.get(URL, {"page": 2, "page_size": 50}).json()
    # What a page number does instead: the page starts one GPU later, so that GPU is never listed.
    assert [row["id"] for row in numbered["results"]] == [*expected[1:], numbered["results"][-1]["id"]]


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_page_numbers_still_answer_with_their_count(demo_inventory, client):
    body = client.get(URL, {"page": 1, "page_size": 50}).json()
    assert body["count"] == 216
    assert "page=2" in body["next"]
    assert client.get(body["next"]).json()["count"] == 216


@pytest.mark.slow(reason="2 cases, 1.1 s together on 2 cores, measured: beyond make test-fast's budget")
@pytest.mark.parametrize("sort", ["uuid", "-uuid"])
def test_a_cursor_follows_a_unique_sort(demo_inventory, client, sort):
    pages, rows = walk(client, URL, {"page_size": 40, "sort": sort})
    uuids = [row["uuid"] for row in rows]
    assert len(pages) == 6 and len(set(uuids)) == 216
    assert uuids == sorted(uuids, reverse=sort.startswith("-"))
    assert all("count" not in page for page in pages)


def test_a_sort_that_is_not_unique_pages_by_number(demo_inventory, client):
    body = client.get(URL, {"sort": "health", "page_size": 10}).json()
    assert body["count"] == 216 and "page=2" in body["next"]
    cursor = cursor_of(client.get(URL, {"page_size": 10}).json()["next"])
    response = client.get(URL, {"sort": "health", "cursor": cursor})
    assert response.status_code == 400 and "sort" in response.json()


def test_filters_travel_with_the_cursor(demo_inventory, client):
    pages, rows = walk(client, URL, {"page_size": 10, "rack": "gb-r02"})
    assert len(rows) == 72 and all("rack=gb-r02" in page["next"] for page in pages[:-1])
    assert {row["tray"].split("-t")[0] for row in rows} == {"gb-r02"}


def encoded(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage!",
        "%ED%A0%80",  # a lone surrogate, as UTF-8 bytes
        encoded("p=abc"),
        encoded("p=-1"),
        encoded(f"p={2**70}"),
        encoded("o=-5&p=1"),
        encoded("r=x"),
        "%%%",  # no base64 at all: DRF read it as no cursor (the first page)
        "=",
        "A" * 7000,
        encoded(""),
    ],
)
def test_a_cursor_it_did_not_give_is_a_400_naming_it(demo_inventory, client, cursor):
    before = Gpu.objects.count()
    response = client.get(f"{URL}?cursor={quote(cursor, safe='%')}")
    assert response.status_code == 400, response.content
    assert list(response.json()) == ["cursor"]
    assert Gpu.objects.count() == before


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=40) | st.builds(encoded, st.text(max_size=30)))
def test_any_cursor_text_is_a_page_or_a_400(demo_inventory, client, cursor):
    response = client.get(URL, {"cursor": cursor, "page_size": 5})
    assert response.status_code in (200, 400), (cursor, response.status_code)


def test_a_cursor_for_uuids_refuses_a_position_that_is_no_uuid_text(demo_inventory, client):
    cursor = cursor_of(client.get(URL, {"sort": "uuid", "page_size": 5}).json()["next"])
    assert client.get(URL, {"sort": "uuid", "cursor": cursor}).status_code == 200
    # Ordering by id with a uuid's position: not a number.
    assert client.get(URL, {"cursor": cursor}).status_code == 400


@pytest.mark.slow(reason="grows the data to compare query counts")
def test_a_cursor_page_costs_the_same_queries_at_any_size_and_depth(
    demo_inventory, client, django_assert_max_num_queries
):
    """Session, user, the page: no count, and never one query per row (a per-row query fails here)."""
    for model in (Gpu, ComputeTray, NVLinkPartition, Rack):
        model.objects.all().delete()
    seed_datacenter(racks=6)  # twice the demo's GPUs
    first = client.get(URL, {"page_size": 200}).json()
    for url, params in ((URL, {"page_size": 10}), (URL, {"page_size": 200}), (first["next"], {})):
        with django_assert_max_num_queries(3):
            response = client.get(url, params)
        assert response.status_code == 200 and response.json()["results"]


def test_the_tray_list_pages_by_cursor_on_the_hostname(demo_inventory, client):
    pages, rows = walk(client, "/api/v1/trays/", {"page_size": 20})
    hostnames = [row["hostname"] for row in rows]
    assert len(pages) == 3 and all("count" not in page for page in pages)
    assert hostnames == sorted(hostnames) and len(set(hostnames)) == 54
    numbered = client.get("/api/v1/trays/", {"page": 1, "page_size": 20}).json()
    assert numbered["count"] == 54 and [row["hostname"] for row in numbered["results"]] == hostnames[:20]


@pytest.mark.slow(reason="grows the data to compare query counts")
def test_a_tray_cursor_page_costs_the_same_queries_at_any_size(
    demo_inventory, client, django_assert_max_num_queries
):
    """Session, user, the silent-node policy, the page: never one query per row."""
    for racks in (3, 6):
        if racks == 6:
            for model in (Gpu, ComputeTray, NVLinkPartition, Rack):
                model.objects.all().delete()
            seed_datacenter(racks=6)
        for page_size in (5, 100):
            with django_assert_max_num_queries(4):
                response = client.get("/api/v1/trays/", {"page_size": page_size})
            assert len(response.json()["results"]) == min(page_size, racks * 18)


def test_a_cursor_is_refused_by_other_lists_orders_and_tamperers(demo_inventory, client):
    """A cursor names the list and order it came from: another list's (the GPUs' on the trays), another
    order's (by uuid, then by uuid descending), a key or a value DRF never writes, an offset beyond its cutoff
    or a duplicate are each a 400 naming `cursor`; the cursor as given still reads its page."""
    tag = pagination.cursor_tag(Gpu, "pk")
    given = cursor_of(client.get(URL, {"page_size": 5}).json()["next"])
    assert client.get(URL, {"cursor": given, "page_size": 5}).status_code == 200
    by_uuid = cursor_of(client.get(URL, {"sort": "uuid", "page_size": 5}).json()["next"])
    assert client.get(URL, {"sort": "uuid", "cursor": by_uuid}).status_code == 200
    refused = [
        (URL, {"sort": "-uuid", "cursor": by_uuid}),
        ("/api/v1/trays/", {"cursor": given}),
        (URL, {"cursor": encoded(f"l={tag}&p=10&x=1")}),
        (URL, {"cursor": encoded(f"l={tag}&p=10&p=11")}),
        (URL, {"cursor": encoded(f"l={tag}&l={tag}&p=10")}),
        (URL, {"cursor": encoded(f"l={tag}&o=1001&p=10")}),
        (URL, {"cursor": encoded(f"l={tag}&o=+1&p=10")}),
        (URL, {"cursor": encoded(f"l={tag}&r=0&p=10")}),
        (URL, {"cursor": encoded(f"l={tag.upper()}&p=10")}),
        (URL, {"cursor": encoded("p=10")}),  # no list named: a cursor from before they named one
        (URL, {"cursor": encoded(f"l={tag}&p=../x")}),
    ]
    for url, params in refused:
        response = client.get(url, params)
        assert response.status_code == 400, (url, params, response.content)
        assert list(response.json()) == ["cursor"]
    ten = client.get(URL, {"cursor": encoded(f"l={tag}&p=10"), "page_size": 3}).json()
    assert [row["id"] for row in ten["results"]] == list(
        Gpu.objects.filter(pk__gt=10).order_by("pk").values_list("pk", flat=True)[:3]
    )
