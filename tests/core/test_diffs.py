"""The one unified diff (core.diffs): the changed lines only, in difflib's format, fast on big files."""

import difflib
import random

import pytest

from core.diffs import diff_text, opcodes, unified_diff

LARGE = 1000  # lines: where difflib with autojunk off takes seconds on spread changes


def node_file(racks: int, dedicated: dict[str, str] | None = None, su: str = "su-2") -> str:
    """Kubernetes node objects as integrations.kubernetes.render writes them (02-nodes.yaml): every node of
    a scalable unit carries the same `fabric.topograph.run/tier-0`; `dedicated` maps a partition
    (`gb-r02.p2`) to the department it is given to."""
    dedicated = dedicated or {}
    documents = []
    for rack in range(1, racks + 1):
        for slot in range(1, 19):
            partition = f"gb-r{rack:02d}.p{1 + (slot - 1) // 9}"
            department = dedicated.get(partition)
            documents.append(
                "apiVersion: v1\n"
                "kind: Node\n"
                "metadata:\n"
                f"  name: gb-r{rack:02d}-t{slot:02d}\n"
                "  labels:\n"
                f"    accelerator.topograph.run/domain: 0000{rack:04d}-128b-4f33-8c5c-7fd0a6a3a450\n"
                f"    accelerator.topograph.run/sub-domain: 0000{rack:04d}-128b-4f33-8c5c-7fd0a6a3a450."
                f"{1 + (slot - 1) // 9}\n"
                f"    fabric.topograph.run/tier-0: {su}\n"
                "    fabric.topograph.run/tier-1: spine-1\n"
                + (f"    rackplane.io/department: {department}\n" if department else "")
                + f"    rackplane.io/nvlink-partition: {partition}\n"
                "    rackplane.io/pool: nvl72\n"
                f"    rackplane.io/rack: gb-r{rack:02d}\n"
                f"    rackplane.io/service-tier: {department or 'gpu'}\n"
            )
    return "---\n".join(documents)


def changed_lines(diff: str) -> tuple[list[str], list[str]]:
    """(added, removed) lines of a unified diff, headers left out."""
    lines = diff.splitlines()[2:]
    return (
        [line[1:] for line in lines if line.startswith("+")],
        [line[1:] for line in lines if line.startswith("-")],
    )


def test_a_partition_given_to_a_department_shows_exactly_the_labels_that_change():
    """The walkthrough: p2 of a rack given to a department, in a node file of over 200 lines where
    `fabric.topograph.run/tier-0: su-2` is on every node. difflib.unified_diff (autojunk) could not match
    the lines that repeat and showed them removed and added again; only the nine nodes' department label
    (added) and service tier (changed) may be."""
    old, new = node_file(2), node_file(2, {"gb-r02.p2": "vision"})
    assert len(old.splitlines()) > 200 and old.count("fabric.topograph.run/tier-0: su-2\n") == 36

    added, removed = changed_lines(
        diff_text(old, new, "a/kubernetes/02-nodes.yaml", "b/kubernetes/02-nodes.yaml")
    )

    assert sorted(added) == sorted(
        ["    rackplane.io/department: vision"] * 9 + ["    rackplane.io/service-tier: vision"] * 9
    )
    assert removed == ["    rackplane.io/service-tier: gpu"] * 9


def flavors(partitions: list[str]) -> str:
    """Kueue ResourceFlavors as integrations.kubernetes.render writes them (04-resourceflavors.yaml)."""
    return "---\n".join(
        "apiVersion: kueue.x-k8s.io/v1beta2\n"
        "kind: ResourceFlavor\n"
        "metadata:\n"
        f"  name: {p}\n"
        "  labels:\n"
        "    app.kubernetes.io/managed-by: rackplane\n"
        f"    rackplane.io/rack: {p.split('.')[0]}\n"
        f"    rackplane.io/nvlink-partition: {p}\n"
        "spec:\n"
        "  nodeLabels:\n"
        f"    rackplane.io/nvlink-partition: {p}\n"
        "  topologyName: nvlink\n"
        for p in partitions
    )


def test_a_rack_split_in_two_shows_one_flavor_renamed_and_one_added_no_line_of_theirs_again():
    """The second walkthrough: gb-r04's default partition split into p1 and p2. Patience diff alone anchors
    on the lines found once and gives up between them, and showed `  labels:`, `spec:`, `  nodeLabels:` and
    the rack's label removed and added again (+21 -8); the lines the two flavors share are matched."""
    before = ["gb-r01.default", "gb-r02.p1", "gb-r02.p2", *(f"gb-r{r:02d}.default" for r in range(3, 9))]
    after = [q for p in before for q in (["gb-r04.p1", "gb-r04.p2"] if p == "gb-r04.default" else [p])]
    old, new = flavors(before), flavors(after)
    added, removed = changed_lines(diff_text(old, new, "a", "b"))
    assert removed == [
        "  name: gb-r04.default",
        "    rackplane.io/nvlink-partition: gb-r04.default",
        "    rackplane.io/nvlink-partition: gb-r04.default",
    ]
    assert len(added) == 16 and added[:3] == [
        "  name: gb-r04.p1",
        "    rackplane.io/nvlink-partition: gb-r04.p1",
        "    rackplane.io/nvlink-partition: gb-r04.p1",
    ]


def test_a_few_changes_spread_through_a_big_file_are_exactly_the_lines_shown_changed():
    """A fleet's node file (over 20,000 lines), changed at its start, middle and end, then on every 7th node:
    each changed line is shown, and no other (difflib with autojunk off takes seconds here)."""
    old = node_file(80)
    lines = old.splitlines(keepends=True)
    assert len(lines) > 20_000 > 10 * LARGE
    for step in (None, 7):
        nodes = [1, 18 * 40, 18 * 80 - 1] if step is None else list(range(0, 18 * 80, step))
        new = list(lines)
        names = {f"  name: gb-r{1 + n // 18:02d}-t{1 + n % 18:02d}\n" for n in nodes}
        for i, line in enumerate(new):
            if line in names:  # that node's tier-0, 4 lines below its name
                new[i + 4] = "    fabric.topograph.run/tier-0: su-9\n"
        added, removed = changed_lines("".join(unified_diff(lines, new, "a", "b")))
        assert added == ["    fabric.topograph.run/tier-0: su-9"] * len(nodes)
        assert removed == ["    fabric.topograph.run/tier-0: su-2"] * len(nodes)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("", ""),
        ("a\nb\n", "a\nb\n"),
        ("", "one\ntwo\n"),
        ("one\ntwo\n", ""),
        ("one\ntwo\nthree\nfour\n", "zero\none\ntree\nfour\n"),
        ("a\nb\nc\n", "a\nb\nc"),  # the last line loses its newline
        ("".join(f"{i}\n" for i in range(40)), "".join(f"{i}\n" for i in range(40) if i not in (3, 20, 21))),
        ("".join(f"{i}\n" for i in range(40)), "".join(f"{i}\n" if i % 13 else "x\n" for i in range(40))),
    ],
)
def test_the_format_is_difflibs(old, new):
    """Headers, hunk ranges (an empty one included), context and the grouping of hunks: unified_diff's, line
    for line."""
    expected = "".join(
        difflib.unified_diff(old.splitlines(True), new.splitlines(True), "live/x.conf", "rackplane/x.conf")
    )
    assert diff_text(old, new, "live/x.conf", "rackplane/x.conf") == expected
    assert list(unified_diff(old.splitlines(), new.splitlines(), "a", "b", n=1, lineterm="")) == list(
        difflib.unified_diff(old.splitlines(), new.splitlines(), "a", "b", n=1, lineterm="")
    )


def apply(old: list[str], diff: list[str]) -> list[str]:
    """The new text from the old one and a unified diff of them (what `patch` does)."""
    out, at = [], 0
    for line in diff[2:]:
        if line.startswith("@@"):
            start = int(line.split()[1][1:].split(",")[0])
            length = line.split()[1].split(",")[1:] or ["1"]
            start = start - 1 if length != ["0"] else start
            out += old[at:start]
            at = start
        elif line.startswith((" ", "-")):
            assert old[at] == line[1:]
            at += 1
            if line.startswith(" "):
                out.append(line[1:])
        else:
            out.append(line[1:])
    return out + old[at:]


def test_every_diff_remakes_the_new_text_and_is_difflibs_where_both_match_the_same_lines():
    """Random texts, the hard case: few distinct lines, every one repeated. The large ones have one line in
    three found once, patience diff's anchors."""
    rng = random.Random(7)
    compared = 0
    for case in range(600):
        large = case % 30 == 0
        kinds = rng.randint(1, 12)
        old = [
            f"{i}\n" if large and rng.randrange(3) == 0 else f"{rng.randrange(kinds)}\n"
            for i in range(rng.randint(LARGE, 3 * LARGE) if large else rng.randint(0, 60))
        ]
        new = list(old)
        for _ in range(rng.randint(0, 30 if large else 6)):
            at = rng.randint(0, len(new))
            change = rng.randrange(3)
            if change == 0 or not new:
                new.insert(at, f"{rng.randrange(kinds + 3)}\n")
            elif change == 1:
                del new[min(at, len(new) - 1)]
            else:
                new[min(at, len(new) - 1)] = f"{rng.randrange(kinds + 3)}\n"
        diff = list(unified_diff(old, new, "a", "b"))
        assert apply(old, diff) == new
        # Under 200 lines autojunk changes nothing: where difflib matches the same lines, the text is its.
        if (
            not large
            and opcodes(old, new) == difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
        ):
            assert diff == list(difflib.unified_diff(old, new, "a", "b"))
            compared += 1
    assert (
        compared > 250
    )  # the comparison above was made, not skipped (patience picks other lines in the rest)
