"""A local stand-in for NVIDIA NMX Manager's partition API (http.server in a thread on 127.0.0.1:0).

It speaks the shape NmxFabricManager follows (see integrations/fabric/nmx.py for the sources):
`GET/POST /nmx/v1/partitions`, `GET/PUT/DELETE /nmx/v1/partitions/{ID}`, `GET /nmx/v1/operations[/{ID}]`,
`GET /nmx/v1/gpus`. Writes answer 202 `{"operationId"}` with a Location header; an operation goes pending ->
in-progress -> completed over successive polls (`operation_steps`) and its change takes effect when it
completes. It checks what the real manager is documented to check and answers 400/409 with
`{"code", "message"}`: unknown GPUs, members from two domains, a GPU already in another partition, a name
taken in the domain, a member type other than the partition's, a name change, an unknown body field.

Test hooks: `fail_next_operation()` (the next operation ends failed or cancelled), `fail_next_requests()`
(the next requests answer 500, or any status), `hold_operations` (operations never finish), `stop()` /
`start()` (the port refuses connections, state kept), `requests` / `writes` (what was asked).
"""

from __future__ import annotations

import itertools
import json
import threading
import urllib.parse
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

API = "/nmx/v1"
DEFAULT_PARTITION_ID = 32766


@dataclass(frozen=True)
class StandinGpu:
    id: str  # NMX-M's GPU ID (24 hex digits on a real manager; tests may use the GPU UUID itself)
    uuid: str  # nvidia-smi UUID: not part of the API, kept for the tests' convenience
    domain: str
    chassis_id: int
    slot_id: int
    host_id: int
    device_id: int

    @property
    def location(self) -> tuple:
        return (self.domain, self.chassis_id, self.slot_id, self.host_id, self.device_id)


@dataclass
class _Partition:
    id: str
    partition_id: int
    name: str
    domain: str
    type: str
    members: list[str]  # GPU IDs
    created: str
    updated: str


@dataclass
class _Operation:
    id: str
    method: str
    uri: str
    body: Any
    effect: Any  # callable applying the change; returns an error text or None
    target_path: str | None = None
    polls: int = 0
    status: str = "pending"
    failure: tuple[str, str] | None = None  # (status, message) this operation is to end with
    result: dict | None = None
    created: str = ""
    updated: str = ""


@dataclass
class Recorded:
    method: str
    path: str
    body: Any


class _Refuse(Exception):
    def __init__(self, status: int, message: str):
        self.status = status
        self.message = message


@dataclass
class NmxStandin:
    default_name: str = "Default Partition"
    default_type: str = "ID_BASED"
    token: str | None = None
    expose_domain: bool = True
    operation_steps: tuple[str, ...] = ("pending", "in-progress", "completed")
    hold_operations: bool = False
    prefix: str = API  # where the API is served: /nmx/v1 (NMX-M, NetQ 5.0) or /v1 (NetQ 5.2)
    requests: list[Recorded] = field(default_factory=list)

    def __post_init__(self):
        self._lock = threading.RLock()
        self._gpus: dict[str, StandinGpu] = {}
        self._partitions: dict[str, _Partition] = {}
        self._names: dict[str, str] = {}
        self._operations: dict[str, _Operation] = {}
        self._ids = itertools.count(1)
        self._fail_operations: list[tuple[int, str, str]] = []  # (skip, status, message)
        self._fail_requests: list[tuple[int, str, tuple[str, ...] | None]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # --- life cycle -------------------------------------------------------------------------------------

    def start(self) -> NmxStandin:
        standin = self

        class Handler(_Handler):
            owner = standin

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, name="nmx-standin", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Close the listening socket: connections are refused until start() (same port, same state)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    close = stop

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- set-up and test hooks --------------------------------------------------------------------------

    def add_domain(self, domain: str, gpus: list[StandinGpu], *, default_partition: bool = True) -> None:
        """Register a domain's GPUs; with default_partition, all of them start in partition 32766."""
        with self._lock:
            for gpu in gpus:
                self._gpus[gpu.id] = gpu
            if default_partition:
                self._add_partition(
                    DEFAULT_PARTITION_ID, self.default_name, domain, self.default_type, [g.id for g in gpus]
                )

    def add_partition(
        self,
        name: str,
        domain: str,
        gpu_ids: list[str],
        *,
        partition_id: int | None = None,
        member_type: str = "ID_BASED",
    ) -> str:
        """Put a partition straight into the state (what another client did); returns its ID."""
        with self._lock:
            for other in self._partitions.values():
                other.members = [g for g in other.members if g not in gpu_ids]
            return self._add_partition(
                partition_id or self._free_id(domain), name, domain, member_type, list(gpu_ids)
            ).id

    def fail_next_operation(
        self, message: str = "operation failed", *, status: str = "failed", after: int = 0
    ):
        """The operation created after `after` more ends `status` (failed/cancelled) with `message`."""
        with self._lock:
            self._fail_operations.append((after, status, message))

    def fail_next_requests(
        self,
        status: int = 500,
        count: int = 1,
        message: str = "internal server error",
        *,
        methods: tuple[str, ...] | None = None,
    ):
        """The next `count` requests (of `methods`, default any) answer `status` with `message`."""
        with self._lock:
            self._fail_requests.extend([(status, message, methods)] * count)

    @property
    def writes(self) -> list[Recorded]:
        return [r for r in self.requests if r.method in ("POST", "PUT", "DELETE")]

    def partitions(self, domain: str | None = None) -> dict[str, tuple[int, list[str]]]:
        """name -> (PartitionID, sorted GPU UUIDs) as the stand-in holds them."""
        with self._lock:
            return {
                p.name: (p.partition_id, sorted(self._gpus[g].uuid for g in p.members))
                for p in self._partitions.values()
                if domain is None or p.domain == domain
            }

    def name_of(self, system_id: str) -> str:
        """The name of a partition by its system ID, also after it was deleted."""
        return self._names.get(system_id, system_id)

    def id_of(self, name: str, domain: str | None = None) -> str:
        with self._lock:
            return next(
                p.id for p in self._partitions.values() if p.name == name and domain in (None, p.domain)
            )

    def gpu_owner(self) -> dict[str, str]:
        with self._lock:
            return {self._gpus[g].uuid: p.name for p in self._partitions.values() for g in p.members}

    # --- the API -----------------------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers, body: Any) -> tuple[int, dict[str, str], Any]:
        with self._lock:
            self.requests.append(Recorded(method, path, body))
            parts = [urllib.parse.unquote(p) for p in path.split("?")[0].strip("/").split("/")]
            prefix = self.prefix.strip("/").split("/")
            if parts[: len(prefix)] != prefix or len(parts) <= len(prefix):
                # Kong (NMX-M's and NetQ's gateway) matches the route before it asks for credentials.
                raise _Refuse(404, f"no such endpoint {path}")
            if self.token and headers.get("Authorization") != f"Basic {self.token}":
                raise _Refuse(401, "unauthorized")
            for index, (status, message, methods) in enumerate(self._fail_requests):
                if methods is None or method in methods:
                    del self._fail_requests[index]
                    raise _Refuse(status, message)
            resource, rest = parts[len(prefix)], parts[len(prefix) + 1 :]
            if resource == "gpus" and method == "GET" and not rest:
                return 200, {}, [self._gpu_json(g) for g in self._gpus.values()]
            if resource == "operations" and method == "GET":
                if not rest:
                    return 200, {}, [self._operation_json(o) for o in self._operations.values()]
                return self._poll(rest[0])
            if resource == "partitions":
                if not rest and method == "GET":
                    return 200, {}, [self._partition_json(p) for p in self._partitions.values()]
                if not rest and method == "POST":
                    return self._create(body)
                if len(rest) == 1:
                    partition = self._partitions.get(rest[0])
                    if partition is None:
                        raise _Refuse(404, f"partition {rest[0]} not found")
                    if method == "GET":
                        return 200, {}, self._partition_json(partition)
                    if method == "PUT":
                        return self._update(partition, body)
                    if method == "DELETE":
                        return self._delete(partition)
            raise _Refuse(404 if method == "GET" else 405, f"{method} {path} is not supported")

    def _create(self, body: Any):
        body = self._body(body, allowed={"Name", "Members"}, required={"Name", "Members"})
        name = body["Name"]
        if not isinstance(name, str) or not name.strip() or len(name) > 255:
            raise _Refuse(400, "Name must be a non-empty string of at most 255 characters")
        member_type, gpu_ids = self._resolve(body["Members"])
        domain = self._domain_of(gpu_ids)
        self._check_name(name, domain, None)
        self._check_free(gpu_ids, None)

        def effect():
            try:
                self._check_name(name, domain, None)
                self._check_free(gpu_ids, None)
            except _Refuse as refusal:
                return refusal.message
            return self._add_partition(
                self._free_id(domain), name, domain, member_type or "UNDEFINED", gpu_ids
            )

        return self._accept("POST", f"{self.prefix}/partitions", body, effect)

    def _update(self, partition: _Partition, body: Any):
        body = self._body(body, allowed={"Name", "Members"}, required={"Members"})
        if "Name" in body and body["Name"] != partition.name:
            raise _Refuse(400, "the partition name cannot be modified")
        member_type, gpu_ids = self._resolve(body["Members"])
        if member_type and partition.type in ("ID_BASED", "LOCATION_BASED") and member_type != partition.type:
            raise _Refuse(
                409, f"partition {partition.name} is {partition.type}; members of another type cannot be used"
            )
        if gpu_ids and self._domain_of(gpu_ids) != partition.domain:
            raise _Refuse(
                400, f"members are not in the domain {partition.domain} of partition {partition.name}"
            )
        self._check_free(gpu_ids, partition)

        def effect():
            if partition.id not in self._partitions:
                return f"partition {partition.name} no longer exists"
            try:
                self._check_free(gpu_ids, partition)
            except _Refuse as refusal:
                return refusal.message
            partition.members = list(gpu_ids)
            if member_type and partition.type == "UNDEFINED":
                partition.type = member_type
            partition.updated = _now()
            return partition

        return self._accept("PUT", f"{self.prefix}/partitions/{partition.id}", body, effect)

    def _delete(self, partition: _Partition):
        if partition.partition_id == DEFAULT_PARTITION_ID:
            raise _Refuse(409, "the default partition cannot be deleted")

        def effect():
            if self._partitions.pop(partition.id, None) is None:
                return f"partition {partition.name} no longer exists"
            return None

        return self._accept("DELETE", f"{self.prefix}/partitions/{partition.id}", None, effect)

    def _accept(self, method: str, uri: str, body: Any, effect) -> tuple[int, dict, dict]:
        operation = _Operation(
            self._new_id(), method.lower(), uri, body, effect, created=_now(), updated=_now()
        )
        for index, (skip, status, message) in enumerate(self._fail_operations):
            if skip == 0:
                operation.failure = (status, message)
                del self._fail_operations[index]
                break
        self._fail_operations = [(max(0, s - 1), st, m) for s, st, m in self._fail_operations]
        self._operations[operation.id] = operation
        location = f"{self.prefix}/operations/{operation.id}"
        return 202, {"Location": location}, {"operationId": operation.id}

    def _poll(self, operation_id: str):
        operation = self._operations.get(operation_id)
        if operation is None:
            raise _Refuse(404, f"operation {operation_id} not found")
        headers = {}
        if operation.status in ("pending", "in-progress"):
            step = self.operation_steps[min(operation.polls, len(self.operation_steps) - 1)]
            operation.polls += 1
            if self.hold_operations and step == "completed":
                step = "in-progress"
            if step == "completed":
                if operation.failure is not None:
                    status, message = operation.failure
                    operation.status = status
                    operation.result = {"Error": status.upper(), "Details": message}
                else:
                    outcome = operation.effect()
                    if isinstance(outcome, str):
                        operation.status = "failed"
                        operation.result = {"Error": "CONFLICT", "Details": outcome}
                    else:
                        operation.status = "completed"
                        data = self._partition_json(outcome) if isinstance(outcome, _Partition) else None
                        operation.result = {"Data": data}
                        if isinstance(outcome, _Partition):
                            operation.target_path = f"{self.prefix}/partitions/{outcome.id}"
            else:
                operation.status = step
            operation.updated = _now()
        if operation.status == "completed" and operation.method == "post" and operation.target_path:
            headers["Location"] = operation.target_path
        return 200, headers, self._operation_json(operation)

    # --- checks ----------------------------------------------------------------------------------------

    @staticmethod
    def _body(body: Any, *, allowed: set[str], required: set[str]) -> dict:
        if not isinstance(body, dict):
            raise _Refuse(400, "the request body must be a JSON object")
        unknown = sorted(set(body) - allowed)
        if unknown:
            raise _Refuse(400, f"unknown field(s) {', '.join(unknown)}")
        missing = sorted(required - set(body))
        if missing:
            raise _Refuse(400, f"missing field(s) {', '.join(missing)}")
        return body

    def _resolve(self, members: Any) -> tuple[str | None, list[str]]:
        """(member type, GPU IDs) of a Members list: all GPU IDs or all location objects."""
        if members is None:
            return None, []
        if not isinstance(members, list):
            raise _Refuse(400, "Members must be a list of GPU IDs or of location objects")
        if not members:
            return None, []
        kinds = {type(m) for m in members}
        if kinds == {str}:
            unknown = [m for m in members if m not in self._gpus]
            if unknown:
                raise _Refuse(400, f"unknown GPU ID(s) {', '.join(unknown[:5])}")
            gpu_ids = list(members)
            member_type = "ID_BASED"
        elif kinds == {dict}:
            by_location = {g.location: g.id for g in self._gpus.values()}
            gpu_ids = []
            for member in members:
                keys = ("DomainUUID", "ChassisID", "SlotID", "HostID", "DeviceID")
                if set(member) != set(keys):
                    raise _Refuse(400, f"a location member has exactly the fields {', '.join(keys)}")
                location = tuple(member[k] for k in keys)
                if location not in by_location:
                    raise _Refuse(400, f"no GPU at location {location}")
                gpu_ids.append(by_location[location])
            member_type = "LOCATION_BASED"
        else:
            raise _Refuse(400, "mixing GPU IDs and location objects is not supported")
        if len(set(gpu_ids)) != len(gpu_ids):
            raise _Refuse(400, "a GPU is listed twice")
        return member_type, gpu_ids

    def _domain_of(self, gpu_ids: list[str]) -> str:
        domains = sorted({self._gpus[g].domain for g in gpu_ids})
        if len(domains) > 1:
            raise _Refuse(
                400, f"members span NVLink domains {', '.join(domains)}; a partition stays in one domain"
            )
        if not domains:
            known = sorted({g.domain for g in self._gpus.values()})
            if len(known) != 1:
                raise _Refuse(400, "an empty partition needs a domain")
            return known[0]
        return domains[0]

    def _check_name(self, name: str, domain: str, partition: _Partition | None) -> None:
        for other in self._partitions.values():
            if other is not partition and other.domain == domain and other.name == name:
                raise _Refuse(409, f"a partition named {name} already exists in domain {domain}")

    def _check_free(self, gpu_ids: list[str], partition: _Partition | None) -> None:
        for other in self._partitions.values():
            if other is partition:
                continue
            taken = [g for g in gpu_ids if g in other.members]
            if taken:
                raise _Refuse(
                    409,
                    f"GPU {self._gpus[taken[0]].id} already belongs to partition {other.name} "
                    f"(PartitionID {other.partition_id}); a GPU belongs to exactly one partition",
                )

    # --- state and JSON ------------------------------------------------------------------------------

    def _add_partition(self, partition_id: int, name: str, domain: str, member_type: str, members: list[str]):
        partition = _Partition(
            self._new_id(), partition_id, name, domain, member_type, members, _now(), _now()
        )
        self._partitions[partition.id] = partition
        self._names[partition.id] = name
        return partition

    def _free_id(self, domain: str) -> int:
        used = {p.partition_id for p in self._partitions.values() if p.domain == domain}
        return next(i for i in range(1, DEFAULT_PARTITION_ID) if i not in used)

    def _new_id(self) -> str:
        return f"{0x66A000000000000000000000 + next(self._ids):024x}"

    def _partition_json(self, p: _Partition) -> dict:
        if p.type == "LOCATION_BASED":
            members: list = [
                dict(
                    zip(
                        ("DomainUUID", "ChassisID", "SlotID", "HostID", "DeviceID"),
                        self._gpus[g].location,
                        strict=True,
                    )
                )
                for g in p.members
            ]
        else:
            members = list(p.members)
        data = {
            "ID": p.id,
            "PartitionID": p.partition_id,
            "Name": p.name,
            "Type": p.type,
            "Health": "HEALTHY" if p.members else "UNKNOWN",
            "Members": members,
            "CreatedAt": p.created,
            "UpdatedAt": p.updated,
        }
        if self.expose_domain:
            data["DomainUUID"] = p.domain
        return data

    def _gpu_json(self, g: StandinGpu) -> dict:
        owner = next((p.partition_id for p in self._partitions.values() if g.id in p.members), None)
        data = {
            "ID": g.id,
            "Name": g.uuid,
            "DomainUUID": g.domain,
            "LocationInfo": {
                "ChassisID": g.chassis_id,
                "SlotID": g.slot_id,
                "HostID": g.host_id,
                "TrayIndex": g.slot_id - 1,
            },
            "DeviceUID": zlib.crc32(g.id.encode()),
            "DeviceID": g.device_id,
            "Health": "HEALTHY",
        }
        if owner is not None:
            data["PartitionID"] = owner
        return data

    def _operation_json(self, o: _Operation) -> dict:
        percentage = {"pending": 0.0, "in-progress": 50.0}.get(o.status, 100.0)
        data = {
            "ID": o.id,
            "CreatedAt": o.created,
            "UpdatedAt": o.updated,
            "Status": o.status,
            "Percentage": percentage,
            "CurrentStep": o.status,
            "Request": {"Method": o.method, "URI": o.uri, "Body": o.body, "Cancellable": False},
        }
        if o.result is not None:
            data["Result"] = o.result
        return data


class _Handler(BaseHTTPRequestHandler):
    owner: NmxStandin
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # quiet
        pass

    def _serve(self, method: str):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw.strip() else None
        except ValueError:
            self._send(400, {}, {"code": 400, "message": "the body is not JSON"})
            return
        try:
            status, headers, data = self.owner.handle(method, self.path, self.headers, body)
        except _Refuse as refusal:
            self._send(refusal.status, {}, {"code": refusal.status, "message": refusal.message})
            return
        self._send(status, headers, data)

    def _send(self, status: int, headers: dict, data: Any):
        payload = json.dumps(data).encode() if data is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def do_PUT(self):
        self._serve("PUT")

    def do_DELETE(self):
        self._serve("DELETE")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
