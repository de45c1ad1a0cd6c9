"""The MIG sizing rule (scheduling.engine.mig_sizing): MIG GPUs from a history's sub-GPU share of GPU-hours,
laid out per rack in a layout Slurm 24.11's blocks accept."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.blocks import BlockPartition, block_layout_error
from scheduling.engine.mig_sizing import (
    CONCENTRATED,
    CONCENTRATED_LAYOUT,
    GPUS_PER_TRAY,
    LAYOUT_FOR_MIG_TRAYS,
    MAX_MIG_TRAYS,
    MIG_PARTITION_TRAYS,
    concentrate,
    mig_gpus,
    size_mig,
    sub_gpu_share,
)
from scheduling.simulation_inputs import build_cluster, parse_layout
from scheduling.simulator import MigPlan, mig_tray_gpus, mig_trays

# No deadline: the rule is pure and fast, but on a loaded shared machine an example took 322 ms (> 200 ms).
hours = st.floats(min_value=0, max_value=1e7, allow_nan=False)
racks = st.integers(min_value=1, max_value=64)
headrooms = st.floats(min_value=0.1, max_value=10)


def test_the_tuning_half_worked_by_hand():
    # 6.63% of the GPU-hours were 1-GPU jobs; 4 racks = 288 GPUs; headroom 1.5: ceil(28.65) = 29 MIG GPUs,
    # ceil(29 / 4) = 8 per rack: 2 MIG trays of 4 (8+8+2). Headroom 1: ceil(19.1) = 20, 5 per rack: 2 x 3.
    assert size_mig(6.63, 100, 4, 1.5) == size_mig(6.63, 100, 4, 1.5)
    sized = size_mig(6.63, 100, 4, 1.5)
    assert (sized.mig_gpus, sized.trays_per_rack, sized.gpus_per_tray, sized.layout) == (29, 2, 4, "8+8+2")
    sized = size_mig(6.63, 100, 4, 1.0)
    assert (sized.mig_gpus, sized.trays_per_rack, sized.gpus_per_tray, sized.layout) == (20, 2, 3, "8+8+2")
    # 1-4 MIG GPUs a rack fit one MIG tray (17+1).
    sized = size_mig(1, 100, 2, 1.0)  # ceil(0.01 x 144) = 2: 1 a rack
    assert (sized.mig_gpus, sized.trays_per_rack, sized.gpus_per_tray, sized.layout) == (2, 1, 1, "17+1")


@settings(deadline=None)
@given(hours, racks, headrooms)
def test_no_sub_gpu_demand_means_no_mig(every, n, headroom):
    sized = size_mig(0.0, every, n, headroom)
    assert (sized.mig_gpus, sized.trays_per_rack, sized.per_rack, sized.layout) == (0, 0, 0, "2x9")


@settings(deadline=None)
@given(hours, hours, racks, headrooms)
def test_never_more_mig_gpus_than_the_fleet_nor_than_its_mig_trays_hold(a, b, n, headroom):
    sub, every = sorted((a, b))
    sized = size_mig(sub, every, n, headroom)
    assert 0 <= sized.mig_gpus <= n * 18 * GPUS_PER_TRAY
    assert 0 <= sized.trays_per_rack <= MAX_MIG_TRAYS
    assert 1 <= sized.gpus_per_tray <= GPUS_PER_TRAY
    assert sized.per_rack <= MAX_MIG_TRAYS * GPUS_PER_TRAY
    # What the racks hold covers the rule's number unless the trays' cap bites.
    assert n * sized.per_rack >= min(sized.mig_gpus, n * MAX_MIG_TRAYS * GPUS_PER_TRAY)
    # ...with less than one MIG tray's GPUs to spare per rack (never a whole tray more than needed).
    assert sized.per_rack - math.ceil(sized.mig_gpus / n) < GPUS_PER_TRAY


@settings(deadline=None)
@given(hours, hours, hours, racks, headrooms)
def test_more_sub_gpu_demand_never_means_fewer_mig_gpus(a, b, c, n, headroom):
    less, more, every = sorted((a, b, c))
    low, high = size_mig(less, every, n, headroom), size_mig(more, every, n, headroom)
    assert low.share <= high.share
    assert low.mig_gpus <= high.mig_gpus
    assert low.trays_per_rack <= high.trays_per_rack
    assert low.per_rack <= high.per_rack


@settings(deadline=None)
@given(st.floats(min_value=0, max_value=1), st.integers(min_value=0, max_value=10_000), headrooms, headrooms)
def test_a_larger_headroom_never_means_fewer(share, fleet, h1, h2):
    low, high = sorted((h1, h2))
    assert mig_gpus(share, fleet, low) <= mig_gpus(share, fleet, high) <= fleet


@pytest.mark.parametrize("trays", sorted(LAYOUT_FOR_MIG_TRAYS))
@pytest.mark.parametrize("rack_count", [1, 2, 4, 5])
def test_every_layout_the_rule_picks_has_its_mig_trays_whole_and_slurm_24_11_blocks_for_the_rest(
    trays, rack_count
):
    cluster = build_cluster(rack_count, parse_layout(LAYOUT_FOR_MIG_TRAYS[trays]))
    chosen = set(mig_trays(cluster, trays))  # refuses a layout whose last trays are not whole partitions
    assert len(chosen) == trays * rack_count
    gangs = [
        BlockPartition(cluster.rack_name[cluster.part_rack[p]], cluster.part_name[p], len(own))
        for p, own in enumerate(cluster.part_trays)
        if own and not set(own) <= chosen
    ]
    assert block_layout_error(gangs) is None


@pytest.mark.parametrize(
    ("sub", "every"), [(-1, 10), (11, 10), (math.nan, 10), (1, math.inf), (1, -1)], ids=str
)
def test_impossible_gpu_hours_are_refused(sub, every):
    with pytest.raises(ValueError, match="GPU-hours"):
        sub_gpu_share(sub, every)


def test_no_jobs_in_the_window_is_no_share_and_bad_inputs_are_refused():
    assert sub_gpu_share(0, 0) == 0.0
    with pytest.raises(ValueError, match="rack"):
        size_mig(1, 2, 0)
    for share, fleet, headroom in ((1.5, 10, 1), (0.5, -1, 1), (0.5, 10, 0), (0.5, 10, math.nan)):
        with pytest.raises(ValueError):
            mig_gpus(share, fleet, headroom)


def test_concentrated_worked_by_hand():
    # The tuning half at headroom 1.5: 29 MIG GPUs = 8 trays (five of 4 GPUs, three of 3), all on the last
    # rack; at most 4 a rack: the last two racks, 4 trays each. The validation half: 19 GPUs = 5 trays.
    assert concentrate(29, 4) == ((), (), (), (4, 4, 4, 4, 4, 3, 3, 3))
    assert concentrate(29, 4, cap=4) == ((), (), (4, 4, 4, 4), (4, 3, 3, 3))
    assert concentrate(19, 2) == ((), (4, 4, 4, 4, 3))
    assert concentrate(0, 3) == ((), (), ())
    sized = size_mig(6.63, 100, 4, 1.5, CONCENTRATED)
    assert (sized.mig_gpus, sized.trays_per_rack, sized.layout) == (29, 0, CONCENTRATED_LAYOUT)
    assert (sized.rack_trays, sized.placed_gpus(4)) == (concentrate(29, 4), 29)
    assert size_mig(6.63, 100, 4, 1.5).placed_gpus(4) == 32  # per rack: 2 x 4 on each of the 4 racks
    with pytest.raises(ValueError, match="placement"):
        size_mig(1, 2, 1, 1.0, "everywhere")
    for gpus, n, cap in ((-1, 1, 9), (1, 0, 9), (1, 1, 0), (1, 1, 19)):
        with pytest.raises(ValueError):
            concentrate(gpus, n, cap)


@settings(deadline=None)
@given(hours, hours, racks, headrooms, st.integers(min_value=1, max_value=MIG_PARTITION_TRAYS))
def test_concentrated_never_more_mig_gpus_than_sized_on_the_fewest_racks(a, b, n, headroom, cap):
    sub, every = sorted((a, b))
    sized = size_mig(sub, every, n, headroom, CONCENTRATED, cap)
    placed = sized.rack_trays
    assert len(placed) == n
    # Never more MIG GPUs than the rule sized; all of them unless the cap leaves no room.
    assert sized.placed_gpus(n) == min(sized.mig_gpus, n * cap * GPUS_PER_TRAY)
    trays = [t for rack in placed for t in rack]
    assert all(1 <= t <= GPUS_PER_TRAY for t in trays)
    assert not trays or max(trays) - min(trays) <= 1  # spread evenly over the trays
    assert len(trays) == -(-sized.placed_gpus(n) // GPUS_PER_TRAY)  # no tray more than the GPUs need
    used = [len(rack) for rack in placed if rack]
    assert all(k <= cap for k in used)
    assert len(used) == -(-len(trays) // cap)  # the fewest racks that hold them...
    assert not used or max(used) - min(used) <= 1  # ...evenly
    assert all(placed[r] for r in range(n - len(used), n))  # the last racks


@settings(deadline=None)
@given(
    st.integers(min_value=0, max_value=5 * MIG_PARTITION_TRAYS * GPUS_PER_TRAY),
    st.integers(min_value=1, max_value=5),
    st.integers(min_value=1, max_value=MIG_PARTITION_TRAYS),
)
def test_concentrated_never_splits_a_partition_and_keeps_slurm_24_11_blocks(gpus, n, cap):
    # Every rack keeps the 2x9 layout (no partition shrinks below its 9 trays: the MIG trays stay inside the
    # rack's last partition, Slurm's block keeps them); the simulator places exactly those trays.
    placed = concentrate(gpus, n, cap)
    cluster = build_cluster(n, parse_layout(CONCENTRATED_LAYOUT))
    on = mig_tray_gpus(cluster, MigPlan(trays_per_rack=0, rack_trays=placed))
    assert sorted(on.values()) == sorted(t for rack in placed for t in rack)
    for t in on:
        rack = cluster.part_rack[cluster.tray_part[t]]
        assert cluster.tray_part[t] == cluster.rack_parts[rack][-1]
    blocks = [
        BlockPartition(cluster.rack_name[cluster.part_rack[p]], cluster.part_name[p], len(own))
        for p, own in enumerate(cluster.part_trays)
    ]
    assert {b.nodes for b in blocks} == {MIG_PARTITION_TRAYS}
    assert block_layout_error(blocks) is None
