"""KubernetesClient: the connection to one Kubernetes API server, its requests, paths and reads.

How it talks (the official `kubernetes` client, `ApiClient.param_serialize` + `call_api`): the client's
typed APIs need one method per kind and its dynamic client first walks discovery and caches it in a file
under /tmp, so the generic request path with a fixed table of the kinds Rackplane writes (`CORE_KINDS` and
the bundled CRDs) is used instead. Only discovery of the CRD groups is read, to refuse early when Kueue (or
the DRA driver) is not installed. Render, diff, apply and prune are `KubernetesTarget` (target.py).

Errors: connection refused, timeouts, 429 and 5xx -> `KubernetesUnavailable` (transient: retry later);
400/401/403/404/409/422... -> `KubernetesRejected` (permanent, with the API server's message); a bad
kubeconfig, CA file or TLS failure -> `KubernetesConfigurationError` (permanent).
One 500 is permanent: a server-side apply of a field the cluster's CRD does not declare answers
500 "field not declared in schema" (the cluster's Kueue is older than the CRDs Rackplane renders for), and
retrying cannot help: it is `KubernetesRejected`, saying which CRD lacks which field.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import urllib3

from core.outbound import Guard, OutboundRefused, urllib3_pool_classes
from integrations.kubernetes import validate as schema
from integrations.kubernetes.errors import (
    KubernetesConfigurationError,
    KubernetesRejected,
    KubernetesUnavailable,
    status_causes,
    status_message,
    status_reason,
)
from integrations.kubernetes.fields import FIELD_MANAGER

if TYPE_CHECKING:
    from kubernetes import client as k8s_client

# The `kubernetes` package (~0.25 s to import: its whole generated client, config and dynamic modules) is
# imported where a connection is made, not at import: every portal process imports this module at start-up
# (the Kubernetes kind's registration), and most never talk to a cluster.

# Core kinds the target can write: (apiVersion, kind) -> (plural, namespaced). CRD kinds come from the CRDs.
CORE_KINDS = {
    ("v1", "Namespace"): ("namespaces", False),
    ("v1", "Node"): ("nodes", False),
    ("v1", "ResourceQuota"): ("resourcequotas", True),
    ("v1", "PersistentVolume"): ("persistentvolumes", False),
    ("v1", "PersistentVolumeClaim"): ("persistentvolumeclaims", True),
    ("v1", "ConfigMap"): ("configmaps", True),
    ("networking.k8s.io/v1", "NetworkPolicy"): ("networkpolicies", True),
}

# The API server's words when an applied object has a field its (older) CRD does not declare:
# "failed to create typed patch object (/inference; kueue.x-k8s.io/v1beta2, Kind=ClusterQueue):
# .spec.preemption.withinClusterQueue: field not declared in schema".
_UNDECLARED_FIELD = re.compile(r"(\.[^\s:]+): field not declared in schema")
_TYPED_OBJECT = re.compile(
    r"\((?P<namespace>[^/;()]*)/(?P<name>[^;()]*); (?P<api_version>[^,()]+), Kind=(?P<kind>\w+)\)"
)
RBAC_FILE = "deploy/kubernetes/rbac.yaml"


def _guard_connections(api_client: k8s_client.ApiClient, allow_private: bool) -> None:
    """Open every connection of `api_client` through the outbound guard (core.outbound): resolved once,
    each address vetted, connected to the vetted one; the allowance covers the API server's own address.
    Through a proxy (a kubeconfig's proxy-url) the operator's proxy is the egress control: left as it is."""
    guard = Guard(allow_private).for_url(api_client.configuration.host or "")
    manager = api_client.rest_client.pool_manager
    if isinstance(manager, urllib3.ProxyManager):
        return
    manager.pool_classes_by_scheme = urllib3_pool_classes(guard)


class KubernetesClient:
    """One Kubernetes cluster's API server.

    Configure with `api_url` + `token` + (`ca_cert` path or PEM text, or `insecure=True`), or with a
    `kubeconfig` path (and optionally `context`), or hand in a ready `api_client`. `timeout` is per request
    (connect and read).
    """

    def __init__(
        self,
        api_url: str | None = None,
        *,
        token: str | None = None,
        ca_cert: str | None = None,
        insecure: bool = False,
        kubeconfig: str | os.PathLike | None = None,
        context: str | None = None,
        timeout: float = 30.0,
        field_manager: str = FIELD_MANAGER,
        api_client: k8s_client.ApiClient | None = None,
        allow_private: bool = True,
    ):
        self.timeout = timeout
        self.field_manager = field_manager
        self._ca_file: str | None = None
        if api_client is None:
            from kubernetes import client as k8s_client

            api_client = k8s_client.ApiClient(
                self._configuration(api_url, token, ca_cert, insecure, kubeconfig, context)
            )
        api_client.user_agent = "rackplane"
        _guard_connections(api_client, allow_private)
        self.api = api_client
        self._kinds = dict(CORE_KINDS)
        for crd in schema.crds().values():
            names, group = crd["spec"]["names"], crd["spec"]["group"]
            for version in crd["spec"]["versions"]:
                if version.get("served"):
                    key = (f"{group}/{version['name']}", names["kind"])
                    self._kinds[key] = (names["plural"], crd["spec"]["scope"] == "Namespaced")

    def _configuration(self, api_url, token, ca_cert, insecure, kubeconfig, context):
        from kubernetes import client as k8s_client
        from kubernetes import config as k8s_config

        configuration = k8s_client.Configuration()
        if kubeconfig is not None:
            try:
                k8s_config.load_kube_config(
                    config_file=os.fspath(kubeconfig),
                    context=context,
                    client_configuration=configuration,
                    persist_config=False,
                )
            except (k8s_config.ConfigException, OSError, ValueError, TypeError) as error:
                raise KubernetesConfigurationError(
                    f"cannot load kubeconfig {kubeconfig}: {error}",
                    "point the Kubernetes target at a readable kubeconfig with a valid context",
                ) from error
        else:
            if not api_url:
                raise KubernetesConfigurationError(
                    "no API server URL and no kubeconfig", "configure the Kubernetes target's API URL"
                )
            configuration.host = api_url.rstrip("/")
            if token:
                configuration.api_key = {"BearerToken": token}
                configuration.api_key_prefix = {"BearerToken": "Bearer"}
            configuration.verify_ssl = not insecure
            if ca_cert:
                if ca_cert.lstrip().startswith("-----BEGIN"):
                    handle, self._ca_file = tempfile.mkstemp(prefix="rackplane-k8s-ca-", suffix=".pem")
                    with os.fdopen(handle, "w") as out:
                        out.write(ca_cert)
                    configuration.ssl_ca_cert = self._ca_file
                elif os.path.isfile(ca_cert):
                    configuration.ssl_ca_cert = ca_cert
                else:
                    raise KubernetesConfigurationError(
                        f"CA certificate {ca_cert!r} is neither a PEM certificate nor a readable file",
                        "give the cluster CA as a file path or PEM text, or set insecure (testing only)",
                    )
        # No retries inside the client: a failed request raises at once and the push task retries.
        configuration.retries = False
        return configuration

    def close(self) -> None:
        self.api.close()
        if self._ca_file:
            with contextlib.suppress(OSError):
                os.unlink(self._ca_file)
            self._ca_file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- HTTP -------------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str | None = None,
    ) -> tuple[int, Any]:
        """One API request -> (status, decoded JSON). Raises KubernetesUnavailable when the server cannot be
        reached, times out, throttles or fails (5xx); returns 4xx answers for the caller to judge."""
        from kubernetes.client.rest import ApiException

        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        where = f"{method} {path}"
        try:
            serialized = self.api.param_serialize(
                method=method,
                resource_path=path,
                query_params=list(query),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            response = self.api.call_api(*serialized, _request_timeout=(self.timeout, self.timeout))
            response.read()
        except ApiException as error:  # the REST layer reports TLS failures this way (status 0)
            raise KubernetesConfigurationError(
                f"{where}: cannot establish a trusted connection to {self.api.configuration.host}: "
                f"{error.reason}",
                "check the API URL and the cluster CA certificate",
            ) from error
        except urllib3.exceptions.SSLError as error:
            raise KubernetesConfigurationError(
                f"{where}: TLS failure talking to {self.api.configuration.host}: {error}",
                "check the API URL and the cluster CA certificate",
            ) from error
        except OutboundRefused as error:
            raise KubernetesConfigurationError(
                f"{where}: {error}", "check the Kubernetes target's API URL and its private-address allowance"
            ) from error
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise KubernetesUnavailable(
                f"{where}: the API server at {self.api.configuration.host} is not reachable: "
                f"{type(error).__name__}: {error}",
                "retry later, once the API server answers again; nothing was changed by this request",
            ) from error
        status = response.status
        text = (response.data or b"").decode("utf-8", "replace")
        try:
            data = json.loads(text) if text.strip() else None
        except json.JSONDecodeError:
            data = text
        if status >= 500 and "field not declared in schema" in status_message(data):
            raise self._undeclared_field(where, status, data)
        if status == 429 or status >= 500:
            raise KubernetesUnavailable(
                f"{where}: the API server answered {status}: {status_message(data)}",
                "retry later (the API server is overloaded or failing)",
                status=status,
                reason=status_reason(data),
            )
        return status, data

    @staticmethod
    def _undeclared_field(where: str, status: int, data: Any) -> KubernetesRejected:
        """500 "field not declared in schema": the cluster's CRD is older than the object. Permanent."""
        message = status_message(data)
        fields = sorted(set(_UNDECLARED_FIELD.findall(message)))
        typed = _TYPED_OBJECT.search(message)
        if typed:
            namespace, name = typed["namespace"], typed["name"]
            kind, api_version = typed["kind"], typed["api_version"]
            what = f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
        else:
            what, kind, api_version = where, "the object's", ""
        group = api_version.rpartition("/")[0]
        upgrade = (
            "upgrade Kueue on the cluster"
            if group == "kueue.x-k8s.io"
            else "upgrade NVIDIA's DRA driver on the cluster"
            if group == "resource.nvidia.com"
            else "upgrade the software that installs this CRD on the cluster"
        )
        lacks = " and ".join(fields) or "a field"
        return KubernetesRejected(
            f"{what}: the cluster's CRD for {kind}"
            + (f" ({api_version})" if api_version else "")
            + f" does not declare {lacks}, which Rackplane sets: the cluster runs an older version of this "
            f"CRD than the one Rackplane renders for (the API server answered {status}: {message})",
            f"{upgrade} (or apply its newer CRDs, the versions in integrations/kubernetes/crds/), then push "
            "again; retrying before that fails the same way",
            status=status,
            reason=status_reason(data) or "FieldNotDeclared",
        )

    def _rejected(self, what: str, status: int, data: Any, what_to_do: str = "") -> KubernetesRejected:
        details = [f"{c['field']}: {c['message']}".strip(": ") for c in status_causes(data)]
        message = status_message(data)
        if not what_to_do:
            what_to_do = {
                401: "the API server refused the credentials: renew the target's token",
                403: "grant Rackplane's service account the permission the API server names (RBAC): apply "
                f"{RBAC_FILE} of this Rackplane version to the cluster (kubectl apply --server-side -f "
                f"{RBAC_FILE}) and make sure the target's token is that service account's, then push again",
                409: "another field manager owns these fields; resolve the conflict and push again",
                422: "fix the object (see the API server's reason) and push again",
            }.get(status, "fix the request (see the API server's reason) and push again")
            if status == 422 and "immutable" in message:
                what_to_do = (
                    "the cluster refuses to change this field of the existing object (a rule of its CRD): "
                    "set it back on the cluster to what it was, or delete the object there (only if nothing "
                    "uses it) so that Rackplane creates it anew, then push again"
                )
        return KubernetesRejected(
            f"{what}: the API server refused it ({status} {status_reason(data)}): {message}",
            what_to_do,
            details,
            status=status,
            reason=status_reason(data),
        )

    # --- paths ------------------------------------------------------------------------------------

    def _kind(self, api_version: str, kind: str) -> tuple[str, bool]:
        try:
            return self._kinds[(api_version, kind)]
        except KeyError:
            raise KubernetesRejected(
                f"the Kubernetes target does not write {api_version} {kind}",
                "only Rackplane's own kinds can be pushed",
            ) from None

    def _path(
        self, api_version: str, kind: str, name: str | None = None, namespace: str | None = None
    ) -> str:
        plural, namespaced = self._kind(api_version, kind)
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        if namespaced and namespace:
            base += f"/namespaces/{namespace}"
        path = f"{base}/{plural}"
        return f"{path}/{name}" if name else path

    def _object_path(self, obj: dict[str, Any]) -> str:
        metadata = obj["metadata"]
        return self._path(obj["apiVersion"], obj["kind"], metadata["name"], metadata.get("namespace"))

    # --- reads ------------------------------------------------------------------------------------

    def get_object(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        status, data = self.request("GET", self._path(api_version, kind, name, namespace))
        if status == 404:
            return None
        if status >= 400:
            raise self._rejected(f"reading {kind} {name}", status, data)
        return data

    def list_objects(
        self, api_version: str, kind: str, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """Every object of the kind (all namespaces), each with apiVersion and kind set."""
        query = [("labelSelector", label_selector)] if label_selector else []
        path = self._path(api_version, kind)
        status, data = self.request("GET", path, query=query)
        if status >= 400:
            raise self._rejected(f"listing {kind}", status, data)
        items = []
        for item in (data or {}).get("items") or []:
            items.append({"apiVersion": api_version, "kind": kind, **item})
        return items

    def check_served(self, objects: Sequence[dict[str, Any]]) -> None:
        """Refuse early (before any write) when a custom resource's API is not served by the cluster."""
        needed: dict[str, set[str]] = {}
        for obj in objects:
            api_version = obj["apiVersion"]
            if "/" in api_version and (api_version, obj["kind"]) not in CORE_KINDS:
                needed.setdefault(api_version, set()).add(self._kind(api_version, obj["kind"])[0])
        for api_version, plurals in sorted(needed.items()):
            status, data = self.request("GET", f"/apis/{api_version}")
            if status >= 400 and status != 404:
                raise self._rejected(f"discovery of {api_version}", status, data)
            served = {r.get("name") for r in (data or {}).get("resources") or []} if status < 400 else set()
            missing = sorted(plurals - served)
            if missing:
                raise KubernetesRejected(
                    f"the cluster does not serve {api_version}"
                    + (f" ({', '.join(missing)} missing)" if status != 404 else ""),
                    "install the CRDs first (Kueue with its v1beta2 API for kueue.x-k8s.io; NVIDIA's DRA "
                    "driver for resource.nvidia.com); nothing was changed",
                    status=status,
                )
