"""The wizard's what-if: the layouts a preview compares, and the page's table and chart of a run.

The replay itself is scheduling's (scheduling.whatif_runs: rows, Celery tasks; scheduling.whatif: the pure
conversion and comparison); this module only says which layouts the wizard asks for and draws the result.
The chart is a plotly figure built here and embedded as JSON in a <div data-plotly-figure> that
static/js/portal.js draws with the plotly.js the portal serves (no inline script, no CDN).
"""

from __future__ import annotations

import json
import textwrap
import unicodedata
from collections.abc import Sequence

from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, pgettext

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
LABEL_WIDTH = 16  # a bar's label breaks into lines of about this many characters (at spaces), not slanted


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


def chart_html(progress: Progress, div_id: str = "whatif-chart", height: int = 300) -> str:
    """The comparison as bars, one colour per layout (the table beside it has the numbers): one chart per
    panel, side by side on a wide screen and stacked on a phone (CSS grid .whatif-charts), so a panel's
    title, axis title and labels never run into another's. The first chart carries the legend."""
    done = [layout for layout in progress.layouts if layout.figures]
    panels = MIG_PANELS if progress.run.tray else PANELS
    charts = []
    for panel, (keys, title, unit) in enumerate(panels, start=1):
        unit_words = str(UNIT_WORDS.get(unit, unit))
        labels = [
            _wrapped(sentences_i18n.translate(next(r["label"] for r in progress.rows if r["key"] == key)))
            for key in keys
        ]
        data = []
        for index, layout in enumerate(done):
            label = sentences_i18n.translate(layout.label)
            data.append(
                {
                    "type": "bar",
                    "name": label,
                    "legendgroup": layout.label,
                    "showlegend": panel == 1,
                    "x": labels,
                    "y": [_value(layout.figures.get(key), unit) for key in keys],
                    "marker": {"color": COLOURS[layout.position % len(COLOURS)]},
                    "hovertemplate": f"{label}<br>%{{x}}: %{{y:,.2f}} {unit_words}<extra></extra>",
                    "offsetgroup": str(index),
                }
            )
        frame = {
            "title": {
                "text": f"<b>{title}</b>",
                # At the chart's top, whether a legend follows it or not: the panels' titles line up.
                "x": 0,
                "xanchor": "left",
                "y": 1,
                "yref": "container",
                "yanchor": "top",
                "pad": {"t": 6},
                "font": {"size": 13},
            },
            "barmode": "group",
            "bargap": 0.25,
            "margin": {"l": 48, "r": 8, "t": 40, "b": 8},
            "font": {"family": FONT, "size": 12, "color": TEXT},
            "paper_bgcolor": TRANSPARENT,
            "plot_bgcolor": TRANSPARENT,
            "showlegend": panel == 1,
            "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0},
            # Labels laid flat and given the room they need (automargin), never slanted over the bars.
            "xaxis": {"gridcolor": GRID, "tickangle": 0, "automargin": True},
            "yaxis": {
                "title": {"text": unit_words},
                "rangemode": "tozero",
                "gridcolor": GRID,
                "zeroline": False,
                "automargin": True,
                **({"range": [0, 100]} if unit == "%" else {}),
            },
        }
        if panel == 1:
            frame["margin"]["t"] = 40 + 24 * len(done)  # the legend's rows above the bars
        charts.append(
            format_html(
                '<div id="{}" class="plotly-chart whatif-chart" data-panel="{}" data-plotly-figure="{}" '
                'data-plotly-config="{}" style="height: {}px; width: 100%" role="img" aria-label="{}"></div>',
                div_id if panel == 1 else f"{div_id}-{panel}",
                panel,
                json.dumps({"data": data, "layout": frame}),
                json.dumps(CONFIG),
                height + (24 * len(done) if panel == 1 else 0),
                title,
            )
        )
    return format_html(
        '<div class="whatif-charts" role="group" aria-label="{}">{}</div>',
        _("Bar chart of the comparison: %(layouts)s")
        % {
            "layouts": pgettext("between the items of a list in a sentence", ", ").join(
                sentences_i18n.translate(one.label) for one in done
            )
        },
        format_html_join("", "{}", ((chart,) for chart in charts)),
    )


def _wrapped(label: str) -> str:
    """A bar's label in lines of about LABEL_WIDTH characters (at spaces; a wide character, as Japanese is
    written, counts twice, and a run of them breaks anywhere)."""
    wide = sum(1 for char in label if unicodedata.east_asian_width(char) in "WF")
    width = LABEL_WIDTH if wide * 2 < len(label) else LABEL_WIDTH // 2
    return "<br>".join(textwrap.wrap(label, width))


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
