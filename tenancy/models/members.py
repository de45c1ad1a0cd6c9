"""A person's place in a department (Membership) or in one of its projects (ProjectMembership): the role,
and where it came from (by hand, or an identity provider's group)."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext, gettext_lazy

from core.access import (
    Role,
    is_admin,
    is_signed_in,
    led_department_ids,
    member_department_ids,
    member_project_ids,
)
from tenancy.choices import ProjectRole, RoleOrigin
from tenancy.models.departments import Department
from tenancy.models.projects import Project


class MembershipRuleQuerySet(models.QuerySet):
    """The one visibility rule of a person's place in a department or a project: admins see all; a
    department's leads see its members (and its projects' members); anyone else sees the people of the
    departments (and of the projects) they belong to, themselves among them: their colleagues' usernames,
    names and roles, read-only (never another department's people; nothing here carries an email or a
    token, and managing them stays with the leads: core.access.require_lead)."""

    department_id_path = "department_id"  # the lookup from the row to its department
    scope_id_path = "department_id"  # the lookup from the row to what it is a membership of

    @staticmethod
    def scope_ids_of(user):
        """The scopes (departments, projects) `user` belongs to, as a subquery of ids."""
        return member_department_ids(user)

    def visible_to(self, user):
        if is_admin(user):
            return self
        if not is_signed_in(user):
            return self.none()
        return self.filter(
            Q(**{f"{self.department_id_path}__in": led_department_ids(user)})
            | Q(user=user)
            | Q(
                **{
                    f"{self.scope_id_path}__in": self.scope_ids_of(user),
                    f"{self.department_id_path}__in": member_department_ids(user),
                }
            )
        )


class MembershipQuerySet(MembershipRuleQuerySet):
    department_id_path = "department_id"


class MembershipBase(models.Model):
    """What a department Membership and a ProjectMembership share: where the role came from, when it was
    granted, and how it reads. Each keeps its own user, scope and role fields (their related names and
    choices differ) and its own `unique_member` constraint (same name, its own scope). Abstract: no table,
    no migration."""

    origin = models.CharField(
        max_length=10,
        choices=RoleOrigin.choices,
        default=RoleOrigin.MANUAL,
        help_text=gettext_lazy(
            "Granted by hand (stays until removed by hand), or by an identity provider's group (re-synced "
            "at each sign-in through it, removed when the group is gone). A change by hand makes it a hand "
            "grant."
        ),
        verbose_name=gettext_lazy("origin"),
    )
    created_at = models.DateTimeField(auto_now_add=True, verbose_name=gettext_lazy("created at"))

    scope_field = "department"  # the field naming what it is a membership of

    class Meta:
        abstract = True

    def __str__(self):
        # The viewer's language (the admin's titles); audit records keep it in English (core.audit).
        return gettext("%(user)s (%(role)s, %(scope)s)") % {
            "user": self.user,
            "role": self.get_role_display(),
            "scope": getattr(self, self.scope_field),
        }


class Membership(MembershipBase):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="memberships",
        verbose_name=gettext_lazy("user"),
    )
    department = models.ForeignKey(
        Department,
        on_delete=models.CASCADE,
        related_name="memberships",
        verbose_name=gettext_lazy("department"),
    )
    role = models.CharField(
        max_length=10, choices=Role.choices, default=Role.MEMBER, verbose_name=gettext_lazy("role")
    )

    objects = MembershipQuerySet.as_manager()

    class Meta:
        verbose_name = gettext_lazy("membership")
        verbose_name_plural = gettext_lazy("memberships")
        ordering = ["department__name", "role", "user__username"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "department"], name="%(app_label)s_%(class)s_unique_member"
            ),
        ]


class ProjectMembershipQuerySet(MembershipRuleQuerySet):
    department_id_path = "project__department_id"
    scope_id_path = "project_id"

    @staticmethod
    def scope_ids_of(user):
        return member_project_ids(user)


class ProjectMembership(MembershipBase):
    """A department member's place in one of the department's projects (a person may be in several, as
    in Run:ai); the department Membership stays the one record of their department role. Removing the
    department membership removes these (tenancy.projects)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="project_memberships",
        verbose_name=gettext_lazy("user"),
    )
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="memberships", verbose_name=gettext_lazy("project")
    )
    role = models.CharField(
        max_length=10,
        choices=ProjectRole.choices,
        default=ProjectRole.MEMBER,
        verbose_name=gettext_lazy("role"),
    )

    objects = ProjectMembershipQuerySet.as_manager()
    scope_field = "project"

    class Meta:
        verbose_name = gettext_lazy("project membership")
        verbose_name_plural = gettext_lazy("project memberships")
        ordering = ["project__name", "role", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "project"], name="%(app_label)s_%(class)s_unique_member"),
        ]

    @property
    def department_id(self) -> int:
        """Its project's department (the audit files its changes under it)."""
        return self.project.department_id
