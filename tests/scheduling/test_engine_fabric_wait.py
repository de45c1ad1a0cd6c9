"""The fabric wait counted from when a job could first start (issue 33): a multi-rack job that could fit one
scalable unit is held for one only from the first pass in which it could have started across units (its quota
allowed it and the free trays were there), never before, and never longer than `Options.fabric_wait_s` from
then."""

from dataclasses import replace
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.engine.placement import ANY, placed_level
from scheduling.engine.scheduler import Department, Options, PendingJob, schedule
from tests.scheduling.test_engine_fabric import EIGHT, FOUR_UNITS, busy, cluster_on

NOW = datetime(2026, 11, 30, 18, 0, tzinfo=UTC).timestamp()
HOUR = 3600.0
RESEARCH = [Department("research", 576)]


def _cluster(occupied):
    """Eight racks under four units of two; rack i with `occupied[i]` busy trays (jobs 1001...)."""
    cluster = cluster_on(FOUR_UNITS, EIGHT)
    for job, (rack, trays) in enumerate(zip(EIGHT, occupied, strict=True), 1001):
        if trays:
            busy(cluster, job, rack, trays)
    return cluster


CROWDED = [8] * 8  # every unit 20 free trays: a 24-tray job fits only across units
FULL = [18, 18, 18, 18, 18, 18, 18, 10]  # 8 free trays in all: a 24-tray job fits nowhere


def test_a_job_held_long_after_its_submission_still_waits_its_whole_wait_for_a_unit():
    """Submitted a day ago, it waited for trays anywhere until now: its wait begins now, not at submission
    (counted from submission, it would have run out and the job would span units at once)."""
    job = PendingJob(1, "research", 96, ANY, submitted_at=NOW - 24 * HOUR)
    result = schedule(_cluster(CROWDED), RESEARCH, [], [job], now=NOW, fabric_wait_s=2 * HOUR)
    assert result.started == [] and result.fabric_held_since == {1: NOW}
    assert result.waiting[1].endswith(
        "waiting for one scalable unit (since 2026-11-30 18:00 UTC, until 2026-11-30 20:00 UTC: the fabric "
        "wait)"
    )


def test_a_job_that_could_not_start_anywhere_is_not_held_and_its_wait_has_not_begun():
    job = PendingJob(1, "research", 96, ANY, submitted_at=NOW - 24 * HOUR)
    result = schedule(_cluster(FULL), RESEARCH, [], [job], now=NOW, fabric_wait_s=2 * HOUR)
    assert result.started == [] and result.fabric_held_since == {}
    assert "scalable unit (since" not in result.waiting[1]


def test_a_job_waiting_for_its_quota_is_not_held():
    job = PendingJob(1, "research", 96, ANY, submitted_at=NOW - 24 * HOUR)
    limited = [Department("research", 0, limit=64)]
    result = schedule(_cluster(CROWDED), limited, [], [job], now=NOW, fabric_wait_s=2 * HOUR)
    assert result.started == [] and result.fabric_held_since == {}
    assert result.waiting[1].startswith("waiting: the department's limit is 64 GPUs")


def test_a_held_job_takes_a_unit_that_frees_up_within_its_wait():
    cluster = _cluster([8, 0, 8, 8, 8, 8, 8, 8])  # su-1 has 28 free trays
    job = PendingJob(1, "research", 96, ANY, submitted_at=0.0, fabric_held_since=NOW - HOUR)
    (start,) = schedule(cluster, RESEARCH, [], [job], now=NOW, fabric_wait_s=2 * HOUR).started
    assert placed_level(cluster, start.placement) == "unit"


def test_the_portal_waits_two_hours_from_the_hold_by_default():
    assert Options.fabric_wait_s == 2 * HOUR


@settings(max_examples=60, deadline=None)
@given(
    occupied=st.lists(st.integers(0, 18), min_size=8, max_size=8),
    trays=st.integers(19, 36),
    wait=st.sampled_from([0.5 * HOUR, HOUR, 2 * HOUR]),
    held_ago=st.one_of(st.none(), st.floats(0.0, 4 * HOUR)),
    limit=st.sampled_from([None, 80, 100, 144]),
)
def test_a_job_is_held_only_when_it_could_start_and_never_past_its_bound(
    occupied, trays, wait, held_ago, limit
):
    """Against the same pass with no fabric wait (the job expands as far as it must): a job the fabric wait
    keeps waiting while it would have started there is held (reported the first time, with this pass's
    clock); a job that would not have started there (no trays anywhere, or its department's limit) is never
    held; once held for `wait`, it places exactly as with no wait."""
    held_since = None if held_ago is None else NOW - held_ago
    job = PendingJob(1, "research", trays * 4, ANY, submitted_at=NOW - HOUR, fabric_held_since=held_since)
    departments = [Department("research", 576 if limit is None else 0, limit=limit)]
    free = schedule(_cluster(occupied), departments, [], [job], now=NOW, fabric_wait_s=0.0)
    result = schedule(_cluster(occupied), departments, [], [job], now=NOW, fabric_wait_s=wait)
    could_start = bool(free.started)
    if held_since is not None and NOW - held_since >= wait:  # its wait is over: never held past it
        assert [s.placement for s in result.started] == [s.placement for s in free.started]
        assert result.fabric_held_since == {}
        return
    if not could_start:
        assert result.started == [] and result.fabric_held_since == {}
        return
    if result.started:  # a unit had room
        assert placed_level(_cluster(occupied), result.started[0].placement) == "unit"
        assert result.fabric_held_since == {}
        return
    # Held: reported the first time only, with this pass's clock.
    assert result.fabric_held_since == ({1: NOW} if held_since is None else {})
    again = schedule(
        _cluster(occupied), departments, [], [replace(job, fabric_held_since=NOW)], now=NOW + wait - 1,
        fabric_wait_s=wait,
    )  # fmt: skip
    assert again.started == []
    over = schedule(
        _cluster(occupied), departments, [], [replace(job, fabric_held_since=NOW)], now=NOW + wait,
        fabric_wait_s=wait,
    )  # fmt: skip
    assert len(over.started) == 1
