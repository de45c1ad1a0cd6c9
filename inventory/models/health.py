"""Health: fault events, rules, decisions, active check results and the rules' settings (inventory.health
holds the workflows)."""

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from core.text import TextValidator
from inventory.choices import ActionKind, HealthKind, HealthSource, RuleAction, ServiceStatus
from inventory.discovery.faults import FABRIC_REGISTRATION_IN_PROGRESS
from inventory.models.racks import NVLinkPartition
from inventory.models.trays import ComputeTray, Gpu


class HealthSettings(models.Model):
    """How the health rules act: dry run, the circuit breaker, return to service, repeat offenders. One row
    (pk=1), edited by platform admins in the Django admin."""

    dry_run = models.BooleanField(
        default=False,
        help_text=_("Record what the rules would do (would-drain decisions) and change nothing."),
        verbose_name=_("dry run"),
    )
    dedup_window_s = models.PositiveIntegerField(
        default=3600,
        validators=[MinValueValidator(1)],
        help_text=_("Repeats of one fault on one GPU within this many seconds update the event's count."),
        verbose_name=_("dedup window s"),
    )
    breaker_percent = models.PositiveSmallIntegerField(
        default=10,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        # xgettext:no-python-format
        help_text=_("Circuit breaker: at most this % of all trays (at least one) taken out per window."),
        verbose_name=_("breaker percent"),
    )
    breaker_window_s = models.PositiveIntegerField(
        default=3600, validators=[MinValueValidator(1)], verbose_name=_("breaker window s")
    )
    breaker_tripped_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text=_("Set when the breaker tripped; clear it to let the rules drain again."),
        verbose_name=_("breaker tripped at"),
    )
    breaker_note = models.CharField(
        max_length=500, blank=True, validators=[TextValidator()], verbose_name=_("breaker note")
    )
    auto_return = models.BooleanField(
        default=True,
        help_text=_("Return trays the rules drained once they qualify (else only record it)."),
        verbose_name=_("auto return"),
    )
    return_after_s = models.PositiveIntegerField(
        default=1800,
        help_text=_("A drained tray's agent must report it healthy for this many seconds."),
        verbose_name=_("return after s"),
    )
    return_check = models.CharField(
        max_length=128,
        blank=True,
        help_text=_(
            'Active check that must pass after the fault before return (e.g. "dcgmi diag -r 2"); empty: none '
            "needed."
        ),
        verbose_name=_("return check"),
    )
    repeat_faults = models.PositiveSmallIntegerField(
        default=3,
        validators=[MinValueValidator(1)],
        help_text=_("A tray drained this many times within repeat_days needs service instead."),
        verbose_name=_("repeat faults"),
    )
    repeat_days = models.PositiveSmallIntegerField(
        default=7, validators=[MinValueValidator(1)], verbose_name=_("repeat days")
    )
    node_silent_after_s = models.PositiveIntegerField(
        default=300,
        validators=[MinValueValidator(30)],
        help_text=_(
            "A tray whose node has reported before but not for this many seconds is stale (node "
            "silent); the node_silent health rule says what the scheduler does with it."
        ),
    )

    class Meta:
        verbose_name = _("health settings")
        verbose_name_plural = _("health settings")
        constraints = [
            models.CheckConstraint(condition=Q(pk=1), name="%(app_label)s_%(class)s_singleton"),
            models.CheckConstraint(
                condition=Q(breaker_percent__gte=1, breaker_percent__lte=100),
                name="%(app_label)s_%(class)s_breaker_percent_range",
            ),
        ]

    def __str__(self):
        return gettext("Health settings")  # audit records keep it in English (core.audit)

    @classmethod
    def load(cls) -> "HealthSettings":
        return cls.objects.get_or_create(pk=1)[0]


class HealthRule(models.Model):
    """Which health events drain a tray, degrade its NVLink partition, or only warn. Every enabled rule that
    matches an event acts; seeded with defaults from NVIDIA's XID catalog (migration 0007)."""

    name = models.CharField(max_length=100, validators=[TextValidator()], verbose_name=_("name"))
    enabled = models.BooleanField(default=True, verbose_name=_("enabled"))
    kind = models.CharField(
        max_length=20, choices=HealthKind.choices, help_text=_("What the event is."), verbose_name=_("kind")
    )
    xid_first = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(999)],
        verbose_name=_("xid first"),
    )
    xid_last = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(999)],
        verbose_name=_("xid last"),
    )
    code = models.CharField(
        max_length=128,
        blank=True,
        help_text=_(
            "Recovery action (GPU_RESET ...), fabric flag (ROUTE_UNHEALTHY ...), DCGM field or check "
            "name; empty matches any."
        ),
        verbose_name=_("code"),
    )
    threshold = models.FloatField(
        null=True,
        blank=True,
        help_text=_("DCGM fields: the event's value must be at least this."),
        verbose_name=_("threshold"),
    )
    action = models.CharField(max_length=16, choices=RuleAction.choices, verbose_name=_("action"))
    note = models.CharField(
        max_length=300,
        blank=True,
        validators=[TextValidator()],
        help_text=_("Why; NVIDIA's immediate action."),
        verbose_name=_("note"),
    )

    class Meta:
        verbose_name = _("health rule")
        verbose_name_plural = _("health rules")
        ordering = ["kind", "xid_first", "code", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["name"], name="%(app_label)s_%(class)s_unique_name"),
            models.CheckConstraint(
                condition=~Q(kind=HealthKind.XID) | Q(xid_first__isnull=False, xid_last__isnull=False),
                name="%(app_label)s_%(class)s_xid_range_set",
                violation_error_message=_("An XID rule needs its first and last XID."),
            ),
            models.CheckConstraint(
                condition=Q(xid_first__isnull=True) | Q(xid_last__gte=models.F("xid_first")),
                name="%(app_label)s_%(class)s_xid_range_order",
                violation_error_message=_("The last XID cannot come before the first."),
            ),
            models.CheckConstraint(
                condition=Q(kind=HealthKind.NODE_SILENT, action__in=[RuleAction.HOLD, RuleAction.WARN])
                | (~Q(kind=HealthKind.NODE_SILENT) & ~Q(action=RuleAction.HOLD)),
                name="%(app_label)s_%(class)s_node_silent_actions",
                violation_error_message=_(
                    "A node silent rule either holds the tray (places no new work) or "
                    "only warns; hold is for node silent rules only."
                ),
            ),
        ]

    def __str__(self):
        return self.name

    def matches(self, kind: str, xid: int | None, code: str, value: float | None) -> bool:
        if not self.enabled or kind != self.kind:
            return False
        if self.kind == HealthKind.XID:
            return xid is not None and self.xid_first <= xid <= self.xid_last
        if self.code and self.code != code:
            return False
        if self.threshold is not None:
            return value is not None and value >= self.threshold
        return True


class TrayRowQuerySet(models.QuerySet):
    """Rows about a tray (its events, decisions, checks, service steps)."""

    def visible_to(self, user):
        """Whoever may see the tray sees its health history (the inventory is shared with signed-in users)."""
        return self.filter(tray__in=ComputeTray.objects.visible_to(user))


class HealthEvent(models.Model):
    """One fault on one tray (and GPU, when known): repeats within the settings' window raise `count` and
    `last_seen` instead of adding rows. What the rules made of it is in `drains`/`degrades`/`warns`."""

    tray = models.ForeignKey(
        ComputeTray, on_delete=models.CASCADE, related_name="health_events", verbose_name=_("tray")
    )
    gpu = models.ForeignKey(
        Gpu,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="health_events",
        verbose_name=_("gpu"),
    )
    gpu_uuid = models.CharField(
        max_length=64, blank=True, help_text=_("Kept if the GPU row goes."), verbose_name=_("gpu uuid")
    )
    source = models.CharField(max_length=16, choices=HealthSource.choices, verbose_name=_("source"))
    kind = models.CharField(max_length=20, choices=HealthKind.choices, verbose_name=_("kind"))
    code = models.CharField(
        max_length=128,
        help_text=_("XID number, recovery action, fabric flag, DCGM field or check name."),
        verbose_name=_("code"),
    )
    xid = models.PositiveSmallIntegerField(null=True, blank=True, verbose_name=_("xid"))
    mnemonic = models.CharField(max_length=64, blank=True, verbose_name=_("mnemonic"))
    value = models.FloatField(
        null=True, blank=True, help_text=_("DCGM field value, check exit status."), verbose_name=_("value")
    )
    message = models.TextField(
        blank=True, help_text=_("The kernel line or the check's output tail."), verbose_name=_("message")
    )
    first_seen = models.DateTimeField(verbose_name=_("first seen"))
    last_seen = models.DateTimeField(verbose_name=_("last seen"))
    count = models.PositiveIntegerField(default=1, verbose_name=_("count"))
    drains = models.BooleanField(default=False, verbose_name=_("drains"))
    degrades = models.BooleanField(default=False, verbose_name=_("degrades"))
    warns = models.BooleanField(default=False, verbose_name=_("warns"))

    objects = TrayRowQuerySet.as_manager()

    class Meta:
        verbose_name = _("health event")
        verbose_name_plural = _("health events")
        ordering = ["-last_seen", "-pk"]
        constraints = [
            models.CheckConstraint(condition=Q(count__gte=1), name="%(app_label)s_%(class)s_count_positive"),
            models.CheckConstraint(
                condition=Q(last_seen__gte=models.F("first_seen")),
                name="%(app_label)s_%(class)s_seen_order",
            ),
        ]
        indexes = [
            models.Index(
                fields=["tray", "kind", "code", "gpu_uuid", "last_seen"], name="inventory_health_dedup"
            ),
            models.Index(fields=["gpu", "last_seen"], name="inventory_health_gpu"),
            # The health centre's fleet list, newest first, a page at a time (keyset on last_seen, pk).
            models.Index(fields=["-last_seen", "-id"], name="inventory_health_seen"),
        ]

    def __str__(self):
        return f"{self.title} on {self.gpu_uuid or self.tray_id}"

    @property
    def title(self) -> str:
        if self.kind == HealthKind.XID:
            return f"XID {self.xid}" + (f" ({self.mnemonic})" if self.mnemonic else "")
        if self.kind == HealthKind.DCGM_FIELD:
            return f"{self.code} = {self.value:g}" if self.value is not None else self.code
        if self.kind == HealthKind.CHECK_FAILED:
            status = f" (exit status {self.value:g})" if self.value is not None else ""
            return f"check {self.code} failed{status}"
        if self.kind == HealthKind.RECOVERY_ACTION:
            return f"recovery action {self.code}"
        if self.code == FABRIC_REGISTRATION_IN_PROGRESS:
            return "fabric registration in progress"
        return f"fabric {self.code}"

    @property
    def shown_title(self) -> str:
        """`title` in the viewer's language, for the pages (`title` itself goes into reasons and logs)."""
        if self.kind == HealthKind.XID:
            return self.title
        if self.kind == HealthKind.DCGM_FIELD:
            return self.title
        if self.kind == HealthKind.CHECK_FAILED:
            if self.value is not None:
                return gettext("check %(code)s failed (exit status %(status)s)") % {
                    "code": self.code,
                    "status": f"{self.value:g}",
                }
            return gettext("check %(code)s failed") % {"code": self.code}
        if self.kind == HealthKind.RECOVERY_ACTION:
            return gettext("recovery action %(code)s") % {"code": self.code}
        if self.code == FABRIC_REGISTRATION_IN_PROGRESS:
            return gettext("fabric registration in progress")
        return gettext("fabric %(code)s") % {"code": self.code}


class HealthAction(models.Model):
    """A decision the health rules (or an admin) took about a tray, as data: why, when, what changed."""

    tray = models.ForeignKey(
        ComputeTray, on_delete=models.CASCADE, related_name="health_actions", verbose_name=_("tray")
    )
    kind = models.CharField(max_length=24, choices=ActionKind.choices, verbose_name=_("kind"))
    event = models.ForeignKey(
        HealthEvent,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="actions",
        verbose_name=_("event"),
    )
    rule = models.ForeignKey(
        HealthRule, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", verbose_name=_("rule")
    )
    rule_name = models.CharField(max_length=100, blank=True, verbose_name=_("rule name"))
    partition = models.ForeignKey(
        NVLinkPartition,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("partition"),
    )
    dry_run = models.BooleanField(default=False, verbose_name=_("dry run"))
    reason = models.CharField(max_length=500, verbose_name=_("reason"))
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("actor"),
    )
    created_at = models.DateTimeField(default=timezone.now, verbose_name=_("created at"))

    objects = TrayRowQuerySet.as_manager()

    class Meta:
        verbose_name = _("health action")
        verbose_name_plural = _("health actions")
        ordering = ["-created_at", "-pk"]
        indexes = [
            models.Index(fields=["tray", "created_at"], name="inventory_healthaction_tray"),
            models.Index(fields=["kind", "created_at"], name="inventory_healthaction_kind"),
        ]

    def __str__(self):
        return f"{self.get_kind_display()}: {self.tray_id}"


class HealthCheckResult(models.Model):
    """An active check the node agent ran (e.g. `dcgmi diag -r 2`): exit status, output tail, when."""

    tray = models.ForeignKey(
        ComputeTray, on_delete=models.CASCADE, related_name="health_checks", verbose_name=_("tray")
    )
    name = models.CharField(max_length=128, verbose_name=_("name"))
    exit_status = models.SmallIntegerField(verbose_name=_("exit status"))
    output = models.TextField(blank=True, verbose_name=_("output"))
    started = models.DateTimeField(verbose_name=_("started"))
    seconds = models.FloatField(verbose_name=_("seconds"))
    received_at = models.DateTimeField(default=timezone.now, verbose_name=_("received at"))

    objects = TrayRowQuerySet.as_manager()

    class Meta:
        verbose_name = _("health check result")
        verbose_name_plural = _("health check results")
        ordering = ["-started", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["tray", "name", "started"], name="%(app_label)s_%(class)s_unique_run"
            ),
        ]

    def __str__(self):
        return f"{self.name} on {self.tray_id}: exit {self.exit_status}"

    @property
    def passed(self) -> bool:
        return self.exit_status == 0


class ServiceRecord(models.Model):
    """One step of a tray's (or one of its GPUs') service or RMA tracking, as an admin recorded it: marked
    needing service, sent for RMA, returned. Rows are only added; the newest row of a tray is its current
    mark (inventory.health.service), and a mark other than "returned" keeps the tray out of service."""

    tray = models.ForeignKey(ComputeTray, on_delete=models.CASCADE, related_name="service_records")
    gpu = models.ForeignKey(
        Gpu, on_delete=models.SET_NULL, null=True, blank=True, related_name="service_records"
    )
    gpu_uuid = models.CharField(max_length=64, blank=True, help_text=_("Kept if the GPU row goes."))
    status = models.CharField(max_length=16, choices=ServiceStatus.choices)
    note = models.CharField(
        max_length=300,
        blank=True,
        validators=[TextValidator()],
        help_text=_("What is wrong, the RMA number, what was done."),
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = TrayRowQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [models.Index(fields=["tray", "created_at"], name="inventory_service_tray")]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=ServiceStatus.values),
                name="%(app_label)s_%(class)s_status_known",
            ),
        ]

    def __str__(self):
        return f"{self.get_status_display()}: {self.gpu_uuid or self.tray_id}"
