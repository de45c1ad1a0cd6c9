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

from django.utils.safestring import SafeString

from core import sentences_i18n
from core.sentences import VALUE_WORDS
from scheduling.choices import FaultAction, PriorityClass, Topology
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
# What a tray's fault or a plan's "Requeue now" did to a running job (scheduling.requeue), in its history
# (JobEvent.message), its requeue note and the notifications: what asked (`what`: a fault that drained a
# tray, a plan that re-carves a rack), the job's policy, its grace period, when it is requeued (a moment,
# core.moments.utc_words: read back in the viewer's zone).
FAULT_DRAINED = gettext_noop("%(fault)s drained %(host)s")
PLAN_RECARVES = gettext_noop("plan #%(plan)s re-carves %(rack)s")
ASKED_TO_CHECKPOINT = gettext_noop("%(what)s: asked to checkpoint (SIG%(signal)s)")
REQUEUED_AT = gettext_noop("requeued at %(at)s unless it ends first (policy checkpoint, grace %(grace)s)")
LEFT_TO_FINISH = gettext_noop("%(what)s: left to finish (%(why)s)")
REQUEUED_SAYING = gettext_noop("requeued: %(reason)s")
REQUEUED_BY_A_FAULT = gettext_noop("its tray was drained by a fault")
REQUEUE_POLICY = gettext_noop("%(what)s (policy %(policy)s)")
REQUEUE_GRACE = gettext_noop("%(what)s (policy checkpoint, grace %(grace)s)")
REQUEUE_NOW = gettext_noop("%(what)s (requeue now, policy checkpoint, grace %(grace)s)")
GRACE_SECONDS = gettext_noop("%(seconds)s s")
# The policy (a FaultAction's stored value) read as its label.
VALUE_WORDS[REQUEUE_POLICY] = {"policy": {str(choice.value): choice.label for choice in FaultAction}}
# Why a job was left to finish on a drained tray (scheduling.requeue.decide).
MAINTENANCE_LETS_FINISH = gettext_noop("maintenance lets running jobs finish")
POLICY_LETS_FINISH = gettext_noop("its class's policy lets it finish")

# The subjects of the notifications about a job (scheduling.services.actions.notify_job; the bell's inbox
# reads them back): the job's name, its number, and what the backend or the pass said.
JOB_STARTED = gettext_noop("Job %(job_title)s (#%(job)s) started")
JOB_STARTED_SAYING = gettext_noop("Job %(job_title)s (#%(job)s) started: %(message)s")
JOB_PREEMPTED = gettext_noop("Job %(job_title)s (#%(job)s) was preempted")
JOB_PREEMPTED_SAYING = gettext_noop("Job %(job_title)s (#%(job)s) was preempted: %(message)s")
JOB_FINISHED = gettext_noop("Job %(job_title)s (#%(job)s) finished")
JOB_FINISHED_SAYING = gettext_noop("Job %(job_title)s (#%(job)s) finished: %(message)s")
JOB_FAILED = gettext_noop("Job %(job_title)s (#%(job)s) failed")
JOB_FAILED_SAYING = gettext_noop("Job %(job_title)s (#%(job)s) failed: %(message)s")
JOB_CANCELLED = gettext_noop("Job %(job_title)s (#%(job)s) was cancelled")
JOB_CANCELLED_SAYING = gettext_noop("Job %(job_title)s (#%(job)s) was cancelled: %(message)s")
JOB_REQUEUED = gettext_noop("Job #%(job)s %(job_title)s requeued: %(message)s")
JOB_PUT_BACK = gettext_noop("Job %(job_title)s (#%(job)s) was requeued")
JOB_PUT_BACK_SAYING = gettext_noop("Job %(job_title)s (#%(job)s) was requeued: %(message)s")
RECLAIMED_BY = gettext_noop("department %(department)s reclaimed its GPUs")
# A department's notifications (scheduling.tasks): short of its guarantee, idle GPUs.
SHORT_OF_GUARANTEE_ONE = gettext_noop(
    "%(department_name)s is %(count)s GPU short of its guarantee of %(guaranteed)s: its jobs wait while "
    "others hold those GPUs"
)
SHORT_OF_GUARANTEE_MANY = gettext_noop(
    "%(department_name)s is %(count)s GPUs short of its guarantee of %(guaranteed)s: its jobs wait while "
    "others hold those GPUs"
)
IDLE_GPUS_ONE = gettext_noop("%(department_name)s has %(count)s idle GPU")
IDLE_GPUS_MANY = gettext_noop("%(department_name)s has %(count)s idle GPUs")
# A job's history (JobEvent.message, shown on its page): what was submitted, and a wider topology accepted.
SUBMITTED_ONE = gettext_noop("%(gpus)s GPU, %(topology)s")
SUBMITTED_MANY = gettext_noop("%(gpus)s GPUs, %(topology)s")
FALLBACK_ACCEPTED = gettext_noop("%(topology)s accepted after %(wait)s")
RESUBMITTED_FROM = gettext_noop("Resubmitted from job #%(job)s by %(user)s")
# A slice job (scheduling.slices): what was submitted, where it was placed, why it waits.
SUBMITTED_SLICE = gettext_noop("%(count)s MIG slice %(profile)s")
SUBMITTED_SLICES = gettext_noop("%(count)s MIG slices %(profile)s")
PLACED_SLICES = gettext_noop("placed %(standing)s on %(slices)s")
SLICES_BORROWED = gettext_noop("over quota (borrowed)")
NO_SLICE_TRAY = gettext_noop("no free %(profile)s slice: no tray in service offers it")
NO_FREE_SLICE = gettext_noop("no free %(profile)s slice: all %(total)s on trays in service are held")
NO_TRAY_WITH_SLICES = gettext_noop(
    "no free %(profile)s slice: no tray has %(count)s free (at most %(most)s free on one tray)"
)
SLICES_OVER_LIMIT = gettext_noop(
    "its department would hold %(eq)s GPU-equivalents with it, over its limit of %(limit)s"
)
SLICES_OVER_GUARANTEE = gettext_noop(
    "its department would hold %(eq)s GPU-equivalents with it, over its guarantee of %(guarantee)s "
    "(non-preemptible work stays within it)"
)
# Their topology is shown as its label ("partition" as "One NVLink partition", in the viewer's language).
for _template in (SUBMITTED_ONE, SUBMITTED_MANY, FALLBACK_ACCEPTED):
    VALUE_WORDS[_template] = {"topology": {str(choice.value): choice.label for choice in Topology}}
# A class's stored value in a wait reason ("inference jobs run only within ...") as its label, as the class
# column shows it.
for _template in (
    scheduler.GUARANTEE_ONLY,
    scheduler.PROJECT_GUARANTEE_ONLY,
    scheduler.DEFAULT_PROJECT_GUARANTEE_ONLY,
    scheduler.PROJECT_SHARE_ONLY,
    scheduler.DEFAULT_PROJECT_SHARE_ONLY,
):
    VALUE_WORDS[_template] = {"priority_class": {str(choice.value): choice.label for choice in PriorityClass}}
WAIT_MINUTES = gettext_noop("%(minutes)s min")
WAIT_HOURS = gettext_noop("%(hours)s h")
# A placed job's event (scheduling.services.pass_writes): its standing, its trays, the partitions they are
# in, and why there (the engine's sentence after " · why here: ", which the job page reads apart).
IN_QUOTA = gettext_noop("in quota")
OVER_QUOTA = gettext_noop("over quota (borrowed, preemptible)")
PLACED_ONE = gettext_noop("placed %(standing)s on %(trays)s tray in %(partitions)s")
PLACED_MANY = gettext_noop("placed %(standing)s on %(trays)s trays in %(partitions)s")
PLACED_ACROSS = gettext_noop("%(placed)s (%(parts)s NVLink partitions)")
PLACED_WHY = gettext_noop("%(placed)s · why here: %(why)s")
# A seeded job's history (portal.demo): no backend ran it, and how it ended.
STARTED_IN = gettext_noop("started in %(backend_kind)s (%(note)s)")
SEEDED_DEMO_JOB = gettext_noop("seeded demo job: no backend runs it")
SEEDED_HISTORY = gettext_noop("seeded history: no backend ran it")
PLACED_ON_ONE = gettext_noop("placed on %(trays)s tray")
PLACED_ON_MANY = gettext_noop("placed on %(trays)s trays")
COMPLETED_EXIT_0 = gettext_noop("completed, exit code 0")
FAILED_EXIT_1 = gettext_noop("failed, exit code 1")
CANCELLED_BY_SUBMITTER = gettext_noop("cancelled by its submitter")
CANCELLED_BY_SUBMITTER_PENDING = gettext_noop("cancelled by its submitter while pending")
# A cancelled job's event: by whom (a user name) and in which state it was.
CANCELLED_WHILE = {
    "pending": gettext_noop("cancelled while pending"),
    "starting": gettext_noop("cancelled while starting"),
    "running": gettext_noop("cancelled while running"),
}
CANCELLED_BY_WHILE = {
    "pending": gettext_noop("cancelled by %(owner)s while pending"),
    "starting": gettext_noop("cancelled by %(owner)s while starting"),
    "running": gettext_noop("cancelled by %(owner)s while running"),
}

PLACEHOLDER = sentences_i18n.PLACEHOLDER


def translate(text: str) -> str:
    """`text`, a sentence of the scheduler's stored in English, in the active language (its templates are
    registered: this module imports the engine)."""
    return sentences_i18n.translate(text)


def translate_html(text: str) -> SafeString:
    """`text` as `translate` gives it, as HTML: its moments in the viewer's zone, named; its data marked
    (core.sentences_i18n.translate_html)."""
    return sentences_i18n.translate_html(text)
