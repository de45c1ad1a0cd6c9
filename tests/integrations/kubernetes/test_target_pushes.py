"""What an admin sees when a Kubernetes push is refused by the real API server (tests/integrations/
kube_testbed.py): a conflict with another tool's fields and a Kueue CEL rule, pushed the way the portal pushes
(integrations.pushes.queue_pushes -> the push task -> KubernetesAdapter -> KubernetesTarget), read back from
the push record, the push pages and the dry run (`push_configs --dry-run`).

The target talks to the real server through `kube_proxy` with the `rackplane` service account's token and
the cluster CA, exactly as a production target is configured (api_url, token, ca_file).
"""

from __future__ import annotations

import html
import re

import pytest
from django.urls import reverse

from integrations import pushes
from integrations import state as configstate
from integrations.kubernetes import render as r
from integrations.models import ConfigPush, ConfigTarget, PushStatus

pytestmark = pytest.mark.django_db

integration = pytest.mark.integration

CONFLICT = (
    "applying ResourceFlavor nvl72: another tool set fields Rackplane sets, to other values: "
    '.spec.topologyName (set by "site-tool"); Rackplane did not overwrite them'
)
CEL_MESSAGE = "topologyName is immutable when topologyName is set"


def push_now(django_capture_on_commit_callbacks, target: ConfigTarget) -> ConfigPush:
    with django_capture_on_commit_callbacks(execute=True):
        [push] = pushes.queue_pushes(reason="test", targets=[target])
    push.refresh_from_db()
    return push


def kubernetes_target(kube_proxy, kube_testbed, **settings) -> ConfigTarget:
    return ConfigTarget.objects.create(
        name="gb-cluster",
        kind="kubernetes",
        settings={
            "api_url": kube_proxy.url,
            "token": kube_testbed.token,
            "ca_file": kube_testbed.ca,
            **settings,
        },
    )


@pytest.fixture
def cluster(kube, demo_inventory):
    """The wiped cluster with the demo inventory's nodes registered (as kubelets), and the shared
    ResourceFlavor already created by another tool, with another topology than Rackplane's."""
    for node in configstate.build_state().kubernetes.inventory.nodes:
        kube.register_node(node.hostname)
    kube.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "nvl72"},
            "spec": {"nodeLabels": {r.POOL_LABEL: "nvl72"}, "topologyName": "racks"},
        },
        "site-tool",
    )
    return kube


def page_text(client, url: str) -> str:
    """The page as an admin reads it: tags dropped, entities decoded, white space collapsed."""
    response = client.get(url)
    assert response.status_code == 200, url
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", response.content.decode())).split())


@integration
def test_a_conflict_with_another_tool_fails_the_push_naming_the_field_and_the_tool(
    cluster, kube_proxy, kube_testbed, admin_client_logged_in, django_capture_on_commit_callbacks
):
    target = kubernetes_target(kube_proxy, kube_testbed)

    push = push_now(django_capture_on_commit_callbacks, target)

    assert push.status == PushStatus.FAILED  # permanent: not retried
    assert push.attempts == 1
    assert push.error.startswith(CONFLICT)
    advice = pushes.what_to_do(push.error)
    assert advice.startswith(
        'change the field(s) back in "site-tool" (or stop "site-tool" from setting them)'
    )
    assert '"Take over fields other tools set"' in advice
    assert cluster.get("ResourceFlavor", "nvl72")["spec"]["topologyName"] == "racks"  # not overwritten
    assert not any("force" in w.query for w in kube_proxy.writes)

    detail = page_text(admin_client_logged_in, reverse("integrations:push-detail", args=[push.pk]))
    assert "The push failed." in detail
    assert CONFLICT in detail
    assert f"What to do next: {advice}" in detail
    listing = page_text(admin_client_logged_in, reverse("integrations:push-list"))
    assert CONFLICT[:100] in listing  # the first line of the error, clipped to 120 characters

    # The dry run (push_configs --dry-run) predicts it from the live object's field managers.
    [line] = [line for line in pushes.dry_run([target])["gb-cluster"] if "site-tool" in line]
    assert line == (
        '! ResourceFlavor nvl72: .spec.topologyName is set by "site-tool" to another value: the push fails '
        'on it unless the target may take it over ("Take over fields other tools set")'
    )


@integration
def test_a_kueue_rule_refusal_fails_the_push_with_its_message(
    cluster, kube_proxy, kube_testbed, admin_client_logged_in, django_capture_on_commit_callbacks
):
    target = kubernetes_target(kube_proxy, kube_testbed, force_conflicts=True)

    push = push_now(django_capture_on_commit_callbacks, target)

    assert push.status == PushStatus.FAILED
    first_line = push.error.splitlines()[0]
    assert first_line.startswith("applying ResourceFlavor nvl72: the API server refused it (422 Invalid)")
    assert CEL_MESSAGE in first_line
    assert "refuses to change this field of the existing object" in pushes.what_to_do(push.error)
    # The takeover was tried (the setting is on) and says so; Kueue's rule refused it.
    assert (
        'took over .spec.topologyName (set by "site-tool") on ResourceFlavor nvl72 (the target may take over '
        "fields of other tools)"
    ) in push.log
    assert cluster.get("ResourceFlavor", "nvl72")["spec"]["topologyName"] == "racks"

    detail = page_text(admin_client_logged_in, reverse("integrations:push-detail", args=[push.pk]))
    assert CEL_MESSAGE in detail and "took over .spec.topologyName" in detail
    assert "What was done before the failure stays on the target" in detail


def test_the_take_over_setting_is_off_unless_ticked_in_the_target_form(admin_client_logged_in):
    fields = {
        "name": "gb-cluster",
        "kind": "kubernetes",
        "enabled": "on",
        "api_url": "https://api.example:6443",
        "ca_file": "/etc/k8s/ca.pem",
    }
    page = page_text(admin_client_logged_in, reverse("integrations:target-create") + "?kind=kubernetes")
    assert "Take over fields other tools set" in page
    assert "takes the field over instead of failing the push" in page
    assert admin_client_logged_in.post(reverse("integrations:target-create"), fields).status_code == 302
    target = ConfigTarget.objects.get(name="gb-cluster")
    assert target.settings["force_conflicts"] is False
    edit = reverse("integrations:target-edit", args=[target.pk])
    assert admin_client_logged_in.post(edit, {**fields, "force_conflicts": "on"}).status_code == 302
    target.refresh_from_db()
    assert target.settings["force_conflicts"] is True
    assert "takes over fields other tools set" in pushes.target_summary(target)
