"""The fabric read back from Topograph's labels on a real API server's Nodes (integrations.kubernetes
.fabric_labels, `manage.py import_fabric_labels`): the target's own node read, the pure reader, the
inventory's all-or-nothing import."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from integrations.models import ConfigTarget
from inventory.fabric import current_fabric
from inventory.models import FabricImport

pytestmark = [pytest.mark.django_db, pytest.mark.integration]


def _target(kube_proxy, kube_testbed) -> ConfigTarget:
    return ConfigTarget.objects.create(
        name="gb-cluster",
        kind="kubernetes",
        settings={"api_url": kube_proxy.url, "token": kube_testbed.token, "ca_file": kube_testbed.ca},
    )


def test_topograph_labels_on_the_nodes_are_imported(kube, kube_proxy, kube_testbed, demo_inventory):
    for rack, leaf in (("gb-r01", "S1"), ("gb-r02", "S1"), ("gb-r03", "S2")):
        for slot in range(1, 19):
            kube.register_node(
                f"{rack}-t{slot:02d}",
                {
                    "fabric.topograph.run/tier-0": leaf,
                    "fabric.topograph.run/tier-1": "S9",
                    "accelerator.topograph.run/domain": f"nvl-{rack}",
                },
            )
    kube.register_node("control-1")
    _target(kube_proxy, kube_testbed)
    out = StringIO()
    call_command("import_fabric_labels", "gb-cluster", stdout=out)
    assert "Imported topograph: 1 spine group(s), 2 unit(s), 3 rack(s)" in out.getvalue()
    assert current_fabric().racks == {"gb-r01": ("s9", "s1"), "gb-r02": ("s9", "s1"), "gb-r03": ("s9", "s2")}
    assert FabricImport.objects.get().label == "Kubernetes target gb-cluster"


def test_nodes_without_labels_or_a_wrong_target_write_nothing(kube, kube_proxy, kube_testbed, demo_inventory):
    kube.register_node("gb-r01-t01")
    _target(kube_proxy, kube_testbed)
    with pytest.raises(CommandError, match="no node has Topograph's fabric labels"):
        call_command("import_fabric_labels", "gb-cluster")
    with pytest.raises(CommandError, match="no Kubernetes configuration target named 'nope'"):
        call_command("import_fabric_labels", "nope")
    assert not FabricImport.objects.exists()
