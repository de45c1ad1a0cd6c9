"""Placement that expands outward only when necessary, measured: the fabric table of docs/simulator.md.

    ITP_TRACES=/path/to/itp .venv/bin/python benchmarks/fabric.py [--out DIR] [--workers 2] [--only NAME ...]

Replays (scheduling.simulator.simulate, the engine the portal runs) each configuration below on both halves of
the shipped ITP traces, with the synthetic large-job mix (scheduling.simulation_fabric: the traces stop at 64
GPUs) added as one more department: the tuning half is clusters 01+02+03 with 150 large jobs on 8 racks 2x9
under a fabric of 4 scalable units of 2 racks and 2 spine groups; the validation half clusters 05+06 with 75
large jobs on 4 racks, 2 units of 2 racks, 1 spine group (twice the racks of the other benchmarks' halves:
a unit of two racks is the smallest that holds a multi-rack job). Span slowdown 1.5, 10-minute checkpoint
loss; cross-unit slowdowns 1.1, 1.25 and 1.5; three samples each (the traces as they are with mix seed 1,
and every submission shifted by a random 0-5 minutes with seeds 1 and 2, the mix drawn with the same seed).
Each replay's figures are kept in DIR (one JSON file each: an interrupted run resumes); then the tables are
printed as Markdown, per configuration the range over the three samples and the mean in brackets.

Configurations: rackplane with the fabric and fabric waits of 0, 30 min, 1 h, 2 h and 8 h
(`Options.fabric_wait_s`, counted from when the job could first have started across scalable units), and
with a job waiting for a unit only while one frees up (by the running jobs' time limits) sooner than spanning
units would cost it (`Options.fabric_wait_slowdown`, told the replay's cross-unit slowdown; 2 h at most);
the topology-blind baselines: rackplane placing as if the fabric were
flat (the engine before issue 33), and first-fit. And the rules for the 95% goal, alone and together: unit
packing (`Options.fabric_packing`), a unit reserved after the wait (`Options.fabric_unit_reservation_s`) and
a wait not spent while the job could not start (`Options.fabric_wait_again`).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.recarve import replay_halves
from scheduling import simulator

HALVES = {
    "tuning": {
        "clusters": ("01", "02", "03"),
        "racks": 8,
        "fabric": "units=4,racks-per-unit=2,spines=2",
        "large": 150,
    },
    "validation": {
        "clusters": ("05", "06"),
        "racks": 4,
        "fabric": "units=2,racks-per-unit=2,spines=1",
        "large": 75,
    },
}
CROSS_UNIT_SLOWDOWNS = (1.1, 1.25, 1.5)
SAMPLES = ((0, 1), (300, 1), (300, 2))  # (jitter s, seed: of the jitter and of the large-job mix)
HOUR = 3600.0
# (wait h, unit packing, unit reserved h, waits again): the rules for the 95% goal, alone and together, as
# docs/simulator.md reports them.
RULES = (
    (2, True, 0, False),
    (2, False, 4, False),
    (2, True, 4, False),
    (8, True, 0, True),
    (8, False, 4, True),
)
RULES += ((8, True, 4, False), (8, True, 4, True))


def _rule_name(wait: int, pack: bool, reserved: int, again: bool) -> str:
    packing = ", unit packing" if pack else ""
    reservation = f", then a unit reserved {reserved} h" if reserved else ""
    spent = ", waits again" if again else ""
    return f"rackplane, fabric wait {wait} h from could-start{packing}{reservation}{spent}"


CONFIGS = {
    # name: (policy, fabric wait s, blind to the fabric, wait only for a unit that frees up soon enough[,
    # reservations inside a unit for the jobs waiting for one: `Options.fabric_reservations`]). The
    # fabric wait counts from the first pass that held the job for the fabric: when it could have started
    # across units (scheduling.engine.scheduler, Fabric wait).
    "rackplane, fabric wait 0": ("rackplane", 0.0, False, False),
    "rackplane, fabric wait 30 min from could-start": ("rackplane", 0.5 * HOUR, False, False),
    "rackplane, fabric wait 1 h from could-start": ("rackplane", 1 * HOUR, False, False),
    "rackplane, fabric wait 2 h from could-start": ("rackplane", 2 * HOUR, False, False),
    "rackplane, fabric wait 8 h from could-start": ("rackplane", 8 * HOUR, False, False),
    "rackplane, wait for a unit that frees up soon enough (2 h from could-start at most)": (
        "rackplane",
        2 * HOUR,
        False,
        True,
    ),
    "rackplane, fabric wait 2 h from could-start, 1 unit reservation": (
        "rackplane",
        2 * HOUR,
        False,
        False,
        1,
    ),
    "rackplane, fabric wait 2 h from could-start, 2 unit reservations": (
        "rackplane",
        2 * HOUR,
        False,
        False,
        2,
    ),
    "rackplane, fabric wait 8 h from could-start, 2 unit reservations": (
        "rackplane",
        8 * HOUR,
        False,
        False,
        2,
    ),
    # Unit packing (`Options.fabric_packing`): work of one rack or less opens trays in the fullest unit with
    # room. A unit reserved after the wait (`Options.fabric_unit_reservation_s`): the unit with the most free
    # trays, no new work there but in-quota work that fits nowhere else, up to the given time more; then the
    # job expands. "Waits again" (`Options.fabric_wait_again`): a wait that ran out while the job could not
    # start anywhere is not spent.
    **{
        _rule_name(wait, pack, reserved, again): (
            "rackplane",
            wait * HOUR,
            False,
            False,
            {
                "fabric_packing": pack,
                "fabric_unit_reservation_s": reserved * HOUR,
                "fabric_wait_again": again,
            },
        )
        for wait, pack, reserved, again in RULES
    },
    "rackplane, topology-blind": ("rackplane", 0.0, True, False),
    "first-fit (topology-blind)": ("first-fit", 0.0, True, False),
}
BASELINES = ("rackplane, topology-blind", "first-fit (topology-blind)")


def _key(config: str, half: str, slowdown: float, sample: tuple[int, int]) -> str:
    slug = config.replace(" ", "_").replace(",", "").replace("(", "").replace(")", "")
    return f"{slug}__{half}__{slowdown:g}__j{sample[0]}s{sample[1]}"


def _replay(task: tuple) -> tuple[str, dict]:
    key, config, half, slowdown, sample, folder = task
    policy, wait_s, blind, soon, *more = CONFIGS[config]
    # A fifth item: the unit reservations (`Options.fabric_reservations`), or more engine options by name.
    extra = ({"fabric_reservations": more[0]} if isinstance(more[0], int) else more[0]) if more else {}
    spec = HALVES[half]
    traces = simulator.load_traces([f"{folder}/cluster{c}.csv" for c in spec["clusters"]])
    traces = simulator.jitter_traces(traces, sample[0], sample[1])
    traces.append(simulator.large_jobs(traces, spec["large"], sample[1]))
    run = simulator.simulate(
        traces,
        spec["racks"],
        "2x9",
        policy,
        span_slowdown=1.5,
        checkpoint_loss_s=600.0,
        fabric=spec["fabric"],
        cross_unit_slowdown=slowdown,
        fabric_blind=blind,
        # "Soon enough": sooner than spanning units would cost it, by the replay's own cross-unit slowdown.
        engine_options={"fabric_wait_s": wait_s, "fabric_wait_slowdown": slowdown if soon else 0.0, **extra},
    )
    metrics = dict(run.metrics)
    metrics.pop("departments", None)
    return key, metrics


def _h(seconds: float | None) -> float:
    return (seconds or 0.0) / HOUR


FIGURES = (
    # (column, how to read it from the metrics, format)
    ("fitting one unit: inside one", lambda m: 100 * m["fabric"]["fitting_in_one_unit"], "{:.1f}%"),
    ("their avg wait h", lambda m: _h(m["fabric"]["fitting_one_unit"]["avg_wait_s"]), "{:.2f}"),
    ("their avg JCT h", lambda m: _h(m["fabric"]["fitting_one_unit"]["avg_jct_s"]), "{:.2f}"),
    ("multi-rack avg wait h", lambda m: _h(m["fabric"]["multi_rack"]["avg_wait_s"]), "{:.2f}"),
    ("multi-rack avg JCT h", lambda m: _h(m["fabric"]["multi_rack"]["avg_jct_s"]), "{:.2f}"),
    ("spine crossings (jobs across units)", lambda m: m["fabric"]["cross_unit_jobs"], "{:,.0f}"),
    ("across spine groups", lambda m: m["fabric"]["cross_spine_jobs"], "{:,.0f}"),
    ("single-rack avg wait h", lambda m: _h(m["fabric"]["single_rack"]["avg_wait_s"]), "{:.2f}"),
    ("single-rack avg JCT h", lambda m: _h(m["fabric"]["single_rack"]["avg_jct_s"]), "{:.2f}"),
    ("fitting one partition: in one", lambda m: 100 * m["fitting_multi_tray_in_one_partition"], "{:.1f}%"),
)


def _cell(values: list[float], form: str) -> str:
    low, high, mean = min(values), max(values), statistics.fmean(values)
    if form.format(low) == form.format(high):
        return form.format(mean)
    return f"{form.format(low)}-{form.format(high)} ({form.format(mean)})"


def tables(results: dict[str, dict], configs: list[str]) -> str:
    lines = []
    for half in HALVES:
        for slowdown in CROSS_UNIT_SLOWDOWNS:
            lines.append(
                f"\n{half} half, cross-unit slowdown {slowdown:g} (range over 3 samples, mean in brackets)\n"
            )
            lines.append("| configuration | " + " | ".join(name for name, _, _ in FIGURES) + " |")
            lines.append("| --- " * (len(FIGURES) + 1) + "|")
            for config in configs:
                runs = [results.get(_key(config, half, slowdown, s)) for s in SAMPLES]
                runs = [m for m in runs if m is not None]
                if runs:
                    cells = [_cell([read(m) for m in runs], form) for _, read, form in FIGURES]
                    partial = "" if len(runs) == len(SAMPLES) else f" ({len(runs)} of {len(SAMPLES)})"
                    lines.append(f"| {config}{partial} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def goals(results: dict[str, dict], config: str) -> str:
    """Issue 33's replay goals for `config`, per half and cross-unit slowdown (means over the samples)."""
    read = {name: fn for name, fn, _ in FIGURES}

    def mean(c: str, half: str, slowdown: float, figure: str) -> float | None:
        runs = [results.get(_key(c, half, slowdown, s)) for s in SAMPLES]
        runs = [m for m in runs if m is not None]
        return statistics.fmean(read[figure](m) for m in runs) if runs else None

    lines = [
        f"\nGoals for {config} (means; own vs rackplane topology-blind / first-fit)\n",
        "| half | cross-unit slowdown | >= 95% of fitting jobs in one unit | multi-rack JCT below the "
        "blind baselines | single-rack wait no worse than blind rackplane | single-rack JCT no worse |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for half in HALVES:
        for slowdown in CROSS_UNIT_SLOWDOWNS:
            own = {f: mean(config, half, slowdown, f) for f in read}
            blind = {f: mean(BASELINES[0], half, slowdown, f) for f in read}
            first = {f: mean(BASELINES[1], half, slowdown, f) for f in read}
            if None in (
                own["multi-rack avg JCT h"],
                blind["multi-rack avg JCT h"],
                first["multi-rack avg JCT h"],
            ):
                continue

            def verdict(ok: bool, text: str) -> str:
                return f"{'met' if ok else '**missed**'} ({text})"

            inside = own["fitting one unit: inside one"]
            jct = (own["multi-rack avg JCT h"], blind["multi-rack avg JCT h"], first["multi-rack avg JCT h"])
            wait = (own["single-rack avg wait h"], blind["single-rack avg wait h"])
            sjct = (own["single-rack avg JCT h"], blind["single-rack avg JCT h"])
            lines.append(
                f"| {half} | {slowdown:g} | {verdict(inside >= 95, f'{inside:.1f}%')} | "
                f"{verdict(jct[0] < min(jct[1:]), f'{jct[0]:.2f} h vs {jct[1]:.2f} / {jct[2]:.2f}')} | "
                f"{verdict(wait[0] <= wait[1], f'{wait[0]:.2f} h vs {wait[1]:.2f}')} | "
                f"{verdict(sjct[0] <= sjct[1], f'{sjct[0]:.2f} h vs {sjct[1]:.2f}')} |"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    results = replay_halves(
        __doc__,
        "benchmarks/results/fabric",
        CONFIGS,
        _key,
        _replay,
        argv,
        always=BASELINES,
        halves=HALVES,
        slowdowns=CROSS_UNIT_SLOWDOWNS,
        samples=SAMPLES,
    )
    print(tables(results, list(CONFIGS)))
    for config in CONFIGS:
        if config not in BASELINES:
            print(goals(results, config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
