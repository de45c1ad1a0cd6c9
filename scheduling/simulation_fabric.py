"""The compute fabric in a trace replay: the fabric a replay's racks hang under, and a synthetic mix of
multi-rack jobs (issue 33). Pure Python (no Django import); `scheduling.simulator` replays with them.

**The fabric** (`parse_fabric`, `--fabric units=4,racks-per-unit=2,spines=2`): the replay's racks
(``rack001``, ``rack002``... as `simulation_inputs.build_cluster` names them) in order, ``racks-per-unit`` to
a scalable unit (``su-1``, ``su-2``...), the units in order split evenly over ``spines`` spine groups
(``spine-1``...): the two-level rail-optimized fabric of core.fabric.

**The large-job mix** (`large_jobs`): the shipped ITP traces stop at 64 GPUs, less than one NVL72 rack, so
no job of theirs ever spans racks. LLM clusters run much larger gangs: in the Acme trace (Hu et al.,
"Characterization of Large Language Model Development in the Datacenter", NSDI'24; its published
``cluster_summary.csv``), GPU jobs on the Kalos cluster average 26.8 GPUs against a median of 1 and reach
1,024 GPUs (Seren: mean 5.7, median 1, largest 1,024): a few very large jobs beside many small ones. The mix
adds that tail as a department of its own (`LARGE_DEPARTMENT`) of `count` jobs. What is taken from the paper
is only that shape (a heavy tail of gangs up to the cluster's size, few in number); the figures below are
this module's stated choices, not the paper's:

* sizes (`LARGE_SIZES`, GPUs, weight): 96 (40%), 128 (30%), 192 (20%), 256 (10%): gangs of 24 to 64 trays,
  all more than one 18-tray rack; on the documented fabric (2 racks to a unit, 144 GPUs) the first two fit
  one unit and the others need a spine group (a multiple of 4 and of 8-GPU nodes, as Acme's jobs are);
* durations log-uniform between 1 h and 12 h (`LARGE_DURATION_S`): pretraining and large fine-tuning runs,
  longer than the traces' median job, cut into restartable pieces as Acme's fault-tolerant pretraining does;
* submissions uniform over the other traces' span, from a generator seeded with `seed`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from core.fabric import Fabric
from scheduling.simulation_inputs import SimulationError, Trace, TraceJob

LARGE_DEPARTMENT = "llm-large"
LARGE_SIZES: tuple[tuple[int, float], ...] = ((96, 0.4), (128, 0.3), (192, 0.2), (256, 0.1))
LARGE_DURATION_S = (3600.0, 12 * 3600.0)
FABRIC_KEYS = ("units", "racks-per-unit", "spines")


def parse_fabric(spec: str, racks: int) -> Fabric:
    """`units=U,racks-per-unit=R,spines=S` (every key once) as the replay's fabric over `racks` racks; U*R
    must be the number of racks and S must divide U."""
    values: dict[str, int] = {}
    for part in (spec or "").split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or key not in FABRIC_KEYS or key in values:
            raise SimulationError(
                f"--fabric {spec!r}: give each of {', '.join(FABRIC_KEYS)} once, as key=number, joined by "
                "commas"
            )
        if not value.isdigit() or int(value) < 1:
            raise SimulationError(f"--fabric {spec!r}: {key} must be a whole number >= 1, not {value!r}")
        values[key] = int(value)
    if set(values) != set(FABRIC_KEYS):
        raise SimulationError(
            f"--fabric {spec!r}: missing {', '.join(k for k in FABRIC_KEYS if k not in values)}"
        )
    units, per_unit, spines = values["units"], values["racks-per-unit"], values["spines"]
    if units * per_unit != racks:
        raise SimulationError(
            f"--fabric {spec!r}: {units} units of {per_unit} racks is not the {racks} racks"
        )
    if units % spines:
        raise SimulationError(
            f"--fabric {spec!r}: {units} units do not split evenly over {spines} spine groups"
        )
    per_spine = units // spines
    return Fabric(
        racks={
            f"rack{r + 1:03d}": (f"spine-{r // per_unit // per_spine + 1}", f"su-{r // per_unit + 1}")
            for r in range(racks)
        }
    )


def large_jobs(traces: Sequence[Trace], count: int, seed: int) -> Trace:
    """The large-job mix (module docstring): `count` jobs over the span of `traces`' submissions, job ids
    after theirs, the same for the same seed."""
    if count < 1:
        raise SimulationError(f"the large-job mix needs at least one job, not {count}")
    submitted = [job.submitted_at for trace in traces for job in trace.jobs]
    if not submitted:
        raise SimulationError("the large-job mix is spread over the other traces' span: give a trace")
    first, last = min(submitted), max(submitted)
    next_id = 1 + max((job.id for trace in traces for job in trace.jobs), default=-1)
    draw = random.Random(seed)
    sizes = [size for size, _ in LARGE_SIZES]
    weights = [weight for _, weight in LARGE_SIZES]
    low, high = (math.log(s) for s in LARGE_DURATION_S)
    jobs = []
    for i in range(count):
        gpus = draw.choices(sizes, weights)[0]
        duration = round(math.exp(draw.uniform(low, high)))
        jobs.append(
            TraceJob(
                next_id + i,
                f"large-{i + 1}",
                LARGE_DEPARTMENT,
                first + draw.random() * (last - first),
                duration,
                gpus,
                gpus,
            )
        )
    jobs.sort(key=lambda job: (job.submitted_at, job.id))
    return Trace(LARGE_DEPARTMENT, f"(synthetic large-job mix, seed {seed})", tuple(jobs))
