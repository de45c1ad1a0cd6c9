"""Racks (NVLink domains) and their NVLink partitions.

A rack is one NVLink domain of 18 compute trays x 4 GPUs. It is carved into NVLink partitions at tray
granularity; the default partition (clique ID 32766) covers the whole rack.
"""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from core.hardware import DEFAULT_CLIQUE_ID, MAX_CLIQUE_ID
from core.text import TextValidator
from inventory import names
from inventory.choices import SystemModel
from inventory.validators import validate_partition_name, validate_rack_name, validate_service_tier


class RackQuerySet(models.QuerySet):
    def visible_to(self, user):
        # The physical inventory is shared: every signed-in user may read it; changes are admin-only.
        return self if user.is_authenticated else self.none()


class Rack(models.Model):
    """One NVL72 rack: a single NVLink domain whose GPUs all report the same cluster UUID."""

    name = models.CharField(
        max_length=64,
        validators=[TextValidator(), validate_rack_name],
        help_text=format_lazy(
            _(
                "Up to {max} lower-case letters, digits and '-', starting and ending with "
                "a letter or digit (a Kubernetes label value and part of Slurm block names)."
            ),
            max=names.RACK_NAME_MAX,
        ),
        verbose_name=_("name"),
    )
    system_model = models.CharField(
        max_length=32,
        choices=SystemModel.choices,
        default=SystemModel.GB200_NVL72,
        verbose_name=_("system model"),
    )
    cluster_uuid = models.UUIDField(
        null=True,
        blank=True,
        help_text=_("NVLink domain cluster UUID; learned from discovery when empty."),
        verbose_name=_("cluster uuid"),
    )
    location = models.CharField(
        max_length=128,
        blank=True,
        validators=[TextValidator()],
        help_text=_("Site, hall, row and position."),
        verbose_name=_("location"),
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = RackQuerySet.as_manager()

    class Meta:
        verbose_name = _("rack")
        verbose_name_plural = _("racks")
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["name"], name="%(app_label)s_%(class)s_unique_name"),
            models.UniqueConstraint(
                fields=["cluster_uuid"], name="%(app_label)s_%(class)s_unique_cluster_uuid"
            ),
            models.CheckConstraint(
                condition=Q(name__regex=names.DNS_LABEL_PATTERN),
                name="%(app_label)s_%(class)s_name_form",
                violation_error_message=_(
                    "A rack's name is lower-case letters, digits and '-', starting and "
                    "ending with a letter or digit."
                ),
            ),
        ]

    def __str__(self):
        return self.name


class NVLinkPartitionQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self if user.is_authenticated else self.none()


class NVLinkPartition(models.Model):
    """A set of trays of one rack whose GPUs share a clique ID (one NVLink partition)."""

    rack = models.ForeignKey(
        Rack, on_delete=models.CASCADE, related_name="partitions", verbose_name=_("rack")
    )
    clique_id = models.PositiveIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(MAX_CLIQUE_ID)], verbose_name=_("clique id")
    )
    name = models.CharField(
        max_length=64,
        validators=[TextValidator(), validate_partition_name],
        help_text=format_lazy(
            _("Up to {max} lower-case letters, digits and '-', starting and ending with a letter or digit."),
            max=names.PARTITION_NAME_MAX,
        ),
        verbose_name=_("name"),
    )
    service_tier = models.CharField(
        max_length=64,
        blank=True,
        validators=[TextValidator(), validate_service_tier],
        help_text=_(
            "Slurm partition serving it when it is dedicated to no department: 'gpu_<name>' (e.g. "
            "gpu_interactive); empty: the shared partition 'gpu'. A dedicated partition is always served by "
            "its department's Slurm partition."
        ),
        verbose_name=_("service tier"),
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # An NVLink/fabric fault on one tray affects every tray of the partition (inventory.health).
    degraded_reason = models.CharField(
        max_length=255,
        blank=True,
        help_text=_("Why the health rules marked it degraded; empty when not."),
        verbose_name=_("degraded reason"),
    )
    degraded_since = models.DateTimeField(null=True, blank=True, verbose_name=_("degraded since"))

    objects = NVLinkPartitionQuerySet.as_manager()

    class Meta:
        verbose_name_plural = _("NVLink partitions")
        ordering = ["rack__name", "clique_id"]
        verbose_name = _("NVLink partition")
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
                violation_error_message=_(
                    "An NVLink partition's name is lower-case letters, digits and '-', "
                    "starting and ending with a letter or digit."
                ),
            ),
            models.CheckConstraint(
                condition=Q(service_tier="") | Q(service_tier__regex=names.TIER_PATTERN),
                name="%(app_label)s_%(class)s_service_tier_form",
                violation_error_message=_("A service tier is empty, 'gpu' or 'gpu_<name>'."),
            ),
        ]

    def __str__(self):
        return f"{self.rack.name} {self.name}"

    @property
    def is_default(self) -> bool:
        return self.clique_id == DEFAULT_CLIQUE_ID
