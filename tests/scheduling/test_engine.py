"""The pure placement engine: indexes, policies, admission, reclaim, reservation and backfill."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.fabric import Fabric
from core.hardware import GPUS_PER_TRAY
from scheduling.engine.cluster import Cluster, TrayColumns, TraySpec
from scheduling.engine.placement import (
    ANY,
    BLOCK_BEST_FIT,
    FIRST_FIT,
    PARTITION,
    RACK,
    Request,
    describe,
    place,
    why_not,
)
from scheduling.engine.scheduler import Department, PendingJob, RunningJob, schedule


def cluster_of(layouts: dict[str, list[int]], owners: dict[tuple[str, str], str] | None = None) -> Cluster:
    """Racks named by key, each carved into partitions p1, p2... of the given tray counts."""
    owners = owners or {}
    specs = []
    for rack, sizes in layouts.items():
        slot = 0
        for number, size in enumerate(sizes, 1):
            for _ in range(size):
                slot += 1
                name = f"p{number}"
                specs.append(TraySpec(f"{rack}-t{slot:02d}", rack, name, owner=owners.get((rack, name))))
    return Cluster(specs)


def hosts(cluster: Cluster, placement) -> list[str]:
    return [cluster.tray_host[t] for t, _ in placement]


def partitions_of(cluster: Cluster, placement) -> set[str]:
    return {cluster.partition_label(cluster.tray_part[t]) for t, _ in placement}


# --- indexes -----------------------------------------------------------------------------------------


def check_indexes(c: Cluster) -> None:
    """Every index equals what a full scan of the cluster says."""
    free = sum(c.tray_free[t] for t in range(len(c)) if not c.tray_held[t])
    assert c.free_gpus == free
    for p, trays in enumerate(c.part_trays):
        if not trays:  # a partition a re-carve replaced: in no index
            assert all(p not in bucket for buckets in c.part_buckets.values() for bucket in buckets)
            assert all(p not in parts for parts in c.rack_parts)
            continue
        whole = [t for t in trays if c.is_whole(t) and not c.tray_held[t]]
        assert set(c.part_free[p]) == set(whole)
        assert c.part_whole[p] == len(whole)
        assert p in c.part_buckets[c.part_owner[p]][len(whole)]
    for r, parts in enumerate(c.rack_parts):
        shared = sum(c.part_whole[p] for p in parts if c.part_owner[p] is None)
        assert r in c.rack_buckets[shared]
    for owner in c.owners:
        for g in range(1, GPUS_PER_TRAY + 1):  # g = 4: free trays whose fabric is unsettled
            expected = {
                t
                for t in range(len(c))
                if c.tray_free[t] == g
                and not c.is_whole(t)
                and not c.tray_held[t]
                and c.part_owner[c.tray_part[t]] == owner
            }
            assert set(c.partial[owner][g]) == expected
        assert c.whole_by_owner[owner] == sum(
            c.part_whole[p] for p, o in enumerate(c.part_owner) if o == owner
        )


def index_orders(c: Cluster) -> dict:
    """Every index of the cluster with its order (dicts are ordered sets there: the order decides ties),
    and the order in which the partitions last moved bucket (`part_moved`: only its order is compared)."""
    moved = sorted((m, p) for p, m in enumerate(c.part_moved) if m)
    return {
        "part_buckets": {o: [list(b) for b in bs] for o, bs in c.part_buckets.items()},
        "rack_buckets": [list(b) for b in c.rack_buckets],
        "partial": {o: [list(b) for b in bs] for o, bs in c.partial.items()},
        "part_free": [list(d) for d in c.part_free],
        "unit_buckets": {o: [list(b) for b in bs] for o, bs in c.unit_buckets.items()},
        "group_whole": c.group_whole,
        "whole_by_owner": c.whole_by_owner,
        "part_whole": c.part_whole,
        "free_gpus": c.free_gpus,
        "moved_order": [p for _, p in moved],
        "trays": (c.tray_host, c.tray_part, c.tray_rack, c.tray_cap, c.tray_free, c.tray_settled),
        "parts": (c.part_name, c.part_rack, c.part_owner, c.part_trays, c.part_groups),
        "racks": (c.rack_name, c.rack_parts, c.rack_groups, c.host_index),
    }


@settings(max_examples=40, deadline=None)
@given(
    st.lists(  # racks: each a list of partitions, each (trays, owner), each tray (capacity, fabric settled)
        st.lists(
            st.tuples(
                st.lists(st.tuples(st.integers(0, GPUS_PER_TRAY), st.booleans()), min_size=1, max_size=5),
                st.sampled_from([None, None, "vision", "nlp"]),
            ),
            min_size=1,
            max_size=3,
        ),
        min_size=1,
        max_size=6,
    ),
    st.booleans(),
    st.randoms(use_true_random=False),
)
def test_a_cluster_built_whole_has_the_indexes_tray_by_tray_gives(racks, with_fabric, rng):
    # A cold pass builds every tray's lists whole and moves each partition once (10,000 racks: 180,000
    # trays); the result must be the cluster indexed tray by tray (each tray unheld alone, in order), order
    # included, whatever the capacities, owners, unsettled trays and fabric. Trays may come in any order.
    specs = [
        TraySpec(f"r{r}-p{p}-t{t}", f"r{r}", f"p{p}", capacity, owner, settled)
        for r, parts in enumerate(racks)
        for p, (trays, owner) in enumerate(parts)
        for t, (capacity, settled) in enumerate(trays)
    ]
    rng.shuffle(specs)
    fabric = None
    if with_fabric:  # two racks a unit, two units a spine group; the last rack outside the fabric
        fabric = Fabric(racks={f"r{r}": (f"s{r // 4}", f"u{r // 2}") for r in range(len(racks) - 1)})
    whole = Cluster(specs, fabric)
    by_tray = Cluster(specs, fabric)
    by_tray.hold(range(len(by_tray)))
    for t in range(len(by_tray)):
        by_tray.unhold([t])
    assert index_orders(whole) == index_orders(by_tray)
    check_indexes(whole)
    # The same trays given as columns (a cold read's `Cluster(columns)`): the same cluster.
    of_columns = Cluster(columns_of(specs), fabric)
    assert index_orders(of_columns) == index_orders(whole)
    assert vars(of_columns).keys() == vars(whole).keys()
    assert all(getattr(of_columns, k) == getattr(whole, k) for k in vars(whole) if k != "fabric")
    # The per-tray lists, from the specs themselves: racks and partitions numbered as they first appear.
    racks = list(dict.fromkeys(spec.rack for spec in specs))
    parts = list(dict.fromkeys((spec.rack, spec.partition) for spec in specs))
    assert whole.tray_host == [spec.hostname for spec in specs]
    assert whole.tray_rack == [racks.index(spec.rack) for spec in specs]
    assert whole.tray_part == [parts.index((spec.rack, spec.partition)) for spec in specs]
    assert [whole.tray_cap, whole.tray_free] == [[spec.capacity for spec in specs]] * 2
    assert whole.tray_settled == [spec.fabric_ok for spec in specs]
    keys = [(spec.rack, spec.partition) for spec in specs]
    assert whole.part_trays == [[t for t, k in enumerate(keys) if k == key] for key in parts]
    assert whole.host_index == {spec.hostname: t for t, spec in enumerate(specs)}


def test_a_cluster_refuses_what_it_refused_tray_by_tray():
    with pytest.raises(ValueError, match="tray a-t1 is listed twice"):
        Cluster([TraySpec("a-t1", "a", "p1"), TraySpec("a-t1", "a", "p1")])
    with pytest.raises(ValueError, match="capacity must be 0-4 GPUs"):
        Cluster([TraySpec("a-t1", "a", "p1"), TraySpec("a-t2", "a", "p1", capacity=5)])
    with pytest.raises(ValueError, match="has trays of different owners"):
        Cluster([TraySpec("a-t1", "a", "p1"), TraySpec("a-t2", "a", "p1", owner="vision")])


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a-t1", "a-t2", "b-t1", "b-t2", "b-t3"]),
            st.sampled_from(["a", "b"]),
            st.sampled_from(["p1", "p2"]),
            st.integers(-1, GPUS_PER_TRAY + 1),
            st.sampled_from([None, "vision"]),
        ),
        max_size=8,
    )
)
def test_a_cluster_refuses_the_first_tray_that_shows_a_problem(rows):
    """The trays checked over whole lists refuse what a walk tray by tray refuses, naming the same tray."""
    specs = [TraySpec(*row) for row in rows]
    expected, hosts, owner_of = None, set(), {}
    for spec in specs:
        if spec.hostname in hosts:
            expected = f"tray {spec.hostname} is listed twice"
        elif not 0 <= spec.capacity <= GPUS_PER_TRAY:
            expected = f"tray {spec.hostname}: capacity must be 0-{GPUS_PER_TRAY} GPUs"
        elif owner_of.setdefault((spec.rack, spec.partition), spec.owner) != spec.owner:
            expected = f"partition {spec.rack} {spec.partition} has trays of different owners"
        if expected is not None:
            break
        hosts.add(spec.hostname)
    for build in (lambda: Cluster(specs), lambda: Cluster(columns_of(specs))):
        if expected is None:
            assert len(build()) == len(specs)
        else:
            with pytest.raises(ValueError) as refused:
                build()
            assert str(refused.value) == expected


def columns_of(specs: list[TraySpec]) -> TrayColumns:
    return (
        TrayColumns(*(list(column) for column in zip(*specs, strict=True)))
        if specs
        else TrayColumns(*([] for _ in TraySpec._fields))
    )


def test_tray_columns_of_different_lengths_are_refused():
    columns = columns_of([TraySpec("a-t1", "a", "p1"), TraySpec("a-t2", "a", "p1")])
    with pytest.raises(ValueError, match="different lengths"):
        Cluster(columns._replace(capacities=[4]))


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["place", "release", "hold", "unhold", "capacity", "fabric"]),
            st.sampled_from([1, 2, 3, 4, 8, 12, 20, 36]),
            st.sampled_from([PARTITION, RACK, ANY]),
            st.integers(0, 1000),
        ),
        max_size=60,
    )
)
def test_indexes_stay_exact_under_any_sequence_of_changes(operations):
    c = cluster_of({"r1": [9, 9], "r2": [6, 6, 6], "r3": [18]}, owners={("r2", "p3"): "vision"})
    next_id = 1
    held: set[int] = set()
    for op, gpus, topology, pick in operations:
        if op == "place":
            department = "vision" if pick % 2 else "nlp"
            borrow = pick % 3 == 0
            placement = place(c, Request(gpus, topology, department, borrow))
            if placement is not None:
                assert sum(g for _, g in placement) == gpus
                assert all(c.usable(t, department, borrow) for t, _ in placement)
                if gpus > GPUS_PER_TRAY:
                    assert all(c.tray_settled[t] for t, _ in placement)
                c.allocate(next_id, placement)
                next_id += 1
        elif op == "release" and c.jobs:
            c.release(sorted(c.jobs)[pick % len(c.jobs)])
        elif op == "hold":
            tray = pick % len(c)
            c.hold([tray])
            held.add(tray)
        elif op == "unhold" and held:
            c.unhold(held)
            held.clear()
        elif op == "capacity":
            t = pick % len(c)
            in_use = c.tray_cap[t] - c.tray_free[t]
            c.set_capacity(t, max(in_use, pick % (GPUS_PER_TRAY + 1)))
        elif op == "fabric":
            c.set_fabric_ok(pick % len(c), bool(pick % 2))
        check_indexes(c)


def test_allocation_is_all_or_nothing_and_never_double():
    c = cluster_of({"r1": [9, 9]})
    c.allocate(1, [(0, 4), (1, 4)])
    with pytest.raises(ValueError, match="free GPUs"):
        c.allocate(2, [(2, 4), (1, 4)])
    assert c.tray_free[2] == 4  # the first tray of the refused job was not taken
    with pytest.raises(ValueError, match="already holds"):
        c.allocate(1, [(5, 4)])
    check_indexes(c)


# --- rackplane placement -----------------------------------------------------------------------------


def test_multi_tray_job_goes_to_the_partition_that_fits_best():
    c = cluster_of({"r1": [9, 9], "r2": [9, 9]})
    c.allocate(1, [(t, 4) for t in range(0, 5)])  # r1 p1: 4 free trays
    c.allocate(2, [(t, 4) for t in range(9, 12)])  # r1 p2: 6 free trays
    placement = place(c, Request(16))  # 4 trays: r1 p1 fits exactly
    assert partitions_of(c, placement) == {"r1 p1"}
    placement = place(c, Request(20))  # 5 trays: r1 p2 (6 free) beats the empty 9-tray partitions
    assert partitions_of(c, placement) == {"r1 p2"}
    assert hosts(c, placement) == [f"r1-t{n}" for n in range(13, 18)]  # lowest slots, together


def test_partition_requirement_waits_rather_than_spanning_and_says_why():
    c = cluster_of({"gb-r03": [9, 9]})
    c.allocate(1, [(t, 4) for t in range(0, 5)])
    c.allocate(2, [(t, 4) for t in range(9, 13)])
    request = Request(24, PARTITION)  # 6 trays; 4 + 5 are free but in two partitions
    assert place(c, request) is None
    assert why_not(c, request) == (
        "no NVLink partition has 6 free trays; the largest free block is 5 trays in gb-r03 p2"
    )
    spanned = place(c, Request(24, RACK))
    assert len(spanned) == 6 and partitions_of(c, spanned) == {"gb-r03 p1", "gb-r03 p2"}
    assert describe(c, spanned) == {"partitions": 2, "racks": 1}


def test_the_count_of_free_trays_is_said_in_the_singular_too():
    c = cluster_of({"r1": [9, 9]})
    c.allocate(1, [(t, 4) for t in range(1, 18)])
    assert why_not(c, Request(8, ANY)) == "2 whole trays are needed and 1 is free"


def test_rack_and_any_jobs_use_as_few_partitions_and_racks_as_possible():
    c = cluster_of({"r1": [6, 6, 6], "r2": [6, 6, 6]})
    c.allocate(1, [(t, 4) for t in (0, 1, 2, 3, 6, 7, 12)])  # r1: 2 + 4 + 5 free
    c.allocate(2, [(t, 4) for t in range(18, 24)])  # r2: 0 + 6 + 6 free
    placement = place(c, Request(36, RACK))  # 9 trays: r2 has 12 free, r1 has 11 (best fit)
    assert {h.split("-")[0] for h in hosts(c, placement)} == {"r1"}
    assert partitions_of(c, placement) == {"r1 p2", "r1 p3"}  # 5 + 4: never all three partitions
    placement = place(c, Request(96, ANY))  # 24 trays > any rack: spans racks, fullest partitions first
    assert placement is None  # only 23 whole trays are free
    assert why_not(c, Request(96, ANY)) == "24 whole trays are needed and 23 are free"
    placement = place(c, Request(88, ANY))
    assert len(placement) == 22 and len(partitions_of(c, placement)) == 5


def test_small_jobs_pack_into_partly_used_trays_first():
    c = cluster_of({"r1": [9, 9]})
    c.allocate(1, [(3, 2)])  # r1-t04 has 2 free GPUs
    c.allocate(2, [(t, 4) for t in range(9, 17)])  # r1 p2: one whole free tray
    assert hosts(c, place(c, Request(2, ANY))) == ["r1-t04"]
    assert hosts(c, place(c, Request(1, ANY))) == ["r1-t04"]
    # Three GPUs do not fit in the partly used tray: a whole tray from the fullest partition (p2).
    assert hosts(c, place(c, Request(3, ANY))) == ["r1-t18"]


def test_dedicated_partitions_serve_their_department_first_and_others_only_as_borrowed_work():
    c = cluster_of({"r1": [9, 9]}, owners={("r1", "p2"): "inference"})
    assert partitions_of(c, place(c, Request(8, PARTITION, "inference"))) == {"r1 p2"}
    assert partitions_of(c, place(c, Request(8, PARTITION, "research"))) == {"r1 p1"}
    c.allocate(1, [(t, 4) for t in range(0, 9)])
    assert place(c, Request(4, ANY, "research")) is None
    assert place(c, Request(4, ANY, "research"), FIRST_FIT) is None
    # Borrowed (over-quota) work may use another department's dedicated partition.
    assert partitions_of(c, place(c, Request(8, PARTITION, "research", borrow=True))) == {"r1 p2"}
    assert partitions_of(c, place(c, Request(4, ANY, "research", borrow=True), FIRST_FIT)) == {"r1 p2"}


def drifted_cluster(unsettled: range) -> Cluster:
    """gb-r07: p1 of 9 trays and p2 of 9 trays; the trays of `unsettled` (indexes) report another clique."""
    specs = [
        TraySpec(
            f"gb-r07-c{slot:02d}", "gb-r07", "p1" if slot <= 9 else "p2", fabric_ok=slot - 1 not in unsettled
        )
        for slot in range(1, 19)
    ]
    return Cluster(specs)


def test_a_partition_job_is_never_placed_on_trays_whose_fabric_is_unsettled():
    c = drifted_cluster(range(0, 9))  # all of p1 (a plan re-carved it; the nodes have not reported yet)
    c.allocate(1, [(t, 4) for t in range(9, 18)])  # p2 is busy
    request = Request(36, PARTITION)
    assert place(c, request) is None
    assert why_not(c, request) == (
        "gb-r07 p1 has 9 free trays but 9 of them report another NVLink clique than their partition, "
        "unfinished fabric registration or a fabric problem (fabric change in progress, drift or degraded "
        "fabric health): gb-r07-c01, gb-r07-c02, "
        "gb-r07-c03, gb-r07-c04, gb-r07-c05, gb-r07-c06, gb-r07-c07, gb-r07-c08, gb-r07-c09"
    )
    for topology in (RACK, ANY):  # no multi-tray job takes them
        assert place(c, Request(8, topology)) is None
        assert "left out while their fabric is unsettled" in why_not(c, Request(8, topology))
    # Single-tray jobs may use them (they need no NVLink between trays).
    assert hosts(c, place(c, Request(4, ANY))) == ["gb-r07-c01"]
    assert hosts(c, place(c, Request(1, ANY), FIRST_FIT)) == ["gb-r07-c01"]
    # Once the trays report their partition's clique, the job fits.
    for t in range(0, 9):
        c.set_fabric_ok(t, True)
    assert hosts(c, place(c, request)) == [f"gb-r07-c{slot:02d}" for slot in range(1, 10)]
    check_indexes(c)


def test_small_jobs_take_unsettled_trays_before_whole_settled_ones():
    c = drifted_cluster(range(17, 18))
    assert hosts(c, place(c, Request(2, ANY))) == ["gb-r07-c18"]


def test_the_pass_names_drifted_trays_and_does_not_reserve_them():
    c = drifted_cluster(range(0, 9))
    c.allocate(1, [(t, 4) for t in range(9, 18)])
    result = run(
        c,
        [Department("research", 36)],
        [RunningJob(1, "research", 36, started_at=0, expected_end=10_000)],
        [PendingJob(2, "research", 36, PARTITION, submitted_at=1)],
        now=100,
    )
    assert not result.started
    reason = result.waiting[2]
    assert reason.startswith("waiting: gb-r07 p1 has 9 free trays but 9 of them report another NVLink clique")
    # Reserved on p2 (frees when job 1 ends), never on the drifted trays.
    assert result.reservation is not None
    assert {c.tray_host[t] for t in result.reservation.trays} == {f"gb-r07-c{s:02d}" for s in range(10, 19)}
    # What it waits for first is the fabric, not job 1's end.
    assert reason.endswith(
        "it starts as soon as their nodes report the new partition (failing that, trays are reserved for it, "
        "expected to start in about 2.8 h)"
    )


def test_baselines():
    c = cluster_of({"r1": [9, 9], "r2": [3, 15]})
    c.allocate(1, [(t, 4) for t in range(0, 7)])  # r1 p1: 2 free trays
    # first-fit takes the first free trays in cluster order, across partitions.
    assert hosts(c, place(c, Request(16), FIRST_FIT)) == ["r1-t08", "r1-t09", "r1-t10", "r1-t11"]
    # block-best-fit takes the smallest partition with room (r2 p1, 3 trays) for 3 trays...
    assert partitions_of(c, place(c, Request(12), BLOCK_BEST_FIT)) == {"r2 p1"}
    # ...and spans in cluster order when no partition has room.
    wide = place(c, Request(4 * 17, BLOCK_BEST_FIT and ANY), BLOCK_BEST_FIT)
    assert hosts(c, wide)[:3] == ["r1-t08", "r1-t09", "r1-t10"]


def test_requests_check_their_gpus():
    with pytest.raises(ValueError, match="multiple of 4"):
        Request(6)
    with pytest.raises(ValueError, match=">= 1"):
        Request(0)
    with pytest.raises(ValueError, match="topology"):
        Request(4, "socket")


# --- the pass ----------------------------------------------------------------------------------------


def run(cluster, departments, running=(), pending=(), now=1000.0, **kwargs):
    return schedule(cluster, list(departments), list(running), list(pending), now, **kwargs)


def test_in_quota_work_goes_first_and_over_quota_borrows_what_is_left():
    c = cluster_of({"r1": [9, 9]})  # 72 GPUs
    departments = [Department("a", guaranteed=36), Department("b", guaranteed=36)]
    pending = [
        PendingJob(1, "a", 36, submitted_at=1),  # in quota
        PendingJob(2, "a", 36, submitted_at=2),  # over quota (borrows b's idle GPUs)
        PendingJob(3, "b", 36, submitted_at=3),  # in quota: goes before job 2 although later
    ]
    result = run(c, departments, pending=pending)
    assert [(s.job_id, s.over_quota) for s in result.started] == [(1, False), (3, False)]
    assert "no NVLink partition has 9 free trays" in result.waiting[2]


def test_non_preemptible_classes_only_run_in_quota():
    c = cluster_of({"r1": [9, 9]})
    departments = [Department("a", guaranteed=8)]
    pending = [
        PendingJob(1, "a", 8, priority_class="inference"),
        PendingJob(2, "a", 8, priority_class="build"),
    ]
    result = run(c, departments, pending=pending)
    assert [s.job_id for s in result.started] == [1]
    assert result.waiting[2] == (
        "waiting: build jobs run only within the department's guarantee (8 GPUs); it holds 8 and this job "
        "needs 8"
    )


def test_limit_is_never_passed():
    c = cluster_of({"r1": [9, 9]})
    result = run(c, [Department("a", guaranteed=8, limit=16)], pending=[PendingJob(1, "a", 20, ANY)])
    assert result.started == []
    assert result.waiting[1] == "waiting: the department's limit is 16 GPUs; it holds 0 and this job needs 20"


def test_reclaim_preempts_most_recent_over_quota_work_of_the_least_priority_department():
    c = cluster_of({"r1": [9, 9]})
    departments = [
        Department("a", guaranteed=36),
        Department("b", guaranteed=0, priority=1),
        Department("c", guaranteed=0, priority=0),
    ]
    # b and c borrowed the whole rack; a now wants its guarantee (8 trays in one partition).
    c.allocate(10, [(t, 4) for t in range(0, 9)])
    c.allocate(11, [(t, 4) for t in range(9, 13)])
    c.allocate(12, [(t, 4) for t in range(13, 18)])
    running = [
        RunningJob(10, "b", 36, started_at=100, expected_end=9000, over_quota=True),
        RunningJob(11, "c", 16, started_at=200, expected_end=9000, over_quota=True),
        RunningJob(12, "c", 20, started_at=300, expected_end=9000, over_quota=True),
    ]
    result = run(c, departments, running, [PendingJob(1, "a", 32, PARTITION)])
    # c (lower priority) goes first, most recent first: 12 then 11 free all of p2 (9 trays >= 8).
    assert result.preempted == {12: 1, 11: 1}
    assert result.started[0].job_id == 1 and result.started[0].preempted == (11, 12)
    assert 10 in c.jobs  # b's job keeps running


def test_victims_the_job_does_not_need_keep_running():
    c = cluster_of({"r1": [9, 9]})
    c.allocate(10, [(t, 4) for t in range(0, 9)])
    c.allocate(11, [(t, 4) for t in range(9, 18)])
    running = [
        RunningJob(10, "b", 36, started_at=300, expected_end=9000, over_quota=True),
        RunningJob(11, "b", 36, started_at=100, expected_end=9000, over_quota=True),
    ]
    departments = [Department("a", guaranteed=36), Department("b", guaranteed=0)]
    result = run(c, departments, running, [PendingJob(1, "a", 4, ANY)])
    assert result.preempted == {10: 1}
    assert 11 in c.jobs


def test_in_quota_work_is_never_preempted():
    c = cluster_of({"r1": [9, 9]})
    c.allocate(10, [(t, 4) for t in range(0, 18)])
    running = [RunningJob(10, "b", 72, started_at=100, expected_end=9000, over_quota=False)]
    departments = [Department("a", guaranteed=36), Department("b", guaranteed=72)]
    result = run(c, departments, running, [PendingJob(1, "a", 8)])
    assert result.started == [] and result.preempted == {}
    assert result.waiting[1].startswith("waiting: no NVLink partition has 2 free trays")


def test_head_job_gets_a_reservation_and_only_short_jobs_backfill():
    c = cluster_of({"r1": [9, 9]})
    c.allocate(10, [(t, 4) for t in range(0, 6)])  # p1: 3 trays free, job 10 ends at 1600
    c.allocate(11, [(t, 4) for t in range(9, 18)])  # p2 full until 5000
    running = [
        RunningJob(10, "b", 24, started_at=0, expected_end=1600),
        RunningJob(11, "b", 36, started_at=0, expected_end=5000),
    ]
    pending = [
        PendingJob(1, "a", 36, submitted_at=1, time_limit_s=3600),  # needs all of p1: at 1600
        PendingJob(2, "a", 8, submitted_at=2, time_limit_s=3600),  # would delay job 1
        PendingJob(3, "a", 8, submitted_at=3, time_limit_s=300),  # ends at 1300 < 1600: backfills
    ]
    departments = [Department("a", guaranteed=0), Department("b", guaranteed=72)]
    result = run(c, departments, running, pending, now=1000.0, max_reservations=1)
    assert result.reservation.job_id == 1 and result.reservation.start_at == 1600
    assert [s.job_id for s in result.started] == [3]
    assert result.waiting[1] == (
        "waiting: no NVLink partition has 9 free trays; the largest free block is 3 trays in r1 p1; "
        "trays are reserved for it, expected to start in about 10 min"
    )
    assert result.waiting[2] == (
        "waiting: the free trays it fits on are reserved for job #1, which should start in about 10 min; "
        "this job's time limit would delay it"
    )
    assert not any(c.tray_held)  # the pass leaves no hold behind


def test_pass_leaves_the_cluster_consistent():
    c = cluster_of({"r1": [9, 9], "r2": [18]})
    pending = [PendingJob(i, "a" if i % 2 else "b", g, ANY) for i, g in enumerate([4, 8, 36, 2, 72, 16], 1)]
    run(c, [Department("a", 40), Department("b", 40)], pending=pending)
    check_indexes(c)


def test_by_default_the_first_two_waiting_jobs_get_reservations():
    c = cluster_of({"r1": [9, 9]})
    c.allocate(10, [(t, 4) for t in range(0, 6)])
    c.allocate(11, [(t, 4) for t in range(9, 18)])
    running = [
        RunningJob(10, "b", 24, started_at=0, expected_end=1600),
        RunningJob(11, "b", 36, started_at=0, expected_end=5000),
    ]
    pending = [
        PendingJob(1, "a", 36, submitted_at=1, time_limit_s=3600),
        PendingJob(2, "a", 8, submitted_at=2, time_limit_s=3600),  # second reservation: 2 trays of p2
        PendingJob(4, "a", 8, submitted_at=3, time_limit_s=3600),  # no third: it would delay job 1
        PendingJob(3, "a", 8, submitted_at=4, time_limit_s=300),  # ends before 1600: backfills
    ]
    departments = [Department("a", guaranteed=0), Department("b", guaranteed=72)]
    result = run(c, departments, running, pending, now=1000.0)
    assert [s.job_id for s in result.started] == [3]
    assert "trays are reserved for it, expected to start in about 67 min" in result.waiting[2]
    assert result.waiting[4].startswith("waiting: the free trays it fits on are reserved for job #1")
    assert not any(c.tray_held)


def test_the_queue_lists_waiting_jobs_in_the_order_the_pass_serves_them_in_quota_first():
    c = cluster_of({"r1": [18]})
    c.allocate(10, [(t, 4) for t in range(18)])  # the rack is full: everyone waits
    running = [RunningJob(10, "b", 72, started_at=0, expected_end=5000)]
    pending = [
        PendingJob(1, "b", 8, submitted_at=1),  # b holds 72 of a guarantee of 72: over quota
        PendingJob(2, "a", 8, submitted_at=2),  # a: in quota
        PendingJob(3, "a", 4, submitted_at=3),
        PendingJob(4, "b", 4, submitted_at=4),
    ]
    departments = [Department("a", guaranteed=16), Department("b", guaranteed=72)]
    result = run(c, departments, running, pending, now=1000.0)
    assert set(result.waiting) == {1, 2, 3, 4}
    assert result.queue == [2, 3, 1, 4]  # in-quota work first, each sweep in submission order
    # Without words (the simulator's passes) no queue is kept.
    quiet = schedule(cluster_of({"r1": [18]}), departments, [], [], 1000.0, explain=False)
    assert quiet.queue == []


def test_each_start_says_in_one_sentence_why_there_and_what_else_could_have_taken_it():
    c = cluster_of({"r1": [9, 9], "r2": [18]})
    c.allocate(10, [(t, 4) for t in range(0, 5)])  # r1 p1 keeps 4 free trays
    running = [RunningJob(10, "b", 20, started_at=0, expected_end=9000)]
    pending = [
        PendingJob(1, "a", 16, submitted_at=1),  # 4 trays: r1 p1 fits exactly; r1 p2 and r2 could too
        PendingJob(2, "a", 2, submitted_at=2),  # a small job: the smallest partition with a free tray
        PendingJob(3, "a", 2, submitted_at=3),  # then the partly used tray job 2 left
    ]
    result = run(c, [Department("a", 100), Department("b", 20)], running, pending, now=10.0)
    why = {s.job_id: s.why for s in result.started}
    assert why[1] == (
        "in NVLink partition r1 p1, the smallest with 4 free trays (best fit); 2 other partitions could "
        "have taken it, kept for larger jobs (the next best, with their free trays: r1 p2 (9), r2 p1 (18))"
    )
    assert why[2].startswith("on a free tray of r1 p2, the smallest NVLink partition with room")
    assert why[3].startswith("on a tray already partly in use in r1 p2, whose 2 free GPUs fit it best")
    # Across partitions of one rack when no partition has room (its topology allows a rack).
    c2 = cluster_of({"r1": [9, 9]})
    c2.allocate(20, [(t, 4) for t in range(0, 5)])
    c2.allocate(21, [(t, 4) for t in range(9, 14)])
    result = run(
        c2,
        [Department("a", 100), Department("b", 40)],
        [
            RunningJob(20, "b", 20, started_at=0, expected_end=9000),
            RunningJob(21, "b", 20, started_at=0, expected_end=9000),
        ],
        [PendingJob(4, "a", 32, "rack", submitted_at=1)],
        now=10.0,
    )
    [start] = result.started
    assert start.why.startswith(
        "no NVLink partition had 8 free trays, so on rack r1 across 2 of its partitions"
    )


# --- standing: in quota or borrowed, recomputed every pass ---------------------------------------------


def test_every_pass_recomputes_which_running_jobs_are_in_quota_oldest_first():
    c = cluster_of({"r1": [18]})
    c.allocate(1, [(0, 4), (1, 4)])  # 8 GPUs, oldest
    c.allocate(2, [(2, 4), (3, 4)])  # 8 GPUs
    c.allocate(3, [(4, 4)])  # 4 GPUs, newest
    running = [
        RunningJob(1, "a", 8, started_at=10, expected_end=9000, over_quota=False),
        RunningJob(2, "a", 8, started_at=20, expected_end=9000, over_quota=True),  # stale: borrowed at start
        RunningJob(3, "a", 4, started_at=30, expected_end=9000, over_quota=True),
    ]
    # The guarantee was raised to 16: the two oldest are in quota, the newest still borrows.
    result = run(c, [Department("a", 16)], running)
    assert result.over_quota == {1: False, 2: False, 3: True}
    # Lowered to 8: the newest in-quota jobs become borrowers.
    result = run(c, [Department("a", 8)], running)
    assert result.over_quota == {1: False, 2: True, 3: True}


def test_jobs_started_in_one_pass_keep_the_standing_they_were_admitted_with():
    """A big training job that borrows and a small build job admitted in quota in the same pass share a start
    time; the build job (a class that runs only in quota) must not turn borrowed at the next pass."""
    c = cluster_of({"r1": [18]})
    c.allocate(1, [(t, 4) for t in range(0, 14)])  # 56 GPUs, in quota
    running = [RunningJob(1, "a", 56, started_at=10, expected_end=9000)]
    pending = [
        PendingJob(2, "a", 12, submitted_at=20),  # 56 + 12 > 64: borrows
        PendingJob(3, "a", 1, priority_class="build", submitted_at=30),  # 56 + 1 <= 64: in quota
    ]
    first = run(c, [Department("a", 64)], running, pending, now=100.0)
    assert {s.job_id: s.over_quota for s in first.started} == {2: True, 3: False}
    assert first.over_quota == {1: False, 2: True, 3: False}
    # The next pass sees both as running since the same moment: the build job stays in quota.
    again = [
        *running,
        RunningJob(2, "a", 12, started_at=100.0, expected_end=9000, over_quota=True),
        RunningJob(3, "a", 1, started_at=100.0, expected_end=9000, priority_class="build"),
    ]
    assert run(c, [Department("a", 64)], again, now=200.0).over_quota == {1: False, 2: True, 3: False}


def test_a_job_in_quota_by_todays_guarantee_is_not_preempted_as_a_borrower():
    c = cluster_of({"r1": [18]})
    c.allocate(10, [(t, 4) for t in range(0, 18)])  # b holds the whole rack, flagged borrowed when it started
    running = [RunningJob(10, "b", 72, started_at=0, expected_end=9000, over_quota=True)]
    # b's guarantee is now 72: a's in-quota job must wait, not preempt b's in-quota work.
    result = run(c, [Department("a", 0, limit=None), Department("b", 72)], running, [PendingJob(1, "a", 8)])
    assert not result.preempted and not result.started
    assert result.over_quota == {10: False}


def test_the_owner_reclaims_its_dedicated_partition_from_a_borrower_first():
    # r1: p1 shared (14 trays), p2 dedicated to inference (4 trays).
    c = cluster_of({"r1": [14, 4]}, owners={("r1", "p2"): "inference"})
    departments = [
        Department("research", 36, priority=1),
        Department("inference", 16),
        Department("vision", 0),
    ]
    c.allocate(1, [(t, 4) for t in range(0, 9)])  # research's in-quota 36 GPUs on p1
    c.allocate(2, [(t, 4) for t in range(9, 14)])  # vision's borrowed 20 GPUs on p1 (least recently started)
    running = [
        RunningJob(1, "research", 36, started_at=0, expected_end=9000),
        RunningJob(2, "vision", 20, started_at=50, expected_end=9000, over_quota=True),
    ]
    # Research's next 16 GPUs are beyond its guarantee: borrowed, so they may take inference's tier.
    result = run(
        c, departments, running, [PendingJob(3, "research", 16, PARTITION, submitted_at=100)], now=200
    )
    [start] = result.started
    assert start.over_quota and partitions_of(c, start.placement) == {"r1 p2"}
    assert result.on_dedicated == {3: "inference"}
    running.append(RunningJob(3, "research", 16, started_at=200, expected_end=9000, over_quota=True))
    # Inference's in-quota job: the borrower on its own partition goes first, although research has the
    # higher priority and vision's borrowed job is elsewhere.
    result = run(
        c, departments, running, [PendingJob(4, "inference", 16, PARTITION, submitted_at=300)], now=400
    )
    assert result.preempted == {3: 4}
    [start] = result.started
    assert not start.over_quota and partitions_of(c, start.placement) == {"r1 p2"}
    # A job on another department's dedicated partition is borrowed even within its own guarantee.
    c2 = cluster_of({"r1": [14, 4]}, owners={("r1", "p2"): "inference"})
    c2.allocate(5, [(t, 4) for t in range(14, 18)])
    stale = [RunningJob(5, "research", 16, started_at=0, expected_end=9000, over_quota=False)]
    assert run(c2, departments, stale).over_quota == {5: True}


def test_an_in_quota_job_never_goes_to_another_departments_dedicated_partition():
    c = cluster_of({"r1": [14, 4]}, owners={("r1", "p2"): "inference"})
    c.allocate(1, [(t, 4) for t in range(0, 14)])
    running = [RunningJob(1, "vision", 56, started_at=0, expected_end=9000, over_quota=True)]
    departments = [Department("research", 36), Department("inference", 16), Department("vision", 0)]
    result = run(c, departments, running, [PendingJob(2, "research", 16, PARTITION)])
    # In quota: it reclaims vision's borrowed trays on the shared partition instead.
    assert result.preempted == {1: 2}
    [start] = result.started
    assert not start.over_quota and partitions_of(c, start.placement) == {"r1 p1"}


def test_a_borrowers_reason_counts_the_dedicated_trays_it_may_borrow():
    """A training job over its quota may borrow another department's free dedicated partition: its reason
    must count those trays (a walkthrough saw "the most in one rack is 1" beside 9 free dedicated trays)."""
    c = cluster_of({"r1": [9, 9]}, owners={("r1", "p2"): "b"})
    c.allocate(1, [(t, 4) for t in range(0, 9)])  # p1 busy; p2 (b's) free
    running = [RunningJob(1, "b", 36, started_at=0, expected_end=9000)]
    result = run(
        c,
        [Department("a", 0), Department("b", 72)],
        running,
        [PendingJob(2, "a", 72, RACK, submitted_at=1)],
    )
    assert not result.started
    assert "the most in one rack is 9" in result.waiting[2], result.waiting[2]


def test_a_start_names_at_most_three_alternatives_smallest_first_then_how_many_more():
    c = cluster_of({"r1": [9, 9], "r2": [9, 9], "r3": [18]})
    c.allocate(10, [(t, 4) for t in range(0, 6)])  # r1 p1 keeps 3 free trays: the best fit for 3
    running = [RunningJob(10, "b", 24, started_at=0, expected_end=9000)]
    result = run(c, [Department("a", 100), Department("b", 24)], running, [PendingJob(1, "a", 12)], now=10.0)
    [start] = result.started
    assert start.why.endswith(
        "4 other partitions could have taken it, kept for larger jobs (the next best, with their free "
        "trays: r1 p2 (9), r2 p1 (9), r2 p2 (9) and 1 more)"
    ), start.why


def test_a_borrower_gets_a_rack_of_shared_and_borrowable_dedicated_trays_its_reason_counted():
    """The walkthrough's job #57: "no rack has 18 free trays (the most in one rack is 18)". A rack of one
    shared partition and one dedicated to another department, both free: a borrowed rack-topology job that
    may use both gets the rack (its reason counted both; the placement did not look there)."""
    c = cluster_of({"r1": [9, 9]}, owners={("r1", "p2"): "b"})
    result = run(
        c,
        [Department("a", 0), Department("b", 72)],
        [],
        [PendingJob(2, "a", 72, RACK, submitted_at=1)],
    )
    [start] = result.started
    assert start.over_quota and partitions_of(c, start.placement) == {"r1 p1", "r1 p2"}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(  # racks: each a list of partitions, each (trays, owner), each tray (capacity, fabric settled)
        st.lists(
            st.tuples(
                st.lists(
                    st.tuples(
                        st.sampled_from([4, 4, 4, 3, 1, 0]), st.sampled_from([True, True, True, False])
                    ),
                    min_size=1,
                    max_size=5,
                ),
                st.sampled_from([None, None, "vision"]),
            ),
            min_size=1,
            max_size=3,
        ),
        min_size=1,
        max_size=4,
    ),
    st.lists(  # jobs: each (job id, its trays as (tray number, GPUs)); some ask too much or twice
        st.tuples(
            st.integers(1, 16),
            st.lists(
                st.tuples(st.integers(0, 59), st.sampled_from([1, 1, 2, 4, 4, 0])), min_size=1, max_size=4
            ),
        ),
        max_size=16,
    ),
    st.booleans(),
    st.booleans(),
)
def test_jobs_allocated_at_once_index_as_one_by_one(racks, drawn, with_fabric, valid_only):
    """A cold read places every running job at once (`allocate_all`): the indexes, their orders and every
    job's GPUs are those of `allocate` job by job, and the same job is refused with the same words."""
    specs = [
        TraySpec(f"r{r}-p{p}-t{t}", f"r{r}", f"p{p}", capacity, owner, settled)
        for r, parts in enumerate(racks)
        for p, (trays, owner) in enumerate(parts)
        for t, (capacity, settled) in enumerate(trays)
    ]
    fabric = (
        Fabric(racks={f"r{r}": (f"s{r // 2}", f"u{r}") for r in range(len(racks))}) if with_fabric else None
    )
    jobs = [(job_id, [(t % len(specs), gpus) for t, gpus in trays]) for job_id, trays in drawn]
    if valid_only:  # the jobs a database gives: each once, within what the trays have
        free, fitting = [spec.capacity for spec in specs], []
        for job_id, trays in jobs:
            trays = list(dict(trays).items())
            if job_id in dict(fitting) or any(not 1 <= gpus <= free[t] for t, gpus in trays):
                continue
            for t, gpus in trays:
                free[t] -= gpus
            fitting.append((job_id, trays))
        jobs = fitting
    one_by_one, at_once = Cluster(specs, fabric), Cluster(specs, fabric)
    refused = [None, None]
    try:
        for job_id, trays in jobs:
            one_by_one.allocate(job_id, trays)
    except ValueError as error:
        refused[0] = str(error)
    try:
        at_once.allocate_all(jobs)
    except ValueError as error:
        refused[1] = str(error)
    assert refused[0] == refused[1]
    if refused[0] is None:
        assert index_orders(at_once) == index_orders(one_by_one)
        assert at_once.jobs == one_by_one.jobs and at_once.tray_jobs == one_by_one.tray_jobs
        check_indexes(at_once)
        for job_id, _ in jobs:  # and they come off again as placed one by one
            at_once.release(job_id)
            one_by_one.release(job_id)
        assert index_orders(at_once) == index_orders(one_by_one)
