import argparse
import dataclasses
import json
import os
import platform
import shlex
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from scheduling import simulator
from scheduling.engine.mig_sizing import (
    DEFAULT_HEADROOM,
    DEFAULT_HISTORY_S,
    DEFAULT_PLACEMENT,
    MIG_PARTITION_TRAYS,
    PLACEMENTS,
)
from scheduling.engine.placement import POLICIES
from scheduling.engine.recarve import RecarvePolicy
from scheduling.engine.scheduler import Options

COLUMNS = (
    ("policy", "{:<15}", "{:<15}"),
    ("util", "{:>6}", "{:>6.1%}"),
    ("wait h", "{:>8}", "{:>8.2f}"),
    ("p95 h", "{:>8}", "{:>8.2f}"),
    ("JCT h", "{:>8}", "{:>8.2f}"),
    ("1-part (fit)", "{:>15}", "{:>15}"),
    ("x-rack", "{:>7}", "{:>7,}"),
    ("preempt", "{:>8}", "{:>8,}"),
    ("short GPU-h", "{:>12}", "{:>12,.0f}"),
    ("lost GPU-h", "{:>11}", "{:>11,.0f}"),
    (">36 p95 h", "{:>10}", "{:>10}"),
    ("dec/s", "{:>9}", "{:>9}"),
    ("wall s", "{:>7}", "{:>7.1f}"),
)


def _row(policy: str, m: dict) -> str:
    one = m["multi_tray_in_one_partition"]
    fit = m["fitting_multi_tray_in_one_partition"]
    big = m["wait_by_size"][">36"]["p95_wait_s"]
    values = (
        policy,
        m["gpu_utilization"],
        m["avg_wait_s"] / 3600,
        m["p95_wait_s"] / 3600,
        m["avg_jct_s"] / 3600,
        "n/a" if one is None else f"{one:.1%} ({'n/a' if fit is None else f'{fit:.1%}'})",
        m["cross_rack_jobs"],
        m["preemptions"],
        m["guarantee_shortfall_gpu_s"] / 3600,
        m["lost_work_gpu_s"] / 3600,
        "n/a" if big is None else f"{big / 3600:.2f}",
        "n/a" if m["decisions_per_s"] is None else f"{m['decisions_per_s']:,}",
        m["wall_s"],
    )
    return "  ".join(form.format(value) for (_, _, form), value in zip(COLUMNS, values, strict=True))


MIG_COLUMNS = (
    ("policy", "{:<15}", "{:<15}"),
    ("slice jobs", "{:>10}", "{:>10,}"),
    ("slice util", "{:>10}", "{:>10}"),
    ("stranded", "{:>9}", "{:>9.2f}"),
    ("<=1 GPU wait h", "{:>15}", "{:>15.2f}"),
    ("p95 h", "{:>8}", "{:>8.2f}"),
    ("gang wait h", "{:>12}", "{:>12.2f}"),
    ("gang JCT h", "{:>11}", "{:>11.2f}"),
    ("gang 1-part (fit)", "{:>18}", "{:>18}"),
)


AUTO = "auto"


def _mig_trays(text: str) -> int | str:
    """--mig-trays: a whole number of trays per rack, or "auto" (sized by the rule)."""
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of trays per rack, or auto") from None


def _mig_row(policy: str, m: dict) -> str:
    small, multi = m["one_gpu_or_smaller"], m["multi_tray"]
    one, fit = multi["in_one_partition"], multi["fitting_in_one_partition"]
    values = (
        policy,
        m["slice_jobs"],
        "n/a" if m["slice_utilization"] is None else f"{m['slice_utilization']:.1%}",
        m["avg_stranded_slices"],
        (small["avg_wait_s"] or 0) / 3600,
        (small["p95_wait_s"] or 0) / 3600,
        (multi["avg_wait_s"] or 0) / 3600,
        (multi["avg_jct_s"] or 0) / 3600,
        "n/a" if one is None else f"{one:.1%} ({'n/a' if fit is None else f'{fit:.1%}'})",
    )
    return "  ".join(form.format(value) for (_, _, form), value in zip(MIG_COLUMNS, values, strict=True))


def _parse_projects(items: list[str]) -> dict[str, str]:
    """['vision=alpha', ...] -> {'vision': 'alpha'}: the trace `vision` is a project of department alpha."""
    projects: dict[str, str] = {}
    for item in items:
        trace, sep, department = (part.strip() for part in item.partition("="))
        if not sep or not trace or not department:
            raise simulator.SimulationError(f"--project {item!r}: write TRACE=DEPARTMENT")
        if trace in projects:
            raise simulator.SimulationError(f"--project {trace} is given twice")
        projects[trace] = department
    return projects


def _parse_dedicated(items: list[str]) -> dict[str, int]:
    """['cluster03=2', ...] -> {'cluster03': 2}: two whole racks dedicated to department cluster03."""
    dedicated: dict[str, int] = {}
    for item in items:
        name, sep, racks = (part.strip() for part in item.partition("="))
        if not sep or not name or not racks.isdigit():
            raise simulator.SimulationError(f"--dedicate {item!r}: write DEPARTMENT=RACKS")
        if name in dedicated:
            raise simulator.SimulationError(f"--dedicate {name} is given twice")
        dedicated[name] = int(racks)
    return dedicated


def _command(options: dict) -> str:
    """The command line that made these results (the report and docs/simulator.md show it)."""
    words = ["manage.py", "simulate"]
    for path in options["trace"]:
        words += ["--trace", path]
    words += ["--racks", str(options["racks"]), "--layout", options["layout"]]
    for policy in options["policy"] or ():
        words += ["--policy", policy]
    for guarantee in options["guarantee"]:
        words += ["--guarantee", guarantee]
    for project in options["project"]:
        words += ["--project", project]
    words += [
        "--span-slowdown",
        f"{options['span_slowdown']:g}",
        "--preempted",
        options["preempted"],
        "--checkpoint-loss",
        options["checkpoint_loss"],
        "--fallback-after",
        options["fallback_after"],
        "--half-life",
        options["half_life"],
    ]
    if simulator.parse_duration(options["jitter"]):
        words += ["--jitter", options["jitter"], "--seed", str(options["seed"])]
    for name in ("min_runtime", "preempt_after"):
        if simulator.parse_duration(options[name]):
            words += [f"--{name.replace('_', '-')}", options[name]]
    for item in options["dedicate"]:
        words += ["--dedicate", item]
    if options["fabric"]:
        words += [
            "--fabric",
            options["fabric"],
            "--cross-unit-slowdown",
            f"{options['cross_unit_slowdown']:g}",
        ]
        words += ["--fabric-wait", options["fabric_wait"]]
        if options["fabric_blind"]:
            words += ["--fabric-blind"]
    if options["large_jobs"]:
        words += ["--large-jobs", str(options["large_jobs"]), "--seed", str(options["seed"])]
    if options["recarve"]:
        words += ["--recarve", "--recarve-smallest", str(options["recarve_smallest"])]
        words += ["--recarve-max-per-hour", str(options["recarve_max_per_hour"])]
        words += ["--recarve-delay", options["recarve_delay"], "--recarve-rule", options["recarve_rule"]]
        words += ["--recarve-wait", options["recarve_wait"]]
        if options["recarve_idle_trays"]:
            words += ["--recarve-idle-trays"]
    if options["mig_trays"] is not None:
        words += ["--mig-trays", str(options["mig_trays"]), "--mig-layout", options["mig_layout"]]
        words += ["--mig-gpus-per-tray", str(options["mig_gpus_per_tray"])]
        if options["mig_history"]:
            words += ["--mig-history", options["mig_history"]]
        if options["mig_trays"] == AUTO:
            words += ["--mig-headroom", f"{options['mig_headroom']:g}"]
            words += ["--mig-placement", options["mig_placement"]]
            words += ["--mig-rack-trays", str(options["mig_rack_trays"])]
        words += ["--mig-guarantees", options["mig_guarantees"]]
        words += ["--mig-rule", options["mig_rule"], "--slice-share", f"{options['slice_share']:g}"]
        words += ["--slice-mix", options["slice_mix"]]
    if options["faults"]:
        words += ["--faults", options["faults"], "--detect", options["detect"]]
        words += ["--check-time", options["check_time"], "--manual-delay", options["manual_delay"]]
    words += ["--out", options["out"]] + (["--html", options["html"]] if options["html"] else [])
    return shlex.join(words)


def _machine() -> dict:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu": model, "python": platform.python_version()}


FAULT_COLUMNS = (
    ("policy", "{:<15}", "{:<15}"),
    ("faults", "{:<10}", "{:<10}"),
    ("goodput GPU-h", "{:>14}", "{:>14,.0f}"),
    ("lost GPU-h", "{:>11}", "{:>11,.0f}"),
    ("jobs hit", "{:>9}", "{:>9,}"),
    ("JCT h", "{:>8}", "{:>8.2f}"),
    ("quarantine", "{:>11}", "{:>11}"),
    ("service h", "{:>10}", "{:>10}"),
)


def _fault_row(policy: str, mode: str, f: dict) -> str:
    quarantine = f["time_to_quarantine_s"]
    service = f["time_to_service_s"]
    values = (
        policy,
        mode,
        f["goodput_gpu_s"] / 3600,
        f["lost_work_gpu_s"] / 3600,
        f["jobs_hit"],
        f["avg_jct_s"] / 3600,
        "n/a" if quarantine is None else f"{quarantine / 60:g} min",
        "n/a" if service is None else f"{service / 3600:.1f}",
    )
    return "  ".join(form.format(value) for (_, _, form), value in zip(FAULT_COLUMNS, values, strict=True))


class Command(BaseCommand):
    help = (
        "Replay job traces (job_id,submission_time,duration,num_gpu CSVs, one department per file) in "
        "virtual time through the portal's own admission and placement engine, once per policy, and write "
        "the figures as JSON (and optionally an HTML report)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--trace",
            action="append",
            metavar="FILE",
            help="a trace CSV; repeat for several: each file is one department, named after the file",
        )
        parser.add_argument("--racks", type=int, help="NVL72 racks in the cluster")
        parser.add_argument(
            "--layout",
            default="1x18",
            help="NVLink partitions of every rack as COUNTxTRAYS, summing to 18 trays: 1x18 (default), 2x9, "
            "3x6, or mixed like 1x10+2x4; bare tray counts joined with + too (16+2, 8+8+2)",
        )
        parser.add_argument(
            "--policy",
            action="append",
            metavar="POLICY",
            help=f"{', '.join(POLICIES)}; repeat for several (default: all three)",
        )
        parser.add_argument(
            "--guarantee",
            action="append",
            default=[],
            metavar="NAME=GPUS",
            help="a department's guaranteed GPUs; the others split the rest by GPU-hours",
        )
        parser.add_argument(
            "--project",
            action="append",
            default=[],
            metavar="TRACE=DEPARTMENT",
            help="replay a trace as a project of DEPARTMENT (a name that is no trace's); its guarantee is "
            "its own and the department's is the sum of its projects' (repeat per project)",
        )
        parser.add_argument(
            "--span-slowdown",
            type=float,
            default=simulator.DEFAULT_SPAN_SLOWDOWN,
            help="how many times longer a job runs when its trays span NVLink partitions (default "
            f"{simulator.DEFAULT_SPAN_SLOWDOWN}; 1.0 turns it off)",
        )
        parser.add_argument(
            "--preempted",
            default=simulator.RESUME,
            metavar="MODE",
            help="resume (default: a preempted job checkpointed and needs only the work it had left) or "
            "restart (it starts over)",
        )
        parser.add_argument(
            "--checkpoint-loss",
            default=f"{simulator.DEFAULT_CHECKPOINT_LOSS_S / 60:g}m",
            metavar="DURATION",
            help="work a resumed job loses per preemption: the time since its last checkpoint and its "
            "restart, at most what the cut run lasted (default 10m; seconds, or with s, m or h; 0: none)",
        )
        parser.add_argument(
            "--fallback-after",
            default=f"{simulator.DEFAULT_FALLBACK_AFTER_S / 60:g}m",
            metavar="DURATION",
            help="how long an in-quota gang of more than half a partition waits for one partition before it "
            "takes a rack (and a rack-sized gang any trays); default 60m, 'off' keeps every job strict",
        )
        parser.add_argument(
            "--jitter",
            default="0",
            metavar="DURATION",
            help="shift every submission later by a random 0 to DURATION (default 0: as in the trace); one "
            "sample of the chaotic replay, reproducible with --seed",
        )
        parser.add_argument(
            "--seed", type=int, default=1, help="the random generator's seed for --jitter (default 1)"
        )
        parser.add_argument(
            "--min-runtime",
            default="0",
            metavar="DURATION",
            help="how long a borrowing (training) job runs before it may be preempted for another "
            "department's guarantee (KAI's reclaim-min-runtime, Slurm's PreemptExemptTime); default 0: "
            "at once",
        )
        parser.add_argument(
            "--preempt-after",
            default="0",
            metavar="DURATION",
            help="how long an in-quota job waits after its submission before it may preempt borrowed work "
            "(the preemption grace); default 0: at once",
        )
        parser.add_argument(
            "--half-life",
            default="off",
            metavar="DURATION",
            help="historical fair share: borrowers are ordered by their GPU usage decayed with this "
            "half-life (7d is Slurm's PriorityDecayHalfLife default) as well as by the instant's share; "
            "default off "
            "(docs/simulator.md, Historical fair share)",
        )
        parser.add_argument(
            "--dedicate",
            action="append",
            default=[],
            metavar="DEPARTMENT=RACKS",
            help="dedicate whole racks' partitions to a department (its in-quota work there first, others' "
            "only as borrowed work); the first racks, in the order given (repeat per department)",
        )
        parser.add_argument(
            "--recarve",
            action="store_true",
            help="carving that follows demand, for rackplane: after each pass, wholly idle partitions of a "
            "rack are merged or split into the partition a waiting in-quota gang needs (every rack under "
            "the bounds below; docs/simulator.md, Carving that follows demand)",
        )
        parser.add_argument(
            "--recarve-smallest",
            type=int,
            default=1,
            metavar="TRAYS",
            help="with --recarve: no partition a re-carve makes is smaller (default 1)",
        )
        parser.add_argument(
            "--recarve-max-per-hour",
            type=int,
            default=2,
            metavar="N",
            help="with --recarve: re-carves of one rack in any rolling hour (default 2)",
        )
        parser.add_argument(
            "--recarve-delay",
            default=f"{simulator.DEFAULT_RECARVE_DELAY_S / 60:g}m",
            metavar="DURATION",
            help="with --recarve: how long a re-carve keeps its trays out of service (the NMX-M partition "
            "operation and the nodes' new cliques reported; default 2m)",
        )
        parser.add_argument(
            "--recarve-wait",
            default="fallback",
            metavar="DURATION",
            help="with --recarve: how long an in-quota gang larger than the layout's largest partition waits "
            "for a re-carve before it takes a rack (default 'fallback': --fallback-after, like other gangs)",
        )
        parser.add_argument(
            "--recarve-idle-trays",
            action="store_true",
            help="with --recarve: also gather idle trays out of partitions whose other trays run work "
            "(the policy's 'idle trays' bound; default: only wholly idle partitions are re-carved)",
        )
        parser.add_argument(
            "--recarve-rule",
            default=simulator.SLURM_24_11,
            choices=simulator.RECARVE_RULES,
            help="with --recarve: the fleet-wide rule every layout obeys: slurm-24.11 (default, what the "
            "partition wizard checks) or none (a what-if: Slurm 25.05+ topology.yaml; the wizard refuses "
            "such layouts today)",
        )
        parser.add_argument(
            "--faults",
            metavar="FILE",
            help="a node fault trace (the JSON of shared/traces/faults/) replayed with the jobs, each node "
            "onto one compute tray: every policy is replayed twice more, faults handled automated and manual "
            "(docs/simulator.md), and its results get `faults`",
        )
        parser.add_argument(
            "--detect",
            default=f"{simulator.DEFAULT_DETECT_S:g}s",
            metavar="DURATION",
            help="with --faults, automated: from a fault to the tray drained (the agent's interval; "
            "default 60s)",
        )
        parser.add_argument(
            "--check-time",
            default=f"{simulator.DEFAULT_CHECK_S / 60:g}m",
            metavar="DURATION",
            help="with --faults, automated: from the repair to the tray back in service (healthy reports and "
            "an active check; default 30m)",
        )
        parser.add_argument(
            "--manual-delay",
            default=f"{simulator.DEFAULT_MANUAL_DELAY_S / 3600:g}h",
            metavar="DURATION",
            help="with --faults, manual: from a fault to its dead jobs resubmitted by hand and the tray "
            "drained (default 2h)",
        )
        parser.add_argument(
            "--mig-trays",
            type=_mig_trays,
            metavar="N|auto",
            help="MIG (docs/simulator.md): the last N trays of every rack in MIG mode, which must be whole "
            "partitions at the end of --layout (9+8+1 for 1, 9+7+2 for 2); slice jobs take their instances, "
            "no whole-GPU or multi-tray job lands there; 0: whole-GPU placement with the same figures; "
            "auto: trays, MIG GPUs per tray and the rack layout sized by the rule from the --mig-history "
            "window's sub-GPU share of GPU-hours (replaces --layout and --mig-gpus-per-tray)",
        )
        parser.add_argument(
            "--mig-history",
            default=None,
            metavar="DURATION",
            help="with --mig-trays: the history window from the first submission (e.g. 14d) whose jobs run "
            "but are not scored in the MIG figures; with auto, the window the MIG capacity is sized from "
            f"(default {DEFAULT_HISTORY_S / 86400:g}d with auto, else 0)",
        )
        parser.add_argument(
            "--mig-headroom",
            type=float,
            default=DEFAULT_HEADROOM,
            metavar="H",
            help=f"with --mig-trays auto: MIG GPUs = ceil(H x sub-GPU share x fleet GPUs) (default "
            f"{DEFAULT_HEADROOM:g}, chosen on the tuning half)",
        )
        parser.add_argument(
            "--mig-placement",
            choices=PLACEMENTS,
            default=DEFAULT_PLACEMENT,
            help="with --mig-trays auto: per-rack (the same MIG trays on every rack, layout 17+1 or 8+8+2) "
            "or concentrated (on the fewest racks, every rack kept 2x9, the MIG trays inside a rack's last "
            f"partition; default {DEFAULT_PLACEMENT})",
        )
        parser.add_argument(
            "--mig-rack-trays",
            type=int,
            default=MIG_PARTITION_TRAYS,
            metavar="N",
            help=f"with --mig-placement concentrated: at most N MIG trays a rack (1-{MIG_PARTITION_TRAYS}, "
            f"default {MIG_PARTITION_TRAYS})",
        )
        parser.add_argument(
            "--mig-guarantees",
            choices=simulator.GUARANTEE_SPLITS,
            default=simulator.ALL_WORK,
            help="with --mig-trays: the departments' guarantees split the whole GPUs by all their work "
            "(all-work, the default) or by their whole-GPU work only (whole-work: the slice requests run on "
            "the MIG GPUs, outside the guarantees)",
        )
        parser.add_argument(
            "--mig-gpus-per-tray",
            type=int,
            default=4,
            metavar="N",
            help="with --mig-trays: how many GPUs of each MIG tray are in MIG mode (1-4, default 4); the "
            "others stay whole for jobs of 1-3 GPUs",
        )
        parser.add_argument(
            "--mig-layout",
            default="all-balanced",
            metavar="LAYOUT",
            help="with --mig-trays: every MIG GPU's instances, a GB200 layout's name (all-balanced, "
            "all-1g.23gb, all-2g.47gb, all-3g.93gb, ...) or PROFILE:COUNT joined with ',' (default "
            "all-balanced: 1g.23gb:2,2g.47gb:1,3g.93gb:1)",
        )
        parser.add_argument(
            "--mig-rule",
            default=simulator.BEST_FIT,
            choices=simulator.SLICE_RULES,
            help="with --mig-trays: which free instance a slice job takes (default best-fit)",
        )
        parser.add_argument(
            "--slice-share",
            type=float,
            default=1.0,
            metavar="SHARE",
            help="with --mig-trays: the share of 1-GPU jobs that ask for a slice (0-1, default 1; the ITP "
            "traces record no GPU utilisation or memory, so this is stated, not measured)",
        )
        parser.add_argument(
            "--slice-mix",
            default="1g.23gb=5,2g.47gb=3,3g.93gb=2",
            metavar="PROFILE=WEIGHT,...",
            help="with --mig-trays: the profiles slice jobs ask for and their weights (default "
            "1g.23gb=5,2g.47gb=3,3g.93gb=2); also the fragmentation-aware rule's expected mix",
        )
        parser.add_argument(
            "--workers",
            type=int,
            default=os.cpu_count() or 1,
            metavar="N",
            help="replays run side by side in N processes (default: the CPUs; 1: one after another); the "
            "figures are the same",
        )
        parser.add_argument(
            "--fabric",
            metavar="units=U,racks-per-unit=R,spines=S",
            help="hang the racks under a compute fabric: R racks to a scalable unit, the U units split over "
            "S spine groups (U*R must be --racks); rackplane then keeps multi-rack jobs inside one unit when "
            "it can, and the results get the fabric's figures (docs/simulator.md, The compute fabric)",
        )
        parser.add_argument(
            "--cross-unit-slowdown",
            type=float,
            default=simulator.DEFAULT_CROSS_UNIT_SLOWDOWN,
            metavar="X",
            help="with --fabric: a job whose racks span scalable units runs X times longer again "
            f"(default {simulator.DEFAULT_CROSS_UNIT_SLOWDOWN:g})",
        )
        parser.add_argument(
            "--fabric-wait",
            default=f"{Options.fabric_wait_s / 60:g}m",
            metavar="DURATION",
            help="with --fabric: a multi-rack job that could fit one scalable unit waits for one up to "
            "DURATION from when it could first have started across units, then spans them "
            f"(default {Options.fabric_wait_s / 60:g}m, the engine's; 0: at once)",
        )
        parser.add_argument(
            "--fabric-blind",
            action="store_true",
            help="with --fabric: every policy places as if the fabric were flat (the topology-blind "
            "baseline); the figures and the slowdown still follow the fabric",
        )
        parser.add_argument(
            "--large-jobs",
            type=int,
            default=0,
            metavar="N",
            help="add N jobs of the synthetic large-job mix (96-256 GPUs, 1-12 h; scheduling/"
            "simulation_fabric.py) as one more department, drawn with --seed",
        )
        parser.add_argument("--out", metavar="FILE", help="results JSON to write")
        parser.add_argument("--html", metavar="FILE", help="HTML report to write (plotly, self-contained)")
        # The wizard's what-if from the command line (_from_history.py): --trace, --racks and --out are
        # required only without it.
        parser.add_argument(
            "--from-history",
            type=int,
            metavar="DAYS",
            help="instead of traces, replay the portal's own jobs of the last DAYS days (1-30) on its racks "
            "as they are and on each --carve candidate, and print the comparison",
        )
        parser.add_argument(
            "--carve",
            action="append",
            default=[],
            metavar="RACK=LAYOUT",
            help="with --from-history: a candidate layout, one rack carved anew (gb-r01=2x9) or every rack "
            "(all=3x6); repeat for several (default: all=1x18 and all=2x9)",
        )

    def handle(self, *args, **options):
        if options["from_history"] is not None:
            from scheduling.management.commands._from_history import handle_from_history

            return handle_from_history(self, options)
        if options["carve"]:
            raise CommandError("--carve goes with --from-history DAYS")
        missing = [f"--{name}" for name in ("trace", "racks", "out") if options[name] is None]
        if missing:
            raise CommandError(
                f"the following arguments are required: {', '.join(missing)} (or --from-history)"
            )
        policies = options["policy"] or list(POLICIES)
        unknown = [p for p in policies if p not in POLICIES]
        if unknown:
            raise CommandError(f"unknown policy {', '.join(unknown)} (known: {', '.join(POLICIES)})")
        if options["racks"] < 1:
            raise CommandError("--racks must be at least 1")
        if options["workers"] < 1:
            raise CommandError("--workers must be at least 1")
        outputs = [Path(options["out"])] + ([Path(options["html"])] if options["html"] else [])
        for path in outputs:
            if not path.parent.is_dir():
                raise CommandError(f"cannot write {path}: there is no directory {path.parent}")
        try:
            simulator.parse_layout(options["layout"])
            guarantees = simulator.parse_guarantees(options["guarantee"])
            projects = _parse_projects(options["project"])
            checkpoint_loss_s = simulator.parse_duration(options["checkpoint_loss"])
            fallback = options["fallback_after"]
            fallback_after_s = (
                None if fallback.strip().lower() == "off" else simulator.parse_duration(fallback)
            )
            engine_options = {}
            if min_runtime_s := simulator.parse_duration(options["min_runtime"]):
                engine_options["min_runtime_s"] = {"train": min_runtime_s}
            if preempt_after_s := simulator.parse_duration(options["preempt_after"]):
                engine_options["preempt_after_s"] = preempt_after_s
            fabric_wait_s = simulator.parse_duration(options["fabric_wait"])
            if options["fabric"]:
                engine_options["fabric_wait_s"] = fabric_wait_s
            elif fabric_wait_s != Options.fabric_wait_s or options["fabric_blind"]:
                raise simulator.SimulationError("--fabric-wait and --fabric-blind go with --fabric")
            half_life = options["half_life"]
            half_life_s = None if half_life.strip().lower() == "off" else simulator.parse_duration(half_life)
            traces = simulator.load_traces(options["trace"])
            jitter_s = simulator.parse_duration(options["jitter"])
            traces = simulator.jitter_traces(traces, jitter_s, options["seed"])
            if options["large_jobs"]:
                traces.append(simulator.large_jobs(traces, options["large_jobs"], options["seed"]))
            dedicated = _parse_dedicated(options["dedicate"]) or None
            recarve = None
            if options["recarve"]:
                recarve = simulator.RecarvePlan(
                    RecarvePolicy(
                        options["recarve_smallest"],
                        options["recarve_max_per_hour"],
                        idle_trays=options["recarve_idle_trays"],
                    ),
                    delay_s=simulator.parse_duration(options["recarve_delay"]),
                    rule=options["recarve_rule"],
                    wait_s=None
                    if options["recarve_wait"].strip().lower() == "fallback"
                    else simulator.parse_duration(options["recarve_wait"]),
                )
            mig, sizing = None, None
            if options["mig_trays"] is not None:
                auto = options["mig_trays"] == AUTO
                history = options["mig_history"] or (f"{DEFAULT_HISTORY_S:g}" if auto else "0")
                mig = simulator.parse_mig_plan(
                    0 if auto else options["mig_trays"],
                    options["mig_layout"],
                    options["mig_rule"],
                    options["slice_share"],
                    options["slice_mix"],
                    options["mig_gpus_per_tray"],
                    history_s=simulator.parse_duration(history),
                )
                mig = dataclasses.replace(
                    mig, whole_work_guarantees=options["mig_guarantees"] == simulator.WHOLE_WORK
                )
                if auto:
                    mig, sizing = simulator.auto_mig_plan(
                        traces,
                        options["racks"],
                        mig,
                        mig.history_s,
                        options["mig_headroom"],
                        options["mig_placement"],
                        options["mig_rack_trays"],
                    )
                    options["layout"] = sizing.layout
            faults = None
            if options["faults"]:
                faults = simulator.FaultPlan(
                    simulator.load_faults(options["faults"]),
                    detect_s=simulator.parse_duration(options["detect"]),
                    check_s=simulator.parse_duration(options["check_time"]),
                    manual_delay_s=simulator.parse_duration(options["manual_delay"]),
                )
            results, runs = simulator.run(
                traces,
                options["racks"],
                options["layout"],
                policies,
                span_slowdown=options["span_slowdown"],
                guarantees=guarantees,
                preempted=options["preempted"],
                checkpoint_loss_s=checkpoint_loss_s,
                fallback_after_s=fallback_after_s,
                engine_options=engine_options or None,
                faults=faults,
                workers=options["workers"],
                projects=projects,
                half_life_s=half_life_s,
                recarve=recarve,
                dedicated=dedicated,
                mig=mig,
                fabric=options["fabric"],
                cross_unit_slowdown=options["cross_unit_slowdown"],
                fabric_blind=options["fabric_blind"],
                progress=lambda one: self.stderr.write(
                    f"{one.policy}: {one.metrics['jobs']:,} jobs replayed in {one.metrics['wall_s']:.1f}s"
                ),
            )
        except simulator.SimulationError as error:
            raise CommandError(str(error)) from error
        results["config"]["machine"] = _machine()
        results["config"]["command"] = _command(options)
        if jitter_s:
            results["config"]["jitter"] = {"max_s": jitter_s, "seed": options["seed"]}
        if sizing is not None:  # what the rule read and chose (--mig-trays auto)
            results["config"]["mig"]["sizing"] = dataclasses.asdict(sizing)

        try:
            Path(options["out"]).write_text(json.dumps(results, indent=2) + "\n")
            if options["html"]:
                from scheduling.report import render_html

                Path(options["html"]).write_text(render_html(results, runs))
        except OSError as error:
            raise CommandError(f"cannot write the results: {error}") from error

        config = results["config"]
        for line in simulator.quirks(config):
            self.stderr.write(f"note: {line}")
        self.stdout.write(
            f"{config['jobs']:,} jobs from {len(traces)} trace(s) on {config['racks']} racks "
            f"({config['layout']}, {config['capacity_gpus']} GPUs), span slowdown "
            f"{config['span_slowdown']}x, preempted jobs {config['preempted_jobs']}"
            + (
                f" (each losing up to {config['checkpoint_loss_s'] / 60:g} min of work):"
                if config["preempted_jobs"] == simulator.RESUME
                else ":"
            )
        )
        self.stdout.write("  ".join(head.format(name) for name, head, _ in COLUMNS))
        for policy, metrics in results["policies"].items():
            self.stdout.write(_row(policy, metrics))
        for policy, metrics in results["policies"].items():
            if "fabric" in metrics:
                f = metrics["fabric"]
                inside = f["fitting_in_one_unit"]
                jct = f["multi_rack"]["avg_jct_s"]
                self.stdout.write(
                    f"{policy}: {f['multi_rack']['jobs']:,} multi-rack jobs, "
                    f"{f['fitting_one_unit']['jobs']:,} fitting one unit, "
                    f"{'-' if inside is None else f'{inside:.1%}'} of those inside one; multi-rack average "
                    f"JCT {'-' if jct is None else f'{jct / 3600:.2f} h'}; {f['cross_unit_jobs']:,} jobs "
                    f"across units (spine crossings), {f['cross_spine_jobs']:,} across spine groups"
                )
        for policy, metrics in results["policies"].items():
            if "recarve" in metrics:
                r = metrics["recarve"]
                self.stdout.write(
                    f"{policy} re-carved {r['recarves']:,} times ({r['merges']:,} merges) on "
                    f"{r['racks_recarved']} racks, {r['recarving_gpu_s'] / 3600:,.1f} GPU-h of trays "
                    "re-carving; "
                    f"{r['gangs_started_on_recarved_partition']:,} gangs started on their new partition; "
                    f"racks at the end: {', '.join(f'{n} x {k}' for k, n in r['final_layout'].items())}"
                )
        if sizing is not None:
            self.stdout.write(
                f"MIG sized by the rule: sub-GPU work took {sizing.share:.1%} of the GPU-hours of the first "
                f"{mig.history_s / 86400:g} days; ceil({options['mig_headroom']:g} x that x the fleet's "
                f"GPUs) = {sizing.mig_gpus} MIG GPUs: {sizing.describe()}"
            )
        if mig is not None:
            self._mig_table(results)
        if faults is not None:
            self._fault_table(results)
        written = ", ".join(str(path) for path in outputs)
        self.stdout.write(self.style.SUCCESS(f"Replayed in {config['wall_s']:.1f}s; wrote {written}."))

    def _mig_table(self, results: dict) -> None:
        config = results["config"]["mig"]
        self.stdout.write(
            f"MIG: {config['trays']} trays ({config['trays_per_rack']} per rack, {config['gpus_per_tray']} "
            "GPUs of each in MIG mode), every MIG GPU "
            f"{config['layout']} ({', '.join(config['instances'])}), slices by {config['rule']}; "
            f"{config['slice_share']:.0%} of 1-GPU jobs ask for a slice of {config['slice_mix']}:"
        )
        self.stdout.write("  ".join(head.format(name) for name, head, _ in MIG_COLUMNS))
        for policy, metrics in results["policies"].items():
            self.stdout.write(_mig_row(policy, metrics["mig"]))

    def _fault_table(self, results: dict) -> None:
        config = results["config"]["faults"]
        self.stdout.write(
            f"Node faults from {config['trace']}: {config['cluster_faults']} of its {config['trace_faults']} "
            f"faults fall on this cluster's trays ({config['trays_with_faults']} trays); automated: drained "
            f"{config['detect_s']:g}s after a fault, back {config['check_s'] / 60:g} min after the repair; "
            f"manual: jobs resubmitted and the tray drained {config['manual_delay_s'] / 3600:g} h after it:"
        )
        self.stdout.write("  ".join(head.format(name) for name, head, _ in FAULT_COLUMNS))
        for policy, metrics in results["policies"].items():
            for mode, figures in metrics["faults"].items():
                self.stdout.write(_fault_row(policy, mode, figures))
