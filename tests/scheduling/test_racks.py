import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from inventory.choices import GpuHealth, TrayState
from inventory.demo import seed_datacenter
from inventory.models import ComputeTray, Gpu, NVLinkPartition, Rack

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}
# Session + user, then the screen's own queries (rack list: filter count + page; rack view: rack,
# partitions, trays, GPUs, dedications). Generous enough for middleware, tight enough to catch a query per
# row.
# +1 since the menu asks once per request whether the user leads a department (the audit log link).
RACK_LIST_MAX_QUERIES = 5
RACK_VIEW_MAX_QUERIES = 11  # + the node silent policy (stale trays), + the scheduler's re-carves of the rack
# + its place in the compute fabric (inventory.fabric.rack_fabric: one query while one source places it)


def _clear_inventory():
    Gpu.objects.all().delete()
    ComputeTray.objects.all().delete()
    NVLinkPartition.objects.all().delete()
    Rack.objects.all().delete()


def _pages(demo):
    gpu = Gpu.objects.first()
    tray = ComputeTray.objects.first()
    return [
        reverse("home"),
        reverse("inventory:rack-list"),
        reverse("scheduling:rack-detail", args=["gb-r01"]),
        reverse("inventory:gpu-detail", args=[gpu.pk]),
        reverse("inventory:tray-detail", args=[tray.pk]),
    ]


# ------------------------------------------------------------------------------------------------- login


def test_every_page_redirects_anonymous_users_to_login(client, demo_inventory):
    for url in _pages(demo_inventory):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login") + "?next="), url
        # htmx requests too: no data, and the whole page (not the panel) goes to the login form.
        partial = client.get(url, headers=HTMX)
        assert partial["HX-Redirect"].startswith(reverse("login") + "?next="), url
        assert b"<" not in partial.content, url


def test_pages_render_without_external_urls(user_client, demo_inventory):
    for url in _pages(demo_inventory):
        response = user_client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", html), url


# ------------------------------------------------------------------------------------------------ rack list


def test_rack_list_rows(user_client, demo_inventory):
    response = user_client.get(reverse("inventory:rack-list"))
    assert response.status_code == 200
    racks = {rack.name: rack for rack in response.context["page"].object_list}
    assert list(racks) == ["gb-r01", "gb-r02", "gb-r03"]
    r01, r02, r03 = racks["gb-r01"], racks["gb-r02"], racks["gb-r03"]
    assert (r01.trays_up, r01.trays_total) == (17, 18)  # one drained tray
    assert (r02.trays_up, r02.trays_total) == (18, 18)
    assert r02.partitions_total == 2 and r01.partitions_total == 1
    for rack in racks.values():
        unhealthy = Gpu.objects.filter(tray__rack=rack).exclude(health=GpuHealth.HEALTHY).count()
        assert rack.gpus_total == 72
        assert rack.gpus_healthy == 72 - unhealthy
    assert r03.trays_with_problems == 1
    html = response.content.decode()
    assert reverse("scheduling:rack-detail", args=["gb-r02"]) in html
    assert str(r01.cluster_uuid)[:8] in html


def test_rack_list_filter_by_name(user_client, demo_inventory):
    response = user_client.get(reverse("inventory:rack-list"), {"name": "r02"})
    assert [rack.name for rack in response.context["page"].object_list] == ["gb-r02"]
    assert f'<a class="button" href="{reverse("inventory:rack-list")}">Clear</a>' in response.content.decode()
    unfiltered = user_client.get(reverse("inventory:rack-list"))
    assert ">Clear</a>" not in unfiltered.content.decode()


def test_rack_list_filter_has_problems(user_client, demo_inventory):
    # Make gb-r02 clean: healthy GPUs, no fabric problems. gb-r03 keeps its in-progress fabric problem.
    Gpu.objects.filter(tray__rack__name="gb-r02").update(health=GpuHealth.HEALTHY)
    ComputeTray.objects.filter(rack__name="gb-r02").update(fabric_problems=[])
    url = reverse("inventory:rack-list")

    with_problems = [
        r.name for r in user_client.get(url, {"has_problems": "true"}).context["page"].object_list
    ]
    without = [r.name for r in user_client.get(url, {"has_problems": "false"}).context["page"].object_list]
    assert "gb-r03" in with_problems
    assert "gb-r02" not in with_problems
    assert without == ["gb-r02"]
    # The problem column agrees with the filter.
    rows = user_client.get(url).context["page"].object_list
    assert {r.name for r in rows if r.problems} == set(with_problems)


def test_rack_list_filter_by_location_and_model(user_client, demo_inventory):
    url = reverse("inventory:rack-list")
    response = user_client.get(url, {"location": "pos 03"})
    assert [r.name for r in response.context["page"].object_list] == ["gb-r03"]
    response = user_client.get(url, {"system_model": "gb300_nvl72"})
    assert list(response.context["page"].object_list) == []
    assert "No rack matches this filter." in response.content.decode()


def test_rack_list_pagination(user_client, django_assert_max_num_queries):
    Rack.objects.bulk_create([Rack(name=f"rack-{n:03d}", location="DC9") for n in range(1, 121)])
    url = reverse("inventory:rack-list")

    first = user_client.get(url)
    page = first.context["page"]
    assert len(page.object_list) == 50
    assert page.paginator.num_pages == 3
    assert page.object_list[0].name == "rack-001"
    # Racks without trays still show zeros, not blanks.
    assert (page.object_list[0].trays_total, page.object_list[0].gpus_total) == (0, 0)

    with django_assert_max_num_queries(RACK_LIST_MAX_QUERIES):
        last = user_client.get(url, {"page": 3, "location": "DC9"})
    names = [r.name for r in last.context["page"].object_list]
    assert names[0] == "rack-101" and names[-1] == "rack-120" and len(names) == 20
    # Page links keep the filter.
    assert "location=DC9" in last.content.decode()
    # A page past the end shows the last page rather than an error.
    assert user_client.get(url, {"page": 99}).context["page"].number == 3


@pytest.mark.slow(reason="seeds and reads a whole demo datacenter")
def test_rack_list_queries_do_not_grow_with_racks(user_client, django_assert_max_num_queries):
    url = reverse("inventory:rack-list")
    seed_datacenter(racks=3)
    with CaptureQueriesContext(connection) as three:
        user_client.get(url)
    _clear_inventory()
    seed_datacenter(racks=12)
    with django_assert_max_num_queries(RACK_LIST_MAX_QUERIES), CaptureQueriesContext(connection) as twelve:
        response = user_client.get(url)
    assert len(response.context["page"].object_list) == 12
    assert len(twelve) == len(three)


# ------------------------------------------------------------------------------------------------ rack view


def test_rack_view_draws_72_gpus(user_client, demo_inventory):
    response = user_client.get(reverse("scheduling:rack-detail", args=["gb-r01"]))
    assert response.status_code == 200
    html = response.content.decode()
    cells = re.findall(r'<button type="button" class="gpu[^"]*" data-gpu-uuid="(GPU-[^"]+)"', html)
    assert len(cells) == 72
    assert set(cells) == set(Gpu.objects.filter(tray__rack__name="gb-r01").values_list("uuid", flat=True))
    assert (
        len(re.findall(r'<button type="button" class="tray" data-tray-hostname="gb-r01-t\d\d"', html)) == 18
    )
    # Every GPU cell opens its detail into the side panel.
    gpu = Gpu.objects.get(tray__hostname="gb-r01-t01", index=0)
    assert f'hx-get="{reverse("inventory:gpu-detail", args=[gpu.pk])}" hx-target="#detail"' in html
    assert '<aside id="detail"' in html
    # The drained tray shows its state and reason.
    assert "XID 79 (GPU fell off the bus)" in html
    # Header facts.
    rack = Rack.objects.get(name="gb-r01")
    assert str(rack.cluster_uuid) in html and rack.location in html and "GB200 NVL72" in html


def test_rack_view_marks_degraded_gpus(user_client, demo_inventory):
    tray = ComputeTray.objects.get(hostname="gb-r01-t02")
    Gpu.objects.filter(tray=tray, index=1).update(health=GpuHealth.UNHEALTHY)
    Gpu.objects.filter(tray=tray, index=2).update(health=GpuHealth.LIMITED_CAPACITY)
    html = user_client.get(reverse("scheduling:rack-detail", args=["gb-r01"])).content.decode()
    unhealthy = Gpu.objects.get(tray=tray, index=1)
    limited = Gpu.objects.get(tray=tray, index=2)
    assert re.search(rf'class="gpu health-unhealthy[^"]*" data-gpu-uuid="{unhealthy.uuid}"', html)
    assert re.search(rf'class="gpu health-limited_capacity[^"]*" data-gpu-uuid="{limited.uuid}"', html)
    assert f"{unhealthy.uuid} · Unhealthy" in html  # the title text, not colour alone


def test_carved_rack_shows_two_partitions_in_two_colours(user_client, demo_inventory):
    html = user_client.get(reverse("scheduling:rack-detail", args=["gb-r02"])).content.decode()
    legend = re.findall(
        r'<li class="legend-partition" data-partition="([^"]+)"><span class="swatch (part-\d+)"', html
    )
    assert [name for name, _ in legend] == ["p1", "p2"]
    assert len({colour for _, colour in legend}) == 2
    assert "clique 1 · 9 trays" in html and "clique 2 · 9 trays" in html
    row_colours = re.findall(r'<li class="tray-row (part-\d+)[^"]*" id="tray-(\d+)"', html)
    assert len(row_colours) == 18
    by_slot = {int(slot): colour for colour, slot in row_colours}
    assert {by_slot[s] for s in range(1, 10)} == {legend[0][1]}
    assert {by_slot[s] for s in range(10, 19)} == {legend[1][1]}


def test_rack_view_marks_fabric_problems_and_drift(user_client, demo_inventory):
    html = user_client.get(reverse("scheduling:rack-detail", args=["gb-r03"])).content.decode()
    assert 'class="fabric-mark" title="GPU 1 (GPU-' in html
    assert "fabric registration is still in progress" in html
    assert not re.search(r'class="gpu health-\w+ drift"', html)  # the seed has no drift

    tray = ComputeTray.objects.get(hostname="gb-r02-t03")
    gpu = Gpu.objects.get(tray=tray, index=0)
    Gpu.objects.filter(pk=gpu.pk).update(reported_clique_id=32766)
    html = user_client.get(reverse("scheduling:rack-detail", args=["gb-r02"])).content.decode()
    assert re.search(rf'class="gpu health-\w+ drift" data-gpu-uuid="{gpu.uuid}"', html)
    assert "1</b> GPU with clique drift" in html


def test_rack_view_unknown_rack_is_404(user_client, demo_inventory):
    assert user_client.get(reverse("scheduling:rack-detail", args=["gb-r99"])).status_code == 404
    assert user_client.get(reverse("inventory:gpu-detail", args=[999999])).status_code == 404
    assert user_client.get(reverse("inventory:tray-detail", args=[999999]), headers=HTMX).status_code == 404


@pytest.mark.slow(reason="grows the data to compare query counts")
def test_rack_view_queries_do_not_grow_with_racks(user_client, django_assert_max_num_queries):
    url = reverse("scheduling:rack-detail", args=["gb-r01"])
    seed_datacenter(racks=3)
    with CaptureQueriesContext(connection) as three:
        user_client.get(url)
    _clear_inventory()
    seed_datacenter(racks=12)
    with django_assert_max_num_queries(RACK_VIEW_MAX_QUERIES), CaptureQueriesContext(connection) as twelve:
        assert user_client.get(url).status_code == 200
    assert len(twelve) == len(three)


# -------------------------------------------------------------------------------------------------- details


def test_gpu_detail_htmx_returns_the_partial(user_client, demo_inventory):
    gpu = Gpu.objects.select_related("tray").get(tray__hostname="gb-r01-t01", index=0)
    response = user_client.get(reverse("inventory:gpu-detail", args=[gpu.pk]), headers=HTMX)
    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" not in html and "topbar" not in html
    assert gpu.uuid in html and gpu.serial in html and "NVIDIA GB200" in html
    assert "In its intended partition" in html
    assert "HX-Request" in response["Vary"]


def test_gpu_detail_plain_request_is_a_full_page(user_client, demo_inventory):
    gpu = Gpu.objects.get(tray__hostname="gb-r01-t01", index=0)
    response = user_client.get(reverse("inventory:gpu-detail", args=[gpu.pk]))
    html = response.content.decode()
    assert response.status_code == 200
    assert "<html" in html and 'id="detail"' in html and gpu.uuid in html
    assert reverse("scheduling:rack-detail", args=["gb-r01"]) in html


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_gpu_detail_shows_drift(user_client, demo_inventory):
    gpu = Gpu.objects.get(tray__hostname="gb-r02-t12", index=3)  # partition p2, clique 2
    Gpu.objects.filter(pk=gpu.pk).update(reported_clique_id=1)
    html = user_client.get(reverse("inventory:gpu-detail", args=[gpu.pk]), headers=HTMX).content.decode()
    assert "Clique drift." in html
    assert "reports clique 1, but its tray is in partition p2 (clique 2)" in html


def test_gpu_detail_of_a_removed_gpu(user_client, demo_inventory):
    gpu = Gpu.objects.create(uuid="GPU-removed-0000", health=GpuHealth.UNKNOWN)
    response = user_client.get(reverse("inventory:gpu-detail", args=[gpu.pk]))
    assert response.status_code == 200
    assert "removed from its tray" in response.content.decode()


def test_tray_detail(user_client, demo_inventory):
    tray = ComputeTray.objects.get(hostname="gb-r03-t05")
    response = user_client.get(reverse("inventory:tray-detail", args=[tray.pk]), headers=HTMX)
    html = response.content.decode()
    assert "<html" not in html
    assert "gb-r03-t05" in html and "fabric registration is still in progress" in html
    for guid in tray.ib_port_guids:
        assert guid in html
    assert tray.reported_clique in html
    for gpu in tray.gpus.all():
        assert reverse("inventory:gpu-detail", args=[gpu.pk]) in html

    drained = ComputeTray.objects.get(state=TrayState.DRAIN)
    full = user_client.get(reverse("inventory:tray-detail", args=[drained.pk])).content.decode()
    assert "<html" in full and drained.state_reason in full and "Drain" in full


def test_detail_queries_are_constant(user_client, demo_inventory, django_assert_max_num_queries):
    gpu = Gpu.objects.first()
    # + the health timeline: its events, its decisions and its service steps (and, on the tray, its active
    # checks).
    with django_assert_max_num_queries(6):
        user_client.get(reverse("inventory:gpu-detail", args=[gpu.pk]), headers=HTMX)
    # + the node silent policy (a stale tray) and the tray's service mark.
    with django_assert_max_num_queries(10):
        user_client.get(reverse("inventory:tray-detail", args=[gpu.tray_id]), headers=HTMX)
