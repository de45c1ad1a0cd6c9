"""The demo's fabric (issue 33): `seed_demo` gives its racks scalable units of four under two spine groups,
through the site-file importer, after the first pass (its placements and capacity are as they were)."""

import pytest

from inventory.demo import demo_site_file
from inventory.discovery.fabric import site_file
from inventory.fabric import current_fabric
from inventory.models import FabricImport, Gpu, GpuRail
from scheduling.models import Allocation
from tests.factories import seed_demo

pytestmark = pytest.mark.django_db


def test_the_demo_site_file_for_any_number_of_racks():
    eight = site_file.parse_yaml(demo_site_file([f"gb-r{n:02d}" for n in range(8, 0, -1)]))
    assert eight.units == {"su-1": "spine-a", "su-2": "spine-b"}
    assert [r for r, u in sorted(eight.racks.items()) if u == "su-1"] == [
        "gb-r01",
        "gb-r02",
        "gb-r03",
        "gb-r04",
    ]
    assert site_file.parse_yaml(demo_site_file(["gb-r1"])).units == {"su-1": "spine-a"}
    twelve = site_file.parse_yaml(demo_site_file([f"gb-r{n:02d}" for n in range(1, 13)]))
    assert twelve.units == {"su-1": "spine-a", "su-2": "spine-a", "su-3": "spine-b"}


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_seed_demo_imports_the_fabric_without_moving_capacity_or_jobs(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    seed_demo("--racks", "8")
    fabric = current_fabric()
    assert fabric.members("unit") == {
        "su-1": ["gb-r01", "gb-r02", "gb-r03", "gb-r04"],
        "su-2": ["gb-r05", "gb-r06", "gb-r07", "gb-r08"],
    }
    assert fabric.members("spine") == {
        "spine-a": fabric.members("unit")["su-1"],
        "spine-b": fabric.members("unit")["su-2"],
    }
    imported = FabricImport.objects.get()
    assert (imported.source, imported.label, imported.in_use) == ("site_file", "demo-site.yaml", True)
    # Every tray's four GPUs have their rail's leaf.
    assert GpuRail.objects.count() == 8 * 18 * 4
    assert GpuRail.objects.get(tray__hostname="gb-r06-t03", gpu_index=2).leaf == "leaf-su2-rail2"
    # Capacity as before, and gb-r08 still wholly free (the e2e tests take it).
    assert Gpu.objects.filter(tray__isnull=False).count() == 8 * 72
    assert not Allocation.objects.filter(gpu__tray__rack__name="gb-r08").exists()
    # Seeding again (--reset) replaces the fabric, not adds to it.
    seed_demo("--racks", "4", "--reset", "--no-tenants")
    assert current_fabric().members("unit") == {"su-1": ["gb-r01", "gb-r02", "gb-r03", "gb-r04"]}
    assert FabricImport.objects.count() == 1
