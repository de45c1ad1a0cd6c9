"""Plotly figures for the department and admin dashboards, built server-side from selector results.

Figures are embedded without plotly.js (`include_plotlyjs=False`); pages load the copy the portal serves
from the plotly package (`{% static 'plotly/plotly.min.js' %}`), never a CDN.
"""

from __future__ import annotations

from collections.abc import Iterable

import plotly.graph_objects as go
import plotly.io as pio

# The portal's palette (static/css/portal.css): colour is paired with a legend name, never alone.
GUARANTEE = "#334155"
IN_QUOTA = "#16a34a"
BORROWED = "#f59e0b"
FAIR_SHARE = "#2563eb"
PENDING = "#94a3b8"
FONT = "system-ui, -apple-system, Segoe UI, Roboto, Helvetica Neue, Arial, sans-serif"
CONFIG = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


def _layout(**extra) -> dict:
    return {
        "margin": {"l": 56, "r": 16, "t": 36, "b": 44},
        "font": {"family": FONT, "size": 12, "color": "#17202c"},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "#ffffff",
        "legend": {
            "orientation": "h",
            "yanchor": "bottom",
            "y": 1.02,
            "xanchor": "left",
            "x": 0,
            "traceorder": "normal",
        },
        "yaxis": {
            "title": {"text": "GPUs"},
            "rangemode": "tozero",
            "gridcolor": "#e5e9f0",
            "zeroline": False,
        },
        "xaxis": {"gridcolor": "#eef1f5"},
        **extra,
    }


def quota_history_figure(history: Iterable[dict]) -> go.Figure:
    """Guaranteed vs in use (in quota + borrowed, stacked) vs fair share over time, from QuotaSnapshot rows.

    `history` rows carry taken_at, guaranteed, in_quota, borrowed, fair_share and pending_demand.
    """
    rows = list(history)
    times = [row["taken_at"] for row in rows]

    def series(name: str) -> list[int]:
        return [row[name] for row in rows]

    traces = [
        go.Scatter(
            name="In use, in quota",
            x=times,
            y=series("in_quota"),
            stackgroup="in_use",
            mode="lines",
            line={"color": IN_QUOTA, "width": 1},
            fillcolor="rgba(22,163,74,0.35)",
            hovertemplate="%{y:,} GPUs",
        ),
        go.Scatter(
            name="In use, borrowed",
            x=times,
            y=series("borrowed"),
            stackgroup="in_use",
            mode="lines",
            line={"color": BORROWED, "width": 1},
            fillcolor="rgba(245,158,11,0.45)",
            hovertemplate="%{y:,} GPUs",
        ),
        go.Scatter(
            name="Guaranteed",
            x=times,
            y=series("guaranteed"),
            mode="lines",
            line={"color": GUARANTEE, "width": 2, "dash": "dash", "shape": "hv"},
            hovertemplate="%{y:,} GPUs",
        ),
        go.Scatter(
            name="Fair share",
            x=times,
            y=series("fair_share"),
            mode="lines",
            line={"color": FAIR_SHARE, "width": 2},
            hovertemplate="%{y:,} GPUs",
        ),
        go.Scatter(
            name="Pending demand",
            x=times,
            y=series("pending_demand"),
            mode="lines",
            line={"color": PENDING, "width": 1.5, "dash": "dot"},
            hovertemplate="%{y:,} GPUs",
            visible="legendonly",
        ),
    ]
    figure = go.Figure(traces)
    figure.update_layout(
        _layout(hovermode="x unified", xaxis={"title": {"text": "UTC"}, "gridcolor": "#eef1f5"})
    )
    return figure


def departments_figure(positions: Iterable) -> go.Figure:
    """All departments side by side: guarantee, in quota, borrowed, fair share, pending demand (grouped bars).

    `positions` are `tenancy.selectors.Position` objects.
    """
    positions = list(positions)
    names = [p.department.name for p in positions]
    bars = (
        ("Guarantee", "guaranteed", GUARANTEE),
        ("In use, in quota", "in_quota", IN_QUOTA),
        ("In use, borrowed", "borrowed", BORROWED),
        ("Fair share", "fair_share", FAIR_SHARE),
        ("Pending demand", "pending_demand", PENDING),
    )
    figure = go.Figure(
        [
            go.Bar(
                name=label,
                x=names,
                y=[getattr(p, attribute) for p in positions],
                marker_color=colour,
                hovertemplate="%{x}: %{y:,} GPUs<extra>" + label + "</extra>",
            )
            for label, attribute, colour in bars
        ]
    )
    figure.update_layout(_layout(barmode="group", bargap=0.22, bargroupgap=0.04))
    return figure


def to_html(figure: go.Figure, div_id: str, height: int = 360) -> str:
    """The figure as an embeddable <div> + <script>, without plotly.js itself."""
    return pio.to_html(
        figure,
        full_html=False,
        include_plotlyjs=False,
        div_id=div_id,
        config=CONFIG,
        default_height=f"{height}px",
        default_width="100%",
    )
