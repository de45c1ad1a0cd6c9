"""MIG layouts from reported profiles (inventory.mig_layouts): the catalogue, placement checks and the
mig-parted configuration they render to. Profiles come from the GB200 fixtures (fixtures/mig/README.md)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from inventory import mig_layouts
from inventory.discovery.mig import MEMORY_SLICES, combine
from inventory.mig_layouts import LayoutError, catalogue, find, layout, mig_parted_config, place

FIXTURES = Path(__file__).parent / "fixtures" / "mig"
OUTPUTS = {key: (FIXTURES / f"gb200_{key}.txt").read_text() for key in ("lgip", "lgipp", "lgi", "list")}
PROFILES = next(
    g.profiles for g in combine((FIXTURES / "gb200_mig.xml").read_text(), OUTPUTS).values() if g.profiles
)
NAMES = sorted(p.name for p in PROFILES)
# mig-parted's file for trays given all-balanced (tests/integrations/kubernetes/test_mig_layouts.py reads it
# back from the API server).
BALANCED_CONFIG = {
    "version": "v1",
    "mig-configs": {
        "all-balanced": [
            {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.93gb": 1, "2g.47gb": 1, "1g.23gb": 2}}
        ],
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
    },
}


def test_the_catalogue_is_mig_parteds_defaults_for_the_profiles_gb200_reported():
    layouts = {item.name: item.counts for item in catalogue(PROFILES)}
    assert layouts == {
        "all-disabled": {},
        "all-balanced": {"3g.93gb": 1, "2g.47gb": 1, "1g.23gb": 2},
        "all-1g.23gb": {"1g.23gb": 7},
        "all-1g.47gb": {"1g.47gb": 4},
        "all-2g.47gb": {"2g.47gb": 3},
        "all-3g.93gb": {"3g.93gb": 2},
        "all-4g.93gb": {"4g.93gb": 1},
        "all-7g.186gb": {"7g.186gb": 1},
    }
    # The media-extension profile (one per GPU, for video work) gets no all- layout of its own.
    assert any(name.endswith("+me") for name in NAMES)
    assert not any(name.endswith("+me") for name in layouts)


def test_names_follow_what_the_driver_printed_never_a_fixed_table():
    renamed = [replace(p, name=p.name.replace("1g.23gb", "1g.24gb")) for p in PROFILES]
    layouts = {item.name: item.counts for item in catalogue(renamed)}
    assert layouts["all-1g.24gb"] == {"1g.24gb": 7}
    assert layouts["all-balanced"]["1g.24gb"] == 2
    assert "all-1g.23gb" not in layouts


@pytest.mark.parametrize(
    "devices, why",
    [
        # 7 compute slices, but the 4g takes 0:4 and 1g.47gb (two memory slices) starts only at 0, 2, 4 or 6.
        ({"4g.93gb": 1, "1g.47gb": 3}, "cannot be placed together"),
        ({"1g.23gb": 8}, "at most 7"),
        ({"7g.186gb": 1, "1g.23gb": 1}, "compute slices"),
        ({"9g.999gb": 1}, "not a profile these GPUs offer"),
        ({"1g.23gb": -1}, "whole number"),
        ({"1g.23gb": True}, "whole number"),
    ],
)
def test_impossible_layouts_are_refused_in_words(devices, why):
    with pytest.raises(LayoutError, match=why):
        place(devices, PROFILES)


def test_placements_decide_not_counts():
    # Two 3g instances take 0:4 and 4:4; one 1g more has nowhere to go although only 7 compute slices...
    with pytest.raises(LayoutError):
        place({"3g.93gb": 2, "1g.23gb": 1}, PROFILES)
    # ...and the balanced layout fits: 3g at 4:4, 2g at 0:2, two 1g at 2 and 3.
    assert place({"3g.93gb": 1, "2g.47gb": 1, "1g.23gb": 2}, PROFILES) == [
        ("2g.47gb", 0, 2),
        ("1g.23gb", 2, 1),
        ("1g.23gb", 3, 1),
        ("3g.93gb", 4, 4),
    ]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(NAMES), st.integers(min_value=0, max_value=8), max_size=4))
def test_any_request_is_placed_without_overlap_within_the_driver_rules_or_refused(devices):
    by_name = {p.name: p for p in PROFILES}
    try:
        placed = place(devices, PROFILES)
    except LayoutError as error:
        assert str(error)
        return
    assert sorted(name for name, _, _ in placed) == sorted(n for n, c in devices.items() for _ in range(c))
    used = [0] * MEMORY_SLICES
    for name, start, size in placed:
        assert (start, size) in by_name[name].placements
        for slot in range(start, start + size):
            used[slot] += 1
    assert max(used, default=0) <= 1
    assert sum(mig_layouts.compute_slices(name) for name, _, _ in placed) <= mig_layouts.COMPUTE_SLICES


def test_find_refuses_a_name_the_catalogue_has_not():
    assert find("all-balanced", PROFILES).per_gpu() == 4
    with pytest.raises(LayoutError, match="all-balanced"):
        find("all-3g.95gb", PROFILES)  # an old GB200 name the driver no longer prints


def test_gpu_equivalents_count_compute_slices_out_of_seven():
    assert mig_layouts.gpu_equivalents("1g.23gb") == pytest.approx(1 / 7)
    assert mig_layouts.gpu_equivalents("7g.186gb") == 1
    assert find("all-balanced", PROFILES).gpu_equivalents() == pytest.approx(1)
    assert find("all-1g.47gb", PROFILES).gpu_equivalents() == pytest.approx(4 / 7)
    with pytest.raises(LayoutError):
        mig_layouts.compute_slices("8g.1gb")


def test_mig_parted_config_is_version_v1_with_all_disabled_always():
    config = mig_parted_config([find("all-balanced", PROFILES), find("all-balanced", PROFILES)])
    assert config == BALANCED_CONFIG
    assert yaml.safe_load(yaml.safe_dump(config)) == config


def test_two_layouts_of_one_name_that_differ_are_refused():
    other = layout("all-balanced", {"1g.35gb": 2, "2g.70gb": 1, "3g.139gb": 1})  # a GB300's
    with pytest.raises(LayoutError, match="two different layouts are named all-balanced"):
        mig_parted_config([find("all-balanced", PROFILES), other])


@pytest.mark.parametrize("name", ["", "All-Balanced", "all balanced", "-x", "a" * 64, "all-1g\n"])
def test_a_layout_name_must_be_a_label_value(name):
    with pytest.raises(LayoutError, match="not a layout name"):
        layout(name, {})
