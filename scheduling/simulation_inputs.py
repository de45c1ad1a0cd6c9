"""What a trace replay runs on, read and checked: trace files, the rack layout and its cluster, guarantees.

Pure Python (no Django import). `scheduling.simulator` replays these; its docstring holds the assumptions
(one department per trace file, GPUs rounded to whole trays above 4, the locality a job asks for).
"""

from __future__ import annotations

import csv
import hashlib
import json
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


DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str | float) -> float:
    """'10m' -> 600.0; a bare number is seconds; units s, m, h, d."""
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
        raise SimulationError(
            f"{text!r} is not a duration: write seconds, or a number with s, m, h or d (10m)"
        )
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


# --- node faults: a real fault trace replayed on the cluster's trays ----------------------------------------

FAULT_TRACE_NODES = 400  # servers in InfiniteHBD-Trace (not shipped here; docs/simulator.md)
FAULT_START, FAULT_END = "fault_start", "fault_end"
DAY_S = 86400.0


@dataclass(frozen=True)
class NodeFault:
    """One fault of one node: from `start_s` (seconds since the trace's day 0) until it was repaired at
    `end_s` (None: not repaired within the trace)."""

    node: str
    start_s: float
    end_s: float | None
    level: str
    kind: str  # the trace's Class (GPU, NIC, Power Supply, ...)
    desc: str


@dataclass(frozen=True)
class FaultTrace:
    path: str
    faults: tuple[NodeFault, ...]
    fleet: int = FAULT_TRACE_NODES  # servers the trace watched, faulty or not

    @property
    def nodes(self) -> list[str]:
        return sorted({fault.node for fault in self.faults})


@dataclass(frozen=True)
class TrayFault:
    """A node fault as a tray of the replayed cluster sees it: times in the replay's clock."""

    tray: int
    node: str
    start: float
    end: float | None  # repaired (None: not within the trace)
    desc: str


def _fault_event(event, where: str) -> tuple[str, float, str, dict]:
    if not isinstance(event, dict):
        raise SimulationError(f"{where}: each event must be an object with node_id, event_time, event_type")
    node, at, kind = event.get("node_id"), event.get("event_time"), event.get("event_type")
    if not isinstance(node, str) or not node:
        raise SimulationError(f"{where}: node_id must be a non-empty string")
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at) or at < 0:
        raise SimulationError(f"{where}: event_time must be a number of days >= 0")
    if kind not in (FAULT_START, FAULT_END):
        raise SimulationError(f"{where}: event_type must be {FAULT_START} or {FAULT_END}, not {kind!r}")
    fault_type = event.get("fault_type") or {}
    if not isinstance(fault_type, dict):
        raise SimulationError(f"{where}: fault_type must be an object (Level, Class, Desc)")
    return node, float(at), kind, fault_type


def load_faults(path: str | Path, fleet: int = FAULT_TRACE_NODES) -> FaultTrace:
    """Read a fault trace in InfiniteHBD-Trace's format (docs/simulator.md): a JSON list of fault_start and
    fault_end events per node, times in days. Each node's events pair up in time order: a start, then its
    end."""
    path = Path(path)
    try:
        events = json.loads(path.read_text())
    except OSError as error:
        raise SimulationError(f"cannot read fault trace {path}: {error.strerror or error}") from error
    except (UnicodeDecodeError, ValueError) as error:
        raise SimulationError(f"{path} is not a JSON fault trace: {error}") from error
    if not isinstance(events, list):
        raise SimulationError(f"{path}: a fault trace is a JSON list of events")
    parsed = [_fault_event(event, f"{path}: event {i}") for i, event in enumerate(events)]
    # Per node in time order. At one instant a node may end a fault and start the next, or start and end
    # one (a zero-length fault: the shared trace has 14): an open fault ends first, then one starts.
    parsed.sort(key=lambda e: (e[0], e[1], e[2] != FAULT_START))
    faults: list[NodeFault] = []
    open_at: dict[str, tuple[float, dict]] = {}
    i = 0
    while i < len(parsed):
        node, at = parsed[i][0], parsed[i][1]
        group = []
        while i < len(parsed) and parsed[i][0] == node and parsed[i][1] == at:
            group.append(parsed[i])
            i += 1
        starts = [fault_type for _, _, kind, fault_type in group if kind == FAULT_START]
        ends = len(group) - len(starts)
        while starts or ends:
            if ends and node in open_at:
                start, fault_type = open_at.pop(node)
                faults.append(_node_fault(node, start, at, fault_type))
                ends -= 1
            elif starts and node not in open_at:
                open_at[node] = (at, starts.pop(0))
            elif starts:
                raise SimulationError(f"{path}: node {node} starts a fault at day {at} before its last ended")
            else:
                raise SimulationError(f"{path}: node {node} ends a fault at day {at} that never started")
    faults += [_node_fault(node, start, None, fault_type) for node, (start, fault_type) in open_at.items()]
    if not faults:
        raise SimulationError(f"{path}: no faults")
    nodes = len({fault.node for fault in faults})
    if nodes > fleet:
        raise SimulationError(f"{path}: {nodes} faulty nodes, more than the fleet of {fleet} it watched")
    faults.sort(key=lambda f: (f.start_s, f.node))
    return FaultTrace(str(path), tuple(faults), fleet)


def _node_fault(node: str, start: float, end: float | None, fault_type: dict) -> NodeFault:
    return NodeFault(
        node,
        start * DAY_S,
        None if end is None else end * DAY_S,
        str(fault_type.get("Level", "")),
        str(fault_type.get("Class", "")),
        str(fault_type.get("Desc", "")),
    )


def node_slots(nodes: Iterable[str], fleet: int) -> dict[str, int]:
    """Each faulty node's place in the fleet (0..fleet-1): the first 8 hex digits of the SHA-256 of its id,
    modulo `fleet`, the next free place when taken (nodes in id order). Deterministic and blind to when or
    how often a node failed, so the trays that get a node's history are a fair sample of the fleet."""
    taken: dict[int, str] = {}
    slots = {}
    for node in sorted(set(nodes)):
        slot = int(hashlib.sha256(node.encode()).hexdigest()[:8], 16) % fleet
        while slot in taken:
            slot = (slot + 1) % fleet
        taken[slot] = node
        slots[node] = slot
    return slots


def map_faults(trace: FaultTrace, trays: int, start: float) -> list[TrayFault]:
    """The trace's faults on a cluster of `trays` trays, day 0 at `start` (the first job submission).

    Each node of the fleet stands for one compute tray: tray t replays the node in place t of the fleet
    (`node_slots`), so a tray fails as often as one of the trace's servers did. Places the cluster has no
    tray for are left out (6 racks: 108 trays of the 400 places); a cluster of more trays than the fleet
    reuses it, tray t replaying place t mod fleet (the same faults at the same times)."""
    if trays < 1:
        raise SimulationError("a fault replay needs at least one tray")
    by_slot: dict[int, list[NodeFault]] = {}
    for node, slot in node_slots(trace.nodes, trace.fleet).items():
        by_slot[slot] = [f for f in trace.faults if f.node == node]
    mapped = [
        TrayFault(
            t,
            fault.node,
            start + fault.start_s,
            None if fault.end_s is None else start + fault.end_s,
            fault.desc,
        )
        for t in range(trays)
        for fault in by_slot.get(t % trace.fleet, ())
    ]
    mapped.sort(key=lambda f: (f.start, f.tray))
    return mapped
