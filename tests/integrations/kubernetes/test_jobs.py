"""The Kubernetes job backend: the objects a placed job becomes, and the adapter against a real API server.

Rendering is checked against the real schemas (kubernetes-validate for the Job, the packaged ComputeDomain
CRD), and the placement facts are checked by evaluating the rendered affinity the way the scheduler does;
those tests need no server.

The adapter (marked `integration`) runs against the testbed's real kube-apiserver
(tests/integrations/kube_testbed.py) as Rackplane runs in a cluster: through the `kube_proxy` with the
`rackplane` service account's token (exactly deploy/kubernetes/rbac.yaml) and the cluster CA. Every answer
is the real server's (its validation, defaulting, 409s, 404s, RBAC 403s, finalizers), except what a real
server cannot be made to do on demand: being down, slow, answering 5xx/429, or lacking the ComputeDomain CRD
(the shared testbed keeps its CRDs), which the proxy injects. A narrower RBAC role than Rackplane's is a real
service account made for that one test.
No controller runs there, so the tests write what they would, through `kube` (the admin): the department's
Namespace (and its `default` ServiceAccount, the service-account controller's), Kueue's admission (the Job
unsuspended), the Job controller's status (the real server validates it: startTime, SuccessCriteriaMet
before Complete, FailureTarget before Failed, ready <= active) and its Pods (made from the Job's template,
with the labels, annotation and owner reference the Job controller sets, bound to a node as the scheduler
would), and the garbage collector's work after a Foreground delete.
"""

from __future__ import annotations

import copy
import json
import re
import time
from typing import Any

import certifi
import pytest

from core.posix import PosixIdentity
from integrations.jobs import (
    BackendJobState,
    BackendRejected,
    BackendUnavailable,
    DispatchRequest,
)
from integrations.kubernetes import job_objects as ko
from integrations.kubernetes import jobs as kj
from integrations.kubernetes import render as r
from integrations.kubernetes import validate as v
from integrations.kubernetes.job_objects import render_job_objects
from integrations.kubernetes.jobs import KubernetesJobBackend, backend_from_settings
from integrations.kubernetes.target import MANAGED_KINDS
from integrations.kubernetes.tenants import local_queue
from tests.integrations.kube_testbed import ApiError
from tests.integrations.kubernetes.test_render import NFS, inventory, tenant

VISION = tenant("vision", pkey=0x11, vlan_id=101, vxlan_vni=10101, guaranteed_gpus=8, limit_gpus=None)

PERSON = PosixIdentity("ada", uid=10001, gid=10001, groups=(20001,))
HOSTS = ("gb-r01-t03", "gb-r01-t04", "gb-r01-t05", "gb-r01-t06")
RACK = [f"gb-r01-t{slot:02d}" for slot in range(1, 19)]


def request(job_id: int = 42, hostnames: tuple[str, ...] = HOSTS, **overrides: Any) -> DispatchRequest:
    fields: dict[str, Any] = {
        "job_id": job_id,
        "name": "llama-70b pretrain (run 3)",
        "department": "vision",
        "priority_class": "train",
        "hostnames": hostnames,
        "gpus_per_tray": 4,
        "time_limit_minutes": 90,
        "work": {
            "image": "nvcr.io/nvidia/pytorch:25.01-py3",
            "command": ["torchrun"],
            "args": ["--nnodes=4", "train.py"],
            "env": {"NCCL_MNNVL_ENABLE": "1", "EPOCHS": 3},
        },
        "segment": len(hostnames) if len(hostnames) > 1 else None,
        "run_as": PERSON,  # a real Kubernetes target runs a job only as its person
    }
    fields.update(overrides)
    return DispatchRequest(**fields)


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


def pod_spec(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["template"]["spec"]


# --- rendering ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("hosts", [HOSTS, HOSTS[:1]], ids=["four-trays", "one-tray"])
def test_rendered_objects_validate_against_the_real_schemas(hosts):
    objects = render_job_objects(request(hostnames=hosts))
    assert v.validate_all(objects) == []
    assert [o["kind"] for o in objects] == (["ComputeDomain", "Job"] if len(hosts) > 1 else ["Job"])
    # The ComputeDomain really is checked against the packaged CRD (not as a core kind).
    if len(hosts) > 1:
        assert v.crd_for(objects[0])["spec"]["names"]["kind"] == "ComputeDomain"


def _broken(obj: dict[str, Any], path: tuple, value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    target = obj
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return obj


_OBJECTS = by_kind(render_job_objects(request()))
_CONTAINER = ("spec", "template", "spec", "containers", 0)


@pytest.mark.parametrize(
    ("broken", "field", "reason"),
    [
        pytest.param(
            _broken(_OBJECTS["Job"], (*_CONTAINER, "resources", "limits", "nvidia.com/gpu"), "four"),
            "spec.template.spec.containers[0].resources.limits['nvidia.com/gpu']",
            "not a Kubernetes quantity",
            id="job-gpu-quantity",
        ),
        pytest.param(
            _broken(_OBJECTS["Job"], ("spec", "completion"), 4),
            "spec",
            "'completion' was unexpected",
            id="job-unknown-field",
        ),
        pytest.param(
            _broken(_OBJECTS["Job"], ("spec", "template", "spec", "resourceClaims", 0), {"template": "x"}),
            "spec.template.spec.resourceClaims[0]",
            "",
            id="job-bad-claim",
        ),
        pytest.param(
            _broken(_OBJECTS["Job"], ("metadata", "name"), "RP_42"),
            "metadata.name",
            "not a valid DNS-1123 subdomain",
            id="job-name",
        ),
        pytest.param(
            _broken(_OBJECTS["ComputeDomain"], ("spec", "numNodes"), -1),
            "spec.numNodes",
            "less than the minimum",
            id="computedomain-numnodes",
        ),
        pytest.param(
            _broken(_OBJECTS["ComputeDomain"], ("spec", "channel", "resourceClaimTemplate"), {}),
            "spec.channel.resourceClaimTemplate",
            "'name' is a required property",
            id="computedomain-template",
        ),
    ],
)
def test_a_broken_object_is_refused(broken, field, reason):
    with pytest.raises(v.ValidationError) as caught:
        v.validate(broken)
    assert caught.value.field == field
    assert reason in caught.value.reason


def test_rendering_validates_what_it_renders(monkeypatch):
    # An invalid label value (the priority class is a label) is caught by the schema check inside render.
    with pytest.raises(v.ValidationError, match=r"rackplane.io/priority-class"):
        render_job_objects(request(priority_class="Train!"))

    # And a renderer bug in the ComputeDomain would be caught too, before anything reaches a cluster.
    def bad_domain(*args, **kwargs):
        domain = r.compute_domain(*args, **kwargs)
        domain["spec"]["channel"]["allocationMode"] = "Many"
        return domain

    monkeypatch.setattr(ko, "compute_domain", bad_domain)
    with pytest.raises(v.ValidationError, match=r"spec.channel.allocationMode"):
        render_job_objects(request())


def _node_matches(term: dict[str, Any], labels: dict[str, str]) -> bool:
    for expression in term["matchExpressions"]:
        assert expression["operator"] == "In", expression  # the only operator the renderer uses
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def test_pods_are_pinned_to_exactly_the_chosen_trays():
    job = by_kind(render_job_objects(request()))["Job"]
    spec, pod = job["spec"], pod_spec(job)
    # One pod per tray, all of them at once, each with its own index.
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 4, 4)
    # Nodes the required node affinity admits, out of the whole rack (as the scheduler evaluates it).
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    allowed = {
        node
        for node in RACK
        if any(_node_matches(t, {"kubernetes.io/hostname": node}) for t in terms["nodeSelectorTerms"])
    }
    assert allowed == set(HOSTS)
    # The required anti-affinity repels the job's own pods per hostname: at most one pod per tray.
    (anti,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert anti["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    # 4 pods, 4 allowed trays, one pod per tray: the pods occupy exactly the chosen trays.
    assert spec["parallelism"] == len(allowed)
    # Neither another job's pods nor another run's (after a preemption) match this run's anti-affinity.
    for other in (request(job_id=43), request(attempt=1)):
        labels = by_kind(render_job_objects(other))["Job"]["spec"]["template"]["metadata"]["labels"]
        assert not anti["labelSelector"]["matchLabels"].items() <= labels.items()


def test_pods_claim_the_compute_domains_channel_and_ask_for_the_gpus():
    objects = by_kind(render_job_objects(request()))
    domain, job = objects["ComputeDomain"], objects["Job"]
    assert domain["spec"]["numNodes"] == 0
    template = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    assert template == "rp-42-imex-channel"
    pod = pod_spec(job)
    assert pod["resourceClaims"] == [{"name": "imex-channel", "resourceClaimTemplateName": template}]
    (container,) = pod["containers"]
    assert container["resources"] == {
        "requests": {"nvidia.com/gpu": "4"},
        "limits": {"nvidia.com/gpu": "4"},
        "claims": [{"name": "imex-channel"}],
    }
    claimed = {c["name"] for c in container["resources"]["claims"]}
    assert claimed <= {c["name"] for c in pod["resourceClaims"]}
    # The pod lands in the ComputeDomain's namespace: the DRA driver creates the template there.
    assert domain["metadata"]["namespace"] == job["metadata"]["namespace"] == "vision"


def test_a_one_tray_job_has_no_compute_domain_and_no_claim():
    (job,) = render_job_objects(request(hostnames=("gb-r01-t07",), gpus_per_tray=2))
    pod = pod_spec(job)
    assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (1, 1)
    assert "resourceClaims" not in pod
    assert pod["containers"][0]["resources"] == {
        "requests": {"nvidia.com/gpu": "2"},
        "limits": {"nvidia.com/gpu": "2"},
    }
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert {
        n for n in RACK if _node_matches(terms["nodeSelectorTerms"][0], {"kubernetes.io/hostname": n})
    } == {"gb-r01-t07"}


def test_job_lands_in_the_department_namespace_on_its_kueue_local_queue():
    job = by_kind(render_job_objects(request()))["Job"]
    lq = local_queue(VISION)  # what tenancy renders for the department
    assert job["metadata"]["namespace"] == lq["metadata"]["namespace"] == "vision"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == lq["metadata"]["name"] == "default"
    assert job["spec"]["suspend"] is True  # Kueue unsuspends it on admission
    # No WorkloadPriorityClass is rendered anywhere, so no Kueue priority-class label may name one.
    assert "kueue.x-k8s.io/priority-class" not in job["metadata"]["labels"]
    assert "WorkloadPriorityClass" not in {
        o["kind"] for o in r.desired_objects(inventory(), [VISION], nfs_server=NFS)
    }


def test_names_labels_work_and_limits():
    objects = by_kind(render_job_objects(request(job_id=9001, time_limit_minutes=90)))
    job, domain = objects["Job"], objects["ComputeDomain"]
    assert job["metadata"]["name"] == domain["metadata"]["name"] == "rp-9001"
    rackplane_labels = {
        "app.kubernetes.io/managed-by": "rackplane",
        "rackplane.io/job-id": "9001",
        "rackplane.io/attempt": "0",
        "rackplane.io/department": "vision",
        "rackplane.io/priority-class": "train",
    }
    assert job["metadata"]["labels"] == {**rackplane_labels, "kueue.x-k8s.io/queue-name": "default"}
    assert domain["metadata"]["labels"] == rackplane_labels
    assert job["metadata"]["annotations"] == {"rackplane.io/job-name": "llama-70b pretrain (run 3)"}
    assert (job["spec"]["activeDeadlineSeconds"], job["spec"]["backoffLimit"]) == (5400, 0)
    pod = pod_spec(job)
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["image"] == "nvcr.io/nvidia/pytorch:25.01-py3"
    assert (container["command"], container["args"]) == (["torchrun"], ["--nnodes=4", "train.py"])
    assert container["env"] == [{"name": "NCCL_MNNVL_ENABLE", "value": "1"}, {"name": "EPOCHS", "value": "3"}]
    # Pod hostnames are "<job>-<index>" and must stay DNS labels; the name leaves room for that.
    assert len(ko.job_name(request(job_id=10**40))) <= ko.MAX_JOB_NAME


def test_a_run_after_a_preemption_gets_its_own_objects():
    rerun = by_kind(render_job_objects(request(attempt=2)))
    assert {o["metadata"]["name"] for o in rerun.values()} == {"rp-42-2"}
    assert rerun["Job"]["metadata"]["labels"]["rackplane.io/attempt"] == "2"
    template = rerun["ComputeDomain"]["spec"]["channel"]["resourceClaimTemplate"]["name"]
    assert template == "rp-42-2-imex-channel"
    assert pod_spec(rerun["Job"])["resourceClaims"][0]["resourceClaimTemplateName"] == template


def test_job_objects_are_never_pruned_by_a_configuration_push():
    # KubernetesTarget prunes labelled objects of MANAGED_KINDS: a running job's objects must not be any.
    assert {"Job", "ComputeDomain", "Pod"}.isdisjoint(MANAGED_KINDS)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"hostnames": ()}, "no trays"),
        ({"hostnames": ("gb-r01-t01", "gb-r01-t01")}, "listed twice"),
        ({"gpus_per_tray": 0}, "gpus_per_tray"),
        ({"time_limit_minutes": 0}, "time limit"),
        ({"work": {"script": "#!/bin/bash\nsrun x"}}, "unknown keys for a Kubernetes job"),
        ({"work": {"command": ["x"]}}, 'needs "image"'),
        ({"work": {"image": "   "}}, 'needs "image"'),
        ({"work": {"image": "busybox\nprivileged: true"}}, '"image" holds a space, a line break or a NUL'),
        ({"work": {"image": "nvcr.io/nvidia/pytorch:25.01 -py3"}}, '"image" holds a space'),
        ({"work": {"image": "x", "args": "train.py"}}, '"args" must be a list of strings'),
        ({"department": "Vision"}, "namespace"),
        # Beyond what the API server can store (the boundaries are checked on the real server below).
        ({"time_limit_minutes": ko.MAX_TIME_LIMIT_MINUTES + 1}, r"time limit \(minutes\) must be at most"),
        ({"gpus_per_tray": ko.MAX_GPUS_PER_TRAY + 1}, "gpus_per_tray must be at most"),
    ],
)
def test_requests_that_cannot_run_are_refused(overrides, match):
    with pytest.raises(ValueError, match=match):
        render_job_objects(request(**overrides))


def work_of_size(size: int) -> dict[str, Any]:
    """A work whose one-tray Job renders to exactly `size` bytes (one big environment value)."""
    work = {"image": "nvcr.io/nvidia/pytorch:25.01-py3", "env": {"BLOB": ""}}
    (job,) = render_job_objects(request(hostnames=HOSTS[:1], work=work))
    base = len(json.dumps(job, separators=(",", ":")).encode())
    return {**work, "env": {"BLOB": "x" * (size - base)}}


def test_objects_the_api_server_could_not_store_are_refused_in_words():
    # A Job much over 1 MiB fails in etcd with a 422 about its controller-uid label: refused here instead.
    assert render_job_objects(request(hostnames=HOSTS[:1], work=work_of_size(ko.MAX_OBJECT_BYTES)))
    with pytest.raises(ValueError, match=r"Job vision/rp-42 would be 1048577 bytes.*keep the work's command"):
        render_job_objects(request(hostnames=HOSTS[:1], work=work_of_size(ko.MAX_OBJECT_BYTES + 1)))
    # The job's name is an annotation: annotations hold 256 KiB in all (the server's 422 otherwise).
    with pytest.raises(ValueError, match=r"ComputeDomain vision/rp-42: its annotations .* a shorter name"):
        render_job_objects(request(name="x" * ko.MAX_ANNOTATIONS_BYTES))


# --- the job state, from a live Job ---------------------------------------------------------------------


def _condition(kind: str, reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": kind, "status": "True", "reason": reason, "message": message}


@pytest.mark.parametrize(
    ("spec", "status", "metadata", "state", "words"),
    [
        ({"suspend": True}, {}, {}, "pending", "waiting for Kueue"),
        ({"suspend": False}, {"active": 4, "ready": 1}, {}, "running", "1 of 4 pods running"),
        ({"suspend": False}, {"active": 4}, {}, "pending", "4 of 4 pods starting"),
        (
            {},
            {"conditions": [_condition("FailureTarget", "DeadlineExceeded", "too long")]},
            {},
            "failed",
            "too",
        ),
        ({}, {"conditions": [_condition("SuccessCriteriaMet")], "succeeded": 4}, {}, "completed", ""),
        ({}, {"conditions": [{"type": "Failed", "status": "False"}]}, {}, "pending", ""),
        (
            {},
            {"active": 4, "ready": 4},
            {"deletionTimestamp": "2025-01-01T00:00:00Z"},
            "cancelled",
            "deleted",
        ),
    ],
)
def test_job_status_mapping(spec, status, metadata, state, words):
    job = {"metadata": {"name": "rp-1", **metadata}, "spec": {"completions": 4, **spec}, "status": status}
    result = ko.job_status("vision/rp-1", job)
    assert result.state == BackendJobState(state)
    assert words in result.message


# --- the adapter against the real API server ------------------------------------------------------------

JOBS = "/apis/batch/v1/namespaces/vision/jobs"
DOMAINS = "/apis/resource.nvidia.com/v1beta1/namespaces/vision/computedomains"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
T0 = "2026-01-01T00:00:00Z"


def _service_account(kube, namespace: str, name: str) -> None:
    status, answer = kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )
    assert status in (201, 409), answer  # 409: left by a run that stopped before its clean-up


@pytest.fixture
def department(kube):
    """The department as an admin (and the configuration push) leaves it: its Namespace with the `default`
    ServiceAccount the service-account controller would add (pods are refused without it), and its Kueue
    LocalQueue "default"."""
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vision"}})
    _service_account(kube, "vision", "default")
    kube.create(local_queue(VISION), manager="rackplane")
    yield "vision"
    # ServiceAccounts are not among the kinds the wipe removes: leave none behind.
    kube.request("DELETE", "/api/v1/namespaces/vision/serviceaccounts/default")


@pytest.fixture
def backend(kube_proxy, kube_testbed, department):
    with KubernetesJobBackend(
        kube_proxy.url, token=kube_testbed.token, ca_file=kube_testbed.ca, timeout=5
    ) as b:
        yield b


def admit(kube, name: str) -> None:
    """What Kueue does on admission: unsuspend the Job; the Job controller then records its start."""
    kube.merge_patch("Job", name, {"spec": {"suspend": False}}, "vision", fieldManager="kueue")
    kube.set_status("Job", name, "vision", {"startTime": T0})


def job_condition(kind: str, reason: str, message: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": T0,
        "lastTransitionTime": T0,
    }


def container_state(exit_code: int | None) -> dict[str, Any]:
    if exit_code is None:
        return {"running": {"startedAt": T0}}
    reason = "Completed" if exit_code == 0 else "Error"
    return {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": T0, "finishedAt": T0}}


def add_pod(kube, job: str, index: int, node: str, phase: str = "Running", exit_code: int | None = None):
    """A pod of the Job as the Job controller makes it (its template, labels, completion index and owner
    reference), bound to `node` as the scheduler would, with the status its kubelet would report."""
    live = kube.get("Job", job, "vision")
    template = live["spec"]["template"]
    name = f"{job}-{index}-abcde"
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "vision",
                "labels": {**template["metadata"]["labels"], COMPLETION_INDEX: str(index)},
                "annotations": {COMPLETION_INDEX: str(index)},
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": job,
                        "uid": live["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {**copy.deepcopy(template["spec"]), "nodeName": node, "hostname": f"{job}-{index}"},
        },
        manager="job-controller",
    )
    status: dict[str, Any] = {"phase": phase}
    if phase != "Pending":
        status["containerStatuses"] = [
            {
                "name": "main",
                "ready": phase == "Running",
                "restartCount": 0,
                "image": template["spec"]["containers"][0]["image"],
                "imageID": "",
                "state": container_state(exit_code),
            }
        ]
    kube.set_status("Pod", name, "vision", status)


def posts(proxy) -> list[str]:
    return [q.path for q in proxy.requests if q.method == "POST"]


def contains(live: Any, sent: Any) -> bool:
    """Whether `live` holds everything of `sent` (the server may add defaults, never drop or change)."""
    if isinstance(sent, dict):
        return isinstance(live, dict) and all(k in live and contains(live[k], v) for k, v in sent.items())
    if isinstance(sent, list):
        return isinstance(live, list) and len(live) == len(sent) and all(map(contains, live, sent))
    return live == sent


@pytest.mark.integration
def test_submit_creates_the_compute_domain_then_the_job(kube, kube_proxy, kube_testbed, backend):
    backend_id = backend.submit(request())
    assert backend_id == "vision/rp-42"
    assert posts(kube_proxy) == [DOMAINS, JOBS]
    for q in kube_proxy.writes:
        assert q.query == {"fieldManager": ["rackplane"], "fieldValidation": ["Strict"]}
        assert q.content_type == "application/json"
        assert q.authorization == f"Bearer {kube_testbed.token}"
    assert kube.names("Job") == kube.names("ComputeDomain") == ["vision/rp-42"]
    expected = by_kind(render_job_objects(request()))
    for kind in ("Job", "ComputeDomain"):
        live = kube.get(kind, "rp-42", "vision")
        # The server kept every field Rackplane sent (e.g. the DRA claims: a server without DRA drops them).
        assert contains(live["spec"], expected[kind]["spec"]), kind
        assert live["metadata"]["labels"] == expected[kind]["metadata"]["labels"]
        assert live["metadata"]["annotations"] == {"rackplane.io/job-name": "llama-70b pretrain (run 3)"}
        (managed,) = live["metadata"]["managedFields"]
        assert (managed["manager"], managed["operation"]) == ("rackplane", "Update")
    # What the real server defaults: the selector and the template's labels, from the Job's uid (the pods
    # Rackplane reads are found by it), and the pod defaults; the Job is still suspended for Kueue.
    job = kube.get("Job", "rp-42", "vision")
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    template_labels = job["spec"]["template"]["metadata"]["labels"]
    assert template_labels["batch.kubernetes.io/controller-uid"] == uid
    assert template_labels["batch.kubernetes.io/job-name"] == "rp-42"
    assert pod_spec(job)["restartPolicy"] == "Never"
    assert job["spec"]["suspend"] is True
    # The queue the Job names exists in its namespace.
    queue = job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    assert kube.ok("GET", f"/apis/kueue.x-k8s.io/v1beta2/namespaces/vision/localqueues/{queue}")
    # The claim template the pods name is of a kind the server serves (resource.k8s.io/v1, DRA).
    resources = {x["name"] for x in kube.ok("GET", "/apis/resource.k8s.io/v1")["resources"]}
    assert "resourceclaimtemplates" in resources


@pytest.mark.integration
def test_submitting_twice_adopts_the_existing_objects(kube, kube_proxy, backend):
    first = backend.submit(request())
    versions = kube.resource_versions()
    seen = len(kube_proxy.requests)
    assert backend.submit(request()) == first
    assert kube.resource_versions() == versions  # nothing written
    # The second attempt was answered 409 for both objects and read them back to check they are its own.
    assert [(q.method, q.path) for q in kube_proxy.requests[seen:]] == [
        ("POST", DOMAINS),
        ("GET", f"{DOMAINS}/rp-42"),
        ("POST", JOBS),
        ("GET", f"{JOBS}/rp-42"),
    ]


@pytest.mark.integration
def test_a_lost_reply_is_adopted_after_kueue_admitted_the_job(kube, kube_proxy, kube_testbed, backend):
    # An earlier attempt created the ComputeDomain and the Job, then its reply was lost.
    with KubernetesJobBackend(kube_proxy.url, token=kube_testbed.token, ca_file=kube_testbed.ca) as earlier:
        earlier.submit(request())
    admit(kube, "rp-42")  # and Kueue already admitted it: adopting must not reset anything
    versions = kube.resource_versions()
    assert backend.submit(request()) == "vision/rp-42"
    assert kube.resource_versions() == versions
    assert kube.get("Job", "rp-42", "vision")["spec"]["suspend"] is False


def foreign_job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "vision", "labels": {"app": "someone-elses"}},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "x", "image": "busybox"}]}
            }
        },
    }


@pytest.mark.integration
def test_a_name_taken_by_another_object_is_refused(kube, backend):
    kube.create(foreign_job("rp-7"), manager="kubectl")
    with pytest.raises(
        BackendRejected, match=r"Job vision/rp-7: an object of that name .* not Rackplane job 7's"
    ):
        backend.submit(request(job_id=7, hostnames=("gb-r01-t01",)))
    assert kube.get("Job", "rp-7", "vision")["metadata"]["labels"] == {"app": "someone-elses"}
    # A multi-tray job made its ComputeDomain before it met the clash: the refusal removes it again.
    with pytest.raises(BackendRejected) as caught:
        backend.submit(request(job_id=7))
    assert "not Rackplane job 7's run 0" in str(caught.value)
    assert str(caught.value).endswith("(its ComputeDomain vision/rp-7 was removed)")
    assert kube.names("ComputeDomain") == []
    assert kube.names("Job") == ["vision/rp-7"]


@pytest.mark.integration
def test_an_existing_compute_domain_with_another_channel_is_not_adopted(kube, backend):
    # Its spec is immutable: pods claiming "rp-42-imex-channel" would wait forever for a template never made.
    domain = by_kind(render_job_objects(request()))["ComputeDomain"]
    domain["spec"]["channel"]["resourceClaimTemplate"]["name"] = "something-else"
    kube.create(domain, manager="rackplane")
    with pytest.raises(BackendRejected, match=r"channel template is 'something-else'.*delete it"):
        backend.submit(request())
    assert kube.names("Job") == []
    # Why adopting does not patch it: the CRD's CEL rule refuses any change of the spec.
    with pytest.raises(ApiError, match=r"422.*A computeDomain.spec is immutable"):
        patch = {"spec": {"channel": {"resourceClaimTemplate": {"name": "rp-42-imex-channel"}}}}
        kube.merge_patch("ComputeDomain", "rp-42", patch, "vision")


@pytest.mark.integration
def test_status_follows_the_job_from_pending_to_completed(kube, backend):
    for host in HOSTS:
        kube.register_node(host)
    backend_id = backend.submit(request())
    (status,) = backend.status([backend_id]).values()
    assert (status.state, status.nodes) == (BackendJobState.PENDING, ())
    assert "Kueue" in status.message

    admit(kube, "rp-42")
    kube.set_status("Job", "rp-42", "vision", {"active": 4, "ready": 0})
    for index, host in enumerate(HOSTS):
        add_pod(kube, "rp-42", index, host, phase="Pending")
    # A leftover pod of an older Job of the same name (another uid) is not this job's.
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "rp-42-0-old",
                "namespace": "vision",
                "labels": {
                    "batch.kubernetes.io/job-name": "rp-42",
                    "batch.kubernetes.io/controller-uid": "an-older-uid",
                },
            },
            "spec": {"nodeName": "gb-r02-t01", "containers": [{"name": "main", "image": "busybox"}]},
        }
    )
    status = backend.status([backend_id])[backend_id]
    assert (status.state, status.message) == (BackendJobState.PENDING, "4 of 4 pods starting")
    assert status.nodes == HOSTS

    kube.set_status("Job", "rp-42", "vision", {"ready": 4})
    status = backend.status([backend_id])[backend_id]
    assert (status.state, status.message, status.nodes) == (
        BackendJobState.RUNNING,
        "4 of 4 pods running",
        HOSTS,
    )

    done = "Reached expected number of succeeded pods"
    kube.set_status(
        "Job",
        "rp-42",
        "vision",
        {
            "active": 0,
            "ready": 0,
            "succeeded": 4,
            "completedIndexes": "0-3",
            "completionTime": T0,
            "conditions": [
                job_condition("SuccessCriteriaMet", "CompletionsReached", done),
                job_condition("Complete", "CompletionsReached", done),
            ],
        },
    )
    status = backend.status([backend_id])[backend_id]
    assert (status.state, status.exit_code, status.nodes) == (BackendJobState.COMPLETED, 0, HOSTS)
    assert status.message == f"CompletionsReached: {done}"


@pytest.mark.integration
@pytest.mark.parametrize(
    ("reason", "words", "exit_code"),
    [
        ("BackoffLimitExceeded", "Job has reached the specified backoff limit", 3),
        ("DeadlineExceeded", "Job was active longer than specified deadline", None),
    ],
)
def test_status_reports_a_failure_in_words_with_its_exit_code(kube, backend, reason, words, exit_code):
    backend_id = backend.submit(request())
    admit(kube, "rp-42")
    add_pod(kube, "rp-42", 0, HOSTS[0], phase="Succeeded", exit_code=0)
    if exit_code is None:  # the deadline: the controller stopped a pod that was still running
        add_pod(kube, "rp-42", 1, HOSTS[1], phase="Running")
    else:
        add_pod(kube, "rp-42", 1, HOSTS[1], phase="Failed", exit_code=exit_code)
    failed = {"succeeded": 1, "failed": 1, "active": 1, "ready": 1}
    # The Job controller decides first (FailureTarget) ...
    kube.set_status(
        "Job", "rp-42", "vision", {**failed, "conditions": [job_condition("FailureTarget", reason, words)]}
    )
    status = backend.status([backend_id])[backend_id]
    assert (status.state, status.message) == (BackendJobState.FAILED, f"{reason}: {words}")
    # ... and marks it Failed once no pod is active any more.
    kube.set_status(
        "Job",
        "rp-42",
        "vision",
        {
            **failed,
            "active": 0,
            "ready": 0,
            "conditions": [
                job_condition("FailureTarget", reason, words),
                job_condition("Failed", reason, words),
            ],
        },
    )
    status = backend.status([backend_id])[backend_id]
    assert status.state == BackendJobState.FAILED
    assert status.message == f"{reason}: {words}"
    assert status.exit_code == exit_code
    assert status.nodes == HOSTS[:2]


@pytest.mark.integration
def test_status_of_unknown_and_malformed_ids(backend):
    backend.submit(request())
    result = backend.status(["vision/rp-42", "vision/rp-404", "nonsense", "vision/rp-42"])
    assert list(result) == ["vision/rp-42", "vision/rp-404", "nonsense"]
    assert result["vision/rp-42"].state == BackendJobState.PENDING
    assert result["vision/rp-404"].state == BackendJobState.UNKNOWN
    assert result["nonsense"].state == BackendJobState.UNKNOWN


@pytest.mark.integration
def test_cancel_reads_cancelled_until_the_job_is_gone_and_a_resubmission_waits(kube, kube_proxy, backend):
    backend_id = backend.submit(request())
    admit(kube, "rp-42")
    for index, host in enumerate(HOSTS):
        add_pod(kube, "rp-42", index, host)
    kube.set_status("Job", "rp-42", "vision", {"active": 4, "ready": 4})
    assert backend.status([backend_id])[backend_id].state == BackendJobState.RUNNING

    backend.cancel(backend_id)
    deletes = [q for q in kube_proxy.requests if q.method == "DELETE"]
    assert [q.path for q in deletes] == [f"{JOBS}/rp-42", f"{DOMAINS}/rp-42"]
    assert deletes[0].query == {"propagationPolicy": ["Foreground"]}
    assert kube.names("ComputeDomain") == []
    # No garbage collector runs here: the Job stays, being deleted, waiting for its pods to go.
    job = kube.get("Job", "rp-42", "vision")
    assert job["metadata"]["deletionTimestamp"]
    assert job["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert len(kube.names("Pod")) == 4
    # Its status still says 4 pods ready: Rackplane reads it as cancelled, never as running.
    status = backend.status([backend_id])[backend_id]
    assert (status.state, status.message) == (
        BackendJobState.CANCELLED,
        "cancelled: the Job is being deleted, 4 pods stopping",
    )
    backend.cancel(backend_id)  # cancelling again while it is being deleted is fine
    # The same run submitted again must wait: the old pods may still hold the trays.
    with pytest.raises(BackendUnavailable) as caught:
        backend.submit(request())
    assert "creating Job vision/rp-42: the earlier Job of this name is still being deleted" in str(
        caught.value
    )
    assert "waiting on: foregroundDeletion" in str(caught.value)

    # The garbage collector's work: the pods go, then the Job's finalizer.
    for pod in kube.names("Pod"):
        kube.request("DELETE", f"/api/v1/namespaces/vision/pods/{pod.split('/')[1]}", gracePeriodSeconds="0")
    kube.merge_patch("Job", "rp-42", {"metadata": {"finalizers": None}}, "vision")
    assert kube.names("Job", live_only=False) == []
    assert backend.status([backend_id])[backend_id].state == BackendJobState.UNKNOWN
    # The resubmission made a new ComputeDomain before it was told to wait; now it goes through.
    assert backend.submit(request()) == backend_id
    assert kube.get("Job", "rp-42", "vision")["metadata"]["uid"] != job["metadata"]["uid"]
    backend.cancel(backend_id)
    kube.merge_patch("Job", "rp-42", {"metadata": {"finalizers": None}}, "vision")  # no pods: GC is quick
    backend.cancel(backend_id)  # already gone: still a success
    assert kube.names("Job", live_only=False) == kube.names("ComputeDomain") == []


@pytest.mark.integration
def test_cancelling_a_one_tray_job_without_a_compute_domain(kube, backend):
    one = backend.submit(request(job_id=5, hostnames=("gb-r01-t09",)))
    backend.cancel(one)  # the ComputeDomain's real 404 is "nothing to delete"
    assert kube.names("Job") == []
    assert backend.status([one])[one].state == BackendJobState.CANCELLED


def _slice_request(**overrides: Any) -> DispatchRequest:
    """A slice job (scheduling.slices): two 1g.23gb MIG devices on one tray, no whole GPU."""
    fields: dict[str, Any] = {"hostnames": ("gb-r01-t09",), "gpus_per_tray": 0, "mig_profile": "1g.23gb"}
    return request(job_id=7, **{**fields, "mig_slices": 2, **overrides})


def test_a_slice_job_asks_the_device_plugin_for_its_mig_profile():
    objects = render_job_objects(_slice_request())
    assert v.validate_all(objects) == []
    assert [o["kind"] for o in objects] == ["Job"]  # one tray: no ComputeDomain
    resources = pod_spec(objects[0])["containers"][0]["resources"]
    assert resources == {
        "requests": {"nvidia.com/mig-1g.23gb": "2"},
        "limits": {"nvidia.com/mig-1g.23gb": "2"},
    }  # and no nvidia.com/gpu: a slice job holds no whole GPU


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"hostnames": HOSTS}, "one tray"),
        ({"gpus_per_tray": 1}, "no whole GPU"),
        ({"mig_profile": "1g.23gb+me"}, "not a MIG profile the device plugin names"),
        ({"mig_profile": "x; rm"}, "not a MIG profile"),
        ({"mig_slices": 0}, "mig_slices must be a whole number >= 1"),
        ({"mig_slices": 29}, "mig_slices must be at most 28"),
    ],
)
def test_a_slice_job_that_cannot_be_is_refused_before_rendering(overrides, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        render_job_objects(_slice_request(**overrides))


@pytest.mark.integration
def test_the_real_api_server_stores_a_slice_job_with_its_mig_resource(kube, backend):
    one = backend.submit(_slice_request())
    assert one == "vision/rp-7"
    container = pod_spec(kube.get("Job", "rp-7", "vision"))["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/mig-1g.23gb": "2"}
    assert container["resources"]["requests"] == {"nvidia.com/mig-1g.23gb": "2"}
    assert kube.names("ComputeDomain") == []
    backend.cancel(one)
    assert kube.names("Job") == []


@pytest.mark.integration
def test_api_server_down_is_transient_and_a_retry_converges(kube, kube_proxy, backend):
    kube_proxy.refuse_connections()
    for call in (
        lambda: backend.submit(request()),
        lambda: backend.status(["vision/rp-42"]),
        lambda: backend.cancel("vision/rp-42"),
    ):
        with pytest.raises(BackendUnavailable, match="not reachable"):
            call()
    kube_proxy.accept_connections()
    assert backend.submit(request()) == "vision/rp-42"
    assert kube.names("Job") == ["vision/rp-42"]


@pytest.mark.integration
@pytest.mark.parametrize("status", [503, 500, 429])
def test_server_errors_are_transient(kube, kube_proxy, backend, status):
    kube_proxy.fail(status, "etcdserver: request timed out", method="POST", path="/jobs")
    with pytest.raises(BackendUnavailable, match="etcdserver: request timed out"):
        backend.submit(request())
    assert kube.names("Job") == []
    # The ComputeDomain was made before the failure (and stays: the retry needs it); the retry adopts it.
    assert kube.names("ComputeDomain") == ["vision/rp-42"]
    assert backend.submit(request()) == "vision/rp-42"
    assert kube.names("Job") == kube.names("ComputeDomain") == ["vision/rp-42"]


@pytest.mark.integration
@pytest.mark.slow(reason="waits for the client to give up")
def test_timeout_is_transient(kube_proxy, kube_testbed, department):
    kube_proxy.fail(0, method="GET", path="/jobs/", delay=1.5)
    with (
        KubernetesJobBackend(
            kube_proxy.url, token=kube_testbed.token, ca_file=kube_testbed.ca, timeout=0.5
        ) as backend,
        pytest.raises(BackendUnavailable, match=r"(?i:timeout|timed out)"),
    ):
        backend.status(["vision/rp-42"])


@pytest.mark.integration
def test_a_job_the_api_server_refuses_is_rejected_in_its_words_and_leaves_nothing(kube, backend, monkeypatch):
    # A renderer bug the local checks cannot see: the schemas allow any restartPolicy, a Job takes only
    # Never or OnFailure. The real server's 422 reaches the admin, and the ComputeDomain made before goes.
    render = ko.render_job_objects

    def restart_always(req):
        objects = render(req)
        pod_spec(objects[-1])["restartPolicy"] = "Always"
        v.validate(objects[-1])  # passes
        return objects

    monkeypatch.setattr(kj, "render_job_objects", restart_always)
    with pytest.raises(BackendRejected) as caught:
        backend.submit(request())
    words = str(caught.value)
    assert words.startswith(
        'creating Job vision/rp-42: the API server refused it (422 Invalid): Job.batch "rp-42"'
    )
    assert 'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"' in words
    assert words.endswith("(its ComputeDomain vision/rp-42 was removed)")
    assert kube.names("Job") == kube.names("ComputeDomain") == []


@pytest.mark.integration
@pytest.mark.parametrize(
    ("overrides", "path", "value", "server"),
    [
        (
            {"priority_class": "Train!"},
            ("metadata", "labels", "rackplane.io/priority-class"),
            "Train!",
            "422",
        ),
        ({}, ("metadata", "name"), "RP_42", "422"),
        ({}, ("spec", "completion"), 4, '400.*unknown field "spec.completion"'),
        ({}, (*_CONTAINER, "resources", "limits", "nvidia.com/gpu"), "four", "400.*quantities must match"),
        (
            {"gpus_per_tray": ko.MAX_GPUS_PER_TRAY + 1},
            (*_CONTAINER, "resources", "limits", "nvidia.com/gpu"),
            str(ko.MAX_GPUS_PER_TRAY + 1),
            "422.*must be an integer",
        ),
        (
            {"time_limit_minutes": ko.MAX_TIME_LIMIT_MINUTES + 1},
            ("spec", "activeDeadlineSeconds"),
            (ko.MAX_TIME_LIMIT_MINUTES + 1) * 60,
            "400.*cannot unmarshal number",
        ),
    ],
    ids=["label-value", "name", "unknown-field", "quantity", "gpus-beyond-int64", "deadline-beyond-int64"],
)
def test_what_the_local_checks_refuse_the_real_server_refuses_too(
    kube, department, overrides, path, value, server
):
    (job,) = render_job_objects(request(hostnames=HOSTS[:1]))
    job = _broken(job, path, value)
    if path == (*_CONTAINER, "resources", "limits", "nvidia.com/gpu"):
        job = _broken(job, (*_CONTAINER, "resources", "requests", "nvidia.com/gpu"), value)
    with pytest.raises(
        ValueError
    ):  # refused here: from the request when it is the request's, else the object
        render_job_objects(request(hostnames=HOSTS[:1], **overrides)) if overrides else v.validate(job)
    with pytest.raises(ApiError, match=server):
        kube.ok("POST", JOBS, job, dryRun="All", fieldValidation="Strict")


@pytest.mark.integration
def test_the_largest_job_rackplane_renders_is_one_the_real_server_stores(
    kube, kube_proxy, kube_testbed, backend
):
    with KubernetesJobBackend(
        kube_proxy.url, token=kube_testbed.token, ca_file=kube_testbed.ca, dry_run=True
    ) as dry:
        # The int64 bounds, exactly: the largest time limit and GPU count pass the server's own checks.
        largest = request(
            hostnames=HOSTS[:1],
            gpus_per_tray=ko.MAX_GPUS_PER_TRAY,
            time_limit_minutes=ko.MAX_TIME_LIMIT_MINUTES,
        )
        assert dry.submit(largest) == "vision/rp-42"
        # The longest name (50 characters) for a Job, its ComputeDomain and its "-imex-channel" template.
        longest = dry.submit(request(job_id=10**46))
        assert len(longest.split("/")[1]) == ko.MAX_JOB_NAME
    # A Job of the largest size Rackplane sends is stored (etcd refuses requests over 1.5 MiB).
    work = work_of_size(ko.MAX_OBJECT_BYTES)
    assert backend.submit(request(hostnames=HOSTS[:1], work=work)) == "vision/rp-42"
    env = pod_spec(kube.get("Job", "rp-42", "vision"))["containers"][0]["env"]
    assert env == [{"name": "BLOB", "value": work["env"]["BLOB"]}]


@pytest.mark.integration
def test_other_refusals_are_permanent_and_in_words(kube, backend):
    # The department's namespace does not exist: the real 404 of a create.
    with pytest.raises(
        BackendRejected, match=r'creating Job physics/rp-42: .*404 NotFound.*namespaces "physics" not found'
    ):
        backend.submit(request(department="physics", hostnames=HOSTS[:1]))
    # The department is being removed (its namespace terminating): the real 403.
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "physics"}})
    kube.request("DELETE", "/api/v1/namespaces/physics")
    with pytest.raises(BackendRejected, match=r"403 Forbidden.*because it is being terminated"):
        backend.submit(request(department="physics", hostnames=HOSTS[:1]))
    assert kube.names("Job") == []


@pytest.fixture
def limited_token(kube, department):
    """A token of a service account that may create and read the department's Jobs and ComputeDomains but
    neither list pods nor delete Jobs (an RBAC role narrower than deploy/kubernetes/rbac.yaml)."""
    name = "rackplane-limited"
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/vision"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "create"]},
            {
                "apiGroups": ["resource.nvidia.com"],
                "resources": ["computedomains"],
                "verbs": ["get", "create", "delete"],
            },
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": "vision"}],
    }
    made = [
        f"/api/v1/namespaces/vision/serviceaccounts/{name}",
        f"{rbac}/roles/{name}",
        f"{rbac}/rolebindings/{name}",
    ]
    for path in made:  # left by a run that stopped before its clean-up
        kube.request("DELETE", path)
    _service_account(kube, "vision", name)
    kube.ok("POST", f"{rbac}/roles", role)
    kube.ok("POST", f"{rbac}/rolebindings", binding)
    answer = kube.ok(
        "POST",
        f"/api/v1/namespaces/vision/serviceaccounts/{name}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
    )
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:vision:{name}",
            "resourceAttributes": {
                "namespace": "vision",
                "verb": "create",
                "group": "batch",
                "resource": "jobs",
            },
        },
    }
    deadline = time.monotonic() + 10  # the RBAC authorizer's cache sees the new binding in a moment
    while not kube.ok("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"].get(
        "allowed"
    ):
        assert time.monotonic() < deadline, "the role binding never took effect"
        time.sleep(0.05)
    yield answer["status"]["token"]
    for path in made:
        kube.request("DELETE", path)


@pytest.mark.integration
def test_without_permission_to_list_pods_the_state_is_still_read(
    kube, kube_proxy, kube_testbed, limited_token
):
    with KubernetesJobBackend(
        kube_proxy.url, token=limited_token, ca_file=kube_testbed.ca, timeout=5
    ) as backend:
        backend_id = backend.submit(request())
        admit(kube, "rp-42")
        for index, host in enumerate(HOSTS):
            add_pod(kube, "rp-42", index, host)
        kube.set_status("Job", "rp-42", "vision", {"active": 4, "ready": 4})
        status = backend.status([backend_id])[backend_id]
        # The Job says running; its nodes are unknown, and the message says why.
        assert (status.state, status.nodes) == (BackendJobState.RUNNING, ())
        assert status.message.startswith("4 of 4 pods running (its pods could not be listed: 403 ")
        assert 'cannot list resource "pods"' in status.message
        assert status.message.endswith("its nodes and exit code are unknown)")
        # A refusal to delete is permanent, in the server's words.
        with pytest.raises(
            BackendRejected,
            match=r'deleting Job vision/rp-42: .*403 Forbidden.*cannot delete resource "jobs"',
        ):
            backend.cancel(backend_id)
    assert kube.names("Job") == ["vision/rp-42"]


@pytest.mark.integration
def test_an_invalid_request_is_rejected_before_anything_is_sent(kube_proxy, backend):
    with pytest.raises(BackendRejected, match=r"needs \"image\""):
        backend.submit(request(work={"command": ["python"]}))
    with pytest.raises(BackendRejected, match=r"would be .* bytes"):
        backend.submit(request(hostnames=HOSTS[:1], work=work_of_size(ko.MAX_OBJECT_BYTES + 1)))
    assert kube_proxy.requests == []


@pytest.mark.integration
def test_missing_compute_domain_crd_is_rejected(kube, kube_proxy, backend):
    # The CRD cannot be removed from the shared testbed: the proxy answers as a server without it does.
    kube_proxy.fail(
        404, "the server could not find the requested resource", reason="NotFound", path="/computedomains"
    )
    with pytest.raises(BackendRejected, match=r"creating ComputeDomain vision/rp-42: .*404 NotFound"):
        backend.submit(request())
    assert kube.names("Job") == []
    # A one-tray job needs no ComputeDomain and runs anyway.
    assert backend.submit(request(job_id=8, hostnames=("gb-r01-t02",))) == "vision/rp-8"
    kube_proxy.fail(
        404, "the server could not find the requested resource", reason="NotFound", path="/computedomains"
    )
    backend.cancel("vision/rp-8")  # and cancelling it does not trip over the missing CRD
    assert kube.names("Job") == []


@pytest.mark.integration
def test_dry_run_checks_with_the_server_and_stores_nothing(kube, kube_proxy, kube_testbed, backend):
    kept = backend.submit(request(job_id=9, hostnames=HOSTS[:1]))  # a real job, for the dry-run cancel
    versions = kube.resource_versions()
    seen = len(kube_proxy.requests)
    with KubernetesJobBackend(
        kube_proxy.url, token=kube_testbed.token, ca_file=kube_testbed.ca, dry_run=True
    ) as dry:
        assert dry.submit(request()) == "vision/rp-42"
        dry.cancel(kept)
        writes = [q for q in kube_proxy.requests[seen:] if q.method in ("POST", "DELETE")]
        assert [q.method for q in writes] == ["POST", "POST", "DELETE", "DELETE"]
        assert all(q.dry_run for q in writes)
        assert kube.resource_versions() == versions  # nothing stored, nothing deleted
        assert dry.status(["vision/rp-42"])["vision/rp-42"].state == BackendJobState.UNKNOWN
        # The server did check: a dry run into a namespace that does not exist is refused.
        with pytest.raises(BackendRejected, match=r'namespaces "physics" not found'):
            dry.submit(request(department="physics"))


@pytest.mark.integration
def test_backend_from_the_targets_settings(kube, kube_proxy, kube_testbed, department):
    settings = {
        "api_url": kube_proxy.url,
        "token": kube_testbed.token,
        "ca_file": kube_testbed.ca,
        "insecure": False,
        "dry_run": False,
    }
    with backend_from_settings(settings) as backend:
        assert backend.submit(request(hostnames=("gb-r01-t01",))) == "vision/rp-42"
    assert kube.names("Job") == ["vision/rp-42"]
    assert kube_proxy.writes[-1].authorization == f"Bearer {kube_testbed.token}"


@pytest.mark.integration
def test_a_server_the_configured_ca_does_not_vouch_for_is_refused(kube_proxy, kube_testbed, department):
    with (
        KubernetesJobBackend(kube_proxy.url, token=kube_testbed.token, ca_file=certifi.where()) as backend,
        pytest.raises(BackendRejected, match=r"cannot establish a trusted connection.*the cluster CA"),
    ):
        backend.status(["vision/rp-42"])
    assert kube_proxy.requests == []  # the TLS handshake failed: no request was made


def test_bad_settings_are_refused():
    with pytest.raises(BackendRejected, match="no API server URL"):
        backend_from_settings(
            {"api_url": "", "token": "", "ca_file": "", "insecure": False, "dry_run": False}
        )
    with pytest.raises(BackendRejected, match="neither a PEM certificate nor a readable file"):
        backend_from_settings({"api_url": "https://api.example:6443", "ca_file": "/nonexistent/ca.pem"})
