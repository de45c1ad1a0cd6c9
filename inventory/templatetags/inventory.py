"""The icons of a tray's or a GPU's health and state: `{% load inventory %}`, then
`{{ tray.health|health_icon }}` or `{{ tray.state|state_icon }}`. Icons always come with a text label or a
title: colour is never the only carrier of meaning."""

from django import template

from inventory.choices import TrayState
from inventory.mig_options import layout_summary

register = template.Library()

HEALTH_ICONS = {
    "healthy": "✓",
    "limited_capacity": "◐",
    "unhealthy": "✕",
    "not_supported": "\u2013",  # en dash
    "unknown": "?",
}
STATE_ICONS = {"up": "●", "drain": "◒", "down": "✕", "maintenance": "⚙", "needs_service": "⚑"}


@register.filter
def health_icon(value):
    return HEALTH_ICONS.get(str(value), "?")


@register.filter
def state_icon(value):
    return STATE_ICONS.get(str(value), "•")


@register.filter
def state_label(value):
    """A tray state in words ("Needs service"), as the model's choices say it; the value if unknown."""
    try:
        return TrayState(str(value)).label
    except ValueError:
        return str(value)


@register.filter
def mig_devices(devices) -> str:
    """A tray's MIG layout devices ({"1g.23gb": 7}) as "7 \u00d7 1g.23gb, ..." (names and numbers only)."""
    return ", ".join(f"{count} \u00d7 {name}" for name, count in (devices or {}).items())


@register.filter
def mig_summary(layout) -> str:
    """A MIG layout (inventory.mig_layouts.MigLayout) in the viewer's language (inventory.mig_options)."""
    return layout_summary(layout)
