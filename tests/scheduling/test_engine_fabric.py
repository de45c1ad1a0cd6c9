"""Placement that expands outward only when necessary (issue 33): a job that needs more than one rack takes
trays inside one scalable unit when one has room (the unit with the fewest free trays that fit), then one
spine group, then anywhere; the reason names the level it got and why; a bounded fabric wait keeps a job
that could fit one unit waiting for one; a cluster without a fabric places exactly as before."""

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.fabric import Fabric
from core.hardware import GPUS_PER_TRAY
from scheduling.engine.cluster import Cluster, TraySpec
from scheduling.engine.placement import (
    ANY,
    RACK,
    Request,
    explain,
    place,
    placed_level,
    why_not,
)
from scheduling.engine.scheduler import Department, PendingJob, RunningJob, schedule

RACK_TRAYS = 18


def fabric_of(units: dict[str, tuple[str, list[str]]]) -> Fabric:
    """unit -> (its spine group, its racks)."""
    return Fabric(racks={rack: (spine, unit) for unit, (spine, racks) in units.items() for rack in racks})


def cluster_on(fabric: Fabric | None, racks: list[str], sizes=(9, 9)) -> Cluster:
    specs = []
    for rack in racks:
        slot = 0
        for number, size in enumerate(sizes, 1):
            for _ in range(size):
                slot += 1
                specs.append(TraySpec(f"{rack}-t{slot:02d}", rack, f"p{number}"))
    return Cluster(specs, fabric)


def busy(cluster: Cluster, job_id: int, rack: str, trays: int) -> None:
    """A running job on the first `trays` free trays of `rack`."""
    free = [
        t
        for t in range(len(cluster))
        if cluster.rack_name[cluster.tray_rack[t]] == rack and cluster.is_whole(t)
    ]
    cluster.allocate(job_id, [(t, GPUS_PER_TRAY) for t in free[:trays]])


def racks_of(cluster: Cluster, placement) -> set[str]:
    return {cluster.rack_name[cluster.tray_rack[t]] for t, _ in placement}


EIGHT = [f"r{i}" for i in range(1, 9)]
# Two spine groups of two units of two racks each: su-1 {r1, r2}, su-2 {r3, r4} under a; su-3, su-4 under b.
FOUR_UNITS = fabric_of(
    {
        "su-1": ("a", ["r1", "r2"]),
        "su-2": ("a", ["r3", "r4"]),
        "su-3": ("b", ["r5", "r6"]),
        "su-4": ("b", ["r7", "r8"]),
    }
)


def test_a_two_rack_job_goes_inside_the_unit_that_fits_it_best_and_says_so():
    cluster = cluster_on(FOUR_UNITS, EIGHT)
    busy(cluster, 1, "r1", 18)  # su-1: 18 free trays
    busy(cluster, 2, "r3", 6)  # su-2: 30 free trays, the fewest that fit 24
    request = Request(96, ANY)
    placement = place(cluster, request)
    assert racks_of(cluster, placement) == {"r3", "r4"}
    assert placed_level(cluster, placement) == "unit"
    assert explain(cluster, request, placement) == (
        "no rack had 24 free trays, so across 2 racks in scalable unit su-2, the unit with the fewest free "
        "trays that fit (30): larger units stay whole"
    )


def test_no_unit_with_room_takes_one_spine_group_and_says_no_unit_had_the_gpus():
    cluster = cluster_on(FOUR_UNITS, EIGHT)
    for job, rack in enumerate(("r1", "r3", "r5", "r7"), 1):
        busy(cluster, job, rack, 12)  # every unit: 6 + 18 = 24 free trays
    busy(cluster, 9, "r8", 6)  # su-4: 12 + 6 ... spine b: 24 + 18 = 42 free, spine a: 48
    request = Request(128, ANY)  # 32 trays: no unit has them
    placement = place(cluster, request)
    assert placed_level(cluster, placement) == "spine"
    assert racks_of(cluster, placement) <= {"r5", "r6", "r7", "r8"}  # spine b: the fewest that fit
    assert explain(cluster, request, placement) == (
        "no scalable unit had 128 free GPUs, so across 2 scalable units of spine group b, the spine group "
        "with the fewest free trays that fit (42)"
    )


def test_no_spine_group_with_room_spans_them_and_says_none_had_the_gpus():
    cluster = cluster_on(FOUR_UNITS, EIGHT)
    request = Request(96 * 4, ANY)  # 96 trays: more than a spine group's 72
    placement = place(cluster, request)
    assert placed_level(cluster, placement) is None
    assert explain(cluster, request, placement) == (
        "no spine group had 384 free GPUs, so across 2 spine groups, the largest free blocks first"
    )


def test_a_job_held_inside_a_unit_waits_while_none_has_room_and_the_reason_says_so():
    cluster = cluster_on(FOUR_UNITS, EIGHT)
    for job, rack in enumerate(EIGHT, 1):
        busy(cluster, job, rack, 8)  # every rack 10 free trays, every unit 20
    request = Request(96, ANY, within="unit")
    assert place(cluster, request) is None
    assert why_not(cluster, request) == (
        "no scalable unit has 24 free trays (the most in one is 20): it waits for one rather than spanning "
        "units"
    )
    # Without the hold it expands to one spine group at once.
    placement = place(cluster, Request(96, ANY))
    assert placed_level(cluster, placement) == "spine"


def test_jobs_that_fit_a_partition_or_a_rack_are_placed_as_without_a_fabric():
    for gpus, topology in ((36, ANY), (72, RACK), (72, ANY), (8, ANY), (2, ANY)):
        flat, fabric = cluster_on(None, EIGHT), cluster_on(FOUR_UNITS, EIGHT)
        for c in (flat, fabric):
            busy(c, 1, "r1", 5)
        request = Request(gpus, topology)
        assert place(flat, request) == place(fabric, request)
        assert explain(flat, request, place(flat, request)) == explain(
            fabric, request, place(fabric, request)
        )


def test_racks_the_fabric_does_not_know_are_used_last_and_the_reason_stays_the_flat_one():
    fabric = fabric_of({"su-1": ("a", ["r1", "r2"])})
    cluster = cluster_on(fabric, ["r1", "r2", "r3"])
    busy(cluster, 1, "r1", 10)
    request = Request(112, ANY)  # 28 trays: su-1 has 26
    placement = place(cluster, request)
    assert "r3" in racks_of(cluster, placement)
    assert placed_level(cluster, placement) is None
    assert explain(cluster, request, placement).startswith("no rack had 28 free trays, so across ")


def _group_free(cluster: Cluster, depth: int, owners) -> dict[int, int]:
    out: dict[int, int] = {}
    for p, groups in enumerate(cluster.part_groups):
        if groups and cluster.part_owner[p] in owners and p in cluster.rack_parts[cluster.part_rack[p]]:
            out[groups[depth]] = out.get(groups[depth], 0) + cluster.part_whole[p]
    return out


@settings(max_examples=80, deadline=None)
@given(
    units=st.integers(1, 4),
    per_unit=st.integers(1, 3),
    spines=st.sampled_from([1, 2]),
    occupied=st.lists(st.integers(0, 17), min_size=12, max_size=12),
    trays=st.integers(2, 60),
    seed=st.integers(0, 1000),
)
def test_never_a_wider_level_than_needed_and_the_indexes_stay_exact(
    units, per_unit, spines, occupied, trays, seed
):
    """At decision time: a job that fits one rack stays on one rack; else, when a unit has room, it lands
    inside one unit; else, when a spine group has room, inside one spine group. And the per-group counts the
    engine reads equal a recount after allocations and releases."""
    units = units if units % spines == 0 else spines
    racks = [f"r{i}" for i in range(1, units * per_unit + 1)]
    fabric = Fabric(
        racks={
            rack: (f"s{(i // per_unit) * spines // units}", f"u{i // per_unit}")
            for i, rack in enumerate(racks)
        }
    )
    cluster = cluster_on(fabric, racks)
    for job, (rack, n) in enumerate(zip(racks, occupied, strict=False), 1):
        if n:
            busy(cluster, job, rack, n)
    rng = random.Random(seed)
    for job in rng.sample(sorted(cluster.jobs), k=len(cluster.jobs) // 3):
        cluster.release(job)
    owners = cluster.usable_owners(None)
    for depth in range(2):
        recount = _group_free(cluster, depth, owners)
        assert {g: n for g, n in enumerate(cluster.group_whole[None][depth]) if n} == {
            g: n for g, n in recount.items() if n
        }
    request = Request(trays * GPUS_PER_TRAY, ANY)
    placement = place(cluster, request)
    free = sum(cluster.part_whole[p] for p in range(len(cluster.part_name)))
    if free < trays:
        assert placement is None
        return
    assert placement is not None and len(placement) == trays
    level = placed_level(cluster, placement)
    rack_free = [sum(cluster.part_whole[p] for p in parts) for parts in cluster.rack_parts]
    if max(rack_free) >= trays:
        assert level == RACK
    elif max(_group_free(cluster, 1, owners).values()) >= trays:
        assert level == "unit"
    elif max(_group_free(cluster, 0, owners).values()) >= trays:
        assert level in ("unit", "spine")
    cluster.allocate(999, placement)
    for depth in range(2):
        assert [n for n in cluster.group_whole[None][depth]] == [
            _group_free(cluster, depth, owners).get(g, 0) for g in range(len(cluster.group_names[depth]))
        ]


@settings(max_examples=40, deadline=None)
@given(occupied=st.lists(st.integers(0, 18), min_size=8, max_size=8), trays=st.integers(1, 80))
def test_an_empty_fabric_places_exactly_as_no_fabric(occupied, trays):
    flat, empty = cluster_on(None, EIGHT), cluster_on(Fabric(), EIGHT)
    for c in (flat, empty):
        for job, (rack, n) in enumerate(zip(EIGHT, occupied, strict=True), 1):
            if n:
                busy(c, job, rack, n)
    request = Request(trays * GPUS_PER_TRAY if trays > 1 else 4, ANY)
    assert place(flat, request) == place(empty, request)


# --- the pass: the bounded fabric wait ---------------------------------------------------------------


def _crowded() -> Cluster:
    cluster = cluster_on(FOUR_UNITS, EIGHT)
    for job, rack in enumerate(EIGHT, 1001):
        busy(cluster, job, rack, 8)  # every unit 20 free trays: a 24-tray job fits only across units
    return cluster


def test_a_job_that_could_fit_one_unit_waits_for_one_up_to_the_bound_then_expands():
    """Held at its first pass (it could start across units there): the wait counts from then."""
    job = PendingJob(1, "research", 96, ANY, submitted_at=0.0)
    departments = [Department("research", 576)]
    held = schedule(_crowded(), departments, [], [job], now=100.0, fabric_wait_s=3600.0, max_reservations=0)
    assert held.started == [] and held.fabric_held_since == {1: 100.0}
    assert held.waiting[1] == (
        "waiting: no scalable unit has 24 free trays (the most in one is 20): it waits for one rather than "
        "spanning units; waiting for one scalable unit (since 1970-01-01 00:01 UTC, until 1970-01-01 01:01 "
        "UTC: the fabric wait)"
    )
    job = replace(job, fabric_held_since=100.0)
    waited = schedule(_crowded(), departments, [], [job], now=3699.0, fabric_wait_s=3600.0)
    assert waited.started == [] and waited.fabric_held_since == {}  # reported once: the caller keeps it
    cluster = _crowded()
    expanded = schedule(cluster, departments, [], [job], now=3700.0, fabric_wait_s=3600.0)
    (start,) = expanded.started
    assert placed_level(cluster, start.placement) == "spine"
    assert start.why.startswith(
        "no scalable unit had 96 free GPUs, so across 2 scalable units of spine group"
    )
    # No wait: it expands at once; by default it waits 2 hours from its hold.
    (start,) = schedule(_crowded(), departments, [], [job], now=100.0, fabric_wait_s=0.0).started
    assert len(start.placement) == 24
    assert schedule(_crowded(), departments, [], [job], now=7299.0).started == []
    assert len(schedule(_crowded(), departments, [], [job], now=7300.0).started) == 1


def test_a_job_larger_than_any_unit_never_waits_for_one():
    job = PendingJob(1, "research", 192, ANY, submitted_at=0.0)  # 48 trays: more than a unit's 36
    (start,) = schedule(
        _crowded(), [Department("research", 576)], [], [job], now=0.0, fabric_wait_s=86400.0
    ).started
    assert len(start.placement) == 48


def test_a_waiting_job_gets_its_reservation_inside_one_unit():
    job = PendingJob(1, "research", 96, ANY, submitted_at=0.0)
    cluster = _crowded()
    running = [RunningJob(j, "research", 32, 0.0, 7200.0 + j) for j in sorted(cluster.jobs)]
    result = schedule(cluster, [Department("research", 576)], running, [job], now=10.0, fabric_wait_s=3600.0)
    assert result.started == []
    (reservation,) = result.reservations
    units = {FOUR_UNITS.group(cluster.rack_name[cluster.tray_rack[t]], "unit") for t in reservation.trays}
    assert len(units) == 1 and len(reservation.trays) == 24


@pytest.mark.parametrize("wait", [0.0, 3600.0])
def test_a_fabric_less_cluster_ignores_the_fabric_wait(wait):
    cluster = cluster_on(None, EIGHT)
    for job, rack in enumerate(EIGHT, 1001):
        busy(cluster, job, rack, 8)
    (start,) = schedule(
        cluster,
        [Department("research", 576)],
        [],
        [PendingJob(1, "research", 96, ANY)],
        now=0.0,
        fabric_wait_s=wait,
    ).started
    assert start.why.startswith("no rack had 24 free trays, so across 3 racks")


def _running(cluster: Cluster, ends: dict[int, float]) -> list[RunningJob]:
    return [RunningJob(j, "research", 32, 0.0, ends.get(j, 100_000.0)) for j in sorted(cluster.jobs)]


@pytest.mark.parametrize(("time_limit", "starts"), [(3600.0, False), (1000.0, True)])
def test_a_job_waits_for_a_unit_only_when_one_frees_up_sooner_than_spanning_would_cost_it(time_limit, starts):
    """su-1 has 20 free trays and gets 28 when job 1001 ends in 600 s. Spanning units costs a 1-hour job
    0.25 h = 900 s > 600 s: it waits for su-1; a 1,000 s job would lose only 250 s: it expands now."""
    cluster = _crowded()
    job = PendingJob(1, "research", 96, ANY, submitted_at=0.0, time_limit_s=time_limit)
    result = schedule(
        cluster,
        [Department("research", 576)],
        _running(cluster, {1001: 600.0}),
        [job],
        now=0.0,
        fabric_wait_s=86400.0,
        fabric_wait_slowdown=1.25,
    )
    if starts:
        (start,) = result.started
        assert placed_level(cluster, start.placement) == "spine"
    else:
        assert result.started == []
        (reservation,) = result.reservations
        assert reservation.start_at == 600.0
        assert {cluster.rack_name[cluster.tray_rack[t]] for t in reservation.trays} <= {"r1", "r2"}


@pytest.mark.parametrize("more", [0, 1])
def test_jobs_waiting_inside_a_unit_may_get_reservations_of_their_own(more):
    cluster = _crowded()
    job = PendingJob(1, "research", 96, ANY, submitted_at=0.0)
    result = schedule(
        cluster,
        [Department("research", 576)],
        _running(cluster, {}),
        [job],
        now=0.0,
        fabric_wait_s=3600.0,
        max_reservations=0,
        fabric_reservations=more,
    )
    assert result.started == [] and len(result.reservations) == more


def test_a_cluster_short_of_trays_as_a_whole_gives_the_ordinary_reason_not_the_fabric_wait():
    """Spanning units would not help: the reason is the cluster's, as without a fabric."""
    cluster = cluster_on(FOUR_UNITS, EIGHT)
    for job, rack in enumerate(EIGHT, 1):
        busy(cluster, job, rack, 18 if rack not in ("r1", "r3") else 9)  # 9 + 9 = 18 free trays in all
    request = Request(80, ANY, within="unit")  # 20 trays
    assert place(cluster, request) is None
    assert why_not(cluster, request) == "20 whole trays are needed and 18 are free"
    job = PendingJob(1, "research", 80, ANY, submitted_at=0.0)
    departments = [Department("research", 576)]
    result = schedule(cluster, departments, [], [job], now=100.0, fabric_wait_s=3600.0, max_reservations=0)
    assert result.started == [] and result.fabric_held_since == {}  # never held: it could not span either
    assert result.waiting[1] == "waiting: 20 whole trays are needed and 18 are free"
