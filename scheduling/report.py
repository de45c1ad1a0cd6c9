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

from scheduling.simulator import SIZE_CLASSES, PolicyRun, quirks

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
    ("avg_stranded_gpus", "stranded GPUs, time-averaged", "{:,.1f}"),
    ("stranded_gpu_s", "stranded NVLink capacity (GPU-h)", "gpu-hours"),
    *(
        (("stranded_by_cause_gpu_s", cause), f"... stranded by {word} (GPU-h)", "gpu-hours")
        for cause, word in (
            ("fragments", "partition fragments"),
            ("unavailable", "drained or unhealthy trays"),
            ("running", "running work"),
        )
    ),
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
    if form == "minutes":
        return f"{value / 60:,.1f}"
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


FAULT_ROWS = (
    ("goodput_gpu_s", "goodput, first to last submission (GPU-h)", "gpu-hours"),
    ("goodput_share", "... of the cluster's GPU-time", "{:.1%}"),
    ("lost_work_gpu_s", "work lost to faults (GPU-h)", "gpu-hours"),
    ("jobs_hit", "jobs hit", "{:,}"),
    ("hits", "hits (a job may be hit twice)", "{:,}"),
    ("avg_jct_s", "average JCT (h)", "hours"),
    ("avg_wait_s", "average wait (h)", "hours"),
    ("time_to_quarantine_s", "time to quarantine (min)", "minutes"),
    ("time_to_service_s", "time to service (h)", "hours"),
    ("faults", "faults on the cluster's trays", "{:,}"),
    ("out_of_service_gpu_s", "GPU-time out of service (GPU-h)", "gpu-hours"),
    ("preemption_lost_work_gpu_s", "work lost to preemptions (GPU-h)", "gpu-hours"),
)


def _fault_table(results: dict) -> str:
    """Per policy, faults handled automated and manual (results `faults`); "" without a fault replay."""
    config = results["config"].get("faults")
    columns = [
        (policy, mode, figures)
        for policy, metrics in results["policies"].items()
        for mode, figures in (metrics.get("faults") or {}).items()
    ]
    if config is None or not columns:
        return ""
    head = "".join(f"<th>{html.escape(policy)}<br>{html.escape(mode)}</th>" for policy, mode, _ in columns)
    rows = []
    for key, label, form in FAULT_ROWS:
        cells = "".join(f"<td>{_cell(figures.get(key), form)}</td>" for _, _, figures in columns)
        rows.append(f"<tr><th>{html.escape(label)}</th>{cells}</tr>")
    return f"""<h2>Node faults: automated against manual recovery</h2>
<p>{config["cluster_faults"]:,} of the {config["trace_faults"]:,} faults of {html.escape(config["trace"])}
fall on this cluster's trays ({config["trays_with_faults"]} trays; {html.escape(config["mapping"])}).
Automated: the tray is drained {config["detect_s"]:g} s after the fault, its jobs requeued at once from their
last checkpoint, and it returns {config["check_s"] / 60:g} min after the trace's repair (healthy reports and
an active check). Manual: the jobs on the tray die (all their work lost), a person resubmits them and drains
the tray {config["manual_delay_s"] / 3600:g} h later, and the tray returns at the trace's repair.</p>
<table><thead><tr><th></th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>"""


FABRIC_ROWS = (
    (("multi_rack", "jobs"), "multi-rack jobs (more trays than a rack)", "{:,}"),
    (("fitting_one_unit", "jobs"), "... of them fitting one scalable unit", "{:,}"),
    ("fitting_in_one_unit", "... of those, run inside one unit", "{:.1%}"),
    (("fitting_one_unit", "avg_wait_s"), "their average wait (h)", "hours"),
    (("fitting_one_unit", "avg_jct_s"), "their average JCT (h)", "hours"),
    (("multi_rack", "avg_wait_s"), "multi-rack average wait (h)", "hours"),
    (("multi_rack", "avg_jct_s"), "multi-rack average JCT (h)", "hours"),
    ("cross_unit_jobs", "jobs across scalable units (spine crossings)", "{:,}"),
    ("cross_spine_jobs", "jobs across spine groups", "{:,}"),
    ("cross_unit_slowdown_gpu_s", "GPU-time added by crossing units (GPU-h)", "gpu-hours"),
    (("single_rack", "avg_wait_s"), "single-rack average wait (h)", "hours"),
    (("single_rack", "avg_jct_s"), "single-rack average JCT (h)", "hours"),
)


def _fabric_table(results: dict) -> str:
    """Per policy, the compute fabric's figures (results `fabric`); "" without a fabric."""
    config = results["config"]
    policies = [p for p, metrics in results["policies"].items() if metrics.get("fabric")]
    if not config.get("fabric") or not policies:
        return ""
    head = "".join(f"<th>{html.escape(p)}</th>" for p in policies)
    rows = []
    for key, label, form in FABRIC_ROWS:
        cells = "".join(
            f"<td>{_cell(_value(results['policies'][p]['fabric'], key), form)}</td>" for p in policies
        )
        rows.append(f"<tr><th>{html.escape(label)}</th>{cells}</tr>")
    blind = (
        " Every policy placed as if the fabric were flat (--fabric-blind)."
        if config.get("fabric_blind")
        else ""
    )
    return f"""<h2>The compute fabric</h2>
<p>Racks under {html.escape(str(config["fabric"]))}; a job whose racks span scalable units runs
{config["cross_unit_slowdown"]:g} times longer; fabric wait {config["fabric_wait_s"] / 3600:g} h.{blind}</p>
<table><thead><tr><th></th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>"""


def _recarve_table(results: dict) -> str:
    """Per policy that re-carved (results `recarve`): how often, the GPU-time trays spent re-carving, and
    each re-carve with its reason (the first 200); "" when re-carving was off."""
    config = results["config"].get("recarve")
    if not config:
        return ""
    rule = (
        "the partition wizard's Slurm 24.11 block rule"
        if config["rule"] == "slurm-24.11"
        else "no fleet rule: a Slurm 25.05+ what-if the wizard refuses today"
    )
    parts = [
        f"""<h2>Carving that follows demand</h2>
<p>Every rack under one policy: no partition made below {config["smallest_trays"]} trays, at most
{config["max_per_hour"]} re-carves of a rack an hour, each keeping its trays out of service for
{config["delay_s"] / 60:g} min (the NMX-M partition operation and the nodes reporting their new clique);
layouts held to {html.escape(config["rule"])} ({rule}).
Only wholly idle partitions are re-carved, each for an in-quota gang that waits.</p>"""
    ]
    for policy, metrics in results["policies"].items():
        figures = metrics.get("recarve")
        if figures is None:
            continue
        layout = ", ".join(f"{n} x {html.escape(k)}" for k, n in figures["final_layout"].items())
        parts.append(
            f"<p>{html.escape(policy)}: {figures['recarves']:,} re-carves ({figures['merges']:,} merges) of "
            f"{figures['racks_recarved']} racks, {figures['recarving_gpu_s'] / 3600:,.1f} GPU-h of trays "
            f"re-carving; {figures['gangs_started_on_recarved_partition']:,} gangs started on the partition "
            f"made for them; racks at the end: {layout}.</p>"
        )
        rows = "".join(
            f"<tr><td>{entry['at_s'] / 3600:,.1f}</td><td>{html.escape(entry['rack'])}</td>"
            f"<td>{' + '.join(map(str, entry['from_trays']))}</td>"
            f"<td>{' + '.join(map(str, entry['to_trays']))}</td>"
            f"<th>{html.escape(entry['reason'])}</th></tr>"
            for entry in figures.get("log", [])
        )
        if rows:
            parts.append(
                "<table><thead><tr><th>at (h)</th><th>rack</th><th>from (trays)</th><th>to (trays)</th>"
                f"<th>reason</th></tr></thead><tbody>{rows}</tbody></table>"
            )
    return "\n".join(parts)


def _quirks(config: dict) -> str:
    found = quirks(config)
    if not found:
        return ""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in found)
    return f"<p>Read from the inputs with these quirks (counted, not stopped on):</p><ul>{items}</ul>"


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


def _command(config: dict) -> str:
    command = config.get("command")
    return f"<p>Made by <code>{html.escape(command)}</code></p>" if command else ""


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
{_quirks(config)}
{_table(results)}
{_command(config)}
{_fault_table(results)}
{_fabric_table(results)}
{_recarve_table(results)}
{body}
<details><summary>results.json</summary><pre>{html.escape(json.dumps(results, indent=2))}</pre></details>
</body>
</html>
"""
