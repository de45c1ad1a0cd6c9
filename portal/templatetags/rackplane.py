"""Small display helpers shared by the portal's templates."""

from django import template

register = template.Library()

# Icons always come with a text label or a title: colour is never the only carrier of meaning.
HEALTH_ICONS = {
    "healthy": "✓",
    "limited_capacity": "◐",
    "unhealthy": "✕",
    "not_supported": "\u2013",  # en dash
    "unknown": "?",
}
STATE_ICONS = {"up": "●", "drain": "◒", "down": "✕", "maintenance": "⚙", "needs_service": "⚑"}


@register.filter
def short_uuid(value, length=8):
    """The first characters of a UUID (the full value belongs in a title attribute)."""
    if not value:
        return ""
    return str(value)[: int(length)]


@register.filter
def health_icon(value):
    return HEALTH_ICONS.get(str(value), "?")


@register.filter
def state_icon(value):
    return STATE_ICONS.get(str(value), "•")


@register.filter
def gib(mib):
    """MiB as GiB with one decimal ("184.9 GiB")."""
    if mib in (None, ""):
        return ""
    return f"{int(mib) / 1024:,.1f} GiB"
