"""NmxFabricManager: NVLink partitions through NVIDIA NMX Manager's REST API (NMX-M), HTTP via core.http.

The API shape, and where it comes from: nmx_api.py.

Assumed where nothing public says (and mirrored by tests/integrations/nmx_standin.py):

* Rackplane identifies GPUs by their nvidia-smi UUID, which NMX-M does not use. With `locations` (GPU UUID ->
  `GpuLocation`, built by the caller from the inventory: rack cluster UUID, tray slot, GPU index) members are
  written as location objects and read back through them; `GET <api>/gpus` translates GPU IDs of ID-based
  partitions (the default partition may be one) to locations. Without `locations`, the GPU UUID strings are
  used as NMX-M GPU IDs as they are (an NMX-M set up to identify GPUs by UUID, and the tests).
  `GpuLocation.for_tray` assumes SlotID = tray slot, HostID = 1 and DeviceID = GPU index; sites whose
  chassis numbering differs pass their own locations.
* A partition's domain is its `DomainUUID` field when the manager sends one, else the domain of its members.
  An empty partition without `DomainUUID` cannot be placed and is ignored.
* Error bodies carry the reason in `message` (or `Message`, `detail`, `error`, ...); taken from whichever is
  there, else the body text.
* The default partition is never deleted (it is emptied with a PUT); GPUs removed from a partition (PUT or
  DELETE) belong to no partition until added to another. Lists are not paged.

One apply per domain at a time is the caller's job (the apply task claims its plan row first): NMX-M has no
compare-and-set on partitions, so two concurrent applies could interleave their steps.
"""

from __future__ import annotations

import contextlib
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from core.errors import ExternalError
from core.http import HttpClient, basic_authorization
from integrations.fabric.base import (
    DEFAULT_PARTITION_ID,
    FabricDiff,
    FabricError,
    FabricInvalid,
    FabricPartition,
    FabricRejected,
    FabricResult,
    FabricStep,
    FabricUnavailable,
    ProgressCallback,
    StepOutcome,
    execute_plan,
    normalize_domain,
    plan_changes,
    sort_partitions,
    validate_desired,
)
from integrations.fabric.nmx_api import (
    API,
    API_PREFIXES,
    FOREIGN_ID,
    FOREIGN_LOCATION,
    ID_BASED,
    LOCATION_BASED,
    TERMINAL_BAD,
    TERMINAL_OK,
    UNDEFINED,
    FabricSnapshot,
    GpuLocation,
    LivePartition,
    answer_operation_id,
    answer_partition_id,
    answer_reason,
    what_to_do,
)


class NmxFabricManager:
    """NVLink partitions of one or more NVLink domains managed by one NMX-M.

    base_url: NMX-M's address (`https://nmx-m.example`; a trailing `/nmx/v1` or `/v1` is accepted and then
      used as the API's path). api: the path prefix the server serves (one of API_PREFIXES, as remembered on
      the target), or None to find it with the first request (`probe`). token: the
      basic-auth token (`Authorization: Basic <token>`; a value that already starts with a scheme such as
      "Bearer " is sent as it is), or give username/password. verify: False, True or a CA bundle path.
      timeout: seconds per HTTP request.
    locations: GPU UUID -> GpuLocation (see the module docstring); None to use GPU UUIDs as NMX-M GPU IDs.
    poll_interval, poll_backoff, max_poll_interval, poll_timeout: waiting for an operation: the first poll
      after poll_interval, each wait poll_backoff times longer up to max_poll_interval, giving up (transient
      error) after poll_timeout seconds. poll_retries: transient errors tolerated in a row while polling.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        verify: bool | str = True,
        timeout: float = 30.0,
        *,
        username: str | None = None,
        password: str | None = None,
        locations: Mapping[str, GpuLocation] | None = None,
        poll_interval: float = 1.0,
        poll_backoff: float = 2.0,
        max_poll_interval: float = 15.0,
        poll_timeout: float = 900.0,
        poll_retries: int = 3,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        allow_private: bool = True,
        api: str | None = None,
    ):
        base = base_url.rstrip("/")
        for prefix in sorted(API_PREFIXES, key=len, reverse=True):  # /nmx/v1 also ends with /v1
            if base.endswith(prefix):
                base, api = base[: -len(prefix)], prefix
                break
        self.api = api if api in API_PREFIXES else None
        self._probed = False
        parsed = urllib.parse.urlparse(base)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"NMX-M address must be http(s)://host[:port], not {base_url!r}")
        self.base_url = base
        self.timeout = timeout
        self.locations: dict[str, GpuLocation] = dict(locations or {})
        self.poll_interval = poll_interval
        self.poll_backoff = max(1.0, poll_backoff)
        self.max_poll_interval = max(poll_interval, max_poll_interval)
        self.poll_timeout = poll_timeout
        self.poll_retries = poll_retries
        self._sleep = sleep
        self._clock = clock
        headers = {"Accept": "application/json", "User-Agent": "rackplane-fabric/1"}
        if token:
            headers["Authorization"] = token if " " in token.strip() else f"Basic {token.strip()}"
        elif username is not None:
            headers["Authorization"] = basic_authorization(username, password or "")
        self._http = HttpClient(
            base,
            headers=headers,
            timeout=timeout,
            ca_file=verify if isinstance(verify, str) else "",
            insecure=verify is False,
            allow_private=allow_private,  # the target's outbound allowance (core.outbound)
        )

    # --- where the API is served ----------------------------------------------------------------------

    @property
    def facts(self) -> dict[str, str]:
        """What a push or Test connection learned, kept on the target (integrations.pushes.remember)."""
        return {"nmx_api": self.api} if self.api else {}

    def served_api(self) -> str:
        """The path prefix this server answers under: the remembered one, else found by `probe`."""
        return self.api or self.probe()

    def probe(self) -> str:
        """Find which of API_PREFIXES the server serves (newest first): the first whose partition list does
        not answer 404. A refusal other than 404 (401, say) comes from a server that routed the path, so it is
        raised as it is. Nothing is written."""
        self._probed = True
        for prefix in API_PREFIXES:
            try:
                self._call("GET", f"{prefix}/partitions", None, what="list the partitions")
            except FabricRejected as error:
                if error.status == 404:
                    continue
                self.api = prefix
                raise
            self.api = prefix
            return prefix
        tried = " nor ".join(f"{prefix}/partitions" for prefix in API_PREFIXES)
        raise FabricRejected(
            f"{self.base_url} serves neither {tried} (both answered 404): "
            "it does not look like NMX-M or NetQ",
            "check the address: NMX-M's or NetQ's own https://host[:port], without a path",
        )

    def collection(self, name: str) -> list[dict]:
        """GET <api>/<name>; a remembered prefix that answers 404 (the server was upgraded, NMX-M moved into
        NetQ) is looked for again once."""
        try:
            return self._get_list(f"{self.served_api()}/{name}")
        except FabricRejected as error:
            if error.status != 404 or self._probed:
                raise
        self.probe()
        return self._get_list(f"{self.served_api()}/{name}")

    # --- the FabricManager interface ------------------------------------------------------------------

    def read_back(self, domain: str) -> list[FabricPartition]:
        """The domain's partitions as NMX-M holds them (an empty default partition left out)."""
        snapshot = self._snapshot(normalize_domain(domain))
        return sort_partitions(p for p in snapshot.current if p.gpu_uuids or not p.is_default)

    def diff(self, domain: str, desired: Sequence[FabricPartition]) -> FabricDiff:
        domain = normalize_domain(domain)
        desired = validate_desired(domain, desired)
        self._check_locations(domain, desired)
        snapshot = self._snapshot(domain)
        diff = plan_changes(domain, snapshot.current, desired, snapshot.domain_gpus)
        self._render_all(snapshot, diff)  # a plan the API cannot express fails here, not halfway
        return diff

    def apply(
        self,
        domain: str,
        desired: Sequence[FabricPartition],
        *,
        progress: ProgressCallback | None = None,
    ) -> FabricResult:
        """Validate, read back, diff, then one request per step, each waited for; see base.execute_plan."""
        domain = normalize_domain(domain)
        desired = validate_desired(domain, desired)
        self._check_locations(domain, desired)
        snapshot = self._snapshot(domain)
        diff = plan_changes(domain, snapshot.current, desired, snapshot.domain_gpus)
        rendered = self._render_all(snapshot, diff)
        return execute_plan(
            diff,
            desired,
            perform=lambda step: self._perform(step, rendered[step]),
            read_back=lambda: self.read_back(domain),
            progress=progress,
        )

    # --- reading --------------------------------------------------------------------------------------

    def _snapshot(self, domain: str) -> FabricSnapshot:
        snapshot = FabricSnapshot(domain=domain)
        gpus = self.collection("gpus")
        for gpu in gpus:
            gpu_id = str(gpu.get("ID", ""))
            info = gpu.get("LocationInfo") or {}
            if not gpu_id or gpu.get("DomainUUID") is None:
                continue
            snapshot.gpu_domain[gpu_id] = normalize_domain(gpu["DomainUUID"])
            # A GPU without a full location can still be used by ID.
            with contextlib.suppress(KeyError, TypeError, ValueError):
                snapshot.gpu_location[gpu_id] = GpuLocation(
                    gpu["DomainUUID"], info["ChassisID"], info["SlotID"], info["HostID"], gpu["DeviceID"]
                )
        by_location = {loc: uuid for uuid, loc in self.locations.items()}
        snapshot.domain_gpus = [
            self._token(gpu_id, snapshot, by_location)
            for gpu_id, d in snapshot.gpu_domain.items()
            if d == domain
        ]
        for raw in self.collection("partitions"):
            members = raw.get("Members") or []
            if isinstance(members, dict):  # tolerate {"ids": [...]} / {"locations": [...]} wrappers
                members = next((v for v in members.values() if isinstance(v, list)), [])
            owner = self._partition_domain(raw, members, snapshot)
            if owner != domain:
                continue
            uuids = tuple(self._token(member, snapshot, by_location) for member in members)
            member_type = str(raw.get("Type") or "").upper()
            if member_type not in (ID_BASED, LOCATION_BASED):
                member_type = self._type_of(members) or UNDEFINED
            try:
                partition_id = int(raw["PartitionID"])
                partition = FabricPartition(
                    str(raw.get("Name") or ""), partition_id, uuids, domain, health=raw.get("Health")
                )
            except (KeyError, TypeError, ValueError) as error:
                raise FabricRejected(
                    f"NMX-M returned a partition this adapter cannot read: {raw!r:.300}",
                    "check the NMX-M version against the adapter (see scheduling/backends/fabric/nmx.py)",
                ) from error
            snapshot.partitions.append(LivePartition(str(raw.get("ID", "")), member_type, partition))
        return snapshot

    @staticmethod
    def _partition_domain(raw: Mapping[str, Any], members: list, snapshot: FabricSnapshot) -> str | None:
        if raw.get("DomainUUID"):
            return normalize_domain(raw["DomainUUID"])
        for member in members:
            if isinstance(member, Mapping) and member.get("DomainUUID"):
                return normalize_domain(member["DomainUUID"])
            if isinstance(member, str) and member in snapshot.gpu_domain:
                return snapshot.gpu_domain[member]
        return None

    def _token(self, member: Any, snapshot: FabricSnapshot, by_location: dict[GpuLocation, str]) -> str:
        """A member as Rackplane names it: the GPU UUID when known, else a stable placeholder."""
        if isinstance(member, Mapping):
            try:
                location = GpuLocation.from_member(member)
            except (KeyError, TypeError, ValueError) as error:
                raise FabricRejected(
                    f"NMX-M returned a partition member this adapter cannot read: {member!r}"
                ) from error
            return by_location.get(location) or FOREIGN_LOCATION + location.text()
        gpu_id = str(member)
        if not self.locations:
            return gpu_id
        location = snapshot.gpu_location.get(gpu_id)
        if location is not None and location in by_location:
            return by_location[location]
        return FOREIGN_ID + gpu_id

    @staticmethod
    def _type_of(members: list) -> str | None:
        if not members:
            return None
        return LOCATION_BASED if isinstance(members[0], Mapping) else ID_BASED

    # --- rendering requests ---------------------------------------------------------------------------

    def _check_locations(self, domain: str, desired: Sequence[FabricPartition]) -> None:
        if not self.locations:
            return
        problems = []
        for p in desired:
            for gpu in p.gpu_uuids:
                location = self.locations.get(gpu)
                if location is None:
                    problems.append(f"GPU {gpu} of partition {p.name} has no location for NMX-M")
                elif location.domain != domain:
                    problems.append(
                        f"GPU {gpu} of partition {p.name} is in domain {location.domain}, not {domain}"
                    )
        if problems:
            raise FabricInvalid(
                f"the desired NVLink partitions of domain {domain} cannot be sent to NMX-M; nothing was sent",
                "refresh the inventory (discovery) so every GPU has its tray slot and index",
                problems,
            )

    def _render_all(
        self, snapshot: FabricSnapshot, diff: FabricDiff
    ) -> dict[FabricStep, tuple[str, str, Any]]:
        rendered = {}
        for step in diff.steps:
            if step.action == "create":
                if step.is_default:
                    raise FabricRejected(
                        f"domain {snapshot.domain} has no default partition (ID {DEFAULT_PARTITION_ID}) "
                        "on the fabric and NMX-M cannot create one with that ID",
                        "configure the default partition on the domain's NMX-C, or plan carved partitions",
                        partition=step.name,
                    )
                member_type = LOCATION_BASED if self.locations else ID_BASED
                body = {"Name": step.name, "Members": self._members(step, member_type, snapshot)}
                rendered[step] = ("POST", f"{self.served_api()}/partitions", body)
                continue
            live = snapshot.find(step)
            path = f"{self.served_api()}/partitions/{urllib.parse.quote(live.system_id, safe='')}"
            if step.action == "delete":
                rendered[step] = ("DELETE", path, None)
            else:
                member_type = (
                    live.type if live.type != UNDEFINED else (LOCATION_BASED if self.locations else ID_BASED)
                )
                rendered[step] = ("PUT", path, {"Members": self._members(step, member_type, snapshot)})
        return rendered

    def _members(self, step: FabricStep, member_type: str, snapshot: FabricSnapshot) -> list:
        members, problems = [], []
        for token in step.members:
            location = self._location_of(token, snapshot)
            if member_type == LOCATION_BASED:
                if location is None:
                    problems.append(f"GPU {token} has no known location")
                else:
                    members.append(location.member())
            else:
                gpu_id = self._gpu_id_of(token, location, snapshot)
                if gpu_id is None:
                    problems.append(f"GPU {token} has no NMX-M GPU ID")
                else:
                    members.append(gpu_id)
        if member_type == LOCATION_BASED:  # in physical order, for whoever reads the request log
            members.sort(key=lambda m: (m["ChassisID"], m["SlotID"], m["HostID"], m["DeviceID"]))
        if problems:
            raise FabricInvalid(
                f"cannot write the {member_type} members of partition {step.name}; nothing was sent",
                f"refresh the inventory and NMX-M's GPU list (GET {self.api or API}/gpus), then apply again",
                problems,
                partition=step.name,
            )
        return members

    def _location_of(self, token: str, snapshot: FabricSnapshot) -> GpuLocation | None:
        if token in self.locations:
            return self.locations[token]
        if token.startswith(FOREIGN_LOCATION):
            for location in snapshot.gpu_location.values():
                if FOREIGN_LOCATION + location.text() == token:
                    return location
            domain, _, numbers = token[len(FOREIGN_LOCATION) :].rpartition("/")
            try:
                chassis, slot, host, device = (int(n) for n in numbers.split("."))
            except ValueError:
                return None
            return GpuLocation(domain, chassis, slot, host, device)
        if token.startswith(FOREIGN_ID):
            return snapshot.gpu_location.get(token[len(FOREIGN_ID) :])
        return snapshot.gpu_location.get(token)  # GPU UUIDs used as NMX-M GPU IDs

    def _gpu_id_of(self, token: str, location: GpuLocation | None, snapshot: FabricSnapshot) -> str | None:
        if token.startswith(FOREIGN_ID):
            return token[len(FOREIGN_ID) :]
        if not self.locations and not token.startswith(FOREIGN_LOCATION):
            return token
        if location is not None:
            for gpu_id, known in snapshot.gpu_location.items():
                if known == location:
                    return gpu_id
        return None

    # --- writing --------------------------------------------------------------------------------------

    def _perform(self, step: FabricStep, request: tuple[str, str, Any]) -> StepOutcome:
        method, path, body = request
        status, headers, data = self._call(method, path, body, what=step.describe(), partition=step.name)
        if status != 202:
            # A synchronous answer (200/201/204): done already.
            return StepOutcome(step=step, status="completed", partition_id=answer_partition_id(data))
        operation_id = answer_operation_id(data, headers)
        if not operation_id:
            raise FabricRejected(
                f"NMX-M accepted the request to {step.describe()} but named no operation to follow",
                "read the fabric back before retrying",
                partition=step.name,
                status=status,
            )
        operation, op_headers = self._wait(operation_id, step)
        partition_id = None
        if step.action == "create":
            partition_id = self._created_partition_id(operation, op_headers)
        return StepOutcome(
            step=step, operation_id=operation_id, status=TERMINAL_OK, partition_id=partition_id
        )

    def _wait(self, operation_id: str, step: FabricStep) -> tuple[dict, Mapping[str, str]]:
        """Poll the operation until it ends: completed returns; failed/cancelled raise FabricRejected."""
        path = f"{self.served_api()}/operations/{urllib.parse.quote(operation_id, safe='')}"
        deadline = self._clock() + self.poll_timeout
        interval = self.poll_interval
        failures = 0
        state = "pending"
        while True:
            self._sleep(max(0.0, min(interval, deadline - self._clock())))
            interval = min(interval * self.poll_backoff, self.max_poll_interval)
            try:
                _, headers, operation = self._call("GET", path, None, what=f"follow operation {operation_id}")
            except FabricUnavailable as error:
                failures += 1
                if failures > self.poll_retries or self._clock() >= deadline:
                    raise FabricUnavailable(
                        f"lost NMX-M while waiting for operation {operation_id} ({step.describe()}); "
                        f"its outcome is unknown: {error.message}",
                        "retry later: apply reads the fabric back first and only does what is missing",
                        partition=step.name,
                        operation_id=operation_id,
                    ) from error
                continue
            failures = 0
            operation = operation if isinstance(operation, dict) else {}
            state = str(operation.get("Status", "")).lower()
            if state == TERMINAL_OK:
                return operation, headers
            if state in TERMINAL_BAD:
                result = operation.get("Result") or {}
                reason = ": ".join(str(result[k]) for k in ("Error", "Details") if result.get(k)) or (
                    str(operation.get("CurrentStep") or "no reason given")
                )
                raise FabricRejected(
                    f"NMX-M operation {operation_id} to {step.describe()} ended {state}: {reason}",
                    "fix the cause NMX-M gives, then apply again (the steps before this one are in place)",
                    partition=step.name,
                    operation_id=operation_id,
                )
            if self._clock() >= deadline:
                raise FabricUnavailable(
                    f"NMX-M operation {operation_id} to {step.describe()} is still {state or 'unknown'} "
                    f"after {self.poll_timeout:.0f}s",
                    "check the operation in NMX-M; apply again later (it reads the fabric back first)",
                    partition=step.name,
                    operation_id=operation_id,
                )

    def _created_partition_id(self, operation: dict, headers: Mapping[str, str]) -> int | None:
        location = headers.get("Location") or ""
        if "/partitions/" in location:
            try:
                _, _, partition = self._call(
                    "GET", urllib.parse.urlparse(location).path, None, what="read it"
                )
                return answer_partition_id(partition)
            except FabricError:
                return None
        return answer_partition_id((operation.get("Result") or {}).get("Data"))

    # --- HTTP -----------------------------------------------------------------------------------------

    def _get_list(self, path: str) -> list[dict]:
        _, _, data = self._call("GET", path, None, what=f"read {path}")
        if isinstance(data, dict):  # tolerate a paged/wrapped list
            data = next((v for v in data.values() if isinstance(v, list)), [])
        if not isinstance(data, list):
            raise FabricRejected(f"NMX-M answered {path} with something else than a list")
        return [item for item in data if isinstance(item, dict)]

    def _call(
        self, method: str, path: str, body: Any, *, what: str, partition: str | None = None
    ) -> tuple[int, Mapping[str, str], Any]:
        """(status, headers, decoded JSON) of a 2xx answer; FabricUnavailable or FabricRejected otherwise."""
        try:
            response = self._http.request(method, path, body)
        except ExternalError as error:
            if error.transient:
                raise FabricUnavailable(
                    f"NMX-M at {self.base_url} is not reachable ({method} {path}): {error}",
                    "retry later, once NMX-M answers; nothing more was changed",
                    partition=partition,
                ) from error
            raise FabricRejected(
                f"NMX-M at {self.base_url} could not {what} ({method} {path}): {error}",
                error.what_to_do,
                partition=partition,
            ) from error
        code = response.status
        if not response.ok:
            text = answer_reason(response.body) or response.reason
            if response.transient_failure:
                raise FabricUnavailable(
                    f"NMX-M could not {what} ({method} {path}): HTTP {code}: {text}",
                    "retry later; NMX-M or a service behind it is failing",
                    partition=partition,
                    status=code,
                )
            raise FabricRejected(
                f"NMX-M refused to {what} ({method} {path}): HTTP {code}: {text}",
                what_to_do(code),
                partition=partition,
                status=code,
            )
        try:
            return code, response.headers, response.json()
        except ValueError as error:
            raise FabricRejected(
                f"NMX-M answered with something else than JSON: {response.body[:200]!r}"
            ) from error
