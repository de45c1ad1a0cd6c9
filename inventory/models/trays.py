"""Compute trays and their GPUs. What the inventory *intends* (a tray's partition) and what the nodes
*report* (each GPU's cluster UUID and clique ID) are kept side by side so drift between them is visible."""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q, Value
from django.db.models.functions import Concat, Lower, Substr
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from core.hardware import GPUS_PER_TRAY, TRAYS_PER_RACK
from inventory import names
from inventory.choices import FabricState, GpuHealth, MigMode, TrayState
from inventory.models.racks import NVLinkPartition, Rack
from inventory.validators import validate_hostname, validate_mig_layout_name


class ComputeTrayQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self if user.is_authenticated else self.none()


class ComputeTray(models.Model):
    """One compute tray (a node: 4 GPUs, 2 Grace CPUs) in a rack slot."""

    rack = models.ForeignKey(Rack, on_delete=models.CASCADE, related_name="trays", verbose_name=_("rack"))
    slot = models.PositiveSmallIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(TRAYS_PER_RACK)], verbose_name=_("slot")
    )
    hostname = models.CharField(
        max_length=128,
        validators=[validate_hostname],
        help_text=format_lazy(
            _(
                "Up to {max} lower-case letters, digits, '-' and '.' (a DNS name): the "
                "Kubernetes node's name and the Slurm NodeName."
            ),
            max=names.HOSTNAME_MAX,
        ),
        verbose_name=_("hostname"),
    )
    state = models.CharField(
        max_length=16, choices=TrayState.choices, default=TrayState.UP, verbose_name=_("state")
    )
    state_reason = models.CharField(max_length=255, blank=True, verbose_name=_("state reason"))
    ib_port_guids = models.JSONField(
        default=list,
        blank=True,
        help_text=_('InfiniBand port GUIDs, "0x" + 16 hex.'),
        verbose_name=_("ib port guids"),
    )
    # The partition the inventory intends this tray to be in. One foreign key: a tray can never be in two
    # partitions; the composite foreign key (partition, rack) added in migration 0002 keeps it in its rack.
    partition = models.ForeignKey(
        NVLinkPartition,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="trays",
        verbose_name=_("partition"),
    )
    # What the node last reported, as "<cluster_uuid>.<clique_id>" (GPU Feature Discovery rule); kept at
    # the last good value when a later report has problems.
    reported_clique = models.CharField(max_length=64, blank=True, verbose_name=_("reported clique"))
    fabric_problems = models.JSONField(default=list, blank=True, verbose_name=_("fabric problems"))
    last_report = models.JSONField(null=True, blank=True, verbose_name=_("last report"))
    last_report_at = models.DateTimeField(null=True, blank=True, verbose_name=_("last report at"))
    # Health (inventory.health): since when the agent's reports have shown nothing wrong (None: the last one
    # did, or none came since a fault), and the node agent that reports for it.
    healthy_since = models.DateTimeField(null=True, blank=True, verbose_name=_("healthy since"))
    agent_version = models.CharField(max_length=64, blank=True, verbose_name=_("agent version"))
    agent_interval_s = models.PositiveIntegerField(null=True, blank=True, verbose_name=_("agent interval s"))
    # sha256 of (the canonical hash of the last reconciled report, what the inventory intended then): a
    # report with the same hash is a heartbeat (inventory.ingest.heartbeats); empty while the tray has
    # open health business (every report is then reconciled in full).
    report_key = models.CharField(max_length=64, blank=True, editable=False)
    # What each scheduler (Slurm, Kubernetes target) says about the tray after Rackplane last made it agree
    # with `state` (integrations.trays): [{target, kind, action, message, state, reason, owner, error}], and
    # when. Derived data, written without signals or audit.
    scheduler_state = models.JSONField(default=list, blank=True, verbose_name=_("scheduler state"))
    scheduler_state_at = models.DateTimeField(null=True, blank=True, verbose_name=_("scheduler state at"))
    # The MIG layout an admin chose for every GPU of the tray (inventory.mig_layouts; inventory.services
    # .mig.set_mig_layout): the mig-parted config named by the node's `nvidia.com/mig.config` label, and its
    # devices per GPU ({"1g.23gb": 7}) as chosen, so what is rendered does not move when reports do. Blank:
    # Rackplane leaves MIG alone; "all-disabled": whole GPUs, MIG off.
    mig_layout = models.CharField(
        max_length=63,
        blank=True,
        validators=[validate_mig_layout_name],
        help_text=_("MIG layout (mig-parted config)"),
        verbose_name=_("mig layout"),
    )
    mig_layout_devices = models.JSONField(default=dict, blank=True, verbose_name=_("mig layout devices"))

    objects = ComputeTrayQuerySet.as_manager()

    class Meta:
        verbose_name_plural = _("compute trays")
        ordering = ["rack__name", "slot"]
        verbose_name = _("compute tray")
        permissions = [("report_discovery", "Can post fabric discovery reports (node agents)")]
        constraints = [
            models.UniqueConstraint(fields=["rack", "slot"], name="%(app_label)s_%(class)s_unique_slot"),
            models.UniqueConstraint(fields=["hostname"], name="%(app_label)s_%(class)s_unique_hostname"),
            models.CheckConstraint(
                condition=Q(hostname__regex=names.HOSTNAME_PATTERN),
                name="%(app_label)s_%(class)s_hostname_form",
                violation_error_message=_(
                    "A tray's hostname is lower-case letters, digits, '-' and '.' (a DNS name)."
                ),
            ),
            models.CheckConstraint(
                condition=Q(slot__gte=1, slot__lte=TRAYS_PER_RACK), name="%(app_label)s_%(class)s_slot_range"
            ),
            models.CheckConstraint(
                condition=Q(state=TrayState.UP) | ~Q(state_reason=""),
                name="%(app_label)s_%(class)s_reason_unless_up",
                violation_error_message=_("A tray that is not up needs a reason."),
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
        ComputeTray,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="gpus",
        verbose_name=_("tray"),
    )
    index = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0), MaxValueValidator(GPUS_PER_TRAY - 1)],
        verbose_name=_("index"),
    )
    uuid = models.CharField(
        max_length=64, help_text=_('As nvidia-smi prints it: "GPU-..."'), verbose_name=_("uuid")
    )
    serial = models.CharField(max_length=64, blank=True, verbose_name=_("serial"))
    product = models.CharField(max_length=64, blank=True, verbose_name=_("product"))
    memory_mib = models.PositiveIntegerField(null=True, blank=True, verbose_name=_("memory mib"))
    health = models.CharField(
        max_length=20, choices=GpuHealth.choices, default=GpuHealth.UNKNOWN, verbose_name=_("health")
    )
    fabric_state = models.CharField(
        max_length=16, choices=FabricState.choices, blank=True, verbose_name=_("fabric state")
    )
    fabric_status = models.CharField(max_length=64, blank=True, verbose_name=_("fabric status"))
    reported_cluster_uuid = models.UUIDField(null=True, blank=True, verbose_name=_("reported cluster uuid"))
    reported_clique_id = models.PositiveIntegerField(
        null=True, blank=True, verbose_name=_("reported clique id")
    )
    # MIG (Multi-Instance GPU) as the node last reported it (inventory.discovery.mig): the mode now, the mode
    # after the next GPU reset, and what the node listed (instances with profile, placement and UUID, the
    # profiles the driver offers: GpuMig.as_dict()). Blank and None until a report that says.
    mig_mode = models.CharField(
        max_length=16, choices=MigMode.choices, blank=True, verbose_name=_("mig mode")
    )
    mig_pending = models.CharField(
        max_length=16, choices=MigMode.choices, blank=True, verbose_name=_("mig pending")
    )
    mig = models.JSONField(null=True, blank=True, verbose_name=_("mig"))
    last_report_at = models.DateTimeField(null=True, blank=True, verbose_name=_("last report at"))
    # While the GPU is on no tray: the tray discovery detached it from. A rack's or a host's agent token may
    # put a GPU back only where its scope covers the tray it left (inventory.ingest.gpus.require_in_scope), so
    # a node cannot claim a GPU that fell off another rack's bus.
    detached_from = models.ForeignKey(
        ComputeTray,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text=_("The tray the GPU was last on, while it is on none (set by discovery)."),
        verbose_name=_("detached from"),
    )

    objects = GpuQuerySet.as_manager()

    class Meta:
        verbose_name_plural = _("GPUs")
        ordering = ["tray__rack__name", "tray__slot", "index"]
        verbose_name = _("GPU")
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
        indexes = [
            models.Index(fields=["health"], name="inventory_gpu_health_idx"),
            # GPUs in MIG mode are few and not given whole (tenancy.services.unschedulable_gpus).
            models.Index(fields=["mig_mode"], name="inventory_gpu_mig_mode_idx"),
            # The search's exact serial (portal.pages.search._gpu_exact): a lookup, not a scan of 720,000
            # GPUs at 10,000 racks (130 ms of every search that looks like a serial).
            models.Index(fields=["serial"], name="inventory_gpu_serial_idx"),
        ]

    def __str__(self):
        return self.uuid


class MigDeviceQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self if user.is_authenticated else self.none()


class MigDevice(models.Model):
    """One MIG device (a compute instance of a GPU instance) with its UUID, as a node reported it.

    Written with `Gpu.mig` from the same report (inventory.ingest.gpus): the GPU's JSON is what its page and
    API show; these rows make a MIG UUID belong to one GPU of the fleet (a report claiming one another GPU
    still holds is not applied to that GPU: inventory.ingest.gpus.mig_claims) and are what jobs holding a
    slice will point at."""

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="mig_devices")
    uuid = models.CharField(max_length=96, help_text=_('As nvidia-smi -L prints it: "MIG-..."'))
    gpu_instance_id = models.PositiveSmallIntegerField()
    compute_instance_id = models.PositiveSmallIntegerField()
    profile = models.CharField(max_length=32)
    placement_start = models.PositiveSmallIntegerField()
    placement_size = models.PositiveSmallIntegerField()

    objects = MigDeviceQuerySet.as_manager()

    class Meta:
        verbose_name_plural = _("MIG devices")
        ordering = ["gpu", "placement_start", "gpu_instance_id", "compute_instance_id"]
        verbose_name = _("MIG device")
        constraints = [
            models.UniqueConstraint(Lower("uuid"), name="%(app_label)s_%(class)s_unique_uuid_ci"),
            models.UniqueConstraint(
                fields=["gpu", "gpu_instance_id", "compute_instance_id"],
                name="%(app_label)s_%(class)s_unique_instance",
            ),
        ]

    def __str__(self):
        return self.uuid
