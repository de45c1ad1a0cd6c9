"""The Kubernetes testbed itself (scripts/kube-testbed.sh): a real API server with RBAC, the CRDs Rackplane
writes, and the `rackplane` service account bound to deploy/kubernetes/rbac.yaml."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from integrations.kubernetes.client import KubernetesClient
from integrations.kubernetes.errors import KubernetesUnavailable
from tests.integrations.kube_testbed import KINDS

pytestmark = pytest.mark.integration

RBAC = pathlib.Path(__file__).resolve().parents[3] / "deploy" / "kubernetes" / "rbac.yaml"


def client(url: str, testbed, token: str | None = None) -> KubernetesClient:
    return KubernetesClient(url, token=token or testbed.token, ca_cert=testbed.ca, timeout=5)


def test_the_server_is_a_real_kube_apiserver_with_the_crds(kube, kube_testbed):
    status, version = kube.request("GET", "/version")
    assert status == 200 and version["gitVersion"].startswith("v1.36.")
    crds = kube.ok("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")["items"]
    names = {c["metadata"]["name"] for c in crds}
    assert {"clusterqueues.kueue.x-k8s.io", "computedomains.resource.nvidia.com"} <= names
    for crd in crds:
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conditions["Established"] == "True"


def test_rackplanes_token_is_the_service_account_with_exactly_the_shipped_rbac(kube, kube_testbed):
    review = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": kube_testbed.token},
    }
    answer = kube.ok("POST", "/apis/authentication.k8s.io/v1/tokenreviews", review)
    assert answer["status"]["authenticated"] is True
    assert answer["status"]["user"]["username"] == "system:serviceaccount:rackplane:rackplane"
    role = kube.ok("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/rackplane")
    shipped = next(d for d in yaml.safe_load_all(RBAC.read_text()) if d and d["kind"] == "ClusterRole")
    assert [(r.get("apiGroups"), r["resources"], r["verbs"]) for r in role["rules"]] == [
        (r["apiGroups"], r["resources"], r["verbs"]) for r in shipped["rules"]
    ]


def test_the_service_account_may_label_nodes_but_not_create_them(kube, kube_testbed):
    kube.register_node("gb-r01-t01")
    with client(kube_testbed.url, kube_testbed) as c:
        assert [n["metadata"]["name"] for n in c.list_objects("v1", "Node")] == ["gb-r01-t01"]
        status, answer = c.request(
            "POST", "/api/v1/nodes", body={"apiVersion": "v1", "kind": "Node", "metadata": {"name": "x"}}
        )
    assert status == 403
    assert 'cannot create resource "nodes"' in answer["message"]
    assert "system:serviceaccount:rackplane:rackplane" in answer["message"]


def test_wipe_removes_terminating_namespaces_and_protected_claims(kube):
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "wipe-me"}})
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "wipe-me"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    created = kube.create(claim)
    assert "kubernetes.io/pvc-protection" in created["metadata"]["finalizers"]  # real admission at work
    kube.request("DELETE", "/api/v1/namespaces/wipe-me")
    assert kube.get("Namespace", "wipe-me")["status"]["phase"] == "Terminating"  # no controller here
    kube.wipe()
    assert kube.get("Namespace", "wipe-me") is None
    assert kube.names("PersistentVolumeClaim", live_only=False) == []


def test_wipe_deletes_by_collection_and_skips_a_cluster_nobody_wrote_to(kube, monkeypatch):
    for namespace in ("wipe-a", "wipe-b"):
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        for name in ("one", "two"):
            config = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace},
            }
            kube.create(config)
    kube.register_node("gb-r09-t01")
    kube.register_node("gb-r09-t02")
    sent = []
    request = kube.request

    def recording(method, path, *args, **kwargs):
        sent.append((method, path))
        return request(method, path, *args, **kwargs)

    monkeypatch.setattr(kube, "request", recording)
    kube.wipe()
    deletes = [path for method, path in sent if method == "DELETE"]
    # One request per kind and namespace, none per object.
    assert {"/api/v1/namespaces/wipe-a/configmaps", "/api/v1/namespaces/wipe-b/configmaps"} <= set(deletes)
    assert "/api/v1/nodes" in deletes and not [path for path in deletes if path.endswith(("/one", "/two"))]
    assert not [name for name in kube.names("ConfigMap", live_only=False) if name.startswith("wipe-")]
    assert kube.names("Node", live_only=False) == []

    for _attempt in range(3):
        sent.clear()
        kube.wipe()  # nothing written since: one read of the revision, and nothing else
        if sent == [("GET", "/api/v1/namespaces")]:
            break
        # The API server renews its identity Lease every 10 s (and a running Kueue its leader Lease): such a
        # write moves the revision, so that wipe looked at every kind; it found nothing to delete.
        assert ("GET", "/api/v1/namespaces") in sent and not [m for m, _path in sent if m == "DELETE"], sent
    else:
        raise AssertionError(f"every wipe of an untouched cluster read every kind: {sent}")
    kube.register_node("gb-r09-t03")
    sent.clear()
    kube.wipe()  # a write since: wiped again
    assert ("DELETE", "/api/v1/nodes") in sent and kube.names("Node", live_only=False) == []


def test_the_proxy_passes_real_answers_and_injects_faults(kube, kube_proxy, kube_testbed):
    kube.register_node("gb-r01-t02")
    with client(kube_proxy.url, kube_testbed) as c:
        assert c.get_object("v1", "Node", "gb-r01-t02")["metadata"]["name"] == "gb-r01-t02"
        kube_proxy.fail(503, "etcdserver: leader changed", method="GET", path="/nodes")
        with pytest.raises(KubernetesUnavailable, match=r"503.*leader changed"):
            c.list_objects("v1", "Node")
        kube_proxy.refuse_connections()
        with pytest.raises(KubernetesUnavailable, match="not reachable"):
            c.list_objects("v1", "Node")
        kube_proxy.accept_connections()
        assert len(c.list_objects("v1", "Node")) == 1
    assert [r.method for r in kube_proxy.requests] == ["GET", "GET", "GET"]  # the refused one never arrived


def test_every_kind_the_tests_wipe_is_served(kube):
    for (api_version, kind), (plural, _) in KINDS.items():
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        resources = {r["name"] for r in kube.ok("GET", base)["resources"]}
        assert plural in resources, kind
