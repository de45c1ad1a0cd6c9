"""The simulator's figures, pinned: a small replay under every policy, without faults and with them handled
both ways, must give exactly the figures stored in fixtures/golden_replay.json (made before the engine's
and the simulator's speed-ups; timing figures left out). Any change to a decision of the engine
(admission, placement, reclaim, reservation, backfill) or to the books moves some figure here.

To renew the figures after a change that is meant to move them:
``python -m tests.scheduling.test_simulator_golden`` (from the repository root) rewrites the file."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from scheduling import simulator
from scheduling.engine.scheduler import RunningJob, _sort_standing, _standing_order

HERE = Path(__file__).resolve().parent
ITP = HERE / "fixtures" / "traces"
GOLDEN = HERE / "fixtures" / "golden_replay.json"
TIMING = {"wall_s", "decisions_per_s", "scheduling_wall_s"}
DAY = 86400.0


def _fault_events(span: float) -> list[dict]:
    """A fixed fault trace over the replay's window: 24 nodes failing three times each, one fault after
    another; the last fault of every seventh node is never repaired within the trace."""
    gpu = {"Level": "Hardware Failure", "Class": "GPU", "Desc": "GPU xid Error"}
    third = span / 3
    events = []
    for node in range(24):
        name = f"node{node:02d}"
        for k in range(3):
            start = k * third + (node * 7919) % max(1, int(third / 2))
            events.append(
                {"node_id": name, "event_time": start / DAY, "event_type": "fault_start", "fault_type": gpu}
            )
            if not (k == 2 and node % 7 == 0):
                end = start + 1800 + (node * 3 + k) * 900
                events.append({"node_id": name, "event_time": end / DAY, "event_type": "fault_end"})
    return events


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def replay(tmp: Path) -> dict:
    """The pinned replay: the two trace heads on one rack of 2x9, checkpoint loss 10 min, faults."""
    traces = simulator.load_traces([ITP / "cluster03-head.csv", ITP / "cluster06-head.csv"])
    times = [job.submitted_at for trace in traces for job in trace.jobs]
    first, last = min(times), max(times)
    faults_path = tmp / "faults.json"
    faults_path.write_text(json.dumps(_fault_events(last - first)))
    plan = simulator.FaultPlan(simulator.load_faults(faults_path))
    results, _ = simulator.run(
        traces,
        1,
        "2x9",
        simulator.POLICIES,
        guarantees={"cluster03-head": 64},  # cluster06 borrows, and cluster03's gangs reclaim from it
        checkpoint_loss_s=600.0,
        faults=plan,
        workers=1,
    )
    return {"jobs": results["config"]["jobs"], "policies": _strip(results["policies"])}


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_a_small_replay_gives_the_pinned_figures(tmp_path):
    got = replay(tmp_path)
    want = json.loads(GOLDEN.read_text())
    assert got["jobs"] == want["jobs"]
    for policy in simulator.POLICIES:
        assert got["policies"][policy] == want["policies"][policy], policy
    assert got == want


def test_the_pinned_replay_exercises_the_engine():
    """The pinned figures cover queueing, reclaim, reservations, spanning and both fault modes."""
    want = json.loads(GOLDEN.read_text())["policies"]
    assert any(m["preemptions"] > 0 for m in want.values())
    assert all(m["avg_wait_s"] > 0 for m in want.values())
    assert any(m["spanning_jobs"] > 0 for m in want.values())
    for m in want.values():
        assert m["faults"]["automated"]["jobs_hit"] > 0
        assert m["faults"]["manual"]["lost_work_gpu_s"] > 0
        assert not math.isnan(m["gpu_utilization"])


def test_the_standing_sort_keeps_the_standing_order():
    """`_sort_standing` (C-level keys) orders a department's running jobs exactly as `_standing_order`:
    non-preemptible classes first, then oldest, then the pass's own in-quota decision, then id."""
    rng = random.Random(7)
    for _ in range(200):
        jobs = [
            RunningJob(
                job_id,
                "a",
                4,
                started_at=float(rng.randrange(5)),
                expected_end=100.0,
                over_quota=rng.random() < 0.5,
                priority_class=rng.choice(("train", "train", "build", "inference")),
            )
            for job_id in rng.sample(range(1000), rng.randrange(1, 30))
        ]
        fast = list(jobs)
        _sort_standing(fast)
        assert fast == sorted(jobs, key=_standing_order)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        GOLDEN.write_text(json.dumps(replay(Path(tmp)), indent=1, sort_keys=True) + "\n")
