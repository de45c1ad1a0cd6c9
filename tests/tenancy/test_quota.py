"""Fair share and reclaim arithmetic (tenancy.quota): worked examples and properties.

Plain Python, no database: the module under test must not import Django.
"""

import subprocess
import sys
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenancy.quota import DepartmentQuota, FairShareResult, Reclaim, Share, fair_share


def dept(name, guaranteed, **kwargs):
    return DepartmentQuota(name=name, guaranteed=guaranteed, **kwargs)


def shares_of(result: FairShareResult) -> dict[str, int]:
    return {name: share.fair_share for name, share in result.shares.items()}


# --- worked examples ----------------------------------------------------------------------------------


def test_classic_runai_example():
    # In quota 30/10/20 = 60; surplus 40 split 2:1 between A and C (B's demand is met):
    # A 26.67 -> 26 + 1 (largest remainder), C 13.33 -> 13.
    result = fair_share(
        100,
        [
            dept("A", 30, weight=2, demand=80),
            dept("B", 30, demand=10),
            dept("C", 20, weight=1, demand=60),
        ],
    )
    assert result.shares == {
        "A": Share("A", fair_share=57, in_quota=30, over_quota=27, allocated=0, reclaimable=0, starved=30),
        "B": Share("B", fair_share=10, in_quota=10, over_quota=0, allocated=0, reclaimable=0, starved=10),
        "C": Share("C", fair_share=33, in_quota=20, over_quota=13, allocated=0, reclaimable=0, starved=20),
    }
    assert result.unallocated == 0
    assert result.capacity == 100
    # Nothing is held, so every GPU is free: the starved are served from free GPUs, no reclaim.
    assert result.reclaims == []


def test_priority_tier_takes_surplus_first_and_limit_redistributes_within_tier():
    # In quota 10 each, surplus 70. Tier 1 (A weight 1, C weight 3, C limit 40): C's 3/4 of 70 = 52.5
    # passes its room of 30, so C is capped at 30 and A takes the other 40. Tier 0 (B) sees nothing.
    result = fair_share(
        100,
        [
            dept("A", 10, demand=100, priority=1),
            dept("B", 10, demand=100, priority=0),
            dept("C", 10, demand=100, priority=1, weight=3, limit=40),
        ],
    )
    assert shares_of(result) == {"A": 50, "B": 10, "C": 40}
    assert result.shares["C"].over_quota == 30
    assert result.shares["B"].over_quota == 0
    assert result.unallocated == 0


def test_lower_tier_gets_what_higher_tier_cannot_use():
    result = fair_share(
        100, [dept("high", 0, demand=20, priority=5), dept("low", 0, demand=100, priority=0, weight=0.1)]
    )
    assert shares_of(result) == {"high": 20, "low": 80}


def test_limit_caps_borrowing_even_with_idle_gpus():
    result = fair_share(72, [dept("A", 8, demand=72, limit=16), dept("B", 8, demand=12)])
    assert shares_of(result) == {"A": 16, "B": 12}
    assert result.unallocated == 44


def test_limit_equal_to_guarantee_never_borrows():
    result = fair_share(72, [dept("A", 8, demand=72, limit=8, weight=5), dept("B", 0, demand=100)])
    assert shares_of(result) == {"A": 8, "B": 64}


def test_zero_weight_never_borrows():
    # In quota 10/10, surplus 30: A has weight 0, so only B borrows (up to its demand); 20 stay idle.
    result = fair_share(50, [dept("A", 10, demand=50, weight=0), dept("B", 10, demand=20)])
    assert shares_of(result) == {"A": 10, "B": 20}
    assert result.shares["A"].over_quota == 0
    assert result.unallocated == 20


def test_zero_weight_high_tier_does_not_block_lower_tier():
    result = fair_share(
        40, [dept("A", 0, demand=40, weight=0, priority=9), dept("B", 0, demand=40, priority=0)]
    )
    assert shares_of(result) == {"A": 0, "B": 40}


def test_no_limit_takes_whole_rack():
    result = fair_share(72, [dept("solo", 0, demand=1000)])
    assert shares_of(result) == {"solo": 72}
    assert result.shares["solo"].over_quota == 72


def test_demand_below_guarantee_lends_the_rest():
    result = fair_share(72, [dept("A", 40, demand=5), dept("B", 32, demand=100)])
    assert result.shares["A"] == Share("A", 5, 5, 0, 0, 0, 5)
    assert result.shares["B"].in_quota == 32
    assert result.shares["B"].over_quota == 35
    assert result.unallocated == 0


def test_no_demand_gets_nothing():
    result = fair_share(10, [dept("idle", 10, demand=0)])
    assert shares_of(result) == {"idle": 0}
    assert result.unallocated == 10


def test_capacity_below_guarantees_is_split_by_guarantee():
    # Asks 40/30/10 = 80 > 50. By guarantee 40:30:30 the quotas are 20/15/15, but C asks only 10, so C
    # gets 10 and A and B split 40 by 40:30 = 22.86/17.14 -> 22 + 1 (largest remainder), 17.
    result = fair_share(
        50, [dept("A", 40, demand=100), dept("B", 30, demand=100), dept("C", 30, demand=10, priority=9)]
    )
    assert {n: s.in_quota for n, s in result.shares.items()} == {"A": 23, "B": 17, "C": 10}
    assert all(s.over_quota == 0 for s in result.shares.values())
    assert result.unallocated == 0


def test_largest_remainder_ties_broken_by_name_not_listing_order():
    listed = [dept("beta", 0, demand=10), dept("alpha", 0, demand=10), dept("gamma", 0, demand=10)]
    result = fair_share(4, listed)
    # 4/3 each: floors 1/1/1, one GPU left, equal remainders -> alphabetically first.
    assert shares_of(result) == {"alpha": 2, "beta": 1, "gamma": 1}
    assert shares_of(fair_share(4, reversed(listed))) == shares_of(result)


def test_fractional_weights():
    result = fair_share(10, [dept("A", 0, demand=10, weight=0.5), dept("B", 0, demand=10, weight=1.5)])
    assert shares_of(result) == {"A": 3, "B": 7}  # 2.5 / 7.5: floors 2/7, equal remainders -> A by name


def test_empty_and_zero_capacity():
    assert fair_share(8, []) == FairShareResult(capacity=8, shares={}, reclaims=[], unallocated=8)
    result = fair_share(0, [dept("A", 4, demand=4, allocated=0)])
    assert shares_of(result) == {"A": 0}
    assert result.shares["A"].starved == 0


# --- reclaim examples ---------------------------------------------------------------------------------


def test_reclaim_uses_free_gpus_first():
    # A is owed 6 and holds 2 (starved 4); B holds 6 against a fair share of 4 (reclaimable 2).
    # 2 GPUs are free: A takes those first and reclaims only the other 2 from B.
    result = fair_share(10, [dept("A", 6, demand=6, allocated=2), dept("B", 4, demand=10, allocated=6)])
    assert result.shares["A"].starved == 4
    assert result.shares["B"].reclaimable == 2
    assert result.reclaims == [Reclaim("B", "A", 2)]


def test_no_reclaim_when_free_gpus_cover_the_starved():
    # B holds 6 over a lowered limit of 4 (reclaimable 2), but the 4 free GPUs cover A's 4.
    result = fair_share(
        12, [dept("A", 6, demand=6, allocated=2), dept("B", 2, demand=20, limit=4, allocated=6)]
    )
    assert result.shares["A"].starved == 4
    assert result.shares["B"].reclaimable == 2
    assert result.reclaims == []


def test_reclaim_takes_from_lowest_priority_donor_first():
    # S is owed 7 and holds nothing; nothing is free. High (priority 1) holds 10 against a limit of 5
    # (excess 5); low (priority 0) holds 20 against a fair share of 18 (excess 2). Low goes first even
    # though high has the larger excess.
    result = fair_share(
        30,
        [
            dept("S", 7, demand=7),
            dept("high", 0, demand=10, limit=5, priority=1, allocated=10),
            dept("low", 0, demand=20, priority=0, allocated=20),
        ],
    )
    assert shares_of(result) == {"S": 7, "high": 5, "low": 18}
    assert result.reclaims == [Reclaim("low", "S", 2), Reclaim("high", "S", 5)]


def test_reclaim_takes_largest_excess_first_then_name():
    # Free 7 of S's 8; the last GPU comes from X (excess 5) rather than Y (excess 1).
    result = fair_share(
        20, [dept("S", 8, demand=8), dept("X", 0, demand=3, allocated=8), dept("Y", 0, demand=4, allocated=5)]
    )
    assert (result.shares["X"].reclaimable, result.shares["Y"].reclaimable) == (5, 1)
    assert result.reclaims == [Reclaim("X", "S", 1)]
    # Equal excess (4 each, nothing free): by name, P drained before Q.
    result = fair_share(
        10, [dept("S", 6, demand=6), dept("Q", 0, demand=1, allocated=5), dept("P", 0, demand=1, allocated=5)]
    )
    assert (result.shares["P"].reclaimable, result.shares["Q"].reclaimable) == (4, 4)
    assert result.reclaims == [Reclaim("P", "S", 4), Reclaim("Q", "S", 2)]


def test_starved_served_highest_priority_first():
    # Both starved by 3; one free GPU goes to "urgent" (priority 2) first, then the donor's excess.
    result = fair_share(
        10,
        [
            dept("a-batch", 3, demand=3, priority=0),
            dept("urgent", 3, demand=3, priority=2),
            dept("borrower", 0, demand=4, allocated=9),
        ],
    )
    assert result.shares["borrower"].reclaimable == 5
    assert result.reclaims == [Reclaim("borrower", "urgent", 2), Reclaim("borrower", "a-batch", 3)]


def test_holdings_beyond_capacity_leave_nothing_free():
    # GPUs were drained under running work: holdings (12) exceed capacity (8); reclaims still restore A.
    result = fair_share(8, [dept("A", 4, demand=4, allocated=0), dept("B", 0, demand=12, allocated=12)])
    assert shares_of(result) == {"A": 4, "B": 4}
    assert result.reclaims == [Reclaim("B", "A", 4)]


# --- validation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"guaranteed": -1}, "guaranteed must not be negative"),
        ({"guaranteed": 1, "demand": -2}, "demand must not be negative"),
        ({"guaranteed": 1, "allocated": -1}, "allocated must not be negative"),
        ({"guaranteed": 8, "limit": 4}, r"limit \(4\) must not be below guaranteed \(8\)"),
        ({"guaranteed": 1, "limit": -1}, "limit must not be negative"),
        ({"guaranteed": 1, "weight": -0.5}, "weight must be a finite number >= 0"),
        ({"guaranteed": 1, "weight": float("nan")}, "weight must be a finite number >= 0"),
        ({"guaranteed": 1.5}, "guaranteed must be a whole number of GPUs"),
        ({"guaranteed": 1, "priority": "high"}, "priority must be an integer"),
    ],
)
def test_invalid_department_raises(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DepartmentQuota(name="A", **kwargs)


def test_empty_name_raises():
    with pytest.raises(ValueError, match="non-empty"):
        DepartmentQuota(name="", guaranteed=1)


def test_negative_capacity_raises():
    with pytest.raises(ValueError, match="capacity must not be negative"):
        fair_share(-1, [])


def test_duplicate_names_raise():
    with pytest.raises(ValueError, match="duplicate department names: A"):
        fair_share(10, [dept("A", 1), dept("B", 1), dept("A", 2)])


def test_module_has_no_django_import():
    code = "import sys, tenancy.quota; sys.exit(any(m.startswith('django') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# --- properties ---------------------------------------------------------------------------------------

NAMES = ["ai", "bio", "chem", "data", "eng", "fin", "geo", "hpc"]


@st.composite
def departments(draw):
    names = draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=len(NAMES)))
    result = []
    for name in names:
        guaranteed = draw(st.integers(0, 30))
        result.append(
            DepartmentQuota(
                name=name,
                guaranteed=guaranteed,
                weight=draw(st.sampled_from([0, 0.5, 1, 1.0, 2, 3.7])),
                limit=draw(st.none() | st.integers(guaranteed, guaranteed + 40)),
                priority=draw(st.integers(0, 2)),
                demand=draw(st.integers(0, 60)),
                allocated=draw(st.integers(0, 40)),
            )
        )
    return result


capacities = st.integers(0, 150)


def many_cases(test):
    """200 generated cases per property: seconds in all, so `make test-fast` leaves them to `make test`."""
    return pytest.mark.slow(reason="200 generated cases per property")(
        settings(max_examples=200, deadline=None)(test)
    )


def cap_of(d: DepartmentQuota) -> int:
    return d.demand if d.limit is None else min(d.demand, d.limit)


@many_cases
@given(capacities, departments())
def test_shares_respect_capacity_limit_and_demand(capacity, depts):
    result = fair_share(capacity, depts)
    assert set(result.shares) == {d.name for d in depts}
    assert sum(shares_of(result).values()) + result.unallocated == capacity
    assert result.unallocated >= 0
    for d in depts:
        share = result.shares[d.name]
        assert share.fair_share == share.in_quota + share.over_quota
        assert 0 <= share.in_quota <= min(d.guaranteed, d.demand)
        assert share.over_quota >= 0
        assert share.fair_share <= d.demand
        assert d.limit is None or share.fair_share <= d.limit
        assert share.allocated == d.allocated
        assert share.reclaimable == max(0, d.allocated - share.fair_share)
        assert share.starved == max(0, share.in_quota - d.allocated)


@many_cases
@given(capacities, departments())
def test_guarantees_honoured_when_they_fit(capacity, depts):
    result = fair_share(capacity, depts)
    if sum(d.guaranteed for d in depts) <= capacity:
        for d in depts:
            share = result.shares[d.name]
            assert share.in_quota == min(d.guaranteed, d.demand)
            assert share.fair_share >= min(d.guaranteed, d.demand)
            if d.demand <= d.guaranteed:
                assert share.fair_share == d.demand


@many_cases
@given(capacities, departments())
def test_capacity_shortage_is_shared_by_guarantee_and_nothing_is_lent(capacity, depts):
    asks = {d.name: min(d.guaranteed, d.demand) for d in depts}
    if sum(asks.values()) <= capacity:
        return
    result = fair_share(capacity, depts)
    assert result.unallocated == 0
    assert all(s.over_quota == 0 for s in result.shares.values())
    # Water-filling by guarantee: departments short of their ask share one exact level lambda, and each
    # in_quota is lambda * guarantee rounded down or up, so (in_quota_a - 1) / g_a < (in_quota_b + 1) / g_b.
    short = [d for d in depts if result.shares[d.name].in_quota < asks[d.name]]
    for a in short:
        for b in short:
            assert Fraction(result.shares[a.name].in_quota - 1, a.guaranteed) < Fraction(
                result.shares[b.name].in_quota + 1, b.guaranteed
            )


@many_cases
@given(capacities, departments(), st.randoms(use_true_random=False))
def test_result_does_not_depend_on_listing_order(capacity, depts, rng):
    shuffled = list(depts)
    rng.shuffle(shuffled)
    assert fair_share(capacity, shuffled) == fair_share(capacity, depts)


@many_cases
@given(capacities, departments())
def test_work_conserving(capacity, depts):
    result = fair_share(capacity, depts)
    if result.unallocated > 0:
        for d in depts:
            if d.weight > 0:
                assert result.shares[d.name].fair_share == cap_of(d), d


@many_cases
@given(capacities, departments())
def test_higher_priority_tier_is_served_before_lower_borrows(capacity, depts):
    result = fair_share(capacity, depts)
    for low in depts:
        if result.shares[low.name].over_quota == 0:
            continue
        for high in depts:
            if high.priority > low.priority and high.weight > 0:
                assert result.shares[high.name].fair_share == cap_of(high)


@many_cases
@given(capacities, departments())
def test_surplus_split_by_weight_within_a_tier(capacity, depts):
    # Two departments of one tier both below their cap share a common exact level lambda:
    # over_quota_i is lambda * weight_i rounded up or down, so the levels differ by less than 1/w_a + 1/w_b.
    result = fair_share(capacity, depts)
    open_ = [
        d
        for d in depts
        if d.weight > 0
        and result.shares[d.name].fair_share < cap_of(d)
        and result.shares[d.name].in_quota == min(d.guaranteed, d.demand)
    ]
    for a in open_:
        for b in open_:
            if a.priority == b.priority and a.name < b.name:
                wa, wb = Fraction(a.weight), Fraction(b.weight)
                gap = abs(result.shares[a.name].over_quota / wa - result.shares[b.name].over_quota / wb)
                assert gap < 1 / wa + 1 / wb


@many_cases
@given(capacities, departments())
def test_reclaims_bounded_by_reclaimable_and_starved(capacity, depts):
    result = fair_share(capacity, depts)
    taken: dict[str, int] = {}
    received: dict[str, int] = {}
    for r in result.reclaims:
        assert r.gpus > 0
        assert r.from_department != r.to_department
        taken[r.from_department] = taken.get(r.from_department, 0) + r.gpus
        received[r.to_department] = received.get(r.to_department, 0) + r.gpus
    for name, gpus in taken.items():
        assert gpus <= result.shares[name].reclaimable
    for name, gpus in received.items():
        assert gpus <= result.shares[name].starved
    # Free GPUs are used before any reclaim, and together they always cover every starved department.
    free = max(0, capacity - sum(d.allocated for d in depts))
    total_starved = sum(s.starved for s in result.shares.values())
    assert sum(received.values()) == max(0, total_starved - free)
