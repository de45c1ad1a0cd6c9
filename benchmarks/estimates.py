"""How true a waiting job's estimated start is: the figure `make bench` prints under `estimates`.

The portal shows a waiting job its place in line and an estimated start: the start of the reservation the
scheduling pass made for it (scheduling.queue_standing). This replays a workload through the simulator, which
runs the same engine and records, for every job given a reservation, its real start minus the first
estimate it was shown (scheduling.simulator `estimated_starts`; its docstring says what the error leaves out:
running jobs end exactly when expected, so this is the scheduler's own error, without the time limits' slack).

    .venv/bin/python benchmarks/estimates.py [--traces DIR]     (also run by benchmarks/scale.py)

Without `--traces` (or $ITP_TRACES): a stated synthetic workload, three departments (guarantees 40/30/30 %
of the GPUs) submitting Poisson arrivals for three days on 8 NVL72 racks carved 2x9, sizes from the scale
benchmark's mix, run times log-normal (median 30 min, sigma 1.2, at most 2 days), load about 110 % of the
fleet; seeded, so every run replays the same jobs. With traces: both halves of the shipped ITP traces, split
as docs/simulator.md's protocol fixed it (tuning clusters 01+02+03 on 4 racks, validation 05+06 on 2).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling import simulator
from scheduling.engine.placement import RACKPLANE

SIZE_MIX = ((1, 20), (2, 10), (4, 15), (8, 15), (16, 12), (32, 10), (36, 8), (64, 10))
RACKS = 8
DAYS = 3
SHARES = {"research": 0.4, "product": 0.3, "platform": 0.3}
HALVES = {
    "tuning": (("cluster01", "cluster02", "cluster03"), 4),
    "validation": (("cluster05", "cluster06"), 2),
}


def synthetic_traces(rng: random.Random, directory: Path, racks: int = RACKS, days: int = DAYS) -> list[Path]:
    """CSV traces (the ITP format the simulator reads) of the synthetic workload in the module docstring."""
    gpus = racks * 72
    sizes, weights = zip(*SIZE_MIX, strict=True)
    mean_size = sum(s * w for s, w in SIZE_MIX) / sum(weights)
    mean_run_s = 1800 * math.exp(1.2**2 / 2)
    horizon_s = days * 86400
    jobs_total = int(1.1 * gpus * horizon_s / (mean_size * mean_run_s))
    paths = []
    for name, share in SHARES.items():
        count = int(jobs_total * share)
        rows = ["job_id,submission_time,duration,num_gpu"]
        for index in range(count):
            submitted = rng.uniform(0, horizon_s)
            run_s = min(2 * 86400, max(60.0, rng.lognormvariate(math.log(1800), 1.2)))
            size = rng.choices(sizes, weights)[0]
            rows.append(f"{name}-{index},{submitted:.0f},{run_s:.0f},{size}")
        path = directory / f"{name}.csv"
        path.write_text("\n".join(rows) + "\n")
        paths.append(path)
    return paths


def _replay(paths: list[Path], racks: int, guarantees: dict[str, int] | None = None) -> dict:
    traces = simulator.load_traces(paths)
    started = time.perf_counter()
    metrics = simulator.simulate(traces, racks, "2x9", RACKPLANE, guarantees=guarantees).metrics
    return {
        "racks": racks,
        "jobs": metrics["jobs"],
        **metrics["estimated_starts"],
        "avg_wait_s": metrics["avg_wait_s"],
        "replay_s": round(time.perf_counter() - started, 1),
    }


def measure_estimates(rng: random.Random, traces: str | None = None) -> dict:
    """The estimate figures: the synthetic workload always, the two ITP halves when traces are given."""
    figures: dict = {}
    with tempfile.TemporaryDirectory(prefix="rackplane-estimates-") as scratch:
        paths = synthetic_traces(rng, Path(scratch))
        gpus = RACKS * 72
        guarantees = {name: int(gpus * share) for name, share in SHARES.items()}
        figures["synthetic"] = _replay(paths, RACKS, guarantees)
    if traces:
        folder = Path(traces)
        for half, (clusters, racks) in HALVES.items():
            paths = [folder / f"{cluster}.csv" for cluster in clusters]
            missing = [str(path) for path in paths if not path.exists()]
            figures[half] = {"skipped": f"missing {', '.join(missing)}"} if missing else _replay(paths, racks)
    return figures


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--traces", default=os.environ.get("ITP_TRACES"), help="the ITP traces' folder")
    args = parser.parse_args(argv)
    print(json.dumps(measure_estimates(random.Random("rackplane-bench-estimates"), args.traces), indent=2))


if __name__ == "__main__":
    main()
