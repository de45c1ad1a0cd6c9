"""Sentences integrations stores in English, as templates the portal shows in the viewer's language.

A tray drained for a plan, a push's reason, a plan's error and the like are stored in English (the API, the
audit, Slurm's drain reason and the logs read them as written) and built from these templates
(core.sentences); a page shows them with the `sentence_words` filter (core.sentences_i18n), which finds the
template again and translates it, values kept. What an outside system wrote (a target's error output, Slurm's
own reason) matches no template and is shown as written. Importing this module registers the templates:
every module that writes one imports it.
"""

from __future__ import annotations

from django.utils.translation import gettext_lazy

from core.sentences import VALUE_WORDS, gettext_noop
from inventory.planning import PLAN_DRAIN

# A tray drained while a plan waits for its work to end (its state reason, also Slurm's drain reason): the
# inventory's template (the tray page names the plan that owns such a drain).
DRAINING_FOR_PLAN = PLAN_DRAIN
# Its return to service on its health timeline (HealthAction.reason): the plan applied, or ended unapplied.
RETURNED_AFTER_PLAN = gettext_noop("Rackplane plan #%(plan)s: %(rack)s repartitioned, back in service")
RETURNED_PLAN_NOT_APPLIED = gettext_noop("Rackplane plan #%(plan)s was not applied: back in service")
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
# A change of fields the configuration renders ("project research/llm-pretrain: guarantee 64 -> 16, limit
# none -> 80"): what changed, then each field (integrations.signals.RENDERED, in FIELD_WORDS) and its values.
CHANGED_FIELDS = gettext_noop("%(changed)s: %(field_changes)s")
FIELD_CHANGE = gettext_noop("%(changed_field)s %(old_value)s -> %(new_value)s")
FIELD_CHANGED = gettext_noop("%(changed_field)s changed")
NO_VALUE = gettext_noop("none")
FIELD_WORDS = {
    "name": gettext_noop("name"),
    "slug": gettext_noop("slug"),
    "guarantee": gettext_noop("guarantee"),
    "limit": gettext_noop("limit"),
    "network": gettext_noop("network"),
    "export path": gettext_noop("export path"),
    "storage quota (GiB)": gettext_noop("storage quota (GiB)"),
    "partition": gettext_noop("partition"),
    "department": gettext_noop("department"),
    "over-quota weight": gettext_noop("over-quota weight"),
    "person": gettext_noop("person"),
    "role": gettext_noop("role"),
    "project": gettext_noop("project"),
    "login name": gettext_noop("login name"),
    "active": gettext_noop("active"),
    "platform admin": gettext_noop("platform admin"),
    "superuser": gettext_noop("superuser"),
    "NFS server": gettext_noop("NFS server"),
    "MIG layout": gettext_noop("MIG layout"),
    "MIG devices": gettext_noop("MIG devices"),
}
# Read back in the viewer's words (core.sentences_i18n): the field's name, "none" for no value.
_FIELDS = {name: gettext_lazy(words) for name, words in FIELD_WORDS.items()}
_NONE = {NO_VALUE: gettext_lazy(NO_VALUE)}
VALUE_WORDS[FIELD_CHANGE] = {"changed_field": _FIELDS, "old_value": _NONE, "new_value": _NONE}
VALUE_WORDS[FIELD_CHANGED] = {"changed_field": _FIELDS}
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
# A push's log (integrations.pushes): what was asked, and what became of it before it was sent.
PUSH_LOG_REQUESTED = gettext_noop("requested: %(reason)s")
PUSH_LOG_QUEUED = gettext_noop("queued: %(reason)s")
PUSH_LOG_QUEUED_FORCED = gettext_noop("queued: %(reason)s (forced)")
PUSH_LOG_UNCHANGED = gettext_noop("unchanged: the target's last successful push has the same configuration")
PUSH_LOG_NOTHING_SENT = gettext_noop("nothing sent")
PUSH_LOG_FAILED_EARLY = gettext_noop("failed before sending anything:")
PUSH_LOG_SUPERSEDED = gettext_noop("superseded by push #%(push)s (%(reason)s)")
# Why a push failed for good (ConfigPush.error: the target's own output follows as written).
PUSH_GAVE_UP = gettext_noop("gave up after %(count)s attempts")
PUSH_NO_ANSWER = gettext_noop("the target did not answer:\n%(output)s")
# A plan that moves no tray yet changes what is pushed (the wizard's check, a plan's findings): one sentence,
# its clauses joined by "; ": no tray moves (and whether the fabric's NVLink partitions stay as they are),
# then each partition's change.
NO_TRAY_MOVES_FABRIC_SAME = gettext_noop(
    "No tray of %(rack)s changes NVLink partition and the fabric's NVLink partitions stay as they are, but "
    "the plan still changes the configuration Rackplane pushes"
)
NO_TRAY_MOVES = gettext_noop(
    "No tray of %(rack)s changes NVLink partition, but the plan still changes the configuration Rackplane "
    "pushes"
)
PARTITION_DEDICATED = gettext_noop(
    "%(name)s is dedicated to %(department)s and its trays join that department's InfiniBand partition "
    "(OpenSM)"
)
PARTITION_REDEDICATED = gettext_noop(
    "%(name)s is dedicated to %(department)s instead of %(owner)s and its trays move to that department's "
    "InfiniBand partition (OpenSM)"
)
PARTITION_UNDEDICATED = gettext_noop(
    "%(name)s is no longer dedicated to %(owner)s and its trays leave that department's InfiniBand "
    "partition (OpenSM)"
)
PARTITION_SLURM_MOVES = gettext_noop(
    "%(name)s's trays move from the Slurm partition %(slurm_before)s to %(slurm_after)s and the Kubernetes "
    "labels of their nodes change"
)
PARTITION_CLIQUE_MOVES = gettext_noop(
    "%(name)s's clique ID changes from %(kept)s to %(clique)s: the fabric manager makes it again and the "
    "Kubernetes labels of its nodes change"
)
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
