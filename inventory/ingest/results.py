"""What reconciling a node report answers: its result, or why it was refused (an unknown host, GPUs outside
the reporting token's scope)."""

from dataclasses import dataclass, field

from core.errors import RackplaneError
from inventory.discovery.nvidia_smi import NodeReport
from inventory.health.events import HealthOutcome
from inventory.models import AgentToken


class UnknownHost(RackplaneError, LookupError):
    """The report is for a host the inventory does not have. The API answers it 400, `{"host": [message]}`."""

    client_error = True
    field = "host"


# How many refused GPUs an OutOfScope message names (all are in `offenders` and in the audit event).
NAMED_OFFENDERS = 10


class OutOfScope(PermissionError):
    """A scoped agent token's report lists GPUs that are on, or were last on, a tray outside its scope.

    `offenders`: [{"gpu", "tray", "rack", "where"}], `where` being "on" (the GPU sits on that tray),
    "detached from" (it is on no tray and left that one) or "unknown" (on no tray, and the tray it left is
    not known: detached before Rackplane remembered it, so only a fleet token or an operator places it).
    """

    def __init__(self, token: AgentToken, host: str, offenders: list[dict]):
        self.token, self.host, self.offenders = token, host, offenders
        super().__init__(self.message)

    @property
    def message(self) -> str:
        named = []
        for offender in self.offenders[:NAMED_OFFENDERS]:
            gpu, tray, rack = offender["gpu"], offender["tray"], offender["rack"]
            if offender["where"] == "on":
                named.append(f"GPU {gpu} belongs to tray {tray} of rack {rack}")
            elif offender["where"] == "detached from":
                named.append(f"GPU {gpu} was detached from tray {tray} of rack {rack}")
            else:
                named.append(f"GPU {gpu} is on no tray and the tray it left is not known")
        more = len(self.offenders) - NAMED_OFFENDERS
        if more > 0:
            named.append(f"and {more} more")
        return (
            f"{'; '.join(named)}; this token speaks for {self.token.scope}. Nothing of the report for "
            f"{self.host} was applied. A GPU that really moved is placed by an operator (a fleet token's "
            "report, or the inventory's admin): see docs/security.md."
        )

    def as_detail(self) -> dict:
        """What the audit event records (core.audit.record_refused)."""
        return {
            "token": self.token.prefix,
            "scope": self.token.scope,
            "host": self.host,
            "refused_gpus": self.offenders,
        }


@dataclass
class IngestResult:
    report: NodeReport
    applied: bool
    drift: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    learned_cluster_uuid: str | None = None
    health: HealthOutcome | None = None
    contested: int = 0  # GPUs another tray still holds (not moved)
    report_sha256: str = ""

    def changes(self) -> dict:
        return {
            "applied": self.applied,
            "drift": self.drift,
            "created_gpus": self.created,
            "moved_gpus": self.moved,
            "removed_gpus": self.removed,
            "learned_cluster_uuid": self.learned_cluster_uuid,
            "health": self.health.as_dict() if self.health is not None else None,
            "unchanged": False,
            "report_sha256": self.report_sha256,
        }


HEALTH_ONLY = "health"  # the format of a report that carries no GPU listing (nvidia-smi failed on the node)
