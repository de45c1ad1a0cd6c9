"""The compute fabric (issue 33) pushed to the real slurmctld of the testbed: topology.conf with the NVLink
blocks alone and its note on every release (`make test`: 24.11), topology.yaml with the blocks as the cluster
default, the fabric's tree and a partition placed with it on 25.05+ (`make test-slurm-next`: 26.05), and the
target's refusal to push topology.yaml to a Slurm older than 25.05.

The testbed's 18 trays (gb-r01-t01..t18) are laid out as three racks of six, each one NVLink partition: racks
1 and 2 in scalable unit su-1 and rack 3 in su-2 under spine group spine-a, so the tree has two leaves, one
spine switch and no root; a fourth-rack-free variant with two spine groups adds the root. Each test leaves
the testbed as it found it (fixture `slurm_baseline`)."""

from __future__ import annotations

import subprocess

import pytest

from core.fabric import Fabric
from integrations.slurm.render import ServiceTier, SlurmNode
from integrations.slurm.target import (
    FORMAT_YAML,
    TOPOLOGY_CONF,
    TOPOLOGY_YAML,
    SlurmRejected,
    SlurmState,
)
from integrations.slurm.topology import SlurmBlock
from integrations.slurm.tree import parse_show_tree
from tests.integration.test_slurm_jobs import slurm_release

pytestmark = [pytest.mark.integration]

RACKS = ("gb-r01", "gb-r02", "gb-r03")


def fabric_state(testbed, paths: dict[str, tuple[str, str]]) -> SlurmState:
    hosts = testbed.hostnames()
    assert len(hosts) == 18, hosts
    by_rack = {rack: tuple(hosts[6 * i : 6 * i + 6]) for i, rack in enumerate(RACKS)}
    nodes = tuple(
        SlurmNode(
            h, gpus=4, cpus=4, memory_mb=1000, node_hostname="localhost", address="127.0.0.1", port=port
        )
        for port, h in enumerate(hosts, testbed.node_port_base)
    )
    blocks = tuple(SlurmBlock(f"r0{i}", rack, by_rack[rack]) for i, rack in enumerate(RACKS, 1))
    tiers = (
        ServiceTier("gpu", tuple(hosts), default=True),
        # A department's dedicated partitions in racks 1 and 2: placed with the tree on 25.05+.
        ServiceTier(
            "research", by_rack["gb-r01"] + by_rack["gb-r02"], allow_qos=("research",), priority_tier=10
        ),
    )
    return SlurmState(nodes, tiers, blocks, Fabric(racks=paths), tuple(by_rack.items()))


ONE_SPINE = {"gb-r01": ("spine-a", "su-1"), "gb-r02": ("spine-a", "su-1"), "gb-r03": ("spine-a", "su-2")}
TWO_SPINES = {"gb-r01": ("spine-a", "su-1"), "gb-r02": ("spine-a", "su-1"), "gb-r03": ("spine-b", "su-2")}


def scontrol(testbed, *args: str) -> str:
    return subprocess.run([testbed.scontrol, *args], capture_output=True, text=True, check=True).stdout


def test_topology_conf_keeps_the_nvlink_blocks_and_says_the_tree_is_left_out(slurm_testbed, slurm_baseline):
    target = slurm_testbed.target()
    files = target.render(fabric_state(slurm_testbed, TWO_SPINES))
    assert set(files) == {"rackplane.conf", TOPOLOGY_CONF}
    assert (
        "# The compute fabric's tree (2 leaf switches, 5 switches, 18 nodes) is left out"
        in files[TOPOLOGY_CONF]
    )
    result = target.apply(files)
    assert result.changed == ["rackplane.conf", TOPOLOGY_CONF], result.log
    shown = [(b["name"], b["nodes"]) for b in target.read_topology() if not b["aggregated"]]
    assert shown == [("r01", "gb-r01-t[01-06]"), ("r02", "gb-r01-t[07-12]"), ("r03", "gb-r01-t[13-18]")]
    assert "Topology=" not in scontrol(slurm_testbed, "show", "partition", "research", "--oneliner")


def test_topology_yaml_runs_the_blocks_by_default_and_the_fabric_tree_for_the_multi_rack_partition(
    slurm_testbed, slurm_baseline
):
    target = slurm_testbed.target()
    files = target.render(fabric_state(slurm_testbed, TWO_SPINES), topology_format=FORMAT_YAML)
    assert set(files) == {"rackplane.conf", TOPOLOGY_YAML}
    if slurm_release() < (25, 5):
        # Slurm 24.11 would ignore topology.yaml and keep running topology.conf: the target refuses first.
        with pytest.raises(SlurmRejected, match=r"topology\.yaml needs Slurm 25\.05 or later"):
            target.apply(files)
        assert not (slurm_testbed.conf_dir / TOPOLOGY_YAML).exists()
        return
    result = target.apply(files)
    assert result.reconfigured and TOPOLOGY_YAML in result.changed, result.log
    # The default topology is the NVLink blocks...
    shown = [(b["name"], b["nodes"]) for b in target.read_topology() if not b["aggregated"]]
    assert shown == [("r01", "gb-r01-t[01-06]"), ("r02", "gb-r01-t[07-12]"), ("r03", "gb-r01-t[13-18]")]
    # ...and slurmctld runs the fabric's tree as written (the apply compared it too).
    tree = {s["name"]: s for s in parse_show_tree(scontrol(slurm_testbed, "show", "topology", "fabric"))}
    assert set(tree) == {"unit.su-1", "unit.su-2", "spine.spine-a", "spine.spine-b", "root"}
    assert tree["unit.su-1"]["hostnames"] == [f"gb-r01-t{n:02d}" for n in range(1, 13)]
    assert (tree["root"]["level"], sorted(tree["root"]["children"])) == (
        2,
        ["spine.spine-a", "spine.spine-b"],
    )
    research = scontrol(slurm_testbed, "show", "partition", "research", "--oneliner")
    assert "Topology=fabric" in research, research
    assert "Topology=fabric" not in scontrol(slurm_testbed, "show", "partition", "gpu", "--oneliner")

    # The fabric changes (rack 3 joins spine-a): one spine switch, no root; the push says so and runs it.
    changed = target.render(fabric_state(slurm_testbed, ONE_SPINE), topology_format=FORMAT_YAML)
    assert "switch: root" in target.diff(changed)[TOPOLOGY_YAML]  # the line removed
    target.apply(changed)
    tree = {s["name"]: s for s in parse_show_tree(scontrol(slurm_testbed, "show", "topology", "fabric"))}
    assert set(tree) == {"unit.su-1", "unit.su-2", "spine.spine-a"}
