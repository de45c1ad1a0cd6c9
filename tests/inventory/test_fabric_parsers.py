"""The fabric readers (inventory.discovery.fabric; pure): ibnetdiscover's output, Topograph's node labels, a
site file. Each refuses bad input whole, naming the line (or node) it stopped at."""

import json
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inventory.discovery.fabric import ibnetdiscover, site_file, topograph
from inventory.discovery.fabric.parsed import MAX_BYTES, FabricInputError, decode
from inventory.discovery.fabric.read import read
from tests.inventory.fabric_fixtures import ibnetdiscover as make_ibnetdiscover

FIXTURES = Path(__file__).parent / "fixtures" / "fabric"


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- ibnetdiscover ------------------------------------------------------------------------------------------


def test_ibnetdiscover_fixture_gives_units_spine_groups_hosts_and_rails():
    parsed = ibnetdiscover.parse(_fixture("two_spine_groups.ibnetdiscover"))
    # Two spine blocks under a core: each unit in a spine group of its own.
    assert parsed.units == {"su-1": "sg-1", "su-2": "sg-2"}
    assert {host: unit for host, unit in parsed.hosts.items() if host.startswith("gb-r0")} == {
        "gb-r01-t01": "su-1",
        "gb-r01-t02": "su-1",
        "gb-r02-t01": "su-1",
        "gb-r02-t02": "su-1",
        "gb-r03-t01": "su-2",
        "gb-r03-t02": "su-2",
        "gb-r04-t01": "su-2",
        "gb-r04-t02": "su-2",
    }
    assert parsed.hosts["stor-01"] == "su-1"  # a storage host on a leaf of unit 1: grouped, not a tray
    # NIC n (mlx5_n) of every tray is on rail n's leaf of its unit.
    assert parsed.rails[("gb-r03-t02", 2)] == (2, "leaf-su2-rail2")
    assert {parsed.rails[("gb-r01-t01", gpu)] for gpu in range(4)} == {
        (gpu, f"leaf-su1-rail{gpu}") for gpu in range(4)
    }


def test_ibnetdiscover_two_tier_fabric_is_one_spine_group():
    parsed = ibnetdiscover.parse(make_ibnetdiscover(spine_groups=1, units_per_group=3, trays_per_rack=2))
    assert parsed.units == {"su-1": "sg-1", "su-2": "sg-1", "su-3": "sg-1"}


def test_ibnetdiscover_reads_a_few_hundred_switches_in_under_a_second():
    text = make_ibnetdiscover(spine_groups=6, units_per_group=8, racks_per_unit=4, spines_per_group=16)
    assert text.count("\nSwitch\t") == 290
    started = time.perf_counter()
    parsed = ibnetdiscover.parse(text)
    elapsed = time.perf_counter() - started
    assert len(parsed.units) == 48 and len(set(parsed.units.values())) == 6
    assert len(parsed.hosts) == 48 * 4 * 18
    # A figure, never a verdict on a shared machine (the goal: under a second on a quiet one).
    print(f"ibnetdiscover: 290 switches, {text.count(chr(10) + 'Ca')} adapters parsed in {elapsed:.2f} s")


@pytest.mark.parametrize(
    "edit, line, words",
    [
        (lambda t: t.replace('"leaf-su1-rail0" enhanced', '"leaf\x1b[31m" enhanced', 1), None, "control"),
        (lambda t: t + "garbage here\n", -1, "not a line of ibnetdiscover"),
        (lambda t: '[1]\t"S-0002c90300000010"[1]\n' + t, 1, "outside a Switch or Ca block"),
        # Partial output: a block cut off, its peers' links now reach a node the file does not list.
        (
            lambda t: t[: t.index("switchguid=0x2c90300000010")] + t[t.index("switchguid=0x2c90300000020") :],
            None,
            "never lists",
        ),
    ],
)
def test_ibnetdiscover_bad_input_is_refused_with_its_line(edit, line, words):
    text = edit(_fixture("two_spine_groups.ibnetdiscover"))
    with pytest.raises(FabricInputError) as refused:
        ibnetdiscover.parse(text)
    assert words in str(refused.value)
    assert refused.value.line is not None or "never lists" not in words
    if line == -1:
        assert refused.value.line == text.count("\n")
    elif line is not None:
        assert refused.value.line == line


_WHOLE = _fixture("two_spine_groups.ibnetdiscover")
# Every cut from the first node's block up to the last cable's far port number (what follows it is the
# comment ibnetdiscover adds: cutting there loses nothing) loses data.
_FIRST_BLOCK = _WHOLE.index("vendid=")
_LAST_DATA = _WHOLE.rindex("]\t\t#")
_LINE_STARTS = [i + 1 for i, char in enumerate(_WHOLE) if char == "\n" and _FIRST_BLOCK <= i + 1 < _LAST_DATA]


@settings(max_examples=80, deadline=None)
@given(st.one_of(st.integers(_FIRST_BLOCK, _LAST_DATA), st.sampled_from(_LINE_STARTS)))
def test_ibnetdiscover_cut_anywhere_is_refused_naming_a_line_of_what_was_read(cut):
    """Output cut short (a copy stopped, a disk full), mid-line or between lines: refused, never taken as a
    smaller fabric, naming a line of the text it was given; a cut mid-line that leaves no line of the format
    is refused at that last line."""
    text = _WHOLE[:cut]
    lines = text.count("\n") + (not text.endswith("\n"))
    with pytest.raises(FabricInputError) as refused:
        ibnetdiscover.parse(text)
    assert refused.value.line is not None and 1 <= refused.value.line <= lines, str(refused.value)
    if "not a line of ibnetdiscover" in str(refused.value):
        assert refused.value.line == lines
    else:  # a cable or block lost: the message says where the output ends
        assert f"it ends at line {lines:,}" in str(refused.value) or "no " in str(refused.value)


def test_ibnetdiscover_a_cable_listed_from_one_end_only_is_refused():
    """Cut after a host's block line but before its port line: every node the switches reach is listed, but
    the switch's cable to it has no far end."""
    text = _WHOLE[: _WHOLE.rindex("\n[1](") + 1]
    with pytest.raises(FabricInputError, match="does not list that cable back") as refused:
        ibnetdiscover.parse(text)
    assert refused.value.line is not None and _WHOLE.splitlines()[refused.value.line - 1].startswith("[")


def test_ibnetdiscover_a_node_listed_twice_is_refused():
    text = _fixture("two_spine_groups.ibnetdiscover")
    block = text[text.index("vendid=0x2c9\ndevid=0x1021") :]
    with pytest.raises(FabricInputError, match="listed twice"):
        ibnetdiscover.parse(text + "\n" + block)


def test_ibnetdiscover_without_switches_or_leaves_is_refused():
    with pytest.raises(FabricInputError, match="no Switch or Ca block"):
        ibnetdiscover.parse("#\n# Topology file: generated on Mon Nov 30 15:00:00 2026\n#\n")


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300))
def test_ibnetdiscover_never_crashes_on_arbitrary_text(text):
    try:
        ibnetdiscover.parse(text)
    except FabricInputError as refused:
        assert str(refused)


# --- Topograph ----------------------------------------------------------------------------------------------


def test_topograph_v1_labels():
    parsed = read("topograph", (FIXTURES / "topograph_v1_nodes.json").read_bytes())
    assert parsed.units == {"leaf-1": "spine-1", "leaf-2": "spine-1"}
    assert parsed.hosts["gb-r02-t18"] == "leaf-1" and parsed.hosts["gb-r03-t01"] == "leaf-2"
    assert "control-1" not in parsed.hosts
    assert parsed.notes == ["1 nodes without Topograph's fabric labels left aside"]


def test_topograph_v0_labels():
    parsed = read("topograph", (FIXTURES / "topograph_v0_nodes.json").read_bytes())
    assert parsed.units == {"leaf-1": "spine-1", "leaf-2": "spine-1"}
    assert parsed.hosts["gb-r02-t01"] == "leaf-2"


def _node(name, **labels):
    return {"metadata": {"name": name, "labels": labels}}


def test_topograph_switch_ids_become_group_names_and_collisions_are_refused():
    parsed = topograph.parse(
        [_node("h1", **{"fabric.topograph.run/tier-0": "S1", "fabric.topograph.run/tier-1": "S_2"})]
    )
    assert parsed.units == {"s1": "s-2"}
    with pytest.raises(FabricInputError, match="both read as 's1'"):
        topograph.parse(
            [
                _node("h1", **{"fabric.topograph.run/tier-0": "S1"}),
                _node("h2", **{"fabric.topograph.run/tier-0": "s1"}),
            ]
        )


@pytest.mark.parametrize(
    "nodes, words",
    [
        (
            [_node("h1", **{"fabric.topograph.run/tier-0": "a", "network.topology.nvidia.com/leaf": "a"})],
            "both",
        ),
        ([_node("H1", **{"fabric.topograph.run/tier-0": "a"})], "lower case"),
        ([_node("h1", **{"fabric.topograph.run/tier-0": "a\u202e"})], "node 1"),
        (
            [
                _node("h1", **{"fabric.topograph.run/tier-0": "a"}),
                _node("h1", **{"fabric.topograph.run/tier-0": "a"}),
            ],
            "twice",
        ),
        (
            [
                _node("h1", **{"fabric.topograph.run/tier-0": "a", "fabric.topograph.run/tier-1": "x"}),
                _node("h2", **{"fabric.topograph.run/tier-0": "a", "fabric.topograph.run/tier-1": "y"}),
            ],
            "under spine group",
        ),
        ([_node("h1")], "no node has"),
        ([{"metadata": "x"}], "no metadata"),
    ],
)
def test_topograph_bad_labels_are_refused_naming_the_node(nodes, words):
    with pytest.raises(FabricInputError, match=words):
        topograph.parse(nodes)


def test_topograph_json_deep_or_not_a_node_list_is_refused():
    with pytest.raises(FabricInputError, match=r"too deep|not JSON"):
        read("topograph", b"[" * 100_000)
    with pytest.raises(FabricInputError, match="NodeList"):
        read("topograph", json.dumps({"kind": "Pod"}).encode())


def test_topograph_json_with_a_number_too_long_names_it_and_its_line():
    """Python's int() refuses more than 4,300 digits in words of its own (sys.set_int_max_str_digits...)."""
    text = '{"items": [\n  {"metadata": {"name": "h1"}},\n  ' + "9" * 5001 + "\n]}"
    with pytest.raises(FabricInputError) as refused:
        read("topograph", text.encode(), "t.json")
    assert str(refused.value) == "line 3: not JSON: a number too long (more than 4,300 digits)"


# --- the site file ------------------------------------------------------------------------------------------


def test_site_file_yaml():
    parsed = read("site_file", (FIXTURES / "site.yaml").read_bytes(), "site.yaml")
    assert parsed.units == {"su-1": "spine-a", "su-2": "spine-a"}
    assert parsed.racks == {"gb-r01": "su-1", "gb-r02": "su-1", "gb-r03": "su-2"}
    assert parsed.hosts == {"gb-r02-t18": "su-2"}
    assert parsed.unit_leaves == {"su-1": [f"leaf-su1-rail{n}" for n in range(4)]}


def test_site_file_csv():
    parsed = read("site_file", (FIXTURES / "site.csv").read_bytes(), "site.csv")
    assert parsed.units == {"su-1": "spine-a", "su-2": "spine-b"}
    assert parsed.racks == {"gb-r01": "su-1", "gb-r02": "su-1", "gb-r03": "su-2"}


UNIT = "spine_groups:\n  - name: s\n    units:\n      - name: u\n        racks: [{racks}]\n"


@pytest.mark.parametrize(
    "text, line, words",
    [
        (UNIT.format(racks="gb-r01, gb-r01"), 5, "already"),
        (UNIT.format(racks="GB-R01"), 5, "lower case"),
        (UNIT.format(racks="'../etc'"), 5, "rack '../etc'"),
        (UNIT.format(racks='"gb-r01\\u0007"'), 5, "control"),
        (UNIT.format(racks='"gb-\\ud800"'), 5, "surrogate"),
        (UNIT.format(racks="gb-r01") + "extra: 1\n", 6, "unknown key 'extra'"),
        ("spine_groups: &a [x]\nmore: *a\n", 1, "anchors"),
        ("spine_groups:\n" + "  " + "[" * 50 + "]" * 50 + "\n", 2, "nested deeper"),
        ("spine_groups: [\n", 2, "not YAML"),
        ("spine_groups:\n  - name: s\x07\n", 2, "not YAML: a control character (U+0007) YAML does not allow"),
        ("spine_groups:\n\n  - \ufffe\n", 3, "not YAML: a character (U+FFFE) YAML does not allow"),
        ("spine_groups: !!python/object:os.system x\n", 1, "tag"),
        ("", None, "empty"),
        (UNIT.replace("name: u", "name: U").format(racks="gb-r01"), 4, "unit 'U': use lower case"),
        (UNIT.format(racks=""), None, "places no rack"),
    ],
)
def test_site_file_yaml_refusals_name_the_line(text, line, words):
    with pytest.raises(FabricInputError) as refused:
        site_file.parse_yaml(text)
    assert words in str(refused.value)
    assert refused.value.line == line


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
def test_site_file_deep_yaml_never_reaches_the_recursive_composer():
    with pytest.raises(FabricInputError, match="nested deeper"):
        site_file.parse_yaml("a: " + "[" * 200_000 + "]" * 200_000)


@pytest.mark.parametrize(
    "text, line, words",
    [
        ("rack,unit\ngb-r01,u\n", 1, "header"),
        ("spine_group,unit,rack\ns,u,gb-r01\ns,u,gb-r01\n", 3, "already"),
        ("spine_group,unit,rack\ns,u\n", 2, "2 cells"),
        ("spine_group,unit,rack\ns,u,Gb-r01\n", 2, "lower case"),
        ("spine_group,unit,rack\ns,u,gb-r01\nt,u,gb-r02\n", 3, "under spine group"),
        ("spine_group,unit,rack\ns,u,gb\x00\n", 2, "NUL"),
    ],
)
def test_site_file_csv_refusals_name_the_line(text, line, words):
    with pytest.raises(FabricInputError) as refused:
        site_file.parse_csv(text)
    assert words in str(refused.value)
    assert refused.value.line == line


def test_files_too_large_or_not_utf8_are_refused_before_reading():
    with pytest.raises(FabricInputError, match="more than"):
        decode(b"x" * (MAX_BYTES + 1))
    with pytest.raises(FabricInputError, match="not UTF-8") as refused:
        decode(b"spine_groups:\n  - \xed\xa0\x80\n")  # a surrogate encoded (CESU-8): not UTF-8
    assert refused.value.line == 2
