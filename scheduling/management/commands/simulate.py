import json
import os
import platform
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from scheduling import simulator
from scheduling.engine.placement import POLICIES

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
            "3x6, or mixed like 1x10+2x4",
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
        outputs = [Path(options["out"])] + ([Path(options["html"])] if options["html"] else [])
        for path in outputs:
            if not path.parent.is_dir():
                raise CommandError(f"cannot write {path}: there is no directory {path.parent}")
        try:
            simulator.parse_layout(options["layout"])
            guarantees = simulator.parse_guarantees(options["guarantee"])
            checkpoint_loss_s = simulator.parse_duration(options["checkpoint_loss"])
            fallback = options["fallback_after"]
            fallback_after_s = (
                None if fallback.strip().lower() == "off" else simulator.parse_duration(fallback)
            )
            traces = simulator.load_traces(options["trace"])
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
                progress=lambda one: self.stderr.write(
                    f"{one.policy}: {one.metrics['jobs']:,} jobs replayed in {one.metrics['wall_s']:.1f}s"
                ),
            )
        except simulator.SimulationError as error:
            raise CommandError(str(error)) from error
        results["config"]["machine"] = _machine()

        try:
            Path(options["out"]).write_text(json.dumps(results, indent=2) + "\n")
            if options["html"]:
                from scheduling.report import render_html

                Path(options["html"]).write_text(render_html(results, runs))
        except OSError as error:
            raise CommandError(f"cannot write the results: {error}") from error

        config = results["config"]
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
        written = ", ".join(str(path) for path in outputs)
        self.stdout.write(self.style.SUCCESS(f"Replayed in {config['wall_s']:.1f}s; wrote {written}."))
