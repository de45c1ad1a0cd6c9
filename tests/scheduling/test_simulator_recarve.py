"""Carving that follows demand in the trace replay (simulator.RecarvePlan, `manage.py simulate --recarve`)."""

import json

import pytest
from django.core.management import call_command
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling import simulator
from scheduling.engine.cluster import Cluster
from scheduling.engine.placement import BLOCK_BEST_FIT, RACKPLANE
from scheduling.engine.recarve import RecarvePolicy
from scheduling.simulation_inputs import Trace, TraceJob
from tests.scheduling.test_engine import check_indexes
from tests.scheduling.test_simulator import ITP, by_name, write_trace

# Two racks 2x9, one department (everything in quota). At 0 a 10-tray gang (40 GPUs) arrives: no partition
# has 10 trays, but both of rack001's are idle, so the pass after it merges them into one of 18 (16 + 2
# would be tighter, but Slurm 24.11 refuses it beside rack002's 9 + 9); the trays are out of service for the
# delay (120 s), then the gang starts on the new partition, whole, with no slowdown. "z" at 5000 ends the
# window.
GANG = [("g", 0, 1000, 40), ("z", 5000, 1, 1)]


def test_a_gang_larger_than_a_partition_waits_the_delay_and_runs_in_one_merged_partition(tmp_path):
    traces = simulator.load_traces([write_trace(tmp_path / "d.csv", GANG)])
    run = simulator.simulate(traces, 2, "2x9", RACKPLANE, recarve=simulator.RecarvePlan())
    assert by_name(run, traces)["g"] == simulator.DEFAULT_RECARVE_DELAY_S
    m = run.metrics
    assert m["span_slowdown_gpu_s"] == 0.0 and m["multi_tray_in_one_partition"] == 1.0
    recarve = m["recarve"]
    assert recarve["recarves"] == recarve["merges"] == 1
    assert recarve["recarving_gpu_s"] == 72 * simulator.DEFAULT_RECARVE_DELAY_S
    assert recarve["gangs_started_on_recarved_partition"] == 1
    assert recarve["final_layout"] == {"18": 1, "9+9": 1}
    assert recarve["log"][0]["reason"].endswith(
        "merging idle partitions p1 and p2 of rack001 (9 + 9 trays) makes one of 18"
    )
    # Without re-carving it asks for the rack and spans both partitions at once, 1.5 times slower.
    plain = simulator.simulate(traces, 2, "2x9", RACKPLANE)
    assert by_name(plain, traces)["g"] == 0 and plain.metrics["span_slowdown_gpu_s"] == 0.5 * 1000 * 40
    assert "recarve" not in plain.metrics


def test_the_delay_is_an_option_and_the_baselines_never_recarve(tmp_path):
    traces = simulator.load_traces([write_trace(tmp_path / "d.csv", GANG)])
    slow = simulator.simulate(traces, 2, "2x9", RACKPLANE, recarve=simulator.RecarvePlan(delay_s=600))
    assert by_name(slow, traces)["g"] == 600
    bbf = simulator.simulate(traces, 1, "2x9", BLOCK_BEST_FIT, recarve=simulator.RecarvePlan())
    assert "recarve" not in bbf.metrics


def test_a_policy_bound_holds_the_rack_back(tmp_path):
    # A floor above the rack makes nothing: the gang waits for its fallback (an hour), then spans the rack.
    traces = simulator.load_traces([write_trace(tmp_path / "d.csv", GANG)])
    high = simulator.RecarvePlan(RecarvePolicy(smallest_trays=19))
    run = simulator.simulate(traces, 2, "2x9", RACKPLANE, recarve=high)
    assert run.metrics["recarve"]["recarves"] == 0
    assert by_name(run, traces)["g"] == simulator.DEFAULT_FALLBACK_AFTER_S


def test_a_gang_waits_for_a_recarve_only_as_long_as_the_plan_says(tmp_path):
    # Both racks run work until 5000 (rack001 two 9-tray jobs, rack002 one GPU in p1): no merge is
    # possible. With the replay's fallback bound (1 h) the 10-tray gang waits an hour, then spans rack002;
    # with `wait_s` 120 s only that long.
    path = write_trace(
        tmp_path / "d.csv", [("r1", 0, 5000, 36), ("r2", 0, 5000, 36), ("s", 0, 5000, 1), ("g", 10, 1000, 40)]
    )
    traces = simulator.load_traces([path])
    waited = simulator.simulate(traces, 2, "2x9", RACKPLANE, recarve=simulator.RecarvePlan())
    short = simulator.simulate(traces, 2, "2x9", RACKPLANE, recarve=simulator.RecarvePlan(wait_s=120))
    assert waited.metrics["recarve"]["recarves"] == short.metrics["recarve"]["recarves"] == 0
    assert by_name(waited, traces)["g"] == simulator.DEFAULT_FALLBACK_AFTER_S
    assert by_name(short, traces)["g"] == 120


@pytest.mark.parametrize("wait_s", [None, 120.0])
def test_a_gang_that_got_no_recarve_asks_for_what_it_asks_without_recarving(tmp_path, wait_s):
    # From 5 on, rack001 runs a 9-tray job in p1 and rack002 one in p1 until 20000: no merge, and no rack
    # has 16 free trays. The in-quota 16-tray gang waits for a re-carve (up to wait_s), then asks for a
    # rack, and once its fallback bound (1 h) passes for any trays, as it does without re-carving: it spans
    # both racks at 3610.
    path = write_trace(
        tmp_path / "d.csv",
        [("a", 0, 20000, 36), ("b", 0, 5, 36), ("c", 0, 20000, 36), ("g", 10, 1000, 64)],
    )
    traces = simulator.load_traces([path])
    run = simulator.simulate(traces, 2, "2x9", RACKPLANE, recarve=simulator.RecarvePlan(wait_s=wait_s))
    assert by_name(run, traces)["g"] == simulator.DEFAULT_FALLBACK_AFTER_S
    assert run.metrics["cross_rack_jobs"] == 1
    plain = simulator.simulate(traces, 2, "2x9", RACKPLANE)
    assert by_name(plain, traces)["g"] == simulator.DEFAULT_FALLBACK_AFTER_S


def test_a_layout_the_wizard_refuses_is_refused_unless_the_rule_is_off(tmp_path):
    traces = simulator.load_traces([write_trace(tmp_path / "d.csv", GANG)])
    with pytest.raises(simulator.SimulationError, match="would group blocks of racks"):
        simulator.simulate(traces, 2, "8+8+2", RACKPLANE, recarve=simulator.RecarvePlan())
    what_if = simulator.RecarvePlan(RecarvePolicy(smallest_trays=2), rule=simulator.NO_BLOCK_RULE)
    run = simulator.simulate(traces, 2, "8+8+2", RACKPLANE, recarve=what_if)
    assert run.metrics["recarve"]["final_layout"] == {"16+2": 1, "8+8+2": 1}
    with pytest.raises(simulator.SimulationError, match="re-carving rule"):
        simulator.simulate(traces, 1, "2x9", RACKPLANE, recarve=simulator.RecarvePlan(rule="25.05"))


def test_dedicated_racks_are_recarved_only_for_their_department(tmp_path):
    # Rack 1 is a's: b's 10-tray gang may not have it merged for it (b's in-quota work uses only shared
    # partitions and its own), so rack 2 (shared) is merged; a's own gang gets rack 1.
    a = write_trace(tmp_path / "a.csv", [("ga", 100, 1000, 40), ("za", 5000, 1, 1)])
    b = write_trace(tmp_path / "b.csv", [("gb", 0, 1000, 40)])
    traces = simulator.load_traces([a, b])
    run = simulator.simulate(
        traces, 2, "2x9", RACKPLANE, recarve=simulator.RecarvePlan(), dedicated={"a": 1}, guarantees={"a": 72}
    )
    log = run.metrics["recarve"]["log"]
    assert [(entry["rack"], entry["job"]) for entry in log] == [("rack002", "gb"), ("rack001", "ga")]
    assert "dedicated to a" in log[1]["reason"]


@pytest.mark.slow(reason="about 0.5 s: the command replays two trace heads and draws the report")
def test_the_command_records_the_plan_and_the_report_lists_the_recarves(tmp_path):
    out, html = tmp_path / "r.json", tmp_path / "r.html"
    call_command(
        "simulate",
        "--trace",
        str(ITP / "cluster03-head.csv"),
        "--trace",
        str(ITP / "cluster06-head.csv"),
        "--racks",
        "2",
        "--layout",
        "2x9",
        "--policy",
        "rackplane",
        "--recarve",
        "--recarve-delay",
        "5m",
        "--recarve-max-per-hour",
        "1",
        "--out",
        str(out),
        "--html",
        str(html),
        "--workers",
        "1",
        stdout=open(tmp_path / "stdout", "w"),  # noqa: SIM115
        stderr=open(tmp_path / "stderr", "w"),  # noqa: SIM115
    )
    results = json.loads(out.read_text())
    assert results["config"]["recarve"] == {
        "policies": ["rackplane"],
        "smallest_trays": 1,
        "max_per_hour": 1,
        "delay_s": 300.0,
        "rule": "slurm-24.11",
        "wait_s": None,
    }
    assert "--recarve-delay 5m" in results["config"]["command"]
    figures = results["policies"]["rackplane"]["recarve"]
    assert figures["recarves"] >= 1 and figures["recarving_gpu_s"] > 0
    page = html.read_text()
    assert "Carving that follows demand" in page and figures["log"][0]["reason"] in page


# --- every layout a replay makes obeys the wizard's block rule ---------------------------------------------


def _replay_checking_layouts(traces, racks, layout, plan, monkeypatch) -> list[str | None]:
    seen: list[str | None] = []
    original = Cluster.replace_partitions

    def checked(self, *args, **kwargs):
        new = original(self, *args, **kwargs)
        seen.append(simulator.layout_error(self))
        check_indexes(self)
        return new

    monkeypatch.setattr(Cluster, "replace_partitions", checked)
    simulator.simulate(traces, racks, layout, RACKPLANE, recarve=plan)
    return seen


@pytest.mark.slow(reason="25 small replays: about 0.2-0.5 s on 2 shared cores")
@settings(max_examples=25, deadline=None)
@given(
    layout=st.sampled_from(["2x9", "3x6", "6x3", "1x18"]),
    racks=st.integers(1, 3),
    smallest=st.integers(1, 9),
    per_hour=st.integers(1, 4),
    jobs=st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.integers(0, 20).map(lambda m: m * 300.0),  # submission
            st.integers(1, 12).map(lambda m: m * 600.0),  # duration
            st.sampled_from([1, 4, 8, 16, 24, 36, 40, 48, 64, 72]),  # GPUs
        ),
        min_size=2,
        max_size=25,
    ),
)
def test_every_layout_a_replay_makes_obeys_the_block_rule(layout, racks, smallest, per_hour, jobs):
    traces = [
        Trace(
            name,
            f"{name}.csv",
            tuple(
                TraceJob(i, f"j{i}", name, at, duration, gpus, gpus)
                for i, (owner, at, duration, gpus) in enumerate(jobs)
                if owner == name
            ),
        )
        for name in ("a", "b")
    ]
    traces = [t for t in traces if t.jobs]
    plan = simulator.RecarvePlan(RecarvePolicy(smallest, per_hour), delay_s=120.0)
    with pytest.MonkeyPatch.context() as monkeypatch:
        seen = _replay_checking_layouts(traces, racks, layout, plan, monkeypatch)
    assert all(why is None for why in seen), seen


def test_the_shipped_heads_make_only_layouts_the_wizard_accepts(monkeypatch):
    traces = simulator.load_traces([ITP / "cluster03-head.csv", ITP / "cluster06-head.csv"])
    seen = _replay_checking_layouts(traces, 2, "2x9", simulator.RecarvePlan(), monkeypatch)
    assert seen and all(why is None for why in seen)


def test_a_replay_gathering_idle_trays_never_moves_running_work(monkeypatch):
    # The 25.05 what-if (no fleet rule) with the policy's idle-trays bound: the shipped heads make gathers,
    # every one moves only trays that run nothing, and the cluster's indexes stay exact.
    traces = simulator.load_traces([ITP / "cluster03-head.csv", ITP / "cluster06-head.csv"])
    plan = simulator.RecarvePlan(RecarvePolicy(idle_trays=True), rule=simulator.NO_BLOCK_RULE)
    original = Cluster.replace_partitions
    gathers = []

    def checked(self, rack, removed, created, *, taken=(), change=True):
        taken = tuple(taken)
        moved = [self.host_index[h] for _, hosts in taken for h in hosts]
        assert not any(self.tray_jobs[t] for t in moved)
        new = original(self, rack, removed, created, taken=taken, change=change)
        check_indexes(self)
        gathers.append(bool(taken))
        return new

    monkeypatch.setattr(Cluster, "replace_partitions", checked)
    run = simulator.simulate(traces, 1, "2x9", RACKPLANE, recarve=plan)
    assert any(gathers), "the heads should make at least one gather"
    assert run.metrics["recarve"]["recarves"] == len(gathers)
