"""integrations.state: each department's member GUIDs kept between renders and changed by the racks whose rows
changed (`_department_guids`, from each rack's `_rack_members`) give what walking every tray and sorting all
their GUIDs afresh gives, whatever the renders before."""

import sys
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from integrations import state
from integrations.kept_rows import RackRows, _PartitionRow, _RackRow, _TrayRow

GUIDS = [f"0x{n:016x}" for n in range(12)]

members = st.dictionaries(  # one rack's members: department -> its member trays' GUIDs there
    st.integers(1, 4), st.lists(st.sampled_from(GUIDS), max_size=4), max_size=3
)
renders = st.lists(  # each render: rack id -> its members, and which racks keep last render's object
    st.tuples(st.dictionaries(st.integers(0, 12), members, max_size=10), st.sets(st.integers(0, 12))),
    min_size=1,
    max_size=8,
)


@pytest.fixture(autouse=True)
def _nothing_kept():
    state.forget_kept()
    yield
    state.forget_kept()


def fresh(racks: dict[int, dict[int, list[str]]]) -> dict[int, tuple[str, ...]]:
    """Every rack's GUIDs of each department, counted and sorted afresh."""
    found: dict[int, set[str]] = {}
    for rack_members in racks.values():
        for department, guids in rack_members.items():
            found.setdefault(department, set()).update(guids)
    return {department: tuple(sorted(guids)) for department, guids in found.items()}


def given_out(racks) -> dict[int, tuple[str, ...]]:
    """What `_department_guids` gives, departments left without GUIDs dropped (as `_tenants` reads it)."""
    return {d: guids for d, guids in state._department_guids(racks.items()).items() if guids}


@given(renders)
def test_kept_member_guids_are_the_sorted_distinct_guids_of_every_racks_members(renders):
    state.forget_kept()
    last: dict[int, dict[int, list[str]]] = {}
    for drawn, keep in renders:
        # A rack whose rows did not change gives the very members it gave last time (its kept pieces); a
        # changed one a new object, whatever its contents.
        racks = {
            r: last[r] if r in keep and r in last else {d: list(g) for d, g in m.items()}
            for r, m in drawn.items()
        }
        assert given_out(racks) == {d: g for d, g in fresh(racks).items() if g}
        last = racks


def test_a_render_changing_one_rack_updates_the_kept_guids_in_place():
    """Not counted and sorted afresh: the kept order is the same list, changed where the rack changed; a
    department no rack changed gets the very tuple it got last time."""
    racks = {r: {7: [f"0x{r * 10 + t:016x}" for t in range(9)], 8: [f"0x{r + 5000:016x}"]} for r in range(40)}
    assert given_out(racks) == fresh(racks)
    ordered, other = state._GUIDS[7].ordered, given_out(racks)[8]
    racks[3] = {7: ["0x" + "f" * 16, "0x0000000000000031"]}  # one rack re-carved: tray GUIDs gone and new
    racks[41] = {7: ["0x0000000000000000"]}  # and a new rack
    del racks[5]  # and one gone
    racks[6] = dict(racks[6])  # read again, the same contents
    kept8 = {r: m for r, m in racks.items() if r not in (3, 5, 41)}
    assert given_out(racks) == fresh(racks)
    assert state._GUIDS[7].ordered is ordered  # updated, not made again
    assert given_out(racks)[8] == fresh(kept8)[8] != other  # rack 3 and 5 left department 8


def test_many_racks_changed_count_afresh_with_the_same_result():
    racks = {r: {1: [f"0x{r:016x}"]} for r in range(8)}
    assert given_out(racks) == fresh(racks)
    ordered = state._GUIDS[1].ordered
    racks = {r: {1: [f"0x{r + 100:016x}"], 2: [f"0x{r:016x}"]} for r in range(8)}
    assert given_out(racks) == fresh(racks)
    assert state._GUIDS[1].ordered is not ordered


def test_a_racks_members_are_its_owned_and_running_trays_each_once():
    """Department 1 owns partition 10 (trays 1 and 2) and runs on tray 2 and 3; department 2 runs on tray 1;
    tray 4 is in a shared partition and idle; a malformed GUID was left out by `_valid_port_guids`."""
    rack = _RackRow(1, "gb-r01", None)
    partitions = (_PartitionRow(10, 1, "p1", 1, 1, ""), _PartitionRow(11, 1, "p2", 2, None, ""))
    trays = tuple(
        _TrayRow(t, 1, t, f"gb-r01-t{t:02d}", 10 if t <= 2 else 11, [f"0x{t:016x}", f"0x{t + 100:016x}"])
        for t in range(1, 5)
    )
    part = RackRows(rack, partitions, trays, frozenset({(1, 2), (1, 3), (2, 1)}))
    problems: list[str] = []
    guids = state._valid_port_guids(trays, problems)
    assert state._rack_members(part, guids) == {
        1: [f"0x{1:016x}", f"0x{101:016x}", f"0x{2:016x}", f"0x{102:016x}", f"0x{3:016x}", f"0x{103:016x}"],
        2: [f"0x{1:016x}", f"0x{101:016x}"],
    }


def test_renders_in_two_threads_each_get_their_racks_guids():
    """Renders run in threads (gunicorn's, Celery's pool) and change the kept lists in place: one at once."""
    base = {r: {7: [f"0x{r:016x}", f"0x{r + 1000:016x}"]} for r in range(40)}
    other = dict(base)
    for r in range(5):  # 5 of 40 racks differ: updated in place, not counted afresh
        other[r] = {7: [f"0x{r + 2000:016x}"]}
    renders = [base, other]
    expected = [fresh(racks)[7] for racks in renders]
    wrong = []

    def render(start: int) -> None:
        for i in range(400):
            which = (start + i) % 2
            if state._department_guids(renders[which].items())[7] != expected[which]:
                wrong.append(which)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as they can
    try:
        threads = [threading.Thread(target=render, args=(n,)) for n in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    assert wrong == []
