"""`manage.py simulate --from-history DAYS`: the wizard's what-if from the command line.

The portal's own jobs of the last DAYS days replayed (scheduling.whatif_runs.compare, in this process) on
the cluster as it is and on each `--carve RACK=LAYOUT` candidate (`all=LAYOUT` carves every rack), then the
comparison printed. With `--mig-trays N [--mig-layout LAYOUT]` the candidate is instead the last N trays of
every rack given that MIG layout (a name of the catalogue their GPUs' reported profiles allow, as the tray
page offers), against the cluster now with its trays' own MIG layouts: the MIG figures (the tray page's
"What would this do?"). Not a command of its own (the leading underscore): simulate.py hands over to it.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import CommandError

from inventory.models import ComputeTray, Rack
from scheduling import simulator, whatif_runs
from scheduling.engine.mig_sizing import MIG_PARTITION_TRAYS, PER_RACK
from scheduling.whatif import MIG_FIGURES, Carving, WhatIfError, comparison_text

DEFAULT_CARVINGS = ("all=1x18", "all=2x9")
# Options that describe trace files and a made-up cluster: a history replay has its own.
TRACE_ONLY = ("trace", "racks", "policy", "html")
# MIG options that only make sense for a trace (the history's jobs asked for their slices themselves), with
# their defaults: one given otherwise is refused.
MIG_TRACE_ONLY = {
    "mig_gpus_per_tray": 4,
    "mig_rule": simulator.BEST_FIT,
    "slice_share": 1.0,
    "slice_mix": "1g.23gb=5,2g.47gb=3,3g.93gb=2",
    # The history's departments have their own guarantees; the MIG trays are named, not sized.
    "mig_guarantees": simulator.ALL_WORK,
    "mig_placement": PER_RACK,
    "mig_rack_trays": MIG_PARTITION_TRAYS,
}


def mig_candidate(options) -> tuple[list[tuple[str, list[Carving]]], list[dict]]:
    """`--mig-trays N --mig-layout NAME`: the last N trays of every rack carved by NAME, as (layouts, the
    MIG data of the cluster now and of the candidate); CommandError in words."""
    count = options["mig_trays"]
    odd = [f"--{k.replace('_', '-')}" for k, default in MIG_TRACE_ONLY.items() if options.get(k) != default]
    if odd:
        raise CommandError(
            f"--from-history replays the jobs that asked for MIG slices as they asked: {', '.join(odd)} "
            "do not apply (every GPU of a MIG tray takes the layout)"
        )
    if options.get("carve"):
        raise CommandError("--from-history compares either --carve layouts or a --mig-trays layout, not both")
    if not 1 <= count < 18:
        raise CommandError(f"--mig-trays {count}: give 1-17 trays per rack")
    chosen: list[ComputeTray] = []
    for rack in Rack.objects.order_by("name").prefetch_related("trays"):
        chosen += sorted(rack.trays.all(), key=lambda t: t.slot)[-count:]
    if not chosen:
        raise CommandError("The inventory has no compute trays: there is nothing to give a MIG layout.")
    try:
        layout, profiles = whatif_runs.tray_mig_choice(chosen[0], options["mig_layout"].strip())
    except WhatIfError as error:
        raise CommandError(f"--mig-layout: {error}") from error
    data, candidate = whatif_runs.mig_layouts([t.hostname for t in chosen], layout, profiles)
    return [candidate], data


def carvings(items: list[str], racks: list[str]) -> list[tuple[str, list[Carving]]]:
    """`['gb-r01=2x9', 'all=3x6']` -> [(label, carvings)]; CommandError in words for a bad one."""
    layouts = []
    for item in items:
        rack, sep, layout = item.partition("=")
        rack = rack.strip()
        if not sep or not rack:
            raise CommandError(f"--carve {item!r}: write RACK=LAYOUT (e.g. gb-r01=2x9), or all=LAYOUT")
        try:
            sizes = simulator.parse_layout(layout)
        except simulator.SimulationError as error:
            raise CommandError(f"--carve {item!r}: {error}") from error
        targets = racks if rack == "all" else [rack]
        if rack != "all" and rack not in racks:
            raise CommandError(f"--carve {item!r}: there is no rack {rack} in the inventory")
        partitions, slot = [], 1
        for number, size in enumerate(sizes, start=1):
            partitions.append((f"p{number}", tuple(range(slot, slot + size)), None))
            slot += size
        label = f"{'every rack' if rack == 'all' else rack} as {layout.strip()}"
        layouts.append((label, [Carving(name, tuple(partitions)) for name in targets]))
    return layouts


def handle_from_history(command, options) -> None:
    days = options["from_history"]
    given = [f"--{name.replace('_', '-')}" for name in TRACE_ONLY if options.get(name)]
    if given:
        raise CommandError(
            f"--from-history replays the portal's own jobs on its own racks: {', '.join(given)} "
            "do not apply (use --carve RACK=LAYOUT for the layouts to compare)"
        )
    if options.get("guarantee"):
        raise CommandError("--from-history uses the departments' own guarantees: --guarantee does not apply")
    racks = list(Rack.objects.order_by("name").values_list("name", flat=True))
    if not racks:
        raise CommandError("The inventory has no racks: there is no cluster to replay on.")
    mig: list[dict] = []
    if options.get("mig_trays") is not None:
        layouts, mig = mig_candidate(options)
    else:
        layouts = carvings(options.get("carve") or list(DEFAULT_CARVINGS), racks)
    if len(layouts) + 1 > whatif_runs.MAX_LAYOUTS:
        raise CommandError(f"At most {whatif_runs.MAX_LAYOUTS - 1} --carve candidates at once")
    out = Path(options["out"]) if options.get("out") else None
    if out is not None and not out.parent.is_dir():
        raise CommandError(f"cannot write {out}: there is no directory {out.parent}")
    try:
        checkpoint_loss_s = simulator.parse_duration(options["checkpoint_loss"])
        history, results = whatif_runs.compare(
            days,
            layouts,
            span_slowdown=options["span_slowdown"],
            preempted=options["preempted"],
            checkpoint_loss_s=checkpoint_loss_s,
            mig=mig,
            progress=lambda label, figures, error: command.stderr.write(
                f"{label}: "
                + (f"replayed in {figures['wall_s']:.1f}s" if figures else f"not replayed: {error}")
            ),
        )
    except (WhatIfError, simulator.SimulationError) as error:
        raise CommandError(str(error)) from error
    if not history.jobs:
        command.stdout.write(
            f"No job was submitted or ran in the last {days} day{'s' if days != 1 else ''}: there is nothing "
            "to replay. Choose a longer window, or run it once the cluster has run work."
        )
        return
    command.stdout.write(
        f"{len(history.jobs):,} jobs of {len(history.departments)} department(s) from the last {days} "
        f"day{'s' if days != 1 else ''}, replayed under the rackplane policy:"
    )
    for label, figures, error in results:
        command.stdout.write(f"  {label}: {figures['layout'] if figures else 'not replayed: ' + error}")
    for note in history.notes + [n for _, figures, _ in results if figures for n in figures["notes"]]:
        command.stdout.write(f"  Note: {note}")
    command.stdout.write(
        comparison_text([(label, figures) for label, figures, _ in results], *([MIG_FIGURES] if mig else []))
    )
    if out is not None:
        data = {
            "days": days,
            "jobs": len(history.jobs),
            "window": [history.window_start, history.window_end],
            "notes": history.notes,
            **({"mig": mig} if mig else {}),
            "layouts": [
                {"label": label, "figures": figures, "error": error} for label, figures, error in results
            ],
        }
        try:
            out.write_text(json.dumps(data, indent=2) + "\n")
        except OSError as error:
            raise CommandError(f"cannot write the results: {error}") from error
        command.stdout.write(command.style.SUCCESS(f"Wrote {out}."))
