"""What every job backend (Slurm through slurmrestd, Kubernetes through its API server) is given and answers.

Pure data and the errors adapters raise; no Django import. The portal builds a `DispatchRequest` from a
placed job (integrations.dispatch) and hands it to the adapter of the job's backend; the adapters live in
`integrations.slurm.jobs` and `integrations.kubernetes.jobs`.

Every adapter call is idempotent, so a retried task never runs a job twice:
* `submit` first looks for a job it already made for this Rackplane job (by `rackplane_name`) and adopts it;
* `cancel` of a job the backend no longer knows is a success;
* `status` reports every asked id, `UNKNOWN` for ids the backend has forgotten.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from core.errors import ExternalError
from core.posix import PosixIdentity
from tenancy import naming


class BackendError(ExternalError):
    """A backend call failed. `error_numbers`: the backend's own error numbers, where it gives them (Slurm's
    `error_number`s), for a caller that must tell two refusals apart."""

    error_numbers: frozenset[int] = frozenset()


class BackendUnavailable(BackendError):
    """Transient: the backend could not be reached or answered 5xx/timeout. Retry later; nothing changed."""

    transient = True


class BackendNotReady(BackendUnavailable):
    """Transient for a while: the backend refused the job for a reason expected to clear by itself (Slurm
    knows a tray's MIG devices again only once its slurmd re-registers after a reconfigure). Dispatch retries
    it like an unreachable backend, but at most `attempts_allowed` attempts in all (by core.retry's backoff,
    about a minute), then the job fails with the backend's words: a refusal that does not clear is one."""

    attempts_allowed = 6


class BackendRejected(BackendError):
    """Permanent: the backend refused the request (bad script, unknown account, invalid object)."""


class BackendJobState(StrEnum):
    PENDING = "pending"  # accepted, not started yet (Slurm PENDING, Kubernetes pods not running)
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"  # the backend does not know this id (any more)


# Keys a configuration target adds to its settings for the kinds' clients (ConfigTarget.connection_settings):
# the API version it remembers for the target ("" until one is chosen; Slurm: slurmrestd's "v0.0.42") and
# the target's primary key, so a client that chooses another version can have the target remember it.
API_VERSION_SETTING = "api_version"
TARGET_ID_SETTING = "target_id"

FINISHED_BACKEND_STATES = (BackendJobState.COMPLETED, BackendJobState.FAILED, BackendJobState.CANCELLED)


@dataclass(frozen=True)
class DispatchRequest:
    """One placed job, as a backend needs it.

    `hostnames` are the compute trays chosen by the placement engine (all of them, in order); each tray gives
    the job `gpus_per_tray` GPUs (4 for multi-tray jobs; 1-4 for a job on one tray). `segment` is the number
    of trays per segment, each inside one NVLink partition (Slurm `--segment`): all of them when they share
    one partition, else the size that splits each partition's share into whole segments
    (integrations.dispatch.segment_size); None for one tray or when no size does. `service_tier` is the
    Slurm partition serving the trays (a slice job's: its tray's MIG partition, `<tier>--mig`). `work` is
    {"script": "#!/bin/bash ..."} for Slurm and {"image": ..., "command": [...], "args": [...], "env":
    {...}} for Kubernetes. `clique` is "<cluster uuid>.<clique id>"
    of the NVLink partition when all trays share one.
    """

    job_id: int
    name: str
    department: str  # slug: Slurm account and QOS, Kubernetes namespace and Kueue LocalQueue
    priority_class: str  # train | build | inference
    hostnames: tuple[str, ...]
    gpus_per_tray: int
    time_limit_minutes: int
    work: dict
    service_tier: str = "gpu"
    segment: int | None = None
    clique: str = ""
    imex: bool = False  # Slurm: a job-scoped IMEX channel (switch/nvidia_imex) where the cluster enables it
    attempt: int = 0  # how many times the job was preempted before: each run has its own backend name
    project: str = ""  # slug of its project inside the department ("": none; tenancy.Project)
    # The Unix user the job runs as: its submitter's POSIX identity (tenancy.PosixAccount). Slurm submits
    # as `run_as.name`; Kubernetes sets runAsUser/runAsGroup/supplementalGroups. None: the person has none,
    # which only the embedded renderer accepts (integrations.dispatch refuses it for a live backend).
    run_as: PosixIdentity | None = None
    # The department QOS to run under (integrations.dispatch.job_qos; Slurm's): "": the department's own.
    qos: str = ""
    # A slice job (scheduling.slices): `mig_slices` MIG devices of the profile `mig_profile` on its one tray,
    # and no whole GPU (`gpus_per_tray` 0). Slurm asks `gres/gpu:<profile>:<count>` (the GRES type the
    # tray's node line declares: integrations.state), Kubernetes the device plugin's mixed-strategy
    # resource `nvidia.com/mig-<profile>`.
    mig_profile: str = ""
    mig_slices: int = 0

    @property
    def home(self) -> str:
        """Where it runs: its project's Slurm account and Kubernetes namespace (`<department>--<project>`, a
        child account of the department's; tenancy.Project.account), else the department's. ValueError for
        a slug that cannot name one (tenancy.naming)."""
        return naming.home(self.department, self.project)

    @property
    def rackplane_name(self) -> str:
        """The backend-side name that identifies this run of the job (to adopt it after a lost reply)."""
        return f"rp-{self.job_id}" if not self.attempt else f"rp-{self.job_id}-{self.attempt}"

    @property
    def gpus(self) -> int:
        return self.gpus_per_tray * len(self.hostnames)


@dataclass(frozen=True)
class BackendJobStatus:
    backend_id: str
    state: BackendJobState
    message: str = ""  # the backend's words (Slurm state reason, Kubernetes condition message)
    exit_code: int | None = None
    nodes: tuple[str, ...] = field(default_factory=tuple)


class JobBackend(Protocol):
    """A backend that acts as each job's person (Slurm) says so with `acts_as_person = True` and takes
    `run_as` (a PosixIdentity, or None for its own user) as a keyword of status, cancel and signal."""

    def submit(self, request: DispatchRequest) -> str:
        """Start the job; return the backend's id for it. Adopts an existing job of the same name."""

    def status(self, backend_ids: list[str]) -> dict[str, BackendJobStatus]:
        """The state of each id (UNKNOWN for ids the backend does not know)."""

    def cancel(self, backend_id: str) -> None:
        """Stop the job; a job already gone is a success."""
