"""The simulator's HTML report: one self-contained file (plotly.js inlined, no CDN) that puts the policies of
one replay side by side: utilization over time, wait-time CDF and each department's share of the GPUs.

Pure Python (plotly, no Django import). Series come from `scheduling.simulator.PolicyRun`.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from scheduling.simulator import SIZE_CLASSES, PolicyRun

CDF_POINTS = 400  # wait-time CDFs are drawn through this many quantiles
MIN_WAIT_S = 60.0  # the CDF's x axis is logarithmic: shorter waits are drawn at one minute
TABLE_ROWS = (
    ("jobs", "jobs", "{:,}"),
    ("makespan_s", "makespan (days)", "days"),
    ("gpu_utilization", "GPU utilization", "{:.1%}"),
    ("avg_wait_s", "average wait (h)", "hours"),
    ("p95_wait_s", "p95 wait (h)", "hours"),
    ("gpu_weighted_wait_s", "GPU-weighted average wait (h)", "hours"),
    *(
        (("wait_by_size", size, stat), f"{word} wait of {size} GPU jobs (h)", "hours")
        for size, _, _ in SIZE_CLASSES
        for stat, word in (("p50_wait_s", "p50"), ("p95_wait_s", "p95"))
    ),
    ("avg_jct_s", "average JCT (h)", "hours"),
    ("multi_tray_jobs", "multi-tray jobs", "{:,}"),
    ("multi_tray_in_one_partition", "multi-tray jobs in one partition", "{:.1%}"),
    ("fitting_multi_tray_in_one_partition", "... of those that fit one partition", "{:.1%}"),
    ("cross_rack_jobs", "cross-rack jobs", "{:,}"),
    ("preemptions", "preemptions", "{:,}"),
    ("lost_work_gpu_s", "work lost to preemptions (GPU-h)", "gpu-hours"),
    ("guarantee_shortfall_gpu_s", "guarantee shortfall (GPU-h)", "gpu-hours"),
    ("decisions_per_s", "placement decisions per second", "{:,}"),
)


def _cell(value, form: str) -> str:
    if value is None:
        return "n/a"
    if form == "days":
        return f"{value / 86400:,.1f}"
    if form == "hours":
        return f"{value / 3600:,.2f}"
    if form == "gpu-hours":
        return f"{value / 3600:,.0f}"
    return form.format(value)


def _value(metrics: dict, key):
    """metrics[key], or the nested value for a tuple of keys (None when missing)."""
    for part in key if isinstance(key, tuple) else (key,):
        if not isinstance(metrics, dict):
            return None
        metrics = metrics.get(part)
    return metrics


def _table(results: dict) -> str:
    policies = list(results["policies"])
    head = "".join(f"<th>{html.escape(p)}</th>" for p in policies)
    rows = []
    for key, label, form in TABLE_ROWS:
        cells = "".join(f"<td>{_cell(_value(results['policies'][p], key), form)}</td>" for p in policies)
        rows.append(f"<tr><th>{html.escape(label)}</th>{cells}</tr>")
    return f"<table><thead><tr><th></th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _cdf(waits: Sequence[float]) -> tuple[list[float], list[float]]:
    ordered = sorted(waits)
    n = len(ordered)
    if n == 0:
        return [], []
    step = max(1, n // CDF_POINTS)
    indexes = list(range(step - 1, n, step))
    if indexes[-1] != n - 1:
        indexes.append(n - 1)
    return [max(ordered[i], MIN_WAIT_S) / 3600 for i in indexes], [(i + 1) / n for i in indexes]


def figure(runs: Sequence[PolicyRun]) -> go.Figure:
    """Rows: utilization over time, wait-time CDF, department shares; one column per policy."""
    columns = len(runs)
    fig = make_subplots(
        rows=3,
        cols=columns,
        shared_yaxes=True,
        horizontal_spacing=0.03,
        vertical_spacing=0.09,
        subplot_titles=[
            *(f"{run.policy}: GPU utilization" for run in runs),
            *(f"{run.policy}: wait-time CDF" for run in runs),
            *(f"{run.policy}: share of GPUs by department" for run in runs),
        ],
    )
    colors = qualitative.Plotly
    departments = list(dict.fromkeys(name for run in runs for name in run.departments))
    for column, run in enumerate(runs, 1):
        scale = run.capacity * run.bin_s
        days = [(b * run.bin_s) / 86400 for b in range(len(run.busy_gpu_s))]
        fig.add_trace(
            go.Scatter(
                x=days,
                y=[busy / scale for busy in run.busy_gpu_s],
                mode="lines",
                line={"width": 1, "color": "#1f4e79"},
                name="utilization",
                legendgroup="utilization",
                showlegend=column == 1,
            ),
            row=1,
            col=column,
        )
        x, y = _cdf(run.waits)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="lines",
                line={"color": "#c0392b"},
                name="wait CDF",
                legendgroup="wait",
                showlegend=column == 1,
            ),
            row=2,
            col=column,
        )
        for name in run.departments:
            color = colors[departments.index(name) % len(colors)]
            fig.add_trace(
                go.Scatter(
                    x=days,
                    y=[gpu_s / scale for gpu_s in run.department_gpu_s[name]],
                    mode="lines",
                    stackgroup=f"share{column}",
                    line={"width": 0.5, "color": color},
                    name=name,
                    legendgroup=name,
                    showlegend=column == 1,
                ),
                row=3,
                col=column,
            )
        fig.update_xaxes(title_text="days since the first submission", row=1, col=column)
        fig.update_xaxes(title_text="wait (hours, log)", type="log", row=2, col=column)
        fig.update_xaxes(title_text="days since the first submission", row=3, col=column)
    # Same axes in every column, so the policies compare at a glance.
    last_day = max((len(run.busy_gpu_s) * run.bin_s / 86400 for run in runs), default=1)
    longest = max((max(run.waits, default=0) for run in runs), default=0)
    for column in range(1, columns + 1):
        fig.update_xaxes(range=[0, last_day], row=1, col=column)
        fig.update_xaxes(range=[0, last_day], row=3, col=column)
        fig.update_xaxes(
            range=[math.log10(MIN_WAIT_S / 3600), math.log10(max(longest, 2 * MIN_WAIT_S) / 3600) + 0.05],
            row=2,
            col=column,
        )
    fig.update_yaxes(title_text="allocated / capacity", range=[0, 1.02], row=1, col=1)
    fig.update_yaxes(title_text="fraction of jobs", range=[0, 1.02], row=2, col=1)
    fig.update_yaxes(title_text="share of capacity", range=[0, 1.02], row=3, col=1)
    fig.update_layout(height=1050, margin={"l": 60, "r": 20, "t": 60, "b": 40}, template="plotly_white")
    return fig


def render_html(results: dict, runs: Sequence[PolicyRun]) -> str:
    """The whole report as one HTML document with plotly.js inlined."""
    config = results["config"]
    departments = ", ".join(
        f"{html.escape(d['name'])} ({d['jobs']:,} jobs, {d['gpu_hours']:,.0f} GPU-h, "
        f"{d['guaranteed_gpus']} GPUs guaranteed)"
        for d in config["departments"]
    )
    load = config.get("offered_load")
    loss_s = config.get("checkpoint_loss_s")
    loss = (
        f" (each losing up to {loss_s / 60:g} min of work)"
        if loss_s is not None and config["preempted_jobs"] == "resume"
        else ""
    )
    body = figure(runs).to_html(full_html=False, include_plotlyjs=False, div_id="simulation")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Rackplane simulation: {html.escape(", ".join(results["policies"]))}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; }}
table {{ border-collapse: collapse; margin: 1rem 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.25rem 0.6rem; text-align: right; }}
thead th, tbody th {{ background: #f4f6f8; }}
tbody th {{ text-align: left; font-weight: normal; }}
</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head>
<body>
<h1>Trace replay: {html.escape(" vs ".join(results["policies"]))}</h1>
<p>{config["racks"]} NVL72 racks carved {html.escape(config["layout"])} ({config["capacity_gpus"]} GPUs),
{config["jobs"]:,} jobs{f", offered load {load:.0%}" if load is not None else ""}, span slowdown
{config["span_slowdown"]}x, preempted jobs {html.escape(config["preempted_jobs"])}{loss}.
Departments (one per trace file): {departments}.</p>
{_table(results)}
{body}
<details><summary>results.json</summary><pre>{html.escape(json.dumps(results, indent=2))}</pre></details>
</body>
</html>
"""
