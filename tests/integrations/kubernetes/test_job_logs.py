"""A Kubernetes job's logs (integrations.kubernetes.logs) against the testbed's real API server.

The testbed has no kubelet, so no pod log can be served: what is tested is the call path (the Job's pods by
the `job-name` label the Job controller sets, then each pod's `/log`) and that the real server's answer for
a pod that exists is shown in its own words. Through the `rackplane` service account (exactly
deploy/kubernetes/rbac.yaml, which grants `get` on `pods/log`) the request passes RBAC and reaches the log
endpoint, where the server answers that it cannot reach the node; without that rule it would answer 403.
"""

import pytest

from integrations.kubernetes.jobs import KubernetesJobBackend
from integrations.kubernetes.logs import kubernetes_logs

pytestmark = [pytest.mark.integration]

NAMESPACE = "logs-ns"


@pytest.fixture
def pod(kube):
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    status, answer = kube.request(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}},
    )
    assert status in (201, 409), answer
    kube.register_node("gb-r09-t01")
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "rp-7-0-abcde", "namespace": NAMESPACE, "labels": {"job-name": "rp-7"}},
            "spec": {
                "nodeName": "gb-r09-t01",
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
            },
        }
    )
    # Another Job's pod in the same namespace: not this job's log.
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "rp-8-0-fghij", "namespace": NAMESPACE, "labels": {"job-name": "rp-8"}},
            "spec": {"nodeName": "gb-r09-t01", "containers": [{"name": "main", "image": "busybox"}]},
        }
    )
    yield "rp-7-0-abcde"
    kube.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default")


def test_pod_logs_through_the_rackplane_account_pass_rbac_and_reach_the_log_endpoint(
    kube_testbed, kube_proxy, pod
):
    with KubernetesJobBackend(
        kube_proxy.url, token=kube_testbed.token, ca_file=kube_testbed.ca, timeout=5
    ) as b:
        logs = kubernetes_logs(b, f"{NAMESPACE}/rp-7")
    assert logs.error == ""
    assert [part.name for part in logs.parts] == [pod]  # only this Job's pod, by its job-name label
    (part,) = logs.parts
    assert part.text == ""
    # Not RBAC's 403 (deploy/kubernetes/rbac.yaml grants pods/log): the server's own answer about the node.
    assert part.error.startswith("the API server answered ") and "403" not in part.error
    assert "pods/log" not in part.error
    log_requests = [r for r in kube_proxy.requests if r.path.endswith(f"/pods/{pod}/log")]
    assert log_requests and log_requests[-1].query.get("limitBytes") == [str(64 * 1024 + 1)]


def test_pod_logs_with_full_rights_reach_the_log_endpoint(kube_testbed, kube_proxy, pod):
    with KubernetesJobBackend(
        kube_proxy.url, token=kube_testbed.admin_token, ca_file=kube_testbed.ca, timeout=5
    ) as b:
        logs = kubernetes_logs(b, f"{NAMESPACE}/rp-7", limit=1024)
    (part,) = logs.parts
    # No kubelet runs: the server cannot fetch the log and says so (its words vary by why: no node address,
    # connection refused). Whatever they are, they are shown, never a traceback.
    assert part.error.startswith("the API server answered ")
    assert len(part.error) > len("the API server answered 400: ")
    print("the real API server's answer:", part.error)


def test_a_job_without_pods_and_a_bad_id(kube_testbed, kube_proxy, pod):
    with KubernetesJobBackend(
        kube_proxy.url, token=kube_testbed.token, ca_file=kube_testbed.ca, timeout=5
    ) as b:
        none = kubernetes_logs(b, f"{NAMESPACE}/rp-99")
        bad = kubernetes_logs(b, "not-a-kubernetes-id")
    assert none.parts == [] and "has no pods" in none.error
    assert bad.parts == [] and "has not been submitted to Kubernetes" in bad.error
