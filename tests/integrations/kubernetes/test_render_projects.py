"""Projects under departments on Kubernetes: the department as a Kueue Cohort, each project a
ClusterQueue in it with a LocalQueue, a namespace and a ResourceQuota of its own
(integrations.kubernetes.tenants).

Rendered objects are validated against the packaged schemas and CRDs (CEL rules included, validate.py) and
applied to the real kube-apiserver of the testbed (`integration`), whose Kueue CRDs accept or refuse them.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from integrations.kubernetes import render as r
from integrations.kubernetes import validate as v
from integrations.kubernetes.tenants import POD_SECURITY_LABELS, tenant_objects
from tenancy.renderers import ProjectSpec, TenantSpec
from tests.integrations.kube_testbed import ApiError

NFS = "nfs01.storage.example.com"


def research(**overrides: Any) -> TenantSpec:
    fields: dict[str, Any] = {
        "slug": "research",
        "name": "Research",
        "guaranteed_gpus": 64,
        "limit_gpus": 96,
        "vlan_id": 100,
        "vxlan_vni": 10100,
        "pkey": 0x0010,
        "port_guids": (),
        "network_cidr": "10.42.3.0/24",
        "export_path": "/exports/tenants/research",
        "storage_quota_gib": 2048,
        "weight": "2",
        "projects": (
            ProjectSpec("vision", "Vision", 32, 48, "1.5"),
            ProjectSpec("nlp", "NLP", 24, None, "1"),
        ),
    }
    fields.update(overrides)
    return TenantSpec(**fields)


def of(objects, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
    return next(
        o
        for o in objects
        if o["kind"] == kind and o["metadata"]["name"] == name and o["metadata"].get("namespace") == namespace
    )


def test_the_department_is_a_cohort_and_each_project_a_cluster_queue_in_it():
    objects = tenant_objects(research(), NFS)
    cohort = of(objects, "Cohort", "research")
    assert cohort["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert cohort["spec"] == {
        "parentName": "rackplane",
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu", "resource.nvidia.com/imex-channel"],
                "flavors": [
                    {
                        "name": "nvl72",
                        "resources": [
                            {"name": "nvidia.com/gpu", "nominalQuota": "0", "borrowingLimit": "32"},
                            {
                                "name": "resource.nvidia.com/imex-channel",
                                "nominalQuota": "0",
                                "borrowingLimit": "32",
                            },
                        ],
                    }
                ],
            }
        ],
        "fairSharing": {"weight": "2"},
    }
    vision = of(objects, "ClusterQueue", "research--vision")
    assert vision["spec"]["cohortName"] == "research"
    assert vision["spec"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "research--vision"}
    }
    assert vision["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0] == (
        {"name": "nvidia.com/gpu", "nominalQuota": "32", "borrowingLimit": "16"}
    )
    assert vision["spec"]["fairSharing"] == {"weight": "1.5"}
    assert vision["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    nlp = of(objects, "ClusterQueue", "research--nlp")
    assert nlp["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0] == (
        {"name": "nvidia.com/gpu", "nominalQuota": "24"}
    )  # no limit: borrows without bound
    # The department's own queue (work without a project) holds what the projects leave: 64 - 56.
    own = of(objects, "ClusterQueue", "research")
    assert own["spec"]["cohortName"] == "research"
    assert own["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0] == (
        {"name": "nvidia.com/gpu", "nominalQuota": "8"}
    )
    # Each project: namespace, GPU quota (its limit), isolation, LocalQueue `default` on its ClusterQueue.
    namespace = of(objects, "Namespace", "research--vision")
    assert namespace["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "rackplane",
        "rackplane.io/department": "research",
        "rackplane.io/project": "vision",
        **POD_SECURITY_LABELS,
    }
    assert of(objects, "ResourceQuota", "rackplane-gpu-quota", "research--vision")["spec"] == {
        "hard": {"requests.nvidia.com/gpu": "48"}
    }
    assert of(objects, "ResourceQuota", "rackplane-gpu-quota", "research--nlp")["spec"] == {"hard": {}}
    assert of(objects, "LocalQueue", "default", "research--nlp")["spec"] == {"clusterQueue": "research--nlp"}
    policy = of(objects, "NetworkPolicy", "rackplane-department-isolation", "research--vision")
    assert policy["spec"]["ingress"][0] == {
        "from": [{"namespaceSelector": {"matchLabels": {"rackplane.io/department": "research"}}}]
    }


def test_a_department_without_projects_renders_exactly_as_before():
    plain = research(projects=(), weight="1")
    objects = tenant_objects(plain, NFS)
    assert [o["kind"] for o in objects] == [
        "Namespace",
        "ResourceQuota",
        "NetworkPolicy",
        "ClusterQueue",
        "LocalQueue",
        "PersistentVolume",
        "PersistentVolumeClaim",
    ]
    cq = of(objects, "ClusterQueue", "research")
    assert cq["spec"]["cohortName"] == "rackplane" and "fairSharing" not in cq["spec"]
    assert (
        tenant_objects(research(projects=(), weight="3"), NFS) == objects
    )  # weight shows only with projects


@pytest.mark.parametrize(
    "overrides, words",
    [
        (
            {"projects": (ProjectSpec("a", "A", 40), ProjectSpec("b", "B", 40))},
            "guaranteed 80 GPUs, more than",
        ),
        ({"projects": (ProjectSpec("a", "A", 1), ProjectSpec("a", "A again", 1))}, "appears more than once"),
    ],
)
def test_projects_that_cannot_be_rendered_are_refused(overrides, words):
    with pytest.raises(ValueError, match=words):
        research(**overrides)


@pytest.mark.parametrize("slug", ["x" * 31, "a--b", "Vision", "2d"])
def test_a_project_slug_that_cannot_name_a_namespace_is_refused(slug):
    """tenancy.naming: `<department>--<project>` is a namespace only for a valid project slug."""
    with pytest.raises(ValueError, match="project slug"):
        ProjectSpec(slug, "Long", 1)


def test_a_project_limit_below_its_guarantee_is_refused():
    with pytest.raises(ValueError, match="limit_gpus"):
        ProjectSpec("a", "A", 8, 4)


def test_every_object_validates_against_the_schemas_and_crd_rules():
    objects = r.desired_objects(r.InventoryState(), [research()], nfs_server=NFS)
    assert v.validate_all(objects) == []
    kinds = [o["kind"] for o in objects]
    assert kinds.index("Cohort") == len(kinds) - 1  # last: the numbered files keep their names
    # The CRD's CEL rule bites: every covered resource needs a quota in each flavor.
    [problem] = v.validate_all([uncovered(objects)])
    assert "flavors must have the same number of resources as the coveredResources" in str(problem)


def uncovered(objects) -> dict[str, Any]:
    """The department's Cohort covering one more resource than its flavor gives a quota for."""
    cohort = copy.deepcopy(of(objects, "Cohort", "research"))
    cohort["metadata"]["name"] = "uncovered"
    cohort["spec"]["resourceGroups"][0]["coveredResources"].append("cpu")
    return cohort


# --- the real API server -------------------------------------------------------------------------------


@pytest.mark.integration
def test_the_real_api_server_accepts_the_cohort_queues_and_quotas(kube):
    objects = r.desired_objects(r.InventoryState(), [research()], nfs_server=NFS)
    for obj in objects:
        kube.apply(obj, "rackplane")
    assert kube.get("Cohort", "research")["spec"]["parentName"] == "rackplane"
    assert kube.names("ClusterQueue") == ["research", "research--nlp", "research--vision"]
    assert kube.get("ClusterQueue", "research--vision")["spec"]["cohortName"] == "research"
    assert kube.names("LocalQueue") == [
        "research--nlp/default",
        "research--vision/default",
        "research/default",
    ]
    quota = kube.get("ResourceQuota", "rackplane-gpu-quota", "research--vision")
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "48"}
    # And it refuses what the CRD's CEL rules refuse, as validate.py does before anything is sent.
    with pytest.raises(ApiError) as refused:
        kube.apply(uncovered(objects), "rackplane")
    assert refused.value.status == 422
    assert "flavors must have the same number of resources" in str(refused.value)


@pytest.mark.integration
def test_rackplanes_own_account_pushes_and_prunes_a_departments_projects(kube, kube_proxy, kube_testbed):
    """Through the Kubernetes target with the rackplane service account (exactly the shipped RBAC): the
    Cohort and the projects' queues are created, and pruned when the department stops having projects."""
    from integrations.kubernetes.changes import KubernetesState
    from integrations.kubernetes.target import KubernetesTarget

    inventory = r.InventoryState()
    with KubernetesTarget(
        kube_proxy.url, ca_cert=kube_testbed.ca, token=kube_testbed.token, timeout=10
    ) as target:
        result = target.apply(target.render(KubernetesState(inventory, (research(),), NFS)))
        assert "Cohort research" in result.created
        assert (
            "ClusterQueue research--vision" in result.created
            and "LocalQueue research--nlp/default" in result.created
        )
        assert target.diff(target.render(KubernetesState(inventory, (research(),), NFS))).empty
        result = target.apply(target.render(KubernetesState(inventory, (research(projects=()),), NFS)))
    assert {"Cohort research", "ClusterQueue research--vision", "ClusterQueue research--nlp"} <= set(
        result.deleted
    )
    assert kube.names("Cohort") == []
    assert kube.get("ClusterQueue", "research")["spec"]["cohortName"] == "rackplane"
