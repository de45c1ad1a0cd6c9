"""Carving that follows demand, measured: the tables of docs/simulator.md from one command.

    ITP_TRACES=/path/to/itp .venv/bin/python benchmarks/recarve.py [--out DIR] [--workers 2] [--only NAME ...]

Replays (scheduling.simulator.simulate, the engine the portal runs) every configuration below on both halves
of the shipped ITP traces, as the "Preemption bounds" protocol fixed them before any of these runs: the
tuning half is clusters 01+02+03 on 4 racks, the validation half clusters 05+06 on 2 racks; span slowdown 1.5
and 1.0; 10-minute checkpoint loss; three samples each (the traces as they are, and every submission shifted
by a random 0-5 minutes with seeds 1 and 2). Each replay's figures are kept in DIR (one JSON file each, so
an interrupted run resumes where it stopped); then the tables are printed as Markdown: per configuration,
the range over the three samples and the mean in brackets.

Configurations (the layout every rack starts with; block-best-fit and first-fit never re-carve):

* rackplane, block-best-fit, first-fit on 2x9 (base 9: re-carving can only merge 9+9 into 18);
* rackplane 2x9 with re-carving (every rack: smallest partition 1 tray, 2 re-carves an hour, 2-minute delay,
  Slurm 24.11's block rule as the wizard checks it); an in-quota gang larger than a partition waits for a
  re-carve up to the fallback bound (1 h), or, in the "gangs wait 2 min" variant, only as long as a
  re-carve takes before it spans the rack;
* rackplane and block-best-fit on 1x18 (every rack one partition: where merging 9+9 leads);
* 8+8+2 (buddy-style, base 2): Slurm 24.11 refuses it on more than one rack (its aggregation of blocks is
  by file order, not by rack: core/blocks.py), so these runs are a what-if for Slurm 25.05+ (topology.yaml),
  re-carving held to no fleet rule, smallest partition 2 trays;
* rackplane 2x9 with re-carving that also gathers idle trays out of partitions that run work
  (RecarvePolicy.idle_trays): Slurm 24.11 refuses every such layout on 2x9, so a 25.05+ what-if (no fleet
  rule);
* dedicated racks for the gang-heavy department (the one with the largest share of its GPU-hours in
  multi-tray jobs, floor(guarantee / 72) whole racks: cluster03 gets 2 of the tuning half's 4, cluster06 1 of
  the validation half's 2), with and without re-carving.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling import simulator
from scheduling.engine.recarve import RecarvePolicy

HALVES = {
    "tuning": {"clusters": ("01", "02", "03"), "racks": 4, "dedicated": {"cluster03": 2}},
    "validation": {"clusters": ("05", "06"), "racks": 2, "dedicated": {"cluster06": 1}},
}
SLOWDOWNS = (1.5, 1.0)
SAMPLES = ((0, 1), (300, 1), (300, 2))  # (jitter s, seed)
DEFAULT = simulator.RecarvePlan()
SHORT_WAIT = simulator.RecarvePlan(wait_s=DEFAULT.delay_s)
BUDDY = simulator.RecarvePlan(RecarvePolicy(smallest_trays=2), rule=simulator.NO_BLOCK_RULE)
IDLE_TRAYS = simulator.RecarvePlan(RecarvePolicy(idle_trays=True), rule=simulator.NO_BLOCK_RULE)
CONFIGS = {
    # name: (policy, layout, recarve plan, dedicate the gang-heavy department)
    "rackplane 2x9": ("rackplane", "2x9", None, False),
    "rackplane 2x9 + re-carving": ("rackplane", "2x9", DEFAULT, False),
    "rackplane 2x9 + re-carving, gangs wait 2 min": ("rackplane", "2x9", SHORT_WAIT, False),
    "block-best-fit 2x9": ("block-best-fit", "2x9", None, False),
    "first-fit 2x9": ("first-fit", "2x9", None, False),
    "rackplane 1x18": ("rackplane", "1x18", None, False),
    "block-best-fit 1x18": ("block-best-fit", "1x18", None, False),
    "rackplane 8+8+2 (25.05 what-if)": ("rackplane", "8+8+2", None, False),
    "rackplane 8+8+2 + re-carving (25.05 what-if)": ("rackplane", "8+8+2", BUDDY, False),
    "block-best-fit 8+8+2 (25.05 what-if)": ("block-best-fit", "8+8+2", None, False),
    "rackplane 2x9 + re-carving idle trays (25.05 what-if)": ("rackplane", "2x9", IDLE_TRAYS, False),
    "rackplane 2x9, dedicated": ("rackplane", "2x9", None, True),
    "rackplane 2x9, dedicated + re-carving": ("rackplane", "2x9", DEFAULT, True),
}
BASELINES = ("block-best-fit 2x9", "first-fit 2x9")


def _key(config: str, half: str, slowdown: float, sample: tuple[int, int]) -> str:
    slug = config.replace(" ", "_").replace("+", "p").replace(",", "").replace("(", "").replace(")", "")
    return f"{slug}__{half}__{slowdown:g}__j{sample[0]}s{sample[1]}"


def replay_one(task: tuple, policy: str, layout: str, options_from=None, **options) -> tuple[str, dict]:
    """One replay of a half's traces (one sample, one slowdown, 10-minute checkpoint loss) with `options`
    for simulator.simulate; its figures without the per-department ones (and the re-carve log).
    `options_from(traces, racks)`, when given, returns more options read from the sample's own traces
    (``layout`` among them replaces `layout`)."""
    key, _, half, slowdown, sample, folder = task
    spec = HALVES[half]
    traces = simulator.load_traces([f"{folder}/cluster{c}.csv" for c in spec["clusters"]])
    traces = simulator.jitter_traces(traces, sample[0], sample[1])
    if options_from is not None:
        options = {**options, **options_from(traces, spec["racks"])}
        layout = options.pop("layout", layout)
    run = simulator.simulate(
        traces, spec["racks"], layout, policy, span_slowdown=slowdown, checkpoint_loss_s=600.0, **options
    )
    metrics = dict(run.metrics)
    metrics.pop("departments", None)
    if "recarve" in metrics:
        metrics["recarve"] = {k: v for k, v in metrics["recarve"].items() if k != "log"}
    return key, metrics


def _replay(task: tuple) -> tuple[str, dict]:
    policy, layout, recarve, dedicate = CONFIGS[task[1]]
    dedicated = HALVES[task[2]]["dedicated"] if dedicate else None
    return replay_one(task, policy, layout, recarve=recarve, dedicated=dedicated)


FIGURES = (
    # (column, how to read it from the metrics, format)
    ("shortfall GPU-h", lambda m: m["guarantee_shortfall_gpu_s"] / 3600, "{:,.0f}"),
    ("of it 8-16 GPU jobs", lambda m: m["guarantee_shortfall_by_size_gpu_s"]["8-16"] / 3600, "{:,.0f}"),
    ("fitting in one partition", lambda m: 100 * m["fitting_multi_tray_in_one_partition"], "{:.1f}%"),
    ("avg wait h", lambda m: m["avg_wait_s"] / 3600, "{:.2f}"),
    ("avg JCT h", lambda m: m["avg_jct_s"] / 3600, "{:.2f}"),
    ("lost work GPU-h", lambda m: m["lost_work_gpu_s"] / 3600, "{:,.0f}"),
    ("p95 wait > 36 GPUs h", lambda m: (m["wait_by_size"][">36"]["p95_wait_s"] or 0) / 3600, "{:,.0f}"),
    ("stranded in fragments GPU-h", lambda m: m["stranded_by_cause_gpu_s"]["fragments"] / 3600, "{:,.0f}"),
    ("re-carves", lambda m: (m.get("recarve") or {}).get("recarves", 0), "{:,.0f}"),
    ("re-carving GPU-h", lambda m: (m.get("recarve") or {}).get("recarving_gpu_s", 0) / 3600, "{:,.1f}"),
)


def _cell(values: list[float], form: str) -> str:
    if not values:
        return "-"
    low, high, mean = min(values), max(values), statistics.fmean(values)
    if form.format(low) == form.format(high):
        return form.format(mean)
    return f"{form.format(low)}-{form.format(high)} ({form.format(mean)})"


def range_tables(results: dict[str, dict], configs: list[str], figures: tuple, key) -> str:
    """Per half and slowdown a Markdown table of `figures` ((column, read(metrics), format)) for each of
    `configs` replayed: the range over the samples, the mean in brackets."""
    lines = []
    for half in HALVES:
        for slowdown in SLOWDOWNS:
            lines.append(f"\n{half} half, slowdown {slowdown:g} (range over 3 samples, mean in brackets)\n")
            lines.append("| configuration | " + " | ".join(name for name, _, _ in figures) + " |")
            lines.append("| --- " * (len(figures) + 1) + "|")
            for config in configs:
                runs = [results.get(key(config, half, slowdown, s)) for s in SAMPLES]
                runs = [m for m in runs if m is not None]
                if not runs:
                    continue
                cells = [_cell([read(m) for m in runs], form) for _, read, form in figures]
                lines.append(
                    f"| {config}{'' if len(runs) == 3 else f' ({len(runs)} of 3)'} | "
                    + " | ".join(cells)
                    + " |"
                )
    return "\n".join(lines)


def tables(results: dict[str, dict], configs: list[str]) -> str:
    return range_tables(results, configs, FIGURES, _key)


def _mean(results: dict, config: str, half: str, slowdown: float, read) -> float | None:
    runs = [results.get(_key(config, half, slowdown, s)) for s in SAMPLES]
    runs = [m for m in runs if m is not None]
    return statistics.fmean(read(m) for m in runs) if runs else None


GOALS = (
    # (goal, figure, test against (own, bbf, ff), format)
    ("shortfall <= bbf", "shortfall GPU-h", lambda o, b, f: o <= b, "{:,.0f}"),
    (">= 99% fitting in one", "fitting in one partition", lambda o, b, f: o >= 99, "{:.1f}%"),
    ("avg JCT < both", "avg JCT h", lambda o, b, f: o < min(b, f), "{:.2f}"),
    ("avg wait < both", "avg wait h", lambda o, b, f: o < min(b, f), "{:.2f}"),
    ("lost work <= bbf", "lost work GPU-h", lambda o, b, f: o <= b, "{:,.0f}"),
    ("p95 wait > 36 GPUs <= bbf", "p95 wait > 36 GPUs h", lambda o, b, f: o <= b, "{:,.0f}"),
)


def goal_table(title: str, goals: tuple, mean, config: str, baselines: tuple[str, ...]) -> str:
    """A Markdown table of `goals` ((goal, figure, test(own, *baselines), format)) for `config` per half
    and slowdown, each cell "met" or "**missed**" with the figures; `mean(config, half, slowdown, figure)`
    is a figure's mean over the samples (None: not replayed)."""
    lines = [
        f"\n{title}\n",
        "| half | slowdown | " + " | ".join(goal for goal, _, _, _ in goals) + " |",
        "| --- " * (len(goals) + 2) + "|",
    ]
    for half in HALVES:
        for slowdown in SLOWDOWNS:
            cells = []
            for _, name, test, form in goals:
                values = [mean(c, half, slowdown, name) for c in (config, *baselines)]
                if any(v is None for v in values):
                    break
                verdict = "met" if test(*values) else "**missed**"
                others = " / ".join(form.format(v) for v in values[1:])
                cells.append(f"{verdict} ({form.format(values[0])} vs {others})")
            else:
                lines.append(f"| {half} | {slowdown:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def goals(results: dict[str, dict], config: str) -> str:
    """Issue 28's goals for one configuration against the 2x9 baselines, per half and slowdown (means)."""
    figure = {name: read for name, read, _ in FIGURES}
    return goal_table(
        f"Goals for {config} (means over the samples; own vs block-best-fit 2x9 / first-fit 2x9)",
        GOALS,
        lambda c, half, slowdown, name: _mean(results, c, half, slowdown, figure[name]),
        config,
        BASELINES,
    )


def replay_halves(
    doc: str,
    default_out: str,
    configs: dict,
    key,
    replay,
    argv=None,
    always=(),
    halves=HALVES,
    slowdowns=SLOWDOWNS,
    samples=SAMPLES,
) -> dict:
    """The command line the benchmarks share: parse it, replay every (configuration, half, slowdown,
    sample) not yet in the output folder (`replay(task)` -> (key, metrics), in `--workers` processes, each
    kept as one JSON file) and return every replay's figures there, by key. `always`: configurations
    replayed even when `--only` leaves them out (what goals are measured against), or a function of the
    chosen configurations returning them. `halves`, `slowdowns`
    and `samples`: what each configuration is replayed on (by default this benchmark's)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument(
        "--traces",
        default=os.environ.get("ITP_TRACES"),
        help="the folder of the ITP clusters' CSVs (default: $ITP_TRACES)",
    )
    parser.add_argument("--out", default=default_out, help="folder of per-replay JSON")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", action="append", choices=list(configs), help="configurations to run")
    parser.add_argument("--tables-only", action="store_true", help="print the tables of what is there")
    parser.add_argument("--half", action="append", choices=list(halves), help="halves to run (default: all)")
    args = parser.parse_args(argv)
    if not args.traces and not args.tables_only:
        parser.error("name the ITP traces' folder: --traces DIR or ITP_TRACES=DIR")
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    chosen = args.only or list(configs)
    needed = always(chosen) if callable(always) else always
    chosen = [c for c in needed if c not in chosen] + chosen
    tasks = [
        (key(c, h, sd, s), c, h, sd, s, args.traces)
        for c in chosen
        for h in args.half or halves
        for sd in slowdowns
        for s in samples
        if not (folder / f"{key(c, h, sd, s)}.json").exists()
    ]
    if tasks and not args.tables_only:
        print(f"{len(tasks)} replays to run in {args.workers} processes", file=sys.stderr, flush=True)
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            for name, metrics in pool.map(replay, tasks):
                (folder / f"{name}.json").write_text(json.dumps(metrics, indent=1))
                print(f"done {name}: {metrics['wall_s']} s", file=sys.stderr, flush=True)
    return {path.stem: json.loads(path.read_text()) for path in folder.glob("*.json")}


def main(argv=None) -> int:
    results = replay_halves(__doc__, "benchmarks/results/recarve", CONFIGS, _key, _replay, argv)
    print(tables(results, list(CONFIGS)))
    for config in (
        "rackplane 2x9",
        "rackplane 2x9 + re-carving",
        "rackplane 2x9 + re-carving, gangs wait 2 min",
        "rackplane 1x18",
    ):
        print(goals(results, config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
