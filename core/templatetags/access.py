"""The access rule in templates (core.access): ``{% load access %}``, then ``{% if user|is_admin %}`` or
``{% if user|leads:department %}``. Templates never read `is_staff` themselves."""

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
