"""Fractional GPUs (MIG), measured: the tables of docs/simulator.md's MIG section from one command.

    ITP_TRACES=/path/to/itp .venv/bin/python benchmarks/mig.py [--out DIR] [--workers 2] [--only NAME ...]

Replays (scheduling.simulator.simulate with a MigPlan, the engine the portal runs for whole GPUs and
scheduling.engine.mig for slices) every configuration below on both halves of the shipped ITP traces, split
as the "Preemption bounds" protocol fixed it (docs/simulator.md, benchmarks/recarve.py): the tuning half is
clusters 01+02+03 on 4 racks, the validation half clusters 05+06 on 2 racks; span slowdown 1.5 and 1.0;
10-minute checkpoint loss; three samples each (the traces as they are, and every submission shifted by a
random 0-5 minutes with seeds 1 and 2). Rules and parameters are chosen on the tuning half only; the
validation half is reported, never tuned on.

Every configuration runs on the same hardware (NVL72 racks, rackplane policy) and turns the same jobs into
slice requests (SliceConversion's defaults: every 1-GPU job, profile 1g.23gb / 2g.47gb / 3g.93gb with
weights 5 / 3 / 2, drawn by a hash of the job's id: the ITP traces record no GPU utilisation or memory):

* whole-GPU 2x9: no MIG; slice requests run as 1-GPU jobs through the engine;
* whole-GPU 8+8+2: the same without MIG on the layout the chosen MIG configuration uses (a reference: how
  much of a difference is the layout's, not MIG's);
* MIG N tray(s) per rack: the last N trays of every rack in MIG mode as their own partition (layout 9+8+1
  for 1, 9+7+2 for 2, 8+8+2 for 2 with equal gang partitions), all 4 GPUs of a MIG tray in MIG mode (or 3,
  the fourth whole for jobs of 1-3 GPUs), every MIG GPU carved ``all-balanced`` (1g.23gb x2, 2g.47gb,
  3g.93gb), slices placed by best-fit or the fragmentation-aware rule.

and, scored only after a 14-day history window (its jobs run but are not counted, for every configuration:
MigPlan.history_s), against whole-GPU 2x9 scored on the same jobs:

* MIG by the rule (scheduling.engine.mig_sizing, headroom 1 and 1.5): MIG trays, MIG GPUs per tray and the
  rack layout sized from each sample's own history window (its sub-GPU share of GPU-hours);
* MIG 1 tray/rack 17+1 and 2 trays/rack 16+2 (the rule's one-tray layout, and a 16-tray gang partition),
  and whole-GPU 8+8+2 and 16+2 as layout references;
* MIG by the rule on the fewest racks (mig_sizing.concentrate: every rack 2x9, the MIG trays inside the
  fewest racks' last partition, at most 9, 4 or 2 a rack), and configurations whose guarantees split the
  whole GPUs by the departments' whole-GPU work only ("guarantees from whole-GPU work":
  MigPlan.whole_work_guarantees; the chosen one is the rule per rack, headroom 1.5, with it).

Each replay's figures are kept in DIR (one JSON file each, so an interrupted run resumes where it stopped);
then the tables are printed as Markdown: per configuration, the range over the three samples and the mean in
brackets, and the issue's goal per half and slowdown.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.recarve import (  # the same halves, samples
    HALVES,
    SAMPLES,
    SLOWDOWNS,
    goal_table,
    range_tables,
    replay_halves,
    replay_one,
)
from scheduling import simulator
from scheduling.engine.mig import BEST_FIT, FRAGMENTATION_AWARE
from scheduling.engine.mig_sizing import (
    CONCENTRATED,
    DEFAULT_HISTORY_S,
    MIG_PARTITION_TRAYS,
    PER_RACK,
    MigSizing,
)

WHOLE = "whole-GPU 2x9"
# The rule (scheduling.engine.mig_sizing): MIG capacity sized from the first 14 days of each half, which are
# then not scored, for every configuration compared (the whole-GPU baseline too).
HISTORY_S = DEFAULT_HISTORY_S
WHOLE_AFTER = "whole-GPU 2x9, scored after the 14-day history"
RULE = "MIG by the rule, headroom {:g}, scored after the 14-day history"
HEADROOMS = (1.0, 1.5)
# name: (headroom, placement, MIG trays a rack at most, guarantees from whole-GPU work only) for the rule's
# configurations.
AUTO = {RULE.format(h): (h, PER_RACK, MIG_PARTITION_TRAYS, False) for h in HEADROOMS}
# The same MIG capacity on some racks only (mig_sizing.concentrate): every rack stays 2x9, the MIG trays are
# the last trays of the fewest racks' second partition, at most CAP a rack.
CONCENTRATED_RULE = (
    "MIG by the rule on the fewest racks (at most {} a rack), headroom {:g}, scored after the 14-day history"
)
AUTO.update(
    {
        CONCENTRATED_RULE.format(cap, h): (h, CONCENTRATED, cap, False)
        for cap, h in ((9, 1.5), (4, 1.5), (9, 1.0), (2, 1.5), (4, 1.0), (9, 0.75))
    }
)
# The guarantees split by the departments' whole-GPU work only (MigPlan.whole_work_guarantees): the slice
# work runs on the MIG GPUs, outside them.
WHOLE_WORK = ", guarantees from whole-GPU work"
AUTO.update({RULE.format(h) + WHOLE_WORK: (h, PER_RACK, MIG_PARTITION_TRAYS, True) for h in (1.0, 1.5)})
AUTO.update(
    {
        CONCENTRATED_RULE.format(cap, h) + WHOLE_WORK: (h, CONCENTRATED, cap, True)
        for cap, h in ((9, 1.5), (4, 1.5), (2, 1.5))
    }
)
CONFIGS = {
    # name: (layout, MIG trays per rack, MIG GPUs per MIG tray, slice rule, history window s)
    WHOLE: ("2x9", 0, 4, BEST_FIT),
    "whole-GPU 8+8+2 (layout reference)": ("8+8+2", 0, 4, BEST_FIT),
    "MIG 1 tray/rack 9+8+1, best-fit": ("9+8+1", 1, 4, BEST_FIT),
    "MIG 1 tray/rack 9+8+1, fragmentation-aware": ("9+8+1", 1, 4, FRAGMENTATION_AWARE),
    "MIG 2 trays/rack 9+7+2, best-fit": ("9+7+2", 2, 4, BEST_FIT),
    "MIG 2 trays/rack 9+7+2, fragmentation-aware": ("9+7+2", 2, 4, FRAGMENTATION_AWARE),
    "MIG 2 trays/rack 8+8+2, best-fit": ("8+8+2", 2, 4, BEST_FIT),
    "MIG 2 trays/rack 8+8+2, fragmentation-aware": ("8+8+2", 2, 4, FRAGMENTATION_AWARE),
    "MIG 2 trays/rack 8+8+2, 3 MIG GPUs each, best-fit": ("8+8+2", 2, 3, BEST_FIT),
    WHOLE_AFTER: ("2x9", 0, 4, BEST_FIT, HISTORY_S),
    "whole-GPU 8+8+2, scored after the 14-day history": ("8+8+2", 0, 4, BEST_FIT, HISTORY_S),
    # The rule's one-tray layout (1-4 MIG GPUs a rack), for every rack: is less MIG enough on either half?
    "MIG 1 tray/rack 17+1, scored after the 14-day history": ("17+1", 1, 4, BEST_FIT, HISTORY_S),
    # The rule's two MIG trays with one 16-tray gang partition a rack (one Slurm 24.11 block) instead of 8+8.
    "MIG 2 trays/rack 16+2, scored after the 14-day history": ("16+2", 2, 4, BEST_FIT, HISTORY_S),
    "whole-GPU 16+2, scored after the 14-day history": ("16+2", 0, 4, BEST_FIT, HISTORY_S),
    # The same with the guarantees split by whole-GPU work only (MigPlan.whole_work_guarantees).
    "MIG 2 trays/rack 16+2, scored after the 14-day history, guarantees from whole-GPU work": (
        "16+2",
        2,
        4,
        BEST_FIT,
        HISTORY_S,
        True,
    ),
    **{name: (None, None, None, BEST_FIT, HISTORY_S) for name in AUTO},  # sized by the rule per sample
}


def _key(config: str, half: str, slowdown: float, sample: tuple[int, int]) -> str:
    slug = "".join(c if c.isalnum() else "_" for c in config)
    return f"{slug}__{half}__{slowdown:g}__j{sample[0]}s{sample[1]}"


def _replay(task: tuple) -> tuple[str, dict]:
    layout, trays, gpus, rule, *window = CONFIGS[task[1]]
    history_s = window[0] if window else 0.0
    if task[1] not in AUTO:
        plan = simulator.MigPlan(
            trays_per_rack=trays,
            rule=rule,
            gpus_per_tray=gpus,
            history_s=history_s,
            whole_work_guarantees=len(window) > 1 and window[1],
        )
        return replay_one(task, "rackplane", layout, mig=plan)
    sized = {}

    def by_the_rule(traces, racks) -> dict:
        headroom, placement, cap, whole_work = AUTO[task[1]]
        plan, sizing = simulator.auto_mig_plan(
            traces,
            racks,
            simulator.MigPlan(rule=rule, whole_work_guarantees=whole_work),
            history_s,
            headroom,
            placement,
            cap,
        )
        sized.update(dataclasses.asdict(sizing))
        return {"mig": plan, "layout": sizing.layout}

    key, metrics = replay_one(task, "rackplane", "2x9", options_from=by_the_rule)
    metrics["mig"]["sizing"] = sized
    return key, metrics


def _h(seconds: float | None) -> float:
    return (seconds or 0.0) / 3600


FIGURES = (
    # (column, how to read it from the metrics, format)
    ("<= 1 GPU avg wait h", lambda m: _h(m["mig"]["one_gpu_or_smaller"]["avg_wait_s"]), "{:.2f}"),
    ("<= 1 GPU p95 wait h", lambda m: _h(m["mig"]["one_gpu_or_smaller"]["p95_wait_s"]), "{:.1f}"),
    ("slice util", lambda m: 100 * (m["mig"]["slice_utilization"] or 0), "{:.1f}%"),
    ("stranded slices (avg)", lambda m: m["mig"]["avg_stranded_slices"], "{:.2f}"),
    ("fragmentation (avg slices)", lambda m: m["mig"]["avg_fragmentation_slices"], "{:.1f}"),
    ("GPU-equivalent util", lambda m: 100 * m["mig"]["gpu_equivalent_utilization"], "{:.1f}%"),
    ("multi-tray avg wait h", lambda m: _h(m["mig"]["multi_tray"]["avg_wait_s"]), "{:.1f}"),
    ("multi-tray p95 wait h", lambda m: _h(m["mig"]["multi_tray"]["p95_wait_s"]), "{:.0f}"),
    ("multi-tray avg JCT h", lambda m: _h(m["mig"]["multi_tray"]["avg_jct_s"]), "{:.1f}"),
    ("multi-tray in one partition", lambda m: 100 * m["mig"]["multi_tray"]["in_one_partition"], "{:.1f}%"),
    # Of the jobs that fit the layout's largest partition: 9 trays on 2x9, 8 on 8+8+2 (not comparable).
    ("fitting in one", lambda m: 100 * m["mig"]["multi_tray"]["fitting_in_one_partition"], "{:.1f}%"),
    ("cross-rack jobs", lambda m: m["mig"]["multi_tray"]["cross_rack_jobs"], "{:,.0f}"),
    ("shortfall GPU-h", lambda m: m["guarantee_shortfall_gpu_s"] / 3600, "{:,.0f}"),
)
FIGURE = {name: read for name, read, _ in FIGURES}


def _runs(results: dict, config: str, half: str, slowdown: float) -> list[dict]:
    runs = [results.get(_key(config, half, slowdown, s)) for s in SAMPLES]
    return [m for m in runs if m is not None]


def tables(results: dict[str, dict], configs: list[str]) -> str:
    return range_tables(results, configs, FIGURES, _key)


def _mean(results: dict, config: str, half: str, slowdown: float, figure: str) -> float | None:
    runs = _runs(results, config, half, slowdown)
    return statistics.fmean(FIGURE[figure](m) for m in runs) if runs else None


GOALS = (
    # (goal, figure, test (own, whole-GPU), format)
    ("<= 1 GPU avg wait at least 2x lower", "<= 1 GPU avg wait h", lambda o, w: 2 * o <= w, "{:.2f}"),
    ("multi-tray avg wait no higher", "multi-tray avg wait h", lambda o, w: o <= w, "{:.1f}"),
    ("multi-tray p95 wait no higher", "multi-tray p95 wait h", lambda o, w: o <= w, "{:.0f}"),
    ("multi-tray avg JCT no higher", "multi-tray avg JCT h", lambda o, w: o <= w, "{:.1f}"),
    ("multi-tray in one partition no lower", "multi-tray in one partition", lambda o, w: o >= w, "{:.1f}%"),
)


def baseline(config: str) -> str:
    """What `config` is measured against: whole-GPU 2x9 scored on the same jobs."""
    return WHOLE_AFTER if len(CONFIGS[config]) > 4 else WHOLE


def goals(results: dict[str, dict], config: str) -> str:
    """Issue 30's goal for one configuration against whole-GPU placement, per half and slowdown (means)."""
    whole = baseline(config)
    return goal_table(
        f"Goal for {config} (means over the samples; own vs {whole})",
        GOALS,
        lambda c, half, slowdown, name: _mean(results, c, half, slowdown, name),
        config,
        (whole,),
    )


def _sizing(stored: dict) -> MigSizing:
    """The rule's answer as results.json keeps it (dataclasses.asdict) back as a MigSizing."""
    racks = tuple(tuple(rack) for rack in stored.get("rack_trays") or ())
    return MigSizing(**{**stored, "rack_trays": racks})


def sizings(results: dict[str, dict]) -> str:
    """What the rule chose per half and sample: the history's sub-GPU share, MIG GPUs, the per-rack plan."""
    lines = [
        "\nMIG capacity by the rule (from each sample's 14-day history)\n",
        "| configuration | half | sample | sub-GPU share of GPU-hours | MIG GPUs (rule) | per rack |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for config in AUTO:
        for half in HALVES:
            for sample in SAMPLES:
                m = results.get(_key(config, half, SLOWDOWNS[0], sample))
                if m is None:
                    continue
                s = m["mig"]["sizing"]
                lines.append(
                    f"| {config} | {half} | jitter {sample[0]} s seed {sample[1]} | "
                    f"{100 * s['share']:.1f}% | {s['mig_gpus']} | {_sizing(s).describe()} |"
                )
    return "\n".join(lines)


def _baselines(chosen: list[str]) -> list[str]:
    return sorted({baseline(c) for c in chosen})


def main(argv=None) -> int:
    results = replay_halves(
        __doc__, "benchmarks/results/mig", CONFIGS, _key, _replay, argv, always=_baselines
    )
    print(tables(results, list(CONFIGS)))
    print(sizings(results))
    for config in CONFIGS:  # the goal of each configuration replayed
        if config not in (WHOLE, WHOLE_AFTER) and any(
            _runs(results, config, h, s) for h in HALVES for s in SLOWDOWNS
        ):
            print(goals(results, config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
