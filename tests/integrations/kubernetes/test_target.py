"""KubernetesTarget against the testbed's real Kubernetes API server (tests/integrations/kube_testbed.py).

Rackplane talks to the real kube-apiserver (v1.36, with the packaged Kueue and ComputeDomain CRDs and their
CEL rules, RBAC and the default admission plugins) through `kube_proxy`, with the `rackplane` service
account's token (exactly deploy/kubernetes/rbac.yaml) and the cluster CA. Every answer it meets is the real
server's: server-side apply and its field managers and conflicts, dry runs, 404s, CEL refusals, a CRD that
lacks a field, namespaces that stay Terminating and protection finalizers (no controllers run here). The
proxy records what Rackplane sent (`writes`, `requests`) and injects only what a real server cannot be made
to do on demand: being down, slow, or answering 5xx/429. The tests set the cluster up and read it back as
its admin (`kube`), registering the inventory's Nodes as a kubelet would.

Tests without a server (configuration errors, field comparison) are not marked `integration`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import pathlib
import socket
import time
from typing import Any

import certifi
import pytest
import yaml

from core.fabric import Fabric
from integrations.kubernetes import render as r
from integrations.kubernetes.changes import KubernetesState
from integrations.kubernetes.target import (
    FIELD_MANAGER,
    FieldChange,
    KubernetesConfigurationError,
    KubernetesRejected,
    KubernetesTarget,
    KubernetesUnavailable,
    owned_paths,
)
from tests.integrations.kube_testbed import SYSTEM_NAMESPACES
from tests.integrations.kubernetes.test_render import INFERENCE, NFS, inventory, tenant
from tests.integrations.kubernetes.test_render_fabric import LEVELS

VISION = tenant("vision", pkey=0x11, vlan_id=101, vxlan_vni=10101, guaranteed_gpus=8, limit_gpus=None)
REPO = pathlib.Path(__file__).resolve().parents[3]
RBAC = REPO / "deploy" / "kubernetes" / "rbac.yaml"
CRDS = REPO / "integrations" / "kubernetes" / "crds"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
SA_USER = "system:serviceaccount:rackplane:rackplane"
VISION_OBJECTS = [
    "PersistentVolumeClaim vision/department-data",
    "PersistentVolume rackplane-vision-data",
    "NetworkPolicy vision/rackplane-department-isolation",
    "ResourceQuota vision/rackplane-gpu-quota",
    "LocalQueue vision/default",
    "ClusterQueue vision",
    "Namespace vision",
]

integration = pytest.mark.integration


def register_nodes(kube, state: r.InventoryState) -> None:
    """The cluster's nodes, as the kubelet registers them (Rackplane never creates nodes)."""
    for node in state.nodes:
        kube.register_node(node.hostname, {"kubernetes.io/os": "linux"})


def connect(proxy, testbed, **kwargs: Any) -> KubernetesTarget:
    kwargs.setdefault("token", testbed.token)
    kwargs.setdefault("timeout", 10)
    return KubernetesTarget(proxy.url, ca_cert=testbed.ca, **kwargs)


@pytest.fixture
def cluster(kube):
    """The wiped cluster with the inventory's nodes registered."""
    register_nodes(kube, inventory())
    return kube


@pytest.fixture
def target(cluster, kube_proxy, kube_testbed):
    with connect(kube_proxy, kube_testbed) as t:
        yield t


def state(*tenants, dedicated: str | None = "inference") -> KubernetesState:
    return KubernetesState(inventory(dedicated), tuple(tenants), NFS)


def live_labels(kube, node: str) -> dict[str, str]:
    return kube.get("Node", node)["metadata"]["labels"]


def rendered(desired: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(o for o in desired if o["kind"] == kind and o["metadata"]["name"] == name)


# --- apply --------------------------------------------------------------------------------------------


@integration
def test_first_apply_creates_everything_in_order(kube, kube_proxy, kube_testbed, target):
    desired = target.render(state(INFERENCE))
    result = target.apply(desired)
    assert not result.dry_run
    assert result.created == [r.object_ref(o) for o in desired if o["kind"] != "Node"]
    assert result.updated == [r.object_ref(o) for o in desired if o["kind"] == "Node"]
    assert result.deleted == result.skipped == result.deleting == []
    assert result.taken_over == {} and result.waiting == {}
    # The real server answers 404 for an object in a namespace that does not exist: the order was right.
    writes = kube_proxy.writes
    assert writes[0].path == "/api/v1/namespaces/inference"
    assert len(writes) == len(desired)
    for w in writes:
        assert w.method == "PATCH"
        assert w.query == {"fieldManager": ["rackplane"]}  # never force unasked
        assert w.content_type == "application/apply-patch+yaml"
        assert w.authorization == f"Bearer {kube_testbed.token}"
    # What the cluster holds is what was rendered (plus the server's defaults and the kubelet's labels).
    for obj in desired:
        meta = obj["metadata"]
        live = kube.get(obj["kind"], meta["name"], meta.get("namespace", ""))
        assert live is not None, r.object_ref(obj)
        if obj["kind"] == "Node":
            assert live["metadata"]["labels"] == {
                **meta["labels"],
                "kubernetes.io/hostname": meta["name"],
                "kubernetes.io/os": "linux",
            }
        else:
            assert meta["labels"].items() <= live["metadata"]["labels"].items()
        assert target._step(obj, live).action == "unchanged", r.object_ref(obj)
    assert kube.names("ClusterQueue") == ["inference"]
    cq = kube.get("ClusterQueue", "inference")
    assert cq["spec"]["cohortName"] == "rackplane"
    assert (
        cq["spec"]["resourceGroups"]
        == rendered(desired, "ClusterQueue", "inference")["spec"]["resourceGroups"]
    )
    read = target.read_back()
    assert [r.object_ref(o) for o in read] == [r.object_ref(o) for o in desired]
    assert [o for o in read if o["kind"] == "Node"] == [o for o in desired if o["kind"] == "Node"]


@integration
def test_managed_fields_on_real_objects_name_rackplane_as_the_applier(kube, target):
    desired = target.render(state(INFERENCE))
    target.apply(desired)
    for obj in desired:
        meta = obj["metadata"]
        live = kube.get(obj["kind"], meta["name"], meta.get("namespace", ""))
        entries = live["metadata"]["managedFields"]
        ours = [e for e in entries if e["manager"] == FIELD_MANAGER]
        assert [e["operation"] for e in ours] == ["Apply"], r.object_ref(obj)
        owned = owned_paths(live)
        for key in meta["labels"]:
            assert ("metadata", "labels", key) in owned, (r.object_ref(obj), key)
        if obj["kind"] == "Node":  # the kubelet keeps its own labels
            assert {e["manager"] for e in entries} == {"kubelet", FIELD_MANAGER}


@integration
def test_second_apply_changes_nothing(kube, kube_proxy, target):
    desired = target.render(state(INFERENCE, VISION))
    target.apply(desired)
    before = kube.resource_versions()
    writes = len(kube_proxy.writes)
    diff = target.diff(desired)
    assert diff.empty and diff.lines() == []
    result = target.apply(desired)
    assert not result.changed
    assert result.unchanged == [r.object_ref(o) for o in desired]
    assert len(kube_proxy.writes) == writes  # not a single PATCH or DELETE
    assert kube.resource_versions() == before


@integration
def test_quantities_the_server_canonicalises_compare_by_value(kube, target):
    desired = target.render(state(INFERENCE))
    target.apply(desired)
    volume = rendered(desired, "PersistentVolume", "rackplane-inference-data")
    assert volume["spec"]["capacity"]["storage"] == "2048Gi"
    live = kube.get("PersistentVolume", "rackplane-inference-data")
    assert live["spec"]["capacity"]["storage"] == "2Ti"  # the real server's canonical form
    assert target._step(volume, live).action == "unchanged"
    assert target.diff(desired).empty


@integration
def test_diff_reports_creates_field_changes_and_removals(kube, target):
    target.apply(target.render(state(INFERENCE, VISION)))
    bigger = tenant(guaranteed_gpus=40, limit_gpus=None)  # limit removed: quota key and borrowing limit go
    diff = target.diff(target.render(state(bigger)))
    assert diff.create == []
    assert diff.change == {
        "ClusterQueue inference": [
            FieldChange("spec.resourceGroups[0].flavors[0].resources[0].nominalQuota", "36", "40"),
            FieldChange("spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit", "36", None),
            # The IMEX channels (Kueue's DRA mapping) follow the GPUs' numbers.
            FieldChange("spec.resourceGroups[0].flavors[0].resources[1].nominalQuota", "36", "40"),
            FieldChange("spec.resourceGroups[0].flavors[0].resources[1].borrowingLimit", "36", None),
        ],
        "ResourceQuota inference/rackplane-gpu-quota": [
            FieldChange('spec.hard["requests.nvidia.com/gpu"]', "72", None)
        ],
    }
    assert diff.conflicts == {}
    assert diff.delete == VISION_OBJECTS
    result = target.apply(target.render(state(bigger)))
    assert result.updated == ["ClusterQueue inference", "ResourceQuota inference/rackplane-gpu-quota"]
    assert result.deleted == VISION_OBJECTS
    rq = kube.get("ResourceQuota", "rackplane-gpu-quota", "inference")
    assert "requests.nvidia.com/gpu" not in (rq["spec"].get("hard") or {})
    cq = kube.get("ClusterQueue", "inference")
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"] == [
        {"name": "nvidia.com/gpu", "nominalQuota": "40"},
        {"name": "resource.nvidia.com/imex-channel", "nominalQuota": "40"},
    ]
    assert target.diff(target.render(state(bigger))).empty


@integration
def test_removed_department_is_pruned_and_unlabelled_objects_stay(kube, kube_proxy, target):
    target.apply(target.render(state(INFERENCE, VISION)))
    # Objects Rackplane does not manage: unlabelled, labelled by someone else, or of a kind it never prunes.
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}}, "kubectl")
    kube.create(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "manual", "labels": {"app.kubernetes.io/managed-by": "helm"}},
            "spec": {},
        },
        "helm",
    )
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "notes",
                "namespace": "monitoring",
                "labels": {"app.kubernetes.io/managed-by": "rackplane"},
            },
        },
        "kubectl",
    )
    writes = len(kube_proxy.writes)
    result = target.apply(target.render(state(INFERENCE)))
    assert result.deleted == VISION_OBJECTS
    deletes = kube_proxy.writes[writes:]
    assert [w.method for w in deletes] == ["DELETE"] * 7
    assert deletes[-1].path == "/api/v1/namespaces/vision"
    # No controllers run here: the namespace stays Terminating, the volume and claim wait on their
    # protection finalizers. Everything else is gone at once.
    assert kube.get("Namespace", "vision")["status"]["phase"] == "Terminating"
    assert [n for n in kube.names("Namespace") if n not in SYSTEM_NAMESPACES] == ["inference", "monitoring"]
    assert kube.names("ClusterQueue") == ["inference"]
    assert kube.names("PersistentVolume") == ["rackplane-inference-data"]
    assert kube.names("LocalQueue") == ["inference/default"]
    assert "manual" in kube.names("ResourceFlavor")
    assert kube.get("ConfigMap", "notes", "monitoring") is not None  # a kind Rackplane never prunes
    assert len(kube.names("Node")) == 36  # nodes are never deleted
    assert target.diff(target.render(state(INFERENCE))).empty


@integration
def test_a_second_apply_leaves_objects_being_deleted_alone(kube, kube_proxy, target):
    target.apply(target.render(state(INFERENCE, VISION)))
    target.apply(target.render(state(INFERENCE)))  # prunes vision: the namespace stays Terminating
    being_deleted = [
        "PersistentVolumeClaim vision/department-data",
        "PersistentVolume rackplane-vision-data",
        "Namespace vision",
    ]
    assert kube.get("PersistentVolumeClaim", "department-data", "vision")["metadata"]["deletionTimestamp"]

    diff = target.diff(target.render(state(INFERENCE)))
    assert diff.empty and diff.delete == []
    assert diff.deleting == being_deleted
    assert "  Namespace vision: being deleted already (not deleted again)" in diff.lines()
    writes = len(kube_proxy.writes)
    result = target.apply(target.render(state(INFERENCE)))
    assert kube_proxy.writes[writes:] == []  # no second DELETE of anything
    assert result.deleted == [] and result.deleting == being_deleted
    assert "Namespace vision is being deleted already (waiting for the cluster to finish)" in result.log


@integration
def test_a_department_back_while_its_namespace_is_terminating_waits_and_converges(kube, kube_proxy, target):
    target.apply(target.render(state(INFERENCE, VISION)))
    target.apply(target.render(state(INFERENCE)))  # vision is pruned: Terminating
    writes = len(kube_proxy.writes)

    diff = target.diff(target.render(state(INFERENCE, VISION)))
    assert diff.waiting["ResourceQuota vision/rackplane-gpu-quota"] == (
        "its Namespace vision is still being deleted (Terminating); Rackplane applies it once the namespace "
        "is gone and created again"
    )
    assert diff.waiting["Namespace vision"].startswith("still being deleted (Terminating)")
    assert (
        "! PersistentVolume rackplane-vision-data: still being deleted; Rackplane applies it again once "
        "the deletion has finished" in diff.lines()
    )
    assert not diff.empty
    with pytest.raises(KubernetesUnavailable) as caught:
        target.apply(target.render(state(INFERENCE, VISION)))
    error = caught.value
    assert error.transient  # the push task retries
    assert error.message == (
        "6 object(s) could not be applied yet: Namespace vision is still being deleted (Terminating): it and "
        "the 4 object(s) in it wait; PersistentVolume rackplane-vision-data is still being deleted"
    )
    assert error.details == [
        "done: 1 created, 0 updated, 0 deleted, 48 unchanged (the log lists each object)"
    ]
    assert "namespace stays Terminating" in error.what_to_do
    assert set(error.result.waiting) == {
        "Namespace vision",
        "LocalQueue vision/default",
        "ResourceQuota vision/rackplane-gpu-quota",
        "NetworkPolicy vision/rackplane-department-isolation",
        "PersistentVolume rackplane-vision-data",
        "PersistentVolumeClaim vision/department-data",
    }
    # What can be applied is: the cluster-scoped ClusterQueue. Nothing is sent into the namespace.
    assert error.result.created == ["ClusterQueue vision"]
    assert not any("/namespaces/vision" in w.path for w in kube_proxy.writes[writes:])

    # The namespace and volume controllers finish the deletion (done here by hand: none run here).
    for kind, name, namespace in [
        ("PersistentVolumeClaim", "department-data", "vision"),
        ("PersistentVolume", "rackplane-vision-data", ""),
    ]:
        kube.merge_patch(kind, name, {"metadata": {"finalizers": None}}, namespace)
    live = kube.get("Namespace", "vision")
    live["spec"] = {"finalizers": []}
    kube.ok("PUT", "/api/v1/namespaces/vision/finalize", live)
    deadline = time.monotonic() + 10
    while kube.get("Namespace", "vision") is not None and time.monotonic() < deadline:
        time.sleep(0.05)

    result = target.apply(target.render(state(INFERENCE, VISION)))  # the retry converges
    assert set(result.created) == set(VISION_OBJECTS) - {"ClusterQueue vision"}
    assert kube.get("Namespace", "vision")["status"]["phase"] == "Active"
    assert target.diff(target.render(state(INFERENCE, VISION))).empty


@integration
def test_the_servers_namespace_terminating_answer_is_transient(kube, kube_proxy, target):
    # Someone else's namespace, being deleted; Rackplane's desired set does not hold the namespace itself,
    # so only the API server can tell: 403 NamespaceTerminating.
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "inference"}}, "kubectl")
    kube.request("DELETE", "/api/v1/namespaces/inference")
    desired = [o for o in target.render(state(INFERENCE)) if o["kind"] != "Namespace"]
    with pytest.raises(KubernetesUnavailable) as caught:
        target.apply(desired)
    error = caught.value
    assert error.transient and error.status == 403
    assert error.message.startswith(
        "applying LocalQueue inference/default: its Namespace inference is being deleted (Terminating)"
    )
    assert "because it is being terminated" in error.message  # the server's own words


@integration
def test_dropped_node_label_disappears_while_other_managers_labels_stay(kube, target):
    target.apply(target.render(state(INFERENCE)))
    node = "gb-r02-t10"
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node, "labels": {"example.com/team": "hpc"}},
        },
        "site-operator",
    )
    assert live_labels(kube, node)["rackplane.io/department"] == "inference"

    undedicated = state(INFERENCE, dedicated=None)  # the partition is no longer the department's
    diff = target.diff(target.render(undedicated))
    assert diff.change[f"Node {node}"] == [
        FieldChange('metadata.labels["rackplane.io/service-tier"]', "dedicated", "shared"),
        FieldChange('metadata.labels["rackplane.io/department"]', "inference", None),
    ]
    assert diff.conflicts == {}
    target.apply(target.render(undedicated))
    labels = live_labels(kube, node)
    assert "rackplane.io/department" not in labels
    assert labels["rackplane.io/service-tier"] == "shared"
    assert labels["example.com/team"] == "hpc"  # another manager's label stays
    assert labels["kubernetes.io/hostname"] == node  # and the kubelet's
    managers = {e["manager"] for e in kube.get("Node", node)["metadata"]["managedFields"]}
    assert managers == {"kubelet", "site-operator", "rackplane"}
    assert target.diff(target.render(undedicated)).empty


@integration
def test_node_leaving_the_inventory_loses_only_rackplanes_labels(kube, target):
    target.apply(target.render(state(INFERENCE)))
    full = inventory()
    fewer = r.InventoryState(
        full.racks, full.partitions, [n for n in full.nodes if n.hostname != "gb-r01-t18"]
    )
    desired = r.desired_objects(fewer, [INFERENCE], nfs_server=NFS)
    diff = target.diff(desired)
    assert list(diff.change) == ["Node gb-r01-t18"]
    assert all(c.new is None for c in diff.change["Node gb-r01-t18"])
    result = target.apply(desired)
    assert result.updated == ["Node gb-r01-t18"]
    assert "removed Rackplane's labels from Node gb-r01-t18" in result.log
    node = kube.get("Node", "gb-r01-t18")
    assert node["metadata"]["labels"] == {"kubernetes.io/hostname": "gb-r01-t18", "kubernetes.io/os": "linux"}
    assert owned_paths(node) == []
    assert target.diff(desired).empty


@integration
def test_the_fabric_tiers_are_applied_changed_and_dropped_through_the_target(kube, target):
    """The compute fabric (issue 33) through the push path: the Topology gains the fabric's tiers above the
    NVLink domain and the nodes Topograph's tier labels, server-side applied and accepted by the real API
    server with Kueue's CRD and CEL rules; a unit moved shows in the diff as exactly that label; a fabric
    forgotten drops the tiers and the labels again."""
    fabric = Fabric(racks={"gb-r01": ("spine-a", "su-1"), "gb-r02": ("spine-a", "su-2")})
    with_fabric = dataclasses.replace(state(INFERENCE), fabric=fabric)
    target.apply(target.render(with_fabric))
    labels = live_labels(kube, "gb-r02-t10")
    assert (labels["fabric.topograph.run/tier-1"], labels["fabric.topograph.run/tier-0"]) == (
        "spine-a",
        "su-2",
    )
    levels = [level["nodeLabel"] for level in kube.get("Topology", r.TOPOLOGY_NAME)["spec"]["levels"]]
    assert levels == LEVELS
    assert target.diff(target.render(with_fabric)).empty

    moved = dataclasses.replace(
        with_fabric, fabric=Fabric(racks={"gb-r01": ("spine-a", "su-1"), "gb-r02": ("spine-a", "su-1")})
    )
    diff = target.diff(target.render(moved))
    assert set(diff.change) == {f"Node gb-r02-t{slot:02d}" for slot in range(1, 19)}
    assert diff.change["Node gb-r02-t10"] == [
        FieldChange('metadata.labels["fabric.topograph.run/tier-0"]', "su-2", "su-1")
    ]
    target.apply(target.render(moved))
    assert live_labels(kube, "gb-r02-t10")["fabric.topograph.run/tier-0"] == "su-1"

    target.apply(target.render(state(INFERENCE)))  # no fabric any more
    assert not any(k.startswith("fabric.topograph.run/") for k in live_labels(kube, "gb-r02-t10"))
    levels = [level["nodeLabel"] for level in kube.get("Topology", r.TOPOLOGY_NAME)["spec"]["levels"]]
    assert levels == [r.DOMAIN_LABEL, r.SUB_DOMAIN_LABEL, r.HOSTNAME_LABEL]


@integration
def test_node_not_registered_is_skipped_never_created(kube, kube_proxy, target):
    full = inventory()
    extra = r.InventoryState(
        full.racks, full.partitions, [*full.nodes, r.NodeSpec("gb-r02-t19", "gb-r02", "p2")]
    )
    desired = r.desired_objects(extra, [INFERENCE], nfs_server=NFS)
    assert target.diff(desired).missing_nodes == ["gb-r02-t19"]
    result = target.apply(desired)
    assert result.skipped == ["Node gb-r02-t19"]
    assert kube.get("Node", "gb-r02-t19") is None
    assert not any("gb-r02-t19" in w.path for w in kube_proxy.writes)


# --- conflicts with other field managers ----------------------------------------------------------------

DOMAIN_PATH = f".metadata.labels.{r.DOMAIN_LABEL}"


def stale_domain_label(kube, node: str) -> None:
    kube.apply(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {r.DOMAIN_LABEL: "stale"}}},
        "topograph",
    )


@integration
def test_a_field_another_tool_set_is_a_conflict_reported_in_words_never_forced(kube, kube_proxy, target):
    node = "gb-r01-t01"
    stale_domain_label(kube, node)
    desired = target.render(state(INFERENCE))
    diff = target.diff(desired)
    wanted = r.node_labels(inventory())[node][r.DOMAIN_LABEL]
    assert FieldChange(f'metadata.labels["{r.DOMAIN_LABEL}"]', "stale", wanted) in diff.change[f"Node {node}"]
    assert diff.conflicts == {f"Node {node}": [(DOMAIN_PATH, "topograph")]}  # predicted from managedFields
    assert (
        f'! Node {node}: {DOMAIN_PATH} is set by "topograph" to another value: the push fails on it unless '
        'the target may take it over ("Take over fields other tools set")'
    ) in diff.lines()

    with pytest.raises(KubernetesRejected) as caught:
        target.apply(desired)
    error = caught.value
    assert not error.transient and error.status == 409
    assert error.message == (
        f"applying Node {node}: another tool set fields Rackplane sets, to other values: "
        f'{DOMAIN_PATH} (set by "topograph"); Rackplane did not overwrite them'
    )
    assert 'change the field(s) back in "topograph"' in error.what_to_do
    assert '"Take over fields other tools set"' in error.what_to_do
    assert any("Apply failed with 1 conflict" in d for d in error.details)  # the server's own words
    assert not any("force" in w.query for w in kube_proxy.writes)
    assert live_labels(kube, node)[r.DOMAIN_LABEL] == "stale"  # untouched
    assert error.result.created == ["Namespace inference"]  # what came before stays (no transactions)


@integration
def test_with_force_conflicts_rackplane_takes_the_field_over_and_says_so(kube, kube_proxy, kube_testbed):
    register_nodes(kube, inventory())
    node = "gb-r01-t01"
    stale_domain_label(kube, node)
    with connect(kube_proxy, kube_testbed, force_conflicts=True) as target:
        desired = target.render(state(INFERENCE))
        diff = target.diff(desired)
        assert diff.conflicts == {f"Node {node}": [(DOMAIN_PATH, "topograph")]}
        assert any("the push takes it over" in line for line in diff.lines())
        result = target.apply(desired)
        assert result.taken_over == {f"Node {node}": [(DOMAIN_PATH, "topograph")]}
        assert (
            f'took over {DOMAIN_PATH} (set by "topograph") on Node {node} (the target may take over fields '
            "of other tools)"
        ) in result.log
        assert target.diff(desired).empty
    wanted = r.node_labels(inventory())[node][r.DOMAIN_LABEL]
    live = kube.get("Node", node)
    assert live["metadata"]["labels"][r.DOMAIN_LABEL] == wanted
    assert ("metadata", "labels", r.DOMAIN_LABEL) not in owned_paths(live, "topograph")
    node_writes = [w for w in kube_proxy.writes if w.path == f"/api/v1/nodes/{node}"]
    assert [w.query.get("force") for w in node_writes] == [None, ["true"]]  # force only after the 409
    assert all(w.query.get("force") is None for w in kube_proxy.writes if w not in node_writes)


@integration
def test_a_kueue_cel_rule_refusal_is_reported_with_its_message(kube, kube_proxy, kube_testbed):
    """Another tool created Rackplane's shared flavor with another topology: taking it over is refused by
    Kueue's transition rule (not checked locally: validate.py skips rules that read oldSelf)."""
    register_nodes(kube, inventory())
    kube.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "nvl72"},
            "spec": {"nodeLabels": {r.POOL_LABEL: "nvl72"}, "topologyName": "racks"},
        },
        "site-tool",
    )
    with (
        connect(kube_proxy, kube_testbed, force_conflicts=True) as target,
        pytest.raises(KubernetesRejected) as caught,
    ):
        target.apply(target.render(state(INFERENCE)))
    error = caught.value
    assert not error.transient and (error.status, error.reason) == (422, "Invalid")
    assert error.message.startswith("applying ResourceFlavor nvl72: the API server refused it (422 Invalid)")
    assert "topologyName is immutable when topologyName is set" in error.message
    assert "spec: Invalid value: topologyName is immutable when topologyName is set" in error.details
    assert "refuses to change this field of the existing object" in error.what_to_do
    assert error.result.taken_over == {"ResourceFlavor nvl72": [(".spec.topologyName", "site-tool")]}
    assert kube.get("ResourceFlavor", "nvl72")["spec"]["topologyName"] == "racks"


# --- dry run ------------------------------------------------------------------------------------------


@integration
def test_dry_run_changes_nothing(kube, kube_proxy, target):
    before = kube.resource_versions()
    desired = target.render(state(INFERENCE, VISION))
    result = target.apply(desired, dry_run=True)
    assert result.dry_run
    assert set(result.created) == {r.object_ref(o) for o in desired if o["kind"] != "Node"}
    assert kube.resource_versions() == before
    assert kube_proxy.writes and all(w.dry_run for w in kube_proxy.writes)
    # Objects in namespaces the dry run could not create were not sent (the server would say 404).
    assert not any(w.path.startswith("/api/v1/namespaces/inference/") for w in kube_proxy.writes)

    target.apply(desired)
    before = kube.resource_versions()
    writes = len(kube_proxy.writes)
    result = target.apply(target.render(state(INFERENCE, dedicated=None)), dry_run=True)
    assert result.deleted == VISION_OBJECTS and len(result.updated) == 9
    assert all(w.dry_run for w in kube_proxy.writes[writes:])
    assert {w.method for w in kube_proxy.writes[writes:]} == {"PATCH", "DELETE"}
    assert kube.resource_versions() == before
    assert kube.get("Namespace", "vision")["status"]["phase"] == "Active"
    assert not target.diff(target.render(state(INFERENCE, dedicated=None))).empty


@integration
def test_invalid_object_stops_the_apply_before_anything_is_sent(kube_proxy, target):
    desired = target.render(state(INFERENCE))
    desired[-1] = {**desired[-1], "spec": {**desired[-1]["spec"], "accessMode": ["ReadWriteMany"]}}
    desired[3]["metadata"]["labels"][r.RACK_LABEL] = "r" * 64
    with pytest.raises(KubernetesRejected) as caught:
        target.apply(desired)
    error = caught.value
    assert not error.transient
    assert error.message == "2 object(s) would be rejected by the API server; nothing was sent"
    assert error.details[0].startswith(f"Node gb-r01-t03: metadata.labels['{r.RACK_LABEL}']: label value")
    assert error.details[1].startswith("PersistentVolumeClaim inference/department-data: spec: ")
    assert "'accessMode' was unexpected" in error.details[1]
    assert kube_proxy.requests == []  # not even a read


@integration
def test_empty_desired_set_is_refused(kube_proxy, target):
    with pytest.raises(ValueError, match="empty desired set"):
        target.apply([])
    assert kube_proxy.requests == []


# --- errors -------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_api_server_down_is_transient():
    target = KubernetesTarget(f"http://127.0.0.1:{_free_port()}", token="t", timeout=2)
    desired = target.render(state(INFERENCE))
    for call in (lambda: target.apply(desired), lambda: target.diff(desired), target.read_back):
        with pytest.raises(KubernetesUnavailable) as caught:
            call()
        assert caught.value.transient
        assert "is not reachable" in caught.value.message


@integration
def test_api_server_stopping_mid_way_is_transient(kube, kube_proxy, target):
    desired = target.render(state(INFERENCE))
    kube_proxy.refuse_connections()
    with pytest.raises(KubernetesUnavailable, match="is not reachable"):
        target.apply(desired)
    kube_proxy.accept_connections()
    assert target.apply(desired).created  # back: the retry goes through


@integration
@pytest.mark.parametrize("status", [500, 503, 429])
def test_server_errors_and_throttling_are_transient(kube, kube_proxy, target, status):
    kube_proxy.fail(status, "etcdserver: request timed out", method="PATCH", path="/clusterqueues/")
    with pytest.raises(KubernetesUnavailable) as caught:
        target.apply(target.render(state(INFERENCE)))
    assert caught.value.status == status
    assert "etcdserver: request timed out" in caught.value.message
    # What happened before the failure is reported; a retry converges (apply is idempotent).
    assert "Namespace inference" in caught.value.result.created
    assert kube.get("Namespace", "inference") is not None and kube.get("ClusterQueue", "inference") is None
    result = target.apply(target.render(state(INFERENCE)))
    assert "ClusterQueue inference" in result.created
    assert "Namespace inference" in result.unchanged


@integration
@pytest.mark.slow(reason="waits for the client to give up")
def test_timeout_is_transient(cluster, kube_proxy, kube_testbed):
    kube_proxy.fail(0, method="GET", path="/api/v1/nodes", delay=1.5)
    with (
        connect(kube_proxy, kube_testbed, timeout=0.5) as target,
        pytest.raises(KubernetesUnavailable, match=r"is not reachable.*(?i:timeout|timed out)"),
    ):
        target.diff(target.render(state(INFERENCE)))


@pytest.fixture
def older_cluster_queue_crd(kube):
    """The cluster's ClusterQueue CRD without `spec.preemption.withinClusterQueue` (a Kueue older than the
    CRDs Rackplane renders for), applied as the testbed applies its CRDs; the packaged CRD is restored after
    the test, and both waits last until the server serves the CRD it was given."""
    packaged = yaml.safe_load((CRDS / "kueue.x-k8s.io_clusterqueues.yaml").read_text())
    older = copy.deepcopy(packaged)
    for version in older["spec"]["versions"]:
        preemption = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["preemption"]
        del preemption["properties"]["withinClusterQueue"]
    probe = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "crd-probe"},
        "spec": {"preemption": {"withinClusterQueue": "LowerPriority"}},
    }

    def install(crd: dict[str, Any], field_declared: bool) -> None:
        path = f"{CRD_PATH}/{crd['metadata']['name']}"
        kube.ok(
            "PATCH",
            path,
            crd,
            content_type="application/apply-patch+yaml",
            fieldManager="kube-testbed",
            force="true",
        )
        deadline = time.monotonic() + 30
        while True:  # a dry-run apply as admin says which schema the server serves now (429: re-initialising)
            status, answer = kube.request(
                "PATCH",
                "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/crd-probe",
                probe,
                content_type="application/apply-patch+yaml",
                fieldManager="probe",
                dryRun="All",
            )
            if (status < 400) == field_declared and status != 429:
                return
            assert time.monotonic() < deadline, (
                f"the CRD change was not served within 30 s: {status} {answer}"
            )
            time.sleep(0.05)

    install(older, field_declared=False)
    try:
        yield
    finally:
        install(packaged, field_declared=True)


@integration
def test_a_field_the_clusters_crd_lacks_is_permanent_and_says_upgrade_kueue(
    kube, kube_proxy, kube_testbed, older_cluster_queue_crd
):
    register_nodes(kube, inventory())
    with connect(kube_proxy, kube_testbed) as target, pytest.raises(KubernetesRejected) as caught:
        target.apply(target.render(state(INFERENCE)))
    error = caught.value
    assert not error.transient and error.status == 500  # retrying cannot help: not KubernetesUnavailable
    assert error.message.startswith(
        "ClusterQueue inference: the cluster's CRD for ClusterQueue (kueue.x-k8s.io/v1beta2) does not "
        "declare .spec.preemption.withinClusterQueue, which Rackplane sets"
    )
    assert "field not declared in schema" in error.message  # the server's own words
    assert error.what_to_do.startswith("upgrade Kueue on the cluster")
    assert "integrations/kubernetes/crds/" in error.what_to_do
    cq_writes = [w for w in kube_proxy.writes if "/clusterqueues/" in w.path]
    assert len(cq_writes) == 1  # sent once, not retried
    assert error.result.created[:1] == ["Namespace inference"]


# --- RBAC ---------------------------------------------------------------------------------------------

LIMITED = "rackplane-no-node-patch"


@pytest.fixture
def token_without_node_patch(kube):
    """A service account bound to deploy/kubernetes/rbac.yaml's rules minus `patch` on nodes, and its token
    from the TokenRequest API. Removed after the test (the wipe does not know RBAC objects)."""
    shipped = next(d for d in yaml.safe_load_all(RBAC.read_text()) if d and d["kind"] == "ClusterRole")
    rules = copy.deepcopy(shipped["rules"])
    for rule in rules:
        if rule["resources"] == ["nodes"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != "patch"]
    paths = [
        f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{LIMITED}",
        f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{LIMITED}",
        f"/api/v1/namespaces/rackplane/serviceaccounts/{LIMITED}",
    ]

    def remove() -> None:
        for path in paths:
            kube.request("DELETE", path)

    remove()  # a run that was killed may have left them
    try:
        kube.ok(
            "POST",
            "/api/v1/namespaces/rackplane/serviceaccounts",
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": LIMITED}},
        )
        kube.ok(
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": LIMITED},
                "rules": rules,
            },
        )
        kube.ok(
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": LIMITED},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": LIMITED},
                "subjects": [{"kind": "ServiceAccount", "name": LIMITED, "namespace": "rackplane"}],
            },
        )
        answer = kube.ok(
            "POST",
            f"/api/v1/namespaces/rackplane/serviceaccounts/{LIMITED}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 600},
            },
        )
        token = answer["status"]["token"]
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:rackplane:{LIMITED}",
                "groups": ["system:serviceaccounts"],
                "resourceAttributes": {"verb": "list", "resource": "nodes"},
            },
        }
        deadline = time.monotonic() + 10
        while not kube.ok("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"].get(
            "allowed"
        ):  # the authorizer sees a new binding a moment later
            assert time.monotonic() < deadline, "the new ClusterRoleBinding was not in effect within 10 s"
            time.sleep(0.05)
        yield token
    finally:
        remove()


@integration
def test_a_missing_rbac_verb_fails_naming_it_and_the_rbac_file(
    cluster, kube_proxy, kube_testbed, token_without_node_patch
):
    with (
        connect(kube_proxy, kube_testbed, token=token_without_node_patch) as target,
        pytest.raises(KubernetesRejected) as caught,
    ):
        target.apply(target.render(state(INFERENCE)))
    error = caught.value
    assert not error.transient and (error.status, error.reason) == (403, "Forbidden")
    assert error.message.startswith("applying Node gb-r01-t01: the API server refused it (403 Forbidden)")
    assert (
        f'User "system:serviceaccount:rackplane:{LIMITED}" cannot patch resource "nodes" in API group ""'
        in error.message
    )
    assert "RBAC" in error.what_to_do and "deploy/kubernetes/rbac.yaml" in error.what_to_do
    assert error.result.created == ["Namespace inference"]


@integration
def test_the_shipped_rbac_is_enough_for_a_full_apply_and_prune_cycle(kube, kube_proxy, kube_testbed, target):
    review = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": kube_testbed.token},
    }
    answer = kube.ok("POST", "/apis/authentication.k8s.io/v1/tokenreviews", review)
    assert answer["status"]["user"]["username"] == SA_USER
    full = state(INFERENCE, VISION)
    target.apply(target.render(full), dry_run=True)
    target.apply(target.render(full))
    assert target.diff(target.render(full)).empty
    assert len(target.read_back()) == len(target.render(full))
    smaller = state(INFERENCE, dedicated=None)
    result = target.apply(target.render(smaller))  # updates labels, deletes vision's objects (prune)
    assert result.deleted == VISION_OBJECTS and result.updated
    assert target.apply(target.render(smaller)).changed is False
    assert {w.authorization for w in kube_proxy.requests} == {f"Bearer {kube_testbed.token}"}
    assert {w.method for w in kube_proxy.requests} == {"GET", "PATCH", "DELETE"}


@integration
def test_a_real_400_for_a_body_of_the_wrong_kind(target):
    bad = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gb-r01-t01"}}
    status, data = target.request(
        "PATCH",
        "/api/v1/nodes/gb-r01-t01",
        query=[("fieldManager", FIELD_MANAGER)],
        body=bad,
        content_type="application/apply-patch+yaml",
    )
    assert status == 400
    error = target._rejected("applying Node gb-r01-t01", status, data)
    assert isinstance(error, KubernetesRejected) and not error.transient
    assert error.message == (
        "applying Node gb-r01-t01: the API server refused it (400 BadRequest): "
        "invalid object type: /v1, Kind=Namespace"
    )


@integration
def test_missing_crds_are_refused_before_any_write(cluster, kube_proxy, target):
    # The shared test server has Kueue; a cluster without it answers discovery of the group with 404, which
    # the proxy stands in for (uninstalling the CRDs would pull them from under every other test).
    kube_proxy.fail(
        404,
        "the server could not find the requested resource",
        method="GET",
        path="/apis/kueue.x-k8s.io/v1beta2",
        reason="NotFound",
    )
    with pytest.raises(KubernetesRejected, match=r"does not serve kueue.x-k8s.io/v1beta2") as caught:
        target.apply(target.render(state(INFERENCE)))
    assert "install the CRDs" in caught.value.what_to_do
    assert kube_proxy.writes == []


# --- configuration ------------------------------------------------------------------------------------


@integration
def test_kubeconfig_configures_url_ca_and_token(cluster, kube_proxy, kube_testbed, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "gb",
                        "cluster": {"server": kube_proxy.url, "certificate-authority": kube_testbed.ca},
                    }
                ],
                "users": [{"name": "rackplane", "user": {"token": kube_testbed.token}}],
                "contexts": [{"name": "gb", "context": {"cluster": "gb", "user": "rackplane"}}],
                "current-context": "gb",
            }
        )
    )
    with KubernetesTarget(kubeconfig=kubeconfig) as target:
        assert target.diff(target.render(state(INFERENCE))).create
    assert kube_proxy.requests[-1].authorization == f"Bearer {kube_testbed.token}"


@integration
def test_ca_certificate_as_pem_text_verifies_the_real_server(cluster, kube_proxy, kube_testbed):
    pem = pathlib.Path(kube_testbed.ca).read_text()
    with KubernetesTarget(kube_proxy.url, token=kube_testbed.token, ca_cert=pem) as target:
        assert len(target.list_objects("v1", "Node")) == 36


@integration
def test_a_ca_that_did_not_sign_the_server_is_a_configuration_error(cluster, kube_proxy, kube_testbed):
    with (
        KubernetesTarget(kube_proxy.url, token=kube_testbed.token, ca_cert=certifi.where()) as target,
        pytest.raises(KubernetesConfigurationError, match=r"trusted connection|TLS") as caught,
    ):
        target.list_objects("v1", "Node")
    assert not caught.value.transient
    assert kube_proxy.requests == []


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"kubeconfig": "/nonexistent/kubeconfig"}, "cannot load kubeconfig"),
        ({"api_url": None}, "no API server URL"),
        ({"api_url": "https://127.0.0.1:6443", "ca_cert": "/nonexistent/ca.pem"}, "CA certificate"),
    ],
)
def test_bad_configuration_is_permanent(kwargs, match):
    with pytest.raises(KubernetesConfigurationError, match=match) as caught:
        KubernetesTarget(**kwargs)
    assert not caught.value.transient


def test_ca_certificate_as_pem_text_is_written_to_a_private_file_and_removed():
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    target = KubernetesTarget("https://127.0.0.1:6443", token="t", ca_cert=pem)
    path = target.api.configuration.ssl_ca_cert
    with open(path) as handle:
        assert handle.read() == pem
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    target.close()
    assert not os.path.exists(path)


# --- field comparison ---------------------------------------------------------------------------------


def offline_target() -> KubernetesTarget:
    """A target that is never connected: for the comparison logic alone."""
    return KubernetesTarget("https://127.0.0.1:6443", token="t")


def test_quantities_compare_by_value_as_the_api_server_canonicalises_them():
    target = offline_target()
    desired = next(o for o in target.render(state(INFERENCE)) if o["kind"] == "PersistentVolume")
    live = json.loads(json.dumps(desired))
    live["spec"]["capacity"]["storage"] = "2Ti"  # what the API server returns for 2048Gi
    live["spec"]["volumeMode"] = "Filesystem"
    live["metadata"]["managedFields"] = [
        {
            "manager": "rackplane",
            "operation": "Apply",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {
                    "f:labels": {
                        ".": {},
                        "f:app.kubernetes.io/managed-by": {},
                        "f:rackplane.io/department": {},
                    }
                },
                "f:spec": {f"f:{k}": ({"f:storage": {}} if k == "capacity" else {}) for k in desired["spec"]},
            },
        }
    ]
    assert target._step(desired, live).action == "unchanged"
    live["spec"]["capacity"]["storage"] = "1Ti"
    step = target._step(desired, live)
    assert (step.action, step.changes) == ("update", [FieldChange("spec.capacity.storage", "1Ti", "2048Gi")])
    assert step.conflicts == []  # only Rackplane manages it


def test_conflicts_are_predicted_from_other_managers_fields():
    target = offline_target()
    desired = rendered(target.render(state(INFERENCE)), "ResourceFlavor", "nvl72")
    live = copy.deepcopy(desired)
    live["spec"]["topologyName"] = "racks"
    live["metadata"]["managedFields"] = [
        {
            "manager": "site-tool",
            "operation": "Update",
            "fieldsV1": {
                "f:spec": {"f:topologyName": {}, "f:nodeLabels": {".": {}, "f:rackplane.io/pool": {}}}
            },
        },
        {"manager": "kueue", "operation": "Update", "subresource": "status", "fieldsV1": {"f:status": {}}},
    ]
    step = target._step(desired, live)
    # Only the field whose value differs conflicts: the pool label has the value Rackplane sets (shared).
    assert step.conflicts == [(".spec.topologyName", "site-tool")]


def test_owned_paths_reads_real_managed_fields():
    node = {
        "metadata": {
            "managedFields": [
                {
                    "manager": "rackplane",
                    "operation": "Apply",
                    "fieldsV1": {
                        "f:metadata": {"f:labels": {".": {}, "f:rackplane.io/rack": {}}},
                        "f:spec": {
                            "f:resourceGroups": {'k:{"coveredResources":["nvidia.com/gpu"]}': {".": {}}},
                            "f:cohortName": {},
                        },
                    },
                },
                {"manager": "rackplane", "operation": "Update", "fieldsV1": {"f:status": {}}},
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:a": {}}}},
                },
            ]
        }
    }
    assert owned_paths(node) == [
        ("metadata", "labels", "rackplane.io/rack"),
        ("spec", "cohortName"),
        ("spec", "resourceGroups"),
    ]
