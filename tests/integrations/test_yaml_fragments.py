"""The Kubernetes files assembled from per-rack fragments kept by content (integrations.state.YamlFragments,
issue 32) are the text of rendering every object at once, whatever the objects and whatever changed
between two renders; after a one-rack change only that rack's fragments are rendered again."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from integrations.kubernetes.render import RACK_LABEL, node_object
from integrations.state import YamlFragments, _to_yaml, assembled_yaml, rack_runs

RACKS = [f"gb-r{n:02d}" for n in range(1, 6)]
VALUE = st.text(alphabet=string.ascii_letters + string.digits + "-._:\n '\"yes", max_size=12)
LABELS = st.dictionaries(st.sampled_from(["a", "b/c", "yes", "0x1", "on"]), VALUE, max_size=3)


@st.composite
def fleets(draw):
    """Node objects in hostname order (each with its rack's label) and a few objects without a rack."""
    objects = []
    for rack in RACKS:
        for slot in range(1, draw(st.integers(0, 4)) + 1):
            labels = {RACK_LABEL: rack, **draw(LABELS)}
            objects.append(node_object(f"{rack}-t{slot:02d}", labels))
    others = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"ns-{n}", "labels": draw(LABELS)}}
        for n in range(draw(st.integers(0, 2)))
    ]
    at = draw(st.integers(0, len(objects)))
    return objects[:at] + others + objects[at:]


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=30, deadline=None)
@given(first=fleets(), second=fleets())
def test_assembled_files_are_the_whole_render_before_and_after_any_change(first, second):
    fragments = YamlFragments(max_bytes=10_000_000)
    assert assembled_yaml(first, fragments) == _to_yaml(first)
    assert assembled_yaml(second, fragments) == _to_yaml(second)  # with the first's fragments kept
    assert assembled_yaml(first, fragments) == _to_yaml(first)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=30, deadline=None)
@given(fleet=fleets(), bytes_kept=st.integers(0, 400))
def test_a_small_budget_lets_fragments_go_but_never_changes_the_text(fleet, bytes_kept):
    fragments = YamlFragments(max_bytes=bytes_kept)
    for _ in range(2):
        assert assembled_yaml(fleet, fragments) == _to_yaml(fleet)
    assert fragments._bytes <= bytes_kept


def test_a_one_rack_change_renders_that_racks_fragment_alone():
    fleet = [
        node_object(f"{rack}-t{slot:02d}", {RACK_LABEL: rack, "rackplane.io/nvlink-partition": "default"})
        for rack in RACKS
        for slot in range(1, 19)
    ]
    fragments = YamlFragments(max_bytes=10_000_000)
    assembled_yaml(fleet, fragments)
    assert (fragments.misses, fragments.hits) == (len(RACKS), 0)
    changed = [
        node_object(o["metadata"]["name"], {**o["metadata"]["labels"], "rackplane.io/nvlink-partition": "p1"})
        if o["metadata"]["labels"][RACK_LABEL] == "gb-r03"
        else o
        for o in fleet
    ]
    assert assembled_yaml(changed, fragments) == _to_yaml(changed)
    assert (fragments.misses, fragments.hits) == (len(RACKS) + 1, len(RACKS) - 1)
    assert [len(run) for run in rack_runs(changed)] == [18] * len(RACKS)
