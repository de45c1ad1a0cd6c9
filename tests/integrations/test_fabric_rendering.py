"""The compute fabric (issue 33) through the render pipeline: `build_state` takes it, the directory target's
files, `push_configs --dry-run` ("what changes") and the partition wizard's preview show its part.

The fabric is what `integrations.state.current_compute_fabric` returns: the inventory's fabric in use, which
the tests import as a site would (a site file through inventory.fabric_import, the importer
`manage.py import_fabric` and the import page use)."""

from __future__ import annotations

from io import StringIO

import pytest
import yaml
from django.core.management import call_command

from core.fabric import Fabric
from integrations import state as configstate
from integrations.models import ConfigPush
from integrations.plans import service as plans
from integrations.plans.service import PlannedPartition
from inventory import fabric_import
from inventory.discovery.fabric.site_file import parse as site_parse
from inventory.models import FabricImport, Rack
from tests.factories import make_department

pytestmark = pytest.mark.django_db

# The demo's three racks: gb-r01 and gb-r02 in unit su-1, gb-r03 in su-2, two spine groups.
FABRIC = Fabric(
    racks={"gb-r01": ("spine-a", "su-1"), "gb-r02": ("spine-a", "su-1"), "gb-r03": ("spine-b", "su-2")}
)
MOVED = Fabric(
    racks={"gb-r01": ("spine-a", "su-1"), "gb-r02": ("spine-a", "su-2"), "gb-r03": ("spine-a", "su-2")}
)


@pytest.fixture
def departments(demo_inventory, local_target):
    make_department("Research", guaranteed_gpus=16)


def site_file(fabric: Fabric) -> str:
    return "spine_group,unit,rack\n" + "".join(f"{s},{u},{rack}\n" for rack, (s, u) in fabric.racks.items())


@pytest.fixture
def fabric():
    """Import a compute fabric as a site file, put in use (the render pipeline reads the one in use);
    returns the importer, for a test that moves racks."""

    def use(value: Fabric) -> None:
        if value.empty:  # a site that never imported one
            FabricImport.objects.all().delete()
        else:
            fabric_import.apply(site_parse(site_file(value), "site.csv"), label="test", use=True)
        assert configstate.current_compute_fabric() == value

    use(FABRIC)
    return use


def test_without_a_fabric_the_files_are_what_they_were(departments):
    files = configstate.render_files(configstate.build_state())
    assert configstate.SLURM_TOPOLOGY_YAML not in files
    assert "left out" not in files[configstate.SLURM_TOPOLOGY]
    assert "fabric.topograph.run" not in "".join(files.values())


def test_the_fabric_is_in_every_scheduler_file(departments, fabric):
    files = configstate.render_files(configstate.build_state())
    # Slurm 24.11: the blocks alone, and the header says the tree is left out.
    assert (
        "# The compute fabric's tree (2 leaf switches, 5 switches, 54 nodes) is left out"
        in files[configstate.SLURM_TOPOLOGY]
    )
    # Slurm 25.05+: the tree beside the blocks.
    nvlink, tree = yaml.safe_load(files[configstate.SLURM_TOPOLOGY_YAML])
    assert (nvlink["topology"], nvlink["cluster_default"], tree["topology"]) == ("nvlink", True, "fabric")
    assert tree["tree"]["switches"][0] == {"switch": "unit.su-1", "nodes": "gb-r[01-02]-t[01-18]"}
    assert tree["tree"]["switches"][-1] == {"switch": "root", "children": "spine.spine-a,spine.spine-b"}
    # Kubernetes: the tier labels on the nodes and the Topology's levels above the NVLink domain.
    nodes = {
        n["metadata"]["name"]: n["metadata"]["labels"]
        for n in yaml.safe_load_all(files["kubernetes/02-nodes.yaml"])
    }
    assert nodes["gb-r03-t05"]["fabric.topograph.run/tier-0"] == "su-2"
    assert nodes["gb-r03-t05"]["fabric.topograph.run/tier-1"] == "spine-b"
    (topology,) = yaml.safe_load_all(files["kubernetes/03-topologies.yaml"])
    assert topology["spec"]["levels"][0] == {"nodeLabel": "fabric.topograph.run/tier-1"}


def test_a_fabric_change_shows_in_what_a_push_would_change(departments, fabric, render_dir):
    call_command("push_configs", stdout=StringIO(), stderr=StringIO())
    assert ConfigPush.objects.count() == 1
    fabric(MOVED)  # gb-r02 moves to su-2, and su-2 under spine-a
    out = StringIO()
    call_command("push_configs", "--dry-run", stdout=out, stderr=StringIO())
    printed = out.getvalue()
    changed = {line for line in printed.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")}
    # slurm/topology.yaml: su-1 keeps gb-r01 alone, su-2 takes gb-r02, one spine group left and so no root.
    assert {
        "-      nodes: gb-r[01-02]-t[01-18]",
        "+      nodes: gb-r01-t[01-18]",
        "+      nodes: gb-r[02-03]-t[01-18]",
        "-    - switch: spine.spine-b",
        "-    - switch: root",
        "+      children: unit.su-1,unit.su-2",
    } <= changed
    # slurm/topology.conf (24.11): only its header's count of switches.
    assert (
        "+# The compute fabric's tree (2 leaf switches, 3 switches, 54 nodes) is left out: Slurm 24.11 "
        "reads one topology" in changed
    )
    # kubernetes/02-nodes.yaml: gb-r02's nodes change unit, gb-r03's spine group.
    assert {"-    fabric.topograph.run/tier-0: su-1", "+    fabric.topograph.run/tier-0: su-2"} <= changed
    assert {
        "-    fabric.topograph.run/tier-1: spine-b",
        "+    fabric.topograph.run/tier-1: spine-a",
    } <= changed
    assert ConfigPush.objects.count() == 1  # a dry run


def test_the_wizard_preview_shows_the_blocks_change_in_topology_yaml(demo_inventory, fabric):
    rack = Rack.objects.get(name="gb-r01")
    result = plans.preview(
        rack, [PlannedPartition("p1", tuple(range(1, 10))), PlannedPartition("p2", tuple(range(10, 19)))]
    )
    assert result.check.ok, result.check.findings
    diff = result.diffs["slurm/topology.yaml"]
    added = {line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")}
    assert {"    - block: r01p1", "      nodes: gb-r01-t[01-09]", "    - block: r01p2"} <= added
    # The fabric did not change: its tree is not in the diff.
    assert "switch:" not in result.diffs["slurm/topology.yaml"]


def test_the_preview_says_which_slurm_targets_get_no_tree(demo_inventory, fabric):
    from integrations.models import ConfigTarget
    from inventory.planning import Level

    ConfigTarget.objects.create(name="old-slurm", kind="slurm", settings={"config_dir": "/etc/slurm"})
    ConfigTarget.objects.create(
        name="new-slurm", kind="slurm", settings={"config_dir": "/etc/slurm", "topology_format": "yaml"}
    )
    rack = Rack.objects.get(name="gb-r01")
    layout = [PlannedPartition("p1", tuple(range(1, 10))), PlannedPartition("p2", tuple(range(10, 19)))]
    infos = [f.message for f in plans.preview(rack, layout).check.findings if f.level == Level.INFO]
    said = [m for m in infos if "compute fabric's tree" in m]
    assert len(said) == 1 and "not sent to old-slurm:" in said[0] and "new-slurm" not in said[0]
    fabric(Fabric())  # no fabric: nothing to say
    infos = [f.message for f in plans.preview(rack, layout).check.findings if f.level == Level.INFO]
    assert not any("compute fabric's tree" in m for m in infos)


def test_a_slurm_targets_payload_has_the_topology_file_it_is_set_to(departments, fabric):
    from integrations.models import ConfigTarget
    from integrations.rendering import Rendered

    rendered = Rendered()
    old = ConfigTarget.objects.create(name="old-slurm", kind="slurm", settings={"config_dir": "/etc/slurm"})
    new = ConfigTarget.objects.create(
        name="new-slurm", kind="slurm", settings={"config_dir": "/etc/slurm", "topology_format": "yaml"}
    )
    assert set(rendered.payload_for(old)["files"]) == {"rackplane.conf", "topology.conf"}
    files = rendered.payload_for(new)["files"]
    assert set(files) == {"rackplane.conf", "topology.yaml"}
    assert files["topology.yaml"] == configstate.render_files(rendered.state)[configstate.SLURM_TOPOLOGY_YAML]
