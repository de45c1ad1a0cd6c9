"""Sentences integrations stores in English, as templates the portal shows in the viewer's language.

A tray drained for a plan, a push's reason, a plan's error and the like are stored in English (the API, the
audit, Slurm's drain reason and the logs read them as written) and built from these templates
(core.sentences); a page shows them with the `sentence_words` filter (core.sentences_i18n), which finds the
template again and translates it, values kept. What an outside system wrote (a target's error output, Slurm's
own reason) matches no template and is shown as written. Importing this module registers the templates:
every module that writes one imports it.
"""

from __future__ import annotations

from core.sentences import gettext_noop
from inventory.planning import PLAN_DRAIN

# A tray drained while a plan waits for its work to end (its state reason, also Slurm's drain reason): the
# inventory's template (the tray page names the plan that owns such a drain).
DRAINING_FOR_PLAN = PLAN_DRAIN
# Why a configuration push was queued (ConfigPush.reason).
PUSH_FOR_PLAN = gettext_noop("plan #%(plan)s: repartition %(rack)s")
PUSH_RETRY = gettext_noop("retry of push #%(push)s")
PUSH_FROM_PORTAL = gettext_noop("pushed from the portal")
PUSH_AFTER_ROLLBACK = gettext_noop("current configuration pushed again after the rollback (push #%(push)s)")
PUSH_ROLLBACK = gettext_noop("version of push #%(push)s pushed again")
PUSH_WAITED = gettext_noop("%(reason)s (waited for the previous push)")
PUSH_CHANGE = gettext_noop("change")
# Why a tenancy change queued a push (integrations.signals; its reasons joined by "; "): what changed, then
# that it was added or deleted, and how many more reasons a full column left out.
CHANGED_DEPARTMENT = gettext_noop("department %(department)s")
CHANGED_DEDICATION = gettext_noop("dedication %(dedication)s")
CHANGED_PROJECT = gettext_noop("project %(project)s")
CHANGED_MEMBERSHIP = gettext_noop("%(person)s in department %(department)s")
CHANGED_PROJECT_MEMBERSHIP = gettext_noop("%(person)s in project %(project)s")
CHANGED_POSIX_ACCOUNT = gettext_noop("POSIX account of %(person)s")
CHANGED_PERSON = gettext_noop("person %(person)s")
CHANGED_TRAY = gettext_noop("tray %(host)s")
CHANGE_ADDED = gettext_noop("%(changed)s added")
CHANGE_DELETED = gettext_noop("%(changed)s deleted")
# A dedication's name has spaces ("gb-r02/p1 -> Research"): added or deleted, read whole.
DEDICATION_ADDED = gettext_noop("dedication %(dedication)s added")
DEDICATION_DELETED = gettext_noop("dedication %(dedication)s deleted")
AND_MORE_REASONS = gettext_noop("and %(more)s more")
# A fabric push's log (integrations.fabric.base.apply_steps): each step as the wizard's preview words it.
FABRIC_STEP_DONE = gettext_noop("step %(count)s/%(total)s done: %(step)s")
FABRIC_STEP_FAILED = gettext_noop("step %(count)s/%(total)s failed: %(step)s")
FABRIC_NOTHING_TO_CHANGE = gettext_noop("nothing to change")
FABRIC_CHANGES_ONE = gettext_noop("domain %(domain)s: %(count)s change to apply")
FABRIC_CHANGES_MANY = gettext_noop("domain %(domain)s: %(count)s changes to apply")
# The same as a fabric push's log writes them, one rack after another (integrations.fabric.adapter).
RACK_STEP_DONE = gettext_noop("%(rack)s: step %(count)s/%(total)s done: %(step)s")
RACK_STEP_FAILED = gettext_noop("%(rack)s: step %(count)s/%(total)s failed: %(step)s")
RACK_CHANGES_ONE = gettext_noop("%(rack)s: domain %(domain)s: %(count)s change to apply")
RACK_CHANGES_MANY = gettext_noop("%(rack)s: domain %(domain)s: %(count)s changes to apply")
# Why a push failed for good (ConfigPush.error: the target's own output follows as written).
PUSH_GAVE_UP = gettext_noop("gave up after %(count)s attempts")
PUSH_NO_ANSWER = gettext_noop("the target did not answer:\n%(output)s")
# Why a plan failed (PartitionPlan.error).
PLAN_PUSH_FAILED = gettext_noop("a push failed: open it to see why, fix the cause and retry it")
# The notification of a failed push (its subject, shown in the bell's inbox).
PUSH_FAILED = gettext_noop("Push #%(push)s to %(target)s failed: %(error)s")
SEE_ITS_LOG = gettext_noop("see its log")
# A fabric manager that would refuse a plan's layout (the wizard's preview; its words follow as written).
FABRIC_WOULD_REFUSE = gettext_noop("the fabric manager would refuse this layout: %(error)s")
# A job handed to its backend (its DISPATCHED event, the "started" notification) and the backend's state as
# Rackplane reads it (Job.backend_message, the FINISHED events): the backend's label is "rendered files" for
# the embedded backend (translated) or the target's kind and name (as written); the backend's own message
# follows in parentheses, as written unless it is the embedded backend's (below).
RENDERED_FILES = gettext_noop("rendered files")
SUBMITTED_TO = gettext_noop("submitted to %(backend)s as %(backend_id)s")
RUNNING_ON = gettext_noop("running on %(backend)s as %(backend_id)s")
BACKEND_STATE = gettext_noop("%(backend)s: %(backend_state)s")
BACKEND_STATE_SAYING = gettext_noop("%(backend)s: %(backend_state)s (%(message)s)")
BACKEND_STATE_EXIT = gettext_noop("%(backend)s: %(backend_state)s, exit code %(code)s")
BACKEND_STATE_SAYING_EXIT = gettext_noop("%(backend)s: %(backend_state)s (%(message)s), exit code %(code)s")
# integrations.jobs.BackendJobState, the states Rackplane reads a backend's job in.
BACKEND_STATES = {
    "pending": gettext_noop("pending"),
    "running": gettext_noop("running"),
    "completed": gettext_noop("completed"),
    "failed": gettext_noop("failed"),
    "cancelled": gettext_noop("cancelled"),
    "unknown": gettext_noop("unknown"),
}
# The embedded backend's own words (integrations.embedded: `make run`, no live Slurm or Kubernetes).
EMBEDDED_RENDERED = gettext_noop(
    "rendered to %(rendered_file)s: no live %(backend_kind)s backend is configured"
)
EMBEDDED_RENDERED_UNTIL = gettext_noop(
    "rendered to %(rendered_file)s: no live %(backend_kind)s backend is configured, and it ends at its time "
    "limit, %(ends_at)s"
)
# Its moments are core.moments.utc_words ("2026-11-30 07:24 UTC"): a page shows them in the viewer's zone.
EMBEDDED_RAN_UNTIL = gettext_noop(
    "ran until its time limit (%(ends_at)s): the embedded backend runs nothing and ends each job at its limit"
)
# A backend Rackplane could not ask (Job.backend_message of its running jobs), then what it means.
BACKEND_UNREACHABLE = gettext_noop("%(backend)s unreachable at %(at)s: %(error)s")
STATE_NOT_UPDATED = gettext_noop("state not updated")
