"""The real Kubernetes API server of scripts/kube-testbed.sh, for the Kubernetes target and job backend tests.

`make test` starts the testbed and exports its environment (RACKPLANE_KUBE_*; see the script). Tests marked
`integration` use these fixtures:

* `kube`: a `KubeAdmin` (admin token) on a cluster wiped clean before the test: no Rackplane objects, no
  department namespaces, no Nodes. It registers fake Nodes (no kubelet runs; `register_ready_node` also
  reports them Ready with allocatable GPUs, for Kueue), reads objects back, writes what a controller would
  (`set_status`), and applies objects as another field manager.
* `kube_proxy`: a `FaultProxy` in front of the real server. Rackplane talks to it with the `rackplane`
  service account's token (exactly deploy/kubernetes/rbac.yaml) and the cluster CA; it records every request
  (`requests`, `writes`) and can inject what a real server cannot be made to do on demand: an answer of
  5xx/429 (`fail`), a slow answer (`fail(0, delay=...)`), a reply lost on the way back (`fail(503,
  after_forward=True)`: the real server handles the request, the client gets the 503), or a server that is
  down (`refuse_connections`). Everything else is the real server's answer, byte for byte.

The proxy serves TLS with the testbed's own serving certificate (SAN 127.0.0.1), so clients verify it with
the real cluster CA.
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import json
import os
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest

MISSING = (
    "the Kubernetes testbed is not running: run the suite with `make test` (it starts it), or start one with "
    "`scripts/kube-testbed.sh start DIR` and `source DIR/env` first"
)

# Namespaces the testbed itself has; everything else is the tests' and is wiped between tests.
SYSTEM_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease", "rackplane"}

# (apiVersion, kind) -> (plural, namespaced) for what tests read, write and wipe.
KINDS = {
    ("v1", "Namespace"): ("namespaces", False),
    ("v1", "Node"): ("nodes", False),
    ("v1", "ResourceQuota"): ("resourcequotas", True),
    ("v1", "PersistentVolume"): ("persistentvolumes", False),
    ("v1", "PersistentVolumeClaim"): ("persistentvolumeclaims", True),
    ("v1", "ConfigMap"): ("configmaps", True),
    ("v1", "Pod"): ("pods", True),
    ("networking.k8s.io/v1", "NetworkPolicy"): ("networkpolicies", True),
    ("batch/v1", "Job"): ("jobs", True),
    ("kueue.x-k8s.io/v1beta2", "Topology"): ("topologies", False),
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"): ("resourceflavors", False),
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"): ("clusterqueues", False),
    ("kueue.x-k8s.io/v1beta2", "Cohort"): ("cohorts", False),
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"): ("localqueues", True),
    # Served once Kueue was started on the testbed (kube-testbed.sh kueue-start installs its CRDs; they stay).
    ("kueue.x-k8s.io/v1beta2", "Workload"): ("workloads", True),
    ("resource.nvidia.com/v1beta1", "ComputeDomain"): ("computedomains", True),
}
BY_KIND = {kind: (api_version, *rest) for (api_version, kind), rest in KINDS.items()}
# Wiped in this order: what lives in namespaces first, the namespaces last.
WIPE_ORDER = [
    "Pod",
    "Job",
    "Workload",  # after its Job: Kueue (when it runs) would make a new one for a Job still there
    "ComputeDomain",
    "LocalQueue",
    "NetworkPolicy",
    "ResourceQuota",
    "PersistentVolumeClaim",
    "ConfigMap",
    "ClusterQueue",
    "Cohort",
    "ResourceFlavor",
    "Topology",
    "PersistentVolume",
    "Node",
]


@dataclass(frozen=True)
class Testbed:
    url: str
    ca: str
    token: str  # the rackplane service account's
    admin_token: str
    directory: Path

    @classmethod
    def from_environment(cls) -> Testbed | None:
        names = (
            "RACKPLANE_KUBE_URL",
            "RACKPLANE_KUBE_CA",
            "RACKPLANE_KUBE_TOKEN",
            "RACKPLANE_KUBE_ADMIN_TOKEN",
        )
        if not all(os.environ.get(n) for n in names):
            return None
        return cls(
            url=os.environ["RACKPLANE_KUBE_URL"],
            ca=os.environ["RACKPLANE_KUBE_CA"],
            token=os.environ["RACKPLANE_KUBE_TOKEN"],
            admin_token=os.environ["RACKPLANE_KUBE_ADMIN_TOKEN"],
            directory=Path(os.environ.get("RACKPLANE_KUBE_TESTBED", "")),
        )

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca)


def path_for(api_version: str, kind: str, name: str | None = None, namespace: str | None = None) -> str:
    plural, namespaced = KINDS[(api_version, kind)]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespaced and namespace:
        base += f"/namespaces/{namespace}"
    path = f"{base}/{plural}"
    return f"{path}/{name}" if name else path


class ApiError(Exception):
    def __init__(self, status: int, body: Any):
        self.status, self.body = status, body
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{status}: {message}")


class KubeAdmin:
    """The testbed's admin (system:masters): set-up, controller writes and read-back for tests."""

    def __init__(self, testbed: Testbed):
        self.testbed = testbed
        self._context = testbed.ssl_context()
        split = urlsplit(testbed.url)
        self._host, self._port = split.hostname, split.port
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPSConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPSConnection(
                self._host, self._port, context=self._context, timeout=30
            )
            self._local.connection = connection
        return connection

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        **query: str,
    ) -> tuple[int, Any]:
        if query:
            path += "?" + "&".join(f"{k}={quote(str(v))}" for k, v in query.items())
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.testbed.admin_token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        deadline = time.monotonic() + 15
        while True:
            connection = self._connection()
            try:
                connection.request(method, path, body=data, headers=headers)
                response = connection.getresponse()
                raw = response.read()
            except (http.client.HTTPException, OSError):
                connection.close()
                self._local.connection = None
                if time.monotonic() > deadline:
                    raise
                continue
            # A custom resource's storage answers 429 "storage is (re)initializing" for a moment after its
            # CRD changes; set-up waits for it as any client honouring Retry-After would.
            if response.status != 429 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        text = raw.decode("utf-8", "replace")
        try:
            answer = json.loads(text) if text.strip() else None
        except json.JSONDecodeError:
            answer = text
        return response.status, answer

    def ok(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        status, answer = self.request(method, path, body, **kwargs)
        if status >= 400:
            raise ApiError(status, answer)
        return answer

    # --- objects ----------------------------------------------------------------------------------

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        api_version, _, _ = BY_KIND[kind]
        status, answer = self.request("GET", path_for(api_version, kind, name, namespace or None))
        if status == 404:
            return None
        if status >= 400:
            raise ApiError(status, answer)
        return answer

    def list(self, kind: str, **query: str) -> list[dict[str, Any]]:
        api_version, _, _ = BY_KIND[kind]
        return self.ok("GET", path_for(api_version, kind), **query).get("items") or []

    def served(self, kind: str) -> bool:
        """Whether the server serves the kind now (Workloads: only while Kueue's CRDs are installed)."""
        api_version, _, _ = BY_KIND[kind]
        return self.request("GET", path_for(api_version, kind), limit="1")[0] != 404

    def names(self, kind: str, *, live_only: bool = True) -> list[str]:
        """Sorted names (`namespace/name` for namespaced kinds) of the kind's objects; objects that are being
        deleted (a deletionTimestamp: waiting on a controller that does not run here) are left out unless
        `live_only` is False."""
        out = []
        for item in self.list(kind):
            meta = item["metadata"]
            if live_only and meta.get("deletionTimestamp"):
                continue
            out.append(f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"])
        return sorted(out)

    def create(self, obj: dict[str, Any], manager: str = "kubectl-create") -> dict[str, Any]:
        """POST `obj` (an Update by `manager`, who then owns its fields)."""
        meta = obj["metadata"]
        path = path_for(obj["apiVersion"], obj["kind"], namespace=meta.get("namespace"))
        return self.ok("POST", path, obj, fieldManager=manager)

    def apply(self, obj: dict[str, Any], manager: str, *, force: bool = False) -> dict[str, Any]:
        """Server-side apply of `obj` as `manager`."""
        meta = obj["metadata"]
        path = path_for(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
        query = {"fieldManager": manager}
        if force:
            query["force"] = "true"
        return self.ok("PATCH", path, obj, content_type="application/apply-patch+yaml", **query)

    def merge_patch(self, kind: str, name: str, patch: dict[str, Any], namespace: str = "", **query: str):
        api_version, _, _ = BY_KIND[kind]
        path = path_for(api_version, kind, name, namespace or None)
        return self.ok("PATCH", path, patch, content_type="application/merge-patch+json", **query)

    def set_status(self, kind: str, name: str, namespace: str, status: dict[str, Any]) -> dict[str, Any]:
        """Write the object's status through its status subresource, as its controller would."""
        api_version, _, _ = BY_KIND[kind]
        path = path_for(api_version, kind, name, namespace or None) + "/status"
        return self.ok(
            "PATCH",
            path,
            {"status": status},
            content_type="application/merge-patch+json",
            fieldManager=f"{kind.lower()}-controller",
        )

    def register_node(self, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        """A Node as a kubelet would register it (the kubelet owns these labels)."""
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels or {})}}
        node["metadata"]["labels"].setdefault("kubernetes.io/hostname", name)
        return self.create(node, manager="kubelet")

    def register_ready_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        gpus: int = 4,
        devices: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        """A Node as a kubelet with the NVIDIA device plugin would report it: registered, then its status
        Ready with `gpus` allocatable `nvidia.com/gpu` (and any other `devices`: a MIG tray under the mixed
        strategy advertises `nvidia.com/mig-<profile>`), and the `node.kubernetes.io/not-ready` taint the API
        server puts on every new Node removed, as the node lifecycle controller does once it is Ready.
        Kueue's topology-aware scheduling counts only such nodes (Ready, untainted or tolerated, with
        allocatable); no kubelet or controller runs here to do it."""
        self.register_node(name, labels)
        capacity = {"nvidia.com/gpu": str(gpus), "cpu": "144", "memory": "900Gi", "pods": "110"}
        capacity.update({resource: str(count) for resource, count in (devices or {}).items()})
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        self.set_status(
            "Node", name, "", {"capacity": capacity, "allocatable": capacity, "conditions": [ready]}
        )
        return self.merge_patch("Node", name, {"spec": {"taints": None}}, fieldManager="node-controller")

    def resource_versions(self) -> dict[str, str]:
        """Every test-owned object's resourceVersion: equal before and after = nothing was written."""
        out = {}
        for kind in [*WIPE_ORDER, "Namespace"]:
            if kind == "Workload" and not self.served(kind):
                continue
            for item in self.list(kind):
                meta = item["metadata"]
                if kind == "Namespace" and meta["name"] in SYSTEM_NAMESPACES:
                    continue
                key = f"{kind}/{meta.get('namespace', '')}/{meta['name']}"
                out[key] = meta["resourceVersion"]
        return out

    # --- cleaning up ------------------------------------------------------------------------------

    def revision(self) -> str:
        """The store's revision now: a list's resourceVersion is etcd's revision, one counter for every kind,
        so two equal readings mean nothing in the cluster was written in between."""
        return self.ok("GET", "/api/v1/namespaces", limit="1")["metadata"]["resourceVersion"]

    def wipe(self) -> None:
        """Remove everything a test made: objects of every kind above, Nodes, and non-system namespaces
        (finalized by hand: the namespace controller does not run here). Nothing is done when nothing was
        written since the last wipe (the revision is the one it left); otherwise each kind goes in one
        `deletecollection` per namespace (one for a cluster-wide kind)."""
        if _CLEAN_AT.get(self.testbed.url) == self.revision():
            return
        for kind in WIPE_ORDER:
            if kind == "Workload" and not self.served(kind):
                continue
            api_version, _, namespaced = BY_KIND[kind]
            collections = set()
            for item in self.list(kind):
                meta = item["metadata"]
                if meta.get("namespace") in SYSTEM_NAMESPACES - {"default"}:
                    continue
                if meta.get("finalizers"):
                    # No controller runs here to finish deletions (pvc-protection, foregroundDeletion, ...).
                    self.merge_patch(
                        kind, meta["name"], {"metadata": {"finalizers": None}}, meta.get("namespace", "")
                    )
                collections.add(meta.get("namespace") if namespaced else None)
            for namespace in sorted(collections, key=str):
                # Background: a Job's default propagation (orphan) would add the `orphan` finalizer, which no
                # garbage collector removes here, and the Job would outlive the wipe.
                self.ok(
                    "DELETE",
                    path_for(api_version, kind, namespace=namespace),
                    gracePeriodSeconds="0",
                    propagationPolicy="Background",
                )
            # A controller that runs (Kueue, while a test module runs it) may have put its finalizer back
            # between the patch and the delete; on an object being deleted none can be added again.
            for item in self.list(kind) if collections else ():
                meta = item["metadata"]
                if meta.get("finalizers") and meta.get("deletionTimestamp"):
                    self.request(
                        "PATCH",
                        path_for(api_version, kind, meta["name"], meta.get("namespace")),
                        {"metadata": {"finalizers": None}},
                        content_type="application/merge-patch+json",
                    )
        for item in self.list("Namespace"):
            name = item["metadata"]["name"]
            if name in SYSTEM_NAMESPACES:
                continue
            self.request("DELETE", f"/api/v1/namespaces/{name}")
            live = self.get("Namespace", name)
            if live is not None:
                live["spec"] = {"finalizers": []}
                self.request("PUT", f"/api/v1/namespaces/{name}/finalize", live)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            left = [n for n in self.names("Namespace", live_only=False) if n not in SYSTEM_NAMESPACES]
            if not left:
                _CLEAN_AT[self.testbed.url] = self.revision()
                return
            time.sleep(0.05)
        raise AssertionError(f"namespaces left after the wipe: {left}")


# The revision each testbed (by URL) was at when this process last wiped it clean.
_CLEAN_AT: dict[str, str] = {}


# --- the fault-injecting proxy ----------------------------------------------------------------------


@dataclass
class Fault:
    method: str | None
    path: str | None
    status: int
    message: str
    reason: str
    times: int
    delay: float
    after_forward: bool = False


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]] = field(default_factory=dict)
    authorization: str = ""
    content_type: str = ""

    @property
    def dry_run(self) -> bool:
        return self.query.get("dryRun") == ["All"]


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class FaultProxy:
    """A TLS proxy in front of the real API server: records requests, injects faults. See the module doc."""

    def __init__(self, testbed: Testbed):
        self.testbed = testbed
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._port = 0
        self._connections: set[socket.socket] = set()
        split = urlsplit(testbed.url)
        self.upstream = (split.hostname, split.port)
        self.upstream_context = testbed.ssl_context()
        self.server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        pki = testbed.directory / "pki"
        self.server_context.load_cert_chain(pki / "server.crt", pki / "server.key")

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(_ProxyHandler):
            state = proxy

        server = ThreadingHTTPServer(("127.0.0.1", self._port), Handler, bind_and_activate=False)
        server.allow_reuse_address = True
        server.server_bind()
        server.server_activate()
        server.socket = self.server_context.wrap_socket(server.socket, server_side=True)
        server.daemon_threads = True
        self._server = server
        self._port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.01}, name="kube-proxy", daemon=True
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
        """Stop listening and drop every open connection: clients get "connection refused" (an API server
        that is down) until `accept_connections()` listens again on the same port."""
        self.stop()
        with self._lock:
            connections, self._connections = list(self._connections), set()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def accept_connections(self) -> None:
        if self._server is None:
            self.start()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._port}"

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
        after_forward: bool = False,
    ) -> None:
        """Answer the next `times` requests matching `method` and containing `path` with `status` (after
        sleeping `delay` seconds; status 0 = only the delay, then the real server's answer). `after_forward`:
        the request reaches the real server first and its answer is replaced by the fault's (a lost reply)."""
        self.faults.append(Fault(method, path, status, message, reason, times, delay, after_forward))

    def _fault_for(self, request: Request) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.times <= 0:
                    continue
                if fault.method and fault.method != request.method:
                    continue
                if fault.path and fault.path not in request.path:
                    continue
                fault.times -= 1
                return fault
        return None

    def forward(self, method: str, raw_path: str, headers: dict[str, str], body: bytes):
        split = urlsplit(raw_path)
        request = Request(
            method,
            split.path,
            parse_qs(split.query),
            headers.get("authorization", ""),
            headers.get("content-type", ""),
        )
        with self._lock:
            self.requests.append(request)
        fault = self._fault_for(request)
        if fault is not None and fault.after_forward:
            # A lost reply: the real server handles the request; its answer is dropped, the fault's sent.
            self._upstream(method, raw_path, headers, body)
        if fault is not None:
            if fault.delay:
                time.sleep(fault.delay)
            if fault.status:
                reason = fault.reason or {429: "TooManyRequests", 503: "ServiceUnavailable"}.get(
                    fault.status, "InternalError"
                )
                data = json.dumps(status_body(fault.status, reason, fault.message)).encode()
                return fault.status, [("Content-Type", "application/json")], data
        return self._upstream(method, raw_path, headers, body)

    def _upstream(self, method: str, raw_path: str, headers: dict[str, str], body: bytes):
        connection = http.client.HTTPSConnection(*self.upstream, context=self.upstream_context, timeout=60)
        try:
            forwarded = {
                k: v
                for k, v in headers.items()
                if k in ("authorization", "content-type", "accept", "user-agent", "content-encoding")
            }
            connection.request(method, raw_path, body=body or None, headers=forwarded)
            response = connection.getresponse()
            data = response.read()
            passed = [
                (k, v)
                for k, v in response.getheaders()
                if k.lower() in ("content-type", "warning", "audit-id")
            ]
            return response.status, passed, data
        finally:
            connection.close()


class _ProxyHandler(BaseHTTPRequestHandler):
    state: FaultProxy
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.state._lock:
            self.state._connections.add(self.connection)

    def finish(self):
        with self.state._lock:
            self.state._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format, *args):  # quiet
        pass

    def _serve(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            status, passed, data = self.state.forward(self.command, self.path, headers, body)
        except OSError as error:  # the real server is gone: answer like a load balancer would
            status, passed = 502, [("Content-Type", "application/json")]
            data = json.dumps(status_body(502, "BadGateway", f"upstream: {error}")).encode()
        with contextlib.suppress(OSError):  # the client gave up (a timeout) or the port was closed
            self.send_response(status)
            for key, value in passed:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    do_GET = do_PATCH = do_DELETE = do_POST = do_PUT = _serve


# --- fixtures ----------------------------------------------------------------------------------------


_HELD: dict[str, int] = {}  # lock files this process holds -> fixture instances using them


@pytest.fixture(scope="session")
def kube_testbed():
    """The testbed, held for this test session alone: every test wipes the cluster, so two pytest runs
    sharing one testbed (two terminals, two people) take turns instead of wiping each other's objects."""
    testbed = Testbed.from_environment()
    if testbed is None:
        pytest.fail(MISSING)
    path = str(testbed.directory / ".session.lock")
    if path in _HELD:  # this session holds it already (the fixture is imported by more than one conftest)
        _HELD[path] += 1
        try:
            yield testbed
        finally:
            _HELD[path] -= 1
        return
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a lock per open file: taken twice in one process, it would wait
        _HELD[path] = 1
        try:
            yield testbed
        finally:
            del _HELD[path]
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture
def kube(kube_testbed) -> KubeAdmin:
    admin = KubeAdmin(kube_testbed)
    admin.wipe()
    return admin


@pytest.fixture
def kube_proxy(kube_testbed, kube):
    with FaultProxy(kube_testbed) as proxy:
        yield proxy
