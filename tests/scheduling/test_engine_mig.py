"""MIG slices in the pure engine (scheduling.engine.mig): profiles as data, layouts checked and expanded into
placements, which free instance a slice request takes, GPU-equivalents."""

from __future__ import annotations

import itertools
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inventory.discovery import mig as discovery
from scheduling.engine import mig
from scheduling.engine.mig import (
    BEST_FIT,
    FRAGMENTATION_AWARE,
    GB200_LAYOUTS,
    GB200_PROFILES,
    FreeInstance,
    MigLayout,
    MigLayoutError,
    Placement,
    SliceFleet,
    SliceProfile,
)

PROFILES = mig.profile_table(GB200_PROFILES)


def names(placements) -> list[tuple[str, int, int]]:
    return [(p.profile, p.start, p.size) for p in placements]


# --- layouts ---------------------------------------------------------------------------------------------


def test_all_balanced_expands_to_the_placements_a_gb200_reports():
    # The lgi of tests/inventory/fixtures/mig (GB200's all-balanced): 2g at 0:2, 1g at 2:1 and 3:1, 3g at 4:4.
    # The 3g cannot sit at 0:4: the 2g and the two 1g would then need slices 4-7, where 1g has no slot 7.
    assert names(mig.expand(GB200_LAYOUTS["all-balanced"], PROFILES)) == [
        ("2g.47gb", 0, 2),
        ("1g.23gb", 2, 1),
        ("1g.23gb", 3, 1),
        ("3g.93gb", 4, 4),
    ]


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        ("all-1g.23gb", [("1g.23gb", s, 1) for s in range(7)]),
        ("all-1g.47gb", [("1g.47gb", s, 2) for s in (0, 2, 4, 6)]),
        ("all-2g.47gb", [("2g.47gb", s, 2) for s in (0, 2, 4)]),
        ("all-3g.93gb", [("3g.93gb", 0, 4), ("3g.93gb", 4, 4)]),
        ("all-7g.186gb", [("7g.186gb", 0, 8)]),
    ],
)
def test_the_named_gb200_layouts_expand(layout, expected):
    assert names(mig.expand(GB200_LAYOUTS[layout], PROFILES)) == expected


def test_a_4g_and_a_3g_share_a_gpu():
    assert names(mig.expand(MigLayout.parse("4g.93gb:1,3g.93gb:1"), PROFILES)) == [
        ("4g.93gb", 0, 4),
        ("3g.93gb", 4, 4),
    ]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("1g.23gb:8", "at most 7"),
        ("3g.93gb:2,1g.23gb:1", "7 compute and 9 memory slices"),
        ("2g.47gb:3,1g.23gb:2", "8 compute"),
        ("1g.23gb+me:2", "at most 1"),
        ("5g.100gb:1", "no profile '5g.100gb'"),
        ("1g.23gb:0", "no instance"),
    ],
)
def test_impossible_layouts_are_refused_saying_why(text, why):
    with pytest.raises(MigLayoutError, match=why):
        mig.expand(MigLayout.parse(text), PROFILES)


def test_a_layout_within_the_slice_budget_may_still_have_no_placement():
    # Within GB200's budgets every layout has placements (checked exhaustively when this was written); a
    # profile allowed at one slot only shows the search giving up.
    table = mig.profile_table([SliceProfile("pinned", 1, 1, 1, ((0, 1),), 2)])
    with pytest.raises(MigLayoutError, match="fit no set of allowed placements"):
        mig.expand(MigLayout.parse("pinned:2"), table)


def test_a_layout_is_written_as_mig_parted_writes_it():
    assert MigLayout.parse(" 1g.23gb:2, 2g.47gb, 3g.93gb:1 ").counts == (
        ("1g.23gb", 2),
        ("2g.47gb", 1),
        ("3g.93gb", 1),
    )
    with pytest.raises(MigLayoutError, match="PROFILE:COUNT"):
        MigLayout.parse("1g.23gb:two")


def test_placements_are_checked_for_overlap_and_allowed_slots():
    mig.check_placements([Placement("3g.93gb", 4, 4), Placement("2g.47gb", 0, 2)], PROFILES)
    with pytest.raises(MigLayoutError, match="overlaps memory slice 4"):
        mig.check_placements([Placement("3g.93gb", 4, 4), Placement("2g.47gb", 4, 2)], PROFILES)
    with pytest.raises(MigLayoutError, match="not a placement it allows"):
        mig.check_placements([Placement("1g.23gb", 7, 1)], PROFILES)  # 1g has slots 0-6 only
    with pytest.raises(MigLayoutError, match="not a placement it allows"):
        mig.check_placements([Placement("3g.93gb", 2, 4)], PROFILES)


def _brute_force_exists(counts: dict[str, int]) -> bool:
    """Whether some choice of allowed placements holds `counts` on one GPU (every combination tried)."""
    wanted = [PROFILES[n] for n, k in counts.items() for _ in range(k)]
    if not wanted or len(wanted) > mig.MAX_INSTANCES:
        return False
    if any(k > PROFILES[n].max_count for n, k in counts.items()):
        return False
    if sum(p.compute_slices for p in wanted) > mig.COMPUTE_SLICES:
        return False
    for choice in itertools.product(*(p.placements for p in wanted)):
        used = [s for start, size in choice for s in range(start, start + size)]
        if len(used) == len(set(used)):
            return True
    return False


layouts = st.dictionaries(
    st.sampled_from([p.name for p in GB200_PROFILES if p.name != "1g.23gb+me"]),
    st.integers(1, 4),
    min_size=1,
    max_size=3,
)


@settings(max_examples=150, deadline=None)
@given(layouts)
def test_expand_finds_a_layout_exactly_when_one_exists_and_it_never_overlaps(counts):
    layout = MigLayout("h", tuple(counts.items()))
    if not _brute_force_exists(counts):
        with pytest.raises(MigLayoutError):
            mig.expand(layout, PROFILES)
        return
    placements = mig.expand(layout, PROFILES)
    mig.check_placements(placements, PROFILES)  # allowed, no overlap, within the GPU
    assert sorted(p.profile for p in placements) == sorted(n for n, k in counts.items() for _ in range(k))
    slices = [s for p in placements for s in range(p.start, p.start + p.size)]
    assert len(slices) == len(set(slices))


# --- profiles --------------------------------------------------------------------------------------------


def test_smallest_fitting_takes_the_least_memory_then_the_fewest_slices():
    assert mig.smallest_fitting(GB200_PROFILES, 20_000).name == "1g.23gb"
    assert mig.smallest_fitting(GB200_PROFILES, 22_528).name == "1g.23gb"
    assert mig.smallest_fitting(GB200_PROFILES, 30_000).name == "1g.47gb"  # not the 2g of the same memory
    assert mig.smallest_fitting(GB200_PROFILES, 30_000, compute_slices=2).name == "2g.47gb"
    assert mig.smallest_fitting(GB200_PROFILES, 100_000).name == "7g.186gb"
    assert mig.smallest_fitting(GB200_PROFILES, 200_000) is None


def test_gpu_equivalents_are_the_share_of_compute_slices():
    assert mig.gpu_equivalents(PROFILES["1g.23gb"]) == Fraction(1, 7)
    assert mig.gpu_equivalents(PROFILES["3g.93gb"]) == Fraction(3, 7)
    assert mig.gpu_equivalents(PROFILES["7g.186gb"]) == 1
    balanced = mig.expand(GB200_LAYOUTS["all-balanced"], PROFILES)
    assert sum(mig.gpu_equivalents(PROFILES[p.profile]) for p in balanced) == 1


def test_a_profile_comes_from_data_not_from_its_name():
    # A profile named like a 1g with the figures of a 2g is a 2g: nothing is read from the name.
    odd = SliceProfile("1g.99gb", 2, 2, 46_592, ((0, 2), (2, 2), (4, 2)), 3)
    assert odd.can_host(PROFILES["2g.47gb"])
    assert mig.gpu_equivalents(odd) == Fraction(2, 7)
    with pytest.raises(MigLayoutError, match="placement 1:3"):
        SliceProfile("bad", 1, 2, 1, ((1, 3),), 1)


def test_profiles_from_what_a_node_reported(mig_fixture_profiles):
    profiles = {p.name: p for p in mig.profiles_from_discovery(mig_fixture_profiles)}
    assert profiles["3g.93gb"].compute_slices == 3
    assert profiles["3g.93gb"].placements == ((0, 4), (4, 4))
    assert profiles["1g.23gb"].memory_mib == 22_528
    assert profiles["2g.47gb"].max_count == 3
    assert names(mig.expand(GB200_LAYOUTS["all-balanced"], profiles)) == names(
        mig.expand(GB200_LAYOUTS["all-balanced"], PROFILES)
    )


@pytest.fixture
def mig_fixture_profiles():
    folder = Path(__file__).resolve().parent.parent / "inventory" / "fixtures" / "mig"
    reported = discovery.combine(
        (folder / "gb200_mig.xml").read_text(),
        {key: (folder / f"gb200_{key}.txt").read_text() for key in ("lgip", "lgipp", "lgi", "list")},
    )
    return next(gpu.profiles for gpu in reported.values() if gpu.profiles)


# --- choosing an instance --------------------------------------------------------------------------------


def free(*items: tuple[int, int, str]) -> list[FreeInstance]:
    return [FreeInstance(gpu, start, PROFILES[name], gpu) for gpu, start, name in items]


def test_best_fit_takes_the_smallest_instance_then_the_fullest_gpu():
    request = PROFILES["1g.23gb"]
    candidates = free((0, 4, "3g.93gb"), (1, 0, "2g.47gb"), (2, 6, "1g.23gb"), (3, 2, "1g.23gb"))
    # GPU 3 has only its 1g free, GPU 2 has more free (the gpu_free given): the 1g of the fuller GPU 3.
    chosen = mig.choose(candidates, request, BEST_FIT, gpu_free={0: 3, 1: 2, 2: 3, 3: 1})
    assert (chosen.gpu, chosen.start) == (3, 2)
    assert mig.choose(candidates[:2], request).profile.name == "2g.47gb"
    assert mig.choose(candidates, PROFILES["4g.93gb"]) is None  # nothing free is large enough


def test_the_fragmentation_aware_rule_keeps_what_the_mix_needs():
    # Two instance shapes that do not nest: "wide" has 2 compute slices and 1 memory slice, "deep" 1 and 2.
    wide = SliceProfile("wide", 2, 1, 10_000, ((0, 1),), 1)
    deep = SliceProfile("deep", 1, 2, 20_000, ((2, 2),), 1)
    small = SliceProfile("small", 1, 1, 10_000, ((4, 1),), 1)
    table = mig.profile_table([wide, deep, small])
    candidates = [FreeInstance(0, 0, wide, 0), FreeInstance(1, 2, deep, 1)]
    # Best-fit: the deep one wastes no compute slice. The expected mix is mostly deep requests, which only
    # "deep" fits: taking "wide" loses 2 x 0.1 of usable capacity, taking "deep" 1 x 1.0.
    mix = {"small": 1, "deep": 9}
    assert mig.choose(candidates, small, BEST_FIT).profile is deep
    assert mig.choose(candidates, small, FRAGMENTATION_AWARE, mix=mix, profiles=table).profile is wide
    # A mix of only small requests: both fit every request, the smaller loss is the 1-slice "deep".
    assert (
        mig.choose(candidates, small, FRAGMENTATION_AWARE, mix={"small": 1}, profiles=table).profile is deep
    )
    assert mig.fragmentation([wide, deep], mig.normalised_mix(mix, table), table) == pytest.approx(
        2 * 0.9 + 1 * 0.0
    )


def test_on_gb200_profiles_the_two_rules_agree():
    # Every GB200 profile hosts every smaller one, so the usable capacity a larger instance takes is never
    # smaller: the fragmentation-aware rule takes what best-fit takes (docs/simulator.md, measured).
    mix = {"1g.23gb": 5, "2g.47gb": 3, "3g.93gb": 2}
    fleet = free(
        *(
            (g, p.start, p.profile)
            for g in range(3)
            for p in mig.expand(GB200_LAYOUTS["all-balanced"], PROFILES)
        )
    )
    for request in ("1g.23gb", "2g.47gb", "3g.93gb"):
        for k in range(len(fleet)):
            subset = fleet[k:]
            assert mig.choose(subset, PROFILES[request], BEST_FIT) == mig.choose(
                subset, PROFILES[request], FRAGMENTATION_AWARE, mix=mix, profiles=PROFILES
            )


def test_a_rule_needs_to_be_known_and_the_aware_rule_its_mix():
    with pytest.raises(MigLayoutError, match="rule 'worst-fit'"):
        mig.choose([], PROFILES["1g.23gb"], "worst-fit")
    with pytest.raises(MigLayoutError, match="expected mix"):
        mig.choose(free((0, 0, "1g.23gb")), PROFILES["1g.23gb"], FRAGMENTATION_AWARE)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("place"), st.sampled_from(["1g.23gb", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb"])),
        st.tuples(st.just("release"), st.integers(0, 40)),
    ),
    max_size=60,
)


def _replay_fleet(layout: str, rule: str, ops) -> tuple[SliceFleet, list]:
    fleet = SliceFleet.build(3, GB200_LAYOUTS[layout], PROFILES)
    mix = {"1g.23gb": 5, "2g.47gb": 3, "3g.93gb": 2}
    decisions = []
    for n, (kind, value) in enumerate(ops):
        if kind == "release":
            held = sorted(fleet.where)
            if held:
                job = held[value % len(held)]
                fleet.release(job)
                decisions.append(("release", job))
            continue
        before = {(i.gpu, i.start) for i in fleet.free()}
        chosen = fleet.place(n, PROFILES[value], rule, mix)
        if chosen is None:
            # None only when no free instance can host it; nothing changed.
            assert not any(i.profile.can_host(PROFILES[value]) for i in fleet.free())
            assert {(i.gpu, i.start) for i in fleet.free()} == before
        else:
            assert (chosen.gpu, chosen.start) in before  # only a free instance
            assert chosen.profile.can_host(PROFILES[value])
        decisions.append((n, None if chosen is None else (chosen.gpu, chosen.start)))
        # Never more jobs than instances, one job per instance, the layout never changes (static MIG).
        holders = [h for per_gpu in fleet.holder for h in per_gpu if h is not None]
        assert len(holders) == len(set(holders)) == len(fleet.where)
        assert len(holders) <= sum(len(p) for p in fleet.instances)
        for g, placements in enumerate(fleet.instances):
            mig.check_placements(placements, PROFILES)
            held_slices = sum(
                PROFILES[p.profile].compute_slices
                for k, p in enumerate(placements)
                if fleet.holder[g][k] is not None
            )
            assert (
                fleet.gpu_free[g] == sum(PROFILES[p.profile].compute_slices for p in placements) - held_slices
            )
    return fleet, decisions


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(["all-balanced", "all-1g.23gb", "all-3g.93gb"]),
    st.sampled_from(mig.SLICE_RULES),
    operations,
)
def test_slice_placement_never_overlaps_never_oversubscribes_and_is_deterministic(layout, rule, ops):
    _, first = _replay_fleet(layout, rule, ops)
    _, second = _replay_fleet(layout, rule, ops)
    assert first == second


def test_best_fit_packs_seven_1g_jobs_onto_one_gpu():
    fleet = SliceFleet.build(4, GB200_LAYOUTS["all-1g.23gb"], PROFILES)
    chosen = [fleet.place(job, PROFILES["1g.23gb"]) for job in range(7)]
    assert {c.gpu for c in chosen} == {0}
    assert fleet.gpu_free == [0, 7, 7, 7]
    assert fleet.place(7, PROFILES["1g.23gb"]).gpu == 1
    fleet.release(3)
    assert fleet.place(8, PROFILES["1g.23gb"]).gpu == 0  # back onto the fuller GPU
    with pytest.raises(MigLayoutError, match="already holds"):
        fleet.place(8, PROFILES["1g.23gb"])
