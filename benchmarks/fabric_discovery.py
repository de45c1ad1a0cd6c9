"""Fabric discovery speed for benchmarks/scale.py (part `fabric`; issue 33's goal: "Discovery reads real
ibnetdiscover output for a few hundred switches in under a second").

A rail-optimized fabric over the seeded racks, written line for line in ibnetdiscover's topology format (the
generator of tests/inventory/fabric_fixtures.py, written from rdma-core's ibnetdiscover.c; its sources are in
tests/inventory/fixtures/fabric/README.md): spine groups of scalable units, each unit's racks' trays with
their four NICs (mlx5_0-3, one per GPU) on the unit's four rail leaves, every leaf cabled to each spine of
its group, the spines to two core switches. The default shape: 8 spine groups x 8 units x 2 racks (128
racks, 2,304 trays, 9,216 host adapters), 16 spines a group: 386 switches (with fewer racks seeded, a unit
per rack under one spine group: `at_goal_size` false).

Measured (each the median of `runs`, after one unmeasured run; wall time and this process's CPU time, which
tells what a quiet machine takes when others share this one):
* `parse_s`: the text -> the fabric (inventory.discovery.fabric.read: decoding the upload's bytes, reading
  every line, grouping leaves into units and spine groups, each GPU's rail): what "reads the output" means;
* `preview_s`: the parse plus the import's preview against the inventory (inventory.fabric_import.plan:
  every host matched to its tray, every rack's unit by its trays' votes), which the import page shows
  before anything is written; it reads the database (the seeded racks and trays);
* `partial_refused_s`: the same output cut in the middle of a line two thirds down, refused naming the
  line it stopped at (read, not the database).

Prints figures and whether the goal was met on this machine; never fails on a time.
"""

from __future__ import annotations

import statistics
import time

GOAL_S = 1.0
SHAPE = {"spine_groups": 8, "units_per_group": 8, "racks_per_unit": 2, "spines_per_group": 16}


def _median(function, runs: int) -> tuple[float, float]:
    """(wall, CPU) seconds of `function`, each the median of `runs`: on a machine shared with other work the
    wall time is what a person waits, the CPU time (this process's) what a quiet machine would take."""
    function()  # warm: imports, regex compilation
    wall, cpu = [], []
    for _ in range(runs):
        started, started_cpu = time.perf_counter(), time.process_time()
        function()
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return statistics.median(wall), statistics.median(cpu)


def racks_needed(shape: dict) -> int:
    return shape["spine_groups"] * shape["units_per_group"] * shape["racks_per_unit"]


def dump(rack_names: list[str], shape: dict = SHAPE) -> str:
    """ibnetdiscover's output for `shape` over the first racks of `rack_names` (their trays named as the
    inventory names them: inventory.demo.tray_hostname)."""
    from inventory.demo import tray_hostname
    from tests.inventory.fabric_fixtures import ibnetdiscover

    names = sorted(rack_names)
    return ibnetdiscover(rack_name=lambda n: names[n - 1], hostname=tray_hostname, **shape)


def measure(runs: int = 5, shape: dict = SHAPE) -> dict:
    """The figures above, on the seeded database (at least the shape's racks, named as the demo names
    them)."""
    from inventory import fabric_import
    from inventory.discovery.fabric.parsed import FabricInputError
    from inventory.discovery.fabric.read import read
    from inventory.models import Rack

    racks = list(Rack.objects.values_list("name", flat=True))
    if len(racks) < racks_needed(shape):
        # A small run (`--racks 3`): one spine group, a unit per rack: the same code, not the goal's size.
        shape = {"spine_groups": 1, "units_per_group": len(racks), "racks_per_unit": 1, "spines_per_group": 2}
    text = dump(racks, shape)
    data = text.encode()
    parsed = read("ibnetdiscover", data)
    plan = fabric_import.plan(parsed)
    lines = text.splitlines()
    cut_line = 2 * len(lines) // 3
    while not lines[cut_line - 1].strip():  # a line with something to cut
        cut_line += 1
    partial = ("\n".join(lines[: cut_line - 1]) + "\n" + lines[cut_line - 1][:7]).encode()

    def refused() -> int | None:
        try:
            read("ibnetdiscover", partial)
        except FabricInputError as error:
            return error.line
        raise AssertionError("partial output was taken")

    parse_s, parse_cpu_s = _median(lambda: read("ibnetdiscover", data), runs)
    preview_s, preview_cpu_s = _median(lambda: fabric_import.plan(read("ibnetdiscover", data)), runs)
    partial_s, _cpu = _median(refused, runs)
    return {
        "switches": text.count("\nSwitch\t"),
        "host_adapters": text.count("\nCa\t"),
        "lines": len(lines),
        "megabytes": round(len(data) / 1e6, 1),
        "units": len(parsed.units),
        "spine_groups": len(parsed.spine_groups()),
        "racks_placed": len(plan.racks),
        "parse_s": round(parse_s, 3),
        "parse_cpu_s": round(parse_cpu_s, 3),
        "preview_s": round(preview_s, 3),
        "preview_cpu_s": round(preview_cpu_s, 3),
        "partial_refused_s": round(partial_s, 3),
        "partial_refused_at_line": refused(),
        "partial_cut_at_line": cut_line,
        "runs": runs,
        "goal_s": GOAL_S,
        "goal_met": parse_s < GOAL_S,
        "at_goal_size": text.count("\nSwitch\t") >= 300,
    }
