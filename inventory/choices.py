from django.db import models


class SystemModel(models.TextChoices):
    GB200_NVL72 = "gb200_nvl72", "GB200 NVL72"
    GB300_NVL72 = "gb300_nvl72", "GB300 NVL72"


class TrayState(models.TextChoices):
    UP = "up", "Up"
    DRAIN = "drain", "Drain"
    DOWN = "down", "Down"
    MAINTENANCE = "maintenance", "Maintenance"
    # A repeat offender taken out by the health rules: stays out until someone services it (an RMA state).
    NEEDS_SERVICE = "needs_service", "Needs service"


# Values match inventory.discovery.nvidia_smi.FabricState / GpuHealth (the pure parser's enums).
class FabricState(models.TextChoices):
    COMPLETED = "completed", "Completed"
    IN_PROGRESS = "in_progress", "In progress"
    NOT_STARTED = "not_started", "Not started"
    NOT_SUPPORTED = "not_supported", "Not supported"


class GpuHealth(models.TextChoices):
    HEALTHY = "healthy", "Healthy"
    UNHEALTHY = "unhealthy", "Unhealthy"
    LIMITED_CAPACITY = "limited_capacity", "Limited capacity"
    NOT_SUPPORTED = "not_supported", "Not supported"
    UNKNOWN = "unknown", "Unknown"


class MigMode(models.TextChoices):
    """A GPU's MIG (Multi-Instance GPU) mode as nvidia-smi reports it (inventory.discovery.mig.MigMode)."""

    DISABLED = "disabled", "Disabled"
    ENABLED = "enabled", "Enabled"
    NOT_SUPPORTED = "not_supported", "Not supported"


class PlanStatus(models.TextChoices):
    DRAFT = "draft", "Draft"
    DRAINING = "draining", "Draining trays"
    APPLYING = "applying", "Applying"
    APPLIED = "applied", "Applied"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


ACTIVE_PLAN_STATES = (PlanStatus.DRAINING, PlanStatus.APPLYING)


class PlanOrigin(models.TextChoices):
    """Who made a partition plan: an admin in the wizard or the API, or the scheduler re-carving idle trays
    for a waiting gang under the rack's RecarvePolicy (integrations.plans.recarve)."""

    ADMIN = "admin", "Admin"
    SCHEDULER = "scheduler", "Scheduler"


# --- Health: fault events, the rules that judge them, and the decisions taken (inventory.health) -----------


class HealthSource(models.TextChoices):
    AGENT = "agent", "Node agent"
    DCGM = "dcgm", "DCGM"
    ADMIN = "admin", "Admin"


class HealthKind(models.TextChoices):
    XID = "xid", "XID"
    RECOVERY_ACTION = "recovery_action", "Recovery action"
    FABRIC = "fabric", "Fabric health"
    DCGM_FIELD = "dcgm_field", "DCGM field"
    CHECK_FAILED = "check_failed", "Active check failed"
    # Not an event: a tray whose node has not reported for HealthSettings.node_silent_after_s (computed when
    # read, never written); its rule says what the scheduler does (inventory.staleness.silent_policy).
    NODE_SILENT = "node_silent", "Node silent (stopped reporting)"


class RuleAction(models.TextChoices):
    DRAIN = "drain", "Drain the tray"
    DEGRADE = "degrade", "Mark the NVLink partition degraded"
    WARN = "warn", "Warn only"
    HOLD = "hold", "Place no new work on the tray"  # node_silent rules only


class ActionKind(models.TextChoices):
    DRAIN = "drain", "Drained"
    MAINTENANCE = "maintenance", "Out for maintenance"
    NEEDS_SERVICE = "needs_service", "Needs service"
    DEGRADE = "degrade", "Partition degraded"
    RECOVER = "recover", "Partition no longer degraded"
    WARN = "warn", "Warning"
    RETURN = "return", "Returned to service"
    WOULD_DRAIN = "would_drain", "Would drain (dry run)"
    WOULD_NEEDS_SERVICE = "would_needs_service", "Would mark needs service (dry run)"
    WOULD_DEGRADE = "would_degrade", "Would degrade the partition (dry run)"
    WOULD_RETURN = "would_return", "Would return to service (dry run)"
    BLOCKED = "blocked", "Blocked by the circuit breaker"
    BREAKER_TRIPPED = "breaker_tripped", "Circuit breaker tripped"
    NOT_OURS = "not_ours", "Left as another owner set it"


# Decisions that take a tray out of service (the circuit breaker counts these).
QUARANTINE_ACTIONS = (ActionKind.DRAIN, ActionKind.MAINTENANCE, ActionKind.NEEDS_SERVICE)


class ServiceStatus(models.TextChoices):
    """Where a tray (or one of its GPUs) is in service or RMA tracking (inventory.health.service): an admin
    marks it, with a note; while a mark other than "returned" is open the tray is never returned to service
    (automatically or by hand) until an admin marks it returned."""

    NEEDS_SERVICE = "needs_service", "Needs service"
    RMA = "rma", "Sent for RMA"
    RETURNED = "returned", "Returned from service"


OPEN_SERVICE = (ServiceStatus.NEEDS_SERVICE, ServiceStatus.RMA)


class HealthSeverity(models.TextChoices):
    """How serious an event was, by what the rules made of it (HealthEvent.drains/degrades/warns): the
    health centre's filter and colours."""

    DRAIN = "drain", "Drains the tray"
    DEGRADE = "degrade", "Degrades the partition"
    WARN = "warn", "Warning"
    INFO = "info", "Recorded only"
