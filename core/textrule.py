"""The one rule for text a person or a client types: names, reasons, descriptions, scripts (pure, no Django).

Every name and free-text input of Rackplane (API fields, HTML forms, the admin through model validators, node
reports) is checked by `text_problem`; core.text adapts it to Django validators, DRF and form fields. Refused:

- a lone surrogate (U+D800-DFFF; JSON's `"\\ud800"`): half of a UTF-16 pair, not a character. UTF-8 cannot
  encode it, so it would end in a 500 at the database, a log or a rendered file.
- a control character (Unicode category Cc: NUL, ESC, newline, tab, DEL, C1 controls). A newline in a job name
  starts a new line of a Slurm script or a log record; ESC drives terminals. A multi-line field (a job script,
  a description) takes newline, tab, and carriage return only as part of CRLF (what browsers send).
- bidi controls (U+202A-202E, U+2066-2069, U+200E/F, U+061C): they reorder what a reader sees ("Trojan
  Source", CVE-2021-42574), so an operator would read other words than Slurm and the logs keep.
- every other format character (category Cf): zero-width space U+200B, word joiner U+2060, BOM U+FEFF, soft
  hyphen U+00AD, invisible operators, tag characters: invisible, they make two names that look alike differ
  (a spoof of another tenant's name) and hide text in reviews. Exception: zero-width non-joiner and joiner
  (U+200C, U+200D) between two non-ASCII characters, where Persian, Indic scripts and emoji sequences need
  them to be spelled right; next to ASCII (or at an end) they do nothing but hide.
- the other default-ignorable characters (Unicode's Default_Ignorable_Code_Point, which a renderer draws as
  nothing) that are not format characters: the Hangul fillers U+3164, U+FFA0, U+115F, U+1160 and the Khmer
  inherent vowels U+17B4/5 (letters that print blank: "admin\u3164" looks like "admin"), and the code points
  Unicode reserves as default-ignorable (U+2065, U+FFF0-FFF8, U+E0000-E0FFF). Variation selectors
  (U+FE00-FE0F, U+E0100-E01EF, the Mongolian U+180B-180D, U+180F) and the combining grapheme joiner U+034F
  only modify the character before them: taken after a non-ASCII character (the emoji's "\u2764\ufe0f") or
  in a keycap ("1\ufe0f\u20e3"), refused after ASCII or at the start, where they do nothing but hide.
- line and paragraph separators (U+2028, U+2029): line breaks to JavaScript, YAML and many viewers.
- private-use characters (category Co) and noncharacters (U+FDD0-FDEF, U+xxFFFE/F): they mean nothing
  portable and render differently per font or not at all.
- more than `max_length` characters (code points).

Unassigned code points are not refused: a newer Unicode (a new emoji) than this Python knows is still text.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

BIDI_CONTROLS = frozenset(
    "\u202a\u202b\u202c\u202d\u202e"  # LRE, RLE, PDF, LRO, RLO
    "\u2066\u2067\u2068\u2069"  # LRI, RLI, FSI, PDI
    "\u200e\u200f\u061c"  # LRM, RLM, ALM
)
JOINERS = frozenset("\u200c\u200d")  # zero-width non-joiner and joiner: allowed between non-ASCII characters
# Letters and marks that print as nothing (Default_Ignorable_Code_Point, not category Cf): always refused.
BLANK_LETTERS = frozenset("\u3164\uffa0\u115f\u1160\u17b4\u17b5")
KEYCAP = "\u20e3"  # COMBINING ENCLOSING KEYCAP: "1\ufe0f\u20e3" is the keycap emoji of an ASCII digit


def _is_selector(cp: int) -> bool:
    """A variation selector or the combining grapheme joiner: it modifies the character before it."""
    return (
        0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF or 0x180B <= cp <= 0x180D or cp in (0x180F, 0x034F)
    )


def _is_reserved_ignorable(cp: int) -> bool:
    """Code points Unicode reserves as default-ignorable (invisible in any future version)."""
    return cp == 0x2065 or 0xFFF0 <= cp <= 0xFFF8 or 0xE0000 <= cp <= 0xE0FFF


MULTILINE_CONTROLS = frozenset("\n\t")  # and "\r" directly before "\n"

# Only characters outside printable ASCII can be refused: the scan visits just those.
_NOT_PRINTABLE_ASCII = re.compile(r"[^\x20-\x7e]")
_NAMES = {"\n": "LINE FEED (a newline)", "\t": "CHARACTER TABULATION (a tab)", "\r": "CARRIAGE RETURN"}


@dataclass(frozen=True)
class TextProblem:
    """Why a text is refused: `code` (surrogate, control, bidi, format, separator, private, noncharacter,
    too_long), the offending `char` and its 1-based `position` (None for too_long), and a `reason`."""

    code: str
    reason: str
    char: str | None = None
    position: int | None = None
    length: int | None = None
    max_length: int | None = None

    def message(self, field: str | None = None) -> str:
        """The sentence a client or a person reads, naming the field (when given) and the character."""
        what = field or "The text"
        if self.code == "too_long":
            return f"{what} is {self.length} characters long: at most {self.max_length} are taken."
        char = self.char
        assert char is not None, "every problem but too_long names its character"
        name = f" {char_name(char)}" if char_name(char) else ""
        return (
            f"{what} contains {code_point(char)}{name} at position {self.position} "
            f"({self.reason}): type it again without it."
        )


def code_point(char: str) -> str:
    return f"U+{ord(char):04X}"


def char_name(char: str) -> str:
    """The character's Unicode name ("" for those without one: surrogates, most controls, private use)."""
    if char in _NAMES:
        return _NAMES[char]
    return unicodedata.name(char, "")


def _is_noncharacter(cp: int) -> bool:
    return 0xFDD0 <= cp <= 0xFDEF or (cp & 0xFFFE) == 0xFFFE


def _char_problem(text: str, index: int, multiline: bool) -> tuple[str, str] | None:
    """(code, reason) when the character at `index` is refused, else None."""
    char = text[index]
    category = unicodedata.category(char)
    if category == "Cs":
        return "surrogate", "a lone surrogate: half of a UTF-16 pair, not a character"
    if category == "Cc":
        if multiline and (
            char in MULTILINE_CONTROLS or (char == "\r" and text[index + 1 : index + 2] == "\n")
        ):
            return None
        if multiline:
            return "control", "a control character: only newlines, tabs and CRLF line ends are taken"
        if char in "\n\r":
            return "control", "a line break in a field of one line"
        return "control", "a control character"
    if char in BIDI_CONTROLS:
        return "bidi", "a bidi control that changes the order in which the text reads"
    if category == "Cf":
        if char in JOINERS:
            before = text[index - 1 : index] if index else ""
            after = text[index + 1 : index + 2]
            if before and after and not before.isascii() and not after.isascii():
                return None
            return "format", "an invisible joiner that does nothing here"
        return "format", "an invisible formatting character"
    if category in ("Zl", "Zp"):
        return "separator", "a line or paragraph separator"
    cp = ord(char)
    if char in BLANK_LETTERS:
        return "format", "an invisible filler that prints as nothing"
    if _is_selector(cp):
        before = text[index - 1 : index] if index else ""
        after = text[index + 1 : index + 2]
        if (before and not before.isascii()) or (before and after == KEYCAP):
            return None
        return "format", "an invisible selector that modifies nothing here"
    if _is_reserved_ignorable(cp):
        return "format", "a code point reserved as invisible (default-ignorable)"
    if category == "Co":
        return "private", "a private-use character: it means nothing outside one font"
    if char == "\ufffd":  # what a form's invalid UTF-8 is decoded to: the bytes sent were not text
        return "replacement", "a replacement character (U+FFFD): what was sent was not valid UTF-8"
    if _is_noncharacter(ord(char)):
        return "noncharacter", "a Unicode noncharacter"
    return None


def text_problem(value: str, *, max_length: int | None = None, multiline: bool = False) -> TextProblem | None:
    """The first reason `value` cannot be taken as typed text (see the module docstring), or None."""
    for match in _NOT_PRINTABLE_ASCII.finditer(value):
        index = match.start()
        found = _char_problem(value, index, multiline)
        if found:
            code, reason = found
            return TextProblem(code=code, reason=reason, char=value[index], position=index + 1)
    if max_length is not None and len(value) > max_length:
        return TextProblem(code="too_long", reason="too long", length=len(value), max_length=max_length)
    return None


def is_clean_text(value: str, *, max_length: int | None = None, multiline: bool = False) -> bool:
    return text_problem(value, max_length=max_length, multiline=multiline) is None
