"""A tray's MIG layout pushed to the real API server (tests/integrations/kube_testbed.py) with the `rackplane`
service account (exactly deploy/kubernetes/rbac.yaml): the node's nvidia.com/mig.config label and mig-parted's
ConfigMap in the GPU Operator's namespace, accepted, changed and turned off; the MIG manager's own state label
is left alone."""

from __future__ import annotations

import pytest
import yaml

from integrations import state as configstate
from integrations.kubernetes import render as r
from integrations.models import PushStatus
from inventory.mig_layouts import layout
from inventory.models import ComputeTray
from tests.integrations.kubernetes.test_target_pushes import kubernetes_target, push_now
from tests.inventory.test_mig_layouts import BALANCED_CONFIG

pytestmark = [pytest.mark.django_db, pytest.mark.integration]
TRAY = "gb-r03-t02"


@pytest.fixture
def cluster(kube, demo_inventory):
    """The wiped cluster with the demo's nodes registered and the GPU Operator's namespace (its install's)."""
    for node in configstate.build_state().kubernetes.inventory.nodes:
        kube.register_node(node.hostname)
    kube.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": r.DEFAULT_MIG_NAMESPACE}}, "helm"
    )
    return kube


def _choose(name: str, devices: dict[str, int]) -> None:
    chosen = layout(name, devices)
    ComputeTray.objects.filter(hostname=TRAY).update(
        mig_layout=chosen.name, mig_layout_devices=chosen.as_dict()
    )


def _config(kube) -> dict:
    config_map = kube.get("ConfigMap", r.MIG_CONFIG_MAP, r.DEFAULT_MIG_NAMESPACE)
    assert config_map is not None
    return yaml.safe_load(config_map["data"][r.MIG_CONFIG_KEY])


def test_a_layout_labels_the_node_and_writes_mig_parteds_config(
    cluster, kube_proxy, kube_testbed, django_capture_on_commit_callbacks
):
    target = kubernetes_target(kube_proxy, kube_testbed, force_conflicts=True)
    _choose("all-balanced", {"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1})
    push = push_now(django_capture_on_commit_callbacks, target)
    assert push.status == PushStatus.SUCCEEDED, push.error
    node = cluster.get("Node", TRAY)
    assert node["metadata"]["labels"][r.MIG_CONFIG_LABEL] == "all-balanced"
    assert r.MIG_CONFIG_LABEL not in cluster.get("Node", "gb-r03-t03")["metadata"]["labels"]
    assert _config(cluster) == BALANCED_CONFIG

    # The MIG manager reports its progress on the node; Rackplane's next push leaves that label alone.
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": TRAY, "labels": {r.MIG_CONFIG_STATE_LABEL: "success"}},
        },
        "nvidia-mig-manager",
    )
    _choose("all-1g.23gb", {"1g.23gb": 7})
    push = push_now(django_capture_on_commit_callbacks, target)
    assert push.status == PushStatus.SUCCEEDED, push.error
    labels = cluster.get("Node", TRAY)["metadata"]["labels"]
    assert labels[r.MIG_CONFIG_LABEL] == "all-1g.23gb"
    assert labels[r.MIG_CONFIG_STATE_LABEL] == "success"
    assert set(_config(cluster)["mig-configs"]) == {"all-1g.23gb", "all-disabled"}

    # Whole GPUs again: the label says all-disabled, which the ConfigMap still defines.
    _choose("all-disabled", {})
    push = push_now(django_capture_on_commit_callbacks, target)
    assert push.status == PushStatus.SUCCEEDED, push.error
    assert cluster.get("Node", TRAY)["metadata"]["labels"][r.MIG_CONFIG_LABEL] == "all-disabled"
    assert set(_config(cluster)["mig-configs"]) == {"all-disabled"}
