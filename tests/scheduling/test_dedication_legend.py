"""The rack view says which NVLink partition is dedicated to whom: in the legend and on each tray's row."""

import re

import pytest

from inventory.models import NVLinkPartition
from tenancy.services import dedicate_partition
from tests.factories import make_department, make_member

pytestmark = pytest.mark.django_db


def legend_items(html: str) -> dict[str, str]:
    items = re.findall(r'<li class="legend-partition" data-partition="([^"]+)">(.*?)</li>', html, re.S)
    return {name: re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body)).strip() for name, body in items}


def test_the_rack_legend_and_grid_name_the_owner_of_a_dedicated_partition(
    client, demo_inventory, platform_admin
):
    inference = make_department("Inference", guaranteed_gpus=36)
    dedicate_partition(inference, NVLinkPartition.objects.get(rack__name="gb-r02", name="p2"))
    client.force_login(platform_admin)
    html = client.get("/inventory/racks/gb-r02/").content.decode()
    legend = legend_items(html)
    assert legend["p2"].endswith("dedicated to Inference")
    assert "dedicated" not in legend["p1"]
    # Each of p2's nine trays says it in the grid, p1's trays do not.
    assert len(re.findall(r'<small class="dedicated-to">Inference</small>', html)) == 9


def test_a_user_who_may_not_see_the_department_sees_only_that_the_partition_is_dedicated(
    client, demo_inventory
):
    inference = make_department("Inference", guaranteed_gpus=36)
    dedicate_partition(inference, NVLinkPartition.objects.get(rack__name="gb-r02", name="p2"))
    outsider = make_member("vision-member", make_department("Vision", guaranteed_gpus=8))
    client.force_login(outsider)
    legend = legend_items(client.get("/inventory/racks/gb-r02/").content.decode())
    assert legend["p2"].endswith("dedicated to another department")
    assert "Inference" not in legend["p2"]
