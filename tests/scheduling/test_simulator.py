"""The trace simulator: hand-made traces with results worked out by hand, inputs, and `manage.py simulate`."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from scheduling import simulator
from scheduling.engine.placement import ANY, BLOCK_BEST_FIT, FIRST_FIT, PARTITION, RACK, RACKPLANE
from scheduling.simulator import SimulationError

# The first 150 jobs of two ITP trace files, kept in the repository (see fixtures/traces/README.md).
ITP = Path(__file__).resolve().parent / "fixtures" / "traces"

FIELDS = simulator.METRICS  # every field the issue lists, per policy


def write_trace(path: Path, rows: list[tuple[str, float, float, int]]) -> Path:
    lines = ["job_id,submission_time,duration,num_gpu"] + [",".join(map(str, row)) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def by_name(run: simulator.PolicyRun, traces) -> dict[str, float]:
    jobs = [job for trace in traces for job in trace.jobs]
    return {
        job.name: wait
        for job, wait in zip(sorted(jobs, key=lambda j: (j.submitted_at, j.id)), run.waits, strict=True)
    }


# --- a two-partition rack where first-fit spans and pays the slowdown ----------------------------------

# One rack carved 2x9: p1 = trays 1-9, p2 = trays 10-18; one department, so everything is in quota.
#   A: 8 trays at t=0 for 1000 s; B: 2 trays at t=0 for 1000 s; C: 9 trays at t=0 for 500 s;
#   D: 1 GPU at t=2000 for 100 s (the last submission, so utilization is measured over [0, 2000]).
# rackplane and block-best-fit: A -> p1 trays 1-8, B -> p2 (p1 has one tray left), C waits for a whole
#   partition until A ends at 1000, runs 1000-1500 in p1. Nothing spans.
# first-fit: A -> trays 1-8, B -> trays 9-10 (spans: runs 1500 s), C waits; at 1000 it takes trays 1-8 and
#   11 (spans: runs 750 s, until 1750).
SPAN = [("A", 0, 1000, 32), ("B", 0, 1000, 8), ("C", 0, 500, 36), ("D", 2000, 100, 1)]


@pytest.fixture
def span_traces(tmp_path):
    return simulator.load_traces([write_trace(tmp_path / "research.csv", SPAN)])


@pytest.mark.parametrize("policy", [RACKPLANE, BLOCK_BEST_FIT])
def test_topology_aware_policies_keep_every_job_in_one_partition(span_traces, policy):
    run = simulator.simulate(span_traces, 1, "2x9", policy)
    m = run.metrics
    assert by_name(run, span_traces) == {"A": 0, "B": 0, "C": 1000, "D": 0}
    assert m["jobs"] == 4
    assert m["avg_wait_s"] == 250.0
    assert m["p95_wait_s"] == 1000.0
    assert m["avg_jct_s"] == (1000 + 1000 + 1500 + 100) / 4
    assert m["makespan_s"] == 2100.0
    # Busy GPUs: 40 over [0, 1000), 36 over [1000, 1500), none until 2000.
    assert m["gpu_utilization"] == round((40 * 1000 + 36 * 500) / (72 * 2000), 4)
    assert m["multi_tray_jobs"] == 3
    assert m["multi_tray_in_one_partition"] == 1.0
    assert m["fitting_multi_tray_in_one_partition"] == 1.0
    assert m["spanning_jobs"] == 0
    assert m["span_slowdown_gpu_s"] == 0
    assert m["cross_rack_jobs"] == 0
    assert m["preemptions"] == 0
    assert m["lost_work_gpu_s"] == 0
    assert sum(run.busy_gpu_s) == 32 * 1000 + 8 * 1000 + 36 * 500 + 1 * 100
    # Per size: A (32 GPUs) and C (36) are 20-36, B (8) 8-16, D (1) 1-4; nearest rank of [0, 1000].
    assert m["wait_by_size"] == {
        "1-4": {"jobs": 1, "avg_wait_s": 0.0, "p50_wait_s": 0.0, "p95_wait_s": 0.0},
        "8-16": {"jobs": 1, "avg_wait_s": 0.0, "p50_wait_s": 0.0, "p95_wait_s": 0.0},
        "20-36": {"jobs": 2, "avg_wait_s": 500.0, "p50_wait_s": 0.0, "p95_wait_s": 1000.0},
        ">36": {"jobs": 0, "avg_wait_s": None, "p50_wait_s": None, "p95_wait_s": None},
    }
    # C's 1000 s weigh 36 of the 77 GPUs; the plain average gives it a quarter.
    assert m["gpu_weighted_wait_s"] == round(36 * 1000 / 77, 1)


def test_first_fit_spans_partitions_and_pays_the_slowdown(span_traces):
    run = simulator.simulate(span_traces, 1, "2x9", FIRST_FIT)
    m = run.metrics
    assert by_name(run, span_traces) == {"A": 0, "B": 0, "C": 1000, "D": 0}
    assert m["avg_jct_s"] == (1000 + 1500 + 1750 + 100) / 4
    assert m["makespan_s"] == 2100.0
    # Busy GPUs: 40 over [0, 1000), 44 over [1000, 1500), 36 over [1500, 1750).
    assert m["gpu_utilization"] == round((40 * 1000 + 44 * 500 + 36 * 250) / (72 * 2000), 4)
    assert m["multi_tray_in_one_partition"] == round(1 / 3, 4)
    assert m["spanning_jobs"] == 2
    assert m["span_slowdown_gpu_s"] == 0.5 * (8 * 1000 + 36 * 500)
    assert sum(run.busy_gpu_s) == 32 * 1000 + 8 * 1500 + 36 * 750 + 1 * 100
    assert run.metrics["departments"]["research"]["held_gpu_hours"] == round(sum(run.busy_gpu_s) / 3600, 1)


def test_span_slowdown_one_turns_the_penalty_off(span_traces):
    m = simulator.simulate(span_traces, 1, "2x9", FIRST_FIT, span_slowdown=1.0).metrics
    assert m["avg_jct_s"] == (1000 + 1000 + 1500 + 100) / 4
    # B still spans, at no cost; it ends at 1000 with A, so C finds p1 whole.
    assert m["spanning_jobs"] == 1
    assert m["span_slowdown_gpu_s"] == 0


def test_the_replay_runs_the_engines_pass_with_exact_time_limits(span_traces, monkeypatch):
    """Every decision is `scheduler.schedule` (explain=False); time limits are the run time where placed."""
    calls = []
    real = simulator.schedule

    def spy(cluster, departments, running, pending, now, policy, **options):
        calls.append((now, policy, options, {j.id: j.time_limit_s for j in pending}, list(running)))
        return real(cluster, departments, running, pending, now, policy, **options)

    monkeypatch.setattr(simulator, "schedule", spy)
    simulator.simulate(span_traces, 1, "2x9", FIRST_FIT)
    assert [(now, policy) for now, policy, *_ in calls] == [
        (0, FIRST_FIT),
        (1000, FIRST_FIT),
        (2000, FIRST_FIT),
    ]
    # The engine weighs what a preemption costs with the replay's checkpoint loss.
    assert all(options == {"explain": False, "checkpoint_loss_s": 600.0} for _, _, options, _, _ in calls)
    # Waiting: first-fit may spread a multi-tray job, so its limit covers the slowdown; a 1-GPU job's not.
    assert calls[0][3] == {0: 1500.0, 1: 1500.0, 2: 750.0}
    assert calls[2][3] == {3: 100.0}
    # Running: the exact end where it was placed. At 1000 A has ended; B spans and ends at 1500.
    assert {job.id: job.expected_end for job in calls[1][4]} == {1: 1500.0}

    calls.clear()
    simulator.simulate(span_traces, 1, "2x9", RACKPLANE, fallback_after_s=None)
    assert calls[0][3] == {0: 1000.0, 1: 1000.0, 2: 500.0}  # rackplane never spreads a job that fits
    # ... unless the job accepts a rack after waiting (gangs of more than half a partition: A and C).
    calls.clear()
    simulator.simulate(span_traces, 1, "2x9", RACKPLANE)
    assert calls[0][3] == {0: 1500.0, 1: 1000.0, 2: 750.0}

    # P's limit while waiting covers first-fit spreading it (1500 s); placed in one partition, its running
    # limit is the 1000 s it really runs, as the pass at t=10 (Q's submission) sees it.
    calls.clear()
    (tmp,) = {Path(t.path).parent for t in span_traces}
    traces = simulator.load_traces([write_trace(tmp / "pq.csv", [("P", 0, 1000, 8), ("Q", 10, 10, 1)])])
    simulator.simulate(traces, 1, "2x9", FIRST_FIT)
    assert calls[0][3] == {0: 1500.0}
    assert [(now, {job.id: job.expected_end for job in running}) for now, _, _, _, running in calls] == [
        (0, {}),
        (10, {0: 1000.0}),
    ]


def test_cross_rack_jobs_are_counted(tmp_path):
    # Two racks 1x18: X takes 16 trays of rack 1. First-fit puts Y's 4 trays on the last two trays of rack 1
    # and the first two of rack 2; rackplane puts Y in rack 2.
    traces = simulator.load_traces([write_trace(tmp_path / "t.csv", [("X", 0, 100, 64), ("Y", 0, 100, 16)])])
    rackplane = simulator.simulate(traces, 2, "1x18", RACKPLANE).metrics
    first_fit = simulator.simulate(traces, 2, "1x18", FIRST_FIT).metrics
    assert (rackplane["cross_rack_jobs"], first_fit["cross_rack_jobs"]) == (0, 1)
    assert (rackplane["avg_jct_s"], first_fit["avg_jct_s"]) == (100, 125)


# --- guarantees, reclaim and preemption --------------------------------------------------------------


def test_an_in_quota_job_reclaims_borrowed_gpus_and_the_victim_resumes(tmp_path):
    # One rack 1x18, guarantees 36 + 36. a borrows the whole rack (72 GPUs, over quota) at t=0 for 2000 s;
    # b's 8-GPU job at t=100 is in quota: a's job is preempted, goes back to the queue and starts again when
    # b's job ends at 200.
    paths = [
        write_trace(tmp_path / "a.csv", [("a1", 0, 2000, 72)]),
        write_trace(tmp_path / "b.csv", [("b1", 100, 100, 8)]),
    ]
    traces = simulator.load_traces(paths)
    guarantees = {"a": 36, "b": 36}
    resumed = simulator.simulate(traces, 1, "1x18", RACKPLANE, guarantees=guarantees, checkpoint_loss_s=30)
    assert resumed.metrics["preemptions"] == 1
    assert by_name(resumed, traces) == {"a1": 100, "b1": 0}
    # a1 ran 100 s and loses the last 30 (since its last checkpoint): 1930 s left when it resumes at 200.
    assert resumed.metrics["avg_jct_s"] == (2130 + 100) / 2
    assert resumed.metrics["lost_work_gpu_s"] == 72 * 30
    assert resumed.metrics["guarantee_shortfall_gpu_s"] == 0  # b got its GPUs at once
    # The default loss (10 min) is more than a1 ran: it loses all 100 s, never more.
    default = simulator.simulate(traces, 1, "1x18", RACKPLANE, guarantees=guarantees)
    assert default.metrics["avg_jct_s"] == (2200 + 100) / 2
    assert default.metrics["lost_work_gpu_s"] == 72 * 100
    exact = simulator.simulate(traces, 1, "1x18", RACKPLANE, guarantees=guarantees, checkpoint_loss_s=0)
    assert exact.metrics["avg_jct_s"] == (2100 + 100) / 2  # checkpointed as it stopped: 1900 s left
    assert exact.metrics["lost_work_gpu_s"] == 0
    restarted = simulator.simulate(traces, 1, "1x18", RACKPLANE, guarantees=guarantees, preempted="restart")
    assert restarted.metrics["avg_jct_s"] == (2200 + 100) / 2  # a1 starts over at 200
    assert restarted.metrics["lost_work_gpu_s"] == 72 * 100


def test_an_in_quota_job_may_wait_when_that_costs_less_than_the_work_a_preemption_loses(tmp_path):
    # As above, but a's job ends at 1000: b's 8 GPUs waiting 900 s (7,200 GPU-s) cost no more than the
    # 100 s x 72 GPUs a preemption would lose, so with the engine's `reclaim_when_cheaper` b waits and
    # nothing is preempted. With no loss it preempts; by default the guarantee comes first.
    paths = [
        write_trace(tmp_path / "a.csv", [("a1", 0, 1000, 72)]),
        write_trace(tmp_path / "b.csv", [("b1", 100, 100, 8)]),
    ]
    traces = simulator.load_traces(paths)
    guarantees = {"a": 36, "b": 36}
    cheaper = {"reclaim_when_cheaper": True}
    waited = simulator.simulate(traces, 1, "1x18", RACKPLANE, guarantees=guarantees, engine_options=cheaper)
    assert waited.metrics["preemptions"] == 0
    assert by_name(waited, traces) == {"a1": 0, "b1": 900}
    assert waited.metrics["guarantee_shortfall_gpu_s"] == 8 * 900
    free = simulator.simulate(
        traces, 1, "1x18", RACKPLANE, guarantees=guarantees, checkpoint_loss_s=0, engine_options=cheaper
    )
    assert free.metrics["preemptions"] == 1
    assert by_name(free, traces) == {"a1": 100, "b1": 0}
    default = simulator.simulate(traces, 1, "1x18", RACKPLANE, guarantees=guarantees)
    assert default.metrics["preemptions"] == 1


def test_a_preempted_job_may_start_elsewhere_at_once(tmp_path):
    # One rack 2x9, guarantees a=4, b=68. At t=0: a's 1-GPU job takes tray 1 (p1), b's 8-tray job the rest
    # of p1 for 50 s, a's 4-GPU job V (over quota) a tray of p2. At t=60 b's 9-tray job needs a whole
    # partition: p1 has 8 whole trays and p2 has 8 besides V's, so V is preempted for p2. The pass that
    # follows at once starts V on a free tray of p1: it waits no time and resumes with 1000 s left (it
    # ran 60 s, all lost: less than the 10 min since a checkpoint), so it ends at 1060.
    paths = [
        write_trace(tmp_path / "a.csv", [("a_in", 0, 1000, 1), ("V", 0, 1000, 4)]),
        write_trace(tmp_path / "b.csv", [("fill", 0, 50, 32), ("J", 60, 100, 36)]),
    ]
    traces = simulator.load_traces(paths)
    run = simulator.simulate(traces, 1, "2x9", RACKPLANE, guarantees={"a": 4, "b": 68})
    assert run.metrics["preemptions"] == 1
    assert by_name(run, traces) == {"a_in": 0, "V": 0, "fill": 0, "J": 0}
    assert run.metrics["makespan_s"] == 1060
    assert run.metrics["lost_work_gpu_s"] == 4 * 60
    assert run.metrics["multi_tray_in_one_partition"] == 1.0


def test_guarantee_shortfall_counts_in_quota_jobs_left_waiting(tmp_path):
    # One rack 2x9, guarantees 36 + 36. At t=0 a starts a2 (4 trays, p1, 1000 s) and a4 (5 trays, p1,
    # 10 s) in quota, and a1 (5 trays, p2, 2000 s) over quota. When a4 ends, a holds exactly its guarantee,
    # so nothing of it may be reclaimed; b's in-quota 8-tray job at t=20 finds 9 free trays but no partition
    # with 8 (5 in p1, 4 in p2). rackplane keeps it waiting for p1 until a2 ends at 1000: 32 GPUs short
    # for 980 s. First-fit spreads it over both partitions at once.
    paths = [
        write_trace(tmp_path / "a.csv", [("a2", 0, 1000, 16), ("a4", 0, 10, 20), ("a1", 0, 2000, 20)]),
        write_trace(tmp_path / "b.csv", [("b1", 20, 100, 32)]),
    ]
    traces = simulator.load_traces(paths)
    guarantees = {"a": 36, "b": 36}
    rackplane = simulator.simulate(traces, 1, "2x9", RACKPLANE, guarantees=guarantees)
    assert by_name(rackplane, traces)["b1"] == 980
    assert rackplane.metrics["guarantee_shortfall_gpu_s"] == 32 * 980
    assert rackplane.metrics["departments"]["b"]["guarantee_shortfall_gpu_s"] == 32 * 980
    assert rackplane.metrics["departments"]["a"]["guarantee_shortfall_gpu_s"] == 0
    assert rackplane.metrics["preemptions"] == 0
    first_fit = simulator.simulate(traces, 1, "2x9", FIRST_FIT, guarantees=guarantees)
    assert by_name(first_fit, traces)["b1"] == 0
    assert first_fit.metrics["guarantee_shortfall_gpu_s"] == 0
    assert first_fit.metrics["multi_tray_in_one_partition"] == 0.75  # b1 spans


def test_a_job_larger_than_the_guarantee_left_is_over_quota_not_a_shortfall(tmp_path):
    # Guarantees 64 + 8. "big" holds 64 GPUs in quota from 0 to 100; "small" asks for 16 GPUs at 10: more
    # than its guarantee, so over quota (nothing to reclaim for it), and only 8 GPUs are free. The raw gap
    # counts min(8, 16) GPUs while it waits; the shortfall counts nothing.
    paths = [
        write_trace(tmp_path / "big.csv", [("big", 0, 100, 64)]),
        write_trace(tmp_path / "small.csv", [("s", 10, 100, 16)]),
    ]
    traces = simulator.load_traces(paths)
    run = simulator.simulate(traces, 1, "1x18", RACKPLANE, guarantees={"big": 64, "small": 8})
    # big's 16 trays leave 2: the 16-GPU job (4 trays) waits from 10 until 100.
    assert by_name(run, traces)["s"] == 90
    assert run.metrics["guarantee_shortfall_gpu_s"] == 0
    assert run.metrics["guarantee_gap_gpu_s"] == 8 * 90


def test_guarantees_split_by_gpu_hours(tmp_path):
    paths = [
        write_trace(tmp_path / "a.csv", [("a", 0, 3600, 6)]),  # 6 GPUs take 2 trays: 8 GPU-hours
        write_trace(tmp_path / "b.csv", [("b", 0, 7200, 2)]),  # 4 GPU-hours
    ]
    traces = simulator.load_traces(paths)
    assert [t.gpu_hours for t in traces] == [8, 4]
    hours = {t.department: t.gpu_hours for t in traces}
    assert simulator.split_guarantees(72, hours) == {"a": 48, "b": 24}
    assert simulator.split_guarantees(10, hours) == {"a": 7, "b": 3}  # 6.67 + 3.33: largest remainder
    assert simulator.split_guarantees(10, {"x": 1, "y": 1, "z": 1}) == {"x": 4, "y": 3, "z": 3}  # tie: name
    assert simulator.split_guarantees(72, {"x": 0, "y": 0}) == {"x": 36, "y": 36}
    # Given guarantees stay; the rest of the capacity is split among the others by GPU-hours.
    assert simulator.split_guarantees(72, {"a": 8, "b": 3, "c": 1}, {"a": 10}) == {"a": 10, "b": 47, "c": 15}
    results, _ = simulator.run(traces, 1, "1x18", [RACKPLANE], guarantees={"b": 40})
    assert [(d["name"], d["guaranteed_gpus"]) for d in results["config"]["departments"]] == [
        ("a", 32),
        ("b", 40),
    ]
    assert results["policies"][RACKPLANE]["departments"]["b"]["guaranteed_gpus"] == 40


@pytest.mark.parametrize(
    ("given", "message"),
    [({"nobody": 4}, "no such department"), ({"a": 70, "b": 10}, "more than the cluster's 72")],
)
def test_bad_guarantees(given, message):
    with pytest.raises(SimulationError, match=message):
        simulator.split_guarantees(72, {"a": 1.0, "b": 1.0}, given)


@pytest.mark.parametrize(
    ("item", "message"), [("a", "NAME=GPUS"), ("a=-1", "NAME=GPUS"), ("=4", "NAME=GPUS")]
)
def test_bad_guarantee_arguments(item, message):
    with pytest.raises(SimulationError, match=message):
        simulator.parse_guarantees([item])


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10m", 600.0), ("600", 600.0), ("90s", 90.0), ("1.5h", 5400.0), ("0", 0.0), (45, 45.0)],
)
def test_durations(text, seconds):
    assert simulator.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "ten minutes", "-5m", "nan", "inf"])
def test_bad_durations(text):
    with pytest.raises(SimulationError, match="is not a duration"):
        simulator.parse_duration(text)


def test_fallback_is_for_gangs_of_more_than_half_a_partition_and_rack_sized_ones():
    cluster = simulator.build_cluster(1, (9, 9))
    assert [simulator.fallback(gpus, cluster) for gpus in (4, 8, 16, 20, 36, 40, 72)] == [
        None,
        None,
        None,
        RACK,
        RACK,
        ANY,
        ANY,
    ]
    # One partition per rack: a rack is no wider, so partition jobs keep it.
    assert simulator.fallback(36, simulator.build_cluster(1, (18,))) is None


def test_an_in_quota_gang_falls_back_to_a_rack_after_the_bound(tmp_path):
    # One rack 2x9, one department. At 0 two 5-tray jobs take one partition each for 10000 s; at 10 a
    # 6-tray job finds 4 free trays in each partition. Nothing happens until 10000, but its bound (1 h by
    # default) passes at 3610: a pass then spans it over the rack, and it runs 1.5 times longer. Strict,
    # it waits for a partition until 10000.
    path = write_trace(
        tmp_path / "d.csv",
        [("x", 0, 10000, 20), ("y", 0, 10000, 20), ("g", 10, 1000, 24), ("z", 20000, 1, 1)],
    )
    traces = simulator.load_traces([path])
    fallen = simulator.simulate(traces, 1, "2x9", RACKPLANE)
    assert by_name(fallen, traces)["g"] == 3600
    assert fallen.metrics["fitting_multi_tray_in_one_partition"] == round(2 / 3, 4)
    assert fallen.metrics["span_slowdown_gpu_s"] == 0.5 * 1000 * 24
    strict = simulator.simulate(traces, 1, "2x9", RACKPLANE, fallback_after_s=None)
    assert by_name(strict, traces)["g"] == 9990
    assert strict.metrics["fitting_multi_tray_in_one_partition"] == 1.0


def test_parse_guarantees():
    assert simulator.parse_guarantees(["a=4", " b = 0"]) == {"a": 4, "b": 0}
    with pytest.raises(SimulationError, match="twice"):
        simulator.parse_guarantees(["a=4", "a=5"])


# --- inputs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "rounded"), [(1, 1), (2, 2), (3, 3), (4, 4), (5, 8), (6, 8), (8, 8), (9, 12), (63, 64), (64, 64)]
)
def test_gpus_round_up_to_whole_trays_above_four(gpus, rounded):
    assert simulator.round_gpus(gpus) == rounded


def test_load_trace_rounds_gpus_and_keeps_the_trace_figure(tmp_path):
    trace = simulator.load_trace(write_trace(tmp_path / "x.csv", [("j1", 5, 60, 6), ("j2", 7.5, 60.5, 1)]))
    assert trace.department == "x"
    assert [(j.name, j.submitted_at, j.duration_s, j.gpus, j.trace_gpus) for j in trace.jobs] == [
        ("j1", 5.0, 60.0, 8, 6),
        ("j2", 7.5, 60.5, 1, 1),
    ]


def test_job_ids_run_on_across_traces(tmp_path):
    traces = simulator.load_traces(
        [
            write_trace(tmp_path / "a.csv", [("x", 0, 1, 1)] * 2),
            write_trace(tmp_path / "b.csv", [("x", 0, 1, 1)]),
        ]
    )
    assert [j.id for t in traces for j in t.jobs] == [0, 1, 2]


def test_locality_follows_the_largest_partition_then_the_rack():
    two_by_nine = simulator.build_cluster(2, simulator.parse_layout("2x9"))
    assert simulator.locality(1, two_by_nine) == PARTITION
    assert simulator.locality(36, two_by_nine) == PARTITION  # 9 trays: one partition
    assert simulator.locality(40, two_by_nine) == RACK  # 10 trays
    assert simulator.locality(72, two_by_nine) == RACK  # 18 trays
    assert simulator.locality(76, two_by_nine) == ANY  # 19 trays: more than a rack
    whole_rack = simulator.build_cluster(1, simulator.parse_layout("1x18"))
    assert simulator.locality(72, whole_rack) == PARTITION
    mixed = simulator.build_cluster(1, simulator.parse_layout("1x10+2x4"))
    assert (simulator.locality(40, mixed), simulator.locality(44, mixed)) == (PARTITION, RACK)


def test_layouts():
    assert simulator.parse_layout("2x9") == (9, 9)
    assert simulator.parse_layout("3x6") == (6, 6, 6)
    assert simulator.parse_layout("1x10+2x4") == (10, 4, 4)
    assert simulator.parse_layout("16+2") == (16, 2)
    assert simulator.parse_layout("8+8+2") == (8, 8, 2)
    cluster = simulator.build_cluster(2, (9, 9))
    assert (len(cluster), cluster.capacity, len(cluster.part_name), cluster.max_partition_trays) == (
        36,
        144,
        4,
        9,
    )
    assert cluster.tray_host[9] == "rack001-t10"
    assert cluster.partition_label(cluster.tray_part[9]) == "rack001 p2"


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ("2x8", "hold 16 trays"),
        ("4x5", "hold 20 trays"),
        ("9", "hold 9 trays"),
        ("16+1", "hold 17 trays"),
        ("0x18", "COUNTxTRAYS"),
        ("16+-2", "COUNTxTRAYS"),
        ("axb", "COUNTxTRAYS"),
    ],
)
def test_bad_layouts(layout, message):
    with pytest.raises(SimulationError, match=message):
        simulator.parse_layout(layout)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("job_id,when,length\n1,2,3\n", "missing columns submission_time, duration, num_gpu"),
        ("job_id,submission_time,duration,num_gpu\n", "no jobs"),
        ("job_id,submission_time,duration,num_gpu\nj,0,0,1\n", r"no jobs \(1 rows left out: duration 0"),
    ],
)
def test_bad_traces(tmp_path, text, message):
    path = tmp_path / "x.csv"
    path.write_text(text)
    with pytest.raises(SimulationError, match=message):
        simulator.load_trace(path)


def test_rows_that_are_no_job_are_left_out_and_counted_with_their_first_line(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text(
        "job_id,submission_time,duration,num_gpu\n"
        "ok-1,0,10,8\n"
        "j,0,ten,1\n"  # line 3
        "j,0,10,0\n"  # a CPU-only job
        "j,0,0,1\n"
        "j,0,-5,1\n"
        "j,nan,5,1\n"
        "j,0,10\n"  # a short row
        "ok-2,5,10,1\n"
        "j,0,10,0\n"
    )
    trace = simulator.load_trace(path)
    assert [job.name for job in trace.jobs] == ["ok-1", "ok-2"]
    assert [job.id for job in trace.jobs] == [0, 1]
    assert trace.quirks == {
        "rows left out: a time that is not finite (first: line 7)": 1,
        "rows left out: duration 0 or less (first: line 5)": 2,
        "rows left out: no GPU (num_gpu 0 or less) (first: line 4)": 2,
        "rows left out: submission_time or duration not a number, or num_gpu not a whole number "
        "(first: line 3)": 2,
    }


def test_a_job_larger_than_the_cluster_is_left_out_and_counted(tmp_path):
    traces = simulator.load_traces([write_trace(tmp_path / "x.csv", [("j", 0, 10, 73), ("k", 0, 10, 8)])])
    one_rack = simulator.simulate(traces, 1, "1x18", RACKPLANE)  # 19 trays: larger than one rack
    assert one_rack.metrics["jobs"] == 1
    results, _ = simulator.run(traces, 1, "1x18", [RACKPLANE])
    assert results["config"]["trace_quirks"] == {
        traces[0].path: {"jobs larger than the cluster's 72 GPUs, left out (the largest: 76)": 1}
    }
    assert "x.csv: 1 jobs larger than the cluster" in simulator.quirks(results["config"])[0]
    assert simulator.simulate(traces, 2, "1x18", RACKPLANE).metrics["cross_rack_jobs"] == 1  # topology "any"
    alone = simulator.load_traces([write_trace(tmp_path / "y.csv", [("j", 0, 10, 73)])])
    with pytest.raises(SimulationError, match="every job needs more GPUs than the cluster's 72"):
        simulator.simulate(alone, 1, "1x18", RACKPLANE)


# --- manage.py simulate ------------------------------------------------------------------------------


def slice_of(source: Path, target: Path, lines: int) -> Path:
    with source.open() as handle:
        target.write_text("".join(line for _, line in zip(range(lines + 1), handle, strict=False)))
    return target


def simulate(*args) -> str:
    out = StringIO()
    call_command("simulate", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.mark.slow(reason="a replay of a real trace")
def test_command_end_to_end_on_a_slice_of_a_real_trace(tmp_path):
    traces = [
        slice_of(ITP / "cluster03-head.csv", tmp_path / "cluster03.csv", 150),
        slice_of(ITP / "cluster06-head.csv", tmp_path / "cluster06.csv", 150),
    ]
    out, report = tmp_path / "results.json", tmp_path / "report.html"
    printed = simulate(
        *(arg for path in traces for arg in ("--trace", str(path))),
        "--racks",
        "2",
        "--layout",
        "2x9",
        "--out",
        str(out),
        "--html",
        str(report),
    )
    results = json.loads(out.read_text())
    assert list(results["policies"]) == [RACKPLANE, FIRST_FIT, BLOCK_BEST_FIT]
    for policy, metrics in results["policies"].items():
        assert set(FIELDS) <= set(metrics), policy
        assert metrics["jobs"] == 300
        assert 0 < metrics["gpu_utilization"] <= 1
        assert metrics["avg_jct_s"] > metrics["avg_wait_s"]
        assert 0 <= metrics["multi_tray_in_one_partition"] <= 1
        assert metrics["decisions_per_s"] > 0
        assert set(metrics["departments"]) == {"cluster03", "cluster06"}
        assert policy in printed
    rackplane = results["policies"][RACKPLANE]
    assert rackplane["multi_tray_jobs_fitting_a_partition"] > 0
    assert rackplane["fitting_multi_tray_in_one_partition"] == 1.0
    assert rackplane["cross_rack_jobs"] == 0
    config = results["config"]
    assert (config["racks"], config["capacity_gpus"], config["partition_trays"]) == (2, 144, [9, 9])
    assert sum(d["guaranteed_gpus"] for d in config["departments"]) == 144
    assert config["machine"]["cpus"] >= 1

    page = report.read_text()
    assert "<script src" not in page  # plotly.js is inlined, not fetched
    assert "Plotly.newPlot" in page
    for policy in (RACKPLANE, FIRST_FIT, BLOCK_BEST_FIT):
        for chart in ("GPU utilization", "wait-time CDF", "share of GPUs by department"):
            assert f"{policy}: {chart}" in page
    assert '"name":"cluster03"' in page and '"stackgroup":"share3"' in page
    for row in (
        "work lost to preemptions (GPU-h)",
        "GPU-weighted average wait (h)",
        "p95 wait of &gt;36 GPU",
    ):
        assert row in page
    assert "each losing up to 10 min of work" in page
    assert (config["checkpoint_loss_s"], config["fallback_after_s"]) == (600.0, 3600.0)
    assert set(rackplane["wait_by_size"]) == {"1-4", "8-16", "20-36", ">36"}


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_command_runs_the_policies_asked_for(tmp_path):
    trace = write_trace(tmp_path / "t.csv", SPAN)
    out = tmp_path / "r.json"
    printed = simulate(
        "--trace", str(trace), "--racks", "1", "--layout", "2x9", "--policy", "first-fit", "--out", str(out)
    )
    results = json.loads(out.read_text())
    assert list(results["policies"]) == [FIRST_FIT]
    assert results["policies"][FIRST_FIT]["spanning_jobs"] == 2
    assert "rackplane" not in printed
    simulate(
        "--trace", str(trace), "--racks", "1", "--layout", "2x9", "--span-slowdown", "1", "--out", str(out)
    )
    assert json.loads(out.read_text())["policies"][FIRST_FIT]["avg_jct_s"] == 900


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trace", "/nonexistent/t.csv"], "cannot read trace /nonexistent/t.csv"),
        (["--layout", "2x8"], "hold 16 trays"),
        (["--policy", "best"], "unknown policy best"),
        (["--guarantee", "t"], "NAME=GPUS"),
        (["--guarantee", "other=4"], "no such department"),
        (["--guarantee", "t=100"], "more than the cluster's 72"),
        (["--span-slowdown", "0.5"], "span slowdown must be a number >= 1.0"),
        (["--preempted", "later"], "preempted jobs 'later'"),
        (["--checkpoint-loss", "soon"], "'soon' is not a duration"),
        (["--fallback-after", "later"], "'later' is not a duration"),
        (["--racks", "0"], "--racks must be at least 1"),
        (["--out", "/nonexistent/dir/r.json"], "there is no directory /nonexistent/dir"),
    ],
)
def test_command_refuses_bad_arguments(tmp_path, args, message):
    trace = write_trace(tmp_path / "t.csv", SPAN)
    options = {"--trace": str(trace), "--racks": "1", "--layout": "1x18", "--out": str(tmp_path / "r.json")}
    options.update(zip(args[::2], args[1::2], strict=True))
    with pytest.raises(CommandError, match=message):
        simulate(*(item for pair in options.items() for item in pair))


# --- preemption bounds: the replay wakes when they end ------------------------------------------------------


def _borrower_and_owner(tmp_path: Path) -> list:
    """b borrows the whole rack from t=0 for 10,000 s; at t=1000 a (guaranteed all 72 GPUs) wants 4."""
    return simulator.load_traces(
        [
            write_trace(tmp_path / "a.csv", [("owner", 1000, 100, 4)]),
            write_trace(tmp_path / "b.csv", [("borrower", 0, 10_000, 72)]),
        ]
    )


@pytest.mark.parametrize(
    ("engine_options", "owner_waits"),
    [
        (None, 0.0),  # reclaims at once
        ({"preempt_after_s": 600.0}, 600.0),  # its grace ends at 1600: a pass runs then
        ({"min_runtime_s": {"train": 3000.0}}, 2000.0),  # the borrower may be preempted from 3000
        ({"min_runtime_s": {"train": 3000.0}, "preempt_after_s": 600.0}, 2000.0),  # the later of both
        ({"min_runtime_s": {"train": 20_000.0}}, 9000.0),  # never within the borrower's run: it ends first
    ],
)
def test_the_replay_starts_the_owner_when_the_preemption_bounds_allow(tmp_path, engine_options, owner_waits):
    traces = _borrower_and_owner(tmp_path)
    run = simulator.simulate(
        traces, 1, "1x18", RACKPLANE, guarantees={"a": 72, "b": 0}, engine_options=engine_options
    )
    owner, borrower = traces[0].jobs[0], traces[1].jobs[0]
    in_order = sorted([owner, borrower], key=lambda j: (j.submitted_at, j.id))  # the order of run.waits
    waits = dict(zip((j.id for j in in_order), run.waits, strict=True))
    assert waits[owner.id] == pytest.approx(owner_waits)
    assert run.metrics["preemptions"] == (0 if owner_waits == 9000.0 else 1)


def test_the_command_takes_the_preemption_bounds_and_records_them(tmp_path):
    _borrower_and_owner(tmp_path)
    out = tmp_path / "r.json"
    call_command(
        "simulate",
        "--trace",
        str(tmp_path / "a.csv"),
        "--trace",
        str(tmp_path / "b.csv"),
        "--racks",
        "1",
        "--guarantee",
        "a=72",
        "--min-runtime",
        "50m",
        "--preempt-after",
        "10m",
        "--policy",
        RACKPLANE,
        "--out",
        str(out),
        stdout=StringIO(),
        stderr=StringIO(),
    )
    config = json.loads(out.read_text())["config"]
    assert config["min_runtime_s"] == {"train": 3000.0} and config["preempt_after_s"] == 600.0
    assert "--min-runtime 50m --preempt-after 10m" in config["command"]
    with pytest.raises(CommandError, match="'soon' is not a duration"):
        call_command(
            "simulate",
            "--trace",
            str(tmp_path / "a.csv"),
            "--racks",
            "1",
            "--preempt-after",
            "soon",
            "--out",
            str(out),
            stdout=StringIO(),
            stderr=StringIO(),
        )


def test_jitter_shifts_each_submission_later_by_at_most_its_bound_the_same_for_a_seed(tmp_path):
    traces = simulator.load_traces([ITP / "cluster03-head.csv", ITP / "cluster06-head.csv"])
    one = simulator.jitter_traces(traces, 300.0, seed=7)
    shifts = [
        b.submitted_at - a.submitted_at
        for t, u in zip(traces, one, strict=True)
        for a, b in zip(t.jobs, u.jobs, strict=True)
    ]
    assert all(0 <= shift < 300 for shift in shifts) and len(set(shifts)) == len(shifts)
    assert [j.id for t in one for j in t.jobs] == [
        j.id for t in traces for j in t.jobs
    ]  # same jobs, same ids
    assert simulator.jitter_traces(traces, 300.0, seed=7) == one
    assert simulator.jitter_traces(traces, 300.0, seed=8) != one
    assert simulator.jitter_traces(traces, 0, seed=7) == traces
    out = tmp_path / "r.json"
    call_command(
        "simulate",
        "--trace",
        str(ITP / "cluster03-head.csv"),
        "--racks",
        "2",
        "--policy",
        RACKPLANE,
        "--jitter",
        "5m",
        "--seed",
        "3",
        "--out",
        str(out),
        stdout=StringIO(),
        stderr=StringIO(),
    )
    config = json.loads(out.read_text())["config"]
    assert config["jitter"] == {"max_s": 300.0, "seed": 3} and "--jitter 5m --seed 3" in config["command"]


# --- historical fair share (--half-life) ----------------------------------------------------------------

DAY = 86400


def history_traces(tmp_path: Path):
    """One rack of one partition (72 GPUs); c is guaranteed 64 and holds them all but a's 8 borrowed GPUs
    for ten days. When a's job ends, a and b each want those 8 GPUs for a day, equally below their fair share
    now; a asked a second earlier. Only a has history: 8 GPUs for ten days."""
    a = write_trace(tmp_path / "a.csv", [("a1", 0, 10 * DAY, 8), ("a2", 10 * DAY - 2, DAY, 8)])
    b = write_trace(tmp_path / "b.csv", [("b1", 10 * DAY - 1, DAY, 8)])
    c = write_trace(tmp_path / "c.csv", [("c1", 0, 30 * DAY, 56), ("c2", 0, 20 * DAY, 8)])
    return simulator.load_traces([a, b, c])


@pytest.mark.parametrize(("half_life_s", "first"), [(None, "a2"), (7 * DAY, "b1"), (3600, "b1")])
def test_the_half_life_lets_the_department_with_less_recent_usage_borrow_first(tmp_path, half_life_s, first):
    """Off: submission order. With a half-life b, which has no history, borrows first: a held 8 GPUs until
    this very moment, which counts under a week's half-life and an hour's alike."""
    traces = history_traces(tmp_path)
    run = simulator.simulate(
        traces, 1, "1x18", RACKPLANE, guarantees={"a": 0, "b": 0, "c": 64}, half_life_s=half_life_s
    )
    waits = by_name(run, traces)
    second = {"a2": "b1", "b1": "a2"}[first]
    # The first borrows as a's first job ends; the other waits for it (a day).
    assert waits[first] <= 2
    assert waits[second] >= DAY


def test_command_takes_a_half_life_and_off(tmp_path):
    traces = [tmp_path / f"{name}.csv" for name in "abc"]
    history_traces(tmp_path)
    for half_life, want in (("7d", 7 * DAY), ("off", None)):
        out = tmp_path / f"r-{half_life}.json"
        args = [item for path in traces for item in ("--trace", str(path))]
        args += ["--racks", "1", "--layout", "1x18", "--policy", RACKPLANE, "--half-life", half_life]
        simulate(*args, "--guarantee", "c=64", "--guarantee", "a=0", "--guarantee", "b=0", "--out", str(out))
        results = json.loads(out.read_text())
        assert results["config"]["half_life_s"] == want
    with pytest.raises(CommandError, match="half-life must be a number of seconds > 0"):
        simulate(*args[:-2], "--half-life", "0", "--out", str(out))
    with pytest.raises(CommandError, match="'soon' is not a duration"):
        simulate(*args[:-2], "--half-life", "soon", "--out", str(out))


def test_estimated_starts_are_measured_against_real_starts(tmp_path):
    """A job given a reservation starts when it said (the rack frees at 1000 s); one overtaken by a later
    in-quota job of another department starts 500 s after its first estimate: the figures say both."""
    alone = simulator.load_traces(
        [write_trace(tmp_path / "solo.csv", [("A", 0, 1000, 72), ("B", 10, 100, 72)])]
    )
    exact = simulator.simulate(alone, 1, "1x18", RACKPLANE).metrics["estimated_starts"]
    assert exact == {
        "jobs_with_estimate": 1,
        "share_of_jobs": 0.5,
        "median_abs_error_s": 0.0,
        "p90_abs_error_s": 0.0,
        "within_15_min": 1.0,
        "later_than_estimate": 0.0,
        "earlier_than_estimate": 0.0,
    }
    overtaken = simulator.load_traces(
        [
            write_trace(tmp_path / "x.csv", [("A", 0, 1000, 72), ("C", 20, 500, 72)]),
            write_trace(tmp_path / "y.csv", [("B", 10, 100, 72)]),
        ]
    )
    late = simulator.simulate(overtaken, 1, "1x18", RACKPLANE, guarantees={"x": 72, "y": 0})
    figures = late.metrics["estimated_starts"]
    assert figures["median_abs_error_s"] == 500.0 and figures["later_than_estimate"] == 1.0
