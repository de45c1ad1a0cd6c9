"""KubernetesTarget against the local API stand-in (tests/integrations/k8s_standin.py).

No Kubernetes API server can run here; the stand-in speaks the server-side-apply contract the target relies
on (field managers, create-if-missing, dry runs, conflicts, label selectors), and the tests check what
Rackplane sends and does with each answer.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from typing import Any

import pytest

from integrations.kubernetes import render as r
from integrations.kubernetes.target import (
    FIELD_MANAGER,
    FieldChange,
    KubernetesConfigurationError,
    KubernetesRejected,
    KubernetesState,
    KubernetesTarget,
    KubernetesUnavailable,
    owned_paths,
)
from tests.integrations.k8s_standin import KubeStandIn
from tests.integrations.kubernetes.test_render import INFERENCE, NFS, inventory, tenant

VISION = tenant("vision", pkey=0x11, vlan_id=101, vxlan_vni=10101, guaranteed_gpus=8, limit_gpus=None)
TOKEN = "rackplane-test-token"


def register_nodes(standin: KubeStandIn, state: r.InventoryState) -> None:
    """The cluster's nodes, as the kubelet registers them (Rackplane never creates nodes)."""
    for node in state.nodes:
        standin.add(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": node.hostname,
                    "labels": {"kubernetes.io/hostname": node.hostname, "kubernetes.io/os": "linux"},
                },
                "spec": {"podCIDR": "10.244.0.0/24"},
            },
            manager="kubelet",
        )


@pytest.fixture
def standin():
    with KubeStandIn() as server:
        register_nodes(server, inventory())
        yield server


@pytest.fixture
def target(standin):
    with KubernetesTarget(standin.url, token=TOKEN, timeout=5) as t:
        yield t


def state(*tenants, dedicated: str | None = "inference") -> KubernetesState:
    return KubernetesState(inventory(dedicated), tuple(tenants), NFS)


def foreign_apply(
    standin: KubeStandIn, obj: dict[str, Any], manager: str, url_kind: str | None = None, **query: str
) -> tuple[int, Any]:
    """A server-side apply from another tool (straight HTTP, not Rackplane's client), to the URL of
    `url_kind` (default: the body's kind)."""
    meta = obj["metadata"]
    kind = url_kind or obj["kind"]
    plural = {"Node": "nodes", "Namespace": "namespaces", "ResourceFlavor": "resourceflavors"}[kind]
    base = "/apis/kueue.x-k8s.io/v1beta2" if kind == "ResourceFlavor" else "/api/v1"
    params = "&".join(f"{k}={v}" for k, v in {"fieldManager": manager, **query}.items())
    request = urllib.request.Request(
        f"{standin.url}{base}/{plural}/{meta['name']}?{params}",
        data=json.dumps(obj).encode(),
        method="PATCH",
        headers={"Content-Type": "application/apply-patch+yaml"},
    )
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def live_labels(standin: KubeStandIn, node: str) -> dict[str, str]:
    return standin.get("Node", node)["metadata"]["labels"]


# --- apply --------------------------------------------------------------------------------------------


def test_first_apply_creates_everything_in_order(standin, target):
    desired = target.render(state(INFERENCE))
    result = target.apply(desired)
    assert not result.dry_run
    assert result.created == [r.object_ref(o) for o in desired if o["kind"] != "Node"]
    assert result.updated == [r.object_ref(o) for o in desired if o["kind"] == "Node"]
    assert result.deleted == result.skipped == []
    # The stand-in refuses a namespaced object before its namespace: the order was right.
    patches = [q.path for q in standin.writes]
    assert patches[0] == "/api/v1/namespaces/inference"
    assert all(q.method == "PATCH" for q in standin.writes)
    for q in standin.writes:
        assert q.query == {"fieldManager": "rackplane", "force": "true"}
        assert q.content_type == "application/apply-patch+yaml"
        assert q.authorization == f"Bearer {TOKEN}"
    # What the cluster holds is what was rendered.
    for obj in desired:
        meta = obj["metadata"]
        live = standin.get(obj["kind"], meta["name"], meta.get("namespace", ""))
        assert live is not None, r.object_ref(obj)
        if obj["kind"] == "Node":
            assert live["metadata"]["labels"] == {
                **meta["labels"],
                "kubernetes.io/hostname": meta["name"],
                "kubernetes.io/os": "linux",
            }
            assert live["spec"] == {"podCIDR": "10.244.0.0/24"}  # the kubelet's fields are untouched
        else:
            assert {k: v for k, v in live.items() if k != "metadata"} == {
                k: v for k, v in obj.items() if k != "metadata"
            }
            assert live["metadata"]["labels"] == meta["labels"]
    assert standin.names("ClusterQueue") == ["inference"]
    read = target.read_back()
    assert [r.object_ref(o) for o in read] == [r.object_ref(o) for o in desired]
    assert [o for o in read if o["kind"] == "Node"] == [o for o in desired if o["kind"] == "Node"]


def test_second_apply_changes_nothing(standin, target):
    desired = target.render(state(INFERENCE, VISION))
    target.apply(desired)
    before = standin.snapshot()
    writes = len(standin.writes)
    diff = target.diff(desired)
    assert diff.empty and diff.lines() == []
    result = target.apply(desired)
    assert not result.changed
    assert result.unchanged == [r.object_ref(o) for o in desired]
    assert len(standin.writes) == writes  # not a single PATCH or DELETE
    assert standin.snapshot() == before


def test_diff_reports_creates_field_changes_and_removals(standin, target):
    target.apply(target.render(state(INFERENCE, VISION)))
    bigger = tenant(guaranteed_gpus=40, limit_gpus=None)  # limit removed: quota key and borrowing limit go
    diff = target.diff(target.render(state(bigger)))
    assert diff.create == []
    assert diff.change == {
        "ClusterQueue inference": [
            FieldChange("spec.resourceGroups[0].flavors[0].resources[0].nominalQuota", "36", "40"),
            FieldChange("spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit", "36", None),
        ],
        "ResourceQuota inference/rackplane-gpu-quota": [
            FieldChange('spec.hard["requests.nvidia.com/gpu"]', "72", None)
        ],
    }
    assert diff.delete == [
        "PersistentVolumeClaim vision/department-data",
        "PersistentVolume rackplane-vision-data",
        "NetworkPolicy vision/rackplane-department-isolation",
        "ResourceQuota vision/rackplane-gpu-quota",
        "LocalQueue vision/default",
        "ClusterQueue vision",
        "Namespace vision",
    ]
    result = target.apply(target.render(state(bigger)))
    assert result.updated == ["ClusterQueue inference", "ResourceQuota inference/rackplane-gpu-quota"]
    rq = standin.get("ResourceQuota", "rackplane-gpu-quota", "inference")
    assert rq["spec"] == {"hard": {}}
    assert target.diff(target.render(state(bigger))).empty


def test_removed_department_is_pruned_and_unlabelled_objects_stay(standin, target):
    target.apply(target.render(state(INFERENCE, VISION)))
    # Objects Rackplane does not manage: unlabelled, labelled by someone else, or of a kind it never prunes.
    standin.add(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "monitoring"}}, manager="kubectl"
    )
    standin.add(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "manual", "labels": {"app.kubernetes.io/managed-by": "helm"}},
            "spec": {},
        },
        manager="helm",
    )
    standin.add(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "notes",
                "namespace": "monitoring",
                "labels": {"app.kubernetes.io/managed-by": "rackplane"},
            },
        },
        manager="kubectl",
    )
    result = target.apply(target.render(state(INFERENCE)))
    assert result.deleted == [
        "PersistentVolumeClaim vision/department-data",
        "PersistentVolume rackplane-vision-data",
        "NetworkPolicy vision/rackplane-department-isolation",
        "ResourceQuota vision/rackplane-gpu-quota",
        "LocalQueue vision/default",
        "ClusterQueue vision",
        "Namespace vision",
    ]
    assert all(q.method == "DELETE" for q in standin.writes[-7:])
    assert standin.names("Namespace") == ["inference", "monitoring"]
    assert standin.names("ClusterQueue") == ["inference"]
    assert standin.names("PersistentVolume") == ["rackplane-inference-data"]
    assert "manual" in standin.names("ResourceFlavor")
    assert standin.names("ConfigMap") == ["monitoring/notes"]
    assert len(standin.names("Node")) == 36  # nodes are never deleted
    assert target.diff(target.render(state(INFERENCE))).empty


def test_dropped_node_label_disappears_while_other_managers_labels_stay(standin, target):
    target.apply(target.render(state(INFERENCE)))
    node = "gb-r02-t10"
    status, _ = foreign_apply(
        standin,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node, "labels": {"example.com/team": "hpc"}},
        },
        "site-operator",
    )
    assert status == 200
    assert live_labels(standin, node)["rackplane.io/department"] == "inference"

    undedicated = state(INFERENCE, dedicated=None)  # the partition is no longer the department's
    diff = target.diff(target.render(undedicated))
    assert diff.change[f"Node {node}"] == [
        FieldChange('metadata.labels["rackplane.io/service-tier"]', "dedicated", "shared"),
        FieldChange('metadata.labels["rackplane.io/department"]', "inference", None),
    ]
    target.apply(target.render(undedicated))
    labels = live_labels(standin, node)
    assert "rackplane.io/department" not in labels
    assert labels["rackplane.io/service-tier"] == "shared"
    assert labels["example.com/team"] == "hpc"  # another manager's label stays
    assert labels["kubernetes.io/hostname"] == node  # and the kubelet's
    managers = {e["manager"] for e in standin.get("Node", node)["metadata"]["managedFields"]}
    assert managers == {"kubelet", "site-operator", "rackplane"}
    assert target.diff(target.render(undedicated)).empty


def test_node_leaving_the_inventory_loses_only_rackplanes_labels(standin, target):
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
    assert standin.get("Node", "gb-r01-t18")["metadata"]["labels"] == {
        "kubernetes.io/hostname": "gb-r01-t18",
        "kubernetes.io/os": "linux",
    }
    assert target.diff(desired).empty


def test_node_not_registered_is_skipped_never_created(standin, target):
    full = inventory()
    extra = r.InventoryState(
        full.racks, full.partitions, [*full.nodes, r.NodeSpec("gb-r02-t19", "gb-r02", "p2")]
    )
    desired = r.desired_objects(extra, [INFERENCE], nfs_server=NFS)
    assert target.diff(desired).missing_nodes == ["gb-r02-t19"]
    result = target.apply(desired)
    assert result.skipped == ["Node gb-r02-t19"]
    assert standin.get("Node", "gb-r02-t19") is None
    assert not any("gb-r02-t19" in q.path for q in standin.writes)


def test_rackplane_takes_over_its_labels_from_another_manager(standin, target):
    node = "gb-r01-t01"
    foreign_apply(
        standin,
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {r.DOMAIN_LABEL: "stale"}}},
        "topograph",
    )
    desired = target.render(state(INFERENCE))
    diff = target.diff(desired)
    assert (
        FieldChange(
            f'metadata.labels["{r.DOMAIN_LABEL}"]', "stale", r.node_labels(inventory())[node][r.DOMAIN_LABEL]
        )
        in diff.change[f"Node {node}"]
    )
    target.apply(desired)  # force=true: Rackplane is the source of truth for its labels
    assert live_labels(standin, node)[r.DOMAIN_LABEL] == r.node_labels(inventory())[node][r.DOMAIN_LABEL]
    assert target.diff(desired).empty


def test_dry_run_changes_nothing(standin, target):
    before = standin.snapshot()
    desired = target.render(state(INFERENCE, VISION))
    result = target.apply(desired, dry_run=True)
    assert result.dry_run
    assert set(result.created) == {r.object_ref(o) for o in desired if o["kind"] != "Node"}
    assert standin.snapshot() == before
    assert standin.writes and all(q.dry_run for q in standin.writes)
    # Objects in namespaces the dry run could not create were not sent (the server would say 404).
    assert not any(q.path.startswith("/api/v1/namespaces/inference/") for q in standin.writes)

    target.apply(desired)
    before = standin.snapshot()
    result = target.apply(target.render(state(INFERENCE, dedicated=None)), dry_run=True)
    assert len(result.deleted) == 7 and len(result.updated) == 9
    assert standin.snapshot() == before
    assert not target.diff(target.render(state(INFERENCE, dedicated=None))).empty


def test_invalid_object_stops_the_apply_before_anything_is_sent(standin, target):
    desired = target.render(state(INFERENCE))
    desired[-1] = {**desired[-1], "spec": {**desired[-1]["spec"], "accessMode": ["ReadWriteMany"]}}
    desired[3]["metadata"]["labels"][r.RACK_LABEL] = "r" * 64
    standin.requests.clear()
    with pytest.raises(KubernetesRejected) as caught:
        target.apply(desired)
    error = caught.value
    assert not error.transient
    assert error.message == "2 object(s) would be rejected by the API server; nothing was sent"
    assert error.details[0].startswith(f"Node gb-r01-t03: metadata.labels['{r.RACK_LABEL}']: label value")
    assert error.details[1].startswith("PersistentVolumeClaim inference/department-data: spec: ")
    assert "'accessMode' was unexpected" in error.details[1]
    assert standin.requests == []  # not even a read
    assert standin.writes == []


def test_empty_desired_set_is_refused(target, standin):
    with pytest.raises(ValueError, match="empty desired set"):
        target.apply([])
    assert standin.requests == []


# --- errors -------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_api_server_down_is_transient():
    target = KubernetesTarget(f"http://127.0.0.1:{_free_port()}", token=TOKEN, timeout=2)
    desired = target.render(state(INFERENCE))
    for call in (lambda: target.apply(desired), lambda: target.diff(desired), target.read_back):
        with pytest.raises(KubernetesUnavailable) as caught:
            call()
        assert caught.value.transient
        assert "is not reachable" in caught.value.message


def test_api_server_stopping_mid_way_is_transient(standin, target):
    desired = target.render(state(INFERENCE))
    standin.stop()
    with pytest.raises(KubernetesUnavailable):
        target.apply(desired)


@pytest.mark.parametrize("status", [500, 503, 429])
def test_server_errors_and_throttling_are_transient(standin, target, status):
    standin.fail(status, "etcdserver: request timed out", method="PATCH", path="/clusterqueues/")
    with pytest.raises(KubernetesUnavailable) as caught:
        target.apply(target.render(state(INFERENCE)))
    assert caught.value.status == status
    assert "etcdserver: request timed out" in caught.value.message
    # What happened before the failure is reported; a retry converges (apply is idempotent).
    assert "Namespace inference" in caught.value.result.created
    result = target.apply(target.render(state(INFERENCE)))
    assert "ClusterQueue inference" in result.created
    assert "Namespace inference" in result.unchanged


@pytest.mark.slow  # waits for the client to give up
def test_timeout_is_transient(standin):
    standin.fail(0, method="GET", path="/api/v1/nodes", delay=1.5)
    with (
        KubernetesTarget(standin.url, token=TOKEN, timeout=0.5) as target,
        pytest.raises(KubernetesUnavailable, match=r"is not reachable.*(?i:timeout|timed out)"),
    ):
        target.diff(target.render(state(INFERENCE)))


def test_422_is_rejected_with_the_api_servers_message(standin, target):
    message = (
        'ClusterQueue.kueue.x-k8s.io "inference" is invalid: spec.resourceGroups[0].flavors[0].name: '
        'Invalid value: "nvl72": flavor not found'
    )
    standin.fail(422, message, reason="Invalid", method="PATCH", path="/clusterqueues/inference")
    with pytest.raises(KubernetesRejected) as caught:
        target.apply(target.render(state(INFERENCE)))
    error = caught.value
    assert not error.transient
    assert (error.status, error.reason) == (422, "Invalid")
    assert message in error.message
    assert error.message.startswith(
        "applying ClusterQueue inference: the API server refused it (422 Invalid)"
    )
    assert "ClusterQueue inference" not in error.result.created


def test_403_is_rejected(standin, target):
    standin.fail(
        403,
        'nodes is forbidden: User "system:serviceaccount:rackplane:rackplane" cannot list resource "nodes"',
        reason="Forbidden",
        method="GET",
        path="/api/v1/nodes",
    )
    with pytest.raises(KubernetesRejected, match="cannot list resource") as caught:
        target.diff(target.render(state(INFERENCE)))
    assert caught.value.status == 403
    assert "RBAC" in caught.value.what_to_do


def test_real_422_from_a_body_with_the_wrong_kind(standin, target):
    bad = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gb-r01-t01"}}
    status, data = target.request(
        "PATCH",
        "/api/v1/nodes/gb-r01-t01",
        query=[("fieldManager", FIELD_MANAGER)],
        body=bad,
        content_type="application/apply-patch+yaml",
    )
    assert status == 422
    error = target._rejected("applying Node gb-r01-t01", status, data)
    assert isinstance(error, KubernetesRejected)
    assert "apiVersion/kind" in error.message and error.details == ["kind: does not match the URL"]


def test_missing_crds_are_refused_before_any_write():
    with KubeStandIn(crds=False) as server:
        register_nodes(server, inventory())
        with (
            KubernetesTarget(server.url, token=TOKEN) as target,
            pytest.raises(KubernetesRejected, match=r"does not serve kueue.x-k8s.io/v1beta2") as caught,
        ):
            target.apply(target.render(state(INFERENCE)))
        assert "install the CRDs" in caught.value.what_to_do
        assert server.writes == []


# --- configuration ------------------------------------------------------------------------------------


def test_kubeconfig_configures_url_and_token(standin, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "gb", "cluster": {"server": standin.url}}],
                "users": [{"name": "rackplane", "user": {"token": "from-kubeconfig"}}],
                "contexts": [{"name": "gb", "context": {"cluster": "gb", "user": "rackplane"}}],
                "current-context": "gb",
            }
        )
    )
    with KubernetesTarget(kubeconfig=kubeconfig) as target:
        assert target.diff(target.render(state(INFERENCE))).create
    assert standin.requests[-1].authorization == "Bearer from-kubeconfig"


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
    target = KubernetesTarget("https://127.0.0.1:6443", token=TOKEN, ca_cert=pem)
    path = target.api.configuration.ssl_ca_cert
    with open(path) as handle:
        assert handle.read() == pem
    target.close()
    assert not os.path.exists(path)


# --- field comparison ---------------------------------------------------------------------------------


def test_quantities_compare_by_value_as_the_api_server_canonicalises_them(target):
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
