"""benchmarks/capacity.py's arithmetic: the web processes' CPU counts the workers gunicorn replaced, and the
heartbeat extrapolation shows each worker count's own figures and the goal's verdict (never a time)."""

import os
import subprocess
import sys
import time

import pytest

from benchmarks import capacity

BURN_AND_EXIT = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"


@pytest.mark.slow(reason="two Python processes and 0.3 s of CPU burnt: over make test-fast's budget")
def test_a_reaped_child_counts_in_its_group_cpu():
    """A leader whose child burned 0.3 s of CPU, then exited and was reaped (as a replaced worker is), still
    shows that CPU in its group's total."""
    leader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            f"subprocess.run([sys.executable, '-c', {BURN_AND_EXIT!r}], check=True)\n"
            "print('reaped', flush=True)\n"
            "time.sleep(30)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert leader.stdout.readline().strip() == "reaped"
        time.sleep(0.1)
        assert capacity.group_cpu_s(leader.pid) >= 0.25
    finally:
        os.killpg(leader.pid, 9)
        leader.wait()


def measured(cpu_ms: float, per_s: float) -> dict:
    return {
        "hash_only_heartbeat": {
            "requests_per_s": per_s,
            "p50_ms": 1,
            "p95_ms": 2,
            "web_cpu_ms_per_request": cpu_ms,
        }
    }


def test_each_worker_count_is_extrapolated_and_the_median_judged():
    figures = capacity.heartbeat_capacity(
        {"1_workers": measured(1.7, 130), "2_workers": measured(1.6, 150), "4_workers": measured(2.9, 70)}
    )
    assert figures["web_cpu_ms_per_heartbeat"] == 1.7
    assert figures["web_processes_needed"] == 6  # 3,000/s x 1.7 ms = 5.1 cores
    assert [f["processes_needed"] for f in figures["by_worker_count"].values()] == [6, 5, 9]
    assert figures["goal"] == "met" and figures["goal_met_with_at_most_8"] is True
    missed = capacity.heartbeat_capacity({"1_workers": measured(4.1, 45), "2_workers": measured(4.7, 50)})
    assert missed["web_processes_needed"] == 14 and missed["goal"] == "missed"
