"""The pure rules of NVLink partition plans (inventory.planning): no database."""

import pytest

from core.hardware import DEFAULT_CLIQUE_ID
from inventory.planning import Level, PlannedPartition, TrayInfo, check_plan, parse_ranges, preset_layout


def rack(partition="default", **overrides) -> list[TrayInfo]:
    trays = [TrayInfo(slot=s, hostname=f"gb-r01-t{s:02d}", partition=partition) for s in range(1, 19)]
    for slot, changes in overrides.items():
        index = int(slot[1:]) - 1
        trays[index] = TrayInfo(**{**trays[index].__dict__, **changes})
    return trays


def messages(check, level=None) -> list[str]:
    return [f.message for f in check.findings if level is None or f.level == level]


@pytest.mark.parametrize(
    "preset, sizes", [("1x18", [18]), ("2x9", [9, 9]), ("3x6", [6] * 3), ("6x3", [3] * 6), ("9x2", [2] * 9)]
)
def test_presets_cut_the_rack_into_equal_runs_of_trays(preset, sizes):
    layout = preset_layout(preset)
    assert [len(p.slots) for p in layout] == sizes
    assert [s for p in layout for s in p.slots] == list(range(1, 19))


def test_a_single_left_out_tray_is_named_in_the_singular():
    check = check_plan("gb-r01", rack(), preset_layout("1x18", leave_out=[7]))
    assert (
        "Tray 7 is left out: it will be in no NVLink partition and get no work until a later plan "
        "takes it back." in messages(check)
    )


def test_presets_can_leave_trays_out():
    layout = preset_layout("2x9", leave_out=[7, 12])
    assert layout[0].slots == (1, 2, 3, 4, 5, 6, 8, 9) and 12 not in layout[1].slots


def test_unknown_preset_and_bad_ranges_are_refused_in_plain_words():
    with pytest.raises(ValueError, match="presets are 1x18"):
        preset_layout("4x4")
    assert parse_ranges("1-3, 7,9-10") == (1, 2, 3, 7, 9, 10)
    with pytest.raises(ValueError, match="runs backwards"):
        parse_ranges("9-3")
    with pytest.raises(ValueError, match="not a tray number"):
        parse_ranges("a-b")


def test_a_valid_2x9_plan_numbers_cliques_and_lists_every_tray_change():
    check = check_plan("gb-r01", rack(), preset_layout("2x9"))
    assert check.ok, messages(check)
    assert check.clique_ids == {"p1": 1, "p2": 2}
    assert (
        len(check.changes) == 18 and check.changes[0].before == "default" and check.changes[0].after == "p1"
    )
    assert messages(check, Level.OK) == [
        "gb-r01: p1 9 trays, p2 9 trays; no overlaps, names unique, Slurm block sizes valid."
    ]


def test_one_partition_over_the_whole_rack_is_the_default_partition():
    check = check_plan("gb-r01", rack(partition="p1"), [PlannedPartition("default", tuple(range(1, 19)))])
    assert check.clique_ids == {"default": DEFAULT_CLIQUE_ID}


def test_overlaps_unknown_trays_and_duplicate_names_are_errors():
    check = check_plan(
        "gb-r01",
        rack(),
        [PlannedPartition("p1", (1, 2, 3)), PlannedPartition("p1", (3, 4)), PlannedPartition("P 2", (19,))],
    )
    errors = messages(check, Level.ERROR)
    assert "The name p1 is used by more than one partition: names must be unique." in errors
    assert "Tray 3 (gb-r01-t03) is in both p1 and p1: partitions may not overlap." in errors
    assert any("names tray 19, which gb-r01 does not have (it has trays 1-18)" in e for e in errors)
    assert any("'P 2' is not a usable partition name" in e for e in errors)
    assert not check.ok


def test_left_out_and_unhealthy_trays_are_warnings():
    trays = rack(t05={"state": "drain"}, t06={"healthy_gpus": 3}, t07={"problems": ("GPU 1 in progress",)})
    check = check_plan("gb-r01", trays, [PlannedPartition("p1", tuple(range(1, 10)))])
    warnings = messages(check, Level.WARNING)
    assert (
        "Trays 10-18 are left out: they will be in no NVLink partition and get no work until a later plan "
        "takes them back." in warnings
    )
    assert any("Tray 5 (gb-r01-t05) is in p1 although it is drain" in w for w in warnings)
    assert any("1 of its GPUs is unhealthy" in w for w in warnings)
    assert any("its fabric reports problems" in w for w in warnings)
    assert check.ok


def test_trays_with_mig_gpus_in_a_multi_tray_partition_are_one_warning_and_alone_none():
    trays = rack(t03={"mig_gpus": 2}, t05={"mig_gpus": 1}, t12={"mig_gpus": 1})
    layout = [PlannedPartition("p1", tuple(range(1, 10))), PlannedPartition("solo", (12,))]
    check = check_plan("gb-r01", trays, layout)
    warnings = [w for w in messages(check, Level.WARNING) if "MIG" in w]
    assert warnings == [
        "p1 holds trays 3 (gb-r01-t03, 2 GPUs) and 5 (gb-r01-t05, 1 GPU) in MIG mode. MIG instances have "
        "no NVLink peer-to-peer (every MIG profile reports P2P No), so while MIG is on, jobs spanning trays "
        "in p1 use only its other 7 trays; the other GPUs of those trays still take jobs of one tray. Turn "
        "MIG off on them (the MIG layout all-disabled on the tray page) to give p1 all its trays."
    ]
    assert check.ok  # a warning: the rest of the partition still serves gangs


def test_a_tray_given_a_mig_layout_is_named_with_it_before_its_gpus_report_mig():
    trays = rack(t04={"mig_gpus": 4, "mig_layout": "all-1g.23gb"})
    check = check_plan("gb-r01", trays, preset_layout("2x9"))
    [warning] = [w for w in messages(check, Level.WARNING) if "MIG" in w]
    assert warning.startswith("p1 holds tray 4 (gb-r01-t04, 4 GPUs, layout all-1g.23gb) in MIG mode.")
    assert "still take jobs of one tray" not in warning  # a layout takes every GPU of the tray


def test_running_work_on_a_changing_tray_refuses_the_plan_unless_drained_first():
    trays = rack(t03={"running_jobs": ("train-7",)})
    refused = check_plan("gb-r01", trays, preset_layout("2x9"))
    assert not refused.ok
    assert (
        "Tray 3 (gb-r01-t03) runs train-7 and would change partition: choose 'drain first' or wait for "
        "the work to finish." in messages(refused)
    )
    drained = check_plan("gb-r01", trays, preset_layout("2x9"), drain=True)
    assert drained.ok and [c.slot for c in drained.busy_trays] == [3]


def test_trays_whose_partition_keeps_its_members_do_not_change():
    trays = [TrayInfo(s, f"h{s}", partition="p1" if s <= 9 else "p2") for s in range(1, 19)]
    layout = [
        PlannedPartition("p1", tuple(range(1, 10))),
        PlannedPartition("p2", (10, 11, 12)),
        PlannedPartition("p3", tuple(range(13, 19))),
    ]
    check = check_plan("gb-r01", trays, layout)
    assert [c.slot for c in check.changes] == list(range(10, 19))  # p2 shrank: its trays change too


def test_the_scheduler_block_rule_is_asked_and_its_reason_shown():
    seen = {}

    def check_blocks(planned):
        seen.update(planned)
        return "Slurm 24.11 cannot express NVLink partition p1"

    check = check_plan("gb-r01", rack(), preset_layout("3x6"), check_blocks=check_blocks)
    assert seen["p1"] == tuple(f"gb-r01-t{s:02d}" for s in range(1, 7))
    assert "Slurm 24.11 cannot express NVLink partition p1" in messages(check, Level.ERROR)


def test_departments_must_exist():
    layout = [
        PlannedPartition("p1", tuple(range(1, 10)), department="vision"),
        PlannedPartition("p2", tuple(range(10, 19))),
    ]
    assert "Partition p1 is given to 'vision', which is not a department." in messages(
        check_plan("gb-r01", rack(), layout)
    )
    assert check_plan("gb-r01", rack(), layout, departments=["vision"]).ok


def test_findings_are_grouped_per_job_one_finding_listing_its_trays():
    # One job on all 18 trays (not 18 near-identical boxes for one job): one finding, every tray named.
    trays = rack(**{f"t{s:02d}": {"running_jobs": ("train-big",)} for s in range(1, 19)})
    trays[0] = TrayInfo(1, "gb-r01-t01", partition="default", running_jobs=("train-big", "probe-1"))
    refused = check_plan("gb-r01", trays, preset_layout("2x9"))
    errors = messages(refused, Level.ERROR)
    big = [m for m in errors if "train-big" in m]
    assert len(big) == 1
    assert big[0].startswith("Trays 1-18 (gb-r01-t01, gb-r01-t02,") and "gb-r01-t18) run train-big" in big[0]
    assert [m for m in errors if "probe-1" in m] == [
        "Tray 1 (gb-r01-t01) runs probe-1 and would change partition: choose 'drain first' or wait for the "
        "work to finish."
    ]
    drained = check_plan("gb-r01", trays, preset_layout("2x9"), drain=True)
    assert drained.ok and len([m for m in messages(drained, Level.WARNING) if "will be drained" in m]) == 2


def test_a_busy_rack_gets_one_summary_with_when_a_drain_first_plan_applies():
    busy = {
        f"t{slot:02d}": {"running_jobs": (f"job-{slot}",), "work_ends_in_s": 600.0 * slot}
        for slot in range(1, 8)
    }
    trays = rack(**busy)
    refused = check_plan("gb-r01", trays, preset_layout("2x9"))
    errors = [f for f in refused.findings if f.level == Level.ERROR and "jobs run on" in f.message]
    assert len(errors) == 1 and not refused.ok
    assert errors[0].message == (
        "7 jobs run on trays 1-7, which would change partition (job-1, job-2, job-3, job-4, job-5 and 2 "
        "more): choose 'drain first' or wait for the work to finish. Drained first, the plan applies once "
        "they end: within about 70 min at the latest, when the last reaches its time limit."
    )
    assert errors[0].job == "job-1"  # one "drain first" beside the summary
    drained = check_plan("gb-r01", trays, preset_layout("2x9"), drain=True)
    [warning] = [f for f in drained.findings if "jobs run on" in f.message]
    assert warning.level == Level.WARNING and warning.message.endswith(
        "when the last reaches its time limit."
    )
    # Two jobs keep a finding each, naming their trays.
    two = check_plan(
        "gb-r01", rack(t03={"running_jobs": ("a",)}, t04={"running_jobs": ("b",)}), preset_layout("2x9")
    )
    assert len([f for f in two.findings if f.level == Level.ERROR and f.job]) == 2
