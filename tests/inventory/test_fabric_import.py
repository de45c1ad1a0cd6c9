"""Importing the fabric (inventory.fabric_import, `manage.py import_fabric`) and reading it back
(inventory.fabric.current_fabric): all or nothing, the source and moment of each fact kept, a second source
compared rather than written over the first."""

from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import translation

from core.fabric import Fabric
from inventory import fabric_import
from inventory.discovery.fabric.parsed import FabricInputError, ParsedFabric
from inventory.discovery.fabric.read import read
from inventory.fabric import conflicts, current_fabric, disagreements, rack_fabric
from inventory.models import FabricGroup, FabricImport, GpuRail, Rack, RackPlace, TrayPlace
from tests.inventory.fabric_fixtures import ibnetdiscover

FIXTURES = Path(__file__).parent / "fixtures" / "fabric"
pytestmark = pytest.mark.django_db


def _site(units: dict[str, tuple[str, list[str]]]) -> ParsedFabric:
    parsed = ParsedFabric(source="site_file")
    for unit, (spine, racks) in units.items():
        parsed.units[unit] = spine
        for rack in racks:
            parsed.racks[rack] = unit
    return parsed


def _rows() -> tuple[int, ...]:
    return tuple(
        model.objects.count() for model in (FabricImport, FabricGroup, RackPlace, TrayPlace, GpuRail)
    )


def test_no_import_is_the_empty_fabric(demo_inventory):
    assert current_fabric() == Fabric()
    place = rack_fabric(Rack.objects.get(name="gb-r01"))
    assert (place.spine, place.unit, place.disagreements) == (None, None, [])


def test_site_file_import_gives_the_fabric_in_use_in_one_query(demo_inventory):
    parsed = read("site_file", (FIXTURES / "site.yaml").read_bytes(), "site.yaml")
    plan = fabric_import.apply(parsed, label="site.yaml")
    assert plan.becomes_in_use
    with CaptureQueriesContext(connection) as queries:
        fabric = current_fabric()
    assert len(queries) == 1
    assert fabric.racks == {
        "gb-r01": ("spine-a", "su-1"),
        "gb-r02": ("spine-a", "su-1"),
        "gb-r03": ("spine-a", "su-2"),
    }
    assert fabric.common_level(["gb-r01", "gb-r02"]) == "unit"
    assert fabric.common_level(["gb-r01", "gb-r03"]) == "spine"
    # The tray cabled elsewhere keeps its own place; the unit's leaves are its trays' rails.
    assert list(TrayPlace.objects.values_list("tray__hostname", "unit__name")) == [("gb-r02-t18", "su-2")]
    assert GpuRail.objects.filter(tray__hostname="gb-r01-t05").count() == 4
    assert set(
        GpuRail.objects.filter(tray__hostname="gb-r02-t07").values_list("gpu_index", "rail", "leaf")
    ) == {(n, n, f"leaf-su1-rail{n}") for n in range(4)}
    assert not GpuRail.objects.filter(tray__rack__name="gb-r03").exists()  # su-2 names no leaves
    imported = FabricImport.objects.get()
    assert (imported.source, imported.label, imported.in_use) == ("site_file", "site.yaml", True)


def test_ibnetdiscover_import_maps_hosts_to_trays_and_leaves_the_others_aside(demo_inventory):
    # Racks gb-r01..gb-r04 in the fabric; the demo inventory has gb-r01..gb-r03 and no storage host.
    text = ibnetdiscover(
        spine_groups=1, units_per_group=2, racks_per_unit=2, trays_per_rack=18, extra_hosts=("stor-01",)
    )
    plan = fabric_import.apply(read("ibnetdiscover", text.encode()), label="fabric.topo")
    assert current_fabric().racks == {
        "gb-r01": ("sg-1", "su-1"),
        "gb-r02": ("sg-1", "su-1"),
        "gb-r03": ("sg-1", "su-2"),
    }
    assert "stor-01" in plan.unknown_hosts and "gb-r04-t01" in plan.unknown_hosts
    assert GpuRail.objects.filter(fabric__in_use=True).count() == 3 * 18 * 4
    assert GpuRail.objects.get(tray__hostname="gb-r03-t02", gpu_index=3).leaf == "leaf-su2-rail3"
    assert FabricImport.objects.get().notes == ["19 host(s) not in the inventory left aside"]


def test_a_second_source_is_kept_beside_the_first_and_its_disagreements_flagged(demo_inventory):
    fabric_import.apply(_site({"su-1": ("a", ["gb-r01", "gb-r02"]), "su-2": ("a", ["gb-r03"])}))
    topograph = ParsedFabric(source="topograph", units={"leaf-x": "sp", "leaf-y": "sp"})
    for slot in range(1, 19):
        topograph.hosts[f"gb-r01-t{slot:02d}"] = "leaf-x"
        topograph.hosts[f"gb-r02-t{slot:02d}"] = "leaf-y"  # Topograph sees gb-r02 apart from gb-r01
        topograph.hosts[f"gb-r03-t{slot:02d}"] = "leaf-y"
    plan = fabric_import.apply(topograph)
    assert not plan.becomes_in_use
    assert set(plan.conflicts) == {"gb-r01", "gb-r02", "gb-r03"}
    # What is in use did not move.
    assert current_fabric().group("gb-r02", "unit") == "su-1"
    in_use, others, found = conflicts()
    assert in_use.source == "site_file" and [o.source for o in others] == ["topograph"]
    assert found[0].racks["gb-r02"] == (
        "unit su-1 in use, leaf-y there: with gb-r01 only in use, with gb-r03 only there"
    )
    # An admin settles it: Topograph's view is put in use.
    fabric_import.use_source("topograph")
    assert current_fabric().group("gb-r02", "unit") == "leaf-y"
    assert FabricImport.objects.filter(in_use=True).get().source == "topograph"


def _fabric(units: dict[tuple[str, str], range]) -> Fabric:
    return Fabric(
        racks={f"gb-r{n:02d}": (spine, unit) for (spine, unit), numbers in units.items() for n in numbers}
    )


def test_a_disagreement_names_the_racks_grouped_in_one_source_only():
    """Eight racks in one unit in use, split in two units there: each rack's words name the racks it shares
    a unit with in use only (three, then how many more), never the racks both sources group with it."""
    ours = _fabric({("spine-a", "su-1"): range(1, 9)})
    theirs = _fabric({("sg-1", "u-1"): range(1, 5), ("sg-1", "u-2"): range(5, 9)})
    found = disagreements(ours, theirs)
    assert set(found) == {f"gb-r{n:02d}" for n in range(1, 9)}
    assert found["gb-r01"] == (
        "unit su-1 in use, u-1 there: with gb-r05, gb-r06, gb-r07 and 1 more only in use"
    )
    assert found["gb-r08"] == (
        "unit su-1 in use, u-2 there: with gb-r01, gb-r02, gb-r03 and 1 more only in use"
    )
    # The other way round: the racks only there; and a spine group's split said at the spine level.
    assert disagreements(theirs, ours)["gb-r02"] == (
        "unit u-1 in use, su-1 there: with gb-r05, gb-r06, gb-r07 and 1 more only there"
    )
    spines = _fabric({("spine-a", "su-1"): range(1, 3), ("spine-b", "su-2"): range(3, 5)})
    assert disagreements(spines, _fabric({("sg", "su-1"): range(1, 3), ("sg", "su-2"): range(3, 5)})) == {
        f"gb-r{n:02d}": f"spine group spine-{'a' if n < 3 else 'b'} in use, sg there: with "
        + ("gb-r03, gb-r04" if n < 3 else "gb-r01, gb-r02")
        + " only there"
        for n in range(1, 5)
    }


def test_a_disagreement_is_in_the_viewers_language():
    ours = _fabric({("spine-a", "su-1"): range(1, 6)})
    theirs = _fabric({("sg-1", "u-1"): range(1, 2), ("sg-1", "u-2"): range(2, 6)})
    with translation.override("ja"):
        words = disagreements(ours, theirs)["gb-r01"]
    assert "ユニット su-1" in words and "ほか 1 件" in words, words


def test_a_source_agreeing_with_the_fabric_in_use_is_no_conflict(demo_inventory):
    fabric_import.apply(_site({"su-1": ("a", ["gb-r01", "gb-r02"]), "su-2": ("a", ["gb-r03"])}))
    other = ParsedFabric(source="topograph", units={"x": "s", "y": "s"})
    for slot in range(1, 19):
        for rack, unit in (("gb-r01", "x"), ("gb-r02", "x"), ("gb-r03", "y")):
            other.hosts[f"{rack}-t{slot:02d}"] = unit
    assert fabric_import.apply(other).conflicts == {}
    assert conflicts()[2] == []


def test_reimporting_a_source_replaces_its_rows_and_says_what_changed(demo_inventory):
    fabric_import.apply(_site({"su-1": ("a", ["gb-r01", "gb-r02"]), "su-2": ("a", ["gb-r03"])}))
    plan = fabric_import.apply(_site({"su-1": ("a", ["gb-r01"]), "su-2": ("a", ["gb-r02", "gb-r03"])}))
    assert plan.changed == ["gb-r02: a/su-1 -> a/su-2"]
    assert FabricImport.objects.count() == 1 and FabricGroup.objects.count() == 3
    assert current_fabric().group("gb-r02", "unit") == "su-2"


@pytest.mark.parametrize(
    "parsed, words",
    [
        (_site({"u": ("s", ["gb-r01", "gb-r99"])}), "not in the inventory: gb-r99"),
        (ParsedFabric(source="topograph", units={"u": "s"}, hosts={"GB-R01-T01": "u"}), "another case"),
        (ParsedFabric(source="topograph", units={"u": "s"}, hosts={"nobody": "u"}), "none of the 1 host"),
    ],
)
def test_bad_input_writes_nothing(demo_inventory, parsed, words):
    fabric_import.apply(_site({"su-1": ("a", ["gb-r01"])}))
    before = _rows()
    with pytest.raises(FabricInputError, match=words):
        fabric_import.apply(parsed)
    assert _rows() == before
    assert current_fabric().racks == {"gb-r01": ("a", "su-1")}


def test_command_imports_and_dry_run_writes_nothing(demo_inventory, tmp_path):
    out = StringIO()
    call_command("import_fabric", "site_file", str(FIXTURES / "site.csv"), "--dry-run", stdout=out)
    assert "Would import site_file: 2 spine group(s), 2 unit(s), 3 rack(s)" in out.getvalue()
    assert FabricImport.objects.count() == 0
    call_command("import_fabric", "site_file", str(FIXTURES / "site.csv"), stdout=out)
    assert current_fabric().group("gb-r03", "spine") == "spine-b"
    bad = tmp_path / "bad.csv"
    bad.write_text("spine_group,unit,rack\ns,u,gb-r01\ns,u,gb-r01\n")
    with pytest.raises(CommandError, match=r"bad.csv: line 3: rack 'gb-r01' is in unit 'u' already; nothing"):
        call_command("import_fabric", "site_file", str(bad))
    assert current_fabric().group("gb-r03", "spine") == "spine-b"


def test_command_refuses_a_huge_file_unread(demo_inventory, tmp_path):
    huge = tmp_path / "huge.topo"
    with huge.open("wb") as handle:
        handle.truncate(17 * 1024 * 1024)
    with pytest.raises(CommandError, match="more than"):
        call_command("import_fabric", "ibnetdiscover", str(huge))
    assert FabricImport.objects.count() == 0
