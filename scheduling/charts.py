"""Plotly figures for the department and admin dashboards, built server-side from selector results.

Figures are embedded as JSON in a <div data-plotly-figure> that static/js/portal.js draws (no inline script:
the Content-Security-Policy allows none); pages load the plotly.js the portal serves from the plotly package
(`{% static 'plotly/plotly.min.js' %}`), never a CDN.

Each figure is one spec (plain dicts of traces and layout). `*_figure` builds the validated go.Figure from it
(for tests and notebooks); the pages use `*_html`, which serializes the spec directly to the same HTML.
"""

from __future__ import annotations

from collections.abc import Iterable

import plotly.graph_objects as go
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.chart_style import GRID
from core.charts import figure as _figure
from core.charts import layout as _layout
from core.charts import to_html

__all__ = ["to_html"]  # the HTML of a figure, for the dashboards' views (core.charts)

# The portal's palette (static/css/portal.css): colour is paired with a legend name, never alone.
GUARANTEE = "#334155"
IN_QUOTA = "#16a34a"
BORROWED = "#f59e0b"
FAIR_SHARE = "#2563eb"
PENDING = "#94a3b8"


def _quota_history_spec(rows: list[dict], times: list) -> dict:
    def series(name: str) -> list[int]:
        return [row[name] for row in rows]

    traces = [
        {
            "type": "scatter",
            "name": _("In use, in quota"),
            "x": times,
            "y": series("in_quota"),
            "stackgroup": "in_use",
            "mode": "lines",
            "line": {"color": IN_QUOTA, "width": 1},
            "fillcolor": "rgba(22,163,74,0.35)",
            "hovertemplate": "%{y:,} GPUs",
        },
        {
            "type": "scatter",
            "name": _("In use, borrowed"),
            "x": times,
            "y": series("borrowed"),
            "stackgroup": "in_use",
            "mode": "lines",
            "line": {"color": BORROWED, "width": 1},
            "fillcolor": "rgba(245,158,11,0.45)",
            "hovertemplate": "%{y:,} GPUs",
        },
        {
            "type": "scatter",
            "name": _("Guaranteed"),
            "x": times,
            "y": series("guaranteed"),
            "mode": "lines",
            "line": {"color": GUARANTEE, "width": 2, "dash": "dash", "shape": "hv"},
            "hovertemplate": "%{y:,} GPUs",
        },
        {
            "type": "scatter",
            "name": _("Fair share"),
            "x": times,
            "y": series("fair_share"),
            "mode": "lines",
            "line": {"color": FAIR_SHARE, "width": 2},
            "hovertemplate": "%{y:,} GPUs",
        },
        {
            "type": "scatter",
            "name": _("Pending demand"),
            "x": times,
            "y": series("pending_demand"),
            "mode": "lines",
            "line": {"color": PENDING, "width": 1.5, "dash": "dot"},
            "hovertemplate": "%{y:,} GPUs",
            "visible": "legendonly",
        },
    ]
    layout = _layout(hovermode="x unified", xaxis=_time_axis())
    return {"data": traces, "layout": layout}


def quota_history_figure(history: Iterable[dict]) -> go.Figure:
    """Guaranteed vs in use (in quota + borrowed, stacked) vs fair share over time, from QuotaSnapshot rows.

    `history` rows carry taken_at, guaranteed, in_quota, borrowed, fair_share and pending_demand: the
    QuotaSnapshot values, then on the dashboard a last point of the live figures
    (scheduling.dashboard_data.DepartmentDashboard.history_to_now).
    """
    rows = list(history)
    return _figure(_quota_history_spec(rows, [_wall(row["taken_at"]) for row in rows]))


def quota_history_html(history: Iterable[dict], div_id: str, height: int = 360) -> str:
    """`to_html(quota_history_figure(history))`, without building the validated figure objects.

    The same traces and layout as plain dicts, and the same HTML (tests compare the two): for a day of
    five-minute snapshots plotly's validation and datetime encoding took ~35 ms of every dashboard request.
    """
    rows = list(history)
    # The ISO 8601 text plotly's JSON encoder writes for a datetime, made once for the five traces.
    times = [_wall(row["taken_at"]) for row in rows]
    return to_html(_quota_history_spec(rows, times), div_id=div_id, height=height)


BARS = (
    (gettext_lazy("Guarantee"), "guaranteed", GUARANTEE),
    (gettext_lazy("In use, in quota"), "in_quota", IN_QUOTA),
    (gettext_lazy("In use, borrowed"), "borrowed", BORROWED),
    (gettext_lazy("Fair share"), "fair_share", FAIR_SHARE),
    (gettext_lazy("Pending demand"), "pending_demand", PENDING),
)


def _departments_spec(positions: list) -> dict:
    names = [p.department.name for p in positions]
    bars = [
        {
            "type": "bar",
            "name": str(label),
            "x": names,
            "y": [getattr(p, attribute) for p in positions],
            "marker": {"color": colour},
            "hovertemplate": "%{x}: %{y:,} GPUs<extra>" + str(label) + "</extra>",
        }
        for label, attribute, colour in BARS
    ]
    return {"data": bars, "layout": _layout(barmode="group", bargap=0.22, bargroupgap=0.04)}


def departments_figure(positions: Iterable) -> go.Figure:
    """All departments side by side: guarantee, in quota, borrowed, fair share, pending demand (grouped bars).

    `positions` are `scheduling.usage.Position` objects.
    """
    return _figure(_departments_spec(list(positions)))


def departments_html(positions: Iterable, div_id: str, height: int = 360) -> str:
    """`to_html(departments_figure(positions))` from plain dicts, like `quota_history_html`."""
    return to_html(_departments_spec(list(positions)), div_id=div_id, height=height)


def _wall(moment) -> str:
    """A moment as plotly draws it: the wall-clock time in the viewer's zone (plotly.js ignores an ISO
    offset and would draw UTC wall-clock time whatever the page around the chart says)."""
    return timezone.localtime(moment).replace(tzinfo=None).isoformat()


def _time_axis() -> dict:
    """The time axis, titled with the viewer's zone (portal.web.middleware.ViewerTimezoneMiddleware)."""
    return {
        "title": {"text": timezone.get_current_timezone_name()},
        "gridcolor": GRID,
        # Dates as numbers, the same in every language (plotly's own month names are English only).
        "tickformat": "%m-%d %H:%M",
        "hoverformat": "%Y-%m-%d %H:%M",
    }


UTILIZATION = "#7c3aed"
SHORT_RANGE_S = 15 * 60  # a time axis shorter than this shows seconds
LINE_COLOURS = ("#2563eb", "#16a34a", "#f59e0b", "#dc2626", "#0891b2", "#7c3aed", "#db2777", "#65a30d")


def _utilization_spec(
    series: dict[str, list[tuple]], names: dict[str, str] | None = None, x_range: tuple | None = None
) -> dict:
    names = names or {}
    traces = []
    for number, (key, points) in enumerate(series.items()):
        colour = UTILIZATION if key == "mean" else LINE_COLOURS[number % len(LINE_COLOURS)]
        traces.append(
            {
                "type": "scatter",
                "name": names.get(key, _("Mean of its GPUs") if key == "mean" else key),
                "x": [_wall(at) for at, _ in points],
                "y": [round(value, 2) for _, value in points],
                # One or two samples (a job that just started) would draw no line: show them as points.
                "mode": "lines" if len(points) > 2 else "lines+markers",
                "line": {"color": colour, "width": 1.5},
                "hovertemplate": "%{y:.1f} %",
                # A gap in the samples (the GPU had no data) stays a gap, not a straight line across it.
                "connectgaps": False,
            }
        )
    xaxis = _time_axis()
    if x_range:  # the range asked for, so the chart ends now even when the last sample is minutes old
        xaxis["range"] = [_wall(moment) for moment in x_range]
        if (x_range[1] - x_range[0]).total_seconds() < SHORT_RANGE_S:  # a job minutes old: ticks a minute
            xaxis["tickformat"] = "%H:%M:%S"  # apart or less would all read the same minute
            xaxis["hoverformat"] = "%Y-%m-%d %H:%M:%S"
    layout = _layout(
        hovermode="x unified",
        xaxis=xaxis,
        yaxis={
            "title": {"text": _("Utilization (%)")},
            "range": [0, 100],
            "gridcolor": GRID,
            "zeroline": False,
        },
    )
    return {"data": traces, "layout": layout}


def utilization_figure(
    series: dict[str, list[tuple]], names: dict[str, str] | None = None, x_range: tuple | None = None
) -> go.Figure:
    """GPU utilization over time: one line per key of `series` ({key: [(datetime, percent)]}, as
    tenancy.metrics_source.utilization_history returns it), labelled by `names` (key -> legend name), over
    `x_range` (start, end) when given."""
    return _figure(_utilization_spec(series, names, x_range))


def utilization_html(
    series: dict[str, list[tuple]],
    div_id: str,
    names: dict | None = None,
    height=300,
    x_range: tuple | None = None,
) -> str:
    """`to_html(utilization_figure(...))` from plain dicts, like `quota_history_html`."""
    return to_html(_utilization_spec(series, names, x_range), div_id=div_id, height=height)
