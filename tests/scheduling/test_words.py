"""The scheduler's sentences read back in the viewer's language (scheduling.words): every template the engine
registers is found again from the English it writes, with its values, whatever the values are; a
sentence of several clauses is translated clause by clause; English viewers get the text as stored."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.utils import translation
from hypothesis import given, settings
from hypothesis import strategies as st

import inventory.planning  # noqa: F401  (the wizard's templates: registered on import)
from core import sentences, sentences_i18n
from core.moments import utc_words
from scheduling import words
from scheduling.engine.words import CLAUSES, TEMPLATES, say

# Values as the engine writes them: counts, partition labels, host lists, durations, job numbers.
VALUES = st.one_of(
    st.integers(min_value=0, max_value=100_000).map(str),
    st.sampled_from(
        ["gb-r01 p1", "r2 p2", "gb-r03-t04, gb-r03-t05", "about 5 min", "about 2.5 h", "research"]
    ),
    st.from_regex(r"[a-z][a-z0-9-]{0,12}( p[0-9])?", fullmatch=True),
)


NUMBERS = st.one_of(
    st.integers(min_value=0, max_value=100_000).map(str), st.sampled_from(["1-6,8,18", "2.5"])
)


IDENTIFIERS = st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True)
PHRASES = st.sampled_from(["drained", "in maintenance", "waiting for service"])
COUNTED = st.sampled_from(["1 running job", "1,204 waiting jobs", "4 racks", "1 partition"])
SHAPES = {
    "gpu": st.sampled_from(["GPU 0 (GPU-00000000-0000-0000-0000-0000000000a1)", "GPU 7 (GPU-ab)"]),
    "gpu_list": st.sampled_from(["GPU 0", "GPU 0-2, 5", "GPU 1, 3"]),
    "preset": st.sampled_from(["2x9", "18x1"]),
    "domain": st.sampled_from(["5e3b0c1a-0000-4000-8000-00000000a001.7", "ab.32766"]),
    "backend": st.sampled_from(["rendered files", "Slurm (prod)", "Kubernetes (lab cluster)"]),
    "backend_state": st.sampled_from(["pending", "running", "completed", "failed", "cancelled", "unknown"]),
    "code": st.integers(min_value=-255, max_value=255).map(str),
    "priority_class": st.sampled_from(["train", "build", "inference"]),
    "partitions": st.sampled_from(["gb-r03 default", "gb-r01 p1, gb-r01 p2"]),
    "changed": st.sampled_from(
        ["department research", "project research/llm-pretrain", "POSIX account of a"]
    ),
    "field_changes": st.sampled_from(["guarantee 64 -> 16", "limit none -> 80, department changed"]),
    "changed_field": st.sampled_from(["guarantee", "storage quota (GiB)", "P_Key"]),
    "old_value": st.sampled_from(["64", "none", "10.0.0.0/16"]),
    "new_value": st.sampled_from(["16", "none", "/exports/research"]),
}
# A moment as stored sentences hold it (core.moments.utc_words), or a time alone (as older releases wrote).
MOMENTS = st.datetimes(datetime(2000, 1, 1), datetime(2100, 1, 1), timezones=st.just(UTC)).map(
    utc_words
) | st.sampled_from(["07:24 UTC", "23:59:59 UTC"])
# A name people gave: any text, spaces and words too (a job called "run the tests (again)").
NAMES = st.sampled_from(["train-7b", "run the tests (again)", "Applied ML", "preempted"])


def _strategy(name: str):
    if name in sentences_i18n.MOMENTS:
        return MOMENTS
    if name in sentences_i18n.SHAPES:
        return SHAPES[name]
    if name in sentences_i18n.NAMES:
        return NAMES
    if name in sentences_i18n.NUMBERS:
        return NUMBERS
    if name in sentences_i18n.IDENTIFIERS:
        return IDENTIFIERS
    if name in sentences_i18n.COUNTED:
        return COUNTED
    return PHRASES if name in sentences_i18n.PHRASES else VALUES


def _names(template: str) -> list[str]:
    return words.PLACEHOLDER.findall(template)


def test_the_engine_registers_its_templates_once_each_and_with_distinct_values():
    registered = list(dict.fromkeys(TEMPLATES))
    assert len(registered) >= 40  # the scheduler's, placement's and the Django side's
    for template in registered:
        assert CLAUSES not in template, f"a template is one clause: {template!r}"
        names = _names(template)
        assert len(names) == len(set(names)), template


@pytest.mark.parametrize("template", list(dict.fromkeys(TEMPLATES)))
@settings(max_examples=12, deadline=None)  # ~50 templates: 600 sentences in all
@given(data=st.data())
def test_every_template_is_found_again_from_the_english_it_writes(template, data):
    values = {name: data.draw(_strategy(name), label=name) for name in _names(template)}
    text = say(template, **values)
    assert CLAUSES not in text or CLAUSES in "".join(values.values())
    found = next(
        (
            (candidate, match)
            for candidate, match in ((t, p.match(text)) for p, t in sentences_i18n.patterns())
            if match
        ),
        None,
    )
    assert found is not None, text
    candidate, match = found
    # The template that wrote it is the one read back, with the same values (a wrong template would be
    # translated as another sentence).
    assert (candidate, match.groupdict()) == (template, values)


def test_english_viewers_get_the_stored_text():
    text = "waiting: no tray has 2 free GPUs; trays are reserved for it, expected to start in about 5 min"
    with translation.override("en"):
        assert words.translate(text) == text


def test_an_unknown_clause_is_kept_as_stored_and_the_known_ones_translated(monkeypatch):
    """With a stand-in translation (in brackets), the known clauses and their values change, the unknown one
    stays."""
    monkeypatch.setattr(sentences_i18n, "gettext", lambda text: f"[{text}]")
    monkeypatch.setattr(sentences_i18n, "pgettext", lambda context, text: " | ")
    sentences_i18n._translated.cache_clear()
    with translation.override("ja"):
        out = words.translate("waiting: no GPU is free; something an older release wrote; back in the queue")
    sentences_i18n._translated.cache_clear()
    assert out == "[waiting: [no GPU is free]] | something an older release wrote | [back in the queue]"


@pytest.mark.parametrize(
    ("stored", "read"),
    [
        # A count is a number, not "it is drained and 1" (the words of another template around it).
        (
            "Tray 5 (gb-r03-t05) is in p1 although it is drained and 1 of its GPUs are unhealthy: leave it "
            "out unless it will be fixed soon.",
            "[Tray 5 (gb-r03-t05) is in p1 although [[it is [drained]] and [1 of its GPUs are unhealthy]]: "
            "leave it out unless it will be fixed soon.]",
        ),
        # A name has no spaces, so the rack and its partitions' sizes are read apart; the sizes item by item.
        (
            "gb-r03: p1 9 trays, p2 9 trays; no overlaps, names unique, Slurm block sizes valid.",
            "[gb-r03: [p1 9 trays], [p2 9 trays]] ; [no overlaps, names unique, Slurm block sizes valid.]",
        ),
    ],
)
def test_composed_sentences_are_read_back_template_by_template(monkeypatch, stored, read):
    """The wizard's findings as the planner writes them, read back with a stand-in translation that puts
    each template it found in brackets: every value is read by its own template, none swallowed."""
    monkeypatch.setattr(sentences_i18n, "gettext", lambda template: f"[{template}]")
    monkeypatch.setattr(sentences_i18n, "pgettext", lambda context, text: text if text == ", " else " ; ")
    sentences_i18n._translated.cache_clear()
    with translation.override("ja"):
        out = sentences_i18n.translate(stored)
    sentences_i18n._translated.cache_clear()
    assert out == read


@pytest.mark.parametrize(
    ("seconds", "written"),
    [
        (60, "about 1 min"),
        (119 * 60, "about 119 min"),
        (2 * 3600, "about 2.0 h"),
        (9.9 * 3600, "about 9.9 h"),
        (9.96 * 3600, "about 10 h"),  # never "about 10.0 h"
        (23.9 * 3600, "about 24 h"),  # a tenth of an hour is noise in an estimate that long
        (47.5 * 3600, "about 48 h"),
        (1234 * 3600, "about 1,234 h"),
    ],
)
def test_durations_are_written_in_whole_hours_from_ten_hours(seconds, written):
    assert sentences.minutes(seconds) == written
    with translation.override("ja"):
        # The same figure in Japanese: the template's, its number unchanged.
        assert words.translate(written) == written.replace("about ", "約 ").replace(" min", " 分").replace(
            " h", " 時間"
        )


@pytest.mark.parametrize(
    ("seconds", "written"),
    [
        (30 * 60, "30 min"),
        (119 * 60, "119 min"),
        (120 * 60, "2 h"),
        (150 * 60, "2.5 h"),
        (135 * 60, "135 min"),  # 2.25 h: a set wait is never rounded to "2.2 h"
        (24 * 3600, "24 h"),
        (1234 * 3600, "1,234 h"),
    ],
)
def test_a_set_wait_is_written_exactly(seconds, written):
    from scheduling.services.admission import wait_words

    assert wait_words(seconds) == written


@given(st.integers(min_value=1, max_value=60 * 24 * 60))
def test_a_set_wait_reads_back_as_the_minutes_it_was(minutes):
    from scheduling.services.admission import wait_words

    number, unit = wait_words(minutes * 60).split(" ")
    value = float(number.replace(",", ""))
    assert round(value * (60 if unit == "h" else 1)) == minutes
