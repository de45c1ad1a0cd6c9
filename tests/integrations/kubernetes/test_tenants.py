"""A department's Kubernetes objects (integrations.kubernetes.tenants) against the real consumers' formats.

Kubernetes objects are validated with Rackplane's production validator (integrations/kubernetes/validate.py):
core kinds with kubernetes-validate (strict: unknown fields fail), Kueue kinds with jsonschema against the
openAPIV3Schema of the packaged CRDs (byte-identical copies of the published CRDs, made structural-strict,
the same way the API server rejects unknown fields with fieldValidation=Strict), plus the CRDs' CEL rules
(x-kubernetes-validations) evaluated with cel-python after applying the schema defaults, as the API server
does. The departments are tests/tenancy/test_renderers.py's. No Django: run with `-p no:django`.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml

from integrations.kubernetes import tenants as r
from integrations.kubernetes import validate as validation
from integrations.kubernetes.validate import validate
from tests.tenancy.test_renderers import ALL_TENANTS, EMPTY, ML, ODD_SLUG, VISION

SchemaError = validation.ValidationError  # an object that the real API server would reject


def kueue_crds() -> dict[str, dict[str, Any]]:
    """The CRDs production validates against, by kind."""
    return validation.crds()


def test_missing_crd_directory_fails_with_a_clear_message(tmp_path):
    with pytest.raises(validation.CRDsMissing, match=r"CRDs not found at .*crds.*must ship with"):
        validation.load_crds(tmp_path / "shared" / "reference" / "crds")
    (tmp_path / "kueue.x-k8s.io_cohorts.yaml").write_bytes(
        (validation.CRD_DIR / "kueue.x-k8s.io_cohorts.yaml").read_bytes()
    )
    with pytest.raises(validation.CRDsMissing, match=r"CRDs missing from .*'ClusterQueue'.*'LocalQueue'"):
        validation.load_crds(tmp_path)


NFS_SERVER = "nfs01.storage.example.com"


# --- Kubernetes objects -------------------------------------------------------------------------------


@pytest.mark.parametrize("t", ALL_TENANTS, ids=lambda t: t.slug)
def test_every_object_validates_against_the_real_schemas(t):
    objects = r.tenant_objects(t, NFS_SERVER)
    assert [o["kind"] for o in objects] == [
        "Namespace",
        "ResourceQuota",
        "NetworkPolicy",
        "ClusterQueue",
        "LocalQueue",
        "PersistentVolume",
        "PersistentVolumeClaim",
    ]
    for obj in objects:
        validate(obj)
        labels = obj["metadata"]["labels"]
        base = {"app.kubernetes.io/managed-by": "rackplane", "rackplane.io/department": t.slug}
        # The namespace also carries Pod Security Admission `restricted` (enforce, audit and warn).
        assert labels == (base | r.POD_SECURITY_LABELS if obj["kind"] == "Namespace" else base)
        if obj["kind"] not in ("Namespace", "ClusterQueue", "PersistentVolume"):
            assert obj["metadata"]["namespace"] == t.slug


def test_kueue_objects_use_the_newest_served_version_with_cohort_name():
    crd = kueue_crds()["ClusterQueue"]
    served = {v["name"]: v for v in crd["spec"]["versions"] if v["served"]}
    with_cohort_name = [
        name
        for name, v in served.items()
        if "cohortName" in v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    ]
    assert r.KUEUE_API_VERSION == f"kueue.x-k8s.io/{max(with_cohort_name)}" == "kueue.x-k8s.io/v1beta2"
    assert served["v1beta2"]["storage"] is True


@pytest.mark.parametrize("t", ALL_TENANTS, ids=lambda t: t.slug)
def test_yaml_stream_round_trips_and_validates(t):
    objects = r.tenant_objects(t, NFS_SERVER)
    text = r.to_yaml(objects)
    assert text.startswith("---\napiVersion: v1\nkind: Namespace\nmetadata:\n")
    docs = list(yaml.safe_load_all(text))
    assert docs == objects
    for doc in docs:
        validate(doc)
    assert r.to_yaml(objects) == text


def test_yaml_quotes_strings_that_yaml_1_2_reads_as_numbers():
    text = r.to_yaml([r.namespace(ODD_SLUG), r.cluster_queue(ODD_SLUG)])
    assert "  name: 'no'\n" in text
    assert "rackplane.io/department: 'no'\n" in text
    assert "nominalQuota: '16'\n" in text
    assert "cohortName: rackplane\n" in text  # ordinary strings stay plain


def test_cluster_queue_quota_borrowing_and_preemption():
    spec = r.cluster_queue(ML)["spec"]
    assert spec["cohortName"] == "rackplane"
    assert spec["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "ml-research"}}
    (group,) = spec["resourceGroups"]
    # The IMEX channels a multi-tray job's pods claim (Kueue's DRA mapping) beside the GPUs, the same quota.
    assert group["coveredResources"] == ["nvidia.com/gpu", "resource.nvidia.com/imex-channel"]
    assert group["flavors"] == [
        {
            "name": "nvl72",
            "resources": [
                {"name": "nvidia.com/gpu", "nominalQuota": "16", "borrowingLimit": "32"},
                {"name": "resource.nvidia.com/imex-channel", "nominalQuota": "16", "borrowingLimit": "32"},
            ],
        }
    ]
    assert spec["preemption"] == {
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "LowerPriority"},
        "withinClusterQueue": "LowerPriority",
    }
    unlimited = r.cluster_queue(VISION, cohort="site-a", flavor="gb300")["spec"]
    assert unlimited["cohortName"] == "site-a"
    assert unlimited["resourceGroups"][0]["flavors"] == [
        {
            "name": "gb300",
            "resources": [
                {"name": "nvidia.com/gpu", "nominalQuota": "8"},
                {"name": "resource.nvidia.com/imex-channel", "nominalQuota": "8"},
            ],
        }
    ]
    assert r.cluster_queue(EMPTY)["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": "0",
        "borrowingLimit": "0",
    }
    with pytest.raises(ValueError, match="cohort"):
        r.cluster_queue(ML, cohort="Not A Name")


def test_local_queue_points_at_the_department_cluster_queue():
    lq = r.local_queue(ML)
    assert lq["metadata"]["name"] == "default"
    assert lq["metadata"]["namespace"] == "ml-research"
    assert lq["spec"] == {"clusterQueue": "ml-research"}
    assert r.local_queue(ML, "shared-cq")["spec"] == {"clusterQueue": "shared-cq"}
    validate(r.local_queue(ML, "shared-cq"))


def test_resource_quota_caps_at_the_limit_and_is_empty_without_one():
    assert r.resource_quota(ML)["spec"] == {"hard": {"requests.nvidia.com/gpu": "48"}}
    assert r.resource_quota(VISION)["spec"] == {"hard": {}}
    assert r.resource_quota(EMPTY)["spec"] == {"hard": {"requests.nvidia.com/gpu": "0"}}


def _selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """LabelSelector semantics, for the operators this test meets."""
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions", []):
        op, key = expr["operator"], expr["key"]
        if (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
        if op == "In" and labels.get(key) not in expr["values"]:
            return False
        if op == "NotIn" and key in labels and labels[key] in expr["values"]:
            return False
    return True


def _ingress_allowed(policy: dict[str, Any], src_namespace: str, src_ns_labels: dict[str, str]) -> bool:
    """Whether a pod in `src_namespace` may connect to any pod selected by the policy (no port rules)."""
    own = policy["metadata"]["namespace"]
    for rule in policy["spec"].get("ingress", []):
        for peer in rule.get("from", []):
            assert "ipBlock" not in peer
            if "namespaceSelector" in peer:
                ns_ok = _selector_matches(peer["namespaceSelector"], src_ns_labels)
            else:
                ns_ok = src_namespace == own
            pod_ok = _selector_matches(peer.get("podSelector", {}), {})
            if ns_ok and pod_ok:
                return True
    return False


def test_network_policy_isolates_departments_but_not_system_namespaces():
    policy = r.network_policy(ML)
    assert policy["spec"]["podSelector"] == {}
    assert policy["spec"]["policyTypes"] == ["Ingress"]

    def ns_labels(obj_or_name):
        if isinstance(obj_or_name, dict):
            return {
                **obj_or_name["metadata"]["labels"],
                "kubernetes.io/metadata.name": obj_or_name["metadata"]["name"],
            }
        return {"kubernetes.io/metadata.name": obj_or_name}

    assert _ingress_allowed(policy, "ml-research", ns_labels(r.namespace(ML)))
    assert not _ingress_allowed(policy, "vision", ns_labels(r.namespace(VISION)))
    assert not _ingress_allowed(policy, "no", ns_labels(r.namespace(ODD_SLUG)))
    for system in ("kube-system", "monitoring", "ingress-nginx", "default"):
        assert _ingress_allowed(policy, system, ns_labels(system))


def test_persistent_volume_and_claim_bind_to_each_other_statically():
    pv, pvc = r.persistent_volume(ML, NFS_SERVER), r.persistent_volume_claim(ML)
    assert pv["spec"]["nfs"] == {"server": NFS_SERVER, "path": "/exports/tenants/ml-research"}
    assert pv["spec"]["capacity"] == {"storage": "2048Gi"}
    assert pvc["spec"]["resources"] == {"requests": {"storage": "2048Gi"}}
    assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pv["spec"]["storageClassName"] == pvc["spec"]["storageClassName"] == ""
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    claim = pv["spec"]["claimRef"]
    assert (claim["namespace"], claim["name"]) == (pvc["metadata"]["namespace"], pvc["metadata"]["name"])
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"] == "rackplane-ml-research-data"
    validate(r.persistent_volume(ML, "192.0.2.10"))
    for bad in ("", "nfs server", "nfs_01.example.com", None):
        with pytest.raises(ValueError, match="nfs_server"):
            r.persistent_volume(ML, bad)


# --- proof that the validation bites ------------------------------------------------------------------


def _broken(obj: dict[str, Any], path: tuple[str | int, ...], value: Any = None, *, delete: bool = False):
    """A deep copy of `obj` with the value at `path` replaced (or deleted)."""
    obj = copy.deepcopy(obj)
    node: Any = obj
    for part in path[:-1]:
        node = node[part]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return obj


CQ = r.cluster_queue(ML)
LQ = r.local_queue(ML)
RES = ("spec", "resourceGroups", 0, "flavors", 0, "resources", 0)


@pytest.mark.parametrize(
    "broken, reason",
    [
        pytest.param(_broken(CQ, (*RES, "nominalQuota"), "abc"), "does not match", id="cq-quantity-pattern"),
        pytest.param(
            _broken(CQ, ("spec", "cohort"), "rackplane"),
            "'cohort' was unexpected",
            id="cq-unknown-field-v1beta1-cohort",
        ),
        pytest.param(
            _broken(CQ, ("spec", "preemption", "withinClusterQueue"), "Lower"), "is not one of", id="cq-enum"
        ),
        pytest.param(
            _broken(CQ, ("spec", "preemption", "reclaimWithinCohort"), "Never"),
            "reclaimWithinCohort=Never",
            id="cq-cel-preemption",
        ),
        pytest.param(
            _broken(CQ, ("spec", "cohortName"), delete=True),
            "borrowingLimit must be nil",
            id="cq-cel-borrowing-without-cohort",
        ),
        pytest.param(
            _broken(CQ, ("spec", "resourceGroups", 0, "coveredResources"), ["nvidia.com/gpu"]),
            "same number of resources",
            id="cq-cel-resource-count",
        ),
        pytest.param(
            _broken(
                CQ, ("spec", "resourceGroups", 0, "flavors"), CQ["spec"]["resourceGroups"][0]["flavors"] * 2
            ),
            "duplicate list-map keys",
            id="cq-duplicate-list-map-key",
        ),
        pytest.param(
            _broken(CQ, ("metadata", "namespace"), "ml-research"),
            "cluster-scoped",
            id="cq-cluster-scoped-namespace",
        ),
        pytest.param(
            _broken(CQ, ("metadata", "name"), "ML_Research"), "name 'ML_Research'", id="cq-bad-name"
        ),
        pytest.param(
            _broken(CQ, ("apiVersion",), "kueue.x-k8s.io/v1alpha1"), "not served", id="cq-unserved-version"
        ),
        pytest.param(
            _broken(CQ, ("metadata", "labels", "bad key!"), "x"), "label key", id="cq-bad-label-key"
        ),
        pytest.param(
            _broken(LQ, ("metadata", "namespace"), delete=True), "has no namespace", id="lq-without-namespace"
        ),
        pytest.param(_broken(LQ, ("spec", "queue"), "x"), "'queue' was unexpected", id="lq-unknown-field"),
        pytest.param(_broken(LQ, ("spec", "clusterQueue"), "Not_A_Name"), "does not match", id="lq-pattern"),
        pytest.param(
            _broken(r.namespace(ML), ("spec",), {"bogus": 1}), "'bogus' was unexpected", id="ns-unknown-field"
        ),
        pytest.param(
            _broken(r.namespace(ML), ("metadata", "labelz"), {}),
            "'labelz' was unexpected",
            id="ns-unknown-metadata-field",
        ),
        pytest.param(
            _broken(r.namespace(ML), ("metadata", "name"), "ml.research"),
            "name 'ml.research'",
            id="ns-name-not-a-label",
        ),
        pytest.param(
            _broken(r.resource_quota(ML), ("spec", "hard", "requests.nvidia.com/gpu"), "lots"),
            "not a Kubernetes quantity",
            id="rq-quantity",
        ),
        pytest.param(
            _broken(r.network_policy(ML), ("spec", "policyTypes"), "Ingress"),
            "is not of type 'array'",
            id="np-type",
        ),
        pytest.param(
            _broken(r.network_policy(ML), ("spec", "ingress", 0, "sources"), []),
            "'sources' was unexpected",
            id="np-unknown-field",
        ),
        pytest.param(
            _broken(r.persistent_volume(ML, NFS_SERVER), ("spec", "nfs", "share"), "x"),
            "'share' was unexpected",
            id="pv-unknown",
        ),
        pytest.param(
            _broken(
                r.persistent_volume_claim(ML), ("metadata", "labels", "rackplane.io/department"), "x" * 64
            ),
            "label value",
            id="pvc-label-value-too-long",
        ),
    ],
)
def test_broken_objects_fail_validation(broken, reason):
    with pytest.raises(SchemaError, match=re.escape(reason)):
        validate(broken)
