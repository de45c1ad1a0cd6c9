"""Slurm renderers and parsers (pure: no Django, no Slurm needed).

The `show_topology_*.txt` fixtures are real `scontrol show topology` output of Slurm 24.11.5 (the testbed of
scripts/slurm-testbed.sh) after loading exactly what `render_topology_conf` writes for the same layout, so
`plan_topology`'s model of Slurm's aggregation is checked against Slurm itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from integrations.slurm.render import (
    MANAGED_HEADER,
    DepartmentQos,
    ServiceTier,
    SlurmNode,
    parse_conf_lines,
    render_rackplane_conf,
    render_topology_conf,
    render_topology_yaml,
    sacctmgr_qos_commands,
)
from integrations.slurm.topology import (
    SlurmBlock,
    check_block_sizes,
    compare_topology,
    compress,
    parse_show_topology,
    parse_topology_conf,
    plan_topology,
    slurm_aggregates,
)

FIXTURES = Path(__file__).parent / "fixtures"


def rack(number: int, sizes: list[int]) -> list[SlurmBlock]:
    """Rack gb-rNN carved into partitions rNNp1.. of the given tray counts, in slot order."""
    blocks, slot = [], 1
    for index, size in enumerate(sizes, 1):
        hosts = tuple(f"gb-r{number:02d}-t{s:02d}" for s in range(slot, slot + size))
        blocks.append(SlurmBlock(f"r{number:02d}p{index}", f"gb-r{number:02d}", hosts))
        slot += size
    return blocks


def conf(*lines: str) -> str:
    return "\n".join([MANAGED_HEADER, *lines]) + "\n"


# --- topology.conf: exact text ------------------------------------------------------------------------


def test_1x18():
    assert render_topology_conf(rack(1, [18])) == conf(
        "BlockName=r01p1 Nodes=gb-r01-t[01-18]", "BlockSizes=18"
    )


def test_2x9():
    assert render_topology_conf(rack(1, [9, 9])) == conf(
        "BlockName=r01p1 Nodes=gb-r01-t[01-09]",
        "BlockName=r01p2 Nodes=gb-r01-t[10-18]",
        "BlockSizes=9,18",
    )


def test_3x6_has_the_rack_level_but_no_pair_level():
    # 12 would only pair p1+p2 by file order and forbid p2+p3; 24 (4 base blocks) is the whole rack.
    assert render_topology_conf(rack(1, [6, 6, 6])) == conf(
        "BlockName=r01p1 Nodes=gb-r01-t[01-06]",
        "BlockName=r01p2 Nodes=gb-r01-t[07-12]",
        "BlockName=r01p3 Nodes=gb-r01-t[13-18]",
        "BlockSizes=6,24",
    )


def test_6x3():
    assert render_topology_conf(rack(1, [3] * 6)) == conf(
        *(f"BlockName=r01p{i} Nodes=gb-r01-t[{3 * i - 2:02d}-{3 * i:02d}]" for i in range(1, 7)),
        "BlockSizes=3,24",
    )


def test_9x2():
    assert render_topology_conf(rack(1, [2] * 9)) == conf(
        *(f"BlockName=r01p{i} Nodes=gb-r01-t[{2 * i - 1:02d}-{2 * i:02d}]" for i in range(1, 10)),
        "BlockSizes=2,32",
    )


def test_18x1_in_natural_order():
    text = render_topology_conf(rack(1, [1] * 18))
    assert text == conf(
        *(f"BlockName=r01p{i} Nodes=gb-r01-t{i:02d}" for i in range(1, 19)), "BlockSizes=1,32"
    )


def test_two_racks_2x9_group_each_rack_never_both():
    assert render_topology_conf(rack(2, [9, 9]) + rack(1, [9, 9])) == conf(
        "BlockName=r01p1 Nodes=gb-r01-t[01-09]",
        "BlockName=r01p2 Nodes=gb-r01-t[10-18]",
        "BlockName=r02p1 Nodes=gb-r02-t[01-09]",
        "BlockName=r02p2 Nodes=gb-r02-t[10-18]",
        "BlockSizes=9,18",
    )


def test_two_racks_3x6_have_no_rack_level():
    # A level of 4 blocks would group r01p1-3 with r02p1: across racks. Base blocks only.
    text = render_topology_conf(rack(1, [6, 6, 6]) + rack(2, [6, 6, 6]))
    assert text.splitlines()[-1] == "BlockSizes=6"


def test_default_racks_next_to_a_carved_rack_are_split_into_base_blocks():
    # The demo datacenter: gb-r01 and gb-r03 whole (18), gb-r02 carved 2x9.
    text = render_topology_conf(rack(1, [18]) + rack(2, [9, 9]) + rack(3, [18]))
    assert text == conf(
        "BlockName=r01p1-1 Nodes=gb-r01-t[01-09]",
        "BlockName=r01p1-2 Nodes=gb-r01-t[10-18]",
        "BlockName=r02p1 Nodes=gb-r02-t[01-09]",
        "BlockName=r02p2 Nodes=gb-r02-t[10-18]",
        "BlockName=r03p1-1 Nodes=gb-r03-t[01-09]",
        "BlockName=r03p1-2 Nodes=gb-r03-t[10-18]",
        "BlockSizes=9,18",
    )


def test_larger_partition_first_inside_a_rack_keeps_it_aligned():
    blocks = [
        SlurmBlock("r01p2", "gb-r01", tuple(f"gb-r01-t{s:02d}" for s in range(13, 19))),
        SlurmBlock("r01p1", "gb-r01", tuple(f"gb-r01-t{s:02d}" for s in range(1, 13))),
    ]
    assert render_topology_conf(blocks) == conf(
        "BlockName=r01p1-1 Nodes=gb-r01-t[01-06]",
        "BlockName=r01p1-2 Nodes=gb-r01-t[07-12]",
        "BlockName=r01p2 Nodes=gb-r01-t[13-18]",
        "BlockSizes=6,12,24",
    )


def test_non_consecutive_trays_are_compressed():
    block = SlurmBlock("r01p1", "gb-r01", ("gb-r01-t10", "gb-r01-t01", "gb-r01-t03", "gb-r01-t02"))
    assert render_topology_conf([block]).splitlines()[1] == "BlockName=r01p1 Nodes=gb-r01-t[01-03,10]"


def test_output_does_not_depend_on_input_order():
    blocks = rack(1, [3] * 6) + rack(2, [3] * 6)
    assert render_topology_conf(blocks) == render_topology_conf(list(reversed(blocks)))


# --- BlockSizes rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sizes", "counts", "message"),
    [
        ([9, 27], [9, 9, 9], "power-of-two multiple"),
        ([9, 18, 12], [9, 9], "not a multiple of the base"),
        ([9], [9, 4], "fewer than the base block size 9"),
        ([0], [1], "not a positive integer"),
        ([1, 1 << 16], [1], "at most 16 levels"),
        ([], [1], "empty"),
    ],
)
def test_block_sizes_that_slurm_refuses(sizes, counts, message):
    with pytest.raises(ValueError, match=message):
        check_block_sizes(sizes, counts)


@pytest.mark.parametrize("sizes", [[9], [9, 18], [9, 36], [6, 24], [1, 1 << 15], [3, 6, 12, 24]])
def test_block_sizes_that_slurm_accepts(sizes):
    check_block_sizes(sizes, [sizes[0]] * 4 + [sizes[0] * 2])  # larger blocks are allowed (one base block)


def test_partition_not_a_power_of_two_multiple_cannot_be_expressed():
    with pytest.raises(ValueError, match=r"r01p1 \(18 nodes\).*partition of 6 nodes.*25\.05"):
        render_topology_conf(rack(1, [18]) + rack(2, [6, 6, 6]))


def test_split_partition_that_slurm_would_group_across_racks_cannot_be_expressed():
    with pytest.raises(ValueError, match="group blocks of racks gb-r01, gb-r02"):
        render_topology_conf(rack(1, [12, 6]) + rack(2, [12, 6]))


@pytest.mark.parametrize(
    ("blocks", "message"),
    [
        ([], "no NVLink partitions"),
        ([SlurmBlock("r01p1", "gb-r01", ())], "has no nodes"),
        ([*rack(1, [9]), SlurmBlock("r01p1", "gb-r01", ("gb-r01-t10",))], "used twice"),
        ([*rack(1, [9]), SlurmBlock("x", "gb-r01", ("gb-r01-t09",))], "in two blocks"),
        ([SlurmBlock("bad name", "gb-r01", ("n1",))], "not a valid Slurm name"),
        ([SlurmBlock("p", "", ("n1",))], "no NVLink domain"),
    ],
)
def test_invalid_blocks(blocks, message):
    with pytest.raises(ValueError, match=message):
        render_topology_conf(blocks)


def test_aggregation_mirrors_slurm_trailing_group_rule():
    # 3 blocks, levels 0 and 1: the pair {0,1}; the lone block 2 is not a level-1 block.
    assert slurm_aggregates(3, [0, 1]) == ([0, 1], [(1, [0, 1])])
    # Levels past the one covering every block are ignored by Slurm.
    assert slurm_aggregates(2, [0, 1, 2, 3])[0] == [0, 1]
    assert slurm_aggregates(3, [0, 2]) == ([0, 2], [(2, [0, 1, 2])])


def test_parse_topology_conf_without_block_sizes_uses_slurm_defaults():
    plan = parse_topology_conf("BlockName=a Nodes=n[1-4]\nBlockName=b Nodes=n[5-8]\n")
    assert plan.block_sizes == (4, 8)
    assert [b.name for b in plan.expected] == ["a", "b", "a,b"]


def test_parse_topology_conf_refuses_what_slurm_refuses():
    with pytest.raises(ValueError, match="fewer than the base"):
        parse_topology_conf("BlockName=a Nodes=n[1-4]\nBlockName=b Nodes=n[5-6]\nBlockSizes=4\n")
    with pytest.raises(ValueError, match="not a list of numbers"):
        parse_topology_conf("BlockName=a Nodes=n[1-4]\nBlockSizes=4,x\n")


# --- the real controller's view -----------------------------------------------------------------------

LAYOUTS = {
    "1x18": rack(1, [18]),
    "2x9": rack(1, [9, 9]),
    "3x6": rack(1, [6] * 3),
    "6x3": rack(1, [3] * 6),
    "9x2": rack(1, [2] * 9),
    "18x1": rack(1, [1] * 18),
    "12+6": rack(1, [12, 6]),
    "demo-3racks": rack(1, [18]) + rack(2, [9, 9]) + rack(3, [18]),
    "2racks-3x6": rack(1, [6] * 3) + rack(2, [6] * 3),
}


@pytest.mark.parametrize("label", sorted(LAYOUTS))
def test_plan_matches_what_slurm_loaded(label):
    shown = parse_show_topology((FIXTURES / f"show_topology_{label}.txt").read_text())
    plan = plan_topology(LAYOUTS[label])
    assert compare_topology(plan, shown) == []
    # Reading our own file back gives the same expectation as the plan.
    assert compare_topology(parse_topology_conf(render_topology_conf(LAYOUTS[label])), shown) == []


def test_parse_show_topology_2x9():
    shown = parse_show_topology((FIXTURES / "show_topology_2x9.txt").read_text())
    assert shown == [
        {
            "name": "r01p1",
            "index": 0,
            "nodes": "gb-r01-t[01-09]",
            "hostnames": [f"gb-r01-t{i:02d}" for i in range(1, 10)],
            "size": 9,
            "aggregated": False,
        },
        {
            "name": "r01p2",
            "index": 1,
            "nodes": "gb-r01-t[10-18]",
            "hostnames": [f"gb-r01-t{i:02d}" for i in range(10, 19)],
            "size": 9,
            "aggregated": False,
        },
        {
            "name": "r01p[1-2]",
            "index": 2,
            "nodes": "gb-r01-t[01-18]",
            "hostnames": [f"gb-r01-t{i:02d}" for i in range(1, 19)],
            "size": 18,
            "aggregated": True,
        },
    ]


def test_parse_show_topology_rejects_other_output():
    with pytest.raises(ValueError, match="not a block line"):
        parse_show_topology("SwitchName=s0 Level=0 LinkSpeed=1 Nodes=n[1-4]\n")
    assert parse_show_topology("\n") == []


def test_compare_reports_missing_extra_and_moved_blocks():
    plan = plan_topology(rack(1, [9, 9]))
    shown = parse_show_topology((FIXTURES / "show_topology_1x18.txt").read_text())
    assert compare_topology(plan, shown) == [
        "block r01p2 is missing",
        "aggregated block r01p[1-2] is missing",
        "block r01p1: nodes gb-r01-t[01-18], planned gb-r01-t[01-09]",
        "block r01p1: BlockSize=18, planned 9",
    ]


# --- topology.yaml (Slurm 25.05+) ---------------------------------------------------------------------


def test_topology_yaml_parses_back():
    blocks = rack(1, [18]) + rack(2, [9, 9])
    document = yaml.safe_load(render_topology_yaml(blocks))
    assert document == [
        {
            "topology": "nvlink",
            "cluster_default": True,
            "block": {
                # Blocks may be smaller than the base since 25.05: base = the largest partition, none split.
                "block_sizes": [18],
                "blocks": [
                    {"block": "r01p1", "nodes": "gb-r01-t[01-18]"},
                    {"block": "r02p1", "nodes": "gb-r02-t[01-09]"},
                    {"block": "r02p2", "nodes": "gb-r02-t[10-18]"},
                ],
            },
        }
    ]


def test_topology_yaml_rack_level_and_flags():
    document = yaml.safe_load(render_topology_yaml(rack(1, [9, 9]) + rack(2, [9, 9]), cluster_default=False))
    assert document[0]["cluster_default"] is False
    assert document[0]["block"]["block_sizes"] == [9, 18]
    assert [b["block"] for b in document[0]["block"]["blocks"]] == ["r01p1", "r01p2", "r02p1", "r02p2"]


# --- rackplane.conf -----------------------------------------------------------------------------------


def test_rackplane_conf_compresses_nodes_and_renders_tiers():
    nodes = [SlurmNode(f"gb-r01-t{i:02d}", cpus=144, memory_mb=880000) for i in range(1, 19)]
    nodes += [
        SlurmNode(f"gb-r02-t{i:02d}", cpus=144, memory_mb=880000, features=("gb300",)) for i in range(1, 19)
    ]
    all_hosts = tuple(n.hostname for n in nodes)
    tiers = [
        ServiceTier("train", all_hosts, qos="train", default=True, allow_qos=("dept-b", "dept-a")),
        ServiceTier("inference", all_hosts[18:], qos="inference", max_time_minutes=1440, priority_tier=10),
    ]
    assert render_rackplane_conf(nodes, tiers) == conf(
        "NodeName=gb-r01-t[01-18] CPUs=144 RealMemory=880000 Gres=gpu:4 State=UNKNOWN",
        "NodeName=gb-r02-t[01-18] CPUs=144 RealMemory=880000 Gres=gpu:4 Features=gb300 State=UNKNOWN",
        "PartitionName=train Nodes=gb-r[01-02]-t[01-18] Default=YES QOS=train AllowQos=dept-a,dept-b "
        "MaxTime=INFINITE PriorityTier=1 OverSubscribe=EXCLUSIVE State=UP",
        "PartitionName=inference Nodes=gb-r02-t[01-18] Default=NO QOS=inference MaxTime=1440 PriorityTier=10 "
        "OverSubscribe=EXCLUSIVE State=UP",
    )


def test_node_ports_become_ranges_and_split_where_they_jump():
    nodes = [
        SlurmNode(f"n{i}", cpus=4, address="127.0.0.1", node_hostname="localhost", port=port)
        for i, port in [(1, 7001), (2, 7002), (3, 7003), (4, 7010)]
    ]
    lines = render_rackplane_conf(nodes, [ServiceTier("p", ("n1",))]).splitlines()
    assert lines[1:3] == [
        "NodeName=n[1-3] NodeHostName=localhost NodeAddr=127.0.0.1 Port=[7001-7003] CPUs=4 Gres=gpu:4 "
        "State=UNKNOWN",
        "NodeName=n4 NodeHostName=localhost NodeAddr=127.0.0.1 Port=7010 CPUs=4 Gres=gpu:4 State=UNKNOWN",
    ]


@pytest.mark.parametrize(
    ("nodes", "tiers", "message"),
    [
        ([SlurmNode("n1")], [ServiceTier("p", ("n2",))], "not defined: n2"),
        (
            [SlurmNode("n1")],
            [ServiceTier("a", ("n1",), default=True), ServiceTier("b", ("n1",), default=True)],
            "only one partition",
        ),
        ([SlurmNode("n1")], [ServiceTier("p", ("n1",)), ServiceTier("p", ("n1",))], "listed twice"),
        ([SlurmNode("n1")], [ServiceTier("default", ("n1",))], "keyword"),
        ([SlurmNode("n1"), SlurmNode("n1")], [], "listed twice"),
        ([SlurmNode("n1", features=("a b",))], [], "not a valid Slurm feature"),
        ([], [], "no nodes"),
    ],
)
def test_rackplane_conf_errors(nodes, tiers, message):
    with pytest.raises(ValueError, match=message):
        render_rackplane_conf(nodes, tiers)


def test_conf_lines_parse_back():
    nodes = [SlurmNode(f"n{i}", cpus=4) for i in range(1, 5)]
    text = render_rackplane_conf(nodes, [ServiceTier("p", ("n1", "n2"), qos="q")])
    assert parse_conf_lines(text, "PartitionName") == [
        {
            "PartitionName": "p",
            "Nodes": "n[1-2]",
            "Default": "NO",
            "QOS": "q",
            "MaxTime": "INFINITE",
            "PriorityTier": "1",
            "OverSubscribe": "EXCLUSIVE",
            "State": "UP",
        }
    ]
    assert parse_conf_lines(text, "NodeName")[0]["NodeName"] == "n[1-4]"


def test_compress():
    assert compress(["gb-r01-t02", "gb-r01-t01", "gb-r02-t01"]) == "gb-r01-t[01-02],gb-r02-t01"
    with pytest.raises(ValueError):
        compress([])


def test_sacctmgr_qos_commands():
    assert sacctmgr_qos_commands(DepartmentQos("dept-a", 16)) == [
        ["-i", "add", "qos", "dept-a"],
        ["-i", "modify", "qos", "where", "name=dept-a", "set", "GrpTRES=gres/gpu=16"],
    ]
    assert sacctmgr_qos_commands(DepartmentQos("dept-a"))[1][-1] == "GrpTRES=gres/gpu=-1"
    with pytest.raises(ValueError):
        sacctmgr_qos_commands(DepartmentQos("dept-a", -2))
