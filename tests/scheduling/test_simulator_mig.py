"""MIG in the trace replay (simulator.MigPlan, `manage.py simulate --mig-trays`): hand-made traces whose
outcome is worked out by hand."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from scheduling import simulator
from scheduling.engine.mig import GB200_LAYOUTS, MigLayout
from scheduling.simulator import MigPlan, SimulationError, SliceConversion
from tests.scheduling.test_simulator import by_name, write_trace

ITP = Path(__file__).resolve().parent / "fixtures" / "traces"
ONE_G = SliceConversion(mix=(("1g.23gb", 1.0),))
HEADS = ("--trace", str(ITP / "cluster03-head.csv"), "--trace", str(ITP / "cluster06-head.csv"))


waits = by_name  # job name -> its wait in a run


# One rack carved 17+1. "big" (17 trays) holds every whole-GPU tray but one from t=0 to 10,000 s; at t=1
# seven 1-GPU jobs of 100 s arrive.
#   whole-GPU (no MIG tray): the last tray has 4 GPUs: four start at once, three wait 100 s for them.
#   MIG (the 1-tray partition in MIG mode, all-1g.23gb): the seven take seven 1g instances at once (best-fit
#   puts all seven on one GPU), none waits; the whole-GPU job "big" runs as before.
SEVEN = [("big", 0, 10_000, 68)] + [(f"s{i}", 1, 100, 1) for i in range(7)]


def test_seven_1g_jobs_share_one_mig_gpu_where_whole_gpus_run_them_in_turn(tmp_path):
    traces = simulator.load_traces([write_trace(tmp_path / "a.csv", SEVEN)])
    whole = simulator.simulate(traces, 1, "17+1", mig=MigPlan(trays_per_rack=0, conversion=ONE_G))
    sliced = simulator.simulate(
        traces,
        1,
        "17+1",
        mig=MigPlan(trays_per_rack=1, layout=GB200_LAYOUTS["all-1g.23gb"], conversion=ONE_G),
    )
    whole_waits, sliced_waits = waits(whole, traces), waits(sliced, traces)
    assert sorted(whole_waits[f"s{i}"] for i in range(7)) == [0, 0, 0, 0, 100, 100, 100]
    assert all(sliced_waits[f"s{i}"] == 0 for i in range(7))
    assert whole_waits["big"] == sliced_waits["big"] == 0
    m = sliced.metrics["mig"]
    assert (m["mig_trays"], m["mig_gpus"], m["slice_jobs"], m["converted_jobs"]) == (1, 4, 7, 7)
    assert m["instances_taken"] == {"1g.23gb on 1g.23gb": 7}
    assert m["one_gpu_or_smaller"]["avg_wait_s"] == 0
    assert whole.metrics["mig"]["one_gpu_or_smaller"]["avg_wait_s"] == pytest.approx(300 / 7, abs=0.1)
    assert whole.metrics["mig"]["slice_jobs"] == 0  # no MIG tray: they ran as 1-GPU jobs
    # Utilisation counts from the first to the last submission, [0, 1]: the slices start at its end.
    assert m["slice_utilization"] == 0.0


def test_slice_utilisation_stranded_slices_and_instances_taken(tmp_path):
    # One MIG tray all-balanced (per GPU: 2 x 1g.23gb, 2g.47gb, 3g.93gb; 4 GPUs). At t=0 eight 3g requests
    # arrive for 1,000 s: four run (the four 3g instances), four wait. The 1g and 2g instances are free and
    # no waiting request fits them: 4 x (1+1+2) = 16 compute slices stranded from 0 to 1,000 s. At t=2,000 a
    # 1-GPU job marks the end of the window.
    rows = [(f"b{i}", 0, 1_000, 1) for i in range(8)] + [("last", 2_000, 10, 1)]
    traces = simulator.load_traces([write_trace(tmp_path / "a.csv", rows)])
    conversion = SliceConversion(mix=(("3g.93gb", 1.0),))
    run = simulator.simulate(traces, 1, "17+1", mig=MigPlan(trays_per_rack=1, conversion=conversion))
    m = run.metrics["mig"]
    got = waits(run, traces)
    assert sorted(got[f"b{i}"] for i in range(8)) == [0] * 4 + [1_000] * 4
    assert m["instances_taken"] == {"3g.93gb on 3g.93gb": 9}
    assert m["stranded_slice_s"] == pytest.approx(16 * 1_000)
    # Busy: 4 x 3 slices for 2,000 s (two rounds) of the 4 x 7 slices over the 2,000 s window.
    assert m["slice_utilization"] == pytest.approx(12 * 2_000 / (28 * 2_000), abs=1e-4)
    # The mix is all 3g: each GPU's 1g, 1g and 2g, free throughout, are fragmentation (no expected request
    # fits them): 16 slices from the first submission to the end; a free 3g is none.
    assert m["avg_fragmentation_slices"] == 16.0


def test_whole_gpu_jobs_and_gangs_never_land_on_a_mig_tray(tmp_path):
    # 17 jobs of 4 GPUs fill the 17 whole-GPU trays; an 18th waits for one though the MIG tray is idle.
    rows = [(f"w{i}", 0, 1_000, 4) for i in range(18)]
    traces = simulator.load_traces([write_trace(tmp_path / "a.csv", rows)])
    run = simulator.simulate(traces, 1, "17+1", mig=MigPlan(trays_per_rack=1))
    assert sorted(waits(run, traces).values()) == [0] * 17 + [1_000]
    assert simulator.simulate(traces, 1, "17+1", mig=MigPlan(trays_per_rack=0)).metrics["avg_wait_s"] == 0
    # A 72-GPU gang needs every tray of the rack: with one in MIG mode the cluster has 68 GPUs to give whole.
    gang = simulator.load_traces([write_trace(tmp_path / "b.csv", [("g", 0, 100, 72)])])
    with pytest.raises(SimulationError, match="cluster's 68"):
        simulator.simulate(gang, 1, "17+1", mig=MigPlan(trays_per_rack=1))
    assert simulator.simulate(gang, 1, "17+1", mig=MigPlan(trays_per_rack=0)).metrics["avg_wait_s"] == 0


def test_the_conversion_is_stated_and_the_same_for_every_configuration(tmp_path):
    rows = [(f"j{i}", i, 100, 1) for i in range(400)] + [("four", 0, 100, 4)]
    traces = simulator.load_traces([write_trace(tmp_path / "a.csv", rows)])
    profiles = {p.name: p for p in MigPlan().profiles}
    half = SliceConversion(share=0.5)
    asked = [half.request(job, profiles) for job in traces[0].jobs]
    assert asked[-1] is None  # a 4-GPU job never asks for a slice
    chosen = [a for a in asked if a is not None]
    assert 160 < len(chosen) < 240  # about half of the 1-GPU jobs
    counts = {name: sum(a.name == name for a in chosen) for name in ("1g.23gb", "2g.47gb", "3g.93gb")}
    assert counts["1g.23gb"] > counts["2g.47gb"] > counts["3g.93gb"] > 0  # weights 5 / 3 / 2
    # A hash of department and job id, not a random draw: the same after jitter.
    jittered = simulator.jitter_traces(traces, 300, 7)
    assert [half.request(job, profiles) for job in jittered[0].jobs] == asked
    run = simulator.simulate(traces, 1, "17+1", mig=MigPlan(trays_per_rack=1, conversion=half))
    assert run.metrics["mig"]["slice_jobs"] == len(chosen)


@pytest.mark.parametrize(
    ("kwargs", "layout", "why"),
    [
        ({"trays_per_rack": 1}, "2x9", "must be whole partitions"),
        ({"trays_per_rack": 2}, "9+8+1", "must be whole partitions"),
        ({"trays_per_rack": 1, "rule": "worst-fit"}, "17+1", "slice rule 'worst-fit'"),
        (
            {"trays_per_rack": 1, "layout": GB200_LAYOUTS["all-1g.23gb"]},
            "17+1",
            "no instance a 2g.47gb, 3g.93gb request fits",
        ),
        ({"trays_per_rack": 1, "layout": MigLayout.parse("3g.93gb:3")}, "17+1", "9 compute"),
        ({"trays_per_rack": 1, "conversion": SliceConversion(share=1.5)}, "17+1", "slice share"),
        ({"trays_per_rack": 1, "conversion": SliceConversion(mix=(("9g.1gb", 1.0),))}, "17+1", "no profile"),
    ],
)
def test_a_plan_that_cannot_run_is_refused_saying_why(tmp_path, kwargs, layout, why):
    traces = simulator.load_traces([write_trace(tmp_path / "a.csv", SEVEN)])
    with pytest.raises(SimulationError, match=why):
        simulator.simulate(traces, 1, layout, mig=MigPlan(**kwargs))


def test_mig_is_not_replayed_with_re_carving_or_faults(tmp_path):
    traces = simulator.load_traces([write_trace(tmp_path / "a.csv", SEVEN)])
    with pytest.raises(SimulationError, match="re-carving"):
        simulator.simulate(traces, 1, "17+1", mig=MigPlan(), recarve=simulator.RecarvePlan())
    with pytest.raises(SimulationError, match="re-carving"):
        simulator.run(traces, 1, "17+1", ["rackplane"], mig=MigPlan(), recarve=simulator.RecarvePlan())


def test_the_command_replays_mig_and_says_how_jobs_became_slices(tmp_path):
    out = tmp_path / "results.json"
    stdout = StringIO()
    words = "--racks 1 --layout 9+8+1 --policy rackplane --mig-trays 1 --mig-rule fragmentation-aware"
    words += " --slice-mix 1g.23gb=1,2g.47gb=1 --workers 1"
    call_command("simulate", *HEADS, *words.split(), "--out", str(out), stdout=stdout, stderr=StringIO())
    results = json.loads(out.read_text())
    config = results["config"]["mig"]
    assert config["trays"] == 1 and config["rule"] == "fragmentation-aware"
    assert config["instances"] == ["2g.47gb@0:2", "1g.23gb@2:1", "1g.23gb@3:1", "3g.93gb@4:4"]
    assert config["slice_mix"] == {"1g.23gb": 1.0, "2g.47gb": 1.0}
    assert results["config"]["capacity_gpus"] == 68  # the MIG tray's GPUs are not given whole
    m = results["policies"]["rackplane"]["mig"]
    assert m["slice_jobs"] == m["converted_jobs"] > 0
    assert set(m["instances_taken"]) <= {
        "1g.23gb on 1g.23gb",
        "1g.23gb on 2g.47gb",
        "1g.23gb on 3g.93gb",
        "2g.47gb on 2g.47gb",
        "2g.47gb on 3g.93gb",
    }
    assert "--mig-trays 1" in results["config"]["command"]
    assert "MIG: 1 trays" in stdout.getvalue()


@pytest.mark.parametrize(
    ("words", "why"),
    [
        (["--layout", "2x9", "--mig-trays", "1"], "must be whole partitions"),
        (["--layout", "9+8+1", "--mig-trays", "1", "--slice-mix", "1g.23gb"], "PROFILE=WEIGHT"),
        (["--layout", "9+8+1", "--mig-trays", "1", "--slice-mix", "1g.23gb=-1"], "PROFILE=WEIGHT"),
        (["--layout", "9+8+1", "--mig-trays", "1", "--mig-layout", "1g.23gb:9"], "at most 7"),
        (["--layout", "9+8+1", "--mig-trays", "1", "--slice-share", "2"], "slice share"),
        (["--layout", "9+8+1", "--mig-trays", "-1"], "MIG trays per rack"),
        # The sizing rule's own words (`--mig-trays auto`).
        (["--mig-trays", "some"], "a whole number of trays per rack, or auto"),
        (["--mig-trays", "auto", "--mig-history=-1d"], "not a duration"),
        (["--mig-trays", "auto", "--mig-headroom", "0"], "headroom"),
    ],
)
def test_the_command_refuses_a_mig_plan_that_cannot_run(tmp_path, words, why):
    with pytest.raises(CommandError, match=why):
        call_command(
            "simulate",
            *HEADS,
            "--racks",
            "1",
            *words,
            "--out",
            str(tmp_path / "r.json"),
            stdout=StringIO(),
            stderr=StringIO(),
        )
    assert not (tmp_path / "r.json").exists()


def test_the_figures_say_whether_slurm_24_11_blocks_can_express_the_gang_partitions(tmp_path):
    # MIG trays belong to no block (P2P No): 8+8 in every rack is two blocks of 8, as Slurm 24.11 wants;
    # 9+7 is not (blocks are the base times a power of two).
    traces = simulator.load_traces([write_trace(tmp_path / "a.csv", SEVEN)])
    even = simulator.simulate(traces, 2, "8+8+2", mig=MigPlan(trays_per_rack=2, conversion=ONE_G))
    assert even.metrics["mig"]["slurm_24_11_blocks"] is None
    uneven = simulator.simulate(traces, 2, "9+7+2", mig=MigPlan(trays_per_rack=2, conversion=ONE_G))
    assert "9 nodes" in uneven.metrics["mig"]["slurm_24_11_blocks"]
    # As the portal renders them, the MIG trays keep their partition's block: the 2-tray blocks then make
    # 8+8+2 on two racks more than Slurm 24.11's topology.conf can express (25.05's topology.yaml can);
    # MIG trays inside 2x9 racks (on some racks only) keep blocks 24.11 takes.
    assert "would group blocks of racks" in even.metrics["mig"]["slurm_24_11_blocks_as_rendered"]
    alone = simulator.simulate(traces, 1, "8+8+2", mig=MigPlan(trays_per_rack=2, conversion=ONE_G))
    assert alone.metrics["mig"]["slurm_24_11_blocks_as_rendered"] is None
    some = MigPlan(trays_per_rack=0, rack_trays=((), (4, 4)), conversion=ONE_G)
    concentrated = simulator.simulate(traces, 2, "2x9", mig=some).metrics["mig"]
    assert concentrated["slurm_24_11_blocks"] is concentrated["slurm_24_11_blocks_as_rendered"] is None


# The history window (MigPlan.history_s): "big" and seven 1-GPU jobs come before it, one 1-GPU job after it.
BEFORE_AND_AFTER = [*SEVEN, ("late", 5_000, 100, 1)]


@pytest.mark.parametrize("trays", [0, 1])
def test_jobs_submitted_in_the_history_window_run_but_are_not_scored_under_any_policy(tmp_path, trays):
    traces = simulator.load_traces([write_trace(tmp_path / "a.csv", BEFORE_AND_AFTER)])
    plan = MigPlan(trays_per_rack=trays, conversion=ONE_G, history_s=1_000)
    results, runs = simulator.run(traces, 1, "17+1", simulator.POLICIES, mig=plan, workers=1)
    assert results["config"]["mig"]["history_s"] == 1_000
    for run in runs:
        m = run.metrics["mig"]
        assert run.metrics["jobs"] == 9  # every job ran
        assert (m["history_s"], m["scored_jobs"]) == (1_000, 1)
        assert m["one_gpu_or_smaller"]["jobs"] == 1 and m["one_gpu_or_smaller"]["avg_wait_s"] == 0
        assert m["multi_tray"]["jobs"] == 0  # "big" came before the window ends
        assert m["slices"]["jobs"] == (1 if trays else 0)
    # Without the window the seven early jobs count: whole GPUs make three of them wait 100 s.
    whole = simulator.simulate(traces, 1, "17+1", mig=MigPlan(trays_per_rack=0, conversion=ONE_G))
    assert whole.metrics["mig"]["scored_jobs"] == 9
    assert whole.metrics["mig"]["one_gpu_or_smaller"]["avg_wait_s"] == pytest.approx(300 / 8, abs=0.1)


def test_the_rule_sizes_mig_from_the_history_window_only(tmp_path):
    # In the first hour: ten 1-GPU jobs of 100 s (1,000 GPU-s) and a 4-GPU job of 1,000 s (4,000 GPU-s):
    # sub-GPU share 0.2; one rack, headroom 1: ceil(0.2 x 72) = 15 MIG GPUs, at most 8 a rack: 2 x 4, 8+8+2.
    history = [(f"s{i}", i, 100, 1) for i in range(10)] + [("four", 0, 1_000, 4)]
    traces = simulator.load_traces([write_trace(tmp_path / "a.csv", history)])
    plan, sizing = simulator.auto_mig_plan(traces, 1, MigPlan(conversion=ONE_G), 3_600, 1.0)
    assert sizing.share == pytest.approx(0.2)
    assert (sizing.mig_gpus, sizing.trays_per_rack, sizing.gpus_per_tray, sizing.layout) == (
        15,
        2,
        4,
        "8+8+2",
    )
    assert (plan.trays_per_rack, plan.gpus_per_tray, plan.history_s) == (2, 4, 3_600)
    # Jobs after the window do not change it, however many.
    later = history + [(f"late{i}", 4_000 + i, 10_000, 1) for i in range(50)]
    traces = simulator.load_traces([write_trace(tmp_path / "b.csv", later)])
    assert simulator.auto_mig_plan(traces, 1, MigPlan(conversion=ONE_G), 3_600, 1.0)[1] == sizing
    # No 1-GPU job asks for a slice: no MIG.
    plan, sizing = simulator.auto_mig_plan(traces, 1, MigPlan(conversion=SliceConversion(share=0)), 3_600)
    assert (sizing.mig_gpus, plan.trays_per_rack, sizing.layout) == (0, 0, "2x9")
    for history_s, headroom, why in ((-1, 1.0, "history window"), (1, 0.0, "headroom")):
        with pytest.raises(SimulationError, match=why):
            simulator.auto_mig_plan(traces, 1, MigPlan(), history_s, headroom)


def test_the_command_sizes_mig_by_the_rule_and_says_so(tmp_path):
    out = tmp_path / "results.json"
    stdout = StringIO()
    words = "--racks 1 --layout 2x9 --policy rackplane --mig-trays auto --mig-history 1d --workers 1"
    call_command("simulate", *HEADS, *words.split(), "--out", str(out), stdout=stdout, stderr=StringIO())
    results = json.loads(out.read_text())
    sizing = results["config"]["mig"]["sizing"]
    assert results["config"]["layout"] == sizing["layout"]  # the rule's layout replaces --layout
    assert results["config"]["mig"]["trays_per_rack"] == sizing["trays_per_rack"]
    assert results["config"]["mig"]["history_s"] == 86_400
    assert f"= {sizing['mig_gpus']} MIG GPUs" in stdout.getvalue()
    assert "--mig-trays auto" in results["config"]["command"]
    m = results["policies"]["rackplane"]["mig"]
    assert m["scored_jobs"] < results["policies"]["rackplane"]["jobs"]


def test_mig_trays_on_some_racks_only_keep_every_other_partition_whole(tmp_path):
    # Two racks 2x9; rack 2's last two trays in MIG mode (4 and 3 MIG GPUs: mig_sizing.concentrate), inside
    # its second partition. Four 9-tray gangs at t=0: three partitions are whole and take one each; rack 2's
    # second has 7 whole trays, so the fourth waits for the first to end (1,000 s). The 1-GPU jobs take
    # slices on rack 2's MIG GPUs at once; the tray with 3 MIG GPUs keeps one whole GPU.
    rows = [(f"g{i}", 0, 1_000, 36) for i in range(4)] + [(f"s{i}", 1, 100, 1) for i in range(7)]
    traces = simulator.load_traces([write_trace(tmp_path / "a.csv", rows)])
    plan = MigPlan(trays_per_rack=0, rack_trays=((), (4, 3)), conversion=ONE_G)
    run = simulator.simulate(traces, 2, "2x9", mig=plan)
    got = waits(run, traces)
    assert sorted(got[f"g{i}"] for i in range(4)) == [0, 0, 0, 1_000]
    assert all(got[f"s{i}"] == 0 for i in range(7))
    m = run.metrics["mig"]
    assert (m["mig_trays"], m["mig_gpus"], m["slice_jobs"]) == (2, 7, 7)
    # Slurm's blocks are the layout's (one per partition, the MIG trays inside theirs): 24.11 accepts them.
    assert m["slurm_24_11_blocks"] is None
    results, _ = simulator.run(traces, 2, "2x9", ["rackplane"], mig=plan, workers=1)
    config = results["config"]["mig"]
    assert (config["rack_trays"], config["trays"]) == ([[], [4, 3]], 2)
    cluster = simulator.build_cluster(2, (9, 9))
    trays = simulator.mig_tray_gpus(cluster, plan)
    assert [(cluster.tray_host[t], n) for t, n in trays.items()] == [("rack002-t17", 4), ("rack002-t18", 3)]


@pytest.mark.parametrize(
    ("rack_trays", "layout", "why"),
    [
        (((4,),), "2x9", "given for 1 racks, the cluster has 2"),
        (((), (4,) * 10), "2x9", "do not fit its last partition"),
        (((), (5,)), "2x9", "MIG GPUs must be 1-4"),
        (((), (0,)), "2x9", "MIG GPUs must be 1-4"),
    ],
)
def test_mig_trays_rack_by_rack_that_cannot_be_are_refused(tmp_path, rack_trays, layout, why):
    traces = simulator.load_traces([write_trace(tmp_path / "a.csv", SEVEN)])
    with pytest.raises(SimulationError, match=why):
        simulator.simulate(traces, 2, layout, mig=MigPlan(trays_per_rack=0, rack_trays=rack_trays))
    with pytest.raises(SimulationError, match="one of them"):
        simulator.simulate(traces, 2, "8+8+2", mig=MigPlan(trays_per_rack=2, rack_trays=((), (4,))))


def test_the_rule_concentrated_puts_the_sized_mig_gpus_on_the_fewest_racks(tmp_path):
    # As test_the_rule_sizes_mig_from_the_history_window_only: 15 MIG GPUs (ceil(0.2 x 72 x 1)) on 2 racks:
    # ceil(0.2 x 144) = 29 MIG GPUs = 8 trays (5 of 4 GPUs, 3 of 3), all on rack 2, inside its second
    # partition; rack 1 keeps every tray whole.
    history = [(f"s{i}", i, 100, 1) for i in range(10)] + [("four", 0, 1_000, 4)]
    traces = simulator.load_traces([write_trace(tmp_path / "a.csv", history)])
    plan, sizing = simulator.auto_mig_plan(
        traces, 2, MigPlan(conversion=ONE_G), 3_600, 1.0, placement="concentrated"
    )
    assert (sizing.mig_gpus, sizing.layout, sizing.trays_per_rack) == (29, "2x9", 0)
    assert plan.rack_trays == sizing.rack_trays == ((), (4, 4, 4, 4, 4, 3, 3, 3))
    run = simulator.simulate(traces, 2, sizing.layout, mig=plan)
    assert (run.metrics["mig"]["mig_gpus"], run.metrics["mig"]["mig_trays"]) == (29, 8)
    spread, _ = simulator.auto_mig_plan(
        traces, 2, MigPlan(conversion=ONE_G), 3_600, 1.0, placement="concentrated", cap=4
    )
    assert spread.rack_trays == ((4, 4, 4, 4), (4, 3, 3, 3))
    for kwargs, why in (({"placement": "anywhere"}, "placement 'anywhere'"), ({"cap": 10}, "1-9")):
        with pytest.raises(SimulationError, match=why):
            simulator.auto_mig_plan(traces, 2, MigPlan(conversion=ONE_G), 3_600, 1.0, **kwargs)


def test_guarantees_from_whole_gpu_work_leave_the_slice_work_out(tmp_path):
    # Department "small" runs only 1-GPU jobs (every one a slice request), "gangs" 8-GPU jobs, the same
    # GPU-hours each. On one rack 8+8+2 with its 2 MIG trays, the engine may give 64 GPUs whole. By all work
    # they split them 32 / 32; by whole-GPU work "gangs" is guaranteed all 64 ("small" runs on the MIG GPUs,
    # outside the guarantees). Without MIG trays the slice requests run whole and count as before.
    small = write_trace(tmp_path / "small.csv", [(f"s{i}", i, 800, 1) for i in range(8)])
    gangs = write_trace(tmp_path / "gangs.csv", [("g", 0, 800, 8)])
    traces = simulator.load_traces([small, gangs])
    hours = pytest.approx(16 / 9)
    assert simulator.guarantee_hours(traces) == {"small": hours, "gangs": hours}
    split = {}
    for whole_work in (False, True):
        for trays in (0, 2):
            plan = MigPlan(trays_per_rack=trays, conversion=ONE_G, whole_work_guarantees=whole_work)
            run = simulator.simulate(traces, 1, "8+8+2", mig=plan)
            split[whole_work, trays] = {
                name: d["guaranteed_gpus"] for name, d in run.metrics["departments"].items()
            }
    assert split[False, 2] == {"small": 32, "gangs": 32}
    assert split[True, 2] == {"small": 0, "gangs": 64}
    assert split[False, 0] == split[True, 0] == {"small": 36, "gangs": 36}
    plan = MigPlan(trays_per_rack=2, conversion=ONE_G, whole_work_guarantees=True)
    assert simulator.guarantee_hours(traces, plan) == {"small": 0.0, "gangs": hours}


def test_the_command_takes_the_placement_and_the_guarantee_split(tmp_path):
    out = tmp_path / "results.json"
    stdout = StringIO()
    words = (
        "--racks 2 --layout 2x9 --policy rackplane --mig-trays auto --mig-history 1d --workers 1 "
        "--mig-placement concentrated --mig-rack-trays 4 --mig-guarantees whole-work"
    )
    call_command("simulate", *HEADS, *words.split(), "--out", str(out), stdout=stdout, stderr=StringIO())
    results = json.loads(out.read_text())
    sizing = results["config"]["mig"]["sizing"]
    assert results["config"]["layout"] == "2x9" and sizing["trays_per_rack"] == 0
    assert results["config"]["mig"]["rack_trays"] == sizing["rack_trays"]
    assert all(len(rack) <= 4 for rack in sizing["rack_trays"])
    assert "every rack 2x9" in stdout.getvalue()
    assert results["config"]["mig"]["guarantees"] == "whole-work"
    command = results["config"]["command"]
    assert "--mig-placement concentrated --mig-rack-trays 4 --mig-guarantees whole-work" in command
