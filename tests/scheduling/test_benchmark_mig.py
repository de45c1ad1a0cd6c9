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


@pytest.mark.slow(reason="12 replays of the ITP heads, a few seconds on 2 cores")
def test_the_rule_is_replayed_against_whole_gpus_scored_on_the_same_jobs(tmp_path, capsys):
    traces = tmp_path / "itp"
    traces.mkdir()
    # The head's 150 jobs span 9 days: stretched 3x so that some come after the 14-day history.
    rows = (HEADS / "cluster06-head.csv").read_text().splitlines()
    stretched = [rows[0]]
    for row in rows[1:]:
        name, submitted, duration, gpus = row.split(",")
        stretched.append(f"{name},{3 * int(submitted)},{duration},{gpus}")
    for cluster in ("01", "02", "03"):
        (traces / f"cluster{cluster}.csv").write_text("\n".join(stretched) + "\n")
    config = mig.RULE.format(1.5)
    out = tmp_path / "out"
    words = [
        "--traces",
        str(traces),
        "--out",
        str(out),
        "--workers",
        "1",
        "--half",
        "tuning",
        "--only",
        config,
    ]
    assert mig.main(words) == 0
    printed = capsys.readouterr().out
    # The baseline is the whole-GPU run with the same history window, not the one scoring every job.
    assert f"Goal for {config} (means over the samples; own vs {mig.WHOLE_AFTER})" in printed
    assert f"| {mig.WHOLE} |" not in printed
    kept = {p.name.split("__")[0]: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert len(list(out.glob("*.json"))) == 2 * 2 * 3
    ruled = next(m for name, m in kept.items() if name.startswith("MIG_by_the_rule"))
    whole = next(m for name, m in kept.items() if name.startswith("whole_GPU_2x9"))
    sizing = ruled["mig"]["sizing"]
    assert (ruled["mig"]["mig_trays"], ruled["mig"]["mig_gpus"]) == (
        4 * sizing["trays_per_rack"],
        4 * sizing["trays_per_rack"] * sizing["gpus_per_tray"],
    )
    assert ruled["mig"]["history_s"] == whole["mig"]["history_s"] == 14 * 86400
    assert 0 < ruled["mig"]["scored_jobs"] == whole["mig"]["scored_jobs"] < ruled["jobs"]
    assert (
        f"| {config} | tuning | jitter 0 s seed 1 | {100 * sizing['share']:.1f}% | {sizing['mig_gpus']} |"
        in (printed)
    )
