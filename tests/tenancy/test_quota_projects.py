"""Hierarchical fair share (tenancy.quota.hierarchical_fair_share): departments first, then their projects
inside each department's share, with the same Run:ai semantics at each level. Worked examples and properties.
"""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenancy.quota import NO_PROJECT, DepartmentQuota, fair_share, hierarchical_fair_share


def q(name, guaranteed, **kwargs):
    return DepartmentQuota(name=name, guaranteed=guaranteed, **kwargs)


def test_projects_split_the_department_share_by_guarantee_then_weight():
    # Departments: A guaranteed 40, B 32, capacity 72; A asks 72, B 8: A in quota 40, B 8; surplus 24 to A.
    # Inside A (fair share 64): train guaranteed 30 asks 60, infer 10 asks 12 (weight 1 each):
    # in quota 30 + 10, NO_PROJECT guaranteed 0; surplus 24 by weight 1:1, caps 30 and 2: infer 2, train 22.
    result = hierarchical_fair_share(
        72,
        [q("A", 40, demand=72), q("B", 32, demand=8)],
        {"A": [q("train", 30, demand=60), q("infer", 10, demand=12)]},
    )
    assert result.departments.shares["A"].fair_share == 64
    split = result.projects["A"]
    assert split.shares["train"].in_quota == 30 and split.shares["train"].fair_share == 52
    assert split.shares["infer"].in_quota == 10 and split.shares["infer"].fair_share == 12
    assert split.shares[NO_PROJECT].fair_share == 0
    assert result.leaf("A", "train") is split.shares["train"]
    assert result.leaf("B") is result.departments.shares["B"]
    assert "B" not in result.projects


def test_sibling_reclaim_inside_a_department():
    # Department A (guaranteed 16) holds 16: project p borrows all 16, project q (guaranteed 8) now asks 8.
    result = hierarchical_fair_share(
        16,
        [q("A", 16, demand=24, allocated=16)],
        {"A": [q("p", 8, demand=16, allocated=16), q("q", 8, demand=8)]},
    )
    split = result.projects["A"]
    assert split.shares["q"].starved == 8
    assert split.shares["p"].reclaimable == 8
    assert [(r.from_department, r.to_department, r.gpus) for r in split.reclaims] == [("p", "q", 8)]


def test_department_guarantee_not_given_to_projects_serves_work_without_project():
    result = hierarchical_fair_share(
        32, [q("A", 24, demand=20)], {"A": [q("p", 8, demand=8)]}
    )  # 12 GPUs of demand name no project; they are guaranteed the 16 the projects leave
    assert result.projects["A"].shares[NO_PROJECT].in_quota == 12


@pytest.mark.parametrize(
    "projects, words",
    [
        ([q("p", 20), q("r", 20)], "guaranteed GPUs (40) are more than the department's (32)"),
        ([q("p", 8, demand=50)], "demand GPUs (50) are more than the department's (10)"),
        ([q(NO_PROJECT, 1)], "is not a project name"),
    ],
)
def test_projects_that_do_not_fit_their_department_are_refused(projects, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        hierarchical_fair_share(64, [q("A", 32, demand=10)], {"A": projects})


def test_projects_of_an_unknown_department_are_refused():
    with pytest.raises(ValueError, match="not among the departments"):
        hierarchical_fair_share(8, [q("A", 8)], {"Z": [q("p", 1)]})


# --- properties ----------------------------------------------------------------------------------------


@st.composite
def hierarchies(draw):
    """Departments (some with projects) whose projects fit them: guarantees, demand and holdings."""
    n = draw(st.integers(1, 4))
    departments, projects = [], {}
    for i in range(n):
        name = f"d{i}"
        k = draw(st.integers(0, 3))
        leaves = []
        for j in range(k):
            limit = draw(st.none() | st.integers(0, 80))
            guaranteed = draw(st.integers(0, 24 if limit is None else min(24, limit)))
            leaves.append(
                q(
                    f"p{j}",
                    guaranteed,
                    weight=draw(st.sampled_from([0, 0.5, 1, 2, 3])),
                    limit=limit,
                    priority=draw(st.integers(0, 2)),
                    demand=draw(st.integers(0, 60)),
                    allocated=draw(st.integers(0, 30)),
                )
            )
        extra_g = draw(st.integers(0, 24))
        guaranteed = sum(p.guaranteed for p in leaves) + extra_g
        limit = draw(st.none() | st.integers(guaranteed, guaranteed + 80))
        departments.append(
            q(
                name,
                guaranteed,
                weight=draw(st.sampled_from([0, 0.5, 1, 2])),
                limit=limit,
                priority=draw(st.integers(0, 2)),
                demand=sum(p.demand for p in leaves) + draw(st.integers(0, 40)),
                allocated=sum(p.allocated for p in leaves) + draw(st.integers(0, 20)),
            )
        )
        if leaves:
            projects[name] = leaves
    capacity = draw(st.integers(0, 300))
    return capacity, departments, projects


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=300, deadline=None)
@given(hierarchies())
def test_each_department_splits_exactly_its_own_share(case):
    capacity, departments, projects = case
    result = hierarchical_fair_share(capacity, departments, projects)
    for name, split in result.projects.items():
        department = result.departments.shares[name]
        # Conserved: the projects share the department's fair share, no more.
        assert split.capacity == department.fair_share
        assert sum(s.fair_share for s in split.shares.values()) + split.unallocated == department.fair_share
        # In quota in its project means in quota in its department.
        assert sum(s.in_quota for s in split.shares.values()) <= department.in_quota
        assert sum(s.allocated for s in split.shares.values()) == department.allocated


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=300, deadline=None)
@given(hierarchies())
def test_each_project_in_quota_within_guarantee_and_demand_fair_share_within_limit(case):
    capacity, departments, projects = case
    result = hierarchical_fair_share(capacity, departments, projects)
    for name, leaves in projects.items():
        split = result.projects[name]
        for p in leaves:
            share = split.shares[p.name]
            assert share.in_quota <= min(p.guaranteed, p.demand)
            assert share.fair_share <= p.cap
            assert share.over_quota == 0 or p.weight > 0
            assert share.starved == max(0, share.in_quota - p.allocated)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=300, deadline=None)
@given(hierarchies())
def test_projects_guarantees_are_met_whenever_the_department_is(case):
    """When the department's in-quota share is its full ask, every project gets min(guarantee, demand)."""
    capacity, departments, projects = case
    result = hierarchical_fair_share(capacity, departments, projects)
    by_name = {d.name: d for d in departments}
    for name, leaves in projects.items():
        d = by_name[name]
        if result.departments.shares[name].in_quota == min(d.guaranteed, d.demand):
            for p in leaves:
                assert result.projects[name].shares[p.name].in_quota == min(p.guaranteed, p.demand)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=200, deadline=None)
@given(hierarchies())
def test_departments_without_projects_are_exactly_todays_fair_share(case):
    capacity, departments, projects = case
    flat = fair_share(capacity, departments)
    result = hierarchical_fair_share(capacity, departments, projects)
    assert result.departments == flat
    for d in departments:
        if d.name not in projects:
            assert result.leaf(d.name) == flat.shares[d.name]
    assert hierarchical_fair_share(capacity, departments, {}).projects == {}


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=200, deadline=None)
@given(hierarchies(), st.randoms(use_true_random=False))
def test_order_of_departments_and_projects_does_not_matter(case, rnd: random.Random):
    capacity, departments, projects = case
    result = hierarchical_fair_share(capacity, departments, projects)
    shuffled_departments = list(departments)
    rnd.shuffle(shuffled_departments)
    shuffled_projects = {}
    for name in rnd.sample(list(projects), len(projects)):
        leaves = list(projects[name])
        rnd.shuffle(leaves)
        shuffled_projects[name] = leaves
    again = hierarchical_fair_share(capacity, shuffled_departments, shuffled_projects)
    assert again.departments.shares == result.departments.shares
    assert {n: s.shares for n, s in again.projects.items()} == {
        n: s.shares for n, s in result.projects.items()
    }
