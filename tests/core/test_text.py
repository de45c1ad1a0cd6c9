"""core.textrule / core.text: the one rule for names and free text.

Job names with a newline or a bidi override (U+202E) used to be accepted, by the API and the admin alike,
while a tray's drain reason refused them; now every name and free-text input holds to one rule, and the error
names the field and the character (U+XXXX at a position).
"""

from __future__ import annotations

import unicodedata

import pytest
from django import forms
from django.core.exceptions import ValidationError
from hypothesis import example, given, settings
from hypothesis import strategies as st
from rest_framework import serializers

from core.fields import KnownFieldsOnly
from core.text import TextField, TextFormField, TextValidator, text_problem, validate_text
from core.textrule import BIDI_CONTROLS
from scheduling.models import Job
from tenancy.models import Department, Project

# ---- the pure rule ---------------------------------------------------------------------------------------

REFUSED = [
    ("job\nname", "control", "U+000A", 4),
    ("job\rname", "control", "U+000D", 4),
    ("job\tname", "control", "U+0009", 4),
    ("nul\x00", "control", "U+0000", 4),
    ("esc\x1b[31m", "control", "U+001B", 4),
    ("c1\x85", "control", "U+0085", 3),
    ("abc\u202eevil", "bidi", "U+202E RIGHT-TO-LEFT OVERRIDE", 4),
    ("\u2066x", "bidi", "U+2066 LEFT-TO-RIGHT ISOLATE", 1),
    ("a\u200fb", "bidi", "U+200F RIGHT-TO-LEFT MARK", 2),
    ("a\u061cb", "bidi", "U+061C ARABIC LETTER MARK", 2),
    ("zero\u200bwidth", "format", "U+200B ZERO WIDTH SPACE", 5),
    ("\ufeffbom", "format", "U+FEFF", 1),
    ("soft\u00adhyphen", "format", "U+00AD SOFT HYPHEN", 5),
    ("ad\u200dmin", "format", "U+200D ZERO WIDTH JOINER", 3),  # a joiner between ASCII letters only hides
    ("line\u2028sep", "separator", "U+2028 LINE SEPARATOR", 5),
    ("lone\ud800", "surrogate", "U+D800", 5),
    ("\udfff", "surrogate", "U+DFFF", 1),
    ("private\ue000", "private", "U+E000", 8),
    ("non\ufdd0char", "noncharacter", "U+FDD0", 4),
    ("non\U0010ffff", "noncharacter", "U+10FFFF", 4),
    # A form's invalid UTF-8 (a lone surrogate's bytes, %ED%A0%80) arrives decoded as replacement characters.
    ("N\ufffd\ufffd\ufffd", "replacement", "U+FFFD REPLACEMENT CHARACTER", 2),
    # Default-ignorable characters outside category Cf print as nothing too (found by an outside test):
    ("admin\u3164", "format", "U+3164 HANGUL FILLER", 6),
    ("a\uffa0b", "format", "U+FFA0 HALFWIDTH HANGUL FILLER", 2),
    ("a\u115fb", "format", "U+115F HANGUL CHOSEONG FILLER", 2),
    ("a\u17b4b", "format", "U+17B4 KHMER VOWEL INHERENT AQ", 2),
    ("a\ufe0fb", "format", "U+FE0F VARIATION SELECTOR-16", 2),  # a selector after ASCII selects nothing
    ("\ufe0eab", "format", "U+FE0E VARIATION SELECTOR-15", 1),
    ("ab\U000e0100", "format", "U+E0100 VARIATION SELECTOR-17", 3),
    ("a\u034fb", "format", "U+034F COMBINING GRAPHEME JOINER", 2),
    ("a\u180bb", "format", "U+180B MONGOLIAN FREE VARIATION SELECTOR ONE", 2),
    ("a\u2065b", "format", "U+2065", 2),  # reserved default-ignorable (unassigned)
    ("a\U000e0080b", "format", "U+E0080", 2),
]


@pytest.mark.parametrize(("text", "code", "named", "position"), REFUSED)
def test_refused_characters_are_named_with_their_code_point_and_position(text, code, named, position):
    problem = text_problem(text)
    assert problem is not None and problem.code == code
    message = problem.message("name")
    assert message.startswith("name contains ")
    assert named in message
    assert f"at position {position} " in message


@pytest.mark.parametrize(
    "text",
    [
        "train-llm",
        "Llama 3 70B: pre-training, run #2 (ablation)",
        "日本語のジョブ",
        "Müller's job \u2013 été",  # an en dash
        "\u0646\u0627\u0645\u200c\u06a9\u0627\u0631",  # Persian needs the ZWNJ between its letters
        "क्\u200dष",  # and Devanagari the joiner
        "👩\u200d🔬 science",  # an emoji ZWJ sequence
        "emoji \u2764\ufe0f",  # a variation selector after the character it selects a glyph of
        "keycap 1\ufe0f\u20e3",  # an ASCII digit's keycap emoji
        "\u845b\U000e0100",  # an ideographic variation sequence
        "\u1820\u180b",  # a Mongolian free variation selector after its letter
        "",
    ],
)
def test_ordinary_text_in_any_script_is_taken(text):
    assert text_problem(text) is None


def test_a_multiline_field_takes_newlines_tabs_and_crlf_but_nothing_else():
    script = "#!/bin/bash\r\n\tsrun python train.py\n"
    assert text_problem(script, multiline=True) is None
    assert text_problem(script) is not None
    assert text_problem("a\rb", multiline=True).code == "control"  # a bare CR rewrites a terminal line
    assert text_problem("echo ok\n# \u202e }", multiline=True).code == "bidi"  # Trojan Source
    assert text_problem("x\x1b[2J", multiline=True).code == "control"


def test_over_long_values_are_refused_with_both_lengths():
    problem = text_problem("x" * 201, max_length=200)
    assert problem.code == "too_long"
    assert problem.message("name") == "name is 201 characters long: at most 200 are taken."
    assert text_problem("x" * 200, max_length=200) is None


def test_validate_text_raises_djangos_validation_error_naming_the_field():
    with pytest.raises(ValidationError) as caught:
        validate_text("a\u202eb", field="reason", max_length=160)
    assert caught.value.code == "bidi"
    assert caught.value.messages[0].startswith("reason contains U+202E RIGHT-TO-LEFT OVERRIDE at position 2")
    validate_text("fine", field="reason", max_length=160)


# ---- property: what the rule takes is exactly what it promises --------------------------------------------


def _allowed(char: str, before: str, after: str, multiline: bool) -> bool:
    category = unicodedata.category(char)
    if multiline and char in "\n\t":
        return True
    if multiline and char == "\r":
        return after == "\n"
    if char in "\u200c\u200d":
        return bool(before) and bool(after) and not before.isascii() and not after.isascii()
    if category in ("Cc", "Cf", "Cs", "Co", "Zl", "Zp"):
        return False
    cp = ord(char)
    if char in "\u3164\uffa0\u115f\u1160\u17b4\u17b5":  # letters that print as nothing
        return False
    if 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF or 0x180B <= cp <= 0x180D or cp in (0x180F, 0x34F):
        return bool(before) and (not before.isascii() or after == "\u20e3")
    if cp == 0x2065 or 0xFFF0 <= cp <= 0xFFF8 or 0xE0000 <= cp <= 0xE0FFF:  # reserved default-ignorable
        return False
    if char == "\ufffd":  # the replacement character: what was sent was not valid UTF-8
        return False
    return not (0xFDD0 <= cp <= 0xFDEF or (cp & 0xFFFE) == 0xFFFE)


@pytest.mark.slow(reason="over 0.3 s on 2 cores, measured: beyond make test-fast's budget")
@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.characters(codec=None), max_size=40), st.booleans(), st.integers(0, 50))
@example("a\u202eb", False, 10)
@example("\ud800", True, 10)
@example("x\r\n", True, 10)
@example("a\ufffd", False, 0)
def test_the_rule_refuses_exactly_the_characters_it_names(text, multiline, limit):
    problem = text_problem(text, max_length=limit, multiline=multiline)
    bad = [
        i
        for i, char in enumerate(text)
        if not _allowed(char, text[i - 1 : i] if i else "", text[i + 1 : i + 2], multiline)
    ]
    if bad:
        assert problem is not None and problem.position == bad[0] + 1
        assert problem.char == text[bad[0]]
        assert f"U+{ord(text[bad[0]]):04X}" in problem.message("f")
        assert BIDI_CONTROLS.isdisjoint(text[: bad[0]])
    elif len(text) > limit:
        assert problem is not None and problem.code == "too_long"
    else:
        assert problem is None
    if problem is None:
        text.encode("utf-8")  # what the rule takes, UTF-8 (the database, logs, Slurm) can always carry


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.characters(codec="utf-8", categories=["L", "M", "N", "P", "S", "Zs"]), max_size=60)
)
def test_visible_text_of_every_script_is_taken(text):
    # Noncharacters, blank letters and stray selectors are in these categories but are refused (above).
    if all(_allowed(c, text[i - 1 : i] if i else "", text[i + 1 : i + 2], False) for i, c in enumerate(text)):
        assert text_problem(text) is None


# ---- the adapters: DRF field, form field, model validator -------------------------------------------------


class NameSerializer(KnownFieldsOnly, serializers.Serializer):
    name = TextField(max_length=20)
    script = TextField(multiline=True, required=False, trim_whitespace=False)


def test_the_drf_field_names_the_field_and_the_character():
    serializer = NameSerializer(data={"name": "job\u202e"})
    assert not serializer.is_valid()
    assert serializer.errors["name"][0].startswith(
        "name contains U+202E RIGHT-TO-LEFT OVERRIDE at position 4"
    )
    serializer = NameSerializer(data={"name": "x" * 21})
    assert not serializer.is_valid()
    assert "21 characters long: at most 20" in serializer.errors["name"][0]
    serializer = NameSerializer(data={"name": "ok", "script": "#!/bin/sh\n\techo hi\n"})
    assert serializer.is_valid(), serializer.errors


class NameForm(forms.Form):
    name = TextFormField(max_length=20, label="Job name")
    notes = TextFormField(multiline=True, required=False)


def test_the_form_field_names_the_field_and_the_character():
    form = NameForm(data={"name": "job\nname"})
    assert not form.is_valid()
    assert form.errors["name"][0].startswith("Job name contains U+000A LINE FEED (a newline) at position 4")
    assert NameForm(data={"name": "job", "notes": "line 1\r\nline 2"}).is_valid()
    assert isinstance(NameForm().fields["notes"].widget, forms.Textarea)


def test_the_validator_deconstructs_for_migrations():
    path, _, kwargs = TextValidator(multiline=True).deconstruct()
    assert path == "core.text.TextValidator" and kwargs == {"multiline": True}
    assert TextValidator() == TextValidator()


@pytest.mark.parametrize(
    ("model", "field"), [(Job, "name"), (Department, "name"), (Project, "name")], ids=lambda x: str(x)
)
def test_model_names_carry_the_validator_so_the_admin_and_model_forms_refuse(model, field):
    form_class = forms.modelform_factory(model, fields=[field])
    form = form_class(data={field: "evil\u202etxt.exe"})
    assert not form.is_valid()
    assert "U+202E" in form.errors[field][0]
