"""Unified diffs of rendered files that match every unchanged line: the one diff the partition preview, the
configuration targets' pushes and the push history show.

difflib.unified_diff builds its SequenceMatcher with autojunk=True: in a text of more than 200 lines, a line
that makes up more than 1% of it (a node file's `---`, `kind: Node`, `fabric.topograph.run/tier-0: su-2`) is
"popular" and never matched, so the unchanged lines among a change were shown removed and added again (a
walkthrough's partition preview read "+90 -81" for a few labels). difflib with autojunk off matches them but
looks every repeated line up among all its copies, again at every level of its recursion: seconds for a
20,000-line node file with a few changes spread through it. So the lines are matched in two passes:
patience diff (the `patiencediff` package, Breezy's, compiled) anchors on the lines found once on each side
(a node file's `name:` lines) in about one pass over the file, and what it leaves unmatched between two
anchors, a few lines each, is matched again by difflib with autojunk off, which finds the most lines two
stretches share (patience diff alone gives up inside a stretch with no line of its own: a ResourceFlavor
file's `spec:` and `labels:` lines were shown removed and added again around a new flavor). A stretch
longer than REFINE_LINES on both sides keeps patience diff's answer: correct, if not the shortest.

The output is difflib.unified_diff's format: the `---`/`+++` headers, `@@ -l,s +l,s @@` hunks with `n` lines
of context, nothing at all when the texts are equal. Pure: no Django.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Sequence

import patiencediff

# A stretch patience diff left unmatched is matched again by difflib (autojunk off) up to this many lines a
# side: a few ms; its cost grows with the square of the lines that repeat (0.3 s at 7,000).
REFINE_LINES = 2000


def matching_blocks(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int, int]]:
    """The lines a and b share, as SequenceMatcher.get_matching_blocks() gives them ((i, j, n) runs in order,
    the last (len(a), len(b), 0)): patience diff's, each stretch between them matched again by difflib."""
    blocks: list[tuple[int, int, int]] = []
    i = j = 0
    for ai, bj, size in patiencediff.PatienceSequenceMatcher(None, a, b).get_matching_blocks():
        if i < ai and j < bj and min(ai - i, bj - j) <= REFINE_LINES:
            refined = difflib.SequenceMatcher(None, a[i:ai], b[j:bj], autojunk=False).get_matching_blocks()
            blocks += [(i + x, j + y, n) for x, y, n in refined if n]
        if size:
            blocks.append((ai, bj, size))
        i, j = ai + size, bj + size
    joined: list[tuple[int, int, int]] = []
    for ai, bj, size in blocks:  # adjacent runs joined, as difflib gives them
        if joined and joined[-1][0] + joined[-1][2] == ai and joined[-1][1] + joined[-1][2] == bj:
            ai, bj, size = joined[-1][0], joined[-1][1], joined.pop()[2] + size
        joined.append((ai, bj, size))
    return [*joined, (len(a), len(b), 0)]


class _Matched(difflib.SequenceMatcher):
    """difflib's opcodes and hunks (get_opcodes, get_grouped_opcodes) over `matching_blocks`."""

    def __init__(self, a: Sequence[str], b: Sequence[str]):
        super().__init__(None, a, b, autojunk=False)
        self.blocks = matching_blocks(a, b)

    def set_seq2(self, b):  # no index of b's lines: difflib's own matching is not used
        self.b = b
        self.matching_blocks = self.opcodes = None

    def get_matching_blocks(self):
        return self.blocks


def opcodes(a: Sequence[str], b: Sequence[str]) -> Sequence[tuple[str, int, int, int, int]]:
    """How b is made from a (SequenceMatcher.get_opcodes' tags and ranges), every unchanged line matched."""
    return _Matched(a, b).get_opcodes()


def unified_diff(
    a: Sequence[str], b: Sequence[str], fromfile: str = "", tofile: str = "", n: int = 3, lineterm: str = "\n"
) -> Iterator[str]:
    """difflib.unified_diff(a, b, fromfile, tofile, n=n, lineterm=lineterm), every unchanged line matched:
    a line is shown removed or added only when it was. (The hunks are written here: difflib.unified_diff
    makes its own matcher, and patiencediff.unified_diff, an older copy of it, writes an empty range as
    `-1,0` where difflib, GNU diff and the pushes' stored diffs say `-0,0`.)"""
    started = False
    for group in _Matched(a, b).get_grouped_opcodes(n):
        if not started:
            started = True
            yield f"--- {fromfile}{lineterm}"
            yield f"+++ {tofile}{lineterm}"
        first, last = group[0], group[-1]
        yield f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@{lineterm}"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in a[i1:i2])
                continue
            if tag in ("replace", "delete"):
                yield from ("-" + line for line in a[i1:i2])
            if tag in ("replace", "insert"):
                yield from ("+" + line for line in b[j1:j2])


def _range(start: int, stop: int) -> str:
    """A hunk's range as difflib writes it: first line (from 1) and count, the count left out when 1; an
    empty range starts at the line before it."""
    length = stop - start
    if length == 1:
        return f"{start + 1}"
    return f"{start + 1 if length else start},{length}"


def diff_text(old: str, new: str, fromfile: str, tofile: str) -> str:
    """The unified diff of two texts, line by line ("" when they are equal)."""
    return "".join(
        unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), fromfile, tofile)
    )


def line_kinds(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(kind, line) for each line of one file's unified diff: "file" for the `---`/`+++` headers, "hunk",
    "add", "del" or "ctx". A header is one before the first hunk: after it, `----` is a removed `---` (a YAML
    document's separator) and `+++` an added `++`, lines to count, not headers."""
    in_hunks = False
    for line in lines:
        if line.startswith("@@"):
            in_hunks = True
            yield "hunk", line
        elif not in_hunks and line.startswith(("---", "+++")):
            yield "file", line
        else:
            yield {"+": "add", "-": "del"}.get(line[:1], "ctx"), line
