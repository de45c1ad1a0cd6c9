"""The wizard's check of Slurm 24.11's BlockSizes rule (integrations.plans.service._block_checker) reads each
partition's number of trays, not its 18 hostnames (issue 32): its verdict and sentence must be what the
renderer's `plan_topology` says for the same fleet with real hostnames, for any fleet."""

import pytest
from django.db import connection
from hypothesis import given, settings
from hypothesis import strategies as st

from core.blocks import BlockPartition, block_layout_error
from integrations.plans.service import _block_checker, preset_limits
from integrations.slurm.topology import SlurmBlock, plan_topology
from inventory.models import ComputeTray, NVLinkPartition, Rack
from inventory.planning import PRESETS, preset_layout

TRAYS_PER_RACK = 18


def _split(total: int):
    """A rack's partitions: sizes that sum to at most 18 trays."""
    return st.lists(st.integers(min_value=1, max_value=TRAYS_PER_RACK), min_size=1, max_size=6).map(
        lambda sizes: [s for i, s in enumerate(sizes) if sum(sizes[: i + 1]) <= total] or [1]
    )


fleets = st.lists(_split(TRAYS_PER_RACK), min_size=1, max_size=8)


def _by_topology(fleet) -> str | None:
    blocks = []
    for r, sizes in enumerate(fleet, 1):
        slot = 1
        for p, size in enumerate(sizes, 1):
            hosts = tuple(f"gb-r{r:02d}-t{slot + k:02d}" for k in range(size))
            blocks.append(SlurmBlock(f"gb-r{r:02d}-p{p}", f"gb-r{r:02d}", hosts))
            slot += size
    try:
        plan_topology(blocks)
    except ValueError as error:
        return str(error)
    return None


def _by_sizes(fleet) -> str | None:
    return block_layout_error(
        [
            BlockPartition(f"gb-r{r:02d}", f"gb-r{r:02d}-p{p}", size)
            for r, sizes in enumerate(fleet, 1)
            for p, size in enumerate(sizes, 1)
        ]
    )


@settings(max_examples=300, deadline=None)
@given(fleets)
def test_the_sizes_alone_give_the_topologys_verdict_and_sentence(fleet):
    assert _by_sizes(fleet) == _by_topology(fleet)


def carve(rack, sizes) -> None:
    """`rack` carved into partitions of these numbers of trays, in slot order (as a plan leaves it)."""
    ComputeTray.objects.filter(rack=rack).update(partition=None)
    NVLinkPartition.objects.filter(rack=rack).delete()
    slot = 1
    for clique, size in enumerate(sizes, start=1):
        partition = NVLinkPartition.objects.create(rack=rack, name=f"p{clique}", clique_id=clique)
        ComputeTray.objects.filter(rack=rack, slot__range=(slot, slot + size - 1)).update(partition=partition)
        slot += size


@pytest.mark.django_db
@pytest.mark.parametrize("elsewhere", [(9, 9), (3, 15), (6, 6, 6), (18,)])
def test_the_checker_on_the_database_agrees_with_the_topology_of_the_same_fleet(demo_inventory, elsewhere):
    """The other racks carved alike; each preset on the last rack is judged as plan_topology judges the whole
    fleet with that preset there (the hostnames from the database), and the wizard greys out exactly those."""
    *others, last = Rack.objects.order_by("name")
    for rack in others:
        carve(rack, elsewhere)
    checker = _block_checker(last)
    blocked = preset_limits(last).blocked
    hostnames = {t.slot: t.hostname for t in last.trays.all()}
    fleet: dict[tuple[str, str], list[str]] = {}
    for rack_name, partition, hostname in (
        ComputeTray.objects.filter(partition__isnull=False)
        .exclude(rack=last)
        .order_by("rack__name", "partition__name", "hostname")  # the checker's order of partitions
        .values_list("rack__name", "partition__name", "hostname")
    ):
        fleet.setdefault((rack_name, partition), []).append(hostname)
    verdicts = {}
    for preset in PRESETS:
        planned = {p.name: tuple(hostnames[s] for s in p.slots) for p in preset_layout(preset)}
        blocks = [SlurmBlock(f"{r}-{p}", r, tuple(h)) for (r, p), h in fleet.items()]
        blocks += [SlurmBlock(f"{last.name}-{p}", last.name, h) for p, h in planned.items() if h]
        try:
            plan_topology(blocks)
            expected = None
        except ValueError as error:
            expected = str(error)
        assert checker(planned) == expected, preset
        assert (preset in blocked) == (expected is not None), preset
        verdicts[preset] = expected is None
    # The layouts the rest of the fleet allows (3+15 already breaks the rule: 15 is not 3 times 2**k).
    allowed = {(9, 9): "2x9", (6, 6, 6): "3x6", (18,): "1x18", (3, 15): None}[elsewhere]
    assert (allowed is None and not any(verdicts.values())) or verdicts[allowed]
    assert not all(verdicts.values())


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the kept rows need PostgreSQL's change log")
@pytest.mark.django_db(transaction=True)
def test_the_other_racks_partitions_from_the_kept_rows_are_what_counting_every_tray_gives(
    demo_inventory, monkeypatch
):
    """What the check reads from the render's kept rows (each rack's partitions counted once while its rows
    are the same objects) is what the query counting every tray gives, as the fleet changes between checks."""
    from integrations import kept_rows
    from integrations import state as configstate
    from integrations.plans import service

    def counted(rack):
        with monkeypatch.context() as patched:
            patched.setattr(kept_rows, "kept", lambda: None)  # as a process that keeps no rows: the query
            return service.other_racks_partitions(rack)

    r01, r02, r03 = Rack.objects.order_by("name")[:3]
    configstate.forget_kept()
    assert kept_rows.kept() is None
    assert service.other_racks_partitions(r01) == counted(r01)  # nothing kept yet: the query
    configstate.build_state()  # a render keeps the rows
    assert kept_rows.kept() is not None
    for change in (
        lambda: carve(r02, (9, 9)),
        lambda: carve(r03, (3, 15)),
        lambda: ComputeTray.objects.filter(rack=r02, slot=1).update(partition=None),
        lambda: NVLinkPartition.objects.filter(rack=r03, name="p1").update(name="zz"),
        lambda: None,
    ):
        change()
        for rack in (r01, r02, r03):
            kept = service.other_racks_partitions(rack)
            assert kept == counted(rack)
            assert all(p.domain != rack.name for p in kept) and kept
    assert service._RACK_PARTITIONS  # it did read the kept rows
