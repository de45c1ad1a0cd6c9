"""SlurmJobBackend: Rackplane jobs as Slurm batch jobs through slurmrestd (OpenAPI v0.0.42 to v0.0.45).

HTTP through core.http, no Django. What is sent and how the answers are read (with the facts about
slurmrestd they rest on) is rest.py; this is the backend that talks to slurmrestd: submit, status, cancel,
signal, and as whom.

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

Which API version: the one the target remembers (ConfigTarget.api_version), else the newest one both
Rackplane and the slurmrestd know, read from its OpenAPI document (`GET /openapi/v3`, which lists every
`/slurm/v0.0.NN/` path it serves; integrations.slurm.versions) and remembered through `on_api_version`.
It is asked again when Test connection runs, and when a request answers 404 without a Slurm answer (the text
"Unable to find requested URL endpoint": slurmrestd was upgraded and no longer serves that version); the
request is then sent once more under the new version. A slurmrestd that serves no version Rackplane knows
is BackendUnavailable saying which it serves and what to do: the jobs wait, nothing is refused for it.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from core import posix
from core.errors import ExternalError
from core.http import HttpClient
from core.outbound import ALLOW_PRIVATE_SETTING
from core.posix import PosixIdentity
from integrations.jobs import (
    API_VERSION_SETTING,
    FINISHED_BACKEND_STATES,
    BackendError,
    BackendJobState,
    BackendJobStatus,
    BackendNotReady,
    BackendRejected,
    BackendUnavailable,
    DispatchRequest,
)
from integrations.slurm import versions
from integrations.slurm.rest import (
    DEFAULT_WORKDIR,
    ESLURM_ALREADY_DONE,
    ESLURM_INVALID_JOB_ID,
    ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE,
    TOKEN_LIFESPAN,
    classify_error,
    errors_of,
    job_status,
    mint_token,
    submit_payload,
)

log = logging.getLogger(__name__)


def gres_count(gres: str, gres_type: str, name: str = "gpu") -> int:
    """How many `name:gres_type` a node's GRES string holds, as slurmctld shows it
    ("gpu:1g.23gb:8(S:0),gpu:2g.47gb:4" -> 8 for 1g.23gb); 0 when it names none."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(", 1)[0].strip().split(":")
        if len(parts) == 3 and parts[0] == name and parts[1] == gres_type and parts[2].isdigit():
            total += int(parts[2])
    return total


TOKEN_RENEW_BEFORE = 120  # mint a new one when the current one has less left than this
MANY_IDS = 20  # status of more ids than this: one GET /jobs/ instead of one GET per id
# GET /jobs/ lists every job slurmctld holds (up to MaxJobCount, a few KB each): the limit only stops a wrong
# URL that streams without end.
MAX_ANSWER_BYTES = 1024 * 1024 * 1024
OPENAPI_PATH = "/openapi/v3"  # slurmrestd's OpenAPI document: every path it serves (~0.9 MB on 26.05)


# --- the backend -----------------------------------------------------------------------------------------


class SlurmJobBackend:
    """The JobBackend of a Slurm cluster, over slurmrestd's API (v0.0.42 to v0.0.45) with JWT.

    rest_url: slurmrestd's address (http:// or https://). user: the Slurm user the tokens are for: SlurmUser
    (or root) with a jwt_key_file, so that each job is submitted, read and cancelled as its person (the
    request's `run_as`, sent as X-SLURM-USER-NAME). token: a static token of `user` (`scontrol token`): only
    `user`'s own jobs can run then; or jwt_key_file: slurmctld's jwt_key, from which short-lived tokens are
    minted. accounting: send the department as
    account and QOS. imex: the cluster runs switch/nvidia_imex (a request asking for IMEX is refused
    otherwise). timeout: seconds for each HTTP call (slurmrestd itself waits up to ~18 s for a dead
    slurmctld). workdir: the jobs' working directory on the nodes. api_version: the version the target
    remembers ("": ask slurmrestd first); on_api_version: called with the version chosen and the versions
    slurmrestd serves when the choice differs from that one (the target remembers them).
    """

    acts_as_person = True  # status, cancel and signal take run_as (integrations.dispatch)

    @property
    def submits_qos(self) -> bool:
        """Jobs go under their department's QOS (integrations.dispatch.job_qos) when the target sends the
        accounting (its account and QOS); without it Slurm gets neither."""
        return self.accounting

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
        api_version: str = "",
        on_api_version: Callable[[str, list[str]], None] | None = None,
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
        self._remembered = api_version
        self._dialect: versions.Dialect | None = versions.KNOWN.get(api_version)
        self._on_api_version = on_api_version
        self._version_lock = threading.Lock()
        self.served: list[str] = []  # what slurmrestd served when last asked (negotiate)
        self._http = HttpClient(
            self.rest_url,
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

    # -- the API version --

    @property
    def dialect(self) -> versions.Dialect:
        """The API version this backend speaks: the remembered one, else negotiated now."""
        dialect = self._dialect
        return dialect if dialect is not None else self.negotiate()

    @property
    def api_version(self) -> str:
        return self.dialect.version

    def negotiate(self) -> versions.Dialect:
        """Ask slurmrestd which API versions it serves (GET /openapi/v3) and take the newest Rackplane knows.

        BackendUnavailable when it cannot be asked, or serves none Rackplane knows (the message names what it
        serves; a newer Rackplane or another slurmrestd fixes it, the jobs wait meanwhile)."""
        with self._version_lock:
            status, decoded = self._send("GET", OPENAPI_PATH, None, self.user)
            if status >= 400 or not isinstance(decoded, Mapping):
                action = f"reading slurmrestd's OpenAPI document ({OPENAPI_PATH}) at {self.rest_url}"
                error = classify_error(status, decoded, action)
                if isinstance(error, BackendUnavailable):
                    raise error  # down, or the credentials refused
                raise BackendUnavailable(
                    str(error) if error else f"{action}: HTTP {status} without a JSON object",
                    "check that rest_url is slurmrestd's address (with the openapi/slurmctld plugin)",
                )
            served = versions.served_versions(decoded)
            self.served = served
            chosen = versions.choose(served)
            if chosen is None:
                release = _release(decoded)
                raise BackendUnavailable(
                    f"slurmrestd at {self.rest_url}{release} serves "
                    f"{', '.join(served) or 'no /slurm/ API'}, and Rackplane speaks only "
                    f"{versions.known_range()}",
                    "run a Rackplane release that speaks one of the versions it serves, or let slurmrestd "
                    f"serve one of {versions.known_range()} (every Slurm from 24.11 to 26.11 serves one; "
                    "slurmrestd -d lists its data_parser plugins; without openapi/slurmctld it serves no "
                    "/slurm/ path), then press Test connection on the target",
                )
            if chosen.version != self._remembered:
                log.info(
                    "slurmrestd at %s serves %s: using %s (was %s)",
                    self.rest_url,
                    ", ".join(served),
                    chosen.version,
                    self._remembered or "not chosen yet",
                )
                if self._on_api_version is not None:
                    self._on_api_version(chosen.version, served)
                self._remembered = chosen.version
            self._dialect = chosen
            return chosen

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
        dialect = self.dialect
        status, decoded = self._send(method, dialect.api + path, body, acting)
        if status == 404 and _not_routed(decoded):
            # slurmrestd does not serve this version (any more): upgraded under us. Ask again, send again.
            log.warning(
                "slurmrestd at %s answered 404 for %s%s: asking it which API versions it serves",
                self.rest_url,
                dialect.api,
                path,
            )
            self._dialect = None
            renewed = self.negotiate()
            if renewed.version == dialect.version:
                raise BackendUnavailable(
                    f"{method} {dialect.api}{path}: slurmrestd at {self.rest_url} lists this path's API "
                    f"version {dialect.version} in its OpenAPI document but answers 404 for it",
                    "check that rest_url points at slurmrestd itself, not a proxy that rewrites paths",
                )
            status, decoded = self._send(method, renewed.api + path, body, acting)
        if acting != self.user and (
            status in (401, 403, 511) or {1007} & {e.get("error_number") for e in errors_of(decoded)}
        ):
            # The usual cause: rest_user is not SlurmUser (or root), whose tokens alone may name another user.
            errors = errors_of(decoded) or [{"error": f"HTTP {status}"}]
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

    def _send(self, method: str, path: str, body: Any, acting: str) -> tuple[int, Any]:
        headers = {"X-SLURM-USER-NAME": acting, "X-SLURM-USER-TOKEN": self._current_token()}
        try:
            response = self._http.request(method, path, body, headers=headers)
        except ExternalError as error:
            if error.transient:
                message = f"{method} {path}: slurmrestd at {self.rest_url} did not answer ({error})"
            else:
                message = f"{method} {path}: slurmrestd at {self.rest_url}: {error}"
            raise BackendUnavailable(message, error.what_to_do or None) from error
        return response.status, response.json_or_text()

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
            and job_status(j, self.dialect).state in (BackendJobState.PENDING, BackendJobState.RUNNING)
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
        payload = submit_payload(
            request, account=self.accounting, qos=self.accounting, workdir=self.workdir, dialect=self.dialect
        )
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
        try:
            body = self._checked(
                "POST",
                "/job/submit",
                f"submitting {request.rackplane_name} as {run_as.name}",
                payload,
                run_as=run_as,
            )
        except BackendRejected as error:
            if request.mig_profile and ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE in error.error_numbers:
                raise self._slices_refused(request, error) from error
            raise
        job_id = body.get("job_id")
        if not isinstance(job_id, int) or isinstance(job_id, bool) or job_id <= 0:
            raise BackendUnavailable(f"submitting {request.rackplane_name}: slurmrestd answered no job id")
        return str(job_id)

    def _slices_refused(self, request: DispatchRequest, error: BackendRejected) -> BackendError:
        """A slice job refused as "Requested node configuration is not available" (2014): permanent when
        the node line slurmctld runs gives its tray fewer of the profile than the job asks (the push with the
        tray's MIG layout has not reached Slurm); otherwise for a while (BackendNotReady). slurmctld knows a
        node's typed GRES again only once its slurmd re-registers after a reconfigure, and every push
        reconfigures: a slice job dispatched in those seconds is refused in these words, then taken."""
        short = []
        for host in request.hostnames:
            body = self._checked(
                "GET", f"/node/{urllib.parse.quote(host, safe='')}", f"reading Slurm node {host}"
            )
            shown = next((n for n in body.get("nodes") or [] if isinstance(n, Mapping)), {})
            if gres_count(str(shown.get("gres") or ""), request.mig_profile) < request.mig_slices:
                short.append(f"{host} ({shown.get('gres') or 'no GRES'})")
        refused: BackendError
        if short:
            refused = BackendRejected(
                f"{error}: Slurm's node line for {', '.join(short)} holds fewer than {request.mig_slices} "
                f"gpu:{request.mig_profile}; push the Slurm configuration with the tray's MIG layout first"
            )
        else:
            refused = BackendNotReady(
                f"{error}: the node line holds gpu:{request.mig_profile}, but slurmctld cannot give it yet "
                "(a node's slurmd registers its MIG devices again after each reconfigure)"
            )
        refused.error_numbers = error.error_numbers
        return refused

    def _job(self, backend_id: str, run_as: PosixIdentity | None = None) -> Mapping[str, Any] | None:
        """GET /job/{id} as `run_as`: the job's record, None when slurmctld does not know it (any more) or
        does not show it to `run_as` (PrivateData=jobs)."""
        status, decoded = self._call("GET", f"/job/{backend_id}", run_as=run_as)
        if status == 404 and ESLURM_INVALID_JOB_ID in {e.get("error_number") for e in errors_of(decoded)}:
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

    def _status_of(self, backend_id: str, job: Mapping[str, Any] | None) -> BackendJobStatus:
        if job is None:
            return BackendJobStatus(
                backend_id, BackendJobState.UNKNOWN, "Slurm does not know this job (any more)"
            )
        return job_status(job, self.dialect)

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
        if job is None or job_status(job, self.dialect).state in FINISHED_BACKEND_STATES:
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


def _not_routed(decoded: Any) -> bool:
    """A 404 of slurmrestd's router (a text answer, no Slurm errors), not a Slurm answer such as a job
    slurmctld no longer knows (a JSON 404 with error 2017)."""
    if isinstance(decoded, Mapping):
        return not errors_of(decoded) and not decoded.get("meta")
    return True  # slurmrestd's "Unable to find requested URL endpoint..." (text/plain), or an empty answer


def _release(openapi: Mapping[str, Any]) -> str:
    """ " (Slurm 26.05.5)" from an OpenAPI document's info.version ("Slurm-26.05.5"), else ""."""
    info = openapi.get("info")
    version = info.get("version") if isinstance(info, Mapping) else None
    if isinstance(version, str) and version.startswith("Slurm-"):
        return f" (Slurm {version.removeprefix('Slurm-').split('&')[0]})"
    return ""


def backend_from_settings(
    settings: Mapping[str, Any],
    on_api_version: Callable[[str, list[str]], None] | None = None,
    **kwargs: Any,
) -> SlurmJobBackend:
    """The job backend of a Slurm ConfigTarget's cleaned settings (`integrations.registry.clean_settings`),
    speaking the API version the target remembers (API_VERSION_SETTING; "": chosen at the first call, and
    handed to `on_api_version` for the target to remember).

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
            api_version=str(settings.get(API_VERSION_SETTING) or ""),
            on_api_version=on_api_version,
            **kwargs,
        )
    except ValueError as error:
        raise BackendUnavailable(f"the Slurm target's job settings are incomplete: {error}") from error
