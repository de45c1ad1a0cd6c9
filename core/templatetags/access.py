"""The access rule in templates (core.access): ``{% load access %}``, then ``{% if user|is_admin %}`` or
``{% if user|leads:department %}``. Templates never read `is_staff` themselves."""

import contextlib

from django import template

from core import access
from core.access import Role

register = template.Library()


@register.filter
def is_admin(user) -> bool:
    """Platform admin: show admin-only links and buttons."""
    return access.is_admin(user)


@register.filter
def leads(user, department) -> bool:
    """Admin or lead of `department`: show the controls that manage its members."""
    return access.leads(user, department)


def _menu_roles(user) -> set[str]:
    """The roles `user` holds in any department, read once per request for the menu (one query; none for a
    platform admin, whose menu does not depend on them). A view that already read them may set `_menu_roles`
    on the user itself."""
    cached = getattr(user, "_menu_roles", None)
    if cached is None:
        signed_in = access.is_signed_in(user) and not access.is_admin(user)
        cached = set(user.memberships.values_list("role", flat=True)) if signed_in else set()
        with contextlib.suppress(AttributeError):  # a read-only user object: ask each time
            user._menu_roles = cached
    return cached


@register.filter
def leads_any(user) -> bool:
    """Admin or lead of some department: show the audit log link."""
    return access.is_admin(user) or Role.LEAD in _menu_roles(user)


@register.filter
def in_a_department(user) -> bool:
    """Admin or member (any role) of some department: show "Submit job"."""
    return access.is_admin(user) or bool(_menu_roles(user))
