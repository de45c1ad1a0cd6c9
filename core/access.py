"""The one access rule of the portal: platform admin, department lead, department member.

Every view, API permission class, template and `visible_to(user)` asks here; nothing else reads `is_staff`.

* A **platform admin** is an active staff user or a superuser: sees and changes everything.
* A **lead** of a department manages its members and sees its audit trail; a **member** submits its jobs.
  Roles are `Membership` rows (tenancy); core reads them through the user's `memberships` relation so that
  the rule is written once, below every app that uses it.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db import models
from rest_framework import permissions


class Role(models.TextChoices):
    LEAD = "lead", "Department lead"
    MEMBER = "member", "Department member"


def is_admin(user) -> bool:
    """Platform admin: staff or superuser (and signed in)."""
    return bool(user is not None and user.is_authenticated and (user.is_staff or user.is_superuser))


def led_department_ids(user):
    """The departments `user` leads, as a subquery of ids (empty for anonymous users)."""
    if not user.is_authenticated:
        return []
    return user.memberships.filter(role=Role.LEAD).values("department_id")


def member_department_ids(user):
    """The departments `user` belongs to in any role, as a subquery of ids."""
    if not user.is_authenticated:
        return []
    return user.memberships.values("department_id")


def leads(user, department) -> bool:
    """Whether `user` is an admin or a lead of `department` (a Department or its pk)."""
    if is_admin(user):
        return True
    if not user.is_authenticated:
        return False
    department_id = getattr(department, "pk", department)
    return user.memberships.filter(role=Role.LEAD, department_id=department_id).exists()


def require_admin(user, what: str = "this page") -> None:
    """Views: refuse (403, with the reason) anyone but a platform admin."""
    if not is_admin(user):
        raise PermissionDenied(f"Only platform admins may use {what}.")


class IsAdmin(permissions.BasePermission):
    """DRF: platform admins only."""

    message = "Only platform admins may use this endpoint."

    def has_permission(self, request, view):
        return is_admin(request.user)


class IsAdminOrReadOnly(permissions.BasePermission):
    """DRF: anyone signed in reads (visible_to narrows what), platform admins write."""

    message = "Only platform admins may change this."

    def has_permission(self, request, view):
        return request.method in permissions.SAFE_METHODS or is_admin(request.user)
