"""Unit packing and unit reservations (issue 33's 95% goal): work of at most one rack opens trays in the
fullest scalable unit that has room, after the NVLink rules, so whole units stay free for multi-rack jobs;
a multi-rack job whose fabric wait ran out gets the unit with the most free trays reserved for a bounded
time, which in-quota work that fits nowhere else may still use; a cluster without a fabric places exactly as
before."""

import random
from dataclasses import replace
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from core.fabric import Fabric
from core.hardware import GPUS_PER_TRAY
from scheduling.engine.placement import ANY, PARTITION, RACK, Request, explain, place, placed_level
from scheduling.engine.scheduler import Department, Options, PendingJob, RunningJob, schedule
from tests.scheduling.test_engine_fabric import EIGHT, FOUR_UNITS, busy, cluster_on, fabric_of, racks_of

NOW = datetime(2026, 11, 30, 18, 0, tzinfo=UTC).timestamp()
HOUR = 3600.0


def _unit(cluster, placement) -> set[str]:
    return {FOUR_UNITS.group(rack, "unit") for rack in racks_of(cluster, placement)}


def _occupied(occupied: list[int], fabric: Fabric | None = FOUR_UNITS):
    cluster = cluster_on(fabric, EIGHT)
    for job, (rack, trays) in enumerate(zip(EIGHT, occupied, strict=True), 1001):
        if trays:
            busy(cluster, job, rack, trays)
    return cluster


# --- placement ---------------------------------------------------------------------------------------


def test_a_partition_job_goes_to_the_fullest_unit_with_room_and_says_so():
    cluster = _occupied([0, 0, 9, 0, 0, 0, 0, 0])  # su-2: 27 free (r3 p2 and r4's two partitions of 9)
    request = Request(16, PARTITION, pack=True)
    assert racks_of(cluster, place(cluster, replace(request, pack=False))) == {"r1"}  # flat best fit
    packed = place(cluster, request)
    assert racks_of(cluster, packed) == {"r3"} and len(packed) == 4  # su-2, the fullest with room
    assert explain(cluster, request, packed) == (
        "in NVLink partition r3 p2 of scalable unit su-2, the fullest unit with a partition of 4 free trays "
        "(27 whole free trays in the unit): emptier units stay whole for jobs that span racks"
    )


def test_the_nvlink_rule_comes_first_one_partition_in_another_unit_rather_than_two_in_the_fullest():
    # su-2 is the fullest (r3 5 + r4 5 = 10 free, no partition with 6); su-1 is empty.
    cluster = _occupied([13, 18, 4, 4, 18, 18, 18, 18])
    cluster.release(1002)  # r2 free again: su-1 has r1's 5 and r2's 18
    request = Request(24, RACK, pack=True)  # 6 trays, one rack
    placement = place(cluster, request)
    assert len({cluster.tray_part[t] for t, _ in placement}) == 1
    assert racks_of(cluster, placement) == {"r2"}


def test_a_small_job_fills_partly_used_trays_before_opening_one_in_the_fullest_unit():
    cluster = _occupied([0, 0, 17, 0, 0, 0, 0, 0])
    cluster.allocate(1, [(0, 2)])  # r1's first tray half used (su-1, the emptiest)
    request = Request(2, PARTITION, pack=True)
    ((t, gpus),) = place(cluster, request)
    assert t == 0 and gpus == 2  # no tray opened: packed where it was anyway
    cluster.allocate(2, [(0, 2)])
    ((t, _),) = place(cluster, request)
    assert cluster.rack_name[cluster.tray_rack[t]] == "r3"  # su-2: 19 free, the fullest with a free tray
    assert explain(cluster, request, ((t, 2),)).startswith("on a free tray of r3 p2 in scalable unit su-2")


def test_a_rack_job_spread_over_partitions_takes_the_rack_in_the_fullest_unit():
    cluster = cluster_on(FOUR_UNITS, EIGHT, sizes=(6, 6, 6))
    for job, (rack, trays) in enumerate(zip(EIGHT, [0, 0, 0, 9, 0, 0, 0, 0], strict=True), 1001):
        if trays:
            busy(cluster, job, rack, trays)
    request = Request(40, RACK, pack=True)  # 10 trays: no partition has them, r4 (9 free) neither
    placement = place(cluster, request)
    assert racks_of(cluster, placement) == {"r3"}  # su-2 (27 free) over su-1, su-3, su-4 (36)
    assert racks_of(cluster, place(cluster, replace(request, pack=False))) == {"r1"}
    assert explain(cluster, request, placement).startswith(
        "no NVLink partition had 10 free trays, so on rack r3 across 2 of its partitions, in scalable unit "
        "su-2"
    )


def test_racks_outside_the_fabric_take_single_rack_work_first():
    fabric = fabric_of({"su-1": ("a", ["r1", "r2"])})
    cluster = cluster_on(fabric, ["r1", "r2", "r3"])
    busy(cluster, 1, "r1", 10)
    placement = place(cluster, Request(8, PARTITION, pack=True))
    assert racks_of(cluster, placement) == {"r3"}


def _valid(cluster, request, placement) -> None:
    owners = cluster.usable_owners(request.department, request.borrow)
    assert len({t for t, _ in placement}) == len(placement)
    for t, gpus in placement:
        assert cluster.part_owner[cluster.tray_part[t]] in owners
        assert not cluster.tray_held[t]
        if request.small:
            assert gpus == request.gpus <= cluster.tray_free[t]
        else:
            assert gpus == GPUS_PER_TRAY and cluster.is_whole(t)
    if not request.small:
        assert len(placement) == request.trays


@settings(max_examples=120, deadline=None)
@given(
    occupied=st.lists(st.integers(0, 18), min_size=8, max_size=8),
    gpus=st.sampled_from([1, 2, 4, 8, 16, 24, 36, 40, 48, 64, 72]),
    topology=st.sampled_from([PARTITION, RACK, ANY]),
    released=st.integers(0, 1000),
    partial=st.lists(st.tuples(st.integers(0, 143), st.integers(1, 3)), max_size=6),
)
def test_packing_never_places_where_a_job_does_not_fit_nor_weakens_the_nvlink_rule(
    occupied, gpus, topology, released, partial
):
    """Against the same cluster without packing: a job fits exactly when it fits there, on free trays it may
    use (whole ones for a multi-tray job), in as few partitions and racks; and the unit it opens trays in is
    never emptier than the flat rule's. Without a fabric, packing changes nothing."""
    clusters = [_occupied(occupied), _occupied(occupied, None)]
    rng = random.Random(released)
    gone = rng.sample(sorted(clusters[0].jobs), k=len(clusters[0].jobs) // 2)
    for cluster in clusters:
        for job in gone:
            cluster.release(job)
        for job, (t, g) in enumerate(partial, 1):
            if cluster.tray_free[t] >= g:
                cluster.allocate(job, [(t, g)])
    cluster, flat = clusters
    for unit, free in enumerate(cluster.group_whole[None][-1]):  # the packing index stays exact
        assert unit in cluster.unit_buckets[None][free]
    assert sum(map(len, cluster.unit_buckets[None])) == 4 and flat.unit_buckets == {}
    request = Request(gpus, topology, pack=True)
    unpacked = place(cluster, replace(request, pack=False))
    packed = place(cluster, request)
    assert place(flat, request) == place(flat, replace(request, pack=False))
    assert (packed is None) == (unpacked is None)
    if packed is None:
        return
    _valid(cluster, request, packed)
    for measure in (lambda p: {cluster.tray_part[t] for t, _ in p}, lambda p: racks_of(cluster, p)):
        assert len(measure(packed)) == len(measure(unpacked))
    if len(racks_of(cluster, packed)) == 1 and all(cluster.tray_free[t] == GPUS_PER_TRAY for t, _ in packed):
        free = [sum(cluster.group_whole[None][-1][g] for _ in [0]) for g in range(4)]
        unit_of = {r: cluster.rack_groups[r][-1] for r in range(len(cluster.rack_name))}
        packed_unit = unit_of[cluster.tray_rack[packed[0][0]]]
        unpacked_unit = unit_of[cluster.tray_rack[unpacked[0][0]]]
        if len(racks_of(cluster, unpacked)) == 1 and all(
            cluster.tray_free[t] == GPUS_PER_TRAY for t, _ in unpacked
        ):
            assert free[packed_unit] <= free[unpacked_unit]
    assert placed_level(cluster, packed) in ("rack", "unit", "spine", None)


# --- the pass ----------------------------------------------------------------------------------------


def test_the_pass_packs_only_when_told_and_the_portal_does_by_default():
    job = PendingJob(1, "research", 32, PARTITION)
    departments = [Department("research", 576)]
    cluster = _occupied([0, 0, 9, 0, 0, 0, 0, 0])
    (start,) = schedule(cluster, departments, [], [job], now=NOW, fabric_packing=True).started
    assert _unit(cluster, start.placement) == {"su-2"}
    assert "scalable unit su-2, the fullest unit" in start.why
    assert Options.fabric_packing == Options().fabric_packing


# --- unit reservations after the fabric wait ---------------------------------------------------------

CROWDED = [8] * 8  # every unit 20 free trays: a 24-tray job fits only across units
WAIT, RESERVED = 2 * HOUR, 4 * HOUR


def _held(ago: float, department="llm", gpus=96) -> PendingJob:
    return PendingJob(1, department, gpus, ANY, submitted_at=NOW - 30 * HOUR, fabric_held_since=NOW - ago)


def _running(cluster) -> list[RunningJob]:
    return [RunningJob(j, "other", 32, NOW - HOUR, NOW + 10 * HOUR) for j in sorted(cluster.jobs)]


# llm borrows (as the replay's large-job department mostly does); other's running jobs are in quota.
DEPARTMENTS = [Department("llm", 0), Department("other", 300), Department("research", 96)]
BORROWING = [*DEPARTMENTS[:2], Department("research", 0)]


def _pass(cluster, pending, departments=DEPARTMENTS, **options):
    return schedule(
        cluster,
        departments,
        _running(cluster),
        pending,
        now=NOW,
        fabric_wait_s=WAIT,
        fabric_unit_reservation_s=RESERVED,
        **options,
    )


def test_a_job_whose_wait_ran_out_gets_the_unit_with_the_most_free_trays_and_borrowers_stay_out():
    cluster = _occupied([8, 8, 8, 8, 6, 8, 8, 8])  # su-3: 22 free, the most
    borrower = PendingJob(2, "research", 16, PARTITION, submitted_at=NOW - HOUR, time_limit_s=600.0)
    result = _pass(cluster, [_held(WAIT + HOUR), borrower], BORROWING)
    assert 1 not in {s.job_id for s in result.started}
    assert result.waiting[1].endswith(
        "scalable unit su-3 is reserved for it until 2026-11-30 21:00 UTC: no new work starts there but "
        "in-quota work that fits nowhere else"
    )
    (start,) = result.started
    assert start.job_id == 2 and start.over_quota and _unit(cluster, start.placement) != {"su-3"}
    assert not any(cluster.tray_held)  # every hold given back after the pass


def test_in_quota_work_that_fits_nowhere_else_starts_in_the_reserved_unit():
    cluster = _occupied([18, 18, 18, 18, 6, 8, 18, 18])  # only su-3 has free trays
    in_quota = PendingJob(2, "research", 16, PARTITION, submitted_at=NOW - HOUR)
    result = _pass(cluster, [_held(WAIT + HOUR), in_quota])
    (start,) = result.started
    assert start.job_id == 2 and not start.over_quota and _unit(cluster, start.placement) == {"su-3"}
    cluster = _occupied([18, 18, 18, 18, 6, 8, 18, 18])
    result = _pass(cluster, [_held(WAIT + HOUR), in_quota], BORROWING)
    assert result.started == []  # a borrower never enters the reserved unit


def test_the_reserved_job_starts_in_its_unit_when_it_fits():
    cluster = _occupied([8, 8, 8, 8, 0, 10, 8, 8])  # su-3: 28 free trays: 24 fit
    result = _pass(cluster, [_held(WAIT + HOUR)])
    (start,) = result.started
    assert placed_level(cluster, start.placement) == "unit" and _unit(cluster, start.placement) == {"su-3"}


def test_the_reservation_is_bounded_then_the_job_expands():
    for ago, starts in ((WAIT + RESERVED - 1, False), (WAIT + RESERVED, True)):
        cluster = _occupied(CROWDED)
        result = _pass(cluster, [_held(ago)])
        assert bool(result.started) == starts
        if starts:
            assert placed_level(cluster, result.started[0].placement) == "spine"
    # Off by default: the job expands when its wait runs out.
    assert Options.fabric_unit_reservation_s == 0.0
    cluster = _occupied(CROWDED)
    (start,) = schedule(
        cluster, DEPARTMENTS, _running(cluster), [_held(WAIT)], now=NOW, fabric_wait_s=WAIT
    ).started
    assert placed_level(cluster, start.placement) == "spine"


def test_a_wait_that_ran_out_while_the_job_could_not_start_is_not_spent():
    cluster = _occupied([18, 18, 18, 18, 18, 18, 18, 10])  # 8 free trays: 24 fit nowhere
    job = _held(WAIT + HOUR)
    result = schedule(
        cluster, DEPARTMENTS, _running(cluster), [job], now=NOW, fabric_wait_s=WAIT, fabric_wait_again=True
    )
    assert result.started == [] and result.fabric_held_since == {1: None}
    # Without the option its hold stays (and the job would span units when trays free up).
    result = schedule(cluster, DEPARTMENTS, _running(cluster), [job], now=NOW, fabric_wait_s=WAIT)
    assert result.fabric_held_since == {}
    # Held again when it next could start across units: a new wait from then.
    cluster = _occupied(CROWDED)
    again = schedule(
        cluster,
        DEPARTMENTS,
        _running(cluster),
        [replace(job, fabric_held_since=None)],
        now=NOW,
        fabric_wait_s=WAIT,
        fabric_wait_again=True,
    )
    assert again.started == [] and again.fabric_held_since == {1: NOW}


@settings(max_examples=60, deadline=None)
@given(
    occupied=st.lists(st.integers(0, 18), min_size=8, max_size=8),
    trays=st.integers(19, 36),
    held_ago=st.floats(0.0, 8 * HOUR),
    in_quota=st.booleans(),
)
def test_no_job_is_held_past_its_bound(occupied, trays, held_ago, in_quota):
    """Once its wait and its unit reservation have run out, a job places exactly as with no fabric wait at
    all (it expands as far as it must); before, it never starts across units."""
    job = replace(_held(held_ago, "llm" if in_quota else "research", trays * 4), id=7)
    departments = [Department("llm", 576), Department("research", 0)]

    def run(**options):
        cluster = _occupied(occupied)
        running = [RunningJob(j, "llm", 4, NOW - HOUR, NOW + HOUR) for j in sorted(cluster.jobs)]
        return cluster, schedule(cluster, departments, running, [job], now=NOW, **options)

    _, free = run(fabric_wait_s=0.0)
    cluster, result = run(fabric_wait_s=WAIT, fabric_unit_reservation_s=RESERVED, fabric_packing=True)
    if held_ago >= WAIT + RESERVED:
        assert [s.placement for s in result.started] == [s.placement for s in free.started]
    else:
        for start in result.started:
            assert placed_level(cluster, start.placement) == "unit"
