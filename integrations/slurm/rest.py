"""slurmrestd's job API as Rackplane speaks it (OpenAPI v0.0.42 to v0.0.45, Slurm 24.11 to 26.11): the
submit request (`submit_payload`), the answers read back (`job_status`, `classify_error`) and the JWTs
(`mint_token`). No I/O; SlurmJobBackend (jobs.py) sends them through core.http, under the path prefix of the
API version it chose with the slurmrestd (integrations.slurm.versions: which versions exist, and the little
that differs between them for what is used here; the facts below hold for all four unless they say).

Facts this module and the backend rely on, from the OpenAPI document slurmrestd 24.11
serves at `/openapi/v3` and from measuring the testbed (scripts/slurm-testbed.sh):

* `POST /slurm/v0.0.4N/job/submit` takes `{"job": v0.0.4N_job_desc_msg}`. The fields used here: `name`,
  `comment`, `script`, `partition`, `required_nodes` (a list of host names), `minimum_nodes` /
  `maximum_nodes`, `tres_per_node` ("gres/gpu:4", what `--gres=gpu:4` becomes), `segment_size` and
  `time_limit` (minutes) as `{"set", "infinite", "number"}` objects, `account`, `qos`,
  `current_working_directory` (required: without it Slurm answers "Job cannot be submitted without the
  current working directory specified"), `environment` (required: without it "I/O error writing
  script/environment to file"), `standard_output` and `network`. Unknown fields are ignored with a warning.
* Answers carry `errors` (`error_number`, `error`, `description`) and `warnings`. A request Slurm refuses is
  an HTTP **500** with a Slurm error number (invalid partition: 2000, impossible node configuration: 2014,
  topology: 2178); slurmctld down is a 502 with 1800 "Unable to contact slurm controller" for submit and
  the job list, a 500 with -1 "Unspecified error" for one job and a 500 with errno 1 for a cancel, each
  after slurmrestd's own retries (once a second for slurm.conf's MessageTimeout, 10 s by default, sometimes
  twice). A bad token is HTTP 511 with 1007 "Protocol authentication error".
  So the error number, not the HTTP status, tells a refused request from an unavailable controller:
  `classify_error`.
* `GET /slurm/v0.0.4N/job/{id}` of an id slurmctld has forgotten (older than MinJobAge) is a 404 with 2017
  "Invalid job id specified"; `DELETE` of it is a 200 whose `status[].error.code` is 2017, and of a
  finished job 2021 "Job/step already completing or completed".
* `job_state` is a list: the base state (PENDING, RUNNING, SUSPENDED, COMPLETED, CANCELLED, FAILED, TIMEOUT,
  NODE_FAIL, PREEMPTED, BOOT_FAIL, DEADLINE, OUT_OF_MEMORY) and flags (CONFIGURING, COMPLETING, REQUEUED,
  ...). `exit_code` is `{"status", "return_code": {set, number}, "signal": {"id": {set, number}, "name"}}`.
* slurmrestd 24.11 does NOT refuse a `required_nodes` entry slurmctld does not know: it drops it and runs
  the job on any other node (sbatch refuses the same request with "Invalid node name specified"). `submit`
  therefore checks every chosen tray against `GET /slurm/v0.0.4N/nodes/` first.
* Slurm 24.11 refuses `--segment` together with `--nodelist` when the job has more than one segment (2178
  "Requested topology configuration is not available"; Slurm 25.05 added "limited support" for it). The
  placement engine already chose trays segment by segment, so under v0.0.42 and v0.0.43 `segment_size` is
  sent only when the whole job is one segment: Slurm then checks that the pinned trays lie in one block.
  (With topology/block a job smaller than the base block size must fit in one block anyway: 2014
  otherwise.) Slurm 25.11 (the first to serve v0.0.44) takes it for several segments too: a job placed
  across NVLink partitions is sent with its segment size, and Slurm refuses (2014) a node list that does
  not split into whole segments inside blocks (26.05.5 measured; `scontrol show job` shows `SegmentSize=`).
* Account and QOS: without slurmdbd (accounting_storage/none, the testbed) slurmctld stores any account and
  QOS as labels and ignores a partition's AllowQos ("We have no QOS on the system"). With slurmdbd and
  AccountingStorageEnforce an account (ESLURM_INVALID_ACCOUNT, 2045) or QOS (2066) without an association
  for the user is refused. Hence the target setting `accounting`.
* IMEX: Slurm 24.11's `SwitchType=switch/nvidia_imex` gives every job one IMEX channel by itself (for steps
  that span nodes); a job cannot ask for it. The per-job request is `--network=unique-channel-per-segment`
  (job field `network`), read from Slurm 25.11 on (one channel per segment; one per job without segments).
  24.11 accepts and stores that field and ignores it, so it is sent whenever the request asks for IMEX.

JWT: slurmrestd's rest_auth/jwt takes `X-SLURM-USER-NAME` and `X-SLURM-USER-TOKEN`. A token is HS256 over
the raw bytes of slurmctld's `jwt_key` file with the claims `exp`, `iat` and `sun` (the user), which is what
`scontrol token username=U lifespan=S` prints; the backend mints one per `TOKEN_LIFESPAN` from the key file,
or uses a static token given to it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

import hostlist

from core.hardware import GPUS_PER_TRAY
from core.workloads import WorkError
from integrations.jobs import (
    BackendJobState,
    BackendJobStatus,
    BackendRejected,
    BackendUnavailable,
    DispatchRequest,
)
from integrations.slurm.versions import V0_0_42, Dialect
from integrations.slurm.work import validate_work
from inventory.discovery.mig import is_gi_profile_name
from inventory.mig_layouts import MAX_INSTANCES
from tenancy import naming

DEFAULT_WORKDIR = "/tmp"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
IMEX_NETWORK = "unique-channel-per-segment"
TOKEN_LIFESPAN = 600  # seconds a minted token is valid

# Slurm error numbers (slurm/slurm_errno.h).
ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE = 2014  # "Requested node configuration is not available"
ESLURM_INVALID_JOB_ID = 2017
ESLURM_ALREADY_DONE = 2021
# The controller or its database could not be reached, is starting, or is busy: retry later.
TRANSIENT_ERRORS = frozenset(
    {
        *range(1001, 1005),  # SLURM_COMMUNICATIONS_{CONNECTION,SEND,RECEIVE,SHUTDOWN}_ERROR
        *range(1013, 1026),  # missing socket ... SLURM_COMMUNICATIONS_*_TIMEOUT, delayed, shutting down
        *range(1800, 1806),  # SLURMCTLD_COMMUNICATIONS_*: "Unable to contact slurm controller"
        2007,  # ESLURM_MAX_JOB_COUNT: MaxJobCount reached
        2027,  # ESLURM_IN_STANDBY_MODE
        2090,  # ESLURM_INTERNAL
        2105,  # ESLURM_SUBMISSIONS_DISABLED
        2131,  # ESLURM_IN_STANDBY_USE_BACKUP
        *range(5003, 5006),  # socket: incomplete packet, timeout, zero bytes sent
        7000,  # ESLURM_DB_CONNECTION (slurmdbd)
        7008,  # ESLURM_DB_CONNECTION_INVALID
    }
)
# slurmrestd or slurmctld did not accept the credentials: the target's configuration, not the job's fault.
AUTH_ERRORS = frozenset({1007, *range(6000, 6011), 9008})
# Slurm refused the request itself (slurmctld codes, topology, REST parsing and data conversion).
REQUEST_ERROR_RANGES = ((2000, 2200), (7100, 7110), (7200, 7300), (8000, 8001), (9000, 9010), (9200, 9217))

BASE_STATES: dict[str, BackendJobState] = {
    "PENDING": BackendJobState.PENDING,
    "RUNNING": BackendJobState.RUNNING,
    "SUSPENDED": BackendJobState.RUNNING,  # still holds its trays
    "COMPLETED": BackendJobState.COMPLETED,
    "CANCELLED": BackendJobState.CANCELLED,
    "FAILED": BackendJobState.FAILED,
    "TIMEOUT": BackendJobState.FAILED,
    "NODE_FAIL": BackendJobState.FAILED,
    "OUT_OF_MEMORY": BackendJobState.FAILED,
    "BOOT_FAIL": BackendJobState.FAILED,
    "DEADLINE": BackendJobState.FAILED,
    "PREEMPTED": BackendJobState.FAILED,  # ended by preemption (a requeued job is PENDING + REQUEUED)
}
# Base states that say more than the Rackplane state they map to: kept in the message.
TELLING_STATES = frozenset(
    {"SUSPENDED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
)


# --- the request -----------------------------------------------------------------------------------------


def _no_val(number: int) -> dict:
    return {"set": True, "infinite": False, "number": number}


def submit_payload(
    request: DispatchRequest,
    *,
    account: bool = True,
    qos: bool = True,
    workdir: str = DEFAULT_WORKDIR,
    dialect: Dialect = V0_0_42,
) -> dict:
    """The body of `POST /slurm/v0.0.4N/job/submit` for one placed job (raises BackendRejected if unusable).

    Pinned to exactly `request.hostnames` (`required_nodes`, node count = their number), `gpus_per_tray`
    GPUs on each (`tres_per_node`), in partition `service_tier`; `account` / `qos` = the department when the
    flags say so; `segment_size` when the job is one segment, or of several when `dialect`'s Slurm takes
    that (see the module docstring); `network` = unique-channel-per-segment when it asks for IMEX. Runs in
    `workdir` with a minimal environment (PATH, LANG and RACKPLANE_* variables) and writes
    `<workdir>/<name>-<jobid>.out`.
    """
    # The one rule for a Slurm job's work (the jobs API asks the same one through core.workloads).
    try:
        script = validate_work(dict(request.work) if isinstance(request.work, Mapping) else {})["script"]
    except WorkError as error:
        raise BackendRejected(str(error)) from error
    hosts = list(request.hostnames)
    if not hosts:
        raise BackendRejected("the job has no trays to run on")
    if len(set(hosts)) != len(hosts):
        raise BackendRejected(f"a tray is chosen twice: {', '.join(hosts)}")
    tres_per_node = mig_tres(request) if request.mig_slices else f"gres/gpu:{request.gpus_per_tray}"
    if not request.mig_slices and not 1 <= request.gpus_per_tray <= 4:
        raise BackendRejected(f"gpus_per_tray must be 1-4, not {request.gpus_per_tray}")
    if request.time_limit_minutes < 1:
        raise BackendRejected(f"the time limit must be at least one minute, not {request.time_limit_minutes}")
    if not request.service_tier:
        raise BackendRejected("the job has no Slurm partition (service tier)")
    if not workdir.startswith("/"):
        raise ValueError(f"workdir must be an absolute path, not {workdir!r}")
    name = request.rackplane_name
    environment = [
        f"PATH={DEFAULT_PATH}",
        "LANG=C.UTF-8",
        f"RACKPLANE_JOB_ID={request.job_id}",
        f"RACKPLANE_DEPARTMENT={request.department}",
        f"RACKPLANE_PRIORITY_CLASS={request.priority_class}",
    ]
    if request.project:
        environment.append(f"RACKPLANE_PROJECT={request.project}")
    if request.clique:
        environment.append(f"RACKPLANE_NVLINK_CLIQUE={request.clique}")
    job: dict[str, Any] = {
        "name": name,
        "comment": f"Rackplane job {request.job_id}: {request.name}"[:250],
        "script": script,
        "partition": request.service_tier,
        "required_nodes": hosts,
        "minimum_nodes": len(hosts),
        "maximum_nodes": len(hosts),
        "tres_per_node": tres_per_node,
        "time_limit": _no_val(request.time_limit_minutes),
        "current_working_directory": workdir,
        "standard_output": f"{workdir.rstrip('/')}/{name}-%j.out",
        "environment": environment,
    }
    if request.segment is not None:
        if request.segment < 1 or len(hosts) % request.segment:
            raise BackendRejected(f"segment {request.segment} does not divide the job's {len(hosts)} trays")
        if request.segment == len(hosts) or dialect.segments_with_nodelist:
            job["segment_size"] = _no_val(request.segment)
    try:  # tenancy.naming: the one derivation of accounts and QOS from the slugs
        home, department_qos = request.home, request.qos or naming.department_qos(request.department)
    except ValueError as error:
        raise BackendRejected(str(error)) from error
    if account:
        job["account"] = home  # the project's account (a child of the department's), else its own
    if qos:
        job["qos"] = department_qos
    if request.imex:
        job["network"] = IMEX_NETWORK
    return {"job": job}


MAX_SLICES_PER_TRAY = MAX_INSTANCES * GPUS_PER_TRAY


def mig_tres(request: DispatchRequest) -> str:
    """A slice job's GRES: `gres/gpu:<profile>:<count>` (what `--gres=gpu:1g.23gb:2` becomes), the GRES type
    being the profile as the tray's node line declares it (integrations.state: `Gres=gpu:1g.23gb:8`), on its
    one tray, with no whole GPU beside."""
    if len(request.hostnames) != 1:
        raise BackendRejected(f"a slice job runs on one tray, not {len(request.hostnames)}")
    if request.gpus_per_tray:
        raise BackendRejected("a slice job asks for no whole GPU")
    if not is_gi_profile_name(request.mig_profile):
        raise BackendRejected(f"{request.mig_profile!r} is not a MIG profile name (1g.23gb)")
    if not 1 <= request.mig_slices <= MAX_SLICES_PER_TRAY:
        raise BackendRejected(f"mig_slices must be 1-{MAX_SLICES_PER_TRAY}, not {request.mig_slices}")
    return f"gres/gpu:{request.mig_profile}:{request.mig_slices}"


# --- answers ---------------------------------------------------------------------------------------------


def _number(value: Any) -> int | None:
    """A plain integer or a set {"set", "number"} object; None when unset."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, Mapping) and value.get("set") and not value.get("infinite"):
        number = value.get("number")
        return number if isinstance(number, int) and not isinstance(number, bool) else None
    return None


def _expand(nodes: Any) -> tuple[str, ...]:
    if not isinstance(nodes, str) or not nodes.strip():
        return ()
    try:
        return tuple(hostlist.expand_hostlist(nodes))
    except hostlist.BadHostlist:
        return tuple(n for n in nodes.split(",") if n)


def _allocated_nodes(job: Mapping[str, Any]) -> tuple[str, ...]:
    """The nodes the job was given. `nodes` is what slurmctld holds now: while the job is COMPLETING it lists
    only the nodes that have not yet finished their epilog (slurmctld's pack_job packs `node_bitmap_cg` then,
    as squeue's %N says), so a job read as it ends can show one of its trays. `job_resources.nodes.list`
    (GET /job/{id} asks SHOW_DETAIL) keeps the whole allocation; a job never started has neither."""
    resources = job.get("job_resources")
    allocated = resources.get("nodes") if isinstance(resources, Mapping) else None
    listed = _expand(allocated.get("list")) if isinstance(allocated, Mapping) else ()
    return listed or _expand(job.get("nodes"))


def job_status(job: Mapping[str, Any], dialect: Dialect = V0_0_42) -> BackendJobStatus:
    """One `v0.0.4N_job_info` record (of `dialect`'s version) as Rackplane sees it.

    PENDING -> pending; RUNNING, SUSPENDED -> running (but RUNNING + CONFIGURING, nodes still booting, ->
    pending); COMPLETED -> completed; CANCELLED -> cancelled; FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY,
    BOOT_FAIL, DEADLINE, PREEMPTED -> failed. A finished state stays finished while the job is COMPLETING.
    A flag the version says means "being requeued" (v0.0.44+: EXPEDITING) makes any base state pending.
    The message names the telling base state and flags and Slurm's reason; the exit code (finished jobs
    only) is the return code, or 128 + the signal for a job killed by a signal.
    """
    raw = job.get("job_state")
    states = [raw] if isinstance(raw, str) else [s for s in (raw or []) if isinstance(s, str)]
    base = next((s for s in states if s in BASE_STATES), "")
    flags = [s for s in states if s != base]
    state = BASE_STATES.get(base, BackendJobState.UNKNOWN)
    if state == BackendJobState.RUNNING and base == "RUNNING" and "CONFIGURING" in flags:
        state = BackendJobState.PENDING
    if dialect.requeue_flags.intersection(flags):
        state = BackendJobState.PENDING  # on its way back to the queue: its trays stay held
    parts: list[str] = []
    if base in TELLING_STATES or not base:
        parts.append(base or "/".join(states) or "no state")
    parts.extend(flags)
    reason = job.get("state_reason") if isinstance(job.get("state_reason"), str) else ""
    description = job.get("state_description") if isinstance(job.get("state_description"), str) else ""
    if state not in (BackendJobState.COMPLETED, BackendJobState.CANCELLED):
        # A cancelled job keeps the reason it was pending for ("Priority"): not worth repeating.
        if description:
            parts.append(description)
        elif reason and reason != "None":
            parts.append(reason)
    exit_code = None
    if state in (BackendJobState.COMPLETED, BackendJobState.FAILED, BackendJobState.CANCELLED):
        code = job.get("exit_code") if isinstance(job.get("exit_code"), Mapping) else {}
        exit_code = _number(code.get("return_code"))
        signal = code.get("signal") if isinstance(code.get("signal"), Mapping) else {}
        signal_id = _number(signal.get("id"))
        if signal_id:
            parts.append(f"signal {signal.get('name') or signal_id}")
            if exit_code is None:
                exit_code = 128 + signal_id
    return BackendJobStatus(
        backend_id=str(job.get("job_id", "")),
        state=state,
        message=", ".join(p for p in parts if p),
        exit_code=exit_code,
        nodes=_allocated_nodes(job),
    )


def errors_of(body: Any) -> list[Mapping[str, Any]]:
    errors = body.get("errors") if isinstance(body, Mapping) else None
    return [e for e in errors or [] if isinstance(e, Mapping)]


def _error_text(errors: Iterable[Mapping[str, Any]]) -> str:
    texts = []
    for e in errors:
        error, description = str(e.get("error") or "").strip(), str(e.get("description") or "").strip()
        text = error if not description or description == error else f"{description}: {error}"
        number = e.get("error_number")
        texts.append(f"{text} (Slurm error {number})" if number not in (None, 0) else text)
    return "; ".join(t for t in texts if t)


def _is_request_error(number: Any) -> bool:
    return isinstance(number, int) and any(low <= number < high for low, high in REQUEST_ERROR_RANGES)


def classify_error(status: int, body: Any, action: str) -> BackendRejected | BackendUnavailable | None:
    """The error a slurmrestd answer means, or None when it is a success.

    Transient (BackendUnavailable): any error number of a communication failure, a controller in standby or
    a lost slurmdbd; credentials refused (401/403/511, authentication errors: the target's settings, not
    the job); any other 5xx without a Slurm error about the request (slurmctld down answers -1 or errno 1).
    Permanent (BackendRejected): a Slurm error number about the request (2000-2199, topology 7200-7299,
    REST parsing 9000-9009, data conversion 9200-9216), whatever the HTTP status (slurmrestd sends them as
    500), and every other 4xx.
    """
    errors = errors_of(body)
    if status < 400 and not errors:
        return None
    numbers = {e.get("error_number") for e in errors}
    text = _error_text(errors)
    if not text:
        raw = body if isinstance(body, str) else json.dumps(body)[:300] if body is not None else ""
        text = f"HTTP {status}" + (f": {raw.strip()[:300]}" if raw and raw.strip() else "")
    message = f"{action}: {text}"
    error: BackendRejected | BackendUnavailable
    if numbers & TRANSIENT_ERRORS:
        error = BackendUnavailable(message)
    elif status in (401, 403, 511) or numbers & AUTH_ERRORS:
        error = BackendUnavailable(f"{message} (slurmrestd did not accept the credentials)")
    elif any(_is_request_error(n) for n in numbers) or 400 <= status < 500:
        error = BackendRejected(message)
    else:
        error = BackendUnavailable(message)
    error.error_numbers = frozenset(n for n in numbers if isinstance(n, int))
    return error


# --- tokens ----------------------------------------------------------------------------------------------


def _b64(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def mint_token(key: bytes, user: str, *, lifespan: int = TOKEN_LIFESPAN, now: int | None = None) -> str:
    """An HS256 JWT like `scontrol token username=USER lifespan=LIFESPAN` makes (claims exp, iat, sun)."""
    if not key:
        raise ValueError("the JWT key is empty")
    issued = int(time.time()) if now is None else now
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = {"exp": issued + lifespan, "iat": issued, "sun": user}
    payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
    signature = _b64(hmac.new(key, header + b"." + payload, hashlib.sha256).digest())
    return (header + b"." + payload + b"." + signature).decode()
