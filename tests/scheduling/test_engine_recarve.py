"""Carving that follows demand (scheduling.engine.recarve) and the cluster's re-carving (Cluster)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.blocks import BlockPartition, block_layout_error
from inventory.names import partition_name_error
from scheduling.engine.cluster import Cluster
from scheduling.engine.placement import PARTITION, RACK, Request, place
from scheduling.engine.recarve import (
    NewPartition,
    Recarve,
    RecarvePolicy,
    cluster_block_check,
    propose,
    waiting_gangs,
)
from scheduling.engine.scheduler import Department, PendingJob, schedule
from tests.scheduling.test_engine import check_indexes, cluster_of

ON = RecarvePolicy()


def gang(job_id=1, gpus=40, department="a", topology=PARTITION, submitted_at=0.0) -> PendingJob:
    return PendingJob(job_id, department, gpus, topology, submitted_at=submitted_at)


def apply(cluster: Cluster, recarve: Recarve, change: bool = True) -> list[int]:
    return cluster.replace_partitions(
        recarve.rack,
        recarve.removed,
        [(p.name, p.hostnames, p.owner) for p in recarve.created],
        taken=recarve.taken,
        change=change,
    )


def layout_ok(cluster: Cluster) -> str | None:
    """The fleet's layout under the wizard's block rule (core.blocks)."""
    return block_layout_error(
        [
            BlockPartition(cluster.rack_name[cluster.part_rack[p]], cluster.part_name[p], len(trays))
            for p, trays in enumerate(cluster.part_trays)
            if trays
        ]
    )


def sizes(cluster: Cluster, rack: str) -> list[int]:
    r = cluster.rack_name.index(rack)
    return sorted((len(cluster.part_trays[p]) for p in cluster.rack_parts[r]), reverse=True)


# --- Cluster.replace_partitions ----------------------------------------------------------------------


def test_merging_two_idle_partitions_keeps_every_index_exact_and_holds_the_trays_until_the_change_ends():
    c = cluster_of({"r1": [9, 9], "r2": [9, 9]})
    hosts = tuple(c.tray_host[t] for t in range(18))
    new = c.replace_partitions("r1", ["p1", "p2"], [("rc1", hosts, None)])
    check_indexes(c)
    assert c.max_partition_trays == 18
    assert [c.part_name[p] for p in c.rack_parts[0]] == ["rc1"]
    # Changing: no job of any size there, single-tray ones included.
    assert c.free_gpus == 72
    assert place(c, Request(40, PARTITION)) is None
    assert all(t not in {t for t, _ in place(c, Request(1)) or ()} for t in range(18))
    c.end_change(range(18))
    check_indexes(c)
    placed = place(c, Request(40, PARTITION))
    assert placed is not None and {c.tray_part[t] for t, _ in placed} == set(new)


def test_a_pass_does_not_unhold_trays_whose_partition_is_changing():
    c = cluster_of({"r1": [9, 9]})
    c.replace_partitions("r1", ["p2"], [("rc1", tuple(c.tray_host[t] for t in range(9, 18)), None)])
    departments = [Department("a", guaranteed=72)]
    result = schedule(c, departments, [], [PendingJob(i, "a", 4) for i in range(1, 20)], now=0.0)
    assert all(t < 9 for start in result.started for t, _ in start.placement)
    assert all(c.tray_held[t] for t in range(9, 18))
    check_indexes(c)


def test_replace_partitions_refuses_trays_that_run_work_and_layouts_that_lose_trays():
    c = cluster_of({"r1": [9, 9]})
    c.allocate(7, [(0, 1)])
    every = tuple(c.tray_host[t] for t in range(18))
    with pytest.raises(ValueError, match="run work"):
        c.replace_partitions("r1", ["p1", "p2"], [("rc1", every, None)])
    with pytest.raises(ValueError, match="exactly the trays"):
        c.replace_partitions("r1", ["p2"], [("rc1", every[9:17], None)])
    with pytest.raises(ValueError, match="unique"):
        c.replace_partitions("r1", ["p2"], [("p1", every[9:], None)])
    check_indexes(c)


def test_splitting_then_settling_serves_smaller_partitions_again():
    c = cluster_of({"r1": [18]})
    hosts = tuple(c.tray_host[t] for t in range(18))
    c.replace_partitions("r1", ["p1"], [("rc1", hosts[:9], None), ("rc2", hosts[9:], None)], change=False)
    check_indexes(c)
    assert c.max_partition_trays == 9
    assert place(c, Request(40, PARTITION)) is None
    assert place(c, Request(36, PARTITION)) is not None


# --- propose -------------------------------------------------------------------------------------------


def test_a_gang_larger_than_any_partition_gets_two_idle_partitions_merged():
    c = cluster_of({"r1": [9, 9], "r2": [9, 9]})
    c.allocate(5, [(18, 4)])  # r2 runs work
    [recarve] = propose(c, [gang(42, 40, submitted_at=0.0)], {"r1": ON, "r2": ON}, now=720.0)
    assert recarve.rack == "r1" and recarve.removed == ("p1", "p2") and recarve.job_id == 42
    assert [len(p.hostnames) for p in recarve.created] == [18]
    assert recarve.reason == (
        "job 42 (a, 40 GPUs in quota) has waited 12 min: no partition it may use has 10 free trays; "
        "merging idle partitions p1 and p2 of r1 (9 + 9 trays) makes one of 18"
    )
    assert all(partition_name_error(p.name) is None for p in recarve.created)
    apply(c, recarve)
    assert layout_ok(c) is None
    check_indexes(c)


def test_a_gang_that_just_arrived_has_waited_under_a_minute():
    c = cluster_of({"r1": [9, 9]})
    [recarve] = propose(c, [gang(42, 40, submitted_at=100.0)], {"r1": ON}, now=120.0)
    assert recarve.reason.startswith("job 42 (a, 40 GPUs in quota) has waited under a minute: ")


def test_a_partition_with_any_work_is_never_touched():
    c = cluster_of({"r1": [9, 9]})
    c.allocate(5, [(17, 1)])  # one GPU on p2
    assert propose(c, [gang()], {"r1": ON}) == []


def test_only_enabled_racks_and_only_within_the_hourly_bound():
    c = cluster_of({"r1": [9, 9], "r2": [9, 9]})
    assert [r.rack for r in propose(c, [gang()], {"r2": ON})] == ["r2"]
    assert propose(c, [gang()], {"r2": RecarvePolicy(max_per_hour=2)}, recent={"r2": 2}) == []
    assert propose(c, [gang()], {}) == []


def test_one_recarve_per_rack_and_per_gang():
    c = cluster_of({"r1": [9, 9], "r2": [9, 9]})
    waiting = [gang(1), gang(2), gang(3)]
    proposals = propose(c, waiting, {"r1": ON, "r2": ON})
    assert [(r.rack, r.job_id) for r in proposals] == [("r1", 1), ("r2", 2)]
    touched = [(r.rack, name) for r in proposals for name in r.removed]
    assert len(touched) == len(set(touched))


def test_a_gang_that_fits_a_partition_now_or_asks_for_a_rack_is_not_served():
    c = cluster_of({"r1": [9, 9]})
    assert propose(c, [gang(gpus=36)], {"r1": ON}) == []  # p1 has its 9 trays free
    assert propose(c, [gang(gpus=40, topology=RACK)], {"r1": ON}) == []
    assert propose(c, [gang(gpus=4)], {"r1": ON}) == []


def test_dedicated_partitions_merge_only_with_their_owners_and_keep_the_owner():
    owners = {("r1", "p1"): "a", ("r1", "p2"): "b", ("r2", "p1"): "a", ("r2", "p2"): "a"}
    c = cluster_of({"r1": [9, 9], "r2": [9, 9], "r3": [9, 9]}, owners)
    # b's gang: b owns only r1 p2 (9 trays), shared r3 is the only way.
    [for_b] = propose(c, [gang(1, 40, "b")], {"r1": ON, "r2": ON, "r3": ON})
    assert for_b.rack == "r3" and {p.owner for p in for_b.created} == {None}
    # a's gang: its own r2 first, and the new partition is a's.
    [for_a] = propose(c, [gang(2, 40, "a")], {"r1": ON, "r2": ON, "r3": ON})
    assert for_a.rack == "r2" and {p.owner for p in for_a.created} == {"a"}
    # r1 mixes a and b: never merged.
    assert propose(c, [gang(3, 40, "a"), gang(4, 40, "b")], {"r1": ON}) == []


def test_buddy_carving_merges_the_two_eights_and_keeps_the_two():
    c = cluster_of({"r1": [8, 8, 2]})
    [recarve] = propose(c, [gang(gpus=48)], {"r1": ON})
    assert recarve.removed == ("p1", "p2")
    assert [len(p.hostnames) for p in recarve.created] == [16]
    apply(c, recarve, change=False)
    assert sizes(c, "r1") == [16, 2] and layout_ok(c) is None


def test_a_merge_carves_what_is_left_over_into_valid_partitions():
    # One rack alone (no other rack's blocks to align with): 9 + 9 for a 10-tray gang gives 16 + 2, the
    # tightest partition for it; the rule (base 2, 16 = 2 x 8) accepts it.
    c = cluster_of({"r1": [9, 9]})
    [recarve] = propose(c, [gang(gpus=40)], {"r1": ON})
    assert [len(p.hostnames) for p in recarve.created] == [16, 2]
    assert recarve.reason.endswith("makes one of 16 (and 2)")
    # With a floor of 3 trays the 2 is not allowed: 12 + 6 (base 3); with 7, 18.
    [recarve] = propose(c, [gang(gpus=40)], {"r1": RecarvePolicy(smallest_trays=3)})
    assert [len(p.hostnames) for p in recarve.created] == [12, 6]
    [recarve] = propose(c, [gang(gpus=40)], {"r1": RecarvePolicy(smallest_trays=7)})
    assert [len(p.hostnames) for p in recarve.created] == [18]


def test_nothing_when_every_partition_runs_work():
    c = cluster_of({"r1": [16, 2]})
    c.allocate(9, [(t, 4) for t in range(16, 18)])
    c.allocate(8, [(0, 1)])
    assert propose(c, [gang(gpus=72)], {"r1": ON}) == []


def test_the_smallest_partition_is_a_floor():
    c = cluster_of({"r1": [4, 4, 4, 4, 2]})
    c.allocate(1, [(16, 4)])
    [recarve] = propose(c, [gang(gpus=24)], {"r1": RecarvePolicy(smallest_trays=4)})
    assert [len(p.hostnames) for p in recarve.created] == [8]  # 4 + 4 -> 8
    # A floor of 9: only the four 4s together (16) make no piece below it.
    [recarve] = propose(c, [gang(gpus=24)], {"r1": RecarvePolicy(smallest_trays=9)})
    assert [len(p.hostnames) for p in recarve.created] == [16]
    assert propose(c, [gang(gpus=24)], {"r1": RecarvePolicy(smallest_trays=17)}) == []


def test_no_layout_the_wizard_would_refuse():
    # Two racks: 16 + 2 in r2 would misalign Slurm's aggregation (core.blocks), so r1's 8 + 8 (a 16
    # beside r2's 2 x 9) is refused too; nothing is proposed.
    c = cluster_of({"r1": [2] * 9, "r2": [2] * 9})
    assert layout_ok(c) is None
    proposals = propose(c, [gang(gpus=16)], {"r1": ON, "r2": ON})
    assert proposals == []  # 4 trays would need a 4 (level 1): refused across two 9-block racks
    one = cluster_of({"r1": [2] * 9})
    [recarve] = propose(one, [gang(gpus=16)], {"r1": ON})
    assert [len(p.hostnames) for p in recarve.created] == [4]
    apply(one, recarve, change=False)
    assert layout_ok(one) is None


def test_a_custom_block_check_has_the_last_word():
    c = cluster_of({"r1": [9, 9]})
    seen = []

    def refuse(rack, planned):
        seen.append((rack, {name: len(hosts) for name, hosts in planned.items()}))
        return "no"

    assert propose(c, [gang()], {"r1": ON}, block_check=refuse) == []
    # Tightest first: 16 (+ 2) on this one-rack fleet, then 18.
    assert seen == [("r1", {"rc1": 16, "rc2": 2}), ("r1", {"rc1": 18})]


def test_waiting_gangs_are_the_in_quota_multi_tray_jobs_the_pass_left_waiting():
    c = cluster_of({"r1": [9, 9]})
    c.allocate(100, [(0, 4)])  # one tray of p1 busy (department b's in-quota work)
    departments = [Department("a", guaranteed=48), Department("b", guaranteed=24)]
    from scheduling.engine.scheduler import RunningJob

    running = [RunningJob(100, "b", 4, 0.0, 1e6)]
    pending = [gang(1, 40, "a"), PendingJob(2, "a", 4), gang(3, 72, "b")]
    result = schedule(c, departments, running, pending, now=60.0, explain=False)
    assert result.in_quota_gangs == [1]  # job 3 is over quota, job 2 started
    assert [j.id for j in waiting_gangs(result, pending)] == [1]


def test_cluster_block_check_caches_by_sizes_and_names_the_rule():
    c = cluster_of({"r1": [9, 9], "r2": [9, 9]})
    check = cluster_block_check(c)
    assert check("r1", {"x": ("h",) * 18}) is None
    assert "cannot express" in check("r1", {"x": ("h",) * 12, "y": ("h",) * 6})


# --- property: whatever the re-carves, the fleet stays valid and the indexes exact --------------------


@pytest.mark.slow(reason="40 clusters re-carved and checked: about 0.1-0.25 s on 2 shared cores")
@settings(max_examples=40, deadline=None)
@given(
    layout=st.sampled_from([[9, 9], [18], [8, 8, 2], [16, 2], [6, 6, 6], [3] * 6]),
    racks=st.integers(1, 3),
    busy=st.lists(st.integers(0, 53), max_size=8),
    gangs=st.lists(st.integers(2, 18), min_size=1, max_size=4),
    smallest=st.integers(1, 9),
)
def test_every_proposal_keeps_the_fleet_valid_and_touches_no_work(layout, racks, busy, gangs, smallest):
    c = cluster_of({f"r{i}": layout for i in range(1, racks + 1)})
    if layout_ok(c) is not None:
        return  # a fleet the wizard would not have made
    for job_id, t in enumerate(sorted(set(b for b in busy if b < len(c)))):
        c.allocate(1000 + job_id, [(t, 1)])
    before = {t for t in range(len(c)) if c.tray_jobs[t]}
    busy_parts = {c.tray_part[t] for t in before}
    waiting = [gang(i, n * 4) for i, n in enumerate(gangs)]
    policies = {name: RecarvePolicy(smallest_trays=smallest) for name in c.rack_name}
    proposals = propose(c, waiting, policies)
    assert len({r.rack for r in proposals}) == len(proposals)
    assert len({r.job_id for r in proposals}) == len(proposals)
    for recarve in proposals:
        r = c.rack_name.index(recarve.rack)
        removed = [p for p in c.rack_parts[r] if c.part_name[p] in recarve.removed]
        assert not set(removed) & busy_parts
        assert all(len(p.hostnames) >= smallest for p in recarve.created)
        need = next(j.gpus // 4 for j in waiting if j.id == recarve.job_id)
        assert len(recarve.created[0].hostnames) >= need
        assert isinstance(recarve.created[0], NewPartition)
        apply(c, recarve)
        assert layout_ok(c) is None
        check_indexes(c)
    assert {t for t in range(len(c)) if c.tray_jobs[t]} == before


# --- gathering idle trays around running work (RecarvePolicy.idle_trays) -----------------------------

GATHER = RecarvePolicy(idle_trays=True)


def no_rule(rack, planned):
    return None  # Slurm 25.05+ topology.yaml (or no Slurm): blocks of any size


def busy_2x9(busy=range(0, 7), also=range(9, 16)) -> Cluster:
    c = cluster_of({"r1": [9, 9]})
    for job_id, t in enumerate([*busy, *also]):
        c.allocate(100 + job_id, [(t, 1)])
    return c


def test_a_gather_takes_only_idle_trays_and_leaves_the_busy_partitions_their_running_trays():
    c = busy_2x9()  # p1: trays 0-6 run work, 7-8 idle; p2: 9-15 run work, 16-17 idle
    [recarve] = propose(c, [gang(gpus=16)], {"r1": GATHER}, block_check=no_rule, size_rule=None)
    assert recarve.removed == ()
    assert recarve.taken == (
        ("p1", (c.tray_host[7], c.tray_host[8])),
        ("p2", (c.tray_host[16], c.tray_host[17])),
    )
    assert [p.hostnames for p in recarve.created] == [tuple(c.tray_host[t] for t in (7, 8, 16, 17))]
    assert "gathering idle trays of r1 (2 of p1 (its other trays run work) and 2 of p2" in recarve.reason
    running = {t: dict(c.tray_jobs[t]) for t in range(len(c)) if c.tray_jobs[t]}
    [new] = apply(c, recarve)
    check_indexes(c)
    assert sizes(c, "r1") == [7, 7, 4]
    assert {t: dict(c.tray_jobs[t]) for t in running} == running
    assert all(c.tray_part[t] == 0 for t in range(7)) and all(c.tray_part[t] == 1 for t in range(9, 16))
    c.end_change([7, 8, 16, 17])
    placed = place(c, Request(16, PARTITION))
    assert placed is not None and {c.tray_part[t] for t, _ in placed} == {new}


def test_no_gather_unless_the_policy_allows_it_and_the_fleet_rule_accepts_it():
    c = busy_2x9()
    assert propose(c, [gang(gpus=16)], {"r1": ON}, block_check=no_rule, size_rule=None) == []
    # Slurm 24.11's block rule (the wizard's): 7 + 7 + 4 is not 9 x a power of two.
    assert propose(c, [gang(gpus=16)], {"r1": GATHER}) == []
    # Not enough idle trays in the rack, or a busy partition left under the policy's smallest.
    assert propose(c, [gang(gpus=20)], {"r1": GATHER}, block_check=no_rule, size_rule=None) == []
    small = busy_2x9(busy=range(0, 1), also=range(9, 16))  # p1: 1 busy + 8 idle
    policy = RecarvePolicy(smallest_trays=2, idle_trays=True)
    assert propose(small, [gang(gpus=36)], {"r1": policy}, block_check=no_rule, size_rule=None) == []


def test_wholly_idle_partitions_are_re_carved_before_any_busy_one_is_touched():
    c = cluster_of({"r1": [6, 6, 6]})
    c.allocate(1, [(0, 1)])  # p1 runs work; p2 and p3 are wholly idle
    [recarve] = propose(c, [gang(gpus=32)], {"r1": GATHER}, block_check=no_rule, size_rule=None)
    assert recarve.taken == () and recarve.removed == ("p2", "p3")
    # Where idle partitions alone are too few, a gather takes a wholly idle one whole first.
    c = cluster_of({"r1": [9, 9]})
    c.allocate(1, [(0, 1)])  # p1: 8 idle trays; p2: 9
    [recarve] = propose(c, [gang(gpus=40)], {"r1": GATHER}, block_check=no_rule, size_rule=None)
    assert recarve.removed == ("p2",) and recarve.taken == (("p1", (c.tray_host[1],)),)
    apply(c, recarve)
    check_indexes(c)
    assert sizes(c, "r1") == [10, 8]


def test_replace_partitions_refuses_to_take_a_busy_tray_or_every_tray_of_a_kept_partition():
    c = busy_2x9()
    with pytest.raises(ValueError, match="run work"):
        c.replace_partitions(
            "r1",
            [],
            [("rc1", (c.tray_host[6], c.tray_host[7]), None)],
            taken=[("p1", (c.tray_host[6], c.tray_host[7]))],
        )
    idle = cluster_of({"r1": [9, 9]})
    every = tuple(idle.tray_host[t] for t in range(9))
    with pytest.raises(ValueError, match="not all"):
        idle.replace_partitions("r1", [], [("rc1", every, None)], taken=[("p1", every)])
    check_indexes(c)
    check_indexes(idle)


@pytest.mark.slow(reason="40 clusters gathered and checked: about 0.1-0.3 s on 2 shared cores")
@settings(max_examples=40, deadline=None)
@given(
    layout=st.sampled_from([[9, 9], [18], [8, 8, 2], [6, 6, 6], [3] * 6]),
    racks=st.integers(1, 3),
    busy=st.lists(st.integers(0, 53), max_size=20),
    gangs=st.lists(st.integers(2, 18), min_size=1, max_size=4),
    smallest=st.integers(1, 4),
)
def test_a_gather_never_moves_a_running_tray_and_keeps_every_index_exact(
    layout, racks, busy, gangs, smallest
):
    c = cluster_of({f"r{i}": layout for i in range(1, racks + 1)})
    for job_id, t in enumerate(sorted(set(b for b in busy if b < len(c)))):
        c.allocate(1000 + job_id, [(t, 1)])
    home = {t: c.tray_part[t] for t in range(len(c)) if c.tray_jobs[t]}
    waiting = [gang(i, n * 4) for i, n in enumerate(gangs)]
    policies = {name: RecarvePolicy(smallest_trays=smallest, idle_trays=True) for name in c.rack_name}
    for recarve in propose(c, waiting, policies, block_check=no_rule, size_rule=None):
        need = next(j.gpus // 4 for j in waiting if j.id == recarve.job_id)
        assert len(recarve.created[0].hostnames) >= need
        apply(c, recarve)
        check_indexes(c)
        r = c.rack_name.index(recarve.rack)
        touched = {name for name, _ in recarve.taken} | {p.name for p in recarve.created}
        assert all(len(c.part_trays[p]) >= smallest for p in c.rack_parts[r] if c.part_name[p] in touched)
    assert {t: c.tray_part[t] for t in home} == home
