"""The scheduler's sentences (core.sentences: clause templates the portal reads back in the viewer's
language), and the clause every waiting reason starts with."""

from core.sentences import CLAUSES, TEMPLATES, gettext_noop, listed, minutes, plural, say

WAITING = gettext_noop("waiting: %(reason)s")

__all__ = ["CLAUSES", "TEMPLATES", "WAITING", "gettext_noop", "listed", "minutes", "plural", "say"]
