"""Historical fair share in the pass (scheduling.engine.scheduler): borrowers ordered by decayed usage.

One rack of one 18-tray partition (72 GPUs); c holds 64 GPUs in quota, so 8 are free: room for one of two
8-GPU borrowers of a and b, who are equally far below their fair share now (4 GPUs each).
"""

import pytest

from scheduling.engine.scheduler import Department, PendingJob, Project, RunningJob, schedule
from tenancy.usage_decay import DEFAULT_HALF_LIFE_S, accrue
from tests.scheduling.test_engine import cluster_of

WEEK = DEFAULT_HALF_LIFE_S


def used(gpus: int, days: float = 60.0) -> float:
    """Decayed usage of holding `gpus` GPUs for `days` days until now."""
    return accrue(0.0, gpus, days * 86400, DEFAULT_HALF_LIFE_S)


def contest(departments, **options):
    c = cluster_of({"r1": [18]})
    running = [RunningJob(100, "c", 64, started_at=0.0, expected_end=1e9)]
    c.allocate(100, [(t, 4) for t in range(16)])
    pending = [PendingJob(1, "a", 8, submitted_at=1), PendingJob(2, "b", 8, submitted_at=2)]
    return schedule(c, list(departments), running, pending, 1000.0, **options)


def started(result) -> list[int]:
    return [s.job_id for s in result.started]


def three(a_usage=None, b_usage=None, **a_fields):
    return [
        Department("a", 0, decayed_usage=a_usage, **a_fields),
        Department("b", 0, decayed_usage=b_usage),
        Department("c", 64),
    ]


def test_without_a_half_life_the_order_is_the_instants_whatever_the_usage():
    assert started(contest(three())) == [1]  # equal standing now: submission order
    assert started(contest(three(a_usage=used(40), b_usage=0.0))) == [1]  # usage ignored


def test_the_department_with_less_history_borrows_first():
    result = contest(three(a_usage=used(40), b_usage=used(2)), half_life_s=WEEK)
    assert started(result) == [2]
    assert result.started[0].over_quota
    # And the other way round: history decides, not the name or the submission.
    assert started(contest(three(a_usage=used(2), b_usage=used(40)), half_life_s=WEEK)) == [1]


def test_old_usage_is_forgotten():
    # a borrowed 40 GPUs for a week, but ten half-lives ago; b held 2 GPUs over the last two months.
    long_ago = accrue(0.0, 40, 7 * 86400, WEEK) * 0.5**10
    assert started(contest(three(a_usage=long_ago, b_usage=used(2)), half_life_s=WEEK)) == [1]


def test_a_higher_weight_tolerates_more_history():
    # a used 10 GPUs on average, b 6: per unit of weight a (weight 2) stands at 5, below b's 6.
    assert started(contest(three(a_usage=used(10, 400), b_usage=used(6, 400)), half_life_s=WEEK)) == [2]
    result = contest(three(a_usage=used(10, 400), b_usage=used(6, 400), weight=2.0), half_life_s=WEEK)
    assert started(result) == [1]


def test_in_quota_admission_is_unchanged_by_any_history():
    c = cluster_of({"r1": [18]})
    departments = [Department("a", 8, decayed_usage=used(72)), Department("b", 0, decayed_usage=0.0)]
    pending = [PendingJob(1, "b", 8, submitted_at=1), PendingJob(2, "a", 8, submitted_at=2)]
    result = schedule(c, departments, [], pending, 1000.0, half_life_s=WEEK)
    assert {s.job_id: s.over_quota for s in result.started} == {2: False, 1: True}


@pytest.mark.parametrize("usage", [None, 0.0, 1e12])
def test_a_lone_borrower_borrows_whatever_its_history(usage):
    c = cluster_of({"r1": [18]})
    result = schedule(
        c, [Department("a", 0, decayed_usage=usage)], [], [PendingJob(1, "a", 8)], 0.0, half_life_s=WEEK
    )
    assert started(result) == [1]


def test_a_projects_own_history_orders_it_against_its_siblings():
    projects = (Project("p", 0, decayed_usage=used(30)), Project("q", 0, decayed_usage=used(1)))
    departments = [Department("a", 0, projects=projects, decayed_usage=used(31)), Department("c", 64)]
    running = [RunningJob(100, "c", 64, started_at=0.0, expected_end=1e9)]
    pending = [
        PendingJob(1, "a", 8, submitted_at=1, project="p"),
        PendingJob(2, "a", 8, submitted_at=2, project="q"),
    ]

    def first(**options):
        c = cluster_of({"r1": [18]})
        c.allocate(100, [(t, 4) for t in range(16)])
        return started(schedule(c, departments, running, pending, 1000.0, **options))

    assert first() == [1]
    assert first(half_life_s=WEEK) == [2]
