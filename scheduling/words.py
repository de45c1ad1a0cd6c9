"""The scheduler's sentences in the viewer's language.

Why a job waits (`Job.pending_reason`), why it runs where it does (its placed event) and the like are written
by the engine in English, from clauses joined by "; ", each an English template with named values
(scheduling.engine.words). They are stored and sent in English (the API, the audit, logs). A page shows them
in the viewer's language with `translate`: each clause is matched against the registered templates, and the
template's translation is filled with the clause's values, themselves read the same way (a duration, a nested
reason, "and 3 more"). A clause no template matches (an older wording, a text cut at the column's length)
is shown as stored.
"""

from __future__ import annotations

import re
from functools import lru_cache

from django.utils.translation import get_language, gettext, pgettext

from scheduling.engine import placement, scheduler  # noqa: F401  (their templates register on import)
from scheduling.engine.words import CLAUSES, TEMPLATES, gettext_noop

# Sentences written on the Django side of scheduling (the pass's writes, admission, fault requeue).
WAITING_FOR_SCHEDULER = gettext_noop("waiting for the scheduler")
PREEMPTED = gettext_noop("preempted")
BACK_IN_QUEUE = gettext_noop("back in the queue")
REQUEUED_AFTER_FAULT = gettext_noop("requeued after a fault on %(host)s")
ITS_TRAYS = gettext_noop("its trays")
BACK_IN_QUEUE_IN_PLACE = gettext_noop("back in the queue with its place in line")
# A partition plan's "Requeue now" (integrations.plans.requeue_now) or maintenance window.
REQUEUED_FOR_PLAN = gettext_noop("requeued because plan #%(plan)s re-carves %(rack)s")
REQUEUED_FOR_A_PLAN = gettext_noop("requeued for a partition plan")

PLACEHOLDER = re.compile(r"%\((\w+)\)s")
DEPTH = 4  # values inside values: a reason in a reason, a duration in it


@lru_cache(maxsize=1)
def _patterns() -> tuple[tuple[re.Pattern, str], ...]:
    """Every registered template as a pattern, the longest literal text first (the most specific wins)."""
    compiled = []
    for template in dict.fromkeys(TEMPLATES):
        parts = PLACEHOLDER.split(template)
        pattern = "".join(
            re.escape(part) if index % 2 == 0 else f"(?P<{part}>.+?)" for index, part in enumerate(parts)
        )
        literal = sum(len(part) for part in parts[::2])
        compiled.append((literal, re.compile(pattern + r"\Z", re.DOTALL), template))
    compiled.sort(key=lambda entry: -entry[0])
    return tuple((pattern, template) for _, pattern, template in compiled)


def _clause(text: str, depth: int) -> str:
    if depth > DEPTH or not text:
        return text
    for pattern, template in _patterns():
        match = pattern.match(text)
        if match is not None:
            values = {name: _clause(value, depth + 1) for name, value in match.groupdict().items()}
            return gettext(template) % values if values else gettext(template)
    return text


@lru_cache(maxsize=4096)
def _translated(text: str, language: str) -> str:
    separator = pgettext("between the clauses of a scheduler's reason", "; ")
    return separator.join(_clause(clause, 0) for clause in text.split(CLAUSES))


def translate(text: str) -> str:
    """`text`, a sentence of the scheduler's stored in English, in the active language."""
    language = get_language() or "en"
    if not text or language.startswith("en"):
        return text
    return _translated(text, language)
