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


DEFAULT_PROJECT_NAME = "Default"  # stored data, as a lead may rename it (not a translated label)
DEFAULT_PROJECT_SLUG = "default"


class ProjectQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Admins: all; a department's leads: its projects; anyone else: the projects they are in and their
        departments' default projects."""
        if is_admin(user):
            return self
        if not is_signed_in(user):
            return self.none()
        return self.filter(
            Q(department_id__in=led_department_ids(user))
            | Q(pk__in=member_project_ids(user), department_id__in=member_department_ids(user))
            | Q(is_default=True, department_id__in=member_department_ids(user))
        )

    def usable_by(self, user):
        """The projects `user` may submit jobs to (core.access.may_use_project): an admin all, a lead its
        departments', anyone else the named projects they are in and, in a department where they are in no
        named project, its default project."""
        if is_admin(user):
            return self
        if not is_signed_in(user):
            return self.none()
        in_named = user.project_memberships.filter(project__is_default=False)
        return self.filter(
            Q(department_id__in=led_department_ids(user))
            | Q(pk__in=member_project_ids(user), department_id__in=member_department_ids(user))
            | (
                Q(is_default=True, department_id__in=member_department_ids(user))
                & ~Q(department_id__in=in_named.values("project__department_id"))
            )
        )

    def named(self):
        """The projects a lead made (not a department's default project): what the scheduling engine, the
        Slurm account tree and the Kueue objects know as projects."""
        return self.filter(is_default=False)


class Project(models.Model):
    """A team inside a department with its own share of the department's GPUs (Run:ai project, KAI leaf
    queue, Slurm child account, Kueue ClusterQueue in the department's Cohort).

    Quota fields mean what the department's mean, one level down (tenancy.quota.hierarchical_fair_share);
    the projects' guarantees fit inside the department's (tenancy.projects checks it under a lock on the
    department). A department without projects behaves as if it were its own single project.
    """

    department = models.ForeignKey(
        Department, on_delete=models.CASCADE, related_name="projects", verbose_name=gettext_lazy("department")
    )
    name = models.CharField(
        max_length=100, validators=[TextValidator()], verbose_name=gettext_lazy("name")
    )  # one line of plain text
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
            "Share of the department's idle GPUs it may borrow, relative to its sibling projects."
        ),
        verbose_name=gettext_lazy("over quota weight"),
    )
    limit_gpus = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=gettext_lazy("Most GPUs it may hold, borrowing included; empty for no limit."),
        verbose_name=gettext_lazy("limit gpus"),
    )
    is_default = models.BooleanField(
        default=False,
        editable=False,
        help_text=gettext_lazy(
            "The department's default project: what its named projects do not take (its guarantee "
            "is the department's minus theirs; every member in no named project may submit to it)."
        ),
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ProjectQuerySet.as_manager()

    class Meta:
        verbose_name = gettext_lazy("project")
        verbose_name_plural = gettext_lazy("projects")
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
            models.UniqueConstraint(
                fields=["department"],
                condition=Q(is_default=True),
                name="%(app_label)s_%(class)s_one_default_per_department",
                violation_error_message="A department has one default project.",
            ),
            models.CheckConstraint(
                # What it is guaranteed and limited to follows from the department and its named projects.
                condition=Q(is_default=False) | Q(guaranteed_gpus=0, limit_gpus__isnull=True),
                name="%(app_label)s_%(class)s_default_holds_no_quota",
                violation_error_message="A default project stores no guarantee or limit of its own.",
            ),
        ]

    def __str__(self):
        return f"{self.department} / {self.name}"

    @property
    def namespace(self) -> str:
        """Its Kubernetes namespace (and Kueue LocalQueue's): <department slug>--<project slug>; the
        department's own for its default project."""
        if self.is_default:
            return naming.home(self.department.slug)
        return naming.project_namespace(self.department.slug, self.slug)

    @property
    def account(self) -> str:
        """Its Slurm account, a child of the department's account: <department slug>--<project slug>; the
        department's own for its default project."""
        if self.is_default:
            return naming.home(self.department.slug)
        return naming.project_account(self.department.slug, self.slug)

    @property
    def scheduling_slug(self) -> str:
        """What the scheduler and the backends know it as: its slug, or "" for the default project (the
        department's own work)."""
        return "" if self.is_default else self.slug
