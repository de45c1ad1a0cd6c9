"""Plotly figures as the portal embeds them, for every app's charts: the layout they share and the HTML
that carries a figure's JSON to static/js/portal.js (no inline script: the Content-Security-Policy allows
none). The pages load the plotly.js the portal serves (`{% plotly_js_url %}`, core.static_assets), never a
CDN.

A figure is one spec (plain dicts of traces and layout): `figure` builds the validated go.Figure from it (for
tests and notebooks), `to_html` serializes the spec directly to the same HTML. The dashboards' figures are
scheduling.charts; the health centre's is inventory.health.centre.
"""

from __future__ import annotations

import json

import plotly.graph_objects as go
import plotly.io as pio
from django.utils.html import format_html
from django.utils.translation import gettext

from core.chart_style import CONFIG, FONT, GRID, TEXT, TRANSPARENT


def layout(**extra) -> dict:
    """The layout every chart shares (transparent, the portal's font, legend above); `extra` adds to it or
    replaces its keys."""
    return {
        "margin": {"l": 56, "r": 16, "t": 36, "b": 44},
        "font": {"family": FONT, "size": 12, "color": TEXT},
        "paper_bgcolor": TRANSPARENT,
        "plot_bgcolor": TRANSPARENT,
        # Unified hover boxes default to the paper colour: transparent would leave their text on the lines.
        # (Nested keys first, as plotly orders them: the pages are byte for byte the validated figure.)
        "hoverlabel": {"font": {"color": "#17202c"}, "bgcolor": "#ffffff", "bordercolor": GRID},
        "modebar": {"activecolor": "#2563eb", "bgcolor": TRANSPARENT, "color": TEXT},
        "legend": {
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.02,
            "xanchor": "left",
            "x": 0,
            "traceorder": "normal",
        },
        "yaxis": {
            "title": {"text": gettext("GPUs")},  # in the viewer's language, as the page around it
            "rangemode": "tozero",
            "gridcolor": GRID,
            "zeroline": False,
        },
        "xaxis": {"gridcolor": GRID},
        **extra,
    }


def figure(spec: dict) -> go.Figure:
    """The validated plotly figure of one of our specs, built as go.Figure(traces) + update_layout(layout)."""
    built = go.Figure(spec["data"])
    built.update_layout(spec["layout"])
    return built


def as_figure_dict(spec: dict) -> dict:
    """``figure(spec).to_dict()`` without building it, keys in the order plotly gives them, so the page is
    byte for byte the same (tests compare). Each trace's keys sorted (nested ones too), ``type`` last; in the
    layout the default template, then the nested objects we set, then the plain values (each in our order).
    """

    def by_name(value):
        return {key: by_name(value[key]) for key in sorted(value)} if isinstance(value, dict) else value

    data = [
        {**by_name({k: v for k, v in trace.items() if k != "type"}), "type": trace["type"]}
        for trace in spec["data"]
    ]
    layout = spec["layout"]
    return {
        "data": data,
        "layout": {
            "template": pio.templates[pio.templates.default].to_plotly_json(),
            **{key: value for key, value in layout.items() if isinstance(value, dict)},
            **{key: value for key, value in layout.items() if not isinstance(value, dict)},
        },
    }


def to_html(figure: go.Figure | dict, div_id: str, height: int = 360) -> str:
    """The figure as an embeddable <div> holding its JSON; static/js/portal.js draws it with plotly.js.

    `figure` may also be a ``{"data": [...], "layout": {...}}`` spec of ours: it is not validated.
    """
    if isinstance(figure, dict):
        figure = as_figure_dict(figure)
    return format_html(
        '<div id="{}" class="plotly-chart" data-plotly-figure="{}" data-plotly-config="{}" '
        'style="height: {}px; width: 100%"></div>',
        div_id,
        pio.to_json(figure, validate=False),
        json.dumps(CONFIG),
        height,
    )
