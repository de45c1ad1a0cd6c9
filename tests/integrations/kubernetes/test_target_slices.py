"""A rack's slice applied to the real API server (issue 32): each of the rack's nodes is one server-side apply
of its labels (field manager rackplane), sent only when they differ; another manager's labels stay; nodes and
objects of other racks are neither read nor written. The testbed is tests/integrations/kube_testbed.py (the
proxy records every request Rackplane sent)."""

from __future__ import annotations

import dataclasses

import pytest

from integrations.kubernetes import render as r
from tests.integrations.kubernetes.test_render import INFERENCE
from tests.integrations.kubernetes.test_target import connect, live_labels, register_nodes, state

pytestmark = pytest.mark.integration

TEAM_LABEL = "team.example.com/owner"


def one_rack(inventory: r.InventoryState, rack: str) -> r.InventoryState:
    """The inventory's part for one rack (what integrations.state.rack_slice reads for it)."""
    return r.InventoryState(
        racks=[x for x in inventory.racks if x.name == rack],
        partitions=[p for p in inventory.partitions if p.rack == rack],
        nodes=[n for n in inventory.nodes if n.rack == rack],
    )


def slice_objects(inventory: r.InventoryState, rack: str) -> list[dict]:
    part = one_rack(inventory, rack)
    return r.sort_for_apply(r.node_objects(part) + r.partition_flavors(part))


def recarved(inventory: r.InventoryState, rack: str, layout: dict[str, range]) -> r.InventoryState:
    """`inventory` with `rack` carved as `layout` (partition name -> slots), every partition shared."""
    partitions = [p for p in inventory.partitions if p.rack != rack] + [
        r.PartitionSpec(rack, name, number, service_tier="shared") for number, name in enumerate(layout, 1)
    ]
    of_slot = {slot: name for name, slots in layout.items() for slot in slots}
    nodes = [
        n if n.rack != rack else dataclasses.replace(n, partition=of_slot[int(n.hostname[-2:])])
        for n in inventory.nodes
    ]
    return r.InventoryState(racks=inventory.racks, partitions=partitions, nodes=nodes)


@pytest.fixture
def applied(kube, kube_proxy, kube_testbed):
    """The whole state applied once (every node labelled), and a label of another tool on gb-r02-t01."""
    whole = state(INFERENCE)
    register_nodes(kube, whole.inventory)
    with connect(kube_proxy, kube_testbed) as target:
        target.apply(target.render(whole))
        kube.merge_patch(
            "Node",
            "gb-r02-t01",
            {"metadata": {"labels": {TEAM_LABEL: "vision"}}},
            fieldManager="kubectl-label",
        )
        yield target, whole.inventory


def test_a_rack_slice_patches_that_racks_changed_nodes_alone(kube, kube_proxy, applied):
    target, inventory = applied
    before = kube.resource_versions()
    other_rack = {name: v for name, v in before.items() if "gb-r01-" in name}
    assert len(other_rack) == 18
    kube_proxy.requests.clear()
    # gb-r02 (2x9, p2 dedicated) re-carved into three shared partitions of 6.
    after = recarved(inventory, "gb-r02", {"q1": range(1, 7), "q2": range(7, 13), "q3": range(13, 19)})
    result = target.apply(slice_objects(after, "gb-r02"), racks=["gb-r02"])

    writes = [(w.method, w.path) for w in kube_proxy.writes]
    node_patches = sorted(path.rsplit("/", 1)[-1] for method, path in writes if "/nodes/" in path)
    assert node_patches == [f"gb-r02-t{slot:02d}" for slot in range(1, 19)]
    assert all(method == "PATCH" for method, path in writes if "/nodes/" in path)
    for w in kube_proxy.writes:
        if w.method == "PATCH":
            assert w.content_type == "application/apply-patch+yaml"
            assert w.query == {"fieldManager": ["rackplane"]}  # the project's manager, never force unasked
    # The rack's flavors: the new ones created, the old ones (p1, p2) pruned; no other kind was touched.
    new_flavors = [
        f"ResourceFlavor {r.partition_flavor_name(p)}" for p in one_rack(after, "gb-r02").partitions
    ]
    assert sorted(result.created) == sorted(new_flavors)
    assert len(result.deleted) == 2 and all(ref.startswith("ResourceFlavor ") for ref in result.deleted)
    # Nothing of gb-r01 was read or written, and no whole list of nodes or of any kind was read.
    assert not any("gb-r01" in request.path for request in kube_proxy.requests)
    lists = [q for q in kube_proxy.requests if q.method == "GET" and q.path.endswith(("/nodes", "flavors"))]
    assert lists and all("rackplane.io/rack in (gb-r02)" in q.query["labelSelector"][0] for q in lists)
    now = kube.resource_versions()
    assert {name: now[name] for name in other_rack} == other_rack
    # The labels landed, and the other tool's label is still there.
    labels = live_labels(kube, "gb-r02-t01")
    assert labels[r.PARTITION_LABEL] == r.partition_label_value(one_rack(after, "gb-r02").partitions[0])
    assert labels[TEAM_LABEL] == "vision"
    assert r.DEPARTMENT_LABEL not in live_labels(kube, "gb-r02-t18")  # p2 was dedicated: its label went


def test_only_the_nodes_whose_labels_changed_are_patched(kube, kube_proxy, applied):
    target, inventory = applied
    # gb-r02's p1 (trays 1-9) dedicated to inference; p2 (10-18) stays as it was.
    partitions = [
        dataclasses.replace(p, department="inference", service_tier="inference")
        if (p.rack, p.name) == ("gb-r02", "p1")
        else p
        for p in inventory.partitions
    ]
    after = dataclasses.replace(inventory, partitions=tuple(partitions))
    kube_proxy.requests.clear()
    target.apply(slice_objects(after, "gb-r02"), racks=["gb-r02"])
    patched = sorted(w.path.rsplit("/", 1)[-1] for w in kube_proxy.writes if "/nodes/" in w.path)
    assert patched == [f"gb-r02-t{slot:02d}" for slot in range(1, 10)]
    assert live_labels(kube, "gb-r02-t01")[r.DEPARTMENT_LABEL] == "inference"
    # Applied again: nothing differs, nothing is sent.
    kube_proxy.requests.clear()
    result = target.apply(slice_objects(after, "gb-r02"), racks=["gb-r02"])
    assert kube_proxy.writes == [] and not result.changed


def test_a_slice_refuses_objects_of_other_racks_or_kinds(applied):
    target, inventory = applied
    with pytest.raises(ValueError, match="not of the slice's racks"):
        target.apply(slice_objects(inventory, "gb-r01"), racks=["gb-r02"])
    with pytest.raises(ValueError, match="Nodes and ResourceFlavors only"):
        target.apply([r.topology()], racks=["gb-r02"])
    with pytest.raises(ValueError, match="rack name"):
        target.apply(slice_objects(inventory, "gb-r02"), racks=["gb-r02) , (x"])
