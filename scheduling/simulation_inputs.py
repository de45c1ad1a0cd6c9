"""What a trace replay runs on, read and checked: trace files, the rack layout and its cluster, guarantees.

Pure Python (no Django import). `scheduling.simulator` replays these; its docstring holds the assumptions
(one department per trace file, GPUs rounded to whole trays above 4, the locality a job asks for).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.hardware import GPUS_PER_TRAY
from scheduling.engine.cluster import Cluster, TraySpec
from scheduling.engine.placement import ANY, PARTITION, RACK

RACK_TRAYS = 18
TRACE_COLUMNS = ("job_id", "submission_time", "duration", "num_gpu")


class SimulationError(ValueError):
    """Bad input (a trace file, the layout, a guarantee): the message says what and where."""


def round_gpus(gpus: int) -> int:
    """GPUs a job holds here: 1-4 on one tray, above that whole trays of 4."""
    if gpus <= GPUS_PER_TRAY:
        return gpus
    return -(-gpus // GPUS_PER_TRAY) * GPUS_PER_TRAY


@dataclass(frozen=True)
class TraceJob:
    id: int  # engine job id: unique over every trace of a replay
    name: str  # job_id in the trace
    department: str
    submitted_at: float
    duration_s: float  # run time in the trace (on one NVLink partition: no slowdown)
    gpus: int  # rounded, see `round_gpus`
    trace_gpus: int

    @property
    def trays(self) -> int:
        return max(1, self.gpus // GPUS_PER_TRAY)


@dataclass(frozen=True)
class Trace:
    department: str
    path: str
    jobs: tuple[TraceJob, ...]

    @property
    def gpu_hours(self) -> float:
        return sum(job.gpus * job.duration_s for job in self.jobs) / 3600


def _trace_job(row: dict[str, str], where: str, department: str, job_id: int) -> TraceJob:
    """One CSV row as a job; SimulationError naming the file and line when it is not a valid job."""
    try:
        submitted = float(row["submission_time"])
        duration = float(row["duration"])
        gpus = int(row["num_gpu"])
    except (TypeError, ValueError):
        raise SimulationError(
            f"{where}: submission_time and duration must be numbers and num_gpu a whole number"
        ) from None
    if not (math.isfinite(submitted) and math.isfinite(duration)) or duration <= 0 or gpus < 1:
        raise SimulationError(f"{where}: duration must be > 0 seconds and num_gpu >= 1")
    return TraceJob(job_id, row["job_id"], department, submitted, duration, round_gpus(gpus), gpus)


def load_trace(path: str | Path, department: str | None = None, first_id: int = 0) -> Trace:
    """Read one ITP-style CSV (job_id,submission_time,duration,num_gpu); times in seconds."""
    path = Path(path)
    department = department or path.stem
    jobs: list[TraceJob] = []
    try:
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in TRACE_COLUMNS if c not in (reader.fieldnames or ())]
            if missing:
                raise SimulationError(
                    f"{path}: missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                    f"(expected {','.join(TRACE_COLUMNS)})"
                )
            for row in reader:
                jobs.append(_trace_job(row, f"{path}:{reader.line_num}", department, first_id + len(jobs)))
    except OSError as error:
        raise SimulationError(f"cannot read trace {path}: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise SimulationError(f"{path} is not a text CSV file: {error}") from error
    if not jobs:
        raise SimulationError(f"{path}: no jobs")
    return Trace(department, str(path), tuple(jobs))


def load_traces(paths: Sequence[str | Path]) -> list[Trace]:
    """One department per file, named after the file's stem; job ids run on across files."""
    stems = [Path(p).stem for p in paths]
    twice = sorted({s for s in stems if stems.count(s) > 1})
    if twice:
        raise SimulationError(f"two traces would be the same department (file name {', '.join(twice)})")
    traces = []
    first_id = 0
    for path in paths:
        trace = load_trace(path, first_id=first_id)
        first_id += len(trace.jobs)
        traces.append(trace)
    return traces


def parse_layout(text: str) -> tuple[int, ...]:
    """'2x9' -> (9, 9): NVLink partitions of one rack in trays; terms may be joined with '+' ('1x10+2x4')."""
    sizes: list[int] = []
    for term in text.replace(" ", "").lower().split("+"):
        count, sep, size = term.partition("x")
        if not (sep and count.isdigit() and size.isdigit() and int(count) > 0 and int(size) > 0):
            raise SimulationError(
                f"layout {text!r}: write the partitions of a rack as COUNTxTRAYS, e.g. 1x18, 2x9, 3x6 "
                f"or 1x10+2x4"
            )
        sizes += [int(size)] * int(count)
    if sum(sizes) != RACK_TRAYS:
        raise SimulationError(
            f"layout {text!r}: its partitions hold {sum(sizes)} trays, but a rack has {RACK_TRAYS} "
            f"compute trays to carve"
        )
    return tuple(sizes)


def build_cluster(racks: int, sizes: Sequence[int]) -> Cluster:
    """`racks` NVL72 racks, each carved into partitions p1, p2... of `sizes` trays, in slot order."""
    if racks < 1:
        raise SimulationError("a cluster needs at least one rack")
    specs = []
    for r in range(1, racks + 1):
        rack = f"rack{r:03d}"
        slot = 0
        for number, size in enumerate(sizes, 1):
            for _ in range(size):
                slot += 1
                specs.append(TraySpec(f"{rack}-t{slot:02d}", rack, f"p{number}"))
    return Cluster(specs)


def locality(gpus: int, cluster: Cluster) -> str:
    """The topology a job asks for: one partition when it fits the largest, else one rack, else any."""
    trays = max(1, gpus // GPUS_PER_TRAY)
    if gpus <= GPUS_PER_TRAY or trays <= cluster.max_partition_trays:
        return PARTITION
    if trays <= cluster.max_rack_trays:
        return RACK
    return ANY


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_duration(text: str | float) -> float:
    """'10m' -> 600.0; a bare number is seconds; units s, m, h."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value = float(text)
    else:
        raw = str(text).strip().lower()
        unit = DURATION_UNITS.get(raw[-1:]) if raw else None
        number = raw[:-1] if unit is not None else raw
        try:
            value = float(number) * (unit or 1)
        except ValueError:
            value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise SimulationError(f"{text!r} is not a duration: write seconds, or a number with s, m or h (10m)")
    return value


def fallback(gpus: int, cluster: Cluster) -> str | None:
    """The wider topology a job accepts after waiting (the simulator's `fallback_after_s`), or None: a gang
    of more than half the largest partition accepts a rack instead of one partition, and one that asks for
    a rack accepts any trays. Smaller gangs keep their partition (their waits are short)."""
    trays = max(1, gpus // GPUS_PER_TRAY)
    wanted = locality(gpus, cluster)
    if wanted == PARTITION and 2 * trays > cluster.max_partition_trays and trays <= cluster.max_rack_trays:
        return RACK if cluster.max_rack_trays > cluster.max_partition_trays else None
    if wanted == RACK:
        return ANY
    return None


def parse_guarantees(items: Iterable[str]) -> dict[str, int]:
    """['cluster01=64', ...] -> {'cluster01': 64}."""
    given: dict[str, int] = {}
    for item in items:
        name, sep, gpus = item.partition("=")
        name = name.strip()
        if not sep or not name or not gpus.strip().isdigit():
            raise SimulationError(f"--guarantee {item!r}: write NAME=GPUS, with GPUS a whole number >= 0")
        if name in given:
            raise SimulationError(f"--guarantee {name} is given twice")
        given[name] = int(gpus)
    return given


def split_guarantees(
    capacity: int, gpu_hours: Mapping[str, float], given: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Guaranteed GPUs per department: `given` ones as given, the rest of `capacity` split among the others
    in proportion to their GPU-hours (largest remainder, ties by name; equal shares if none has any)."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(gpu_hours))
    if unknown:
        raise SimulationError(
            f"--guarantee for {', '.join(unknown)}: no such department (departments are the trace file "
            f"names: {', '.join(sorted(gpu_hours))})"
        )
    if sum(given.values()) > capacity:
        raise SimulationError(
            f"the given guarantees add up to {sum(given.values())} GPUs, more than the cluster's {capacity}"
        )
    others = sorted(name for name in gpu_hours if name not in given)
    rest = capacity - sum(given.values())
    total = sum(gpu_hours[name] for name in others)
    weights = {name: (gpu_hours[name] if total > 0 else 1.0) for name in others}
    weight_sum = sum(weights.values())
    shares = {name: rest * weights[name] / weight_sum for name in others} if others else {}
    split = {name: math.floor(share) for name, share in shares.items()}
    leftover = rest - sum(split.values())
    for name in sorted(shares, key=lambda n: (-(shares[n] - split[n]), n))[:leftover]:
        split[name] += 1
    return {name: given.get(name, split.get(name, 0)) for name in gpu_hours}
