"""The text rule's refusals (core.textrule, which stays free of Django) in the viewer's language.

core.textrule says what is wrong in English; this module says the same sentence through Django's
translations: the reasons are listed here so that `makemessages` finds them, and looked up at request time.
"""

from __future__ import annotations

from django.utils.translation import gettext, gettext_noop

from core.textrule import TextProblem, char_name, code_point

# Every reason core.textrule gives, for the catalogue (looked up by their English text at request time).
REASONS = (
    gettext_noop("a lone surrogate: half of a UTF-16 pair, not a character"),
    gettext_noop("a control character: only newlines, tabs and CRLF line ends are taken"),
    gettext_noop("a line break in a field of one line"),
    gettext_noop("a control character"),
    gettext_noop("a bidi control that changes the order in which the text reads"),
    gettext_noop("an invisible joiner that does nothing here"),
    gettext_noop("an invisible formatting character"),
    gettext_noop("a line or paragraph separator"),
    gettext_noop("an invisible filler that prints as nothing"),
    gettext_noop("an invisible selector that modifies nothing here"),
    gettext_noop("a code point reserved as invisible (default-ignorable)"),
    gettext_noop("a private-use character: it means nothing outside one font"),
    gettext_noop("a Unicode noncharacter"),
    gettext_noop("a replacement character (U+FFFD): what was sent was not valid UTF-8"),
)


def problem_message(problem: TextProblem, field: str | None = None) -> str:
    """TextProblem.message(field), translated: the field (when given), the character and why."""
    what = field or gettext("The text")
    if problem.code == "too_long":
        return gettext("%(what)s is %(length)s characters long: at most %(max_length)s are taken.") % {
            "what": what,
            "length": problem.length,
            "max_length": problem.max_length,
        }
    char = problem.char
    assert char is not None, "every problem but too_long names its character"
    name = char_name(char)
    return gettext(
        "%(what)s contains %(char)s at position %(position)s (%(reason)s): type it again without it."
    ) % {
        "what": what,
        "char": f"{code_point(char)} {name}" if name else code_point(char),
        "position": problem.position,
        "reason": gettext(problem.reason),
    }
