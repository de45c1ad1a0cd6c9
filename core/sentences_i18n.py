"""Sentences stored in English (core.sentences), shown in the viewer's language.

A sentence is split into its clauses ("; "); each clause is matched against the registered templates (the
most specific first) and the template's translation is filled with the clause's values, themselves read the
same way (a duration, a nested reason). A value that is a list ("a, b, c") is read item by item when every
item is a template's ("p1 9 trays, p2 9 trays"); a value named like a count matches numbers only (NUMBERS);
anything else (a name, a host
list, a clause an older release wrote, a text cut at its column's length) is shown as stored. Templates
register when their module is imported: the pages that show a module's sentences import it.
"""

from __future__ import annotations

import re
from functools import lru_cache

from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import get_language, gettext, pgettext

from core.moments import UTC_WORDS, moment_html
from core.sentences import CLAUSES, TEMPLATES, VALUE_WORDS

PLACEHOLDER = re.compile(r"%\((\w+)\)s")
DEPTH = 5  # values inside values: a reason in a reason, a duration in it
ITEMS = ", "
# Values that are numbers (or tray ranges, "1-6,8,18"): matched as such, so a template's words are never
# taken for part of a count ("1 of its GPUs are unhealthy" is not read as "<it is drained and 1> of ...").
NUMBERS = frozenset(
    {
        "base", "capacity", "clique", "count", "days", "free", "gpus", "guaranteed", "held", "hours", "index",
        "intended", "job", "kept", "largest", "length", "levels", "limit", "minutes", "more", "most", "nodes",
        "others", "partition_id", "parts", "plan", "push", "racks", "seconds", "size", "slot", "slots",
        "total", "trays",
    }
)  # fmt: skip
NUMBER = r"[0-9][0-9.,-]*"
# Values that are one name (a rack, a host, a planned partition's name, a job's, a person's user name, a
# project's "department/project"): no spaces, so "gb-r03: p1 9 trays" is a rack and its sizes, not a
# partition called "gb-r03: p1".
IDENTIFIERS = frozenset(
    {
        "backend_id",
        "backend_kind",
        "department",
        "department_slurm",
        "host",
        "job_name",
        "layout",
        "name",
        "name_again",
        "near",
        "owner",
        "person",
        "policy",
        "project",
        "rack",
        "rendered_file",
        "signal",
        "slurm_after",
        "slurm_before",
        "tier",
        "topology",
        "who",
    }
)
IDENTIFIER = r"[^\s;]+"
# Values that are a name people gave (a job's, a department's, a health rule's) or a fault as the hardware
# names it (a health event's title, "XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS)"): any text, never a sentence.
NAMES = frozenset({"department_name", "fault", "job_title", "rule"})
# A tray's state in words ("drained", "in maintenance"): never holds " and " (that joins two reasons).
PHRASES = frozenset({"state"})
PHRASE = r"(?:(?! and )[^,;])+?"
# A count and what it counts, one item of a list ("1,204 running jobs" in "1,204 running jobs, 3 waiting
# jobs"; "4 racks" in "4 racks, 6 partitions, 288 GPUs"): a number, then words without a comma.
COUNTED = frozenset({"partition_count", "rack_count", "running", "waiting"})
COUNTED_WORDS = rf"{NUMBER} [^,;]+?"


_CHANGE = r"[^;:,]+? (?:[^\s;,]+ -> [^\s;,]+|changed)"
# Values of a known shape, so a template of few words ("<GPUs> report <domain>", "<rack> as <preset>") is
# never taken for someone else's sentence: a GPU as the node-report problems name it ("GPU 3 (GPU-...)"), a
# range of GPUs ("GPU 0-2, 5"), an NVLink domain ("<cluster UUID>.<clique ID>"), a preset ("2x9").
SHAPES = {
    "domain": r"[0-9a-f-]+\.[0-9]+",
    "gpu": r"GPU [0-9]+ \([^()]*\)",
    "gpu_list": r"GPU [0-9][0-9, -]*",
    "preset": r"[0-9]+x[0-9]+",
    # A job backend as Rackplane names it: the embedded one's "rendered files", or a target's kind and name
    # ("Slurm (prod)"; integrations.dispatch.backend_for).
    "backend": r"rendered files|[^:;()]+ \([^()]*\)",
    # A backend job's state as Rackplane reads it (integrations.jobs.BackendJobState), an exit code.
    "backend_state": r"pending|running|completed|failed|cancelled|unknown",
    "code": r"-?[0-9]+",
    # A job's priority class as stored ("inference"): one word, so "waiting: inference jobs ..." is the
    # waiting clause around the class's sentence (whose value scheduling.words reads as the class's label).
    "priority_class": r"[a-z]+",
    # The partitions a job was placed in ("gb-r03 default, gb-r03 p2"): names, never the " · " that a placed
    # event's "why here" follows (scheduling.words.PLACED_WHY), so that sentence is read as its own.
    "partitions": r"(?:(?! · )[^;])+?",
    # Fields a change touched, each with its values or "changed" (integrations.words.CHANGED_FIELDS:
    # "guarantee 64 -> 16, limit none -> 80"), so "<what>: <changes>" is never taken for another "x: y".
    "field_changes": rf"{_CHANGE}(?:, {_CHANGE})*",
    # What a tenancy change touched ("department research", "POSIX account of alice": its kind, then its
    # name), never one word, so "<what>: <changes>" is not taken for "<rack>: <sizes>".
    "changed": r"[^:;]+? [^:;]+?",
    "changed_field": r"[^:;,]+",
    "old_value": r"[^\s;,]+",
    "new_value": r"[^\s;,]+",
}


# Values that are a moment (core.moments.utc_words: "2026-11-30 01:02:03 UTC"; a time alone, "07:24 UTC", as
# an older release wrote some): shown as HTML in the viewer's zone, named.
MOMENTS = frozenset({"at", "ends_at"})
MOMENT = rf"{UTC_WORDS}|\d\d:\d\d(?::\d\d)? UTC"


def _value_pattern(name: str) -> str:
    if name in MOMENTS:
        return MOMENT
    if name in SHAPES:
        return SHAPES[name]
    if name in NUMBERS:
        return NUMBER
    if name in IDENTIFIERS:
        return IDENTIFIER
    if name in COUNTED:
        return COUNTED_WORDS
    return PHRASE if name in PHRASES else ".+?"


@lru_cache(maxsize=4)
def _patterns(count: int) -> tuple[tuple[re.Pattern, str], ...]:
    """The first `count` registered templates as patterns, the longest literal text first (the most
    specific wins). Keyed by the count: a module imported later adds templates."""
    compiled = []
    for template in dict.fromkeys(TEMPLATES[:count]):
        parts = PLACEHOLDER.split(template)
        pattern = "".join(
            re.escape(part) if index % 2 == 0 else f"(?P<{part}>{_value_pattern(part)})"
            for index, part in enumerate(parts)
        )
        literal = sum(len(part) for part in parts[::2])
        # Of two with as much literal text, the one whose values have a shape ("%(backend)s: %(backend_state)s
        # (%(message)s)" before "%(first)s and %(second)s").
        shaped = sum(_value_pattern(name) != ".+?" for name in parts[1::2])
        compiled.append(((literal, shaped), re.compile(pattern + r"\Z", re.DOTALL), template))
    compiled.sort(key=lambda entry: (-entry[0][0], -entry[0][1]))
    return tuple((pattern, template) for _, pattern, template in compiled)


def patterns() -> tuple[tuple[re.Pattern, str], ...]:
    return _patterns(len(TEMPLATES))


def _match(text: str) -> tuple[str, dict[str, str]] | None:
    for pattern, template in patterns():
        match = pattern.match(text)
        if match is not None:
            return template, match.groupdict()
    return None


def _kept(text: str, mark: bool) -> str:
    """A text no template matched (a name, a host list, an outside system's words, a clause an older release
    wrote): as stored; as HTML, escaped and marked as data a browser's translator leaves alone (a count or
    a range is not marked: it holds no words)."""
    if not mark:
        return text
    if not text or re.fullmatch(NUMBER, text):
        return escape(text)
    return format_html('<span translate="no">{}</span>', text)


def _moment(text: str, mark: bool) -> str:
    """A moment: as HTML in the viewer's zone (core.moments.moment_html); as text as stored (UTC, named)."""
    return (mark and moment_html(text)) or _kept(text, mark)


def _clause(text: str, depth: int, mark: bool = False) -> str:
    if depth > DEPTH or not text:
        return _kept(text, mark)
    words = escape if mark else str
    if depth and ITEMS in text:  # a value that is a list of template sentences: item by item
        items = text.split(ITEMS)
        if all(_match(item) is not None for item in items):
            return words(pgettext("between the items of a list in a sentence", ", ")).join(
                _clause(item, depth + 1, mark) for item in items
            )
    found = _match(text)
    if found is not None:
        template, values = found
        # (In English, as stored: the value is the word the API and the job form take.)
        labels = {} if (get_language() or "en").startswith("en") else VALUE_WORDS.get(template, {})
        translated = {
            # A choice's stored value, in its words (a job's topology, "partition", as its label).
            name: words(str(labels[name][value]))
            if value in labels.get(name, {})
            # A name is data, never read as a sentence (a partition called "preempted" stays so).
            else _moment(value, mark)
            if name in MOMENTS
            else _kept(value, mark)
            if name in IDENTIFIERS or name in NAMES
            else _clause(value, depth + 1, mark)
            for name, value in values.items()
        }
        return _fill(words(gettext(template)), translated) if translated else words(gettext(template))
    return _kept(text, mark)


# Kana, kanji and Japanese punctuation: a translation puts a space between a value and its words ("%(rack)s
# の"), as Japanese does beside Latin letters and numbers; beside a value that is Japanese itself (a clause
# read back, "レンダリング済みファイル") the space goes.
JAPANESE = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\u3001-\u303f\uff01-\uff60]")
TAG = re.compile(r"<[^>]*>")


def _fill(template: str, values: dict[str, str]) -> str:
    """`template` (a translation) with its placeholders filled, without a space between Japanese words."""
    parts = PLACEHOLDER.split(template)
    out = parts[0]
    for index in range(1, len(parts), 2):
        value, after = values[parts[index]], parts[index + 1]
        shown = TAG.sub("", value)
        if (
            shown
            and out.endswith(" ")
            and JAPANESE.match(shown[0])
            and JAPANESE.match(TAG.sub("", out)[-2:-1] or "a")
        ):
            out = out[:-1]
        if (
            shown
            and after.startswith(" ")
            and JAPANESE.match(shown[-1])
            and JAPANESE.match(after[1:2] or "a")
        ):
            after = after[1:]
        out += value + after
    return out


@lru_cache(maxsize=4096)
def _translated(text: str, language: str, count: int, mark: bool = False, zone: str = "UTC") -> str:
    """`text` in `language`; `zone`, the viewer's (its moments' as HTML), keys the cache only."""
    clauses = text.split(CLAUSES)
    if not any(_match(clause) for clause in clauses):
        return _kept(text, mark)  # no sentence of ours (an outside system's reason): as written, "; " too
    separator = pgettext("between the clauses of a scheduler's reason", "; ")
    return (escape(separator) if mark else separator).join(_clause(clause, 0, mark) for clause in clauses)


def translate(text: str) -> str:
    """`text`, a sentence stored in English, in the active language."""
    language = get_language() or "en"
    if not text or language.startswith("en"):
        return text
    return _translated(text, language, len(TEMPLATES))


def translate_html(text: str) -> SafeString:
    """`text`, a sentence stored in English, as HTML in the active language (English too): the words are
    the templates' (translated), and what is data (a name, a UUID, text no template matched, such as an
    outside system's own reason) is marked `translate="no"`, so a browser's translator leaves it alone and
    the page's wording can be checked apart from its data."""
    if not text:
        return mark_safe("")
    zone = timezone.get_current_timezone_name()
    return mark_safe(_translated(str(text), get_language() or "en", len(TEMPLATES), True, zone))


def log_words(line: str) -> str:
    """A log line's words (core.moments.stamped_lines_html) as HTML in the viewer's language when Rackplane
    wrote them from a template (a fabric step, a push's reason), else as written (a target's own output, an
    English viewer's)."""
    return translate_html(line) if translate(line) != line else escape(line)


# The value of a stored sentence holding an outside system's own words ("Slurm (x): pending (<its words>)").
OUTSIDE_WORDS = "message"


def outside_words(text: str) -> str:
    """The words an outside system wrote inside a stored sentence (the `message` of "%(backend)s: ...
    (%(message)s)"), when no template of ours matches them: "" when there are none (Rackplane's own
    words, or a sentence of another shape). A page says whose words they are and which zone their times are
    in, as it cannot show them in the viewer's."""
    for clause in str(text or "").split(CLAUSES):
        found = _match(clause)
        if found is not None:
            words = found[1].get(OUTSIDE_WORDS)
            if words and not _ours(words):
                return words
    return ""


def _ours(text: str) -> bool:
    """`text` is a sentence of ours: a template with words of its own matches it ("%(rack)s: %(sizes)s" also
    matches a backend's "BackoffLimitExceeded: Job has reached ...", and says nothing)."""
    found = _match(text)
    return found is not None and re.search("[A-Za-z]", PLACEHOLDER.sub("", found[0])) is not None


def begins_with_value(text: str) -> bool:
    """`text`, a stored sentence, begins with a value of its first clause's template ("inference jobs run
    only within ...": "%(priority_class)s jobs ..."), a name a page shows as written wherever the sentence
    stands, never capitalised at the start of one."""
    found = _match(str(text or "").split(CLAUSES)[0])
    return found is not None and found[0].startswith("%(")
