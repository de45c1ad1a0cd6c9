from django.db import models
from django.utils.translation import gettext_lazy as _


class SystemModel(models.TextChoices):
    GB200_NVL72 = "gb200_nvl72", _("GB200 NVL72")
    GB300_NVL72 = "gb300_nvl72", _("GB300 NVL72")


class TrayState(models.TextChoices):
    UP = "up", _("Up")
    DRAIN = "drain", _("Drain")
    DOWN = "down", _("Down")
    MAINTENANCE = "maintenance", _("Maintenance")
    # A repeat offender taken out by the health rules: stays out until someone services it (an RMA state).
    NEEDS_SERVICE = "needs_service", _("Needs service")


# Values match inventory.discovery.nvidia_smi.FabricState / GpuHealth (the pure parser's enums).
class FabricState(models.TextChoices):
    COMPLETED = "completed", _("Completed")
    IN_PROGRESS = "in_progress", _("In progress")
    NOT_STARTED = "not_started", _("Not started")
    NOT_SUPPORTED = "not_supported", _("Not supported")


class GpuHealth(models.TextChoices):
    HEALTHY = "healthy", _("Healthy")
    UNHEALTHY = "unhealthy", _("Unhealthy")
    LIMITED_CAPACITY = "limited_capacity", _("Limited capacity")
    NOT_SUPPORTED = "not_supported", _("Not supported")
    UNKNOWN = "unknown", _("Unknown")


class MigMode(models.TextChoices):
    """A GPU's MIG (Multi-Instance GPU) mode as nvidia-smi reports it (inventory.discovery.mig.MigMode)."""

    DISABLED = "disabled", _("Disabled")
    ENABLED = "enabled", _("Enabled")
    NOT_SUPPORTED = "not_supported", _("Not supported")


class PlanStatus(models.TextChoices):
    DRAFT = "draft", _("Draft")
    DRAINING = "draining", _("Draining trays")
    APPLYING = "applying", _("Applying")
    APPLIED = "applied", _("Applied")
    FAILED = "failed", _("Failed")
    CANCELLED = "cancelled", _("Cancelled")


ACTIVE_PLAN_STATES = (PlanStatus.DRAINING, PlanStatus.APPLYING)


class PlanOrigin(models.TextChoices):
    """Who made a partition plan: an admin in the wizard or the API, or the scheduler re-carving idle trays
    for a waiting gang under the rack's RecarvePolicy (integrations.plans.recarve)."""

    ADMIN = "admin", _("Admin")
    SCHEDULER = "scheduler", _("Scheduler")


# --- Health: fault events, the rules that judge them, and the decisions taken (inventory.health) -----------


class HealthSource(models.TextChoices):
    AGENT = "agent", _("Node agent")
    DCGM = "dcgm", _("DCGM")
    ADMIN = "admin", _("Admin")


class HealthKind(models.TextChoices):
    XID = "xid", _("XID")
    RECOVERY_ACTION = "recovery_action", _("Recovery action")
    FABRIC = "fabric", _("Fabric health")
    DCGM_FIELD = "dcgm_field", _("DCGM field")
    CHECK_FAILED = "check_failed", _("Active check failed")
    # Not an event: a tray whose node has not reported for HealthSettings.node_silent_after_s (computed when
    # read, never written); its rule says what the scheduler does (inventory.staleness.silent_policy).
    NODE_SILENT = "node_silent", _("Node silent (stopped reporting)")


class RuleAction(models.TextChoices):
    DRAIN = "drain", _("Drain the tray")
    DEGRADE = "degrade", _("Mark the NVLink partition degraded")
    WARN = "warn", _("Warn only")
    HOLD = "hold", _("Place no new work on the tray")  # node_silent rules only


class ActionKind(models.TextChoices):
    DRAIN = "drain", _("Drained")
    MAINTENANCE = "maintenance", _("Out for maintenance")
    NEEDS_SERVICE = "needs_service", _("Needs service")
    DEGRADE = "degrade", _("Partition degraded")
    RECOVER = "recover", _("Partition no longer degraded")
    WARN = "warn", _("Warning")
    RETURN = "return", _("Returned to service")
    WOULD_DRAIN = "would_drain", _("Would drain (dry run)")
    WOULD_NEEDS_SERVICE = "would_needs_service", _("Would mark needs service (dry run)")
    WOULD_DEGRADE = "would_degrade", _("Would degrade the partition (dry run)")
    WOULD_RETURN = "would_return", _("Would return to service (dry run)")
    BLOCKED = "blocked", _("Blocked by the circuit breaker")
    BREAKER_TRIPPED = "breaker_tripped", _("Circuit breaker tripped")
    NOT_OURS = "not_ours", _("Left as another owner set it")
    # A partition plan's drain of a busy tray and the tray's return when the plan applied or ended unapplied
    # (integrations.plans.service): shown on the tray's timeline, never counted as a fault.
    PLAN_DRAIN = "plan_drain", _("Drained for a partition plan")
    PLAN_RETURN = "plan_return", _("Returned to service after a partition plan")


# Decisions that take a tray out of service (the circuit breaker counts these).
QUARANTINE_ACTIONS = (ActionKind.DRAIN, ActionKind.MAINTENANCE, ActionKind.NEEDS_SERVICE)


class ServiceStatus(models.TextChoices):
    """Where a tray (or one of its GPUs) is in service or RMA tracking (inventory.health.service): an admin
    marks it, with a note; while a mark other than "returned" is open the tray is never returned to service
    (automatically or by hand) until an admin marks it returned."""

    NEEDS_SERVICE = "needs_service", _("Needs service")
    RMA = "rma", _("Sent for RMA")
    RETURNED = "returned", _("Returned from service")


OPEN_SERVICE = (ServiceStatus.NEEDS_SERVICE, ServiceStatus.RMA)


class HealthSeverity(models.TextChoices):
    """How serious an event was, by what the rules made of it (HealthEvent.drains/degrades/warns): the
    health centre's filter and colours."""

    DRAIN = "drain", _("Drains the tray")
    DEGRADE = "degrade", _("Degrades the partition")
    WARN = "warn", _("Warning")
    INFO = "info", _("Recorded only")


# --- The compute fabric above the rack (inventory.fabric; issue 33) -----------------------------------------


class FabricSource(models.TextChoices):
    """Where a fabric's facts came from (inventory.discovery.fabric's readers)."""

    IBNETDISCOVER = "ibnetdiscover", _("ibnetdiscover")
    TOPOGRAPH = "topograph", _("Topograph node labels")
    SITE_FILE = "site_file", _("Site file")


class FabricLevel(models.TextChoices):
    """The levels above the rack, top-down (core.fabric.DEFAULT_LEVELS); the site is implicit."""

    SPINE = "spine", _("Spine group")
    UNIT = "unit", _("Scalable unit")
