"""KubernetesTarget: the one place that talks to a Kubernetes API server. Render, diff, apply, read back.

How it talks (the official `kubernetes` client, `ApiClient.param_serialize` + `call_api`):

* Every write is a server-side apply: `PATCH` with `Content-Type: application/apply-patch+yaml`,
  `fieldManager=rackplane`, `force=true` (Rackplane is the source of truth for the fields it sets), and
  `dryRun=All` in dry-run mode. The client's typed APIs and its dynamic client can send that too; the typed
  APIs need one method per kind and the dynamic client first walks discovery and caches it in a file under
  /tmp, so the generic request path with a fixed table of the kinds Rackplane writes is used instead. Only
  discovery of the CRD groups is read, to refuse early when Kueue (or the DRA driver) is not installed.
* Server-side apply owns fields per manager: a field Rackplane applied before and leaves out now is removed
  unless another manager also owns it. That is how a node label or a ResourceQuota key goes away.
* `apply` validates every object first (validate.py) and sends nothing if any is invalid; checks that the
  CRD groups it needs are served; reads the live objects; applies what differs (or what Rackplane does not
  own yet); then prunes: objects of the managed kinds labelled `app.kubernetes.io/managed-by: rackplane`
  that are not desired are deleted (in reverse apply order), and nodes that are no longer desired lose
  Rackplane's labels (an apply of the bare node). Unlabelled objects are never touched, Nodes are never
  created or deleted (a desired node that is not registered is skipped and reported).
* Pruning a department's Namespace deletes everything in it, workloads included: that is what removing a
  department means. Its PersistentVolume has reclaim policy Retain, so the data on the file server stays.
* Kubernetes has no transactions: an apply that fails half way leaves the objects before the failure
  applied. Server-side apply is idempotent, so the retry (the push task retries transient errors)
  converges; the error carries what was done (`error.result`).

Errors: connection refused, timeouts, 429 and 5xx -> `KubernetesUnavailable` (transient: retry later);
400/401/403/404/409/422... -> `KubernetesRejected` (permanent, with the API server's message); a bad
kubeconfig, CA file or TLS failure -> `KubernetesConfigurationError` (permanent).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException
from kubernetes.utils.quantity import parse_quantity

from core.errors import ExternalError
from integrations.kubernetes import validate as schema
from integrations.kubernetes.render import (
    KIND_ORDER,
    InventoryState,
    desired_objects,
    object_key,
    object_ref,
    sort_for_apply,
)
from tenancy.renderers import (
    DEFAULT_COHORT,
    DEFAULT_FLAVOR,
    KUEUE_API_VERSION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    TenantSpec,
)

FIELD_MANAGER = "rackplane"
APPLY_PATCH = "application/apply-patch+yaml"
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"

# Kinds Rackplane prunes (when labelled managed-by rackplane and no longer desired), by apiVersion.
# Nodes are not here: they are never deleted, only relieved of Rackplane's labels.
MANAGED_KINDS = {
    "Namespace": "v1",
    "Topology": KUEUE_API_VERSION,
    "ResourceFlavor": KUEUE_API_VERSION,
    "ClusterQueue": KUEUE_API_VERSION,
    "LocalQueue": KUEUE_API_VERSION,
    "ResourceQuota": "v1",
    "NetworkPolicy": "networking.k8s.io/v1",
    "PersistentVolume": "v1",
    "PersistentVolumeClaim": "v1",
}

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

# Paths whose scalars are Kubernetes quantities: the API server canonicalises them (2048Gi -> 2Ti).
_QUANTITY_PARENTS = {"hard", "capacity", "requests", "limits"}
_QUANTITY_FIELDS = {"nominalQuota", "borrowingLimit", "lendingLimit"}


# --- errors -------------------------------------------------------------------------------------------


class KubernetesError(ExternalError):
    """A push to Kubernetes failed. `what_to_do` says what an operator (or the retrying task) should do."""

    transient = False

    def __init__(
        self,
        message: str,
        what_to_do: str = "",
        details: Sequence[str] = (),
        *,
        status: int | None = None,
        reason: str = "",
    ):
        self.message = message
        self.what_to_do = what_to_do
        self.details = list(details)
        self.status = status
        self.reason = reason
        self.result: ApplyResult | None = None  # what an interrupted apply had done
        super().__init__(message)

    def __str__(self) -> str:
        text = self.message
        if self.details:
            text += "\n" + "\n".join(f"  {d}" for d in self.details)
        if self.what_to_do:
            text += f"\nWhat to do: {self.what_to_do}"
        return text


class KubernetesUnavailable(KubernetesError):
    """The API server did not answer, timed out, throttled (429) or failed (5xx). Transient: retry later."""

    transient = True


class KubernetesRejected(KubernetesError):
    """The API server (or validation before sending) refused the request. Permanent: fix and push again."""


class KubernetesConfigurationError(KubernetesError):
    """The target itself is misconfigured (kubeconfig, token, CA certificate, TLS). Permanent."""


# --- state and results --------------------------------------------------------------------------------


@dataclass(frozen=True)
class KubernetesState:
    """Everything Rackplane pushes to one cluster."""

    inventory: InventoryState
    tenants: tuple[TenantSpec, ...] = ()
    nfs_server: str = ""
    cohort: str = DEFAULT_COHORT
    flavor: str = DEFAULT_FLAVOR

    def __post_init__(self):
        object.__setattr__(self, "tenants", tuple(self.tenants))


@dataclass(frozen=True)
class FieldChange:
    """One field of one object: `old` None = added, `new` None = removed."""

    path: str
    old: Any
    new: Any

    def __str__(self) -> str:
        if self.old is None:
            return f"{self.path}: + {self.new!r}"
        if self.new is None:
            return f"{self.path}: - {self.old!r}"
        return f"{self.path}: {self.old!r} -> {self.new!r}"


@dataclass
class Diff:
    """What an apply would do: objects created, changed (field by field), deleted; nodes skipped."""

    create: list[str] = field(default_factory=list)
    change: dict[str, list[FieldChange]] = field(default_factory=dict)
    delete: list[str] = field(default_factory=list)
    missing_nodes: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.create or self.change or self.delete)

    def lines(self) -> list[str]:
        out = [f"+ {ref}" for ref in self.create]
        for ref, changes in self.change.items():
            out.append(f"~ {ref}")
            out += [f"    {c}" for c in changes]
        out += [f"- {ref}" for ref in self.delete]
        out += [
            f"! Node {name}: not registered in the cluster, labels not applied" for name in self.missing_nodes
        ]
        return out


@dataclass
class ApplyResult:
    dry_run: bool = False
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deleted)


@dataclass
class _Step:
    obj: dict[str, Any]  # what to apply
    live: dict[str, Any] | None
    action: str  # create | update | adopt | unchanged | missing-node | release
    changes: list[FieldChange]


@dataclass
class _Plan:
    steps: list[_Step]
    delete: list[dict[str, Any]]


# --- field helpers ------------------------------------------------------------------------------------


def _fmt(path: Sequence[Any]) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        elif any(c in str(part) for c in "./"):
            text += f"[{json.dumps(part)}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _is_quantity_path(path: Sequence[Any]) -> bool:
    return bool(path) and (path[-1] in _QUANTITY_FIELDS or (len(path) > 1 and path[-2] in _QUANTITY_PARENTS))


def _quantity(value: Any) -> Decimal | None:
    try:
        return parse_quantity(value)
    except (ValueError, TypeError, InvalidOperation):
        return None


def _same_scalar(path: Sequence[Any], desired: Any, live: Any) -> bool:
    if desired == live:
        return True
    if _is_quantity_path(path):
        a, b = _quantity(desired), _quantity(live)
        return a is not None and a == b
    return False


def _covers(
    path: list[Any], desired: Any, live: Any, changes: list[FieldChange], strict: bool = False
) -> None:
    """Field changes that make `live` hold every field of `desired`.

    Maps: keys the server added (defaults) are ignored; keys Rackplane stopped setting are found through
    its field ownership instead (see `_step`). Inside lists the comparison is exact (`strict`): a list item
    is owned as a whole, and the API server adds no defaults inside the lists Rackplane renders.
    Quantities compare by value (the server canonicalises 2048Gi to 2Ti).
    """
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            if live is None and not desired:  # an empty map the server leaves out (omitempty)
                return
            changes.append(FieldChange(_fmt(path), live, desired))
            return
        for key, value in desired.items():
            _covers([*path, key], value, live.get(key), changes, strict)
        if strict:
            for key in sorted(live.keys() - desired.keys()):
                changes.append(FieldChange(_fmt([*path, key]), live[key], None))
    elif isinstance(desired, list):
        if isinstance(live, list) and len(live) == len(desired):
            for i, (d, v) in enumerate(zip(desired, live, strict=True)):
                _covers([*path, i], d, v, changes, strict=True)
        elif not (live is None and not desired):
            changes.append(FieldChange(_fmt(path), live, desired))
    elif not _same_scalar(path, desired, live):
        changes.append(FieldChange(_fmt(path), live, desired))


_IDENTITY = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}


def _leaf_paths(value: Any, path: tuple = ()) -> list[tuple]:
    """Paths of the fields an applied object sets: scalars, lists (atomic here) and empty maps."""
    if isinstance(value, dict) and value:
        out = []
        for key, sub in value.items():
            out += _leaf_paths(sub, (*path, key))
        return out
    return [] if path in _IDENTITY else [path]


def _fields_v1_paths(tree: dict[str, Any], path: tuple = ()) -> list[tuple]:
    """managedFields `fieldsV1` -> field paths. List items (`k:`, `v:`, `i:`) stop at the list."""
    out: list[tuple] = []
    children = {k: v for k, v in (tree or {}).items() if k != "."}
    if not children:
        return [path] if path else []
    for key, sub in children.items():
        if key.startswith("f:"):
            out += _fields_v1_paths(sub, (*path, key[2:]))
        elif path:  # k:{...}, v:..., i:N -> the list itself is owned
            out.append(path)
    return sorted(set(out))


def owned_paths(obj: dict[str, Any], manager: str = FIELD_MANAGER) -> list[tuple]:
    """Field paths `manager` owns through server-side apply (from metadata.managedFields)."""
    paths: set[tuple] = set()
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            paths.update(_fields_v1_paths(entry.get("fieldsV1") or {}))
    return sorted(paths)


def _get(value: Any, path: Sequence[Any]) -> Any:
    for part in path:
        if isinstance(value, dict):
            value = value.get(part)
        else:
            return None
    return value


def _related(a: tuple, b: tuple) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


# --- the target ---------------------------------------------------------------------------------------


class KubernetesTarget:
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
    ):
        self.timeout = timeout
        self.field_manager = field_manager
        self._ca_file: str | None = None
        if api_client is None:
            api_client = k8s_client.ApiClient(
                self._configuration(api_url, token, ca_cert, insecure, kubeconfig, context)
            )
        api_client.user_agent = "rackplane"
        self.api = api_client
        self._kinds = dict(CORE_KINDS)
        for crd in schema.crds().values():
            names, group = crd["spec"]["names"], crd["spec"]["group"]
            for version in crd["spec"]["versions"]:
                if version.get("served"):
                    key = (f"{group}/{version['name']}", names["kind"])
                    self._kinds[key] = (names["plural"], crd["spec"]["scope"] == "Namespaced")

    def _configuration(self, api_url, token, ca_cert, insecure, kubeconfig, context):
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
        if status == 429 or status >= 500:
            raise KubernetesUnavailable(
                f"{where}: the API server answered {status}: {_status_message(data)}",
                "retry later (the API server is overloaded or failing)",
                status=status,
                reason=_status_reason(data),
            )
        return status, data

    def _rejected(self, what: str, status: int, data: Any, what_to_do: str = "") -> KubernetesRejected:
        details = []
        if isinstance(data, dict):
            for cause in (data.get("details") or {}).get("causes") or []:
                details.append(f"{cause.get('field', '')}: {cause.get('message', '')}".strip(": "))
        if not what_to_do:
            what_to_do = {
                401: "the API server refused the credentials: renew the target's token",
                403: "grant Rackplane's service account the permission named above (RBAC)",
                409: "another field manager owns these fields; resolve the conflict and push again",
                422: "fix the object (see the API server's reason) and push again",
            }.get(status, "fix the request (see the API server's reason) and push again")
        return KubernetesRejected(
            f"{what}: the API server refused it ({status} {_status_reason(data)}): {_status_message(data)}",
            what_to_do,
            details,
            status=status,
            reason=_status_reason(data),
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

    def read_back(self) -> list[dict[str, Any]]:
        """The objects Rackplane manages, as the cluster has them: every labelled object of the managed
        kinds, and each node Rackplane labels as a partial Node (name and Rackplane's labels only)."""
        objects = []
        for kind, api_version in MANAGED_KINDS.items():
            objects += self.list_objects(api_version, kind, MANAGED_SELECTOR)
        for node in self.list_objects("v1", "Node"):
            labels = self._rackplane_node_labels(node)
            if labels:
                name = node["metadata"]["name"]
                objects.append(
                    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
                )
        return sort_for_apply(objects)

    def _rackplane_node_labels(self, node: dict[str, Any]) -> dict[str, str]:
        live = (node.get("metadata") or {}).get("labels") or {}
        owned = {
            p[2]
            for p in owned_paths(node, self.field_manager)
            if len(p) == 3 and p[:2] == ("metadata", "labels")
        }
        return {k: v for k, v in sorted(live.items()) if k in owned}

    # --- render and diff --------------------------------------------------------------------------

    def render(self, state: KubernetesState) -> list[dict[str, Any]]:
        """Every object Rackplane wants in the cluster for this state, in apply order."""
        return desired_objects(
            state.inventory,
            state.tenants,
            nfs_server=state.nfs_server,
            cohort=state.cohort,
            flavor=state.flavor,
        )

    def _plan(self, desired: Sequence[dict[str, Any]]) -> _Plan:
        nodes = {n["metadata"]["name"]: n for n in self.list_objects("v1", "Node")}
        labelled: dict[tuple, dict[str, Any]] = {}
        for kind, api_version in MANAGED_KINDS.items():
            for obj in self.list_objects(api_version, kind, MANAGED_SELECTOR):
                labelled[object_key(obj)] = obj
        steps: list[_Step] = []
        desired_keys = set()
        for obj in desired:
            key = object_key(obj)
            desired_keys.add(key)
            metadata = obj["metadata"]
            if obj["kind"] == "Node":
                live = nodes.get(metadata["name"])
            elif key in labelled:
                live = labelled[key]
            else:
                live = self.get_object(
                    obj["apiVersion"], obj["kind"], metadata["name"], metadata.get("namespace")
                )
            steps.append(self._step(obj, live))
        delete = [
            obj
            for key, obj in labelled.items()
            if key not in desired_keys
            and ((obj.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE
        ]
        delete.sort(key=lambda o: (-KIND_ORDER.index(o["kind"]), *object_key(o)[2:]))
        for name, node in sorted(nodes.items()):
            if ("", "Node", "", name) in desired_keys:
                continue
            labels = self._rackplane_node_labels(node)
            if labels:
                bare = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
                changes = [FieldChange(_fmt(("metadata", "labels", k)), v, None) for k, v in labels.items()]
                steps.append(_Step(bare, node, "release", changes))
        return _Plan(steps, delete)

    def _step(self, obj: dict[str, Any], live: dict[str, Any] | None) -> _Step:
        if live is None:
            return _Step(obj, None, "missing-node" if obj["kind"] == "Node" else "create", [])
        changes: list[FieldChange] = []
        _covers([], {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}, live, changes)
        wanted = _leaf_paths(obj)
        owned = owned_paths(live, self.field_manager)
        for path in owned:
            if path[:1] in (("apiVersion",), ("kind",)) or path in _IDENTITY:
                continue
            if any(w[: len(path)] == path for w in wanted):
                # Still desired. When Rackplane owns a whole map (an atomic map, or a coarse owner), keys
                # the desired map no longer has go away with the apply.
                want, have = _get(obj, path), _get(live, path)
                if isinstance(want, dict) and isinstance(have, dict):
                    for key in sorted(have.keys() - want.keys()):
                        changes.append(FieldChange(_fmt((*path, key)), have[key], None))
                continue
            # A field Rackplane applied before and no longer sets: the apply removes it.
            value = _get(live, path)
            if value is not None:
                changes.append(FieldChange(_fmt(path), value, None))
        if changes:
            return _Step(obj, live, "update", changes)
        if all(any(_related(w, o) for o in owned) for w in wanted):
            return _Step(obj, live, "unchanged", [])
        return _Step(obj, live, "adopt", [])  # same values, but Rackplane does not own them all yet

    def diff(self, desired: Sequence[dict[str, Any]]) -> Diff:
        """What `apply(desired)` would change in the cluster, read from the live objects."""
        desired = list(desired)
        plan = self._plan(desired)
        result = Diff()
        for step in plan.steps:
            ref = object_ref(step.obj)
            if step.action == "create":
                result.create.append(ref)
            elif step.action in ("update", "release"):
                result.change[ref] = step.changes
            elif step.action == "missing-node":
                result.missing_nodes.append(step.obj["metadata"]["name"])
        result.delete = [object_ref(o) for o in plan.delete]
        return result

    # --- apply ------------------------------------------------------------------------------------

    def apply(self, desired: Sequence[dict[str, Any]], dry_run: bool = False) -> ApplyResult:
        """Validate, then server-side apply every object that differs, then prune. See the module doc."""
        desired = list(desired)
        if not desired:
            raise ValueError(
                "refusing to apply an empty desired set: it would prune everything Rackplane manages"
            )
        problems = [str(p) for p in schema.validate_all(desired)]
        seen: set[tuple] = set()
        for obj in desired:
            if isinstance(obj, dict) and not problems:
                key = object_key(obj)
                if key in seen:
                    problems.append(f"{object_ref(obj)}: listed twice")
                seen.add(key)
        if problems:
            raise KubernetesRejected(
                f"{len(problems)} object(s) would be rejected by the API server; nothing was sent",
                "fix the rendering (each line names the object and the field)",
                problems,
                status=422,
                reason="Invalid",
            )
        for obj in desired:
            self._kind(obj["apiVersion"], obj["kind"])
        self.check_served(desired)
        plan = self._plan(desired)
        result = ApplyResult(dry_run=dry_run)
        new_namespaces = {
            s.obj["metadata"]["name"]
            for s in plan.steps
            if s.action == "create" and s.obj["kind"] == "Namespace"
        }
        try:
            for step in plan.steps:
                ref = object_ref(step.obj)
                if step.action == "unchanged":
                    result.unchanged.append(ref)
                    continue
                if step.action == "missing-node":
                    result.skipped.append(ref)
                    result.log.append(f"skipped {ref}: the node is not registered in the cluster")
                    continue
                namespace = step.obj["metadata"].get("namespace")
                if dry_run and namespace in new_namespaces:
                    # The server cannot dry-run an object into a namespace that a dry run did not create.
                    result.created.append(ref)
                    result.log.append(f"would create {ref} (in a new namespace: not checked by the server)")
                    continue
                self._apply_one(step.obj, dry_run)
                (result.created if step.action == "create" else result.updated).append(ref)
                verb = {"create": "created", "release": "removed Rackplane's labels from"}.get(
                    step.action, "updated"
                )
                result.log.append(("would have " if dry_run else "") + f"{verb} {ref}")
            for obj in plan.delete:
                self._delete_one(obj, dry_run)
                result.deleted.append(object_ref(obj))
                result.log.append(("would have " if dry_run else "") + f"deleted {object_ref(obj)}")
        except KubernetesError as error:
            error.result = result
            done = "; ".join(result.log) if result.log else "nothing"
            error.details.append(f"done before the failure: {done}")
            raise
        return result

    def _apply_one(self, obj: dict[str, Any], dry_run: bool) -> dict[str, Any]:
        query = [("fieldManager", self.field_manager), ("force", "true")]
        if dry_run:
            query.append(("dryRun", "All"))
        status, data = self.request(
            "PATCH", self._object_path(obj), query=query, body=obj, content_type=APPLY_PATCH
        )
        if status >= 400:
            raise self._rejected(f"applying {object_ref(obj)}", status, data)
        return data

    def _delete_one(self, obj: dict[str, Any], dry_run: bool) -> None:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if obj["kind"] == "Node" or labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
            raise AssertionError(f"refusing to delete {object_ref(obj)}: not a Rackplane-managed object")
        query = [("dryRun", "All")] if dry_run else []
        status, data = self.request("DELETE", self._object_path(obj), query=query)
        if status == 404:
            return  # already gone (a namespace's deletion took it along)
        if status >= 400:
            raise self._rejected(f"deleting {object_ref(obj)}", status, data)


def _status_message(data: Any) -> str:
    if isinstance(data, dict):
        return str(data.get("message") or data.get("reason") or data)
    return str(data or "no message")


def _status_reason(data: Any) -> str:
    return str(data.get("reason", "")) if isinstance(data, dict) else ""


__all__ = [
    "FIELD_MANAGER",
    "MANAGED_KINDS",
    "ApplyResult",
    "Diff",
    "FieldChange",
    "KubernetesConfigurationError",
    "KubernetesError",
    "KubernetesRejected",
    "KubernetesState",
    "KubernetesTarget",
    "KubernetesUnavailable",
    "owned_paths",
]
