"""integrations.state._member_guids: a department's member trays' GUIDs kept between renders and updated by
the trays that changed give what sorting them all afresh gives, whatever the renders before."""

import sys
import threading

from hypothesis import given
from hypothesis import strategies as st

from integrations import state

GUIDS = [f"0x{n:016x}" for n in range(12)]

renders = st.lists(  # each render: tray -> its GUIDs (a few trays share some), and the member trays
    st.tuples(
        st.dictionaries(st.integers(0, 30), st.lists(st.sampled_from(GUIDS), max_size=3), max_size=25),
        st.sets(st.integers(0, 35), max_size=30),
    ),
    min_size=1,
    max_size=8,
)


@given(renders)
def test_kept_member_guids_are_the_sorted_distinct_guids_of_the_members(renders):
    state._GUIDS.clear()
    try:
        for guids_of_tray, members in renders:
            # A render's lists are new objects with the same contents for the trays that did not change.
            given_now = {t: list(guids) for t, guids in guids_of_tray.items()}
            expected = tuple(sorted({g for t in members for g in given_now.get(t, ())}))
            assert state._member_guids(7, members, given_now) == expected
    finally:
        state._GUIDS.clear()


def test_a_render_changing_few_trays_updates_the_kept_guids_in_place():
    """Not counted and sorted afresh: the kept order is the same list, changed where the trays changed."""
    state._GUIDS.clear()
    try:
        guids = {t: [f"0x{t:016x}"] for t in range(100)}
        assert state._member_guids(7, set(range(100)), guids) == tuple(f"0x{t:016x}" for t in range(100))
        ordered = state._GUIDS[7].ordered
        members = set(range(1, 100)) | {150}
        guids[150] = ["0x" + "f" * 16]
        guids[5] = ["0x0000000000000005", "0x00000000000000aa"]
        expected = tuple(sorted({g for t in members for g in guids[t]}))
        assert state._member_guids(7, members, guids) == expected
        assert state._GUIDS[7].ordered is ordered  # updated, not made again
    finally:
        state._GUIDS.clear()


def test_renders_in_two_threads_each_get_their_members_guids():
    """Renders run in threads (gunicorn's, Celery's pool) and change the kept lists in place: one at once."""
    state._GUIDS.clear()
    guids = {t: [f"0x{t:016x}", f"0x{t + 1000:016x}"] for t in range(400)}
    members = [set(range(0, 300)), set(range(20, 320))]  # 40 of 300 trays change: updated in place
    expected = [tuple(sorted({g for t in m for g in guids[t]})) for m in members]
    wrong = []

    def render(start: int) -> None:
        for i in range(400):
            which = (start + i) % 2
            if state._member_guids(7, members[which], guids) != expected[which]:
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
        state._GUIDS.clear()
    assert wrong == []
