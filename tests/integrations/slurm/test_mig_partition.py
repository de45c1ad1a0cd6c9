"""Trays in MIG mode get a Slurm partition of their own (issue 30): `<partition>--mig`, `OverSubscribe=NO`,
so slice jobs share the node, each charged only its MIG devices (the whole-tray partitions are
`OverSubscribe=EXCLUSIVE`, which gave a slice job every GRES of its node). The renderer, build_state and
dispatch follow one rule (integrations.state.slurm_partition_of); the real slurmctld runs two slice jobs on
one tray at once in tests/integration/test_slurm_mig.py."""

from __future__ import annotations

import re

import pytest

from integrations.dispatch import dispatch_request
from integrations.slurm.render import (
    ServiceTier,
    SlurmNode,
    declared_tres,
    render_rackplane_conf,
    render_topology_conf,
    render_topology_yaml,
)
from integrations.slurm.topology import SlurmBlock
from integrations.state import build_state
from scheduling.choices import JobState
from scheduling.models import Job
from tenancy import naming
from tests.factories import make_department, make_job, make_member, mig_tray

BALANCED = (("1g.23gb", 8), ("2g.47gb", 4), ("3g.93gb", 4))  # all-balanced on four GPUs: 16 devices


def partitions(conf: str) -> dict[str, dict[str, str]]:
    return {
        fields["PartitionName"]: fields
        for line in conf.splitlines()
        if line.startswith("PartitionName=")
        for fields in [dict(re.findall(r"(\w+)=(\S+)", line))]
    }


def test_a_mig_partition_shares_its_nodes_and_gives_each_device_its_share_of_memory():
    nodes = [
        SlurmNode("n01", memory_mb=1000),
        SlurmNode("n02", memory_mb=1000, mig=BALANCED),
        SlurmNode("n03", memory_mb=4000, mig=(("1g.23gb", 28),)),
    ]
    tiers = [ServiceTier("gpu", ("n01",), default=True), ServiceTier("gpu--mig", ("n02", "n03"), mig=True)]
    shown = partitions(render_rackplane_conf(nodes, tiers))
    assert shown["gpu"]["OverSubscribe"] == "EXCLUSIVE" and "DefMemPerGPU" not in shown["gpu"]
    # The smallest share: n02's 1000 MB over its 16 devices (n03's 4000 over 28 is 142).
    assert (shown["gpu--mig"]["OverSubscribe"], shown["gpu--mig"]["DefMemPerGPU"]) == ("NO", "62")
    # A node whose memory is not known: no default (Slurm's own rule applies), still shared.
    unknown = [nodes[0], SlurmNode("n02", mig=BALANCED), nodes[2]]
    shown = partitions(render_rackplane_conf(unknown, tiers))
    assert shown["gpu--mig"]["OverSubscribe"] == "NO" and "DefMemPerGPU" not in shown["gpu--mig"]


def test_rackplane_conf_makes_slurmctld_track_each_mig_profile_only_when_a_tray_is_in_mig_mode():
    """AccountingStorageTRES is pushed, not only named: slurmdbd refuses a limit on a profile's TRES that
    slurmctld does not track (tests/integration/test_slurm_mig.py proves the push on the real one)."""
    nodes = [SlurmNode("n01"), SlurmNode("n02", mig=BALANCED), SlurmNode("n03", mig=(("1g.23gb", 28),))]
    tiers = [ServiceTier("gpu", ("n01",), default=True), ServiceTier("gpu--mig", ("n02", "n03"), mig=True)]
    conf = render_rackplane_conf(nodes, tiers)
    assert conf.splitlines()[1] == (
        "AccountingStorageTRES=gres/gpu,gres/gpu:1g.23gb,gres/gpu:2g.47gb,gres/gpu:3g.93gb"
    )
    assert declared_tres(conf) == ("gres/gpu", "gres/gpu:1g.23gb", "gres/gpu:2g.47gb", "gres/gpu:3g.93gb")
    plain = render_rackplane_conf(nodes[:1], tiers[:1])
    assert "AccountingStorageTRES" not in plain and declared_tres(plain) == ()


@pytest.mark.parametrize("name", ["", "gpu--mig", "research--mig"])
def test_a_mig_partition_is_never_made_of_a_mig_partition_or_nothing(name):
    with pytest.raises(ValueError):
        naming.mig_partition(name)


@pytest.mark.django_db
def test_dispatch_sends_a_slice_job_to_the_mig_partition_the_push_renders_its_tray_in(demo_inventory):
    research = make_department("Research", guaranteed_gpus=96)
    tray = mig_tray("gb-r03-t02")
    state = build_state()
    tiers = {t.name: t for t in state.slurm.tiers}
    (mig,) = [t for t in tiers.values() if t.mig]
    assert mig.hostnames == (tray.hostname,)
    assert all(tray.hostname not in t.hostnames for t in tiers.values() if not t.mig)
    whole = next(t for t in tiers.values() if "gb-r03-t03" in t.hostnames)
    assert mig.name == naming.mig_partition(whole.name) and mig.allow_qos == whole.allow_qos

    member = make_member("ada", research)
    slice_job = make_job(
        research, "serve", JobState.STARTING, [tray], member, gpus=0, mig_profile="1g.23gb", mig_slices=2
    )
    assert dispatch_request(Job.objects.get(pk=slice_job.pk), {}).service_tier == mig.name
    whole_job = make_job(research, "train", JobState.STARTING, ["gb-r03-t03"], member)
    assert dispatch_request(Job.objects.get(pk=whole_job.pk), {}).service_tier == whole.name


@pytest.mark.django_db
def test_mig_trays_on_one_rack_only_keep_the_nvlink_blocks_slurm_24_11_takes(demo_inventory):
    """MIG on some racks only (scheduling.engine.mig_sizing.concentrate): the last trays of one rack's last
    NVLink partition in MIG mode, every rack keeping its carving. The MIG trays leave the whole-tray Slurm
    partitions for `<partition>--mig`, but stay in their NVLink partition's topology block: the blocks and
    BlockSizes are those without MIG, which Slurm 24.11's topology/block takes (plan_topology refuses what
    slurmctld would)."""
    before = build_state().slurm
    hosts = ("gb-r02-t17", "gb-r02-t18")
    for hostname in hosts:
        mig_tray(hostname)
    after = build_state().slurm
    assert after.blocks == before.blocks
    (block,) = [b for b in after.blocks if set(hosts) <= set(b.hostnames)]
    assert len(block.hostnames) == 9  # gb-r02's second partition of its 2x9, MIG trays included
    assert render_topology_conf(after.blocks) == render_topology_conf(before.blocks)
    (mig,) = [t for t in after.tiers if t.mig]
    assert mig.hostnames == hosts
    assert not any(set(hosts) & set(t.hostnames) for t in after.tiers if not t.mig)


def _nvlink_blocks(racks: int, layout: tuple[int, ...]) -> list[SlurmBlock]:
    """The blocks integrations.state._slurm_blocks writes: one per NVLink partition, every tray of it (a
    tray in MIG mode included: it stays in its partition)."""
    blocks = []
    for r in range(1, racks + 1):
        slot = 0
        for p, size in enumerate(layout, 1):
            hosts = tuple(f"gb-r{r:02d}-t{slot + i + 1:02d}" for i in range(size))
            blocks.append(SlurmBlock(f"r{r:02d}p{p}", f"gb-r{r:02d}", hosts))
            slot += size
    return blocks


def test_which_slurm_release_each_mig_layout_of_the_sizing_rule_needs():
    """The MIG trays keep their NVLink partition, and its block. Per rack (8+8+2 on every rack, the MIG
    trays the 2-tray partition): Slurm 24.11's topology.conf cannot express it on two racks or more (level 8
    would group two racks' blocks), 25.05's topology.yaml can (blocks smaller than the base). On some racks
    only (mig_sizing.concentrate: every rack 2x9, the MIG trays inside a rack's last partition): 24.11 too."""
    with pytest.raises(ValueError, match="would group blocks of racks"):
        render_topology_conf(_nvlink_blocks(2, (8, 8, 2)))
    assert render_topology_conf(_nvlink_blocks(1, (8, 8, 2)))  # one rack alone is fine
    assert "block_sizes" in render_topology_yaml(_nvlink_blocks(4, (8, 8, 2)))
    assert render_topology_conf(_nvlink_blocks(4, (9, 9))).endswith("BlockSizes=9,18\n")
