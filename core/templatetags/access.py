"""The access rule in templates (core.access): ``{% load access %}``, then ``{% if user|is_admin %}`` or
``{% if user|leads:department %}``. Templates never read `is_staff` themselves."""

import contextlib

from django import template

from core import access

register = template.Library()


@register.filter
def is_admin(user) -> bool:
    """Platform admin: show admin-only links and buttons."""
    return access.is_admin(user)


@register.filter
def leads(user, department) -> bool:
    """Admin or lead of `department`: show the controls that manage its members."""
    return access.leads(user, department)


@register.filter
def leads_any(user) -> bool:
    """Admin or lead of some department: show the audit log link. Kept on the user object for the request
    (a view that already read the user's roles may set `_leads_any` itself, saving the query)."""
    cached = getattr(user, "_leads_any", None)
    if cached is None:
        cached = access.leads_any(user)
        with contextlib.suppress(AttributeError):  # a read-only user object: ask each time
            user._leads_any = cached
    return cached
