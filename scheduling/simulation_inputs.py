"""What a trace replay runs on, read and checked: trace files, the rack layout and its cluster, guarantees.

Pure Python (no Django import). `scheduling.simulator` replays these; its docstring holds the assumptions
(one department per trace file, GPUs rounded to whole trays above 4, the locality a job asks for).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from core.fabric import Fabric
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
    # The MIG profile the job asked for (a slice job of the portal's history, scheduling.whatif); "" for a
    # job of whole GPUs. A MigPlan replays it as a request of that profile, whatever its conversion says.
    slice: str = ""

    @property
    def trays(self) -> int:
        return max(1, self.gpus // GPUS_PER_TRAY)


@dataclass(frozen=True)
class Trace:
    department: str
    path: str
    jobs: tuple[TraceJob, ...]
    quirks: Mapping[str, int] = field(default_factory=dict)  # rows left out, by why: how many

    @property
    def gpu_hours(self) -> float:
        return sum(job.gpus * job.duration_s for job in self.jobs) / 3600


def _trace_job(row: dict[str, str | None], department: str, job_id: int) -> TraceJob | str:
    """One CSV row as a job, or why it is not one (a quirk: `load_trace` counts it)."""
    try:
        submitted = float(row["submission_time"] or "")
        duration = float(row["duration"] or "")
        gpus = int(row["num_gpu"] or "")
    except (TypeError, ValueError):
        return "submission_time or duration not a number, or num_gpu not a whole number"
    if not (math.isfinite(submitted) and math.isfinite(duration)):
        return "a time that is not finite"
    if duration <= 0:
        return "duration 0 or less"
    if gpus < 1:
        return "no GPU (num_gpu 0 or less)"
    return TraceJob(job_id, row["job_id"] or "", department, submitted, duration, round_gpus(gpus), gpus)


def load_trace(path: str | Path, department: str | None = None, first_id: int = 0) -> Trace:
    """Read one ITP-style CSV (job_id,submission_time,duration,num_gpu); times in seconds.

    A file without those columns is an error; a row that is not a job a GPU cluster runs (a field that is
    not a number, no GPU, no run time) is left out and counted in `Trace.quirks`, with the first line of
    each kind, so a real trace never stops the replay."""
    path = Path(path)
    department = department or path.stem
    jobs: list[TraceJob] = []
    quirks: Counter[str] = Counter()
    first_line: dict[str, int] = {}
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
                job = _trace_job(row, department, first_id + len(jobs))
                if isinstance(job, str):
                    quirks[job] += 1
                    first_line.setdefault(job, reader.line_num)
                else:
                    jobs.append(job)
    except OSError as error:
        raise SimulationError(f"cannot read trace {path}: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise SimulationError(f"{path} is not a text CSV file: {error}") from error
    except csv.Error as error:
        raise SimulationError(f"{path} is not a CSV file: {error}") from error
    if not jobs:
        left_out = f" ({sum(quirks.values())} rows left out: {', '.join(sorted(quirks))})" if quirks else ""
        raise SimulationError(f"{path}: no jobs{left_out}")
    return Trace(
        department,
        str(path),
        tuple(jobs),
        {f"rows left out: {why} (first: line {first_line[why]})": n for why, n in sorted(quirks.items())},
    )


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


def jitter_traces(traces: Sequence[Trace], seconds: float, seed: int) -> list[Trace]:
    """`traces` with every submission shifted later by a random 0 to `seconds` (uniform, from a generator
    seeded with `seed`, in the traces' order): the replay is chaotic (docs/simulator.md), so a rule is
    judged over several such samples, each reproducible from its seed. 0 seconds: the traces as they are."""
    if seconds <= 0:
        return list(traces)
    draw = random.Random(seed).random
    return [
        replace(
            trace,
            jobs=tuple(replace(job, submitted_at=job.submitted_at + draw() * seconds) for job in trace.jobs),
        )
        for trace in traces
    ]


def fit_traces(traces: Sequence[Trace], capacity: int) -> list[Trace]:
    """`traces` without the jobs larger than a cluster of `capacity` GPUs (they could never start), each
    trace that lost some saying how many in its quirks. Idempotent: a second call leaves nothing out."""
    fitted = []
    for trace in traces:
        kept = tuple(job for job in trace.jobs if job.gpus <= capacity)
        if len(kept) == len(trace.jobs):
            fitted.append(trace)
            continue
        largest = max(job.gpus for job in trace.jobs)
        why = f"jobs larger than the cluster's {capacity} GPUs, left out (the largest: {largest})"
        fitted.append(replace(trace, jobs=kept, quirks={**trace.quirks, why: len(trace.jobs) - len(kept)}))
    if not any(trace.jobs for trace in fitted):
        smallest = min((job.gpus for trace in traces for job in trace.jobs), default=0)
        raise SimulationError(
            f"every job needs more GPUs than the cluster's {capacity} (the smallest needs {smallest}): "
            "give more racks"
        )
    return fitted


def parse_layout(text: str) -> tuple[int, ...]:
    """'2x9' -> (9, 9): NVLink partitions of one rack in trays; terms may be joined with '+' ('1x10+2x4'), and
    a bare number is one partition ('16+2', '8+8+2': buddy-style carvings)."""
    sizes: list[int] = []
    for term in text.replace(" ", "").lower().split("+"):
        if term.isdigit():
            term = f"1x{term}"
        count, sep, size = term.partition("x")
        if not (sep and count.isdigit() and size.isdigit() and int(count) > 0 and int(size) > 0):
            raise SimulationError(
                f"layout {text!r}: write the partitions of a rack as COUNTxTRAYS, e.g. 1x18, 2x9, 3x6 "
                f"or 1x10+2x4, or as trays joined with '+' (16+2)"
            )
        sizes += [int(size)] * int(count)
    if sum(sizes) != RACK_TRAYS:
        raise SimulationError(
            f"layout {text!r}: its partitions hold {sum(sizes)} trays, but a rack has {RACK_TRAYS} "
            f"compute trays to carve"
        )
    return tuple(sizes)


def build_cluster(
    racks: int, sizes: Sequence[int], owners: Sequence[str | None] = (), fabric: Fabric | None = None
) -> Cluster:
    """`racks` NVL72 racks, each carved into partitions p1, p2... of `sizes` trays, in slot order; rack r's
    partitions are dedicated to `owners[r]` (a department) where given, else shared; `fabric`: the compute
    fabric above the racks (scheduling.simulation_fabric), none by default."""
    if racks < 1:
        raise SimulationError("a cluster needs at least one rack")
    specs = []
    for r in range(1, racks + 1):
        rack = f"rack{r:03d}"
        owner = owners[r - 1] if r - 1 < len(owners) else None
        slot = 0
        for number, size in enumerate(sizes, 1):
            for _ in range(size):
                slot += 1
                specs.append(TraySpec(f"{rack}-t{slot:02d}", rack, f"p{number}", owner=owner))
    return Cluster(specs, fabric)


def dedicated_owners(
    dedicated: Mapping[str, int], racks: int, departments: Iterable[str]
) -> list[str | None]:
    """Per rack, the department its partitions are dedicated to: `dedicated` gives each department a number
    of whole racks, the first racks in the order given; the rest are shared."""
    known = set(departments)
    unknown = sorted(set(dedicated) - known)
    if unknown:
        raise SimulationError(
            f"dedicated racks for {', '.join(unknown)}: no such department ({', '.join(sorted(known))})"
        )
    if any(n < 0 for n in dedicated.values()) or sum(dedicated.values()) > racks:
        raise SimulationError(
            f"dedicated racks: {sum(dedicated.values())} asked for, the cluster has {racks}"
        )
    owners: list[str | None] = [name for name, n in dedicated.items() for _ in range(n)]
    return owners + [None] * (racks - len(owners))


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
    merged: int = 1  # faults of the trace in this outage (more than 1: they overlapped, see load_faults)


@dataclass(frozen=True)
class FaultTrace:
    path: str
    faults: tuple[NodeFault, ...]
    fleet: int = FAULT_TRACE_NODES  # servers the trace watched, faulty or not
    quirks: Mapping[str, int] = field(default_factory=dict)  # what was merged or left out: how often

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


def _fault_event(event) -> tuple[str, float, str, dict] | str:
    """One event as (node, day, kind, fault type), or why it is left out (a quirk, counted)."""
    if not isinstance(event, dict):
        return "an event that is not an object"
    node, at, kind = event.get("node_id"), event.get("event_time"), event.get("event_type")
    if not isinstance(node, str) or not node:
        return "no node_id"
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at) or at < 0:
        return "event_time not a number of days >= 0"
    if kind not in (FAULT_START, FAULT_END):
        return f"event_type not {FAULT_START} or {FAULT_END}"
    fault_type = event.get("fault_type")
    if fault_type is None:
        fault_type = {}
    elif not isinstance(fault_type, dict):
        return "fault_type not an object"
    return node, float(at), kind, fault_type


def load_faults(path: str | Path, fleet: int = FAULT_TRACE_NODES) -> FaultTrace:
    """Read a fault trace in InfiniteHBD-Trace's format (docs/simulator.md): a JSON list of fault_start and
    fault_end events per node, times in days.

    Real fault data is not tidy, and a replay must not stop on it: each quirk is counted in
    `FaultTrace.quirks` instead. A node's faults may **overlap** (a second fault starting before the first
    is repaired): the node is down from the first start until every fault that began meanwhile has ended,
    one outage (`NodeFault.merged` counts the faults in it; its kind is the first's). An end with no fault
    open is left out, and so is an event that is not one (no node, a time that is not a number of days,
    another event type). A file that is not a JSON list, or holds no fault at all, is an error."""
    path = Path(path)
    try:
        events = json.loads(path.read_text())
    except OSError as error:
        raise SimulationError(f"cannot read fault trace {path}: {error.strerror or error}") from error
    except (UnicodeDecodeError, ValueError) as error:
        raise SimulationError(f"{path} is not a JSON fault trace: {error}") from error
    except RecursionError:
        raise SimulationError(f"{path} is not a fault trace: nested too deeply") from None
    if not isinstance(events, list):
        raise SimulationError(f"{path}: a fault trace is a JSON list of events")
    quirks: Counter[str] = Counter()
    parsed = []
    for event in events:
        one = _fault_event(event)
        if isinstance(one, str):
            quirks[f"events left out: {one}"] += 1
        else:
            parsed.append(one)
    parsed.sort(key=lambda e: (e[0], e[1]))
    faults: list[NodeFault] = []
    i = 0
    while i < len(parsed):
        node = parsed[i][0]
        j = i
        while j < len(parsed) and parsed[j][0] == node:
            j += 1
        faults += _outages(node, parsed[i:j], quirks)
        i = j
    if not faults:
        raise SimulationError(f"{path}: no faults")
    nodes = len({fault.node for fault in faults})
    if nodes > fleet:
        raise SimulationError(f"{path}: {nodes} faulty nodes, more than the fleet of {fleet} it watched")
    faults.sort(key=lambda f: (f.start_s, f.node))
    return FaultTrace(str(path), tuple(faults), fleet, dict(sorted(quirks.items())))


def _outages(node: str, events: list[tuple[str, float, str, dict]], quirks: Counter[str]) -> list[NodeFault]:
    """One node's events (in time order) as its outages. At one instant, faults open before it end first
    (a node may end a fault and start the next at one instant: two outages), then faults start, then the
    instant's other ends close those (a zero-length fault: the shared trace has 14)."""
    outages: list[NodeFault] = []
    depth = 0  # faults open now
    opened: tuple[float, dict, int] | None = None  # the current outage: start, first fault's type, faults

    def close(at: float) -> None:
        nonlocal opened
        assert opened is not None
        start, fault_type, merged = opened
        outages.append(_node_fault(node, start, at, fault_type, merged))
        opened = None

    i = 0
    while i < len(events):
        at = events[i][1]
        starts: list[dict] = []
        ends = 0
        while i < len(events) and events[i][1] == at:
            if events[i][2] == FAULT_START:
                starts.append(events[i][3])
            else:
                ends += 1
            i += 1
        for phase in ("before", "after"):
            matched = min(ends, depth)
            depth -= matched
            ends -= matched
            if matched and depth == 0:
                close(at)
            if phase == "after":
                break
            for fault_type in starts:
                if depth == 0:
                    opened = (at, fault_type, 1)
                else:
                    assert opened is not None
                    opened = (opened[0], opened[1], opened[2] + 1)
                    quirks["overlapping faults merged into an earlier one"] += 1
                depth += 1
        if ends:
            quirks["fault ends with no fault open, left out"] += ends
    if opened is not None:
        start, fault_type, merged = opened
        outages.append(_node_fault(node, start, None, fault_type, merged))
    return outages


def _node_fault(node: str, start: float, end: float | None, fault_type: dict, merged: int) -> NodeFault:
    return NodeFault(
        node,
        start * DAY_S,
        None if end is None else end * DAY_S,
        str(fault_type.get("Level", "")),
        str(fault_type.get("Class", "")),
        str(fault_type.get("Desc", "")),
        merged,
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
