"""A small local stand-in for a Kubernetes API server, for testing KubernetesTarget and KubernetesJobBackend
(no cluster can run here).

`KubeStandIn()` serves HTTP on 127.0.0.1 (a free port) from a thread; use it as a context manager or call
`start()` / `stop()`. It speaks the part of the API server's contract that Rackplane's client uses:

* Discovery: `GET /api`, `/apis`, `/api/v1`, `/apis/<group>/<version>` (APIResourceList). The Kueue and
  NVIDIA groups are served only when `crds=True` (the default), like a cluster with the CRDs installed.
* `GET` one object, `LIST` a kind (one namespace, or all namespaces at the cluster-wide path) with
  `labelSelector` (`k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`, comma = and). Items of
  core kinds in a list carry no apiVersion/kind, as the real server sends them.
* `DELETE` one object (`dryRun=All` changes nothing). Deleting a Namespace deletes what is in it at once.
  Deleting a Job with `propagationPolicy=Background` or `Foreground` deletes its pods (those labelled
  `batch.kubernetes.io/job-name=<job>`) at once, as the garbage collector would; without a policy (the
  batch/v1 default, `Orphan`) they stay.
* `POST` to a collection creates an object (JSON; no Content-Type means JSON, as on the API server): 201,
  or 409 `AlreadyExists` (the real message and details) when the name is taken, 404 when the namespace
  does not exist, 400 when apiVersion/kind or the namespace do not match the URL, 422 without
  `metadata.name`; `dryRun=All` answers without storing. `status` in the body is dropped (it is a
  subresource), as the API server does.
* Server-side apply: `PATCH` with `Content-Type: application/apply-patch+yaml` only, `fieldManager`
  required (422 without), create-if-missing (201) else 200, `dryRun=All` computes the answer but changes
  nothing, `force=true` takes fields over from other managers, otherwise a field another manager owns
  with a different value is a 409 Conflict (the real message format). A body whose apiVersion/kind does
  not match the URL is a 422; a name or namespace that does not match the URL a 400; an apply into a
  namespace that does not exist a 404; `metadata.managedFields` in the body a 400.
* Field ownership per manager and operation (Apply / Update), exposed as real `metadata.managedFields`
  entries (`fieldsType: FieldsV1`). Granularity: each key of `metadata.labels` and
  `metadata.annotations`, each top-level key of `spec` (owned as a whole subtree), each other top-level
  field. A field the applier owned before and leaves out is removed unless another manager owns it too.
  A no-op apply does not bump resourceVersion.
* Test hooks: `add(obj, manager=...)` stores an object as if written by an `Update` (a kubelet-registered
  Node, a hand-made Namespace, a Job's Pod); `set_status(kind, name, namespace, status)` writes an object's
  status as its controller would (mark a Job running, Complete or Failed); `fail(...)` injects a status (or
  a delay) for matching requests; `refuse_connections()` closes the port (and every open connection) so
  clients get "connection refused" until `accept_connections()`; `requests` and `writes` record what was
  asked.

Not implemented (documented so nobody relies on it): authentication and RBAC (the bearer token is
recorded, not checked), schema validation, defaulting and quantity canonicalisation, admission and CEL
rules, version conversion (an object is stored once per group; it is returned with the requested
apiVersion unchanged), field ownership deeper than listed above (real SSA tracks every leaf and list item),
`generateName`, PUT, JSON / merge / strategic-merge patches (415), controllers (a created Job gets no pods
and no status until the test gives it some; no pod-template labels or selector are defaulted), finalizers
and graceful deletion (deletes are immediate, so a Foreground deletion never shows a `deletionTimestamp`),
cascading deletion beyond a Job's pods, watches, pagination (`limit` / `continue`), field selectors, status
subresource endpoints, resourceVersion preconditions, and `uid`-based ownership references.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

APPLY = "application/apply-patch+yaml"

# (group, version, kind, plural, namespaced)
CORE = [
    ("", "v1", "Namespace", "namespaces", False),
    ("", "v1", "Node", "nodes", False),
    ("", "v1", "ResourceQuota", "resourcequotas", True),
    ("", "v1", "PersistentVolume", "persistentvolumes", False),
    ("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True),
    ("", "v1", "ConfigMap", "configmaps", True),
    ("", "v1", "Pod", "pods", True),
    ("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", True),
    ("batch", "v1", "Job", "jobs", True),
]
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # the Job controller puts it on every pod of a Job
CUSTOM = [
    (group, version, kind, plural, namespaced)
    for version in ("v1beta1", "v1beta2")
    for group, kind, plural, namespaced in (
        ("kueue.x-k8s.io", "ClusterQueue", "clusterqueues", False),
        ("kueue.x-k8s.io", "LocalQueue", "localqueues", True),
        ("kueue.x-k8s.io", "ResourceFlavor", "resourceflavors", False),
        ("kueue.x-k8s.io", "Topology", "topologies", False),
        ("kueue.x-k8s.io", "Cohort", "cohorts", False),
    )
] + [("resource.nvidia.com", "v1beta1", "ComputeDomain", "computedomains", True)]


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:  # how the API server names the resource in messages
        return f"{self.plural}.{self.group}" if self.group else self.plural


@dataclass
class Fault:
    method: str | None
    path: str | None
    status: int
    message: str
    reason: str
    times: int
    delay: float


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    authorization: str

    @property
    def dry_run(self) -> bool:
        return self.query.get("dryRun") == "All"


class _Conflict(Exception):
    pass


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def _fields(obj: dict[str, Any]) -> set[tuple[str, ...]]:
    """The field paths an object sets, at the stand-in's granularity."""
    out: set[tuple[str, ...]] = set()
    metadata = obj.get("metadata") or {}
    for part in ("labels", "annotations"):
        out.update(("metadata", part, key) for key in metadata.get(part) or {})
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "metadata", "status"):
            continue
        if key == "spec" and isinstance(value, dict) and value:
            out.update(("spec", sub) for sub in value)
        else:
            out.add((key,))
    return out


_MISSING = object()


def _get(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = obj
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _set(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        obj = obj.setdefault(part, {})
    obj[path[-1]] = copy.deepcopy(value)


def _remove(obj: dict[str, Any], path: tuple[str, ...]) -> None:
    parent = _get(obj, path[:-1]) if len(path) > 1 else obj
    if isinstance(parent, dict):
        parent.pop(path[-1], None)
        if not parent and len(path) == 3 and path[0] == "metadata":  # no labels left: no labels map
            obj["metadata"].pop(path[1], None)


def _fields_v1(paths: set[tuple[str, ...]]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return tree


_REQUIREMENT = re.compile(
    r"^\s*(!?)\s*([^\s!=,()]+)\s*(?:(==|=|!=)\s*([^\s,()]*)|\s+(in|notin)\s*\(([^)]*)\))?\s*$"
)


def parse_selector(text: str) -> list[tuple[str, str, set[str]]]:
    """A label selector -> [(key, op, values)], op one of = != exists !exists in notin."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += char == "("
        depth -= char == ")"
        current += char
    if current.strip():
        parts.append(current)
    requirements = []
    for part in parts:
        match = _REQUIREMENT.match(part)
        if not match:
            raise ValueError(f"unable to parse requirement: {part!r}")
        negate, key, eq_op, eq_value, set_op, set_values = match.groups()
        if eq_op:
            requirements.append((key, "!=" if eq_op == "!=" else "=", {eq_value}))
        elif set_op:
            requirements.append((key, set_op, {v.strip() for v in set_values.split(",") if v.strip()}))
        else:
            requirements.append((key, "!exists" if negate else "exists", set()))
    return requirements


def selector_matches(requirements, labels: dict[str, str]) -> bool:
    for key, op, values in requirements:
        present, value = key in labels, labels.get(key)
        ok = {
            "=": present and value in values,
            "in": present and value in values,
            "!=": not present or value not in values,
            "notin": not present or value not in values,
            "exists": present,
            "!exists": not present,
        }[op]
        if not ok:
            return False
    return True


class KubeStandIn:
    """See the module docstring. `url` is the base URL once started."""

    def __init__(self, *, crds: bool = True):
        self.resources = [Resource(*r) for r in CORE + (CUSTOM if crds else [])]
        # (group, plural, namespace, name) -> stored object (without managedFields)
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        # same key -> {(manager, operation): set of field paths}
        self.owners: dict[tuple[str, str, str, str], dict[tuple[str, str], set[tuple[str, ...]]]] = {}
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        self._lock = threading.RLock()
        self._version = 1000
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._port = 0  # kept across refuse_connections() / accept_connections()
        self._connections: set[socket.socket] = set()

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self) -> KubeStandIn:
        standin = self

        class Handler(_Handler):
            server_state = standin

        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), Handler)
        self._port = self._server.server_address[1]
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, name="k8s-standin", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None

    def refuse_connections(self) -> None:
        """Stop listening and drop every open connection: clients get "connection refused" (as from an API
        server that is down) until `accept_connections()` listens again on the same port."""
        self.stop()
        with self._lock:
            connections, self._connections = list(self._connections), set()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def accept_connections(self) -> None:
        """Listen again (same port, same stored objects) after `refuse_connections()`."""
        if self._server is None:
            self.start()

    def __enter__(self) -> KubeStandIn:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # --- test hooks -------------------------------------------------------------------------------

    @property
    def writes(self) -> list[Request]:
        return [r for r in self.requests if r.method in ("PATCH", "POST", "PUT", "DELETE")]

    def fail(
        self,
        status: int,
        message: str = "injected failure",
        *,
        method: str | None = None,
        path: str | None = None,
        reason: str = "",
        times: int = 1,
        delay: float = 0.0,
    ) -> None:
        """Answer the next `times` requests matching `method` and containing `path` with `status` (after
        sleeping `delay` seconds; status 0 = only the delay, then the normal answer)."""
        self.faults.append(Fault(method, path, status, message, reason, times, delay))

    def add(self, obj: dict[str, Any], manager: str = "kubelet") -> dict[str, Any]:
        """Store `obj` as if written by an Update from `manager` (which then owns all of its fields)."""
        resource = self._resource_for(obj["apiVersion"], obj["kind"])
        metadata = obj["metadata"]
        key = (resource.group, resource.plural, metadata.get("namespace", ""), metadata["name"])
        with self._lock:
            stored = copy.deepcopy(obj)
            self._stamp(stored, created=key not in self.objects)
            self.objects[key] = stored
            self.owners.setdefault(key, {})[(manager, "Update")] = _fields(obj)
            return self._render(key, resource.api_version)

    def set_status(self, kind: str, name: str, namespace: str, status: dict[str, Any]) -> dict[str, Any]:
        """Replace the stored object's `status`, as its controller writes it (the status subresource)."""
        with self._lock:
            for key, obj in self.objects.items():
                if self._resource_by_plural(key[0], key[1]).kind == kind and key[2:] == (namespace, name):
                    obj["status"] = copy.deepcopy(status)
                    self._stamp(obj, created=False)
                    return self._render(key, obj["apiVersion"])
        raise KeyError(f"no {kind} {namespace}/{name}")

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """The stored object (with managedFields), or None."""
        with self._lock:
            for key in self.objects:
                resource = self._resource_by_plural(key[0], key[1])
                if resource.kind == kind and key[2:] == (namespace, name):
                    return self._render(key, self.objects[key]["apiVersion"])
        return None

    def names(self, kind: str) -> list[str]:
        """`namespace/name` (or `name`) of every stored object of a kind, sorted."""
        with self._lock:
            out = []
            for (group, plural, namespace, name), _ in self.objects.items():
                if self._resource_by_plural(group, plural).kind == kind:
                    out.append(f"{namespace}/{name}" if namespace else name)
            return sorted(out)

    def snapshot(self) -> dict:
        with self._lock:
            return copy.deepcopy((self.objects, self.owners))

    # --- internals --------------------------------------------------------------------------------

    def _resource_for(self, api_version: str, kind: str) -> Resource:
        for r in self.resources:
            if r.api_version == api_version and r.kind == kind:
                return r
        raise KeyError(f"{api_version} {kind} is not served")

    def _resource_by_plural(self, group: str, plural: str) -> Resource:
        return next(r for r in self.resources if r.group == group and r.plural == plural)

    def _stamp(self, obj: dict[str, Any], created: bool) -> None:
        self._version += 1
        metadata = obj.setdefault("metadata", {})
        metadata.pop("managedFields", None)
        if created:
            metadata.setdefault("uid", str(uuid.uuid4()))
            metadata.setdefault("creationTimestamp", _now())
        metadata["resourceVersion"] = str(self._version)

    def _render(self, key, api_version: str, obj: dict | None = None, owners: dict | None = None) -> dict:
        obj = copy.deepcopy(self.objects[key] if obj is None else obj)
        owners = self.owners.get(key, {}) if owners is None else owners
        obj["apiVersion"] = api_version
        obj["metadata"]["managedFields"] = [
            {
                "manager": manager,
                "operation": operation,
                "apiVersion": api_version,
                "time": _now(),
                "fieldsType": "FieldsV1",
                "fieldsV1": _fields_v1(paths),
            }
            for (manager, operation), paths in sorted(owners.items())
            if paths
        ]
        return obj

    def handle(self, method: str, raw_path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        split = urlsplit(raw_path)
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        request = Request(
            method,
            split.path,
            query,
            headers.get("content-type", "").split(";")[0].strip(),
            headers.get("authorization", ""),
        )
        with self._lock:
            self.requests.append(request)
            for fault in self.faults:
                if fault.times > 0 and (fault.method in (None, method)) and (fault.path or "") in split.path:
                    fault.times -= 1
                    delay, status = fault.delay, fault.status
                    answer = (
                        _status(status, fault.reason or "InternalError", fault.message) if status else None
                    )
                    break
            else:
                delay, answer = 0.0, None
        if delay:
            time.sleep(delay)
        if answer is not None:
            return answer["code"], answer
        with self._lock:
            return self._route(request, body)

    def _route(self, request: Request, body: bytes) -> tuple[int, Any]:
        parts = [p for p in request.path.split("/") if p]
        if parts == ["api"]:
            return 200, {"kind": "APIVersions", "versions": ["v1"]}
        if parts == ["apis"]:
            groups: dict[str, list[str]] = {}
            for r in self.resources:
                if r.group and r.version not in groups.setdefault(r.group, []):
                    groups[r.group].append(r.version)
            return 200, {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [
                    {
                        "name": g,
                        "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                        "preferredVersion": {"groupVersion": f"{g}/{vs[-1]}", "version": vs[-1]},
                    }
                    for g, vs in sorted(groups.items())
                ],
            }
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        served = [r for r in self.resources if r.group == group and r.version == version]
        if not served:
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            if request.method != "GET":
                return 405, _status(405, "MethodNotAllowed", "method not allowed")
            return 200, {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": [
                    {
                        "name": r.plural,
                        "singularName": r.kind.lower(),
                        "namespaced": r.namespaced,
                        "kind": r.kind,
                        "verbs": ["delete", "get", "list", "patch"],
                    }
                    for r in served
                ],
            }
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 2:
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        resource = next((r for r in served if r.plural == rest[0]), None)
        if resource is None or (namespace and not resource.namespaced):
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) == 2 else ""
        if name and resource.namespaced and not namespace:
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        if not name:
            if request.method == "POST":
                return self._create(resource, namespace, request, body)
            if request.method != "GET":
                return 405, _status(
                    405, "MethodNotAllowed", f"{request.method} on a collection is not implemented"
                )
            return self._list(resource, namespace, request.query.get("labelSelector", ""))
        key = (resource.group, resource.plural, namespace, name)
        if request.method == "GET":
            if key not in self.objects:
                return 404, _status(404, "NotFound", f'{resource.qualified} "{name}" not found')
            return 200, self._render(key, resource.api_version)
        if request.method == "DELETE":
            return self._delete(resource, key, request)
        if request.method == "PATCH":
            if request.content_type != APPLY:
                return 415, _status(
                    415,
                    "UnsupportedMediaType",
                    f"the stand-in only implements {APPLY}, not {request.content_type}",
                )
            return self._apply(resource, key, request, body)
        return 405, _status(405, "MethodNotAllowed", f"{request.method} is not implemented by the stand-in")

    def _list(self, resource: Resource, namespace: str, selector: str) -> tuple[int, Any]:
        try:
            requirements = parse_selector(selector) if selector else []
        except ValueError as error:
            return 400, _status(400, "BadRequest", str(error))
        items = []
        for key in sorted(self.objects):
            if key[:2] != (resource.group, resource.plural) or (namespace and key[2] != namespace):
                continue
            labels = self.objects[key]["metadata"].get("labels") or {}
            if selector_matches(requirements, labels):
                item = self._render(key, resource.api_version)
                if not resource.group:  # core list items carry no apiVersion/kind
                    item.pop("apiVersion", None)
                    item.pop("kind", None)
                items.append(item)
        return 200, {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.api_version,
            "metadata": {"resourceVersion": str(self._version)},
            "items": items,
        }

    def _delete(self, resource: Resource, key, request: Request) -> tuple[int, Any]:
        if key not in self.objects:
            return 404, _status(404, "NotFound", f'{resource.qualified} "{key[3]}" not found')
        answer = self._render(key, resource.api_version)
        if request.dry_run:
            return 200, answer
        del self.objects[key]
        self.owners.pop(key, None)
        if resource.kind == "Job" and request.query.get("propagationPolicy") in ("Background", "Foreground"):
            for other in [
                k
                for k, o in self.objects.items()
                if k[:3] == ("", "pods", key[2])
                and (o["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == key[3]
            ]:
                del self.objects[other]
                self.owners.pop(other, None)
        if resource.kind == "Namespace":
            for other in [k for k in self.objects if k[2] == key[3]]:
                del self.objects[other]
                self.owners.pop(other, None)
        return 200, answer

    def _create(self, resource: Resource, namespace: str, request: Request, raw: bytes) -> tuple[int, Any]:
        if request.content_type not in ("", "application/json"):  # none: JSON, as on the API server
            return 415, _status(
                415,
                "UnsupportedMediaType",
                f"the stand-in creates from application/json, not {request.content_type}",
            )
        try:
            body = json.loads(raw.decode() or "null")
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            return 400, _status(400, "BadRequest", f"error decoding JSON: {error}")
        if not isinstance(body, dict):
            return 400, _status(400, "BadRequest", "the body is not an object")
        if body.get("apiVersion") != resource.api_version or body.get("kind") != resource.kind:
            return 400, _status(
                400,
                "BadRequest",
                f"the API version in the data ({body.get('apiVersion')}) does not match the expected API "
                f"version ({resource.api_version})"
                if body.get("apiVersion") != resource.api_version
                else f"the kind in the data ({body.get('kind')}) does not match the URL ({resource.kind})",
            )
        metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        name = metadata.get("name")
        if not name:
            return 422, _status(
                422,
                "Invalid",
                f'{resource.kind}.{resource.group or "core"} "" is invalid: metadata.name: '
                "Required value: name or generateName is required",
                causes=[
                    {"reason": "FieldValueRequired", "field": "metadata.name", "message": "Required value"}
                ],
            )
        if metadata.get("namespace", namespace) != namespace or (resource.namespaced and not namespace):
            return 400, _status(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        if "managedFields" in metadata:
            return 400, _status(400, "BadRequest", "metadata.managedFields must be nil")
        if resource.namespaced and ("", "namespaces", "", namespace) not in self.objects:
            return 404, _status(404, "NotFound", f'namespaces "{namespace}" not found')
        key = (resource.group, resource.plural, namespace, name)
        if key in self.objects:
            return 409, _status(
                409,
                "AlreadyExists",
                f'{resource.qualified} "{name}" already exists',
                name=name,
                group=resource.group,
                kind=resource.plural,
            )
        stored = copy.deepcopy(body)
        stored.pop("status", None)  # a subresource: ignored on create
        if resource.namespaced:
            stored["metadata"]["namespace"] = namespace
        owners = {(request.query.get("fieldManager") or "unknown", "Update"): _fields(stored)}
        if request.dry_run:
            stored["metadata"]["creationTimestamp"] = _now()
            return 201, self._render(key, resource.api_version, stored, owners)
        self._stamp(stored, created=True)
        self.objects[key] = stored
        self.owners[key] = owners
        return 201, self._render(key, resource.api_version)

    def _apply(self, resource: Resource, key, request: Request, raw: bytes) -> tuple[int, Any]:
        manager = request.query.get("fieldManager", "")
        force = request.query.get("force", "false") == "true"
        name, namespace = key[3], key[2]
        if not manager:
            return 422, _status(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: '
                "fieldManager: Required value: is required for apply patch",
            )
        if request.query.get("dryRun", "All") != "All":
            return 400, _status(400, "BadRequest", f"Invalid dry run value: {request.query['dryRun']}")
        try:
            body = yaml.safe_load(raw.decode() or "null")
        except (yaml.YAMLError, UnicodeDecodeError) as error:
            return 400, _status(400, "BadRequest", f"error decoding YAML: {error}")
        if not isinstance(body, dict):
            return 400, _status(400, "BadRequest", "the apply body is not an object")
        if body.get("apiVersion") != resource.api_version or body.get("kind") != resource.kind:
            return 422, _status(
                422,
                "Invalid",
                f'{resource.kind}.{resource.group or "core"} "{name}" is invalid: apiVersion/kind: '
                f"the body is {body.get('apiVersion')}/{body.get('kind')}, "
                f"the URL is {resource.api_version}/{resource.kind}",
                causes=[
                    {"reason": "FieldValueInvalid", "field": "kind", "message": "does not match the URL"}
                ],
            )
        metadata = body.get("metadata") or {}
        if metadata.get("name") != name:
            return 400, _status(
                400,
                "BadRequest",
                f"the name of the object ({metadata.get('name')}) does not match the name on the URL "
                f"({name})",
            )
        if metadata.get("namespace", namespace if resource.namespaced else "") != namespace:
            return 400, _status(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        if "managedFields" in metadata:
            return 400, _status(400, "BadRequest", "metadata.managedFields must be nil")
        if resource.namespaced and ("", "namespaces", "", namespace) not in self.objects:
            return 404, _status(404, "NotFound", f'namespaces "{namespace}" not found')

        created = key not in self.objects
        live = copy.deepcopy(
            self.objects.get(key) or {"apiVersion": body["apiVersion"], "kind": body["kind"]}
        )
        owners = copy.deepcopy(self.owners.get(key, {}))
        mine = (manager, "Apply")
        applied = _fields(body)
        conflicts = []
        for owner, paths in owners.items():
            if owner[0] == manager:
                continue
            for path in sorted(applied & paths):
                if _get(live, path) != _get(body, path):
                    conflicts.append((owner[0], path))
        if conflicts and not force:
            causes = [
                {
                    "reason": "FieldManagerConflict",
                    "message": f'conflict with "{m}"',
                    "field": "." + ".".join(p),
                }
                for m, p in conflicts
            ]
            lines = "\n".join(
                f'- conflict with "{m}" using {resource.api_version}: .{".".join(p)}' for m, p in conflicts
            )
            return 409, _status(
                409,
                "Conflict",
                f"Apply failed with {len(conflicts)} conflict{'s' if len(conflicts) > 1 else ''}:\n{lines}",
                causes=causes,
            )
        if force:
            for owner, paths in owners.items():
                if owner[0] != manager:
                    paths.difference_update({p for m, p in conflicts if m == owner[0]})
        before = copy.deepcopy(live)
        for path in sorted(owners.get(mine, set()) - applied):
            if not any(path in paths for owner, paths in owners.items() if owner != mine):
                _remove(live, path)
        for path in applied:
            _set(live, path, _get(body, path))
        live.setdefault("metadata", {})["name"] = name
        if resource.namespaced:
            live["metadata"]["namespace"] = namespace
        owners[mine] = applied
        owners = {owner: paths for owner, paths in owners.items() if paths}
        changed = created or live != before or owners != self.owners.get(key, {})
        if request.dry_run:
            if created:
                live["metadata"]["creationTimestamp"] = _now()
            return (201 if created else 200), self._render(key, resource.api_version, live, owners)
        if changed:
            self._stamp(live, created)
            self.objects[key] = live
            self.owners[key] = owners
        return (201 if created else 200), self._render(key, resource.api_version)


class _Handler(BaseHTTPRequestHandler):
    server_state: KubeStandIn
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # Headers and body go out in separate writes: without this, Nagle + delayed ACK add ~40 ms each.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server_state._lock:
            self.server_state._connections.add(self.connection)

    def finish(self):
        with self.server_state._lock:
            self.server_state._connections.discard(self.connection)
        with contextlib.suppress(OSError):  # the client (or refuse_connections) may have closed it already
            super().finish()

    def log_message(self, format, *args):  # quiet
        pass

    def _serve(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            status, answer = self.server_state.handle(self.command, self.path, headers, body)
        except Exception as error:  # a stand-in bug must show up as a 500, not a hung client
            status, answer = 500, _status(500, "InternalError", f"stand-in error: {error!r}")
        data = json.dumps(answer).encode()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    do_GET = do_PATCH = do_DELETE = do_POST = do_PUT = _serve
