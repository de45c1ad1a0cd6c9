"""The Kubernetes job backend: the objects a placed job becomes, and the adapter against the API stand-in.

Rendering is checked against the real schemas (kubernetes-validate for the Job, the packaged ComputeDomain
CRD), and the placement facts are checked by evaluating the rendered affinity the way the scheduler does.
The adapter runs against tests/scheduling/k8s_standin.py, with the department set up the way Rackplane's
configuration push sets it up (KubernetesTarget.apply: namespace, ClusterQueue, LocalQueue "default").
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from integrations.jobs import (
    BackendJobState,
    BackendRejected,
    BackendUnavailable,
    DispatchRequest,
)
from integrations.kubernetes import jobs as kj
from integrations.kubernetes import render as r
from integrations.kubernetes import validate as v
from integrations.kubernetes.jobs import (
    KubernetesJobBackend,
    backend_from_settings,
    render_job_objects,
)
from integrations.kubernetes.target import MANAGED_KINDS, KubernetesState, KubernetesTarget
from tenancy.renderers import local_queue
from tests.integrations.k8s_standin import JOB_NAME_LABEL, KubeStandIn
from tests.integrations.kubernetes.test_render import NFS, inventory
from tests.integrations.kubernetes.test_target import TOKEN, VISION, register_nodes

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

    monkeypatch.setattr(kj, "compute_domain", bad_domain)
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
    assert len(kj.job_name(request(job_id=10**40))) <= kj.MAX_JOB_NAME


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
        ({"work": {"image": "x", "args": "train.py"}}, '"args" must be a list of strings'),
        ({"department": "Vision"}, "namespace"),
    ],
)
def test_requests_that_cannot_run_are_refused(overrides, match):
    with pytest.raises(ValueError, match=match):
        render_job_objects(request(**overrides))


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
    result = kj.job_status("vision/rp-1", job)
    assert result.state == BackendJobState(state)
    assert words in result.message


# --- the adapter against the stand-in ---------------------------------------------------------------------


@pytest.fixture
def standin():
    with KubeStandIn() as server:
        register_nodes(server, inventory())
        # The department as a configuration push leaves it: namespace, quota, ClusterQueue, LocalQueue.
        with KubernetesTarget(server.url, token=TOKEN) as target:
            target.apply(target.render(KubernetesState(inventory(), (VISION,), NFS)))
        server.requests.clear()
        yield server


@pytest.fixture
def backend(standin):
    with KubernetesJobBackend(standin.url, token=TOKEN, timeout=5) as b:
        yield b


def admit(standin: KubeStandIn, name: str, namespace: str = "vision") -> None:
    """What Kueue does on admission: unsuspend the Job."""
    live = standin.get("Job", name, namespace)
    live["spec"]["suspend"] = False
    standin.add(live, manager="kueue")


def add_pod(standin: KubeStandIn, job: str, index: int, node: str, exit_code: int | None = None) -> None:
    """A pod of a Job, as the Job controller creates it and the scheduler binds it."""
    live = standin.get("Job", job, "vision")
    status: dict[str, Any] = {"phase": "Running"}
    if exit_code is not None:
        terminated = {"exitCode": exit_code, "reason": "Error" if exit_code else "Completed"}
        status = {
            "phase": "Failed",
            "containerStatuses": [{"name": "main", "state": {"terminated": terminated}}],
        }
    standin.add(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{job}-{index}-abcde",
                "namespace": "vision",
                "labels": {
                    JOB_NAME_LABEL: job,
                    "batch.kubernetes.io/controller-uid": live["metadata"]["uid"],
                    "batch.kubernetes.io/job-completion-index": str(index),
                },
            },
            "spec": {"nodeName": node},
            "status": status,
        },
        manager="kube-controller-manager",
    )


def posts(standin: KubeStandIn) -> list[str]:
    return [q.path for q in standin.requests if q.method == "POST"]


def test_submit_creates_the_compute_domain_then_the_job(standin, backend):
    backend_id = backend.submit(request())
    assert backend_id == "vision/rp-42"
    assert posts(standin) == [
        "/apis/resource.nvidia.com/v1beta1/namespaces/vision/computedomains",
        "/apis/batch/v1/namespaces/vision/jobs",
    ]
    for q in standin.writes:
        assert q.query == {"fieldManager": "rackplane", "fieldValidation": "Strict"}
        assert q.content_type == "application/json"
        assert q.authorization == f"Bearer {TOKEN}"
    assert standin.names("Job") == ["vision/rp-42"]
    assert standin.names("ComputeDomain") == ["vision/rp-42"]
    expected = by_kind(render_job_objects(request()))
    for kind in ("Job", "ComputeDomain"):
        live = standin.get(kind, "rp-42", "vision")
        assert live["spec"] == expected[kind]["spec"]
        assert live["metadata"]["labels"] == expected[kind]["metadata"]["labels"]
    # The queue the Job names exists in its namespace (the push created it).
    queue = standin.get("Job", "rp-42", "vision")["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    assert standin.get("LocalQueue", queue, "vision") is not None


def test_submitting_twice_adopts_the_existing_objects(standin, backend):
    first = backend.submit(request())
    versions = {
        k: standin.get(k, "rp-42", "vision")["metadata"]["resourceVersion"] for k in ("Job", "ComputeDomain")
    }
    assert backend.submit(request()) == first
    assert standin.names("Job") == ["vision/rp-42"]
    assert standin.names("ComputeDomain") == ["vision/rp-42"]
    assert {k: standin.get(k, "rp-42", "vision")["metadata"]["resourceVersion"] for k in versions} == versions
    # The second attempt was answered 409 for both objects and read them back to check they are its own.
    domains, jobs = (
        "/apis/resource.nvidia.com/v1beta1/namespaces/vision/computedomains",
        "/apis/batch/v1/namespaces/vision/jobs",
    )
    assert [(q.method, q.path) for q in standin.requests[2:]] == [
        ("POST", domains),
        ("GET", f"{domains}/rp-42"),
        ("POST", jobs),
        ("GET", f"{jobs}/rp-42"),
    ]


def test_a_lost_reply_is_adopted_after_the_job_was_created(standin, backend):
    # An earlier attempt created the Job and the ComputeDomain, then its reply was lost.
    with KubernetesJobBackend(standin.url, token=TOKEN) as earlier:
        earlier.submit(request())
    admit(standin, "rp-42")  # and Kueue already admitted it: adopting must not reset anything
    assert backend.submit(request()) == "vision/rp-42"
    assert standin.get("Job", "rp-42", "vision")["spec"]["suspend"] is False


def test_a_name_taken_by_another_object_is_refused(standin, backend):
    foreign = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "rp-7", "namespace": "vision", "labels": {"app": "someone-elses"}},
        "spec": {"template": {"spec": {"containers": [{"name": "x", "image": "busybox"}]}}},
    }
    standin.add(foreign, manager="kubectl")
    with pytest.raises(BackendRejected, match=r"not Rackplane job 7's run 0"):
        backend.submit(request(job_id=7, hostnames=("gb-r01-t01",)))
    assert standin.get("Job", "rp-7", "vision")["metadata"]["labels"] == {"app": "someone-elses"}


def test_an_existing_compute_domain_with_another_channel_is_not_adopted(standin, backend):
    # Its spec is immutable: pods claiming "rp-42-imex-channel" would wait forever for a template never made.
    domain = by_kind(render_job_objects(request()))["ComputeDomain"]
    domain["spec"]["channel"]["resourceClaimTemplate"]["name"] = "something-else"
    standin.add(domain, manager="rackplane")
    with pytest.raises(BackendRejected, match=r"channel template is 'something-else'"):
        backend.submit(request())
    assert standin.names("Job") == []


def test_status_follows_the_job_from_pending_to_completed(standin, backend):
    backend_id = backend.submit(request())
    (status,) = backend.status([backend_id]).values()
    assert (status.state, status.nodes) == (BackendJobState.PENDING, ())
    assert "Kueue" in status.message

    admit(standin, "rp-42")
    standin.set_status("Job", "rp-42", "vision", {"active": 4, "ready": 0})
    for index, host in enumerate(HOSTS):
        add_pod(standin, "rp-42", index, host)
    # A leftover pod of an older Job of the same name (another uid) is not this job's.
    standin.add(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "rp-42-0-old",
                "namespace": "vision",
                "labels": {JOB_NAME_LABEL: "rp-42", "batch.kubernetes.io/controller-uid": "an-older-uid"},
            },
            "spec": {"nodeName": "gb-r02-t01"},
        }
    )
    status = backend.status([backend_id])[backend_id]
    assert (status.state, status.message) == (BackendJobState.PENDING, "4 of 4 pods starting")
    assert status.nodes == HOSTS

    standin.set_status("Job", "rp-42", "vision", {"active": 4, "ready": 4})
    status = backend.status([backend_id])[backend_id]
    assert (status.state, status.nodes) == (BackendJobState.RUNNING, HOSTS)

    standin.set_status(
        "Job",
        "rp-42",
        "vision",
        {"succeeded": 4, "conditions": [_condition("SuccessCriteriaMet"), _condition("Complete")]},
    )
    status = backend.status([backend_id])[backend_id]
    assert (status.state, status.exit_code, status.nodes) == (BackendJobState.COMPLETED, 0, HOSTS)


def test_status_reports_a_failure_with_its_message_and_exit_code(standin, backend):
    backend_id = backend.submit(request())
    admit(standin, "rp-42")
    add_pod(standin, "rp-42", 0, HOSTS[0], exit_code=0)
    add_pod(standin, "rp-42", 1, HOSTS[1], exit_code=3)
    standin.set_status(
        "Job",
        "rp-42",
        "vision",
        {
            "failed": 1,
            "succeeded": 1,
            "conditions": [
                _condition("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
            ],
        },
    )
    status = backend.status([backend_id])[backend_id]
    assert status.state == BackendJobState.FAILED
    assert status.message == "BackoffLimitExceeded: Job has reached the specified backoff limit"
    assert status.exit_code == 3
    assert status.nodes == HOSTS[:2]


def test_status_of_unknown_and_malformed_ids(standin, backend):
    backend.submit(request())
    result = backend.status(["vision/rp-42", "vision/rp-404", "nonsense", "vision/rp-42"])
    assert list(result) == ["vision/rp-42", "vision/rp-404", "nonsense"]
    assert result["vision/rp-42"].state == BackendJobState.PENDING
    assert result["vision/rp-404"].state == BackendJobState.UNKNOWN
    assert result["nonsense"].state == BackendJobState.UNKNOWN


def test_cancel_deletes_the_job_its_pods_and_the_compute_domain_and_is_idempotent(standin, backend):
    backend_id = backend.submit(request())
    admit(standin, "rp-42")
    for index, host in enumerate(HOSTS):
        add_pod(standin, "rp-42", index, host)
    backend.cancel(backend_id)
    deletes = [q for q in standin.requests if q.method == "DELETE"]
    assert [q.path for q in deletes] == [
        "/apis/batch/v1/namespaces/vision/jobs/rp-42",
        "/apis/resource.nvidia.com/v1beta1/namespaces/vision/computedomains/rp-42",
    ]
    assert deletes[0].query == {"propagationPolicy": "Foreground"}
    assert standin.names("Job") == standin.names("ComputeDomain") == standin.names("Pod") == []
    assert backend.status([backend_id])[backend_id].state == BackendJobState.UNKNOWN
    backend.cancel(backend_id)  # already gone: still a success
    # A one-tray job has no ComputeDomain: cancelling it is just as fine.
    one = backend.submit(request(job_id=5, hostnames=("gb-r01-t09",)))
    backend.cancel(one)
    assert standin.names("Job") == []


def test_a_job_being_deleted_reports_cancelled(standin, backend):
    backend_id = backend.submit(request())
    live = standin.get("Job", "rp-42", "vision")
    live["metadata"]["deletionTimestamp"] = "2025-06-01T12:00:00Z"  # a Foreground deletion in progress
    standin.add(live, manager="kube-controller-manager")
    assert backend.status([backend_id])[backend_id].state == BackendJobState.CANCELLED
    with pytest.raises(BackendUnavailable, match="still being deleted"):
        backend.submit(request())  # the old one must be gone before the job can be created again


def test_api_server_down_is_transient_and_a_retry_converges(standin, backend):
    standin.refuse_connections()
    for call in (
        lambda: backend.submit(request()),
        lambda: backend.status(["vision/rp-42"]),
        lambda: backend.cancel("vision/rp-42"),
    ):
        with pytest.raises(BackendUnavailable, match="not reachable"):
            call()
    standin.accept_connections()
    assert backend.submit(request()) == "vision/rp-42"
    assert standin.names("Job") == ["vision/rp-42"]


@pytest.mark.parametrize("status", [503, 500, 429])
def test_server_errors_are_transient(standin, backend, status):
    standin.fail(status, "etcdserver: request timed out", method="POST", path="/jobs")
    with pytest.raises(BackendUnavailable, match="etcdserver: request timed out"):
        backend.submit(request())
    assert standin.names("Job") == []
    # The ComputeDomain was made before the failure; the retry adopts it and creates the Job.
    assert backend.submit(request()) == "vision/rp-42"
    assert standin.names("Job") == standin.names("ComputeDomain") == ["vision/rp-42"]


@pytest.mark.slow  # waits for the client to give up
def test_timeout_is_transient(standin):
    standin.fail(0, method="GET", path="/jobs/", delay=1.5)
    with (
        KubernetesJobBackend(standin.url, token=TOKEN, timeout=0.5) as backend,
        pytest.raises(BackendUnavailable, match=r"(?i:timeout|timed out)"),
    ):
        backend.status(["vision/rp-42"])


def test_a_request_the_api_refuses_is_rejected_with_its_message(standin, backend):
    message = (
        'admission webhook "vjob.kb.io" denied the request: metadata.labels[kueue.x-k8s.io/queue-name]: '
        'Invalid value: "default": LocalQueue not found'
    )
    standin.fail(422, message, reason="Invalid", method="POST", path="/jobs")
    with pytest.raises(BackendRejected) as caught:
        backend.submit(request())
    assert "creating Job vision/rp-42: the API server refused it (422 Invalid)" in str(caught.value)
    assert message in str(caught.value)
    assert standin.names("Job") == []


def test_other_refusals_are_permanent(standin, backend):
    # The department's namespace does not exist: the real 404 of a create.
    with pytest.raises(BackendRejected, match=r'namespaces "physics" not found'):
        backend.submit(request(department="physics"))
    standin.fail(
        403, 'jobs.batch is forbidden: User "rackplane" cannot create', reason="Forbidden", method="POST"
    )
    with pytest.raises(BackendRejected, match=r"403 Forbidden"):
        backend.submit(request(hostnames=("gb-r01-t01",)))
    standin.fail(403, "cannot delete", reason="Forbidden", method="DELETE")
    with pytest.raises(BackendRejected, match=r"cannot delete"):
        backend.cancel("vision/rp-42")


def test_an_invalid_request_is_rejected_before_anything_is_sent(standin, backend):
    with pytest.raises(BackendRejected, match=r"needs \"image\""):
        backend.submit(request(work={"command": ["python"]}))
    assert standin.requests == []


def test_missing_compute_domain_crd_is_rejected(standin):
    with KubeStandIn(crds=False) as bare:
        bare.add({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vision"}}, manager="kubectl")
        with KubernetesJobBackend(bare.url, token=TOKEN) as backend:
            with pytest.raises(BackendRejected, match=r"creating ComputeDomain .*404"):
                backend.submit(request())
            # A one-tray job needs no ComputeDomain and runs anyway.
            assert backend.submit(request(job_id=8, hostnames=("gb-r01-t02",))) == "vision/rp-8"
            backend.cancel("vision/rp-8")  # and cancelling it does not trip over the missing CRD
        assert bare.names("Job") == []


def test_dry_run_checks_with_the_server_and_stores_nothing(standin):
    with KubernetesJobBackend(standin.url, token=TOKEN, dry_run=True) as backend:
        assert backend.submit(request()) == "vision/rp-42"
        assert all(q.query.get("dryRun") == "All" for q in standin.writes)
        assert standin.names("Job") == standin.names("ComputeDomain") == []
        assert backend.status(["vision/rp-42"])["vision/rp-42"].state == BackendJobState.UNKNOWN


def test_backend_from_the_targets_settings(standin):
    settings = {"api_url": standin.url, "token": TOKEN, "ca_file": "", "insecure": False, "dry_run": False}
    with backend_from_settings(settings) as backend:
        assert backend.submit(request(hostnames=("gb-r01-t01",))) == "vision/rp-42"
    assert standin.names("Job") == ["vision/rp-42"]
    assert standin.writes[-1].authorization == f"Bearer {TOKEN}"
    with pytest.raises(BackendRejected, match="no API server URL"):
        backend_from_settings(
            {"api_url": "", "token": "", "ca_file": "", "insecure": False, "dry_run": False}
        )
    with pytest.raises(BackendRejected, match="neither a PEM certificate nor a readable file"):
        backend_from_settings({"api_url": "https://api.example:6443", "ca_file": "/nonexistent/ca.pem"})
