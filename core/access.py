"""The one access rule of the portal: platform admin, department lead, department member.

Every view, API permission class, template (the `access` template library: `user|is_admin`,
`user|leads:department`) and `visible_to(user)` asks here; nothing else reads `is_staff`.

* A **platform admin** is an active staff user or an active superuser: sees and changes everything.
* A **lead** of a department manages its members and sees its audit trail; a **member** submits its jobs.
  Projects inside a department (tenancy.Project): its leads manage them; a project's members (and the
  department's leads) submit to it (`may_use_project`).
  Roles are `Membership` rows (tenancy); core reads them through the user's `memberships` relation so that
  the rule is written once, below every app that uses it.
* An inactive account is nobody: not an admin, not a lead, not a member.

The `require_*` functions raise PermissionDenied with a sentence saying who may: Django shows it on the
403 page and DRF answers it as the `detail` of its 403.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from rest_framework import permissions

from core.choices import TextChoices


class Role(TextChoices):
    LEAD = "lead", gettext_lazy("Department lead")
    MEMBER = "member", gettext_lazy("Department member")


def is_signed_in(user) -> bool:
    """Signed in with an active account (AnonymousUser is never active): the least any role needs."""
    return bool(user is not None and user.is_authenticated and user.is_active)


def is_admin(user) -> bool:
    """Platform admin: an active staff user or superuser."""
    return is_signed_in(user) and bool(user.is_staff or user.is_superuser)


def led_department_ids(user):
    """The departments `user` leads, as a subquery of ids (empty for anonymous and inactive users)."""
    if not is_signed_in(user):
        return []
    return user.memberships.filter(role=Role.LEAD).values("department_id")


def member_department_ids(user):
    """The departments `user` belongs to in any role, as a subquery of ids."""
    if not is_signed_in(user):
        return []
    return user.memberships.values("department_id")


def member_project_ids(user):
    """The projects `user` is in (any project role), as a subquery of ids (tenancy.ProjectMembership)."""
    if not is_signed_in(user):
        return []
    return user.project_memberships.values("project_id")


def may_use_project(user, project) -> bool:
    """Whether `user` may submit jobs to `project` (a tenancy Project) and see it: an admin, a lead of its
    department, or one of its members who is still a member of its department. A department's default
    project (`is_default`) is its members' who are in none of its named projects."""
    if leads(user, project.department_id):
        return True
    if not is_signed_in(user):
        return False
    if getattr(project, "is_default", False):
        return (
            user.memberships.filter(department_id=project.department_id).exists()
            and not user.project_memberships.filter(
                project__department_id=project.department_id, project__is_default=False
            ).exists()
        )
    return (
        user.project_memberships.filter(project_id=project.pk).exists()
        and user.memberships.filter(department_id=project.department_id).exists()
    )


def leads(user, department) -> bool:
    """Whether `user` is an admin or a lead of `department` (a Department or its pk): who manages its
    members."""
    if is_admin(user):
        return True
    if not is_signed_in(user):
        return False
    department_id = getattr(department, "pk", department)
    return user.memberships.filter(role=Role.LEAD, department_id=department_id).exists()


def leads_any(user) -> bool:
    """Whether `user` is an admin or leads at least one department: who may open the audit log."""
    if is_admin(user):
        return True
    return is_signed_in(user) and user.memberships.filter(role=Role.LEAD).exists()


def require_admin(user, what: str | None = None) -> None:
    """Refuse (403, with the reason) anyone but a platform admin. `what` (a noun phrase: "notification
    settings") names what is refused, in the viewer's language when the caller marked it (gettext_lazy)."""
    if not is_admin(user):
        if what is None:
            raise PermissionDenied(_("Only platform admins may use this page."))
        raise PermissionDenied(_("Only platform admins may use %(what)s.") % {"what": what})


def require_lead(user, department, what: str | None = None) -> None:
    """Refuse (403, with the reason) anyone but an admin or a lead of `department` (a Department). `what` (a
    verb phrase: "change its projects") as in require_admin."""
    if not leads(user, department):
        if what is None:
            raise PermissionDenied(
                _("Only leads of %(department)s and platform admins may change its members.")
                % {"department": department}
            )
        raise PermissionDenied(
            _("Only leads of %(department)s and platform admins may %(what)s.")
            % {"department": department, "what": what}
        )


def require_project_manager(user, department, what: str | None = None) -> None:
    """Refuse (403) anyone but an admin or a lead of `department`: who creates, changes and deletes its
    projects and moves its members between them. (A project lead's role is for the work, not for quota.)"""
    if what is None and not leads(user, department):
        raise PermissionDenied(
            _("Only leads of %(department)s and platform admins may change its projects.")
            % {"department": department}
        )
    require_lead(user, department, what)


def require_any_lead(user, what: str) -> None:
    """Refuse (403, with the reason) anyone but an admin or a lead of some department."""
    if not leads_any(user):
        raise PermissionDenied(
            _("Only platform admins and department leads may use %(what)s.") % {"what": what}
        )


class IsAdmin(permissions.BasePermission):
    """DRF: platform admins only."""

    message = gettext_lazy("Only platform admins may use this endpoint.")

    def has_permission(self, request, view):
        return is_admin(request.user)


class IsAdminOrReadOnly(permissions.BasePermission):
    """DRF: anyone signed in reads (visible_to narrows what), platform admins write."""

    message = gettext_lazy("Only platform admins may change this.")

    def has_permission(self, request, view):
        return request.method in permissions.SAFE_METHODS or is_admin(request.user)
