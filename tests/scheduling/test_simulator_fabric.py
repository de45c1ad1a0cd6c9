"""The replay on a compute fabric (issue 33): the fabric given on the command line, the synthetic large-job
mix, the cross-unit slowdown, the topology-blind baseline and the fabric's figures."""

import json

import pytest
from django.core.management import CommandError

from scheduling import simulator
from scheduling.engine.placement import FIRST_FIT, RACKPLANE
from scheduling.simulation_fabric import LARGE_DURATION_S, LARGE_SIZES
from tests.scheduling.test_simulator import ITP, SPAN, simulate, write_trace

# Four racks 2x9 under two units of two racks (one spine group). A: one rack (72 GPUs) from t=0 for 10 h,
# placed on rack001 (the first of the racks with the fewest free trays that fit); B: 96 GPUs (24 trays, more
# than a rack) at t=10 for 1 h. With the fabric, B takes su-2 (rack003+rack004, the only unit with 24 free
# trays) and spans partitions only (1.5x): 5,400 s. Blind to it, B takes the largest free blocks first,
# rack002's two partitions and one of rack003's: it spans units too, 1.5 x 1.25 = 6,750 s.
FOUR_RACKS = "units=2,racks-per-unit=2,spines=1"
AB = [("A", 0, 36_000, 72), ("B", 10, 3600, 96)]


def _replay(tmp_path, policy=RACKPLANE, rows=AB, **options):
    traces = simulator.load_traces([write_trace(tmp_path / "t.csv", rows)])
    return simulator.simulate(traces, 4, "2x9", policy, fabric=FOUR_RACKS, **options).metrics


def test_a_job_that_fits_one_unit_runs_inside_one_and_the_figures_say_so(tmp_path):
    fabric = _replay(tmp_path)["fabric"]
    assert fabric["multi_rack"]["jobs"] == 1 and fabric["fitting_one_unit"]["jobs"] == 1
    assert fabric["fitting_in_one_unit"] == 1.0
    assert fabric["cross_unit_jobs"] == 0 and fabric["cross_spine_jobs"] == 0
    assert fabric["fitting_one_unit"]["avg_jct_s"] == 5400.0 - 10 + 10  # submitted at 10, ends at 5,410
    assert fabric["single_rack"]["jobs"] == 1


def test_the_topology_blind_baselines_cross_units_and_pay_the_cross_unit_slowdown(tmp_path):
    blind = _replay(tmp_path, fabric_blind=True)["fabric"]
    assert blind["fitting_in_one_unit"] == 0.0 and blind["cross_unit_jobs"] == 1
    assert blind["fitting_one_unit"]["avg_jct_s"] == 6750.0
    assert blind["cross_unit_slowdown_gpu_s"] == pytest.approx(0.25 * 1.5 * 3600 * 96)
    assert _replay(tmp_path, fabric_blind=True, cross_unit_slowdown=1.0)["fabric"]["fitting_one_unit"][
        "avg_jct_s"
    ] == pytest.approx(5400.0)
    first_fit = _replay(tmp_path, FIRST_FIT)["fabric"]
    assert first_fit["cross_unit_jobs"] == 1  # first-fit never reads the fabric: rack002 + rack003


def test_a_replay_without_a_fabric_has_no_fabric_figures(tmp_path):
    traces = simulator.load_traces([write_trace(tmp_path / "t.csv", AB)])
    assert "fabric" not in simulator.simulate(traces, 4, "2x9", RACKPLANE).metrics


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("units=2,racks-per-unit=2", "missing spines"),
        ("units=2,racks-per-unit=2,spines=1,units=2", "each of units, racks-per-unit, spines once"),
        ("units=3,racks-per-unit=1,spines=1", "3 units of 1 racks is not the 4 racks"),
        ("units=4,racks-per-unit=1,spines=3", "4 units do not split evenly over 3 spine groups"),
        ("units=two,racks-per-unit=2,spines=1", "units must be a whole number >= 1"),
        ("units=0,racks-per-unit=2,spines=1", "units must be a whole number >= 1"),
        ("", "give each of"),
    ],
)
def test_a_bad_fabric_is_refused_with_what_is_wrong(spec, words):
    with pytest.raises(simulator.SimulationError, match=words):
        simulator.parse_fabric(spec, 4)


def test_the_fabric_puts_racks_in_order_into_units_and_units_evenly_under_spines():
    fabric = simulator.parse_fabric("units=4,racks-per-unit=2,spines=2", 8)
    assert fabric.members("unit") == {
        "su-1": ["rack001", "rack002"],
        "su-2": ["rack003", "rack004"],
        "su-3": ["rack005", "rack006"],
        "su-4": ["rack007", "rack008"],
    }
    assert fabric.members("spine") == {
        "spine-1": ["rack001", "rack002", "rack003", "rack004"],
        "spine-2": ["rack005", "rack006", "rack007", "rack008"],
    }


def test_the_large_job_mix_is_the_stated_one_and_the_same_for_the_same_seed():
    traces = simulator.load_traces([ITP / "cluster03-head.csv"])
    mix = simulator.large_jobs(traces, 200, 7)
    assert mix == simulator.large_jobs(traces, 200, 7) and mix != simulator.large_jobs(traces, 200, 8)
    assert mix.department == simulator.LARGE_DEPARTMENT and len(mix.jobs) == 200
    sizes = {size for size, _ in LARGE_SIZES}
    first = min(j.submitted_at for j in traces[0].jobs)
    last = max(j.submitted_at for j in traces[0].jobs)
    for job in mix.jobs:
        assert job.gpus in sizes and job.gpus == job.trace_gpus
        assert LARGE_DURATION_S[0] <= job.duration_s <= LARGE_DURATION_S[1]
        assert first <= job.submitted_at <= last
    assert min(j.id for j in mix.jobs) > max(j.id for j in traces[0].jobs)
    assert {j.gpus for j in mix.jobs} == sizes  # 200 draws: every size
    with pytest.raises(simulator.SimulationError, match="at least one job"):
        simulator.large_jobs(traces, 0, 1)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_the_command_replays_on_a_fabric_with_the_mix_and_writes_the_figures(tmp_path):
    out, html = tmp_path / "r.json", tmp_path / "r.html"
    printed = simulate(
        "--trace", str(ITP / "cluster03-head.csv"), "--racks", "4", "--layout", "2x9",
        "--fabric", FOUR_RACKS, "--cross-unit-slowdown", "1.5", "--fabric-wait", "2h",
        "--large-jobs", "12", "--seed", "3", "--policy", "rackplane", "--policy", "first-fit",
        "--out", str(out), "--html", str(html),
    )  # fmt: skip
    results = json.loads(out.read_text())
    config = results["config"]
    assert (config["fabric"], config["cross_unit_slowdown"], config["fabric_wait_s"]) == (
        FOUR_RACKS,
        1.5,
        7200,
    )
    assert "--fabric units=2,racks-per-unit=2,spines=1 --cross-unit-slowdown 1.5" in config["command"]
    assert "--fabric-wait 2h" in config["command"] and "--large-jobs 12 --seed 3" in config["command"]
    for policy in (RACKPLANE, FIRST_FIT):
        fabric = results["policies"][policy]["fabric"]
        assert fabric["multi_rack"]["jobs"] == 12
        assert f"{policy}: 12 multi-rack jobs" in printed
    assert "The compute fabric" in html.read_text() and "jobs across scalable units (spine crossings)" in (
        html.read_text()
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fabric", "units=2"], "missing racks-per-unit, spines"),
        (["--fabric-wait", "1h"], "--fabric-wait and --fabric-blind go with --fabric"),
        (["--fabric", "units=1,racks-per-unit=1,spines=1", "--cross-unit-slowdown", "0.9"], "cross-unit"),
        (["--large-jobs", "-1"], "at least one job"),
    ],
)
def test_the_command_refuses_a_bad_fabric(tmp_path, args, message):
    trace = write_trace(tmp_path / "t.csv", SPAN)
    with pytest.raises(CommandError, match=message):
        simulate(
            "--trace", str(trace), "--racks", "1", "--layout", "2x9", "--out", str(tmp_path / "r.json"), *args
        )


# Four rack-sized jobs fill the four racks (each spans its rack's two partitions: 1.5x); A and C end at
# 4.5 h, one rack in each unit, B at 6 h; X (96 GPUs) is submitted at 10 s. Nothing could start it before
# 4.5 h; then it could start across units, and the fabric wait holds it from then (not from its submission,
# long past): with 30 min it spans units at 5 h (the replay wakes for it), with 2 h it takes su-1 when B ends.
HELD = [("A", 0, 3 * 3600, 72), ("B", 0, 4 * 3600, 72), ("C", 0, 3 * 3600, 72), ("D", 0, 10 * 3600, 72)]


@pytest.mark.parametrize(("wait", "starts_at", "inside"), [(1800.0, 5 * 3600, 0.0), (7200.0, 6 * 3600, 1.0)])
def test_the_fabric_wait_counts_from_when_the_job_could_first_start(tmp_path, wait, starts_at, inside):
    rows = [*HELD, ("X", 10, 3600, 96)]
    fabric = _replay(tmp_path, rows=rows, engine_options={"fabric_wait_s": wait})["fabric"]
    assert fabric["fitting_one_unit"]["avg_wait_s"] == starts_at - 10
    assert fabric["fitting_in_one_unit"] == inside and fabric["cross_unit_jobs"] == 1 - inside


# Unit packing (Options.fabric_packing). J2 (rack001 p1) and J0 (rack002 p2) end at 2 h, when J4 (9 trays)
# and J5 (4) arrive; J1 and J3 hold su-1's other two partitions until 10 h and 4 h. Best fit alone gives J4
# and J5 the free partitions of su-2 that never held work (first in the buckets: rack003's), so X (96 GPUs,
# 24 trays) finds 18 free trays in each unit at 4 h and spans them (1.5 x 1.25); packed into su-1, the fuller
# unit, they leave su-2 whole and X runs inside it (1.5).
PACKED = [
    ("J0", 3600, 3600, 8),
    ("J1", 200, 36000, 32),
    ("J2", 0, 7200, 32),
    ("J3", 200, 14400, 32),
    ("J4", 7200, 14400, 36),
    ("J5", 7200, 36000, 16),
    ("X", 14405, 3600, 96),
]


@pytest.mark.parametrize(("pack", "inside", "jct"), [(False, 0.0, 6751.0), (True, 1.0, 5400.0)])
def test_unit_packing_keeps_a_unit_whole_for_the_multi_rack_job(tmp_path, pack, inside, jct):
    options = {"fabric_wait_s": 1.0, "fabric_packing": pack}
    fabric = _replay(tmp_path, rows=PACKED, engine_options=options)["fabric"]
    assert fabric["fitting_in_one_unit"] == inside
    assert fabric["fitting_one_unit"]["avg_jct_s"] == jct


# The HELD trace with a 30-minute wait and a unit reserved after it (Options.fabric_unit_reservation_s): X is
# held at 4.5 h, its wait runs out at 5 h, then su-1 (A's rack free, B's rack busy) is reserved for it; with
# 30 min more it spans units at 5.5 h (the replay wakes for it), with 2 h it takes su-1 when B ends at 6 h.
@pytest.mark.parametrize(
    ("reserved", "starts_at", "inside"), [(1800.0, 5.5 * 3600, 0.0), (7200.0, 6 * 3600, 1.0)]
)
def test_a_unit_reserved_after_the_wait_is_bounded_too(tmp_path, reserved, starts_at, inside):
    options = {"fabric_wait_s": 1800.0, "fabric_unit_reservation_s": reserved}
    fabric = _replay(tmp_path, rows=[*HELD, ("X", 10, 3600, 96)], engine_options=options)["fabric"]
    assert fabric["fitting_one_unit"]["avg_wait_s"] == starts_at - 10
    assert fabric["fitting_in_one_unit"] == inside
