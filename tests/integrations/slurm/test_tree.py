"""The compute fabric as Slurm's tree topology (integrations/slurm/tree.py) and the Slurm files with it
(integrations/slurm/target.render_files): topology.yaml for 25.05+, topology.conf with its note for 24.11.
Pure; the real slurmctld takes them in tests/integration/test_slurm_fabric.py."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from core.fabric import Fabric
from integrations.slurm.render import ServiceTier, SlurmNode, parse_conf_lines
from integrations.slurm.target import (
    FORMAT_YAML,
    SlurmState,
    left_out_note,
    parse_topology_yaml,
    render_files,
)
from integrations.slurm.topology import SlurmBlock, parse_topology_conf
from integrations.slurm.tree import (
    MAX_SWITCH_NAME,
    ROOT_SWITCH,
    compare_tree,
    parse_show_tree,
    parse_tree,
    plan_tree,
    switch_name,
    tree_topology,
)


def hosts(rack: int, trays: int = 4) -> tuple[str, ...]:
    return tuple(f"gb-r{rack:02d}-t{t:02d}" for t in range(1, trays + 1))


def state(racks: dict[int, tuple[str, ...] | None], tiers=None, trays: int = 4) -> SlurmState:
    """Racks by number, each with its fabric path (None: the fabric does not know it), one block a rack."""
    by_rack = {f"gb-r{n:02d}": hosts(n, trays) for n in racks}
    fabric = Fabric(racks={f"gb-r{n:02d}": p for n, p in racks.items() if p is not None})
    nodes = tuple(SlurmNode(h) for hs in by_rack.values() for h in hs)
    blocks = tuple(SlurmBlock(f"r{n:02d}", f"gb-r{n:02d}", by_rack[f"gb-r{n:02d}"]) for n in racks)
    if tiers is None:
        tiers = [ServiceTier("gpu", tuple(h for hs in by_rack.values() for h in hs), default=True)]
    return SlurmState(nodes, tuple(tiers), blocks, fabric, tuple(by_rack.items()))


TWO_SPINES = {1: ("spine-a", "su-1"), 2: ("spine-a", "su-1"), 3: ("spine-a", "su-2"), 4: ("spine-b", "su-3")}


def test_tree_has_a_leaf_per_unit_a_switch_per_spine_group_and_a_root():
    plan = plan_tree(
        Fabric(racks={f"gb-r{n:02d}": p for n, p in TWO_SPINES.items()}), dict(state(TWO_SPINES).racks)
    )
    assert tree_topology(plan) == {
        "topology": "fabric",
        "cluster_default": False,
        "tree": {
            "switches": [
                {"switch": "unit.su-1", "nodes": "gb-r[01-02]-t[01-04]"},
                {"switch": "unit.su-2", "nodes": "gb-r03-t[01-04]"},
                {"switch": "unit.su-3", "nodes": "gb-r04-t[01-04]"},
                {"switch": "spine.spine-a", "children": "unit.su-1,unit.su-2"},
                {"switch": "spine.spine-b", "children": "unit.su-3"},
                {"switch": "root", "children": "spine.spine-a,spine.spine-b"},
            ]
        },
    }
    assert [s.level for s in plan.switches] == [0, 0, 0, 1, 1, 2]


def test_one_spine_group_needs_no_root_and_unknown_racks_are_left_out():
    plan = plan_tree(
        Fabric(racks={"gb-r01": ("spine-a", "su-1"), "gb-r02": ("spine-a", "su-2")}),
        {"gb-r01": hosts(1), "gb-r02": hosts(2), "gb-r03": hosts(3)},
    )
    assert [s.name for s in plan.switches] == ["unit.su-1", "unit.su-2", "spine.spine-a"]
    assert plan.racks_left_out == ("gb-r03",)
    assert plan_tree(Fabric(), {"gb-r01": hosts(1)}) is None


def test_a_fabric_that_is_no_tree_is_refused():
    fabric = Fabric(racks={"gb-r01": ("spine-a", "su-1"), "gb-r02": ("spine-b", "su-1")})
    with pytest.raises(ValueError, match="not a tree: unit su-1 is under spine spine-a and spine-b"):
        plan_tree(fabric, {"gb-r01": hosts(1), "gb-r02": hosts(2)})
    with pytest.raises(ValueError, match="in two racks"):
        plan_tree(Fabric(racks={"gb-r01": ("s", "u")}), {"gb-r01": hosts(1), "gb-r02": hosts(1)})


def test_switch_names_are_slurm_safe_unique_and_short():
    assert switch_name("unit", "su-1") == "unit.su-1"
    odd = [switch_name("unit", g) for g in ("SU 1", "SU,1", "SU[1]", "x" * 80, "_su")]
    assert len(set(odd)) == len(odd)
    for name in odd:
        assert len(name) <= MAX_SWITCH_NAME and name[0].isalnum()
        assert not set(name) & set(" ,[]")


def test_parse_tree_refuses_what_slurm_refuses():
    def tree(*switches):
        return {"topology": "fabric", "tree": {"switches": list(switches)}}

    leaf = {"switch": "a", "nodes": "n[1-2]"}
    cases = [
        (tree(leaf, leaf), "defined twice"),
        (tree({"switch": "a", "nodes": "n1", "children": "b"}), "both nodes and children"),
        (tree(leaf, {"switch": "b", "nodes": "n2"}, {"switch": "r", "children": "a,b"}), "two leaf switches"),
        (tree(leaf, {"switch": "r", "children": "a,zz"}), "invalid child zz"),
        (tree(leaf, {"switch": "b", "nodes": "n3"}), "2 top switches"),
        (tree({"switch": "x" * 65, "nodes": "n1"}), "not one Slurm takes"),
        (tree({"switch": "a b", "nodes": "n1"}), "not one Slurm takes"),
        (tree(), "non-empty list"),
    ]
    for entry, message in cases:
        with pytest.raises(ValueError, match=message):
            parse_tree(entry)


# --- random fabrics -----------------------------------------------------------------------------------

names = st.sampled_from(["a", "b", "c", "su-1", "su-2", "SU 3", "x.y", "spine_9", "q" * 70])


@st.composite
def fabrics(draw):
    depth = draw(st.integers(1, 4))
    levels = tuple(draw(st.permutations(["spine", "unit", "pod", "core"]))[:depth])
    racks: dict[str, tuple[str, ...]] = {}
    # Group names unique within a level and each group under one parent: build top-down.
    for n in range(1, draw(st.integers(1, 12)) + 1):
        path: list[str] = []
        for d in range(depth):
            path.append(f"{'-'.join(path)}/{draw(names)}" if d else draw(names))
        racks[f"gb-r{n:02d}"] = tuple(path)
    known = draw(st.sets(st.sampled_from(sorted(racks)), min_size=1))
    all_racks = {r: hosts(int(r[-2:]), draw(st.integers(1, 3))) for r in racks}
    return Fabric(levels=levels, racks={r: racks[r] for r in known}), all_racks


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=150, deadline=None)
@given(fabrics())
def test_random_fabrics_give_a_tree_slurm_takes(drawn):
    fabric, by_rack = drawn
    plan = plan_tree(fabric, by_rack)
    entry = tree_topology(plan)
    back = parse_tree(yaml.safe_load(yaml.safe_dump([entry]))[0])  # the file parses back, Slurm's way
    leaves = [s for s in back.switches if s.nodes]
    placed = [h for r in fabric.racks for h in by_rack[r]]
    # Every node of a rack the fabric knows is in exactly one leaf switch, and no other node is.
    assert sorted(h for s in leaves for h in s.nodes) == sorted(placed)
    # Racks in one unit share a leaf; racks in different units do not.
    leaf_of = {h: s.name for s in leaves for h in s.nodes}
    for r1 in fabric.racks:
        for r2 in fabric.racks:
            same = leaf_of[by_rack[r1][0]] == leaf_of[by_rack[r2][0]]
            assert same == (fabric.racks[r1][-1] == fabric.racks[r2][-1])
    # One root reaches every switch (parse_tree refuses otherwise); its level is the depth of the tree.
    tops = {p[0] for p in fabric.racks.values()}
    assert back.switches[-1].level == len(fabric.levels) - (1 if len(tops) == 1 else 0)
    assert (back.switches[-1].name == ROOT_SWITCH) == (len(tops) > 1)
    assert plan.racks_left_out == tuple(sorted(set(by_rack) - set(fabric.racks)))
    # What `scontrol show topology fabric` prints for it agrees with the plan.
    shown = "\n".join(
        f"SwitchName={s.name} Level={s.level} LinkSpeed=1"
        + (f" Nodes={entry_nodes}" if (entry_nodes := e.get("nodes")) else "")
        + (f" Switches={e['children']}" if e.get("children") else "")
        for s, e in zip(plan.switches, entry["tree"]["switches"], strict=True)
    )
    assert compare_tree(plan, parse_show_tree(shown)) == []


def test_compare_tree_names_what_slurmctld_runs_differently():
    plan = plan_tree(
        Fabric(racks={"gb-r01": ("s", "u1"), "gb-r02": ("s", "u2")}), {"gb-r01": hosts(1), "gb-r02": hosts(2)}
    )
    shown = parse_show_tree(
        "SwitchName=unit.u1 Level=0 LinkSpeed=1 Nodes=gb-r01-t[01-03]\n"
        "SwitchName=spine.s Level=1 LinkSpeed=1 Nodes=gb-r01-t[01-04] Switches=unit.u1\n"
        "SwitchName=extra Level=0 LinkSpeed=1 Nodes=gb-r09-t01\n"
    )
    assert compare_tree(plan, shown) == [
        "switch unit.u2 is missing",
        "switch extra is not in the plan",
        "switch spine.s: switches unit.u1",
        "switch unit.u1: nodes gb-r01-t[01-03]",
    ]
    with pytest.raises(ValueError, match="not a switch line"):
        parse_show_tree("BlockName=b1 BlockIndex=0 Nodes=n1 BlockSize=1\n")


# --- the files ----------------------------------------------------------------------------------------


def test_yaml_holds_blocks_as_the_default_and_the_tree_used_by_multi_rack_dedicated_partitions():
    vision = ServiceTier("vision", hosts(1) + hosts(2), allow_qos=("vision",), priority_tier=10)
    small = ServiceTier("audio", hosts(3), allow_qos=("audio",), priority_tier=10)
    outside = ServiceTier("lab", hosts(3) + hosts(5), allow_qos=("lab",), priority_tier=10)
    shared = ServiceTier("gpu", hosts(4), default=True)
    racks = {**TWO_SPINES, 5: None}
    files = render_files(state(racks, [shared, vision, small, outside]), topology_format=FORMAT_YAML)
    assert set(files) == {"rackplane.conf", "topology.yaml"}
    document = yaml.safe_load(files["topology.yaml"])
    assert [(t["topology"], t["cluster_default"]) for t in document] == [("nvlink", True), ("fabric", False)]
    expected = parse_topology_yaml(files["topology.yaml"])
    assert expected.tree_name == "fabric" and len(expected.tree.switches) == 6
    assert [b[0] for b in expected.blocks.blocks] == ["r01", "r02", "r03", "r04", "r05"]
    topology = {
        p["PartitionName"]: p.get("Topology")
        for p in parse_conf_lines(files["rackplane.conf"], "PartitionName")
    }
    # Only the dedicated partition over two racks the fabric knows; one rack, or a rack outside: the blocks.
    assert topology == {"gpu": None, "vision": "fabric", "audio": None, "lab": None}


def test_yaml_without_a_fabric_is_the_blocks_alone_and_no_partition_names_a_topology():
    files = render_files(state({1: None, 2: None}), topology_format=FORMAT_YAML)
    assert [t["topology"] for t in yaml.safe_load(files["topology.yaml"])] == ["nvlink"]
    assert "Topology=" not in files["rackplane.conf"]


def test_conf_for_slurm_24_11_keeps_the_blocks_and_says_the_tree_is_left_out():
    with_fabric = render_files(state(TWO_SPINES))
    without = render_files(state(dict.fromkeys(TWO_SPINES)))
    assert set(with_fabric) == {"rackplane.conf", "topology.conf"}
    header = [line for line in with_fabric["topology.conf"].splitlines() if line.startswith("#")]
    assert "tree (3 leaf switches, 6 switches, 16 nodes) is left out" in " ".join(header)
    assert "topology.yaml" in " ".join(header)
    assert "left out" not in without["topology.conf"]
    # The push log quotes the note (SlurmAdapter.apply), as one line.
    assert left_out_note(with_fabric["topology.conf"]).startswith(
        "The compute fabric's tree (3 leaf switches,"
    )
    assert left_out_note(with_fabric["topology.conf"]).endswith(
        "set this target's topology file to topology.yaml."
    )
    assert left_out_note(without["topology.conf"]) == ""
    # The blocks themselves are the same, and the file still parses as Slurm 24.11 reads it.
    assert parse_topology_conf(with_fabric["topology.conf"]) == parse_topology_conf(without["topology.conf"])
    assert "Topology=" not in with_fabric["rackplane.conf"]


def test_unknown_topology_format_is_refused():
    with pytest.raises(ValueError, match="conf or yaml"):
        render_files(state(TWO_SPINES), topology_format="json")
