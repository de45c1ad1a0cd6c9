"""Draining a tray's Node on the real API server of the testbed: cordon, taint, condition and annotations
written as field manager `rackplane-health` with the `rackplane` service account (exactly
deploy/kubernetes/rbac.yaml), read back as the admin; resume undoes only what Rackplane did."""

from __future__ import annotations

import threading

import pytest

from integrations.drain import (
    ALREADY_DRAINED,
    DRAINED,
    FAILED,
    NOT_DRAINED,
    NOT_OURS,
    NOT_REGISTERED,
    NOT_SUPPORTED,
    RESUMED,
    WOULD_DRAIN,
    WOULD_RESUME,
    apply_tray_state,
    fault_class,
    schedule_maintenance,
    with_prefix,
)
from integrations.kubernetes.drain import (
    CONDITION,
    CORDONED_BY,
    DRAIN_REASON,
    HEALTH_MANAGER,
    REQUESTED_BY,
    TAINT_KEY,
    KubernetesDrainer,
    condition_reason,
    field_managers,
    node_words,
    taint_value,
)
from integrations.kubernetes.errors import KubernetesRejected, KubernetesUnavailable

REASON = "rackplane: XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS) on GPU-3f1c9a2e-0b7d-4c55 at 2026-11-24T10:00Z"
HOST = "gb-r01-t05"
DEVICE_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def settings(url: str, testbed, **extra) -> dict:
    return {
        "api_url": url,
        "token": testbed.token,
        "ca_file": testbed.ca,
        "insecure": False,
        "dry_run": False,
        "force_conflicts": False,
        **extra,
    }


def register(kube, name: str = HOST, taints: list | None = None) -> dict:
    """A Node as a kubelet registers it (with a taint the device plugin's set-up put there). The real API
    server's TaintNodesByCondition admission adds `node.kubernetes.io/not-ready:NoSchedule` to a new Node
    (no node controller runs here to lift it): the Node's taints are those of the answer."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": list(taints if taints is not None else [DEVICE_TAINT])},
    }
    return kube.create(node, manager="kubelet")


def condition(node: dict) -> dict | None:
    return next((c for c in node["status"].get("conditions") or [] if c["type"] == CONDITION), None)


def cordon_as_admin(kube, name: str = HOST) -> None:
    """What `kubectl cordon` sends: a strategic merge patch of spec.unschedulable."""
    kube.ok(
        "PATCH",
        f"/api/v1/nodes/{name}",
        {"spec": {"unschedulable": True}},
        content_type="application/strategic-merge-patch+json",
        fieldManager="kubectl-cordon",
    )


# --- pure helpers ------------------------------------------------------------------------------------


def test_reasons_classes_and_taint_values():
    assert with_prefix("XID 79 on GPU-1\nsecond line") == "rackplane: XID 79 on GPU-1 second line"
    assert with_prefix(REASON) == REASON
    assert len(with_prefix("x" * 400)) == 255
    assert fault_class("drain", REASON) == "xid-79"
    assert fault_class("needs_service", "rackplane: needs service: 3 faults") == "needs-service"
    assert fault_class("maintenance", "rackplane: PSU swap") == "maintenance"
    assert fault_class("drain", "rackplane: NVLink fabric route unhealthy") == "fabric"
    assert taint_value("xid-79") == "xid-79"
    assert taint_value("needs service / RMA!") == "needs-service-RMA"
    assert len(taint_value("a" * 80)) == 63
    assert condition_reason(REASON, "xid-79") == "Xid79"
    assert condition_reason("", "needs-service") == "NeedsService"
    with pytest.raises(ValueError, match="unknown tray state"):
        apply_tray_state(HOST, "sideways", targets=[])


def test_node_words_name_the_mig_layout_and_the_mig_managers_progress():
    node = {"metadata": {"labels": {"nvidia.com/mig.config": "all-balanced"}}, "spec": {}}
    assert node_words(node) == "schedulable; MIG config all-balanced (no state yet)"
    node["metadata"]["labels"]["nvidia.com/mig.config.state"] = "failed"
    assert node_words(node) == "schedulable; MIG config all-balanced (failed)"
    assert "MIG" not in node_words({"metadata": {"labels": {}}, "spec": {}})


# --- the real API server -----------------------------------------------------------------------------


@pytest.mark.integration
def test_drain_cordons_taints_and_marks_the_node_and_resume_undoes_exactly_that(
    kube, kube_proxy, kube_testbed
):
    registered = register(kube)["spec"]["taints"]
    assert DEVICE_TAINT in registered and {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"} in (
        registered
    )
    drainer = KubernetesDrainer(settings(kube_proxy.url, kube_testbed), name="k8s")

    outcome = drainer.drain(HOST, REASON, owner="rules", fault="xid-79")

    assert outcome.action == DRAINED and outcome.changed and outcome.ok
    node = kube.get("Node", HOST)
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"] == [
        *registered,
        {"key": TAINT_KEY, "value": "xid-79", "effect": "NoSchedule"},
    ]
    annotations = node["metadata"]["annotations"]
    assert annotations[CORDONED_BY] == "rackplane"
    assert annotations[DRAIN_REASON] == REASON
    assert annotations[REQUESTED_BY] == "rules"
    marked = condition(node)
    assert (marked["status"], marked["reason"], marked["message"]) == ("False", "Xid79", REASON)
    assert marked["lastTransitionTime"]
    # Ownership is explicit: rackplane-health applied the cordon and annotations, and the condition on status.
    assert (HEALTH_MANAGER, "Apply") in field_managers(node, "spec", "unschedulable")
    assert (HEALTH_MANAGER, "Apply") in field_managers(
        node, "status", "conditions", f'k:{{"type":"{CONDITION}"}}', subresource="status"
    )
    assert field_managers(node, "spec", "taints") == [(HEALTH_MANAGER, "Update")]  # an atomic list
    # Sent with the service account's token (the shipped RBAC allows each write) and not as a dry run.
    assert [(r.method, r.path, r.content_type) for r in kube_proxy.writes] == [
        ("PATCH", f"/api/v1/nodes/{HOST}", "application/apply-patch+yaml"),
        ("PATCH", f"/api/v1/nodes/{HOST}", "application/merge-patch+json"),
        ("PATCH", f"/api/v1/nodes/{HOST}/status", "application/apply-patch+yaml"),
    ]
    assert all(r.authorization == f"Bearer {kube_testbed.token}" and not r.dry_run for r in kube_proxy.writes)
    assert outcome.state.startswith("cordoned (by rackplane-health)")
    assert outcome.reason == REASON

    # The same drain again writes nothing.
    writes = len(kube_proxy.writes)
    assert drainer.drain(HOST, REASON, fault="xid-79").action == ALREADY_DRAINED
    assert len(kube_proxy.writes) == writes

    back = drainer.resume(HOST, owner="alice")

    assert back.action == RESUMED and back.changed
    node = kube.get("Node", HOST)
    assert not node["spec"].get("unschedulable")
    assert node["spec"]["taints"] == registered  # the others' taints stay, in their order
    assert not {CORDONED_BY, DRAIN_REASON, REQUESTED_BY} & set(node["metadata"].get("annotations") or {})
    healthy = condition(node)
    assert (healthy["status"], healthy["reason"]) == ("True", "ReturnedToService")
    assert "asked by alice" in healthy["message"]
    assert "pods may be scheduled" in back.message

    # Nothing of Rackplane's is left to undo: a second resume writes nothing.
    writes = len(kube_proxy.writes)
    assert drainer.resume(HOST).action == NOT_DRAINED
    assert len(kube_proxy.writes) == writes


@pytest.mark.integration
def test_a_node_an_admin_cordoned_stays_cordoned_after_rackplanes_resume(kube, kube_proxy, kube_testbed):
    register(kube)
    cordon_as_admin(kube)
    drainer = KubernetesDrainer(settings(kube_proxy.url, kube_testbed))

    outcome = drainer.drain(HOST, REASON, fault="xid-79")

    assert outcome.action == DRAINED
    assert "cordoned already by kubectl-cordon" in outcome.message
    node = kube.get("Node", HOST)
    assert CORDONED_BY not in node["metadata"]["annotations"]  # Rackplane did not cordon it
    assert field_managers(node, "spec", "unschedulable") == [("kubectl-cordon", "Update")]
    assert any(t["key"] == TAINT_KEY for t in node["spec"]["taints"])

    back = drainer.resume(HOST)

    node = kube.get("Node", HOST)
    assert node["spec"]["unschedulable"] is True  # the admin's cordon is the admin's to lift
    assert all(t["key"] != TAINT_KEY for t in node["spec"]["taints"])
    assert back.action == RESUMED
    assert "stays cordoned by kubectl-cordon" in back.message and back.owner == "kubectl-cordon"


@pytest.mark.integration
def test_resume_leaves_a_node_rackplane_did_not_drain(kube, kube_proxy, kube_testbed):
    register(kube)
    cordon_as_admin(kube)
    drainer = KubernetesDrainer(settings(kube_proxy.url, kube_testbed))
    versions = kube.resource_versions()

    outcome = drainer.resume(HOST)

    assert outcome.action == NOT_OURS and not outcome.changed
    assert "cordoned (by kubectl-cordon)" in outcome.message
    assert kube_proxy.writes == [] and kube.resource_versions() == versions


@pytest.mark.integration
def test_a_new_cause_updates_the_reason_class_and_condition(kube, kube_proxy, kube_testbed):
    registered = register(kube, taints=[])["spec"]["taints"]
    drainer = KubernetesDrainer(settings(kube_proxy.url, kube_testbed))
    drainer.drain(HOST, REASON, fault="xid-79")
    first = condition(kube.get("Node", HOST))

    newer = "rackplane: needs service: 3 faults in 7 days, the last XID 48"
    outcome = drainer.drain(HOST, newer, fault="needs-service")

    assert outcome.action == DRAINED
    node = kube.get("Node", HOST)
    assert node["spec"]["taints"] == [
        *registered,
        {"key": TAINT_KEY, "value": "needs-service", "effect": "NoSchedule"},
    ]
    assert node["metadata"]["annotations"][DRAIN_REASON] == newer
    marked = condition(node)
    assert (marked["status"], marked["reason"], marked["message"]) == ("False", "NeedsService", newer)
    assert marked["lastTransitionTime"] == first["lastTransitionTime"]  # still False: no transition


@pytest.mark.integration
def test_dry_run_is_checked_by_the_server_and_changes_nothing(kube, kube_proxy, kube_testbed):
    register(kube)
    versions = kube.resource_versions()
    drainer = KubernetesDrainer(settings(kube_proxy.url, kube_testbed))

    outcome = drainer.drain(HOST, REASON, fault="xid-79", dry_run=True)

    assert outcome.action == WOULD_DRAIN and outcome.dry_run and not outcome.changed
    assert len(kube_proxy.writes) == 3 and all(r.dry_run for r in kube_proxy.writes)
    assert all("dryRun=All" in line for line in outcome.sent) and len(outcome.sent) == 3
    assert kube.resource_versions() == versions
    node = kube.get("Node", HOST)
    assert not node["spec"].get("unschedulable") and condition(node) is None

    # A target configured for dry runs only does the same without being asked.
    configured = KubernetesDrainer(settings(kube_proxy.url, kube_testbed, dry_run=True))
    assert configured.drain(HOST, REASON).action == WOULD_DRAIN
    drainer.drain(HOST, REASON)  # a real drain, so that there is something to resume
    versions = kube.resource_versions()
    assert configured.resume(HOST).action == WOULD_RESUME
    assert kube.resource_versions() == versions


@pytest.mark.integration
def test_a_field_another_manager_owns_is_a_conflict_reported_in_words(kube, kube_proxy, kube_testbed):
    registered = register(kube)["spec"]["taints"]
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": HOST, "annotations": {DRAIN_REASON: "nvsentinel: fatal DCGM health"}},
        },
        manager="nvsentinel",
    )
    drainer = KubernetesDrainer(settings(kube_proxy.url, kube_testbed))

    with pytest.raises(KubernetesRejected) as caught:
        drainer.drain(HOST, REASON, fault="xid-79")

    error = caught.value
    assert error.status == 409 and not error.transient
    assert '"nvsentinel"' in error.message and DRAIN_REASON in error.message
    assert "Rackplane did not overwrite them" in error.message
    node = kube.get("Node", HOST)
    assert not node["spec"].get("unschedulable") and node["spec"]["taints"] == registered

    # A target that may take over fields of other tools takes it over.
    forcing = KubernetesDrainer(settings(kube_proxy.url, kube_testbed, force_conflicts=True))
    assert forcing.drain(HOST, REASON, fault="xid-79").action == DRAINED
    node = kube.get("Node", HOST)
    assert node["metadata"]["annotations"][DRAIN_REASON] == REASON
    assert field_managers(node, "metadata", "annotations", DRAIN_REASON) == [(HEALTH_MANAGER, "Apply")]


@pytest.mark.integration
def test_a_node_changed_between_read_and_taint_write_is_read_again(kube, kube_proxy, kube_testbed):
    """The taints list is written at the resourceVersion it was read at; someone else's change in between
    makes the real API server answer 409 "the object has been modified": read again, write again, and both
    changes stay."""
    register(kube)
    drainer = KubernetesDrainer(settings(kube_proxy.url, kube_testbed))
    # Slow down the cordon and the first taint write (status 0: only a delay, then the real answer), and
    # label the Node as the admin while the taint write waits in the proxy.
    kube_proxy.fail(0, method="PATCH", path=f"/api/v1/nodes/{HOST}", times=2, delay=2.0)
    timer = threading.Timer(3.0, lambda: kube.merge_patch("Node", HOST, {"metadata": {"labels": {"x": "y"}}}))
    timer.start()
    try:
        outcome = drainer.drain(HOST, REASON, fault="xid-79")
    finally:
        timer.join()

    assert outcome.action == DRAINED
    taint_writes = [r for r in kube_proxy.writes if r.content_type == "application/merge-patch+json"]
    assert len(taint_writes) == 2  # the first was refused with 409 by the real server
    node = kube.get("Node", HOST)
    assert node["metadata"]["labels"]["x"] == "y"
    assert {"key": TAINT_KEY, "value": "xid-79", "effect": "NoSchedule"} in node["spec"]["taints"]


@pytest.mark.integration
def test_a_tray_the_cluster_does_not_know_is_not_created(kube, kube_proxy, kube_testbed):
    drainer = KubernetesDrainer(settings(kube_proxy.url, kube_testbed))

    assert drainer.drain("gb-r09-t01", REASON).action == NOT_REGISTERED
    assert drainer.resume("gb-r09-t01").action == NOT_REGISTERED
    assert kube_proxy.writes == [] and kube.names("Node") == []


@pytest.mark.integration
def test_an_api_server_that_is_down_or_failing_is_transient(kube, kube_proxy, kube_testbed):
    register(kube)
    drainer = KubernetesDrainer(settings(kube_proxy.url, kube_testbed))
    kube_proxy.fail(503, "etcdserver: leader changed", method="PATCH", path="/status")
    with pytest.raises(KubernetesUnavailable, match="leader changed"):
        drainer.drain(HOST, REASON)
    # Half done is fine: the retry converges (cordon and taint are in place, the condition follows).
    assert drainer.drain(HOST, REASON).action == DRAINED
    assert condition(kube.get("Node", HOST))["status"] == "False"

    kube_proxy.refuse_connections()
    with pytest.raises(KubernetesUnavailable, match="not reachable") as caught:
        drainer.resume(HOST)
    assert caught.value.transient


@pytest.mark.integration
@pytest.mark.django_db
def test_apply_tray_state_goes_through_every_enabled_kubernetes_target(kube, kube_proxy, kube_testbed):
    from integrations.models import ConfigTarget

    register(kube)
    ConfigTarget.objects.create(
        name="k8s", kind="kubernetes", settings=settings(kube_proxy.url, kube_testbed)
    )
    ConfigTarget.objects.create(
        name="staging",
        kind="kubernetes",
        enabled=False,
        settings=settings("https://127.0.0.1:1", kube_testbed),
    )

    drained = apply_tray_state(HOST, "drain", "XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS) on GPU-1", owner="rules")

    assert [(o.target, o.kind, o.action) for o in drained] == [("k8s", "kubernetes", DRAINED)]
    node = kube.get("Node", HOST)
    assert {"key": TAINT_KEY, "value": "xid-79", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert node["metadata"]["annotations"][DRAIN_REASON].startswith("rackplane: XID 79")

    window = schedule_maintenance(HOST, 4, *_window())
    assert [o.action for o in window] == [NOT_SUPPORTED]

    assert [o.action for o in apply_tray_state(HOST, "up", owner="alice")] == [RESUMED]
    assert not kube.get("Node", HOST)["spec"].get("unschedulable")

    kube_proxy.refuse_connections()
    down = apply_tray_state(HOST, "drain", "XID 79")
    assert [(o.action, o.transient) for o in down] == [(FAILED, True)]
    assert "not reachable" in down[0].message and "retry later" in down[0].message


def _window():
    from datetime import UTC, datetime, timedelta

    start = datetime.now(UTC) + timedelta(hours=1)
    return start, start + timedelta(hours=2)
