"""`{% load charts %}`, then `{% plotly_js_url %}`: the URL of plotly's bundle under its content-hashed name
(core.static_assets), for the pages of every app that draw charts."""

from django import template
from django.templatetags.static import static

from core.static_assets import plotly_name

register = template.Library()


@register.simple_tag
def plotly_js_url() -> str:
    return static(plotly_name())
