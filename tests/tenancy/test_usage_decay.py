"""Decayed GPU usage (tenancy.usage_decay): the half-life arithmetic behind historical fair share.

Plain Python, no database: the module under test must not import Django.
"""

import math
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenancy.usage_decay import (
    DEFAULT_HALF_LIFE_S,
    accrue,
    average_gpus,
    decay,
    history_standing,
    interval_usage,
)

DAY = 86400.0
half_lives = st.floats(min_value=60.0, max_value=60 * DAY)
usages = st.floats(min_value=0.0, max_value=1e12)
spans = st.floats(min_value=0.0, max_value=120 * DAY)


def test_the_default_half_life_is_slurms_seven_days():
    assert DEFAULT_HALF_LIFE_S == 7 * DAY


def test_usage_halves_after_one_half_life_and_quarters_after_two():
    assert decay(1000.0, 7 * DAY, 7 * DAY) == pytest.approx(500.0)
    assert decay(1000.0, 14 * DAY, 7 * DAY) == pytest.approx(250.0)
    assert decay(1000.0, 0.0, 7 * DAY) == 1000.0


@given(usages, spans, spans, half_lives)
@settings(max_examples=200, deadline=None)
def test_decay_is_monotone_in_time_and_never_grows(usage, t1, t2, half_life):
    early, late = sorted((t1, t2))
    assert decay(usage, late, half_life) <= decay(usage, early, half_life) <= usage


@given(usages, half_lives)
@settings(max_examples=100, deadline=None)
def test_half_after_one_half_life(usage, half_life):
    assert decay(usage, half_life, half_life) == pytest.approx(usage / 2, rel=1e-9)


@given(
    usages,
    st.integers(min_value=0, max_value=10_000),
    st.lists(st.floats(min_value=0.0, max_value=10 * DAY), min_size=1, max_size=8),
    half_lives,
)
@settings(max_examples=200, deadline=None)
def test_accruing_does_not_depend_on_how_time_is_cut_into_steps(usage, gpus, steps, half_life):
    stepped = usage
    for step in steps:
        stepped = accrue(stepped, gpus, step, half_life)
    once = accrue(usage, gpus, sum(steps), half_life)
    assert stepped == pytest.approx(once, rel=1e-8, abs=1e-6)


def test_a_short_stretch_accrues_about_its_gpu_seconds():
    assert accrue(0.0, 8, 60.0, 7 * DAY) == pytest.approx(8 * 60.0, rel=1e-4)


@given(st.integers(min_value=1, max_value=10_000), half_lives)
@settings(max_examples=100, deadline=None)
def test_holding_gpus_forever_averages_that_many_gpus(gpus, half_life):
    usage = accrue(0.0, gpus, 200 * half_life, half_life)
    assert average_gpus(usage, half_life) == pytest.approx(gpus, rel=1e-9)


@given(
    st.integers(min_value=1, max_value=1000),
    st.floats(min_value=0.0, max_value=30 * DAY),
    st.floats(min_value=0.0, max_value=30 * DAY),
    st.floats(min_value=0.0, max_value=30 * DAY),
    half_lives,
)
@settings(max_examples=200, deadline=None)
def test_one_interval_is_what_accruing_it_then_decaying_gives(gpus, start, length, after, half_life):
    end, now = start + length, start + length + after
    accrued = decay(accrue(0.0, gpus, length, half_life), after, half_life)
    assert interval_usage(gpus, start, end, now, half_life) == pytest.approx(accrued, rel=1e-9, abs=1e-6)


def test_an_interval_still_running_counts_up_to_now_and_an_empty_one_nothing():
    assert interval_usage(4, 0.0, 500.0, 100.0, DAY) == interval_usage(4, 0.0, 100.0, 100.0, DAY)
    assert interval_usage(4, 100.0, 100.0, 200.0, DAY) == 0.0


def test_history_standing_is_the_average_beyond_the_guarantee_per_unit_of_weight():
    held_16 = accrue(0.0, 16, 400 * DAY, 7 * DAY)  # 16 GPUs for 400 days: averages 16
    assert history_standing(held_16, 8, 1.0, 7 * DAY) == pytest.approx(8.0)
    assert history_standing(held_16, 8, 2.0, 7 * DAY) == pytest.approx(4.0)
    assert history_standing(held_16, 24, 1.0, 7 * DAY) == pytest.approx(-8.0)  # it lent its share
    assert history_standing(held_16, 8, 0.0, 7 * DAY) == math.inf  # weight 0 never borrows


@pytest.mark.parametrize("half_life", [0.0, -1.0, math.inf, math.nan])
def test_a_half_life_must_be_a_positive_number(half_life):
    with pytest.raises(ValueError, match="half-life"):
        decay(1.0, 1.0, half_life)


def test_the_module_does_not_import_django():
    code = "import sys, tenancy.usage_decay; sys.exit('django' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
