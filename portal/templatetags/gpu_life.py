"""`{% plotly_js_url %}`: the URL of plotly's bundle under its content-hashed name (portal.static_assets)."""

from django import template
from django.templatetags.static import static

from portal.static_assets import plotly_name

register = template.Library()


@register.simple_tag
def plotly_js_url() -> str:
    return static(plotly_name())
