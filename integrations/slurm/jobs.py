"""SlurmJobBackend: Rackplane jobs as Slurm batch jobs through slurmrestd (OpenAPI v0.0.42, Slurm 24.11).

HTTP through core.http, no Django. Facts this module relies on, from the OpenAPI document slurmrestd 24.11
serves at `/openapi/v3` and from measuring the testbed (scripts/slurm-testbed.sh):

* `POST /slurm/v0.0.42/job/submit` takes `{"job": v0.0.42_job_desc_msg}`. The fields used here: `name`,
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
  after slurmrestd's own retries (9-18 s). A bad token is HTTP 511 with 1007 "Protocol authentication error".
  So the error number, not the HTTP status, tells a refused request from an unavailable controller:
  `classify_error`.
* `GET /slurm/v0.0.42/job/{id}` of an id slurmctld has forgotten (older than MinJobAge) is a 404 with 2017
  "Invalid job id specified"; `DELETE` of it is a 200 whose `status[].error.code` is 2017, and of a
  finished job 2021 "Job/step already completing or completed".
* `job_state` is a list: the base state (PENDING, RUNNING, SUSPENDED, COMPLETED, CANCELLED, FAILED, TIMEOUT,
  NODE_FAIL, PREEMPTED, BOOT_FAIL, DEADLINE, OUT_OF_MEMORY) and flags (CONFIGURING, COMPLETING, REQUEUED,
  ...). `exit_code` is `{"status", "return_code": {set, number}, "signal": {"id": {set, number}, "name"}}`.
* slurmrestd 24.11 does NOT refuse a `required_nodes` entry slurmctld does not know: it drops it and runs
  the job on any other node (sbatch refuses the same request with "Invalid node name specified"). `submit`
  therefore checks every chosen tray against `GET /slurm/v0.0.42/nodes/` first.
* Slurm 24.11 refuses `--segment` together with `--nodelist` when the job has more than one segment (2178
  "Requested topology configuration is not available"; Slurm 25.05 added "limited support" for it). The
  placement engine already chose trays segment by segment, so `segment_size` is sent only when the whole
  job is one segment: Slurm then checks that the pinned trays lie in one block. (With topology/block a job
  smaller than the base block size must fit in one block anyway: 2014 otherwise.)
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

Every job runs as its person (DispatchRequest.run_as, a POSIX identity). slurmrestd accepts a token of
SlurmUser (or root) together with `X-SLURM-USER-NAME: <another user>` and then acts as that user: the job is
submitted, read and cancelled as the person (measured on the testbed: `user_name`/`user_id` are the
person's, the batch script's `id -u` is their uid, their supplementary groups come from the node's group
database). So the target's `rest_user` is the SlurmUser the tokens are minted for, never a person, and the
key never leaves this process (tokens live TOKEN_LIFESPAN). A token of any other user with another name is
refused (511, 1007 "Protocol authentication error"). A static `rest_token` is one user's: it cannot act as
anyone else, so with one only that user's own jobs run and every other person's is refused with the reason.
With `PrivateData=jobs` (a shared cluster's setting) a user sees only their own jobs: `GET /job/{id}` of
another's is a 404 with 2017, and a `DELETE` of another's is a 500 "Operation not permitted" after ~10 s that
leaves Slurm 24.11.5's job table hung until slurmctld restarts; so a job is only signalled after reading it
as the same person, and a job the person cannot see is checked as SlurmUser before it counts as gone.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

import hostlist

from core import posix
from core.errors import ExternalError
from core.http import HttpClient
from core.outbound import ALLOW_PRIVATE_SETTING
from core.posix import PosixIdentity
from core.workloads import WorkError
from integrations.jobs import (
    FINISHED_BACKEND_STATES,
    BackendJobState,
    BackendJobStatus,
    BackendRejected,
    BackendUnavailable,
    DispatchRequest,
)
from integrations.slurm.work import validate_work
from tenancy import naming

log = logging.getLogger(__name__)

API = "/slurm/v0.0.42"
DEFAULT_WORKDIR = "/tmp"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
IMEX_NETWORK = "unique-channel-per-segment"
TOKEN_LIFESPAN = 600  # seconds a minted token is valid
TOKEN_RENEW_BEFORE = 120  # mint a new one when the current one has less left than this
MANY_IDS = 20  # status of more ids than this: one GET /jobs/ instead of one GET per id
# GET /jobs/ lists every job slurmctld holds (up to MaxJobCount, a few KB each): the limit only stops a wrong
# URL that streams without end.
MAX_ANSWER_BYTES = 1024 * 1024 * 1024

# Slurm error numbers (slurm/slurm_errno.h).
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
    request: DispatchRequest, *, account: bool = True, qos: bool = True, workdir: str = DEFAULT_WORKDIR
) -> dict:
    """The body of `POST /slurm/v0.0.42/job/submit` for one placed job (raises BackendRejected if unusable).

    Pinned to exactly `request.hostnames` (`required_nodes`, node count = their number), `gpus_per_tray`
    GPUs on each (`tres_per_node`), in partition `service_tier`; `account` / `qos` = the department when the
    flags say so; `segment_size` when the job is one segment (see the module docstring for why not
    otherwise); `network` = unique-channel-per-segment when it asks for IMEX. Runs in `workdir` with a
    minimal environment (PATH, LANG and RACKPLANE_* variables) and writes `<workdir>/<name>-<jobid>.out`.
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
    if not 1 <= request.gpus_per_tray <= 4:
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
        "tres_per_node": f"gres/gpu:{request.gpus_per_tray}",
        "time_limit": _no_val(request.time_limit_minutes),
        "current_working_directory": workdir,
        "standard_output": f"{workdir.rstrip('/')}/{name}-%j.out",
        "environment": environment,
    }
    if request.segment is not None:
        if request.segment < 1 or len(hosts) % request.segment:
            raise BackendRejected(f"segment {request.segment} does not divide the job's {len(hosts)} trays")
        if request.segment == len(hosts):
            job["segment_size"] = _no_val(request.segment)
    try:  # tenancy.naming: the one derivation of accounts and QOS from the slugs
        home, department_qos = request.home, naming.department_qos(request.department)
    except ValueError as error:
        raise BackendRejected(str(error)) from error
    if account:
        job["account"] = home  # the project's account (a child of the department's), else its own
    if qos:
        job["qos"] = department_qos
    if request.imex:
        job["network"] = IMEX_NETWORK
    return {"job": job}


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


def job_status(job: Mapping[str, Any]) -> BackendJobStatus:
    """One `v0.0.42_job_info` record as Rackplane sees it.

    PENDING -> pending; RUNNING, SUSPENDED -> running (but RUNNING + CONFIGURING, nodes still booting, ->
    pending); COMPLETED -> completed; CANCELLED -> cancelled; FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY,
    BOOT_FAIL, DEADLINE, PREEMPTED -> failed. A finished state stays finished while the job is COMPLETING.
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
        nodes=_expand(job.get("nodes")),
    )


def _errors(body: Any) -> list[Mapping[str, Any]]:
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
    errors = _errors(body)
    if status < 400 and not errors:
        return None
    numbers = {e.get("error_number") for e in errors}
    text = _error_text(errors)
    if not text:
        raw = body if isinstance(body, str) else json.dumps(body)[:300] if body is not None else ""
        text = f"HTTP {status}" + (f": {raw.strip()[:300]}" if raw and raw.strip() else "")
    message = f"{action}: {text}"
    if numbers & TRANSIENT_ERRORS:
        return BackendUnavailable(message)
    if status in (401, 403, 511) or numbers & AUTH_ERRORS:
        return BackendUnavailable(f"{message} (slurmrestd did not accept the credentials)")
    if any(_is_request_error(n) for n in numbers):
        return BackendRejected(message)
    if status >= 500 or status < 400:
        return BackendUnavailable(message)
    return BackendRejected(message)


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


# --- the backend -----------------------------------------------------------------------------------------


class SlurmJobBackend:
    """The JobBackend of a Slurm cluster, over slurmrestd's v0.0.42 API with JWT.

    rest_url: slurmrestd's address (http:// or https://). user: the Slurm user the tokens are for: SlurmUser
    (or root) with a jwt_key_file, so that each job is submitted, read and cancelled as its person (the
    request's `run_as`, sent as X-SLURM-USER-NAME). token: a static token of `user` (`scontrol token`): only
    `user`'s own jobs can run then; or jwt_key_file: slurmctld's jwt_key, from which short-lived tokens are
    minted. accounting: send the department as
    account and QOS. imex: the cluster runs switch/nvidia_imex (a request asking for IMEX is refused
    otherwise). timeout: seconds for each HTTP call (slurmrestd itself waits up to ~18 s for a dead
    slurmctld). workdir: the jobs' working directory on the nodes.
    """

    acts_as_person = True  # status, cancel and signal take run_as (integrations.dispatch)

    def __init__(
        self,
        rest_url: str,
        user: str,
        *,
        token: str = "",
        jwt_key_file: str = "",
        accounting: bool = False,
        imex: bool = False,
        timeout: float = 30.0,
        workdir: str = DEFAULT_WORKDIR,
        allow_private: bool = True,
    ):
        parts = urllib.parse.urlsplit(rest_url or "")
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"rest_url {rest_url!r} is not an http:// or https:// address")
        if not user:
            raise ValueError("a Slurm user is needed (X-SLURM-USER-NAME)")
        if bool(token) == bool(jwt_key_file):
            raise ValueError("give either a token or a jwt_key_file")
        self.rest_url = rest_url.rstrip("/")
        self.user = user
        self.accounting = accounting
        self.imex = imex
        self.timeout = timeout
        self.workdir = workdir
        self._static_token = token
        self._jwt_key_file = jwt_key_file
        self._token = ""
        self._token_expires = 0.0
        self._lock = threading.Lock()
        self._http = HttpClient(
            self.rest_url + API,
            headers={"Accept": "application/json"},
            timeout=timeout,
            max_bytes=MAX_ANSWER_BYTES,
            allow_private=allow_private,  # the target's outbound allowance (core.outbound)
        )

    # -- HTTP --

    def _current_token(self) -> str:
        if self._static_token:
            return self._static_token
        with self._lock:
            if time.time() > self._token_expires - TOKEN_RENEW_BEFORE:
                try:
                    with open(self._jwt_key_file, "rb") as handle:
                        key = handle.read()
                except OSError as error:
                    raise BackendUnavailable(
                        f"cannot read the JWT key file {self._jwt_key_file}: {error.strerror or error}"
                    ) from error
                if not key:
                    raise BackendUnavailable(f"the JWT key file {self._jwt_key_file} is empty")
                now = int(time.time())
                self._token = mint_token(key, self.user, lifespan=TOKEN_LIFESPAN, now=now)
                self._token_expires = now + TOKEN_LIFESPAN
            return self._token

    def acting_user(self, run_as: PosixIdentity | None) -> str:
        """The Slurm user a call for `run_as` is made as (None: the target's own user). A static token is
        its own user's only: BackendRejected for anyone else."""
        if run_as is None:
            return self.user
        if self._static_token and run_as.name != self.user:
            raise BackendRejected(
                f"this Slurm target has a static rest_token (of {self.user}), which cannot act as another "
                f"user, so {run_as.name}'s job cannot run here as {run_as.name}: give the target slurmctld's "
                "jwt_key (jwt_key_file) and SlurmUser as rest_user instead"
            )
        return run_as.name

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        run_as: PosixIdentity | None = None,
        as_user: str = "",
    ) -> tuple[int, Any]:
        """(HTTP status, decoded JSON or text) of a call made as `run_as` (None: the target's user);
        BackendUnavailable when slurmrestd cannot be reached.

        An answer that cannot be used (too large, an untrusted certificate) is BackendUnavailable too: the
        target's settings are wrong, not the job, which waits for an administrator.
        """
        acting = as_user or self.acting_user(run_as)  # as_user: the owner Slurm records (_own_job)
        headers = {"X-SLURM-USER-NAME": acting, "X-SLURM-USER-TOKEN": self._current_token()}
        try:
            response = self._http.request(method, path, body, headers=headers)
        except ExternalError as error:
            if error.transient:
                message = f"{method} {path}: slurmrestd at {self.rest_url} did not answer ({error})"
            else:
                message = f"{method} {path}: slurmrestd at {self.rest_url}: {error}"
            raise BackendUnavailable(message, error.what_to_do or None) from error
        status, decoded = response.status, response.json_or_text()
        if acting != self.user and (
            status in (401, 403, 511) or {1007} & {e.get("error_number") for e in _errors(decoded)}
        ):
            # The usual cause: rest_user is not SlurmUser (or root), whose tokens alone may name another user.
            errors = _errors(decoded) or [{"error": f"HTTP {status}"}]
            decoded = {
                "errors": [
                    {
                        **errors[0],
                        "description": f"slurmrestd refused to act as {acting} with a token of {self.user} "
                        "(is rest_user SlurmUser or root?)",
                    }
                ]
            }
        for warning in (decoded.get("warnings") or []) if isinstance(decoded, Mapping) else []:
            if isinstance(warning, Mapping) and warning.get("description") not in (None, "Zero jobs to dump"):
                log.warning("slurmrestd %s %s: %s", method, path, warning.get("description"))
        return status, decoded

    def _checked(
        self, method: str, path: str, action: str, body: Any = None, *, run_as: PosixIdentity | None = None
    ) -> Any:
        status, decoded = self._call(method, path, body, run_as=run_as)
        error = classify_error(status, decoded, action)
        if error is not None:
            raise error
        if not isinstance(decoded, Mapping):
            raise BackendUnavailable(f"{action}: slurmrestd answered HTTP {status} without a JSON object")
        return decoded

    # -- JobBackend --

    def jobs(self, run_as: PosixIdentity | None = None) -> list[Mapping[str, Any]]:
        """Every job slurmctld shows `run_as` (GET /jobs/; with PrivateData=jobs a user's own only)."""
        body = self._checked("GET", "/jobs/", "listing Slurm jobs", run_as=run_as)
        return [j for j in body.get("jobs") or [] if isinstance(j, Mapping)]

    def find(self, name: str, run_as: PosixIdentity | None = None) -> str | None:
        """The id of the oldest unfinished job of `run_as` (None: this backend's user) called `name`."""
        owner = self.acting_user(run_as)
        found = sorted(
            int(j["job_id"])
            for j in self.jobs(run_as)
            if j.get("name") == name
            and j.get("user_name") == owner
            and isinstance(j.get("job_id"), int)
            and job_status(j).state in (BackendJobState.PENDING, BackendJobState.RUNNING)
        )
        if len(found) > 1:
            log.warning(
                "Slurm has %d unfinished jobs named %s (%s); adopting the oldest", len(found), name, found
            )
        return str(found[0]) if found else None

    def missing_nodes(self, hostnames: Iterable[str]) -> list[str]:
        """The host names slurmctld has no node for (GET /nodes/)."""
        body = self._checked("GET", "/nodes/", "listing Slurm nodes")
        known = {n.get("name") for n in body.get("nodes") or [] if isinstance(n, Mapping)}
        return [h for h in hostnames if h not in known]

    def submit(self, request: DispatchRequest) -> str:
        """Submit as the job's person (request.run_as), never as anyone else."""
        run_as = request.run_as
        if run_as is None:
            raise BackendRejected(
                "the job's person has no POSIX identity (uid/gid): Slurm runs every job as its person's "
                "Unix user, never as the target's own; an admin maps one, or LDAP/OIDC gives it at sign-in"
            )
        self.acting_user(run_as)  # a static token of another user: refused before anything is asked
        if request.imex and not self.imex:
            raise BackendRejected(
                "the job asks for an IMEX channel but this Slurm target does not run switch/nvidia_imex "
                "(its imex setting is off)"
            )
        payload = submit_payload(request, account=self.accounting, qos=self.accounting, workdir=self.workdir)
        adopted = self.find(request.rackplane_name, run_as)
        if adopted is not None:
            log.info("adopting Slurm job %s (%s)", adopted, request.rackplane_name)
            return adopted
        missing = self.missing_nodes(request.hostnames)
        if missing:
            raise BackendRejected(
                f"Slurm has no node {', '.join(missing)}: push the Slurm configuration first "
                "(slurmrestd would run the job on other nodes)"
            )
        body = self._checked(
            "POST",
            "/job/submit",
            f"submitting {request.rackplane_name} as {run_as.name}",
            payload,
            run_as=run_as,
        )
        job_id = body.get("job_id")
        if not isinstance(job_id, int) or isinstance(job_id, bool) or job_id <= 0:
            raise BackendUnavailable(f"submitting {request.rackplane_name}: slurmrestd answered no job id")
        return str(job_id)

    def _job(self, backend_id: str, run_as: PosixIdentity | None = None) -> Mapping[str, Any] | None:
        """GET /job/{id} as `run_as`: the job's record, None when slurmctld does not know it (any more) or
        does not show it to `run_as` (PrivateData=jobs)."""
        status, decoded = self._call("GET", f"/job/{backend_id}", run_as=run_as)
        if status == 404 and ESLURM_INVALID_JOB_ID in {e.get("error_number") for e in _errors(decoded)}:
            return None
        error = classify_error(status, decoded, f"reading Slurm job {backend_id}")
        if error is not None:
            raise error
        jobs = decoded.get("jobs") if isinstance(decoded, Mapping) else None
        return next(
            (j for j in jobs or [] if isinstance(j, Mapping) and str(j.get("job_id")) == backend_id), None
        )

    def status(
        self, backend_ids: list[str], run_as: PosixIdentity | None = None
    ) -> dict[str, BackendJobStatus]:
        """The state of each id, read as `run_as` (the person who submitted them; None: the target's user)."""
        out: dict[str, BackendJobStatus] = {}
        asked = [i for i in dict.fromkeys(str(i) for i in backend_ids)]
        numeric = [i for i in asked if re.fullmatch(r"[1-9][0-9]{0,9}", i)]
        for i in asked:
            if i not in numeric:
                out[i] = BackendJobStatus(i, BackendJobState.UNKNOWN, "not a Slurm job id")
        # A job the person cannot see (PrivateData=jobs) may still run under another name: submitted before
        # jobs ran as their person, or before the person was renamed. SlurmUser sees every job: a job is
        # only "unknown" (and failed) when slurmctld itself no longer knows it, never because of who asked.
        see_all = self.acting_user(run_as) != self.user and not self._static_token
        if len(numeric) > MANY_IDS:
            by_id = {str(j.get("job_id")): j for j in self.jobs(run_as)}
            if see_all and any(i not in by_id for i in numeric):
                by_id = {**{str(j.get("job_id")): j for j in self.jobs()}, **by_id}
            for i in numeric:
                out[i] = self._status_of(i, by_id.get(i))
            return out
        for i in numeric:
            job = self._job(i, run_as)
            if job is None and see_all:
                job = self._job(i)
            out[i] = self._status_of(i, job)
        return out

    @staticmethod
    def _status_of(backend_id: str, job: Mapping[str, Any] | None) -> BackendJobStatus:
        if job is None:
            return BackendJobStatus(
                backend_id, BackendJobState.UNKNOWN, "Slurm does not know this job (any more)"
            )
        return job_status(job)

    def _own_job(self, backend_id: str, run_as: PosixIdentity | None) -> tuple[Mapping[str, Any], str] | None:
        """(the unfinished job, the Slurm user to stop it as), or None when there is nothing to stop.

        A job is stopped as the user Slurm runs it as, never as someone else: Slurm 24.11.5 answers a DELETE
        of another user's job with "Operation not permitted" and a hung job table (measured on the testbed:
        every later job query timed out until slurmctld was restarted). That user is the person's (run_as),
        or, with a key that may act as anyone (SlurmUser), the one Slurm records for a job Rackplane named
        (`rp-...`): a job submitted before jobs ran as their person, or before the person was renamed or lost
        their identity, is still stopped when a lead cancels it or a preemption reclaims its GPUs.
        BackendRejected for a job of another user that is not Rackplane's, or with a static token."""
        owner = self.acting_user(run_as)
        job = self._job(backend_id, run_as)
        if job is None and owner != self.user and not self._static_token:
            # PrivateData hides other users' jobs: gone, or someone else's? SlurmUser sees them all.
            job = self._job(backend_id)
        if job is None or job_status(job).state in FINISHED_BACKEND_STATES:
            return None
        recorded = job.get("user_name")
        if recorded == owner:
            return job, owner
        ours = str(job.get("name") or "").startswith("rp-")
        # The same person under another name: no identity any more (run_as None), the job submitted as the
        # target's user before jobs ran as their person, or the person renamed (the same uid). Never another
        # person's job: grace's identity does not stop ada's.
        same_person = run_as is None or recorded == self.user or job.get("user_id") == run_as.uid
        if (
            not self._static_token
            and ours
            and same_person
            and isinstance(recorded, str)
            and posix.NAME_RE.fullmatch(recorded)
        ):
            log.warning(
                "Slurm job %s runs as %s, not as %s (submitted before, or the person's identity changed): "
                "stopped as %s",
                backend_id,
                recorded,
                owner,
                recorded,
            )
            return job, recorded
        raise BackendRejected(
            f"Slurm job {backend_id} belongs to {recorded or 'another user'}, not {owner}: "
            "it is never stopped as someone else"
        )

    def cancel(self, backend_id: str, run_as: PosixIdentity | None = None) -> None:
        """Stop the job as `run_as` (its person; None: the target's user); a job already gone is a success."""
        backend_id = str(backend_id)
        if not re.fullmatch(r"[1-9][0-9]{0,9}", backend_id):
            return  # never a Slurm job: nothing to stop
        # Look first: a job that is gone or finished needs nothing, and a job of another user is refused.
        found = self._own_job(backend_id, run_as)
        if found is None:
            return
        status, decoded = self._call("DELETE", f"/job/{backend_id}", as_user=found[1])
        error = classify_error(status, decoded, f"cancelling Slurm job {backend_id}")
        if error is not None:
            raise error
        results = decoded.get("status") if isinstance(decoded, Mapping) else None
        failures = []
        for result in results or []:
            outcome = result.get("error") if isinstance(result, Mapping) else None
            code = outcome.get("code") if isinstance(outcome, Mapping) else None
            if code in (None, 0, ESLURM_INVALID_JOB_ID, ESLURM_ALREADY_DONE):
                continue
            text = outcome.get("message") or outcome.get("string") or ""
            failures.append({"error_number": code, "error": text})
        if failures:
            # Errors per job come in a 200 answer; classify them as if they were the answer's own.
            error = classify_error(500, {"errors": failures}, f"cancelling Slurm job {backend_id}")
            if error is not None:
                raise error

    def signal(self, backend_id: str, signal: str = "USR1", run_as: PosixIdentity | None = None) -> bool:
        """Send `signal` (a name: USR1, TERM...) to every process of a running job, its batch shell and its
        steps (DELETE /job/{id}?signal=...&flags=FULL_JOB, as `scancel --full --signal`), e.g. to make it
        checkpoint (scheduling.requeue). False when the job is gone or finished: nothing to signal."""
        backend_id = str(backend_id)
        name = str(signal).upper().removeprefix("SIG")
        if not re.fullmatch(r"[A-Z0-9]{1,12}", name):
            raise BackendRejected(f"{signal!r} is not a signal name (USR1, TERM, ...)")
        if not re.fullmatch(r"[1-9][0-9]{0,9}", backend_id):
            return False
        found = self._own_job(backend_id, run_as)  # signalled as its owner only (see _own_job)
        if found is None:
            return False
        action = f"signalling Slurm job {backend_id} with SIG{name}"
        status, decoded = self._call(
            "DELETE", f"/job/{backend_id}?signal=SIG{name}&flags=FULL_JOB", as_user=found[1]
        )
        error = classify_error(status, decoded, action)
        if error is not None:
            raise error
        failures = []
        for result in (decoded.get("status") if isinstance(decoded, Mapping) else None) or []:
            outcome = result.get("error") if isinstance(result, Mapping) else None
            code = outcome.get("code") if isinstance(outcome, Mapping) else None
            if code in (None, 0):
                continue
            if code in (ESLURM_INVALID_JOB_ID, ESLURM_ALREADY_DONE):
                return False
            failures.append({"error_number": code, "error": outcome.get("message") or outcome.get("string")})
        if failures and (error := classify_error(500, {"errors": failures}, action)) is not None:
            raise error
        return True

    def ping(self) -> bool:
        """Whether slurmctld answers slurmrestd (GET /ping/)."""
        body = self._checked("GET", "/ping/", "pinging slurmctld")
        pings = [p for p in body.get("pings") or [] if isinstance(p, Mapping)]
        return any(p.get("responding") for p in pings)


def backend_from_settings(settings: Mapping[str, Any], **kwargs: Any) -> SlurmJobBackend:
    """The job backend of a Slurm ConfigTarget's cleaned settings (`integrations.registry.clean_settings`).

    Raises BackendRejected when the target has no `rest_url` (it does not run jobs), BackendUnavailable
    when its other job settings are incomplete (stored unvalidated: an administrator can fix them, and the
    job waits). Extra keyword arguments (timeout, workdir) go to SlurmJobBackend.
    """
    rest_url = (settings.get("rest_url") or "").strip()
    if not rest_url:
        raise BackendRejected("this Slurm target has no slurmrestd address (rest_url): it does not run jobs")
    try:
        return SlurmJobBackend(
            rest_url,
            settings.get("rest_user") or "",
            token=settings.get("rest_token") or "",
            jwt_key_file=settings.get("jwt_key_file") or "",
            accounting=bool(settings.get("accounting")),
            imex=bool(settings.get("imex")),
            allow_private=bool(settings.get(ALLOW_PRIVATE_SETTING, True)),
            **kwargs,
        )
    except ValueError as error:
        raise BackendUnavailable(f"the Slurm target's job settings are incomplete: {error}") from error
