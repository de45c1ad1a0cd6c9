"""benchmarks/mig.py: refused in words without the traces, and a run on small traces prints the tables and
the goal against whole-GPU placement (the shipped ITP heads stand in for the five clusters)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks import mig

HEADS = Path(__file__).resolve().parent / "fixtures" / "traces"


def test_without_the_traces_it_says_how_to_name_them(monkeypatch, capsys):
    monkeypatch.delenv("ITP_TRACES", raising=False)
    with pytest.raises(SystemExit):
        mig.main([])
    assert "name the ITP traces' folder: --traces DIR or ITP_TRACES=DIR" in capsys.readouterr().err


@pytest.mark.slow(reason="24 replays of the ITP heads, about 10 s on 2 cores")
def test_a_run_prints_both_halves_and_the_goal(tmp_path, capsys):
    traces = tmp_path / "itp"
    traces.mkdir()
    for cluster, head in (("01", "03"), ("02", "06"), ("03", "03"), ("05", "06"), ("06", "03")):
        shutil.copy(HEADS / f"cluster{head}-head.csv", traces / f"cluster{cluster}.csv")
    config = "MIG 2 trays/rack 8+8+2, best-fit"
    out = tmp_path / "out"
    assert mig.main(["--traces", str(traces), "--out", str(out), "--workers", "1", "--only", config]) == 0
    printed = capsys.readouterr().out
    for half in ("tuning", "validation"):
        for slowdown in ("1.5", "1"):
            assert f"{half} half, slowdown {slowdown} (range over 3 samples" in printed
    assert "| whole-GPU 2x9 |" in printed  # always replayed: the goal is measured against it
    assert f"| {config} |" in printed
    assert f"Goal for {config} (means over the samples; own vs whole-GPU 2x9)" in printed
    kept = sorted(out.glob("*.json"))
    assert len(kept) == 2 * 2 * 2 * 3  # two configurations, both halves, both slowdowns, three samples
    tuning = json.loads(
        next(p for p in kept if p.name.startswith("MIG") and "__tuning__" in p.name).read_text()
    )
    assert (tuning["mig"]["mig_trays"], tuning["mig"]["mig_gpus"]) == (2 * 4, 2 * 4 * 4)  # 4 racks
    assert tuning["mig"]["slurm_24_11_blocks"] is None
    # A second run replays nothing and prints the same tables.
    assert mig.main(["--traces", str(traces), "--out", str(out), "--only", config]) == 0
    assert capsys.readouterr().out == printed
