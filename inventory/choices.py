from django.db import models


class SystemModel(models.TextChoices):
    GB200_NVL72 = "gb200_nvl72", "GB200 NVL72"
    GB300_NVL72 = "gb300_nvl72", "GB300 NVL72"


class TrayState(models.TextChoices):
    UP = "up", "Up"
    DRAIN = "drain", "Drain"
    DOWN = "down", "Down"
    MAINTENANCE = "maintenance", "Maintenance"


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


class PlanStatus(models.TextChoices):
    DRAFT = "draft", "Draft"
    DRAINING = "draining", "Draining trays"
    APPLYING = "applying", "Applying"
    APPLIED = "applied", "Applied"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


ACTIVE_PLAN_STATES = (PlanStatus.DRAINING, PlanStatus.APPLYING)
