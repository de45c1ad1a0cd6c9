"""Stranded NVLink capacity in the simulator (scheduling.simulator `_sample_stranded`) and its report: the
GPU-seconds of free GPUs no waiting job could use, by cause, on replays whose every interval is known."""

import pytest

from scheduling import simulator
from scheduling.engine.placement import BLOCK_BEST_FIT, FIRST_FIT, RACKPLANE
from scheduling.report import render_html
from tests.scheduling.test_simulator import SPAN, write_trace

NO_CAUSE = {"fragments": 0.0, "unavailable": 0.0, "running": 0.0, "dedicated": 0.0}


@pytest.mark.parametrize("policy", [RACKPLANE, FIRST_FIT, BLOCK_BEST_FIT])
def test_free_trays_a_waiting_gang_cannot_use_until_work_ends_are_stranded_by_running_work(tmp_path, policy):
    """SPAN (tests/scheduling/test_simulator.py): over [0, 1000) A and B hold 10 trays of a 2x9 rack and C
    (9 trays, one partition) waits; the 8 free trays (32 GPUs) fit no partition until A ends: stranded by
    running work under every policy. Nothing waits afterwards."""
    traces = simulator.load_traces([write_trace(tmp_path / "research.csv", SPAN)])
    m = simulator.simulate(traces, 1, "2x9", policy).metrics
    assert m["stranded_gpu_s"] == 32 * 1000
    assert m["stranded_by_cause_gpu_s"] == {**NO_CAUSE, "running": 32 * 1000}
    assert m["avg_stranded_gpus"] == round(32 * 1000 / m["makespan_s"], 2)


def test_free_trays_split_across_partitions_are_stranded_by_fragments(tmp_path):
    """A and B (5 trays each) land in different partitions (best fit), leaving 4 free trays in each; C (8
    trays, one partition) waits from 1 s until they end at 1000 s: a merge of the rack's free trays would
    fit it."""
    rows = [("A", 0, 1000, 20), ("B", 0, 1000, 20), ("C", 1, 100, 32), ("D", 2000, 100, 1)]
    traces = simulator.load_traces([write_trace(tmp_path / "research.csv", rows)])
    m = simulator.simulate(traces, 1, "2x9", RACKPLANE).metrics
    assert m["stranded_by_cause_gpu_s"] == {**NO_CAUSE, "fragments": 32 * 999}
    assert m["stranded_gpu_s"] == 32 * 999


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_report_table_has_the_stranded_rows(tmp_path):
    traces = simulator.load_traces([write_trace(tmp_path / "research.csv", SPAN)])
    results, runs = simulator.run(traces, 1, "2x9", [RACKPLANE, FIRST_FIT], workers=1)
    page = render_html(results, runs)
    assert "stranded GPUs, time-averaged" in page
    assert "stranded NVLink capacity (GPU-h)" in page
    assert "... stranded by running work (GPU-h)" in page
    for metrics in results["policies"].values():
        assert metrics["stranded_gpu_s"] == sum(metrics["stranded_by_cause_gpu_s"].values())
