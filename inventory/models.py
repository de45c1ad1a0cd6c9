"""The fabric inventory: racks (NVLink domains), compute trays, GPUs and NVLink partitions.

A rack is one NVLink domain of 18 compute trays x 4 GPUs. It is carved into NVLink partitions at tray
granularity; the default partition (clique ID 32766) covers the whole rack. What the inventory *intends*
(a tray's partition) and what the nodes *report* (each GPU's cluster UUID and clique ID) are kept side by
side so drift between them is visible.
"""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q, Value
from django.db.models.functions import Concat, Lower, Substr
from django.utils import timezone

from core.access import is_admin
from core.hardware import DEFAULT_CLIQUE_ID, GPUS_PER_TRAY, MAX_CLIQUE_ID, TRAYS_PER_RACK
from core.text import TextValidator
from inventory import names
from inventory.choices import (
    ACTIVE_PLAN_STATES,
    ActionKind,
    FabricState,
    GpuHealth,
    HealthKind,
    HealthSource,
    PlanStatus,
    RuleAction,
    SystemModel,
    TrayState,
)

# --- names every consumer takes (inventory.names; issue 26) ----------------------------------------------
# A name Slurm or Kubernetes cannot take is refused at save, on its field, rather than at render time, where
# one bad row stops the push of every target. The same patterns are the named check constraints below.


def _refuse(why: str | None) -> None:
    if why is not None:
        raise ValidationError(why, code="invalid_name")


def validate_rack_name(value):
    """A rack's name: a DNS-1123 label (inventory.names.rack_name_error)."""
    _refuse(names.rack_name_error(value))


def validate_hostname(value):
    """A compute tray's hostname: a DNS-1123 subdomain of at most 63 characters (inventory.names)."""
    _refuse(names.hostname_error(value))


def validate_partition_name(value):
    """An NVLink partition's name: a DNS-1123 label of at most 31 characters (inventory.names)."""
    _refuse(names.partition_name_error(value))


def validate_service_tier(value):
    """A service tier: empty, `gpu` or `gpu_<name>`, never a department's Slurm partition (inventory.names)"""
    _refuse(names.service_tier_error(value))


class RackQuerySet(models.QuerySet):
    def visible_to(self, user):
        # The physical inventory is shared: every signed-in user may read it; changes are admin-only.
        return self if user.is_authenticated else self.none()


class Rack(models.Model):
    """One NVL72 rack: a single NVLink domain whose GPUs all report the same cluster UUID."""

    name = models.CharField(
        max_length=64,
        validators=[TextValidator(), validate_rack_name],
        help_text=f"Up to {names.RACK_NAME_MAX} lower-case letters, digits and '-', starting and ending with "
        "a letter or digit (a Kubernetes label value and part of Slurm block names).",
    )
    system_model = models.CharField(
        max_length=32, choices=SystemModel.choices, default=SystemModel.GB200_NVL72
    )
    cluster_uuid = models.UUIDField(
        null=True, blank=True, help_text="NVLink domain cluster UUID; learned from discovery when empty."
    )
    location = models.CharField(
        max_length=128, blank=True, validators=[TextValidator()], help_text="Site, hall, row and position."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = RackQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["name"], name="%(app_label)s_%(class)s_unique_name"),
            models.UniqueConstraint(
                fields=["cluster_uuid"], name="%(app_label)s_%(class)s_unique_cluster_uuid"
            ),
            models.CheckConstraint(
                condition=Q(name__regex=names.DNS_LABEL_PATTERN),
                name="%(app_label)s_%(class)s_name_form",
                violation_error_message="A rack's name is lower-case letters, digits and '-', starting and "
                "ending with a letter or digit.",
            ),
        ]

    def __str__(self):
        return self.name


class NVLinkPartitionQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self if user.is_authenticated else self.none()


class NVLinkPartition(models.Model):
    """A set of trays of one rack whose GPUs share a clique ID (one NVLink partition)."""

    rack = models.ForeignKey(Rack, on_delete=models.CASCADE, related_name="partitions")
    clique_id = models.PositiveIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(MAX_CLIQUE_ID)]
    )
    name = models.CharField(
        max_length=64,
        validators=[TextValidator(), validate_partition_name],
        help_text=f"Up to {names.PARTITION_NAME_MAX} lower-case letters, digits and '-', starting and ending "
        "with a letter or digit.",
    )
    service_tier = models.CharField(
        max_length=64,
        blank=True,
        validators=[TextValidator(), validate_service_tier],
        help_text="Slurm partition serving it when it is dedicated to no department: 'gpu_<name>' (e.g. "
        "gpu_interactive); empty: the shared partition 'gpu'. A dedicated partition is always served by "
        "its department's Slurm partition.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # An NVLink/fabric fault on one tray affects every tray of the partition (inventory.health).
    degraded_reason = models.CharField(
        max_length=255, blank=True, help_text="Why the health rules marked it degraded; empty when not."
    )
    degraded_since = models.DateTimeField(null=True, blank=True)

    objects = NVLinkPartitionQuerySet.as_manager()

    class Meta:
        ordering = ["rack__name", "clique_id"]
        verbose_name = "NVLink partition"
        constraints = [
            models.UniqueConstraint(
                fields=["rack", "clique_id"], name="%(app_label)s_%(class)s_unique_clique"
            ),
            models.UniqueConstraint(fields=["rack", "name"], name="%(app_label)s_%(class)s_unique_name"),
            # Target of the trays' composite foreign key (partition, rack): see migration 0002.
            models.UniqueConstraint(fields=["id", "rack"], name="%(app_label)s_%(class)s_unique_id_rack"),
            models.CheckConstraint(
                condition=Q(clique_id__gte=1, clique_id__lte=MAX_CLIQUE_ID),
                name="%(app_label)s_%(class)s_clique_id_range",
            ),
            models.CheckConstraint(
                condition=Q(name__regex=names.DNS_LABEL_PATTERN),
                name="%(app_label)s_%(class)s_name_form",
                violation_error_message="An NVLink partition's name is lower-case letters, digits and '-', "
                "starting and ending with a letter or digit.",
            ),
            models.CheckConstraint(
                condition=Q(service_tier="") | Q(service_tier__regex=names.TIER_PATTERN),
                name="%(app_label)s_%(class)s_service_tier_form",
                violation_error_message="A service tier is empty, 'gpu' or 'gpu_<name>'.",
            ),
        ]

    def __str__(self):
        return f"{self.rack.name} {self.name}"

    @property
    def is_default(self) -> bool:
        return self.clique_id == DEFAULT_CLIQUE_ID


class ComputeTrayQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self if user.is_authenticated else self.none()


class ComputeTray(models.Model):
    """One compute tray (a node: 4 GPUs, 2 Grace CPUs) in a rack slot."""

    rack = models.ForeignKey(Rack, on_delete=models.CASCADE, related_name="trays")
    slot = models.PositiveSmallIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(TRAYS_PER_RACK)]
    )
    hostname = models.CharField(
        max_length=128,
        validators=[validate_hostname],
        help_text=f"Up to {names.HOSTNAME_MAX} lower-case letters, digits, '-' and '.' (a DNS name): the "
        "Kubernetes node's name and the Slurm NodeName.",
    )
    state = models.CharField(max_length=16, choices=TrayState.choices, default=TrayState.UP)
    state_reason = models.CharField(max_length=255, blank=True)
    ib_port_guids = models.JSONField(
        default=list, blank=True, help_text='InfiniBand port GUIDs, "0x" + 16 hex.'
    )
    # The partition the inventory intends this tray to be in. One foreign key: a tray can never be in two
    # partitions; the composite foreign key (partition, rack) added in migration 0002 keeps it in its rack.
    partition = models.ForeignKey(
        NVLinkPartition, on_delete=models.PROTECT, null=True, blank=True, related_name="trays"
    )
    # What the node last reported, as "<cluster_uuid>.<clique_id>" (GPU Feature Discovery rule); kept at
    # the last good value when a later report has problems.
    reported_clique = models.CharField(max_length=64, blank=True)
    fabric_problems = models.JSONField(default=list, blank=True)
    last_report = models.JSONField(null=True, blank=True)
    last_report_at = models.DateTimeField(null=True, blank=True)
    # Health (inventory.health): since when the agent's reports have shown nothing wrong (None: the last one
    # did, or none came since a fault), and the node agent that reports for it.
    healthy_since = models.DateTimeField(null=True, blank=True)
    agent_version = models.CharField(max_length=64, blank=True)
    agent_interval_s = models.PositiveIntegerField(null=True, blank=True)
    # sha256 of (the canonical hash of the last reconciled report, what the inventory intended then): a
    # report with the same hash is a heartbeat (inventory.services.heartbeat); empty while the tray has
    # open health business (every report is then reconciled in full).
    report_key = models.CharField(max_length=64, blank=True, editable=False)
    # What each scheduler (Slurm, Kubernetes target) says about the tray after Rackplane last made it agree
    # with `state` (integrations.trays): [{target, kind, action, message, state, reason, owner, error}], and
    # when. Derived data, written without signals or audit.
    scheduler_state = models.JSONField(default=list, blank=True)
    scheduler_state_at = models.DateTimeField(null=True, blank=True)

    objects = ComputeTrayQuerySet.as_manager()

    class Meta:
        ordering = ["rack__name", "slot"]
        verbose_name = "compute tray"
        permissions = [("report_discovery", "Can post fabric discovery reports (node agents)")]
        constraints = [
            models.UniqueConstraint(fields=["rack", "slot"], name="%(app_label)s_%(class)s_unique_slot"),
            models.UniqueConstraint(fields=["hostname"], name="%(app_label)s_%(class)s_unique_hostname"),
            models.CheckConstraint(
                condition=Q(hostname__regex=names.HOSTNAME_PATTERN),
                name="%(app_label)s_%(class)s_hostname_form",
                violation_error_message="A tray's hostname is lower-case letters, digits, '-' and '.' (a "
                "DNS name).",
            ),
            models.CheckConstraint(
                condition=Q(slot__gte=1, slot__lte=TRAYS_PER_RACK), name="%(app_label)s_%(class)s_slot_range"
            ),
            models.CheckConstraint(
                condition=Q(state=TrayState.UP) | ~Q(state_reason=""),
                name="%(app_label)s_%(class)s_reason_unless_up",
                violation_error_message="A tray that is not up needs a reason.",
            ),
        ]

    def __str__(self):
        return self.hostname


class GpuQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self if user.is_authenticated else self.none()


class Gpu(models.Model):
    """One GPU. `tray` is empty for a GPU that was removed from its tray (kept, not forgotten)."""

    tray = models.ForeignKey(
        ComputeTray, on_delete=models.PROTECT, null=True, blank=True, related_name="gpus"
    )
    index = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MinValueValidator(0), MaxValueValidator(GPUS_PER_TRAY - 1)]
    )
    uuid = models.CharField(max_length=64, help_text='As nvidia-smi prints it: "GPU-..."')
    serial = models.CharField(max_length=64, blank=True)
    product = models.CharField(max_length=64, blank=True)
    memory_mib = models.PositiveIntegerField(null=True, blank=True)
    health = models.CharField(max_length=20, choices=GpuHealth.choices, default=GpuHealth.UNKNOWN)
    fabric_state = models.CharField(max_length=16, choices=FabricState.choices, blank=True)
    fabric_status = models.CharField(max_length=64, blank=True)
    reported_cluster_uuid = models.UUIDField(null=True, blank=True)
    reported_clique_id = models.PositiveIntegerField(null=True, blank=True)
    last_report_at = models.DateTimeField(null=True, blank=True)
    # While the GPU is on no tray: the tray discovery detached it from. A rack's or a host's agent token may
    # put a GPU back only where its scope covers the tray it left (inventory.services.ReportScope), so a
    # node cannot claim a GPU that fell off another rack's bus.
    detached_from = models.ForeignKey(
        ComputeTray,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="The tray the GPU was last on, while it is on none (set by discovery).",
    )

    objects = GpuQuerySet.as_manager()

    class Meta:
        ordering = ["tray__rack__name", "tray__slot", "index"]
        verbose_name = "GPU"
        constraints = [
            models.UniqueConstraint(fields=["uuid"], name="%(app_label)s_%(class)s_unique_uuid"),  # lookups
            # One GPU, one row, whatever case a report used: unique ignoring case, and stored canonical
            # ("GPU-" + lower-case hex, as nvidia-smi prints it; inventory.discovery normalises reports).
            models.UniqueConstraint(Lower("uuid"), name="%(app_label)s_%(class)s_unique_uuid_ci"),
            models.CheckConstraint(
                condition=Q(uuid=Concat(Value("GPU-"), Lower(Substr("uuid", 5)))),
                name="%(app_label)s_%(class)s_uuid_lower_case",
            ),
            models.UniqueConstraint(fields=["tray", "index"], name="%(app_label)s_%(class)s_unique_index"),
            models.CheckConstraint(
                condition=Q(index__isnull=True) | Q(index__gte=0, index__lt=GPUS_PER_TRAY),
                name="%(app_label)s_%(class)s_index_range",
            ),
            models.CheckConstraint(
                condition=Q(tray__isnull=True, index__isnull=True)
                | Q(tray__isnull=False, index__isnull=False),
                name="%(app_label)s_%(class)s_index_iff_tray",
            ),
            models.CheckConstraint(
                condition=Q(tray__isnull=True) | Q(detached_from__isnull=True),
                name="%(app_label)s_%(class)s_detached_only_off_tray",
            ),
        ]
        indexes = [models.Index(fields=["health"], name="inventory_gpu_health_idx")]

    def __str__(self):
        return self.uuid


class PartitionPlanQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Plans are platform admins' work: they see all of them, nobody else any."""
        return self if is_admin(user) else self.none()


class PartitionPlan(models.Model):
    """A new NVLink partition layout for one rack, previewed, then applied by an admin.

    `layout` is a list of {"name", "slots", "clique_id", "department", "slurm_partition"}. `base_layout` is
    the rack's layout when the plan was checked: applying refuses a plan whose rack changed since.
    """

    rack = models.ForeignKey(Rack, on_delete=models.CASCADE, related_name="plans")
    layout = models.JSONField()
    base_layout = models.CharField(max_length=2000)
    drain_first = models.BooleanField(default=False)
    status = models.CharField(max_length=16, choices=PlanStatus.choices, default=PlanStatus.DRAFT)
    findings = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    applied_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = PartitionPlanQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            # Two admins applying plans to one rack: the database lets only one be in flight.
            models.UniqueConstraint(
                fields=["rack"],
                condition=Q(status__in=ACTIVE_PLAN_STATES),
                name="%(app_label)s_%(class)s_one_active_per_rack",
                violation_error_message="Another plan is already being applied to this rack.",
            ),
        ]

    def __str__(self):
        return f"Plan #{self.pk} for {self.rack.name}"

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_PLAN_STATES


class AgentTokenQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Agent tokens are platform admins' business: they see all of them, nobody else any."""
        return self if is_admin(user) else self.none()

    def active(self):
        return self.filter(revoked_at__isnull=True)


class AgentToken(models.Model):
    """A node agent's credential, bound to the hosts it may report for: one rack (all its trays) or one host.

    Only a SHA-256 hash of the secret is stored (inventory.agent_tokens makes and checks it); `prefix`, the
    secret's first characters, tells tokens apart on the page and in logs. A revoked token is kept, with
    when, so the page shows what was used until then.
    """

    prefix = models.CharField(max_length=16, help_text='The secret\'s first characters ("rpa_" + 8).')
    secret_hash = models.CharField(max_length=64, help_text="SHA-256 of the secret, hex.")
    rack = models.ForeignKey(
        Rack,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="agent_tokens",
        help_text="Scope: every compute tray of this rack.",
    )
    hostname = models.CharField(max_length=128, blank=True, help_text="Scope: this one compute tray.")
    description = models.CharField(max_length=200, blank=True, validators=[TextValidator()])
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = AgentTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.UniqueConstraint(
                fields=["secret_hash"], name="%(app_label)s_%(class)s_unique_secret_hash"
            ),
            models.CheckConstraint(
                condition=Q(rack__isnull=False, hostname="") | Q(rack__isnull=True) & ~Q(hostname=""),
                name="%(app_label)s_%(class)s_one_scope",
                violation_error_message="An agent token is for one rack or for one host, not both or none.",
            ),
        ]

    def __str__(self):
        return f"{self.prefix}… ({self.scope})"

    @property
    def scope(self) -> str:
        return f"rack {self.rack.name}" if self.rack_id else f"host {self.hostname}"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    def trays(self):
        """The compute trays this token may report for."""
        if self.rack_id:
            return ComputeTray.objects.filter(rack_id=self.rack_id)
        return ComputeTray.objects.filter(hostname=self.hostname)

    def covers_host(self, hostname: str) -> bool:
        """A host token covers its host (known to the inventory yet or not: a dry run may come first); a rack
        token covers the hosts of its rack's trays."""
        if not self.rack_id:
            return hostname == self.hostname
        return self.trays().filter(hostname=hostname).exists()


# --- Health: fault events, rules, decisions (inventory.health holds the workflows) --------------------------


class HealthSettings(models.Model):
    """How the health rules act: dry run, the circuit breaker, return to service, repeat offenders. One row
    (pk=1), edited by platform admins in the Django admin."""

    dry_run = models.BooleanField(
        default=False, help_text="Record what the rules would do (would-drain decisions) and change nothing."
    )
    dedup_window_s = models.PositiveIntegerField(
        default=3600,
        validators=[MinValueValidator(1)],
        help_text="Repeats of one fault on one GPU within this many seconds update the event's count.",
    )
    breaker_percent = models.PositiveSmallIntegerField(
        default=10,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Circuit breaker: at most this % of all trays (at least one) taken out per window.",
    )
    breaker_window_s = models.PositiveIntegerField(default=3600, validators=[MinValueValidator(1)])
    breaker_tripped_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Set when the breaker tripped; clear it to let the rules drain again.",
    )
    breaker_note = models.CharField(max_length=500, blank=True, validators=[TextValidator()])
    auto_return = models.BooleanField(
        default=True, help_text="Return trays the rules drained once they qualify (else only record it)."
    )
    return_after_s = models.PositiveIntegerField(
        default=1800, help_text="A drained tray's agent must report it healthy for this many seconds."
    )
    return_check = models.CharField(
        max_length=128,
        blank=True,
        help_text='Active check that must pass after the fault before return (e.g. "dcgmi diag -r 2"); '
        "empty: none needed.",
    )
    repeat_faults = models.PositiveSmallIntegerField(
        default=3,
        validators=[MinValueValidator(1)],
        help_text="A tray drained this many times within repeat_days needs service instead.",
    )
    repeat_days = models.PositiveSmallIntegerField(default=7, validators=[MinValueValidator(1)])
    node_silent_after_s = models.PositiveIntegerField(
        default=300,
        validators=[MinValueValidator(30)],
        help_text="A tray whose node has reported before but not for this many seconds is stale (node "
        "silent); the node_silent health rule says what the scheduler does with it.",
    )

    class Meta:
        verbose_name = "health settings"
        verbose_name_plural = "health settings"
        constraints = [
            models.CheckConstraint(condition=Q(pk=1), name="%(app_label)s_%(class)s_singleton"),
            models.CheckConstraint(
                condition=Q(breaker_percent__gte=1, breaker_percent__lte=100),
                name="%(app_label)s_%(class)s_breaker_percent_range",
            ),
        ]

    def __str__(self):
        return "Health settings"

    @classmethod
    def load(cls) -> "HealthSettings":
        return cls.objects.get_or_create(pk=1)[0]


class HealthRule(models.Model):
    """Which health events drain a tray, degrade its NVLink partition, or only warn. Every enabled rule that
    matches an event acts; seeded with defaults from NVIDIA's XID catalog (migration 0007)."""

    name = models.CharField(max_length=100, validators=[TextValidator()])
    enabled = models.BooleanField(default=True)
    kind = models.CharField(max_length=20, choices=HealthKind.choices, help_text="What the event is.")
    xid_first = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(999)]
    )
    xid_last = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(999)]
    )
    code = models.CharField(
        max_length=128,
        blank=True,
        help_text="Recovery action (GPU_RESET ...), fabric flag (ROUTE_UNHEALTHY ...), DCGM field or check "
        "name; empty matches any.",
    )
    threshold = models.FloatField(
        null=True, blank=True, help_text="DCGM fields: the event's value must be at least this."
    )
    action = models.CharField(max_length=16, choices=RuleAction.choices)
    note = models.CharField(
        max_length=300, blank=True, validators=[TextValidator()], help_text="Why; NVIDIA's immediate action."
    )

    class Meta:
        ordering = ["kind", "xid_first", "code", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["name"], name="%(app_label)s_%(class)s_unique_name"),
            models.CheckConstraint(
                condition=~Q(kind=HealthKind.XID) | Q(xid_first__isnull=False, xid_last__isnull=False),
                name="%(app_label)s_%(class)s_xid_range_set",
                violation_error_message="An XID rule needs its first and last XID.",
            ),
            models.CheckConstraint(
                condition=Q(xid_first__isnull=True) | Q(xid_last__gte=models.F("xid_first")),
                name="%(app_label)s_%(class)s_xid_range_order",
                violation_error_message="The last XID cannot come before the first.",
            ),
            models.CheckConstraint(
                condition=Q(kind=HealthKind.NODE_SILENT, action__in=[RuleAction.HOLD, RuleAction.WARN])
                | (~Q(kind=HealthKind.NODE_SILENT) & ~Q(action=RuleAction.HOLD)),
                name="%(app_label)s_%(class)s_node_silent_actions",
                violation_error_message="A node silent rule either holds the tray (places no new work) or "
                "only warns; hold is for node silent rules only.",
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


class HealthEventQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Whoever may see the tray sees its health history (the inventory is shared with signed-in users)."""
        return self.filter(tray__in=ComputeTray.objects.visible_to(user))


class HealthEvent(models.Model):
    """One fault on one tray (and GPU, when known): repeats within the settings' window raise `count` and
    `last_seen` instead of adding rows. What the rules made of it is in `drains`/`degrades`/`warns`."""

    tray = models.ForeignKey(ComputeTray, on_delete=models.CASCADE, related_name="health_events")
    gpu = models.ForeignKey(
        Gpu, on_delete=models.SET_NULL, null=True, blank=True, related_name="health_events"
    )
    gpu_uuid = models.CharField(max_length=64, blank=True, help_text="Kept if the GPU row goes.")
    source = models.CharField(max_length=16, choices=HealthSource.choices)
    kind = models.CharField(max_length=20, choices=HealthKind.choices)
    code = models.CharField(
        max_length=128, help_text="XID number, recovery action, fabric flag, DCGM field or check name."
    )
    xid = models.PositiveSmallIntegerField(null=True, blank=True)
    mnemonic = models.CharField(max_length=64, blank=True)
    value = models.FloatField(null=True, blank=True, help_text="DCGM field value, check exit status.")
    message = models.TextField(blank=True, help_text="The kernel line or the check's output tail.")
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    count = models.PositiveIntegerField(default=1)
    drains = models.BooleanField(default=False)
    degrades = models.BooleanField(default=False)
    warns = models.BooleanField(default=False)

    objects = HealthEventQuerySet.as_manager()

    class Meta:
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
        return f"fabric {self.code}"


class HealthActionQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(tray__in=ComputeTray.objects.visible_to(user))


class HealthAction(models.Model):
    """A decision the health rules (or an admin) took about a tray, as data: why, when, what changed."""

    tray = models.ForeignKey(ComputeTray, on_delete=models.CASCADE, related_name="health_actions")
    kind = models.CharField(max_length=24, choices=ActionKind.choices)
    event = models.ForeignKey(
        HealthEvent, on_delete=models.SET_NULL, null=True, blank=True, related_name="actions"
    )
    rule = models.ForeignKey(HealthRule, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    rule_name = models.CharField(max_length=100, blank=True)
    partition = models.ForeignKey(
        NVLinkPartition, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    dry_run = models.BooleanField(default=False)
    reason = models.CharField(max_length=500)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = HealthActionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-pk"]
        indexes = [
            models.Index(fields=["tray", "created_at"], name="inventory_healthaction_tray"),
            models.Index(fields=["kind", "created_at"], name="inventory_healthaction_kind"),
        ]

    def __str__(self):
        return f"{self.get_kind_display()}: {self.tray_id}"


class HealthCheckResultQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(tray__in=ComputeTray.objects.visible_to(user))


class HealthCheckResult(models.Model):
    """An active check the node agent ran (e.g. `dcgmi diag -r 2`): exit status, output tail, when."""

    tray = models.ForeignKey(ComputeTray, on_delete=models.CASCADE, related_name="health_checks")
    name = models.CharField(max_length=128)
    exit_status = models.SmallIntegerField()
    output = models.TextField(blank=True)
    started = models.DateTimeField()
    seconds = models.FloatField()
    received_at = models.DateTimeField(default=timezone.now)

    objects = HealthCheckResultQuerySet.as_manager()

    class Meta:
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
