"""The compute fabric (issue 33) in the Kubernetes objects: Topograph v1 fabric tier labels on the nodes and
the Kueue Topology's levels above the NVLink domain (pure; validated against the packaged Kueue CRDs with
their CEL rules). The real API server takes them in test_target_fabric.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.fabric import Fabric
from integrations.kubernetes import render as r
from integrations.kubernetes import validate as v
from tests.integrations.kubernetes.test_render import INFERENCE, NFS, inventory

FABRIC = Fabric(racks={"gb-r01": ("spine-a", "su-1"), "gb-r02": ("spine-a", "su-2")})
# The Kueue Topology's levels with a two-level fabric, coarsest first.
LEVELS = [
    "fabric.topograph.run/tier-1",
    "fabric.topograph.run/tier-0",
    r.DOMAIN_LABEL,
    r.SUB_DOMAIN_LABEL,
    r.HOSTNAME_LABEL,
]


def test_nodes_get_topograph_tier_labels_tier_0_closest():
    labels = r.node_labels(inventory(), fabric=FABRIC)
    assert {k: v for k, v in labels["gb-r01-t01"].items() if k.startswith("fabric.")} == {
        "fabric.topograph.run/tier-1": "spine-a",
        "fabric.topograph.run/tier-0": "su-1",
    }
    assert labels["gb-r02-t10"]["fabric.topograph.run/tier-0"] == "su-2"
    # Without a fabric nothing changes.
    assert r.node_labels(inventory(), fabric=Fabric()) == r.node_labels(inventory())


def test_topology_levels_put_the_fabric_above_the_nvlink_domain():
    assert [level["nodeLabel"] for level in r.topology(fabric=FABRIC)["spec"]["levels"]] == LEVELS
    assert r.topology(fabric=Fabric()) == r.topology()


def test_the_label_key_is_configurable_like_topograph_releases_name_it():
    older = "network.topology.nvidia.com/tier-{tier}"
    labels = r.node_labels(inventory(), fabric=FABRIC, fabric_label=older)["gb-r01-t01"]
    assert labels["network.topology.nvidia.com/tier-0"] == "su-1"
    assert not any(k.startswith("fabric.topograph.run/") for k in labels)
    levels = r.topology(fabric=FABRIC, fabric_label=older)["spec"]["levels"]
    assert levels[0] == {"nodeLabel": "network.topology.nvidia.com/tier-1"}
    for bad, message in (
        ("fabric.topograph.run/tier", "must hold"),
        ("bad key/{tier}/x", "not a Kubernetes"),
    ):
        with pytest.raises(ValueError, match=message):
            r.fabric_tier_keys(FABRIC, bad)


def test_racks_outside_the_fabric_leave_the_topology_aware_pool():
    """Kueue's TAS assumes every node it places on carries every level's label (its topology_aware_
    scheduling concept page): a rack the fabric does not know stays labelled but out of the shared pool."""
    partial = Fabric(racks={"gb-r01": ("spine-a", "su-1")})
    labels = r.node_labels(inventory(), fabric=partial)
    assert labels["gb-r01-t01"][r.POOL_LABEL] == r.DEFAULT_FLAVOR
    assert r.POOL_LABEL not in labels["gb-r02-t01"]
    assert not any(k.startswith("fabric.") for k in labels["gb-r02-t01"])
    assert r.DOMAIN_LABEL in labels["gb-r02-t01"]


def test_group_names_that_are_no_label_values_are_hashed_like_topograph():
    odd = Fabric(racks={"gb-r01": ("spine A/1", "u" * 70), "gb-r02": ("s", "su-2")})
    labels = r.node_labels(inventory(), fabric=odd)["gb-r01-t01"]
    assert labels["fabric.topograph.run/tier-1"] == f"x{r.fnv1a_64(b'spine A/1'):x}"
    assert labels["fabric.topograph.run/tier-0"] == r.topograph_label_value("u" * 70)


def test_every_object_with_a_fabric_validates():
    objects = r.desired_objects(inventory(), [INFERENCE], nfs_server=NFS, fabric=FABRIC)
    assert v.validate_all(objects) == []


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 13),
    st.dictionaries(
        st.sampled_from(["gb-r01", "gb-r02"]), st.text(min_size=1, max_size=80), min_size=1, max_size=2
    ),
)
@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_random_fabrics_give_valid_labels_and_a_valid_topology(depth, leaf_names):
    levels = tuple(f"level{n}" for n in range(depth))
    fabric = Fabric(
        levels=levels, racks={rack: ("top",) * (depth - 1) + (name,) for rack, name in leaf_names.items()}
    )
    objects = r.desired_objects(inventory(), [], nfs_server=NFS, fabric=fabric)
    assert v.validate_all([o for o in objects if o["kind"] in ("Node", "Topology")]) == []
    topology = next(o for o in objects if o["kind"] == "Topology")
    keys = [level["nodeLabel"] for level in topology["spec"]["levels"]]
    assert keys[:depth] == [f"fabric.topograph.run/tier-{t}" for t in range(depth - 1, -1, -1)]
    for node in (o for o in objects if o["kind"] == "Node"):
        labels = node["metadata"]["labels"]
        rack = labels[r.RACK_LABEL]
        # A node of a rack in the fabric has every level's label; one outside has none and is not pooled.
        assert all(k in labels for k in keys[:depth]) == (rack in fabric.racks)
        assert (r.POOL_LABEL in labels) <= (rack in fabric.racks)


def test_a_fabric_too_deep_for_kueue_is_refused():
    deep = Fabric(levels=tuple(f"l{n}" for n in range(14)), racks={"gb-r01": tuple("x" * 14)})
    with pytest.raises(ValueError, match="more than 16"):
        r.topology(fabric=deep)
