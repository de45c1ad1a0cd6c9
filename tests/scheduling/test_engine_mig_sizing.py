"""The MIG sizing rule (scheduling.engine.mig_sizing): MIG GPUs from a history's sub-GPU share of GPU-hours,
laid out per rack in a layout Slurm 24.11's blocks accept."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.blocks import BlockPartition, block_layout_error
from scheduling.engine.mig_sizing import (
    GPUS_PER_TRAY,
    LAYOUT_FOR_MIG_TRAYS,
    MAX_MIG_TRAYS,
    mig_gpus,
    size_mig,
    sub_gpu_share,
)
from scheduling.simulation_inputs import build_cluster, parse_layout
from scheduling.simulator import mig_trays

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


@given(hours, racks, headrooms)
def test_no_sub_gpu_demand_means_no_mig(every, n, headroom):
    sized = size_mig(0.0, every, n, headroom)
    assert (sized.mig_gpus, sized.trays_per_rack, sized.per_rack, sized.layout) == (0, 0, 0, "2x9")


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


@given(hours, hours, hours, racks, headrooms)
def test_more_sub_gpu_demand_never_means_fewer_mig_gpus(a, b, c, n, headroom):
    less, more, every = sorted((a, b, c))
    low, high = size_mig(less, every, n, headroom), size_mig(more, every, n, headroom)
    assert low.share <= high.share
    assert low.mig_gpus <= high.mig_gpus
    assert low.trays_per_rack <= high.trays_per_rack
    assert low.per_rack <= high.per_rack


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
