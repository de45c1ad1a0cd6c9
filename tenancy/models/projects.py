"""Projects: teams inside a department with their own share of its GPUs."""

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Lower
from django.utils.translation import gettext_lazy

from core.access import is_admin, is_signed_in, led_department_ids, member_department_ids, member_project_ids
from core.text import TextValidator
from tenancy import naming
from tenancy.i18n import interpolate_lazy
from tenancy.models.departments import SLUG_FORM, Department


def validate_project_slug(value):
    """A project's slug: with its department's, a valid and unique namespace and account (tenancy.naming)."""
    if (why := naming.slug_error(value, department=False)) is not None:
        raise ValidationError(why, code="invalid_slug")


PROJECT_SLUG_PATTERN = naming.SLUG_PATTERN  # with its department's: a DNS label and a Slurm account name


class ProjectQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Admins: all; a department's leads: its projects; anyone else: the projects they are in."""
        if is_admin(user):
            return self
        if not is_signed_in(user):
            return self.none()
        return self.filter(
            Q(department_id__in=led_department_ids(user))
            | Q(pk__in=member_project_ids(user), department_id__in=member_department_ids(user))
        )

    def usable_by(self, user):
        """The projects `user` may submit jobs to: those it sees (core.access.may_use_project)."""
        return self.visible_to(user)


class Project(models.Model):
    """A team inside a department with its own share of the department's GPUs (Run:ai project, KAI leaf
    queue, Slurm child account, Kueue ClusterQueue in the department's Cohort).

    Quota fields mean what the department's mean, one level down (tenancy.quota.hierarchical_fair_share);
    the projects' guarantees fit inside the department's (tenancy.projects checks it under a lock on the
    department). A department without projects behaves as if it were its own single project.
    """

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="projects")
    name = models.CharField(max_length=100, validators=[TextValidator()])  # one line of plain text
    slug = models.SlugField(
        max_length=naming.SLUG_MAX,
        validators=[validate_project_slug],
        help_text=interpolate_lazy(
            gettext_lazy(
                "Up to %(max)s lower-case letters, digits and single hyphens, starting with a letter; with "
                "the department's slug, the Kubernetes namespace and Slurm account <department>--<project> "
                "(tenancy.naming)."
            ),
            max=naming.SLUG_MAX,
        ),
    )
    guaranteed_gpus = models.PositiveIntegerField(
        default=0, help_text=gettext_lazy("Always available; reclaimed if lent.")
    )
    over_quota_weight = models.DecimalField(
        max_digits=6,
        decimal_places=2,
        default=Decimal("1.00"),
        validators=[MinValueValidator(Decimal("0"))],
        help_text=gettext_lazy(
            "Share of the department's idle GPUs it may borrow, relative to its sibling projects."
        ),
    )
    limit_gpus = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=gettext_lazy("Most GPUs it may hold, borrowing included; empty for no limit."),
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ProjectQuerySet.as_manager()

    class Meta:
        ordering = ["department__name", "name"]
        constraints = [
            models.UniqueConstraint(
                Lower("name"),
                "department",
                name="%(app_label)s_%(class)s_unique_name_per_department",
                violation_error_message=gettext_lazy("The department already has a project of this name."),
            ),
            models.UniqueConstraint(
                fields=["department", "slug"],
                name="%(app_label)s_%(class)s_unique_slug_per_department",
                violation_error_message=gettext_lazy("The department already has a project with this slug."),
            ),
            models.CheckConstraint(
                condition=SLUG_FORM,
                name="%(app_label)s_%(class)s_slug_form",
                violation_error_message=gettext_lazy(
                    "A project's slug is lower-case letters, digits and single hyphens, starting with a "
                    "letter and ending with a letter or digit."
                ),
            ),
            models.CheckConstraint(
                condition=Q(limit_gpus__isnull=True) | Q(limit_gpus__gte=F("guaranteed_gpus")),
                name="%(app_label)s_%(class)s_limit_not_below_guarantee",
                violation_error_message=gettext_lazy("A project's limit may not be below its guarantee."),
            ),
            models.CheckConstraint(
                condition=Q(over_quota_weight__gte=0), name="%(app_label)s_%(class)s_weight_not_negative"
            ),
        ]

    def __str__(self):
        return f"{self.department} / {self.name}"

    @property
    def namespace(self) -> str:
        """Its Kubernetes namespace (and Kueue LocalQueue's): <department slug>--<project slug>."""
        return naming.project_namespace(self.department.slug, self.slug)

    @property
    def account(self) -> str:
        """Its Slurm account, a child of the department's account: <department slug>--<project slug>."""
        return naming.project_account(self.department.slug, self.slug)
