"""The scheduler's sentences in the viewer's language (core.sentences_i18n reads them back).

Why a job waits (`Job.pending_reason`), why it runs where it does (its placed event) and the like are written
by the engine in English, from clauses joined by "; ", each an English template with named values
(scheduling.engine.words). They are stored and sent in English (the API, the audit, logs). A page shows them
in the viewer's language with `translate`: each clause is matched against the registered templates, and the
template's translation is filled with the clause's values, themselves read the same way (a duration, a nested
reason, "and 3 more"). A clause no template matches (an older wording, a text cut at the column's length)
is shown as stored.
"""

from __future__ import annotations

from core import sentences_i18n
from scheduling.engine import placement, scheduler  # noqa: F401  (their templates register on import)
from scheduling.engine.words import gettext_noop

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

PLACEHOLDER = sentences_i18n.PLACEHOLDER


def translate(text: str) -> str:
    """`text`, a sentence of the scheduler's stored in English, in the active language (its templates are
    registered: this module imports the engine)."""
    return sentences_i18n.translate(text)
