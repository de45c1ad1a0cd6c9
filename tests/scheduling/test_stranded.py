"""Stranded NVLink capacity (scheduling.engine.stranded): hand-built clusters with known fragments, drained
trays and partly used trays, and properties over random ones checked against the engine's own `place`."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.hardware import GPUS_PER_TRAY
from scheduling.engine.cluster import Cluster
from scheduling.engine.placement import ANY, PARTITION, RACK, Request, place
from scheduling.engine.stranded import CAUSES, DEDICATED, FRAGMENTS, RUNNING, UNAVAILABLE, stranded
from tests.scheduling.test_engine import cluster_of


def fill(c: Cluster, hosts: list[str], gpus: int = GPUS_PER_TRAY, job: int | None = None) -> None:
    """A running job on each named tray (`gpus` GPUs of it), one job per tray unless `job` is given."""
    if job is not None:
        c.allocate(job, [(c.host_index[h], gpus) for h in hosts])
        return
    for h in hosts:
        c.allocate(1000 + c.host_index[h], [(c.host_index[h], gpus)])


def rack(result, name: str):
    return next(r for r in result.racks if r.rack == name)


def test_free_trays_split_across_partitions_are_fragments():
    """Rack r1 carved 2x9: 5 free trays in each partition, a gang of 8 trays waits. No partition fits it;
    merging the rack's free trays would: all 40 free GPUs are stranded by fragments."""
    c = cluster_of({"r1": [9, 9]})
    fill(c, ["r1-t01", "r1-t02", "r1-t03", "r1-t04"], job=1)
    fill(c, ["r1-t10", "r1-t11", "r1-t12", "r1-t13"], job=2)
    result = stranded(c, [Request(32, PARTITION)])
    r1 = rack(result, "r1")
    assert r1.free_gpus == 40
    assert r1.stranded_gpus == 40
    assert r1.by_cause == {FRAGMENTS: 40, UNAVAILABLE: 0, RUNNING: 0, DEDICATED: 0}
    assert r1.largest_partition_gang == 20
    assert r1.largest_rack_gang == 40
    # A gang that fits one partition's five free trays uses them: nothing is stranded then.
    assert stranded(c, [Request(20, PARTITION)]).stranded_gpus == 0
    # A rack gang may span the partitions: the same 40 GPUs are usable by it.
    assert stranded(c, [Request(32, RACK)]).stranded_gpus == 0


def test_a_partition_smaller_than_every_waiting_gang_is_fragments_even_when_the_rack_is_busy():
    c = cluster_of({"r1": [6, 6, 6]})
    fill(c, [f"r1-t{i:02d}" for i in range(7, 19)])  # p2 and p3 run work; p1 (6 trays) is free
    result = stranded(c, [Request(32, PARTITION)])  # 8 trays: more than p1 has at all
    assert result.by_cause[FRAGMENTS] == 24 and result.stranded_gpus == 24


def test_a_drained_tray_keeps_the_partition_from_fitting():
    """p1 has 9 trays: 2 drained (capacity 0), 7 free. A gang of 8 trays would fit with them back."""
    c = cluster_of({"r1": [9, 9]})
    for host in ("r1-t01", "r1-t02"):
        c.set_capacity(c.host_index[host], 0)
    fill(c, [f"r1-t{i:02d}" for i in range(10, 19)])  # p2 is busy: no merge would fit either
    result = stranded(c, [Request(32, PARTITION)])
    assert result.free_gpus == 28
    assert result.by_cause == {FRAGMENTS: 0, UNAVAILABLE: 28, RUNNING: 0, DEDICATED: 0}


def test_running_work_in_the_partition_is_the_cause_when_it_would_fit_once_the_work_ends():
    c = cluster_of({"r1": [9, 9]})
    fill(c, ["r1-t01", "r1-t02"], job=1)
    fill(c, [f"r1-t{i:02d}" for i in range(10, 19)], job=2)
    result = stranded(c, [Request(32, PARTITION)])
    assert result.by_cause == {FRAGMENTS: 0, UNAVAILABLE: 0, RUNNING: 28, DEDICATED: 0}
    assert result.largest_partition_gang == 28 and result.largest_rack_gang == 28


def test_partly_used_and_unhealthy_trays_strand_what_no_small_job_fits():
    """Only multi-tray gangs wait: the free GPUs of a partly used tray are stranded by running work, those of
    a tray with an unhealthy GPU by unavailability; a waiting 2-GPU job uses both."""
    c = cluster_of({"r1": [2]})
    fill(c, ["r1-t01"], gpus=3)  # 1 GPU free beside running work
    c.set_capacity(c.host_index["r1-t02"], 3)  # one GPU unhealthy: 3 free, not a whole tray
    result = stranded(c, [Request(8, PARTITION)])
    assert result.free_gpus == 4
    assert result.by_cause == {FRAGMENTS: 0, UNAVAILABLE: 3, RUNNING: 1, DEDICATED: 0}
    assert result.largest_partition_gang == 3 and result.largest_rack_gang == 3
    mixed = stranded(c, [Request(8, PARTITION), Request(2, PARTITION)])
    assert mixed.by_cause == {FRAGMENTS: 0, UNAVAILABLE: 0, RUNNING: 1, DEDICATED: 0}


def test_unsettled_fabric_serves_small_jobs_only():
    c = cluster_of({"r1": [4]})
    c.set_fabric_ok(c.host_index["r1-t01"], False)
    gang = stranded(c, [Request(16, PARTITION)])
    assert gang.stranded_gpus == 16  # the gang needs all four trays; one is unsettled
    assert gang.by_cause[UNAVAILABLE] == 16  # 3 whole trays + 1 unsettled: back, it would fit
    assert stranded(c, [Request(4, PARTITION)]).stranded_gpus == 0


def test_dedicated_partitions_nobody_waiting_may_use_are_their_own_cause():
    c = cluster_of({"r1": [9, 9]}, owners={("r1", "p2"): "vision"})
    build = Request(8, PARTITION, "nlp")  # in quota, not borrowing: shared partitions only
    result = stranded(c, [build])
    assert result.by_cause == {FRAGMENTS: 0, UNAVAILABLE: 0, RUNNING: 0, DEDICATED: 36}
    # Borrowed work may use the dedicated partition too.
    assert stranded(c, [Request(8, PARTITION, "nlp", borrow=True)]).stranded_gpus == 0
    # vision's own gang that does not fit its 9 trays: fragments there, not "dedicated".
    own = stranded(c, [build, Request(40, PARTITION, "vision")])
    assert own.by_cause[DEDICATED] == 0 and own.by_cause[FRAGMENTS] == 36


def test_when_nothing_waits_nothing_is_stranded_and_the_largest_gangs_still_show():
    c = cluster_of({"r1": [9, 9], "r2": [18]})
    fill(c, ["r2-t01"], gpus=1)
    result = stranded(c, [])
    assert result.waiting_shapes == 0
    assert result.stranded_gpus == 0 and result.free_gpus == 2 * 72 - 1
    assert rack(result, "r1").largest_partition_gang == 36
    assert rack(result, "r1").largest_rack_gang == 72
    assert result.largest_partition_gang == 68  # r2's 17 whole free trays
    assert result.worst() == []


def test_the_fleet_summary_lists_the_worst_racks_first():
    c = cluster_of({"a": [9, 9], "b": [9, 9], "c": [18]})
    fill(c, ["a-t01", "a-t10"])  # a: 8 + 8 free trays, split
    fill(c, [f"b-t{i:02d}" for i in range(1, 15)])  # b: 4 free trays
    result = stranded(c, [Request(36, PARTITION), Request(72, PARTITION)])
    summary = result.as_dict(worst=2)
    assert [r["rack"] for r in summary["worst_racks"]] == ["a", "b"]
    assert summary["stranded_gpus"] == sum(summary["by_cause"].values()) == 64 + 16
    assert summary["racks_stranding"] == 2 and summary["racks"] == 3
    assert summary["largest_partition_gang"] == 72  # rack c: one free 18-tray partition


# --- properties ------------------------------------------------------------------------------------


def _next_size(gpus: int) -> int:
    """The next request size above `gpus` (1-4 GPUs, then whole trays)."""
    return gpus + 1 if gpus < GPUS_PER_TRAY else gpus + GPUS_PER_TRAY


def _random_cluster(data) -> Cluster:
    layouts = {
        "r1": data.draw(st.sampled_from([[9, 9], [6, 6, 6], [18], [4, 5, 9]])),
        "r2": data.draw(st.sampled_from([[9, 9], [2, 16], [18]])),
    }
    owners = {("r2", "p1"): "vision"} if data.draw(st.booleans()) else {}
    c = cluster_of(layouts, owners)
    for job in range(data.draw(st.integers(0, 20))):
        gpus = data.draw(st.sampled_from([1, 2, 3, 4, 8, 12, 20]))
        topology = data.draw(st.sampled_from([PARTITION, RACK, ANY]))
        placement = place(c, Request(gpus, topology, data.draw(st.sampled_from(["vision", "nlp"])), True))
        if placement is not None:
            c.allocate(job, placement)
    for t in data.draw(st.lists(st.integers(0, len(c) - 1), max_size=4)):
        used = c.tray_cap[t] - c.tray_free[t]
        c.set_capacity(t, data.draw(st.integers(used, GPUS_PER_TRAY)))
    for t in data.draw(st.lists(st.integers(0, len(c) - 1), max_size=2)):
        c.set_fabric_ok(t, False)
    return c


REQUESTS = st.builds(
    Request,
    st.sampled_from([1, 2, 3, 4, 8, 12, 16, 24, 36, 48, 72]),
    st.sampled_from([PARTITION, RACK, ANY]),
    st.sampled_from([None, "vision", "nlp"]),
    st.booleans(),
)


@pytest.mark.slow(reason="generated clusters, each checked against place: over 0.3 s on 2 cores")
@settings(max_examples=50, deadline=None)
@given(st.data(), st.lists(REQUESTS, max_size=6))
def test_the_figures_agree_with_place_on_any_cluster(data, requests):
    c = _random_cluster(data)
    result = stranded(c, requests)
    assert result.free_gpus == c.free_gpus
    for r in result.racks:
        assert 0 <= r.stranded_gpus <= r.free_gpus
        assert r.stranded_gpus == sum(r.by_cause[cause] for cause in CAUSES)
        assert r.largest_partition_gang <= r.largest_rack_gang <= r.free_gpus
    if not requests:
        assert result.stranded_gpus == 0
    elif result.free_gpus:
        # Some free GPU is usable exactly when some waiting request fits now (`place` decides fitting).
        fits = any(place(c, q) is not None for q in requests)
        assert (result.stranded_gpus < result.free_gpus) == fits
    # A gang of the largest size fits in one partition (by someone: borrowed work may use any); one larger
    # does not. The same in one rack.
    largest = result.largest_partition_gang
    if largest:
        assert place(c, Request(largest, PARTITION, None, borrow=True)) is not None
    assert place(c, Request(_next_size(largest), PARTITION, None, borrow=True)) is None
    biggest_rack = max(result.racks, key=lambda r: r.largest_rack_gang)
    r = c.rack_name.index(biggest_rack.rack)
    owner = next((c.part_owner[p] for p in c.rack_parts[r] if c.part_owner[p] is not None), None)
    if result.largest_rack_gang:
        assert place(c, Request(result.largest_rack_gang, RACK, owner, borrow=True)) is not None
    for department in (None, "vision"):
        assert place(c, Request(_next_size(result.largest_rack_gang), RACK, department, borrow=True)) is None


@pytest.mark.slow(reason="generated clusters, each checked against place rack by rack: over 0.3 s on 2 cores")
@settings(max_examples=40, deadline=None)
@given(st.data(), st.lists(REQUESTS.filter(lambda q: q.topology == PARTITION or q.small), max_size=5))
def test_each_rack_strands_all_its_free_gpus_exactly_when_no_waiting_job_fits_in_it(data, requests):
    """Per rack, with the other racks' trays held out of the engine's indexes (a reservation's way): a rack
    has a usable free GPU exactly when `place` fits some waiting request (one partition or one tray) in it,
    and its largest partition gang is what `place` fits there."""
    c = _random_cluster(data)
    result = stranded(c, requests)
    for r, name in enumerate(c.rack_name):
        figures = rack(result, name)
        others = [t for t in range(len(c)) if c.tray_rack[t] != r]
        c.hold(others)
        try:
            if requests and figures.free_gpus:
                fits = any(place(c, q) is not None for q in requests)
                assert (figures.stranded_gpus < figures.free_gpus) == fits, name
            largest = figures.largest_partition_gang
            if largest:
                assert place(c, Request(largest, PARTITION, None, borrow=True)) is not None
            assert place(c, Request(_next_size(largest), PARTITION, None, borrow=True)) is None
        finally:
            c.unhold(others)
