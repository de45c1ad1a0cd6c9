"""The compute fabric above the rack (issue 33): scalable units under spine groups, each rack's place, each
tray's where it differs from its rack's, and each GPU's NIC rail, as each source last saw them.

Imported, never typed: every row belongs to one `FabricImport` (its source and when), and a new import of a
source replaces that source's rows whole (inventory.fabric_import). One import is *in use* (what
`inventory.fabric.current_fabric()` gives the placement engine and the renderers); the others are kept and
compared with it, and where two sources group racks differently the fabric page flags it, as clique drift
is flagged, rather than one silently overwriting the other. The site is implicit (one per portal).

Site topology, not tenant data: every signed-in user may read it (`visible_to`); no job or department is in
it.
"""

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from core.access import is_admin
from core.hardware import GPUS_PER_TRAY
from core.text import TextValidator
from inventory import names
from inventory.choices import FabricLevel, FabricSource
from inventory.discovery.fabric.parsed import LEAF_NAME_MAX
from inventory.models.racks import Rack
from inventory.models.trays import ComputeTray


class FabricQuerySet(models.QuerySet):
    def visible_to(self, user):
        # Site topology, shared like the racks: every signed-in user reads it; imports are admin-only.
        return self if user.is_authenticated else self.none()


class FabricImport(models.Model):
    """The last import of one source: what it said and when; its groups, places and rails hang from it."""

    source = models.CharField(max_length=16, choices=FabricSource.choices, verbose_name=_("source"))
    label = models.CharField(
        max_length=200,
        blank=True,
        validators=[TextValidator()],
        help_text=_("What was imported: the file's name or the Kubernetes target's."),
        verbose_name=_("label"),
    )
    imported_at = models.DateTimeField(verbose_name=_("imported at"))
    imported_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("imported by"),
    )
    in_use = models.BooleanField(
        default=False,
        help_text=_("The fabric the scheduler places on and the renderers write (one source at a time)."),
        verbose_name=_("in use"),
    )
    notes = models.JSONField(default=list, blank=True, verbose_name=_("notes"))

    objects = FabricQuerySet.as_manager()

    class Meta:
        verbose_name = _("fabric import")
        verbose_name_plural = _("fabric imports")
        ordering = ["-in_use", "source"]
        constraints = [
            models.UniqueConstraint(fields=["source"], name="%(app_label)s_%(class)s_unique_source"),
            models.UniqueConstraint(
                fields=["in_use"], condition=Q(in_use=True), name="%(app_label)s_%(class)s_one_in_use"
            ),
        ]

    def __str__(self):
        return self.get_source_display()


class FabricGroup(models.Model):
    """A group of the fabric above the rack: a spine group, or a scalable unit (a leaf group) under one."""

    fabric = models.ForeignKey(
        FabricImport, on_delete=models.CASCADE, related_name="groups", verbose_name=_("fabric")
    )
    level = models.CharField(max_length=8, choices=FabricLevel.choices, verbose_name=_("level"))
    name = models.CharField(
        max_length=names.RACK_NAME_MAX, validators=[TextValidator()], verbose_name=_("name")
    )
    parent = models.ForeignKey(
        "self",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="children",
        verbose_name=_("spine group"),
    )

    objects = FabricQuerySet.as_manager()

    class Meta:
        verbose_name = _("fabric group")
        verbose_name_plural = _("fabric groups")
        ordering = ["fabric", "level", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["fabric", "level", "name"], name="%(app_label)s_%(class)s_unique_name"
            ),
            models.CheckConstraint(
                condition=Q(level=FabricLevel.SPINE, parent__isnull=True)
                | Q(level=FabricLevel.UNIT, parent__isnull=False),
                name="%(app_label)s_%(class)s_unit_under_spine",
            ),
            models.CheckConstraint(
                condition=Q(name__regex=names.DNS_LABEL_PATTERN), name="%(app_label)s_%(class)s_name_form"
            ),
        ]

    def __str__(self):
        return f"{self.get_level_display()} {self.name}"


class _Place(models.Model):
    """Where one source put a rack or a tray: its scalable unit (hence spine group)."""

    fabric = models.ForeignKey(
        FabricImport, on_delete=models.CASCADE, related_name="%(class)ss", verbose_name=_("fabric")
    )
    unit = models.ForeignKey(
        FabricGroup, on_delete=models.CASCADE, related_name="%(class)ss", verbose_name=_("unit")
    )

    objects = FabricQuerySet.as_manager()

    class Meta:
        abstract = True


class RackPlace(_Place):
    """A rack's scalable unit as one source saw it."""

    rack = models.ForeignKey(
        Rack, on_delete=models.CASCADE, related_name="fabric_places", verbose_name=_("rack")
    )

    class Meta:
        verbose_name = _("rack's fabric place")
        verbose_name_plural = _("racks' fabric places")
        ordering = ["fabric", "rack__name"]
        constraints = [
            models.UniqueConstraint(fields=["fabric", "rack"], name="%(app_label)s_%(class)s_unique_rack"),
        ]

    def __str__(self):
        return f"{self.rack} in {self.unit}"


class TrayPlace(_Place):
    """A tray cabled to another unit's leaves than most of its rack's trays (only where it differs)."""

    tray = models.ForeignKey(
        ComputeTray, on_delete=models.CASCADE, related_name="fabric_places", verbose_name=_("tray")
    )

    class Meta:
        verbose_name = _("tray's fabric place")
        verbose_name_plural = _("trays' fabric places")
        ordering = ["fabric", "tray__hostname"]
        constraints = [
            models.UniqueConstraint(fields=["fabric", "tray"], name="%(app_label)s_%(class)s_unique_tray"),
        ]

    def __str__(self):
        return f"{self.tray} in {self.unit}"


class GpuRail(models.Model):
    """The rail of a GPU's NIC: the rail number and the leaf switch it is cabled to (GPU `gpu_index` of the
    tray; a slot of the tray, so it survives a GPU's replacement)."""

    fabric = models.ForeignKey(
        FabricImport, on_delete=models.CASCADE, related_name="rails", verbose_name=_("fabric")
    )
    tray = models.ForeignKey(
        ComputeTray, on_delete=models.CASCADE, related_name="rails", verbose_name=_("tray")
    )
    gpu_index = models.PositiveSmallIntegerField(
        validators=[MaxValueValidator(GPUS_PER_TRAY - 1)], verbose_name=_("GPU index")
    )
    rail = models.PositiveSmallIntegerField(
        validators=[MinValueValidator(0), MaxValueValidator(GPUS_PER_TRAY - 1)], verbose_name=_("rail")
    )
    leaf = models.CharField(
        max_length=LEAF_NAME_MAX,
        validators=[TextValidator()],
        help_text=_("The leaf switch the NIC is cabled to, as the fabric describes it."),
        verbose_name=_("leaf"),
    )

    objects = FabricQuerySet.as_manager()

    class Meta:
        verbose_name = _("GPU's NIC rail")
        verbose_name_plural = _("GPUs' NIC rails")
        ordering = ["fabric", "tray__hostname", "gpu_index"]
        constraints = [
            models.UniqueConstraint(
                fields=["fabric", "tray", "gpu_index"], name="%(app_label)s_%(class)s_unique_gpu"
            ),
            models.CheckConstraint(
                condition=Q(gpu_index__lt=GPUS_PER_TRAY, rail__lt=GPUS_PER_TRAY),
                name="%(app_label)s_%(class)s_index_range",
            ),
        ]

    def __str__(self):
        return f"{self.tray} GPU {self.gpu_index}: rail {self.rail} ({self.leaf})"


class FabricUploadQuerySet(models.QuerySet):
    def visible_to(self, user):
        # An upload is its admin's own until applied (only platform admins import).
        return self.filter(uploaded_by=user) if is_admin(user) else self.none()


class FabricUpload(models.Model):
    """A fabric file an admin uploaded on the import page, kept between its preview and its applying (so
    both read the same bytes whichever process serves them); deleted when applied, or an hour later."""

    source = models.CharField(max_length=16, choices=FabricSource.choices, verbose_name=_("source"))
    name = models.CharField(max_length=200, validators=[TextValidator()], verbose_name=_("file name"))
    data = models.BinaryField(verbose_name=_("data"))  # read by inventory.discovery.fabric's readers only
    use = models.BooleanField(default=False, verbose_name=_("put in use"))
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", verbose_name=_("uploaded by")
    )
    uploaded_at = models.DateTimeField(auto_now_add=True, verbose_name=_("uploaded at"))

    objects = FabricUploadQuerySet.as_manager()

    class Meta:
        verbose_name = _("fabric upload")
        verbose_name_plural = _("fabric uploads")
        ordering = ["-uploaded_at"]

    def __str__(self):
        return self.name
