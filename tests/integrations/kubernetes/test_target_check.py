"""Test connection on a Kubernetes target (integrations.push_history.test_connection, the KubernetesAdapter's
check) against the real API server of the testbed, through the fault proxy: it works with the rackplane
service account's token and the cluster CA, says in words when the token is refused or the server is down,
and writes nothing."""

from __future__ import annotations

import pytest
from django.urls import reverse

from integrations import push_history
from integrations.models import ConfigTarget

pytestmark = [pytest.mark.django_db, pytest.mark.integration]


def target(kube_proxy, kube_testbed, **settings) -> ConfigTarget:
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


def test_check_works_and_writes_nothing(kube_proxy, kube_testbed, client_as, platform_admin):
    t = target(kube_proxy, kube_testbed)
    response = client_as(platform_admin).post(
        reverse("integrations:target-test", args=[t.pk]), HTTP_HX_REQUEST="true"
    )
    html = response.content.decode()
    assert 'data-ok="true"' in html and "Connection works." in html
    assert "gb-cluster answers: Kubernetes v1." in html
    assert "the token is accepted and may read Nodes" in html
    assert "Kueue APIs served: v1beta2, v1beta1" in html and "ComputeDomain APIs served: v1beta1" in html
    assert [r.path.split("?")[0] for r in kube_proxy.requests] == [
        "/version",
        "/api/v1/nodes",
        "/apis/kueue.x-k8s.io",
        "/apis/resource.nvidia.com",
    ]
    assert kube_proxy.writes == []
    # What it read is kept for the versions page (integrations.versions).
    t.refresh_from_db()
    assert t.facts["kubernetes_version"].startswith("v1.")
    # The preferred version first (the testbed's CRDs serve both Kueue versions, as Kueue 0.15-0.19 do).
    assert t.facts["kueue_versions"] == ["v1beta2", "v1beta1"]
    assert t.facts["compute_domain_versions"] == ["v1beta1"]


def test_check_says_the_token_was_refused(kube_proxy, kube_testbed):
    result = push_history.test_connection(target(kube_proxy, kube_testbed, token="not-a-token"))
    assert not result.ok
    assert "Testing gb-cluster failed:" in result.summary and "refused the token (401" in result.summary
    assert any("valid service-account token" in line for line in result.details)
    assert kube_proxy.writes == []


def test_check_says_the_server_is_down(kube_proxy, kube_testbed):
    t = target(kube_proxy, kube_testbed)
    kube_proxy.refuse_connections()
    try:
        result = push_history.test_connection(t)
    finally:
        kube_proxy.accept_connections()
    assert not result.ok and "is not reachable" in result.summary
