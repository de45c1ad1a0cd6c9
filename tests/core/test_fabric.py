"""core.fabric: the one shape of the fabric above the rack (issue 33)."""

import pytest

from core.fabric import Fabric

FABRIC = Fabric(
    racks={
        "r1": ("spine-a", "su-1"),
        "r2": ("spine-a", "su-1"),
        "r3": ("spine-a", "su-2"),
        "r4": ("spine-b", "su-1"),  # unit names repeat across spines: a unit is (spine, unit)
    }
)


def test_paths_groups_and_members():
    assert FABRIC.path("r3") == ("spine-a", "su-2")
    assert FABRIC.path("nowhere") is None
    assert FABRIC.group("r4", "spine") == "spine-b"
    assert FABRIC.group("r4", "unit") == "su-1"
    assert FABRIC.members("spine") == {"spine-a": ["r1", "r2", "r3"], "spine-b": ["r4"]}
    assert not FABRIC.empty and Fabric().empty


@pytest.mark.parametrize(
    ("racks", "level"),
    [
        (["r1"], "unit"),
        (["r1", "r2"], "unit"),
        (["r1", "r3"], "spine"),
        (["r1", "r4"], None),  # same unit name under two spines is two units
        (["r1", "unknown"], None),
        ([], None),
    ],
)
def test_common_level(racks, level):
    assert FABRIC.common_level(racks) == level


def test_malformed_fabrics_are_refused():
    with pytest.raises(ValueError):
        Fabric(levels=())
    with pytest.raises(ValueError):
        Fabric(levels=("unit", "unit"))
    with pytest.raises(ValueError):
        Fabric(racks={"r1": ("only-one",)})
