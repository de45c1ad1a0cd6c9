"""Departments (tenants) with their guaranteed GPU quotas, network and storage isolation, the NVLink
partitions dedicated to them, and the tenancy settings (the pools isolation resources come from).

Quota semantics follow Run:ai/KAI (see tenancy.quota): a department always gets min(guarantee, demand),
may borrow idle GPUs beyond its guarantee up to its limit (preemptible), shared by over-quota weight.
"""

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.access import is_admin, led_department_ids, member_department_ids
from core.text import TextValidator
from inventory.models import NVLinkPartition
from tenancy import naming
from tenancy.i18n import interpolate_lazy
from tenancy.renderers import export_path_problem, is_inside
from tenancy.validators import validate_export_path, validate_export_root, validate_nfs_server

VLAN_MIN, VLAN_MAX = 1, 4094
VNI_MIN, VNI_MAX = 1, 16_777_215
PKEY_MIN, PKEY_MAX = 0x0001, 0x7FFE


class DepartmentQuerySet(models.QuerySet):
    def visible_to(self, user):
        if is_admin(user):
            return self
        return self.filter(pk__in=member_department_ids(user))

    def led_by(self, user):
        if is_admin(user):
            return self
        return self.filter(pk__in=led_department_ids(user))


def validate_department_slug(value):
    """A department's slug: every name derived from it is valid for its consumer (tenancy.naming)."""
    if (why := naming.slug_error(value)) is not None:
        raise ValidationError(why, code="invalid_slug")


# The same rules as database constraints (a row written around the models still cannot hold a bad slug).
SLUG_FORM = Q(slug__regex=naming.SLUG_PATTERN)


class Department(models.Model):
    name = models.CharField(
        max_length=100, validators=[TextValidator()], verbose_name=gettext_lazy("name")
    )  # one line of plain text
    slug = models.SlugField(
        max_length=naming.SLUG_MAX,
        validators=[validate_department_slug],
        help_text=interpolate_lazy(
            gettext_lazy(
                "Its Kubernetes namespace, Slurm account and QOS (tenancy.naming): up to %(max)s lower-case "
                "letters, digits and single hyphens, starting with a letter."
            ),
            max=naming.SLUG_MAX,
        ),
        verbose_name=gettext_lazy("slug"),
    )
    guaranteed_gpus = models.PositiveIntegerField(
        default=0,
        help_text=gettext_lazy("Always available; reclaimed if lent."),
        verbose_name=gettext_lazy("guaranteed gpus"),
    )
    over_quota_weight = models.DecimalField(
        max_digits=6,
        decimal_places=2,
        default=Decimal("1.00"),
        validators=[MinValueValidator(Decimal("0"))],
        help_text=gettext_lazy(
            "Share of idle GPUs it may borrow, relative to other departments (0: never borrows)."
        ),
        verbose_name=gettext_lazy("over quota weight"),
    )
    limit_gpus = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=gettext_lazy("Most GPUs it may hold, borrowing included; empty for no limit."),
        verbose_name=gettext_lazy("limit gpus"),
    )
    priority = models.SmallIntegerField(
        default=0,
        help_text=gettext_lazy("Higher priority is served first when borrowing."),
        verbose_name=gettext_lazy("priority"),
    )
    # Network isolation, allocated from the pools in TenancySettings; unique while assigned.
    vlan_id = models.PositiveIntegerField(
        validators=[MinValueValidator(VLAN_MIN), MaxValueValidator(VLAN_MAX)],
        verbose_name=gettext_lazy("vlan id"),
    )
    vxlan_vni = models.PositiveIntegerField(
        validators=[MinValueValidator(VNI_MIN), MaxValueValidator(VNI_MAX)],
        verbose_name=gettext_lazy("vxlan vni"),
    )
    ib_pkey = models.PositiveIntegerField(
        validators=[MinValueValidator(PKEY_MIN), MaxValueValidator(PKEY_MAX)],
        help_text=gettext_lazy("InfiniBand P_Key"),
        verbose_name=gettext_lazy("ib pkey"),
    )
    network_cidr = models.CharField(
        max_length=43,
        help_text=gettext_lazy("The department's tenant network, e.g. 10.64.3.0/24"),
        verbose_name=gettext_lazy("network cidr"),
    )
    # Storage isolation. Written unquoted into /etc/exports and PersistentVolumes (docs/rendering.md).
    export_path = models.CharField(
        max_length=255,
        validators=[validate_export_path],
        help_text=gettext_lazy(
            "Absolute path of the department's NFS export, inside the tenancy settings' export root: "
            "letters, digits, '.', '_' and '-' between '/', no trailing '/'."
        ),
        verbose_name=gettext_lazy("export path"),
    )
    storage_quota_gib = models.PositiveIntegerField(
        default=10240, verbose_name=gettext_lazy("storage quota gib")
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))
    updated_at = models.DateTimeField(auto_now=True, verbose_name=gettext_lazy("updated at"))

    objects = DepartmentQuerySet.as_manager()

    class Meta:
        verbose_name = gettext_lazy("department")
        verbose_name_plural = gettext_lazy("departments")
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["name"], name="%(app_label)s_%(class)s_unique_name"),
            models.UniqueConstraint(fields=["slug"], name="%(app_label)s_%(class)s_unique_slug"),
            models.UniqueConstraint(fields=["vlan_id"], name="%(app_label)s_%(class)s_unique_vlan"),
            models.UniqueConstraint(fields=["vxlan_vni"], name="%(app_label)s_%(class)s_unique_vni"),
            models.UniqueConstraint(fields=["ib_pkey"], name="%(app_label)s_%(class)s_unique_pkey"),
            models.UniqueConstraint(fields=["network_cidr"], name="%(app_label)s_%(class)s_unique_cidr"),
            models.UniqueConstraint(fields=["export_path"], name="%(app_label)s_%(class)s_unique_export"),
            models.CheckConstraint(
                condition=SLUG_FORM,
                name="%(app_label)s_%(class)s_slug_form",
                violation_error_message=gettext_lazy(
                    "A department's slug is lower-case letters, digits and single hyphens, starting with a "
                    "letter and ending with a letter or digit."
                ),
            ),
            models.CheckConstraint(
                condition=~Q(slug__in=sorted(naming.RESERVED_SLUGS))
                & ~Q(slug__startswith=naming.RESERVED_PREFIXES[0]),
                name="%(app_label)s_%(class)s_slug_not_reserved",
                violation_error_message=gettext_lazy(
                    "This slug is reserved (Kubernetes, Slurm or Rackplane use the name)."
                ),
            ),
            models.CheckConstraint(
                condition=Q(limit_gpus__isnull=True) | Q(limit_gpus__gte=F("guaranteed_gpus")),
                name="%(app_label)s_%(class)s_limit_not_below_guarantee",
                violation_error_message=gettext_lazy("A department's limit may not be below its guarantee."),
            ),
            models.CheckConstraint(
                condition=Q(over_quota_weight__gte=0), name="%(app_label)s_%(class)s_weight_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(vlan_id__gte=VLAN_MIN, vlan_id__lte=VLAN_MAX),
                name="%(app_label)s_%(class)s_vlan_range",
            ),
            models.CheckConstraint(
                condition=Q(vxlan_vni__gte=VNI_MIN, vxlan_vni__lte=VNI_MAX),
                name="%(app_label)s_%(class)s_vni_range",
            ),
            models.CheckConstraint(
                condition=Q(ib_pkey__gte=PKEY_MIN, ib_pkey__lte=PKEY_MAX),
                name="%(app_label)s_%(class)s_pkey_range",
            ),
        ]

    def __str__(self):
        return self.name

    @property
    def pkey_hex(self) -> str:
        return f"0x{self.ib_pkey:04x}"

    def clean(self):
        super().clean()
        self._clean_export_path()

    def _clean_export_path(self) -> None:
        """Storage isolation: the export lies inside the export root and neither inside another
        department's export nor around one (either would let one department mount the other's data).
        The same path twice is the `unique_export` constraint's. A malformed path is its validator's."""
        path = self.export_path
        if not path or export_path_problem(path):
            return
        root = TenancySettings.load().export_root
        if problem := export_path_problem(path, root=root):
            raise ValidationError(
                {
                    "export_path": _("The export path %(path)s %(problem)s.")
                    % {"path": repr(path), "problem": problem}
                }
            )
        others = Department.objects.exclude(pk=self.pk)
        ancestors = ["/".join(path.split("/")[:i]) for i in range(2, path.count("/") + 1)]
        outer = others.filter(export_path__in=ancestors).order_by("export_path").first()
        inner = others.filter(export_path__startswith=path + "/").order_by("export_path").first()
        if outer is not None:
            raise ValidationError(
                {
                    "export_path": _(
                        "The export path %(path)s lies inside %(other)s's export %(other_path)s: %(other)s "
                        "could read its data. Choose a path outside it."
                    )
                    % {"path": path, "other": outer.name, "other_path": outer.export_path}
                }
            )
        if inner is not None:
            raise ValidationError(
                {
                    "export_path": _(
                        "The export path %(path)s holds %(other)s's export %(other_path)s: this department "
                        "could read %(other)s's data. Choose a path outside it."
                    )
                    % {"path": path, "other": inner.name, "other_path": inner.export_path}
                }
            )


class DedicatedPartitionQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(department__in=Department.objects.visible_to(user))


class DedicatedPartition(models.Model):
    """An NVLink partition given to one department as a dedicated service tier.

    Its GPUs count towards the department's guarantee and serve that department first.
    """

    partition = models.OneToOneField(
        NVLinkPartition,
        on_delete=models.CASCADE,
        related_name="dedication",
        verbose_name=gettext_lazy("partition"),
    )
    department = models.ForeignKey(
        Department,
        on_delete=models.CASCADE,
        related_name="dedicated_partitions",
        verbose_name=gettext_lazy("department"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))

    objects = DedicatedPartitionQuerySet.as_manager()

    class Meta:
        verbose_name = gettext_lazy("dedicated partition")
        verbose_name_plural = gettext_lazy("dedicated partitions")
        ordering = ["department__name", "partition__rack__name", "partition__clique_id"]
        constraints = [
            models.UniqueConstraint(fields=["partition"], name="%(app_label)s_%(class)s_unique_partition"),
        ]

    def __str__(self):
        return f"{self.partition} -> {self.department}"


class TenancySettings(models.Model):
    """The pools isolation resources are allocated from, and telemetry knobs. One row (pk=1)."""

    vlan_first = models.PositiveIntegerField(default=100, verbose_name=gettext_lazy("vlan first"))
    vlan_last = models.PositiveIntegerField(default=3999, verbose_name=gettext_lazy("vlan last"))
    vni_first = models.PositiveIntegerField(default=10000, verbose_name=gettext_lazy("vni first"))
    vni_last = models.PositiveIntegerField(default=19999, verbose_name=gettext_lazy("vni last"))
    pkey_first = models.PositiveIntegerField(default=0x0100, verbose_name=gettext_lazy("pkey first"))
    pkey_last = models.PositiveIntegerField(default=0x7FFE, verbose_name=gettext_lazy("pkey last"))
    tenant_supernet = models.CharField(
        max_length=43, default="10.64.0.0/16", verbose_name=gettext_lazy("tenant supernet")
    )
    tenant_prefix = models.PositiveSmallIntegerField(
        default=24,
        help_text=gettext_lazy("Prefix length of each tenant network"),
        verbose_name=gettext_lazy("tenant prefix"),
    )
    export_root = models.CharField(
        max_length=200,
        default="/exports/tenants",
        validators=[validate_export_root],
        help_text=gettext_lazy(
            "Every department's export path lies inside it; a new department's is <root>/<slug>."
        ),
        verbose_name=gettext_lazy("export root"),
    )
    nfs_server = models.CharField(
        max_length=253,
        default="nfs.storage.internal",
        validators=[validate_nfs_server],
        verbose_name=gettext_lazy("nfs server"),
    )
    default_storage_quota_gib = models.PositiveIntegerField(
        default=10240, verbose_name=gettext_lazy("default storage quota gib")
    )
    idle_threshold_percent = models.FloatField(
        default=5.0, verbose_name=gettext_lazy("idle threshold percent")
    )
    idle_window_minutes = models.PositiveIntegerField(
        default=30, verbose_name=gettext_lazy("idle window minutes")
    )
    utilization_history_hours = models.PositiveIntegerField(
        default=24,
        help_text=gettext_lazy("How long per-GPU utilization (5-minute buckets) is kept."),
        verbose_name=gettext_lazy("utilization history hours"),
    )
    quota_history_days = models.PositiveIntegerField(
        default=30,
        help_text=gettext_lazy("How long department quota snapshots are kept."),
        verbose_name=gettext_lazy("quota history days"),
    )

    class Meta:
        verbose_name = gettext_lazy("tenancy settings")
        verbose_name_plural = gettext_lazy("tenancy settings")
        constraints = [
            models.CheckConstraint(condition=Q(pk=1), name="%(app_label)s_%(class)s_singleton"),
            models.CheckConstraint(
                condition=Q(
                    vlan_first__gte=VLAN_MIN, vlan_last__lte=VLAN_MAX, vlan_first__lte=F("vlan_last")
                ),
                name="%(app_label)s_%(class)s_vlan_pool",
            ),
            models.CheckConstraint(
                condition=Q(vni_first__gte=VNI_MIN, vni_last__lte=VNI_MAX, vni_first__lte=F("vni_last")),
                name="%(app_label)s_%(class)s_vni_pool",
            ),
            models.CheckConstraint(
                condition=Q(
                    pkey_first__gte=PKEY_MIN, pkey_last__lte=PKEY_MAX, pkey_first__lte=F("pkey_last")
                ),
                name="%(app_label)s_%(class)s_pkey_pool",
            ),
        ]

    def __str__(self):
        return _("Tenancy settings")  # audit records keep it in English (core.audit)

    def clean(self):
        super().clean()
        root = self.export_root
        if root and (root == "/" or not export_path_problem(root)):
            # A new root must still hold every department's export: the renderer refuses one outside it.
            outside = [
                d
                for d in Department.objects.only("name", "export_path")
                if not is_inside(d.export_path, root)
            ]
            if outside:
                listed = ", ".join(f"{d.name} ({d.export_path})" for d in outside[:5])
                raise ValidationError(
                    {
                        "export_root": _(
                            "%(count)s department export(s) would lie outside %(root)s: %(listed)s. Move "
                            "them first, or choose a root that holds them."
                        )
                        % {"count": len(outside), "root": root, "listed": listed}
                    }
                )

    @classmethod
    def load(cls) -> "TenancySettings":
        return cls.objects.get_or_create(pk=1)[0]
