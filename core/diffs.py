"""Unified diffs of rendered files that match every unchanged line: the one diff the partition preview, the
configuration targets' pushes and the push history show.

difflib.unified_diff builds its SequenceMatcher with autojunk=True: in a text of more than 200 lines, a line
that makes up more than 1% of it (a node file's `---`, `kind: Node`, `fabric.topograph.run/tier-0: su-2`) is
"popular" and never matched, so the unchanged lines among a change were shown removed and added again (a
walkthrough's partition preview read "+90 -81" for a few labels). Here every line may be matched (autojunk
off), and the cost is kept down for files of thousands of lines: difflib looks each repeated line up among
all its copies, again at every level of its recursion, so a 20,000-line node file with a few changes spread
through it took seconds. What both texts share at their head and tail is matched first, in one pass; what
is left, when longer than DIFFLIB_LINES, is cut at lines found once on each side (see `matching_blocks`).

The output is difflib.unified_diff's, line for line: the `---`/`+++` headers, `@@ -l,s +l,s @@` hunks with
`n` lines of context grouped as difflib groups them, nothing at all when the texts are equal. Pure: no Django.
"""

from __future__ import annotations

import bisect
import difflib
from collections.abc import Iterable, Iterator, Sequence

Opcode = tuple[str, int, int, int, int]

# Up to this many lines a side, a stretch is matched by difflib alone (a few ms on a node file; its cost grows
# with the square of the lines that repeat: 0.3 s at 7,000, 20 s at 20,000 with 31 changes spread out).
DIFFLIB_LINES = 1000


def unified_diff(
    a: Sequence[str], b: Sequence[str], fromfile: str = "", tofile: str = "", n: int = 3, lineterm: str = "\n"
) -> Iterator[str]:
    """difflib.unified_diff(a, b, fromfile, tofile, n=n, lineterm=lineterm) with every unchanged line
    matched (autojunk off): a line is shown removed or added only when it was."""
    started = False
    for group in grouped_opcodes(a, b, n):
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


def diff_text(old: str, new: str, fromfile: str, tofile: str) -> str:
    """The unified diff of two texts, line by line ("" when they are equal)."""
    return "".join(
        unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), fromfile, tofile)
    )


def opcodes(a: Sequence[str], b: Sequence[str]) -> list[Opcode]:
    """How b is made from a, as SequenceMatcher.get_opcodes() says it (equal, replace, delete, insert), every
    unchanged line matched: `matching_blocks` between them."""
    codes: list[Opcode] = []
    i = j = 0
    for ai, bj, size in [*matching_blocks(a, b), (len(a), len(b), 0)]:
        tag = "replace" if i < ai and j < bj else "delete" if i < ai else "insert" if j < bj else ""
        if tag:
            codes.append((tag, i, ai, j, bj))
        i, j = ai + size, bj + size
        if size:
            codes.append(("equal", ai, i, bj, j))
    return codes


def matching_blocks(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int, int]]:
    """The lines a and b share, as (i, j, n) runs (a[i:i+n] == b[j:j+n]) in order, adjacent runs joined.

    Each stretch still to match is first cut down to what lies between its common head and tail (matched
    as they are), then cut again at the lines found exactly once in each side of it (matched in the order
    both keep, the longest such chain: patience diff's anchors; a node file's `name:` lines). A stretch
    with no such line is left to difflib's matcher, autojunk off. So a few changes anywhere in a file of
    thousands of lines cost about one pass over it, where difflib alone looks every repeated line up among
    all its copies, again at every level of its recursion (seconds at 20,000 lines)."""
    blocks: list[tuple[int, int, int]] = []
    todo = [(0, len(a), 0, len(b))]
    while todo:
        alo, ahi, blo, bhi = todo.pop()
        head = 0
        while alo + head < ahi and blo + head < bhi and a[alo + head] == b[blo + head]:
            head += 1
        if head:
            blocks.append((alo, blo, head))
            alo, blo = alo + head, blo + head
        tail = 0
        while alo < ahi - tail and blo < bhi - tail and a[ahi - 1 - tail] == b[bhi - 1 - tail]:
            tail += 1
        if tail:
            blocks.append((ahi - tail, bhi - tail, tail))
            ahi, bhi = ahi - tail, bhi - tail
        if alo == ahi or blo == bhi:
            continue
        anchors = [] if max(ahi - alo, bhi - blo) <= DIFFLIB_LINES else _anchors(a, alo, ahi, b, blo, bhi)
        if not anchors:
            matcher = difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
            blocks += [(alo + i, blo + j, n) for i, j, n in matcher.get_matching_blocks() if n]
            continue
        for i, j in anchors:
            blocks.append((i, j, 1))
            todo.append((alo, i, blo, j))
            alo, blo = i + 1, j + 1
        todo.append((alo, ahi, blo, bhi))
    joined: list[tuple[int, int, int]] = []
    for i, j, n in sorted(blocks):
        if joined and joined[-1][0] + joined[-1][2] == i and joined[-1][1] + joined[-1][2] == j:
            i, j, n = joined[-1][0], joined[-1][1], joined.pop()[2] + n
        joined.append((i, j, n))
    return joined


def _anchors(
    a: Sequence[str], alo: int, ahi: int, b: Sequence[str], blo: int, bhi: int
) -> list[tuple[int, int]]:
    """The lines found exactly once in a[alo:ahi] and once in b[blo:bhi], as (i, j), the longest chain of
    them in the same order on both sides (a longest increasing subsequence of j, patience sorting)."""
    seen: dict[str, list[int]] = {}
    for i in range(alo, ahi):
        seen.setdefault(a[i], [0, i, 0, 0])[0] += 1
    for j in range(blo, bhi):
        if (counts := seen.get(b[j])) is not None:
            counts[2] += 1
            counts[3] = j
    pairs = sorted((i, j) for count_a, i, count_b, j in seen.values() if count_a == 1 and count_b == 1)
    tops: list[int] = []  # tops[k]: the smallest j that ends a chain of k + 1 pairs
    ends: list[int] = []  # ends[k]: the index in pairs of that pair
    before: list[int] = []  # before[p]: the index in pairs of the pair before pair p in its chain
    for p, (_i, j) in enumerate(pairs):
        k = bisect.bisect_left(tops, j)
        before.append(ends[k - 1] if k else -1)
        if k == len(tops):
            tops.append(j)
            ends.append(p)
        else:
            tops[k], ends[k] = j, p
    chain = []
    p = ends[-1] if ends else -1
    while p >= 0:
        chain.append(pairs[p])
        p = before[p]
    return chain[::-1]


def grouped_opcodes(a: Sequence[str], b: Sequence[str], n: int = 3) -> Iterator[list[Opcode]]:
    """The hunks: SequenceMatcher.get_grouped_opcodes(n) over `opcodes(a, b)` (the same grouping, line for
    line: changes with up to n lines of context, a hunk split where more than 2n lines are unchanged)."""
    codes = opcodes(a, b) or [("equal", 0, 1, 0, 1)]
    if codes[0][0] == "equal":
        tag, i1, i2, j1, j2 = codes[0]
        codes[0] = tag, max(i1, i2 - n), i2, max(j1, j2 - n), j2
    if codes[-1][0] == "equal":
        tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > n + n:
            group.append((tag, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - n), max(j1, j2 - n)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def _range(start: int, stop: int) -> str:
    """A hunk's range as unified diffs write it: first line (from 1) and count, the count left out when 1; an
    empty range starts at the line before it."""
    length = stop - start
    if length == 1:
        return f"{start + 1}"
    return f"{start + 1 if length else start},{length}"


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
