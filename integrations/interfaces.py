"""What each kind's own code implements, as Protocols: `integrations.registry.Kind` types its entries with
them, so mypy checks every kind's registration (`register(Kind(...))` in integrations/<kind>/kind.py)
against them, and the push pipeline, dispatch and the tray drains rely on nothing more.

* `PushAdapter`: `Kind.adapter(target, cleaned settings)` makes one per push; it applies the payload and
  says what a push would change.
* `JobBackend` (integrations.jobs, beside what it is given and answers): `Kind.job_backend(settings)`
  makes one; it submits, reads and cancels jobs.
* `TrayDrainer`: `Kind.drainer(settings)` makes one; it drains and resumes a compute tray and reserves it
  for a maintenance window (integrations.drain), each answered with a `TrayOutcome` (defined here, with
  FAILED, so that integrations.drain, which asks the registry for the drainers, needs no import back;
  integrations.drain names the other actions).

Some kinds do more, asked with getattr where it is used and not part of the Protocols: the `facts` an
adapter learned (integrations.pushes: the Slurm version, the path NMX-M serves), a job backend's `close()`,
`signal(backend_id, signal, ...)` (integrations.requeue) and `acts_as_person` (integrations.dispatch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Protocol

from integrations.jobs import JobBackend

__all__ = ["FAILED", "JobBackend", "PushAdapter", "TrayDrainer", "TrayOutcome"]


class PushAdapter(Protocol):
    """Applies a push to its target. `payload` is what `Kind.payload` built (JSON); `log(*lines)` appends
    to the push's log; `push` is the ConfigPush being applied. Raises core.errors.ExternalError (with what
    to do) when the target refuses or cannot be reached."""

    def apply(self, payload: dict, log: Callable[..., None], push: Any) -> str:
        """Make the target hold `payload`; returns the one-line summary of what changed."""
        ...

    def diff(self, payload: dict) -> list[str]:
        """What applying `payload` would change, as lines (empty: nothing); changes nothing."""
        ...

    def check(self) -> list[str]:
        """Test connection (integrations.push_history): whether the target answers with these settings, as
        lines (the first is the summary); writes nothing. Raises what `apply` raises when it does not."""
        ...


FAILED = "failed"  # TrayOutcome.action of a target that failed (integrations.drain names the others)


@dataclass
class TrayOutcome:
    """What one target did (or would do) for one tray, in words an admin reads.

    `state` and `reason` are what the scheduler shows for the node after the action (read back), `owner`
    who set that reason (Slurm's reason user, a Kubernetes field manager); `sent` the commands or requests
    that changed something (or, in a dry run, would have); `error`/`transient` when it failed."""

    target: str
    kind: str
    host: str
    action: str
    message: str
    changed: bool = False
    dry_run: bool = False
    state: str = ""
    reason: str = ""
    owner: str = ""
    sent: list[str] = field(default_factory=list)
    error: str = ""
    transient: bool = False

    @property
    def ok(self) -> bool:
        return self.action != FAILED

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.target} ({self.kind}) {self.host}: {self.message}"


class TrayDrainer(Protocol):
    """Takes a compute tray out of service on one scheduler and back (integrations.drain). `host` is the
    tray's hostname; `dry_run` says what would be done and does nothing."""

    def drain(
        self,
        host: str,
        reason: str,
        *,
        owner: str = ...,
        fault: str = ...,
        dry_run: bool = ...,
        resume_after_s: int | None = ...,
    ) -> TrayOutcome: ...

    def resume(self, host: str, *, owner: str = ..., dry_run: bool = ...) -> TrayOutcome: ...

    def schedule_maintenance(
        self,
        host: str,
        window_id: int | str,
        start: datetime,
        end: datetime,
        reason: str = ...,
        *,
        dry_run: bool = ...,
    ) -> TrayOutcome: ...

    def end_maintenance(self, host: str, window_id: int | str, *, dry_run: bool = ...) -> TrayOutcome: ...
