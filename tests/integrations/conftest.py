"""Fixtures for the integration tests of the outside systems: the real Kubernetes API server of the testbed
(tests/integrations/kube_testbed.py)."""

from tests.integrations.kube_testbed import kube, kube_proxy, kube_testbed  # noqa: F401
