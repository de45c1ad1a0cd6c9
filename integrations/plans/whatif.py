"""The wizard's what-if: the layouts a preview compares, and the page's table and chart of a run.

The replay itself is scheduling's (scheduling.whatif_runs: rows, Celery tasks; scheduling.whatif: the pure
conversion and comparison); this module only says which layouts the wizard asks for and draws the result.
The chart is a plotly figure built here and embedded as JSON in a <div data-plotly-figure> that
static/js/portal.js draws with the plotly.js the portal serves (no inline script, no CDN).
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence

from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core import sentences_i18n
from core.chart_style import CONFIG, FONT, GRID, TEXT, TRANSPARENT
from core.sentences import gettext_noop, say
from inventory.models import Rack
from inventory.planning import PlannedPartition, preset_layout
from scheduling.whatif import Carving
from scheduling.whatif_runs import NOW, Progress

# The layouts' labels, stored with a run in English (core.sentences templates), shown in the viewer's
# language.
THIS_PLAN = gettext_noop("This plan")
AS_PRESET = gettext_noop("%(rack)s as %(preset)s")
# One colour per layout, in order (the cluster now in slate, the plan in blue), each named in the legend.
COLOURS = ("#334155", "#2563eb", "#f59e0b", "#16a34a", "#9333ea", "#db2777")
# The chart's three panels: (figure keys, title, unit).
PANELS = (
    (("avg_wait_s", "p95_wait_s", "avg_jct_s"), gettext_lazy("Wait and job completion time"), "hours"),
    (("multi_tray_in_one_partition",), gettext_lazy("Multi-tray jobs in one partition"), "%"),
    (("guarantee_shortfall_gpu_s",), gettext_lazy("Guarantee shortfall"), "GPU-hours"),
)
# A MIG what-if's panels (scheduling.whatif.MIG_FIGURES).
MIG_PANELS = (
    (("small_avg_wait_s", "small_p95_wait_s", "multi_tray_avg_wait_s"), gettext_lazy("Wait"), "hours"),
    (
        ("slice_utilization", "multi_tray_in_one_partition"),
        gettext_lazy("Slices used, gangs kept whole"),
        "%",
    ),
    (("avg_stranded_slices",), gettext_lazy("Stranded slices"), "slices"),
)
# The units as the chart says them, in the reader's language.
UNIT_WORDS = {
    "hours": gettext_lazy("hours"),
    "GPU-hours": gettext_lazy("GPU-hours"),
    "slices": gettext_lazy("compute slices"),
}
DOMAINS = ((0.0, 0.44), (0.53, 0.73), (0.82, 1.0))
LABEL_WIDTH = 18  # a bar's label breaks into lines of about this many characters (at spaces), not slanted


def carving(rack: Rack, partitions: Sequence[PlannedPartition]) -> Carving:
    return Carving(rack.name, tuple((p.name, tuple(p.slots), p.department or None) for p in partitions))


def layouts(
    rack: Rack, plan: Sequence[PlannedPartition], now: Sequence[PlannedPartition], also: Sequence[str]
):
    """(label, carvings) of the layouts to compare after the cluster as it is: the plan, then each preset
    of `also` on the rack (shared partitions), leaving out those that are the plan or the rack now."""
    chosen = [(THIS_PLAN, [carving(rack, plan)])]
    seen = {_shape(plan), _shape(now)}
    for preset in also:
        partitions = preset_layout(preset)
        if _shape(partitions) in seen:
            continue
        seen.add(_shape(partitions))
        chosen.append((say(AS_PRESET, rack=rack.name, preset=preset), [carving(rack, partitions)]))
    return chosen


def _shape(partitions: Sequence[PlannedPartition]) -> frozenset:
    return frozenset((tuple(p.slots), p.department or None) for p in partitions)


def chart_html(progress: Progress, div_id: str = "whatif-chart", height: int = 340) -> str:
    """The comparison as three panels of bars, one colour per layout (the table beside it has the
    numbers)."""
    done = [layout for layout in progress.layouts if layout.figures]
    panels = MIG_PANELS if progress.run.tray else PANELS
    data = []
    for index, layout in enumerate(done):
        label = sentences_i18n.translate(layout.label)
        colour = COLOURS[layout.position % len(COLOURS)]
        for panel, (keys, _title, unit) in enumerate(panels, start=1):
            unit_words = UNIT_WORDS.get(unit, unit)
            labels = [
                "<br>".join(
                    textwrap.wrap(
                        sentences_i18n.translate(next(r["label"] for r in progress.rows if r["key"] == key)),
                        LABEL_WIDTH,
                    )
                )
                for key in keys
            ]
            values = [_value(layout.figures.get(key), unit) for key in keys]
            data.append(
                {
                    "type": "bar",
                    "name": label,
                    "legendgroup": layout.label,
                    "showlegend": panel == 1,
                    "x": labels,
                    "y": values,
                    "marker": {"color": colour},
                    "xaxis": f"x{panel if panel > 1 else ''}",
                    "yaxis": f"y{panel if panel > 1 else ''}",
                    "hovertemplate": f"{label}<br>%{{x}}: %{{y:,.2f}} {unit_words}<extra></extra>",
                    "offsetgroup": str(index),
                }
            )
    frame = {
        "barmode": "group",
        "bargap": 0.25,
        "margin": {"l": 56, "r": 16, "t": 56, "b": 64},
        "font": {"family": FONT, "size": 12, "color": TEXT},
        "paper_bgcolor": TRANSPARENT,
        "plot_bgcolor": TRANSPARENT,
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.12, "xanchor": "left", "x": 0},
        "annotations": [],
    }
    for panel, ((_keys, title, unit), (left, right)) in enumerate(zip(panels, DOMAINS, strict=True), start=1):
        suffix = str(panel) if panel > 1 else ""
        frame[f"xaxis{suffix}"] = {"domain": [left, right], "anchor": f"y{suffix}", "gridcolor": GRID}
        frame[f"yaxis{suffix}"] = {
            "anchor": f"x{suffix}",
            "title": {"text": str(UNIT_WORDS.get(unit, unit))},
            "rangemode": "tozero",
            "gridcolor": GRID,
            "zeroline": False,
            **({"range": [0, 100]} if unit == "%" else {}),
        }
        frame["annotations"].append(
            {
                "text": f"<b>{title}</b>",
                "xref": "paper",
                "yref": "paper",
                "x": (left + right) / 2,
                "y": 1.02,
                "xanchor": "center",
                "yanchor": "bottom",
                "showarrow": False,
            }
        )
    return format_html(
        '<div id="{}" class="plotly-chart whatif-chart" data-plotly-figure="{}" data-plotly-config="{}" '
        'style="height: {}px; width: 100%" role="img" aria-label="{}"></div>',
        div_id,
        json.dumps({"data": data, "layout": frame}),
        json.dumps(CONFIG),
        height,
        _("Bar chart of the comparison: %(layouts)s")
        % {"layouts": ", ".join(sentences_i18n.translate(one.label) for one in done)},
    )


def _value(value, unit: str) -> float | None:
    if value is None:
        return None
    if unit == "%":
        return round(value * 100, 2)
    if unit == "slices":
        return round(value, 3)
    return round(value / 3600, 3)


def context(progress: Progress) -> dict:
    """What the what-if partial shows."""
    run = progress.run
    return {
        "whatif": progress,
        "run": run,
        "now_label": NOW,
        "chart": chart_html(progress)
        if progress.rows and any(one.figures for one in progress.layouts)
        else "",
        "labels": [layout.label for layout in progress.layouts],
        "failed_layouts": [layout for layout in progress.layouts if layout.error],
    }
