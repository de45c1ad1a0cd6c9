"""The scheduler's sentences (core.sentences: clause templates the portal reads back in the viewer's
language), and the clause every waiting reason starts with."""

from datetime import UTC, datetime

from core.sentences import CLAUSES, TEMPLATES, gettext_noop, listed, minutes, plural, say

WAITING = gettext_noop("waiting: %(reason)s")


def utc_words(seconds: float) -> str:
    """A moment on the pass's clock (seconds since 1970) as a stored sentence holds one (core.moments.
    utc_words, without seconds: "2026-11-30 07:24 UTC"), which a page shows in the viewer's zone."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M UTC")


__all__ = [
    "CLAUSES",
    "TEMPLATES",
    "WAITING",
    "gettext_noop",
    "listed",
    "minutes",
    "plural",
    "say",
    "utc_words",
]
