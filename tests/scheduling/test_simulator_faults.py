"""The simulator's node fault replay: the fault trace's format, each node mapped onto a tray, and
faults handled automated (drain, requeue from the last checkpoint, validated return) against manual (the
jobs die and are resubmitted by hand later; the tray returns at the repair), results worked out by hand."""

from __future__ import annotations

import itertools
import json
import math
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling import simulator
from scheduling.simulation_inputs import map_faults, node_slots
from scheduling.simulator import SimulationError

ITP = Path(__file__).resolve().parent / "fixtures" / "traces"
DAY = 86400.0
GPU_FAULT = {"Level": "Hardware Failure", "Class": "GPU", "Desc": "GPU xid Error"}


def event(node: str, seconds: float, kind: str, fault_type=GPU_FAULT) -> dict:
    return {"node_id": node, "event_time": seconds / DAY, "event_type": kind, "fault_type": fault_type}


def write_faults(path: Path, events: list[dict]) -> Path:
    path.write_text(json.dumps(events))
    return path


def write_trace(path: Path, rows) -> Path:
    path.write_text(
        "job_id,submission_time,duration,num_gpu\n" + "".join(",".join(map(str, r)) + "\n" for r in rows)
    )
    return path


# --- the fault trace -------------------------------------------------------------------------------------


def test_faults_pair_up_per_node_in_time_order(tmp_path):
    path = write_faults(
        tmp_path / "faults.json",
        [
            event(
                "n2",
                500,
                "fault_start",
                {"Level": "Other", "Class": "Unknown Error", "Desc": "Unknown Error"},
            ),
            event("n1", 100, "fault_start"),
            event("n1", 300, "fault_end"),
            event("n1", 300, "fault_start"),  # a new fault at the instant the last one ended
            event("n1", 900, "fault_end"),
            event("n3", 700, "fault_start"),  # a zero-length fault, as the shared trace has
            event("n3", 700, "fault_end"),
        ],
    )
    trace = simulator.load_faults(path)
    assert trace.fleet == 400 and trace.nodes == ["n1", "n2", "n3"]
    faults = [
        (f.node, round(f.start_s), None if f.end_s is None else round(f.end_s), f.kind) for f in trace.faults
    ]
    assert faults == [
        ("n1", 100, 300, "GPU"),
        ("n1", 300, 900, "GPU"),
        ("n2", 500, None, "Unknown Error"),
        ("n3", 700, 700, "GPU"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{}", "a JSON list of events"),
        ("[]", "no faults"),
        ("[1, {}]", "no faults"),  # nothing in it is an event
        ('[{"node_id": "n", "event_time": 1, "event_type": "fault_end"}]', "no faults"),
        ("not json", "is not a JSON fault trace"),
        pytest.param("[" * 100_000 + "]" * 100_000, "nested too deeply", id="nested-100000-deep"),
    ],
)
def test_a_file_that_is_no_fault_trace_says_so(tmp_path, text, message):
    path = tmp_path / "faults.json"
    path.write_text(text)
    with pytest.raises(SimulationError, match=message):
        simulator.load_faults(path)


def test_overlapping_faults_on_one_node_are_one_outage_from_the_first_start_to_the_last_end(tmp_path):
    memory = {"Level": "Hardware Failure", "Class": "Memory", "Desc": "ECC"}
    path = write_faults(
        tmp_path / "faults.json",
        [
            event("n1", 100, "fault_start"),
            event("n1", 200, "fault_start", memory),  # before the first is repaired
            event("n1", 300, "fault_end"),  # one of the two ends: still down
            event("n1", 500, "fault_end", memory),
            event("n1", 600, "fault_start", memory),  # after it: a new outage
            event("n1", 700, "fault_end", memory),
            # Three at once, ending in another order than they started, one still open at the end.
            event("n2", 100, "fault_start"),
            event("n2", 100, "fault_start", memory),
            event("n2", 150, "fault_start"),
            event("n2", 160, "fault_end"),
            event("n2", 170, "fault_end"),
        ],
    )
    trace = simulator.load_faults(path)
    got = [(f.node, f.start_s, f.end_s, f.kind, f.merged) for f in trace.faults]
    assert got == [
        ("n1", 100, 500, "GPU", 2),
        ("n2", 100, None, "GPU", 3),
        ("n1", 600, 700, "Memory", 1),
    ]
    assert trace.quirks == {"overlapping faults merged into an earlier one": 3}


def test_events_that_are_not_faults_are_left_out_and_counted(tmp_path):
    path = write_faults(
        tmp_path / "faults.json",
        [
            1,
            {"node_id": "", "event_time": 1, "event_type": "fault_start"},
            {"node_id": "n", "event_time": -1, "event_type": "fault_start"},
            {"node_id": "n", "event_time": "2", "event_type": "fault_start"},
            {"node_id": "n", "event_time": 1, "event_type": "broke"},
            {"node_id": "n", "event_time": 1, "event_type": "fault_start", "fault_type": "GPU"},
            event("n", 50, "fault_end"),  # no fault open
            event("n", 100, "fault_start"),
            event("n", 200, "fault_end"),
            event("n", 200, "fault_end"),  # ended twice
        ],
    )
    trace = simulator.load_faults(path)
    assert [(f.start_s, f.end_s) for f in trace.faults] == [(100, 200)]
    assert trace.quirks == {
        "events left out: an event that is not an object": 1,
        "events left out: event_time not a number of days >= 0": 2,
        "events left out: event_type not fault_start or fault_end": 1,
        "events left out: fault_type not an object": 1,
        "events left out: no node_id": 1,
        "fault ends with no fault open, left out": 2,
    }


_NODE_EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.integers(0, 20),
        st.sampled_from(["fault_start", "fault_end"]),
    ),
    max_size=30,
)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=300, deadline=None)
@given(events=_NODE_EVENTS)
def test_any_sequence_of_events_reads_as_outages_that_never_overlap_on_a_node(tmp_path_factory, events):
    path = write_faults(
        tmp_path_factory.mktemp("faults") / "f.json", [event(n, t * 100, kind) for n, t, kind in events]
    )
    starts = sum(kind == "fault_start" for _, _, kind in events)
    if not starts:
        with pytest.raises(SimulationError, match="no faults"):
            simulator.load_faults(path)
        return
    trace = simulator.load_faults(path)  # never raises on a real-looking trace
    assert sum(f.merged for f in trace.faults) == starts  # every fault counted in one outage
    assert trace.quirks.get("overlapping faults merged into an earlier one", 0) == sum(
        f.merged - 1 for f in trace.faults
    )
    for node in trace.nodes:
        outages = sorted(
            (f.start_s, math.inf if f.end_s is None else f.end_s) for f in trace.faults if f.node == node
        )
        assert all(start <= end for start, end in outages)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(outages)), outages
        assert sum(end == math.inf for _, end in outages) <= 1  # only the last may stay open
        for n, t, kind in events:
            if n == node and kind == "fault_start":  # the node is down at each fault's start
                assert any(start <= t * 100 <= end for start, end in outages)


def test_the_shared_fault_trace_reads():
    path = (
        Path(__file__).resolve().parents[3] / "shared" / "traces" / "faults" / "fault_trace_days_000_174.json"
    )
    if not path.exists():
        pytest.skip("the shared fault trace is not beside this checkout")
    trace = simulator.load_faults(path)
    assert len(trace.faults) == 312 and len(trace.nodes) == 159
    assert trace.quirks == {}  # no overlapping fault in this half (real data may have: merged)


# --- nodes onto trays --------------------------------------------------------------------------------------


def test_each_node_gets_its_own_place_in_the_fleet_whatever_its_history():
    nodes = [f"node-{i}" for i in range(50)]
    slots = node_slots(nodes, 60)
    assert sorted(slots) == sorted(nodes) and len(set(slots.values())) == 50
    assert all(0 <= slot < 60 for slot in slots.values())
    assert node_slots(reversed(nodes), 60) == slots  # deterministic, not by order of appearance
    with_one_more = node_slots([*nodes, "node-x"], 60)
    # A node whose hash place is free keeps it when another node joins.
    assert sum(with_one_more[n] == slots[n] for n in nodes) >= 45


def test_tray_t_replays_the_node_in_place_t_and_trays_beyond_the_fleet_reuse_it(tmp_path):
    events = [event(n, 1000 * (i + 1), "fault_start") for i, n in enumerate(("a", "b", "c"))]
    trace = simulator.load_faults(write_faults(tmp_path / "f.json", events), fleet=4)
    slots = node_slots(trace.nodes, 4)
    mapped = map_faults(trace, 3, start=50.0)
    assert {(f.tray, f.node) for f in mapped} == {(slot, node) for node, slot in slots.items() if slot < 3}
    assert all(f.start == 50.0 + 1000 * (1 + "abc".index(f.node)) and f.end is None for f in mapped)
    # 8 trays over a fleet of 4: trays t and t + 4 replay the same node.
    twice = map_faults(trace, 8, start=0.0)
    assert sorted((f.tray, f.node) for f in twice) == sorted(
        [(slot, node) for node, slot in slots.items()] + [(slot + 4, node) for node, slot in slots.items()]
    )


# --- a fault hitting a running job -------------------------------------------------------------------------
#
# One rack 1x18, one department. A: 4 GPUs (one tray) from t=0 for 10,000 s; B: 1 GPU at t=8,000 for 100 s
# (the last submission: the window is [0, 8000]). A fleet of one node, so every tray replays it: all 18
# trays fail at t=3,000 and are repaired at t=5,000.
# automated (check 1,000 s, checkpoint loss 600 s): A loses 600 s x 4 GPUs = 2,400 GPU-s and is requeued at
#   once; the trays return at 6,000, A runs its 7,600 s left from 6,000 to 13,600. Goodput in the window:
#   4 x 3,000 + 4 x 2,000 - 2,400 = 17,600 GPU-s. Quarantine 60 s, back in service 3,000 s after the fault.
# manual (delay 7,200 s): A dies, losing its 3,000 s x 4 GPUs = 12,000 GPU-s; the trays return at 5,000; A is
#   resubmitted at 10,200 and runs its 10,000 s again until 20,200. Goodput: 12,000 - 12,000 = 0.

JOBS = [("A", 0, 10000, 4), ("B", 8000, 100, 1)]


@pytest.fixture
def fault_plan(tmp_path):
    path = write_faults(tmp_path / "f.json", [event("n", 3000, "fault_start"), event("n", 5000, "fault_end")])
    return simulator.FaultPlan(
        simulator.load_faults(path, fleet=1), detect_s=60.0, check_s=1000.0, manual_delay_s=7200.0
    )


@pytest.fixture
def traces(tmp_path):
    return simulator.load_traces([write_trace(tmp_path / "research.csv", JOBS)])


def replay(traces, plan, mode, **options):
    from dataclasses import replace

    return simulator.simulate(traces, 1, "1x18", faults=replace(plan, mode=mode), **options)


def test_automated_requeues_from_the_checkpoint_and_returns_the_tray_after_its_check(traces, fault_plan):
    run = replay(traces, fault_plan, simulator.AUTOMATED)
    f = run.faults
    assert f["jobs_hit"] == 1 and f["hits"] == 1 and f["faults"] == 18
    assert f["lost_work_gpu_s"] == 600 * 4  # the checkpoint loss, no more
    assert f["avg_jct_s"] == (13600 + 100) / 2
    assert f["goodput_gpu_s"] == 17600.0
    assert f["time_to_quarantine_s"] == 60.0 and f["time_to_service_s"] == 3000.0
    assert f["faults_returned"] == 18
    assert f["out_of_service_gpu_s"] == 18 * 4 * 3000
    assert f["avg_wait_s"] == (3000 + 0) / 2  # A waited from its requeue to the trays' return


def test_manual_loses_all_the_work_and_resubmits_after_the_delay(traces, fault_plan):
    run = replay(traces, fault_plan, simulator.MANUAL)
    f = run.faults
    assert f["jobs_hit"] == 1
    assert f["lost_work_gpu_s"] == 3000 * 4  # everything it had done
    assert f["avg_jct_s"] == (20200 + 100) / 2
    assert f["goodput_gpu_s"] == 0.0
    assert f["time_to_quarantine_s"] == 7200.0 and f["time_to_service_s"] == 2000.0
    assert f["out_of_service_gpu_s"] == 18 * 4 * 2000


def test_a_job_already_preempted_loses_its_kept_work_too_when_it_dies(traces, fault_plan):
    restart = replay(traces, fault_plan, simulator.AUTOMATED, preempted=simulator.RESTART)
    assert restart.faults["lost_work_gpu_s"] == 3000 * 4  # restart mode: no checkpoint to go back to


def test_without_faults_nothing_is_hit(traces):
    run = simulator.simulate(traces, 1, "1x18")
    assert run.faults is None and run.metrics["avg_jct_s"] == (10000 + 100) / 2


def test_bad_fault_plans(traces, fault_plan):
    from dataclasses import replace

    with pytest.raises(SimulationError, match="fault handling 'auto'"):
        simulator.simulate(traces, 1, "1x18", faults=replace(fault_plan, mode="auto"))
    with pytest.raises(SimulationError, match="check_s must be a number of seconds"):
        simulator.simulate(traces, 1, "1x18", faults=replace(fault_plan, check_s=-1))


# --- the command -----------------------------------------------------------------------------------------


@pytest.mark.slow(reason="seeds and reads a whole demo datacenter")
def test_command_adds_both_modes_per_policy_and_the_report_shows_them(tmp_path, fault_plan):
    faults = write_faults(
        tmp_path / "faults.json",
        [event(f"node-{i}", 2000 + 5000 * i, "fault_start") for i in range(40)]
        + [event(f"node-{i}", 9000 + 5000 * i, "fault_end") for i in range(40)]
        # Real data's quirks: a second fault before the first is repaired, an event that is none.
        + [event("node-0", 3000, "fault_start"), event("node-0", 9500, "fault_end"), {"event_type": "x"}],
    )
    out, report = tmp_path / "r.json", tmp_path / "r.html"
    stdout, stderr = StringIO(), StringIO()
    call_command(
        "simulate",
        "--trace",
        str(ITP / "cluster03-head.csv"),
        "--racks",
        "2",
        "--layout",
        "2x9",
        "--faults",
        str(faults),
        "--manual-delay",
        "1h",
        "--out",
        str(out),
        "--html",
        str(report),
        stdout=stdout,
        stderr=stderr,
    )
    results = json.loads(out.read_text())
    config = results["config"]["faults"]
    assert config["trace_quirks"] == {
        "events left out: no node_id": 1,
        "overlapping faults merged into an earlier one": 1,
    }
    assert f"note: {faults}: 1 overlapping faults merged into an earlier one" in stderr.getvalue()
    assert config["trace_faults"] == 40 and config["fleet_nodes"] == 400 and config["manual_delay_s"] == 3600
    assert 0 < config["cluster_faults"] < 40  # only the nodes placed on the 36 trays of 2 racks
    assert "--faults" in results["config"]["command"] and "--manual-delay 1h" in results["config"]["command"]
    for policy, metrics in results["policies"].items():
        assert set(metrics["faults"]) == {"automated", "manual"}, policy
        auto, manual = metrics["faults"]["automated"], metrics["faults"]["manual"]
        for figures in (auto, manual):
            assert set(simulator.FAULT_METRICS) <= set(figures)
            assert figures["faults"] == config["cluster_faults"]
        assert auto["time_to_quarantine_s"] == 60 and manual["time_to_quarantine_s"] == 3600
        # The automated mode never loses more than the checkpoint loss per hit; the manual one restarts.
        assert auto["lost_work_gpu_s"] <= auto["hits"] * 600 * 72
        if manual["jobs_hit"]:
            assert manual["avg_jct_s"] > metrics["avg_jct_s"]
    text = stdout.getvalue()
    assert "Node faults from" in text and "automated" in text and "manual" in text
    html = report.read_text()
    assert "Node faults: automated against manual recovery" in html and "time to quarantine (min)" in html
    assert "manage.py simulate --trace" in html
    assert "1 overlapping faults merged into an earlier one</li>" in html


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_replays_side_by_side_in_processes_give_the_same_figures(tmp_path):
    faults = write_faults(
        tmp_path / "faults.json",
        [event(f"node-{i}", 2000 + 40000 * i, "fault_start") for i in range(30)]
        + [event(f"node-{i}", 22000 + 40000 * i, "fault_end") for i in range(30)],
    )
    plan = simulator.FaultPlan(simulator.load_faults(faults, fleet=36))
    traces = simulator.load_traces([ITP / "cluster03-head.csv"])
    timed = ("wall_s", "decisions_per_s", "scheduling_wall_s")

    def figures(workers):
        results, _ = simulator.run(
            traces, 2, "2x9", ["rackplane", "block-best-fit"], faults=plan, workers=workers
        )
        for metrics in results["policies"].values():
            for key in timed:
                metrics.pop(key)
                for mode in metrics["faults"].values():
                    mode.pop(key, None)
        results["config"].pop("wall_s")
        return results

    alone = figures(1)
    assert alone == figures(2)
    assert all(m["faults"]["manual"]["jobs_hit"] > 0 for m in alone["policies"].values())
