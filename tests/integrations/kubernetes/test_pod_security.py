"""A Kubernetes job runs as its person under Pod Security `restricted`.

Rendering (no server): the pod's securityContext takes the person's POSIX identity, every container drops
all capabilities and cannot escalate, seccomp is RuntimeDefault; the rendered-files backend (`make run`)
writes the same spec; a request without a person is never submitted to a real cluster; every tenant
namespace (department and project) carries the Pod Security Admission labels.

Against the testbed's real kube-apiserver (marked `integration`; PodSecurity admission is one of its default
plugins): after Rackplane pushes the tenant objects, the API server refuses a pod that is not `restricted`
in the tenant's namespace, and admits the pod Rackplane's own Job makes for a person.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.posix import PosixIdentity
from integrations.embedded import RenderedJobBackend
from integrations.jobs import BackendRejected
from integrations.kubernetes import kind as kubernetes_kind
from integrations.kubernetes import validate as v
from integrations.kubernetes.job_objects import render_job_objects
from integrations.kubernetes.jobs import KubernetesJobBackend
from integrations.kubernetes.tenants import POD_SECURITY_LABELS, tenant_objects
from tenancy.renderers import ProjectSpec
from tests.integrations.kubernetes.test_jobs import HOSTS, PERSON, _service_account, pod_spec, request
from tests.integrations.kubernetes.test_render import INFERENCE, NFS, inventory, tenant
from tests.integrations.kubernetes.test_target import connect, register_nodes, state

VISION = tenant("vision", pkey=0x11, vlan_id=101, vxlan_vni=10101, guaranteed_gpus=8, limit_gpus=None)
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "v1.36",
    "pod-security.kubernetes.io/audit": "restricted",
    "pod-security.kubernetes.io/audit-version": "v1.36",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/warn-version": "v1.36",
}
CONTAINER_CONTEXT = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
}


def job_of(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == "Job")


# --- rendering ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("hosts", [HOSTS, HOSTS[:1]], ids=["four-trays", "one-tray"])
def test_the_pod_runs_as_its_person_with_nothing_to_escalate(hosts):
    objects = render_job_objects(request(hostnames=hosts, run_as=PERSON))
    assert v.validate_all(objects) == []
    pod = pod_spec(job_of(objects))
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 10001,
        "supplementalGroups": [20001],
        "supplementalGroupsPolicy": "Strict",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    for container in pod["containers"]:
        assert container["securityContext"] == CONTAINER_CONTEXT


def test_each_person_gets_their_own_ids_and_only_their_groups():
    grace = PosixIdentity("grace", uid=10002, gid=30000, groups=(30001, 30002))
    pod = pod_spec(job_of(render_job_objects(request(run_as=grace))))
    context = pod["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (10002, 30000, 30000)
    assert context["supplementalGroups"] == [30001, 30002]
    # No other groups: none given, none listed (and Strict keeps the image's /etc/group from adding any).
    alone = PosixIdentity("alan", uid=10003, gid=10003)
    context = pod_spec(job_of(render_job_objects(request(run_as=alone))))["securityContext"]
    assert "supplementalGroups" not in context and context["supplementalGroupsPolicy"] == "Strict"


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_request_without_a_person_renders_non_root_but_is_never_submitted_to_a_cluster():
    anonymous = request(hostnames=HOSTS[:1], run_as=None)
    pod = pod_spec(job_of(render_job_objects(anonymous)))
    # The same restrictions, without ids: the image's user, which the kubelet refuses to start as root.
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["containers"][0]["securityContext"] == CONTAINER_CONTEXT
    # Refused before anything is sent: nothing listens on this address, and no connection is tried.
    backend = KubernetesJobBackend("https://127.0.0.1:9", insecure=True, timeout=1)
    with pytest.raises(
        BackendRejected, match=r"job 42: its person has no POSIX identity .* runs as its person"
    ):
        backend.submit(anonymous)


def test_a_run_as_that_is_not_an_identity_is_refused():
    with pytest.raises(ValueError, match=r"run_as must be a core\.posix\.PosixIdentity"):
        render_job_objects(request(run_as={"uid": 0}))


def test_the_rendered_files_backend_writes_the_same_spec(tmp_path):
    backend = RenderedJobBackend(tmp_path, "kubernetes", kubernetes_kind.render_job, ".yaml")
    backend.submit(request(run_as=PERSON))
    written = list(yaml.safe_load_all((tmp_path / "rp-42.yaml").read_text()))
    assert written == render_job_objects(request(run_as=PERSON))
    pod = pod_spec(job_of(written))
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["containers"][0]["securityContext"] == CONTAINER_CONTEXT


def test_every_tenant_namespace_is_labelled_pod_security_restricted():
    research = tenant(
        "research", projects=(ProjectSpec("vision", "Vision", 4, 8), ProjectSpec("nlp", "NLP", 4))
    )
    assert POD_SECURITY_LABELS == RESTRICTED
    namespaces = [o for o in tenant_objects(research, NFS) if o["kind"] == "Namespace"]
    assert len(namespaces) == 3  # the department's and each project's
    for namespace in namespaces:
        v.validate(namespace)
        labels = namespace["metadata"]["labels"]
        assert {k: labels.get(k) for k in RESTRICTED} == RESTRICTED


def test_the_pinned_version_is_the_testbeds_kubernetes_minor():
    """The PSA version is the one the integration tests below run against (testbed/kube-apiserver)."""
    go_mod = Path(__file__).resolve().parents[3] / "testbed" / "kube-apiserver" / "go.mod"
    version = next(
        line.split()[-1] for line in go_mod.read_text().splitlines() if "k8s.io/kubernetes v" in line
    )
    major, minor = version.lstrip("v").split(".")[:2]
    assert POD_SECURITY_LABELS["pod-security.kubernetes.io/enforce-version"] == f"v{major}.{minor}"


# --- the real API server ------------------------------------------------------------------------------

integration = pytest.mark.integration
PODS = "/api/v1/namespaces/vision/pods"


def pod_from(job: dict[str, Any], name: str = "rp-42-0-abcde") -> dict[str, Any]:
    """The Pod the Job controller makes from the Job's template."""
    template = copy.deepcopy(job["spec"]["template"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "vision", "labels": template["metadata"]["labels"]},
        "spec": template["spec"],
    }


def compliant() -> dict[str, Any]:
    return pod_from(job_of(render_job_objects(request(hostnames=HOSTS[:1], run_as=PERSON))))


def _without(pod: dict[str, Any], *path: str) -> dict[str, Any]:
    target = pod
    for part in path[:-1]:
        target = target[part]
    del target[path[-1]]
    return pod


def _root(pod):
    pod["spec"]["securityContext"].update(runAsUser=0, runAsNonRoot=False)
    pod["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] = False
    return pod


def _privileged(pod):
    context = pod["spec"]["containers"][0]["securityContext"]
    # (privileged with allowPrivilegeEscalation false is not even a valid pod: a 422 before admission)
    del context["allowPrivilegeEscalation"]
    context["privileged"] = True
    return pod


def _host_namespaces(pod):
    pod["spec"].update(hostNetwork=True, hostPID=True, hostIPC=True)
    return pod


def _no_seccomp(pod):
    return _without(pod, "spec", "securityContext", "seccompProfile")


def _escalation(pod):
    pod["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    return pod


def _capability(pod):
    pod["spec"]["containers"][0]["securityContext"]["capabilities"] = {"add": ["SYS_ADMIN"]}
    return pod


def _host_path(pod):
    pod["spec"]["volumes"] = [{"name": "dev", "hostPath": {"path": "/dev"}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "dev", "mountPath": "/host-dev"}]
    return pod


def _image_user(pod):
    """The image's user (root, usually): no securityContext at all, as before jobs ran as their person."""
    _without(pod, "spec", "securityContext")
    return _without(pod, "spec", "containers", 0, "securityContext")


NON_COMPLIANT = {
    "root": (_root, "runAsNonRoot != true|runAsUser=0"),
    "host-namespaces": (_host_namespaces, "host namespaces"),
    "no-seccomp": (_no_seccomp, "seccompProfile"),
    "privilege-escalation": (_escalation, "allowPrivilegeEscalation != false"),
    "added-capability": (_capability, "unrestricted capabilities"),
    "host-path": (_host_path, "restricted volume types|hostPath"),
    "image-user": (_image_user, "runAsNonRoot != true"),
}


@pytest.fixture
def pushed(kube, kube_proxy, kube_testbed):
    """The tenant objects as Rackplane's push leaves them (KubernetesTarget, the rackplane service account
    through the proxy), plus the `default` ServiceAccount the service-account controller would add."""
    register_nodes(kube, inventory())
    with connect(kube_proxy, kube_testbed) as target:
        target.apply(target.render(state(INFERENCE, VISION)))
    _service_account(kube, "vision", "default")
    yield kube
    kube.request("DELETE", "/api/v1/namespaces/vision/serviceaccounts/default")


@integration
def test_the_pushed_namespace_enforces_restricted(pushed):
    labels = pushed.get("Namespace", "vision")["metadata"]["labels"]
    assert {k: labels.get(k) for k in RESTRICTED} == RESTRICTED


@integration
@pytest.mark.parametrize("case", list(NON_COMPLIANT))
def test_the_api_server_refuses_a_pod_that_is_not_restricted(pushed, case):
    breaks, words = NON_COMPLIANT[case]
    pod = breaks(compliant())
    status, answer = pushed.request("POST", PODS, pod)
    assert status == 403, answer
    message = answer["message"]
    assert 'violates PodSecurity "restricted:v1.36"' in message
    assert any(word in message for word in words.split("|")), message
    assert pushed.names("Pod") == []


@integration
def test_a_privileged_pod_is_refused(pushed):
    """PodSecurity refuses it (403) where the cluster allows privileged containers at all; the testbed's
    API server runs without --allow-privileged, so its validation refuses it first (422), as a hardened
    production API server would."""
    status, answer = pushed.request("POST", PODS, _privileged(compliant()))
    assert status in (403, 422), answer
    assert "privileged" in answer["message"]
    assert pushed.names("Pod") == []


@integration
def test_the_api_server_admits_rackplanes_pod_for_a_person(pushed):
    pod = compliant()
    dry = pushed.ok("POST", PODS, pod, dryRun="All")
    assert dry["spec"]["securityContext"]["runAsUser"] == 10001
    created = pushed.ok("POST", PODS, pod)
    assert created["spec"]["securityContext"]["runAsUser"] == 10001
    assert pushed.names("Pod") == ["vision/rp-42-0-abcde"]


@integration
def test_a_job_submitted_for_a_person_is_created_and_its_pods_are_admitted(pushed, kube_proxy, kube_testbed):
    with KubernetesJobBackend(
        kube_proxy.url, token=kube_testbed.token, ca_file=kube_testbed.ca, timeout=5
    ) as backend:
        assert backend.submit(request(run_as=PERSON)) == "vision/rp-42"
    live = pushed.get("Job", "rp-42", "vision")
    assert live["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001
    # The pod the Job controller would make from it is admitted in the restricted namespace.
    pushed.ok("POST", PODS, pod_from(live), dryRun="All")
