"""A tray leaving and returning to service reaches the schedulers (integrations.trays, wired by
integrations.signals): drained by the health side, the tray's Node on the real Kubernetes API server
(tests/integrations/kube_testbed.py) is cordoned, tainted and given Rackplane's condition; back in service,
all of it is undone; what each target answered is kept on the tray and shown on its page."""

from __future__ import annotations

import pytest
from django.urls import reverse

from integrations.models import ConfigTarget
from integrations.trays import sync_tray
from inventory.choices import TrayState
from inventory.health.actions import drain_tray
from inventory.health.returns import return_to_service
from inventory.models import ComputeTray

pytestmark = [pytest.mark.django_db, pytest.mark.integration]

TAINT = "rackplane.io/gpu-fault"


@pytest.fixture
def tray(demo_inventory, kube):
    tray = ComputeTray.objects.order_by("pk").first()
    kube.register_node(tray.hostname)
    return tray


@pytest.fixture
def target(kube_proxy, kube_testbed):
    return ConfigTarget.objects.create(
        name="gb-cluster",
        kind="kubernetes",
        settings={"api_url": kube_proxy.url, "token": kube_testbed.token, "ca_file": kube_testbed.ca},
    )


def node(kube, tray) -> dict:
    return kube.get("Node", tray.hostname)


def test_a_drained_tray_is_cordoned_and_tainted_and_returns_uncordoned(
    tray, target, kube, kube_proxy, django_capture_on_commit_callbacks, admin_client
):
    with django_capture_on_commit_callbacks(execute=True):
        drain_tray(tray, "XID 79 on GPU-0 (test)")
    live = node(kube, tray)
    assert live["spec"]["unschedulable"] is True
    assert any(t["key"] == TAINT and t["effect"] == "NoSchedule" for t in live["spec"]["taints"])
    conditions = {c["type"]: c for c in live["status"].get("conditions") or []}
    assert conditions["RackplaneGPUHealthy"]["status"] == "False"
    assert "XID 79" in conditions["RackplaneGPUHealthy"]["message"]
    tray.refresh_from_db()
    assert tray.state == TrayState.DRAIN
    [outcome] = tray.scheduler_state
    assert outcome["target"] == "gb-cluster" and outcome["kind"] == "kubernetes" and not outcome["error"]
    page = admin_client.get(reverse("inventory:tray-detail", args=[tray.pk])).content.decode()
    assert "gb-cluster" in page and outcome["message"] in page

    with django_capture_on_commit_callbacks(execute=True):
        return_to_service(tray, force=True, note="fixed")
    live = node(kube, tray)
    assert not live["spec"].get("unschedulable")
    assert not any(t["key"] == TAINT for t in live["spec"].get("taints") or [])
    conditions = {c["type"]: c for c in live["status"].get("conditions") or []}
    assert conditions["RackplaneGPUHealthy"]["status"] == "True"
    tray.refresh_from_db()
    assert tray.state == TrayState.UP and tray.scheduler_state[0]["action"] != "failed"


def test_an_unreachable_api_server_is_recorded_and_retried(
    tray, target, kube, kube_proxy, django_capture_on_commit_callbacks
):
    kube_proxy.refuse_connections()
    with django_capture_on_commit_callbacks(execute=True):
        drain_tray(tray, "XID 79 on GPU-0 (test)")
    tray.refresh_from_db()
    [outcome] = tray.scheduler_state
    assert outcome["action"] == "failed" and outcome["transient"] is True
    assert not node(kube, tray)["spec"].get("unschedulable")  # nothing reached the server
    kube_proxy.accept_connections()
    # The retry (the task sends itself again on a worker with backoff; here the next sync runs it).
    result = sync_tray(tray.pk)
    assert result["retry_in"] is None
    assert node(kube, tray)["spec"]["unschedulable"] is True
