"""Health actions: the decisions recorded as `HealthAction` rows, and the one way a tray's state changes.

`record_action` writes the row that says what was decided, why and when (rules and people alike);
`set_state` changes the tray's state, records the notification and sends `tray_health_changed` once the
transaction commits (the hook for Slurm/Kubernetes drains and job requeues: integrations.signals).
`drain_tray` is the drain by hand (an admin, another service); the reasons' wording and limits
(``rackplane: ...``, what a person may type) live here. Returning a tray: inventory.health.returns.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop, override

from core import sentences
from core.models import NotificationEvent
from core.notifications.recording import notify
from core.textrule import text_problem
from inventory.choices import ActionKind, TrayState
from inventory.health import words as reason_words  # noqa: F401  (the templates register: pages read them back)
from inventory.health.events import HealthOutcome, timestamp, where
from inventory.models import ComputeTray, HealthAction, HealthEvent, HealthRule, NVLinkPartition

REASON_PREFIX = "rackplane: "  # the owner prefix of every drain the health rules make (Slurm reasons too)
NEEDS_SERVICE_PREFIX = REASON_PREFIX + "needs service: "
REASON_LIMIT = 255  # ComputeTray.state_reason
# A reason a person types (drain, maintenance): room left for "rackplane: <username>: " and a maintenance
# window's dates in front of it within REASON_LIMIT.
TYPED_REASON_LIMIT = 160
# The reasons the health rules write (Slurm and Kubernetes keep them too), stored in English with their moment
# in UTC (core.moments.utc_words); a page reads them back in the viewer's language and zone (sentence_html).
DRAINED_FOR = sentences.gettext_noop("rackplane: %(fault)s on %(where)s at %(at)s")
NEEDS_SERVICE_FOR = sentences.gettext_noop(
    "rackplane: needs service: %(count)s faults in %(days)s days, the last %(fault)s on %(where)s at %(at)s"
)
BY_RULE = sentences.gettext_noop("%(reason)s (rule %(rule)s)")
# The two above as the rules write them together: read back whole, so the more general "rackplane: %(reason)s"
# (inventory.health.words, a person's drain) does not take them first and leave their moment unread.
DRAINED_FOR_BY_RULE = sentences.gettext_noop("rackplane: %(fault)s on %(where)s at %(at)s (rule %(rule)s)")
NEEDS_SERVICE_FOR_BY_RULE = sentences.gettext_noop(
    "rackplane: needs service: %(count)s faults in %(days)s days, the last %(fault)s on %(where)s at %(at)s "
    "(rule %(rule)s)"
)
# A tray's state in a sentence ("gb-r03-t03 is already drained"), as inventory.planning words it too.
STATE_WORDS = {
    TrayState.UP: gettext_noop("in service"),
    TrayState.DRAIN: gettext_noop("drained"),
    TrayState.DOWN: gettext_noop("down"),
    TrayState.MAINTENANCE: gettext_noop("in maintenance"),
    TrayState.NEEDS_SERVICE: gettext_noop("waiting for service"),
}

# Sent on commit when a tray's health state changed: sender=ComputeTray, tray_id, state, reason, source
# ("rules" or "admin"), action (an ActionKind), actor (a user or None). The place Slurm/Kubernetes drains,
# job requeues and notifications hook in.
tray_health_changed = Signal()


class HealthError(ValueError):
    """A health operation that cannot be done; the message says why and what to do."""


def owned_by_rules(tray: ComputeTray) -> bool:
    """Whether the tray is out for a reason Rackplane's health rules gave (and so theirs to give back)."""
    return tray.state != TrayState.UP and tray.state_reason.startswith(REASON_PREFIX)


def state_words(state: str) -> str:
    """A tray state as a sentence says it: "drained", "in maintenance" (not the value "drain")."""
    return STATE_WORDS.get(state, str(state).replace("_", " "))


def shown_state_words(state: str) -> str:
    """state_words in the viewer's language (pages and form errors; state_words is what reasons keep)."""
    return _(STATE_WORDS[state]) if state in STATE_WORDS else state_words(state)


def drain_reason(event: HealthEvent) -> str:
    """``rackplane: XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS) on GPU-... at 2025-10-14 11:20:09 UTC``."""
    words = sentences.say(DRAINED_FOR, fault=event.title, where=where(event), at=timestamp(event.last_seen))
    return words[:REASON_LIMIT]


def repeat_reason(event: HealthEvent, faults: int, days: int) -> str:
    """A repeat offender's reason: ``rackplane: needs service: 3 faults in 7 days, the last ...``."""
    words = sentences.say(
        NEEDS_SERVICE_FOR,
        count=faults,
        days=days,
        fault=event.title,
        where=where(event),
        at=timestamp(event.last_seen),
    )
    return words[:REASON_LIMIT]


def rule_reason(reason: str, rule: HealthRule) -> str:
    """A rule's decision as its HealthAction keeps it: the reason, then ``(rule <name>)``."""
    return sentences.say(BY_RULE, reason=reason, rule=rule.name)


def typed_text_problem(text: str, *, what: str | None = None, limit: int = TYPED_REASON_LIMIT) -> str:
    """Why `text` typed by a person cannot be a reason or note ("" when it can): a control or invisible
    formatting character (a bidi override would show operators other words than Slurm keeps), Rackplane's
    own "rackplane:" prefix in front (it would read as one of Rackplane's reasons: Rackplane adds it), or
    more than `limit` characters."""
    what = what or _("The reason")
    problem = text_problem(text)  # the one text rule (core.textrule): one line, nothing invisible
    if problem:
        return problem.message(what)
    if text.strip().lower().startswith(REASON_PREFIX.strip()):
        return _(
            "%(what)s starts with “rackplane:”: leave it out. Rackplane puts “rackplane: <your name>:” in "
            "front of every reason it sends to Slurm and Kubernetes."
        ) % {"what": what}
    if len(text.strip()) > limit:
        return _("%(what)s is %(length)s characters long: at most %(limit)s, please.") % {
            "what": what,
            "length": len(text.strip()),
            "limit": limit,
        }
    return ""


def record_action(
    outcome: HealthOutcome | None,
    tray: ComputeTray,
    kind: str,
    reason: str,
    event: HealthEvent | None = None,
    rule: HealthRule | None = None,
    *,
    partition: NVLinkPartition | None = None,
    dry_run: bool = False,
    actor=None,
    at: datetime | None = None,
) -> HealthAction:
    """Record a decision as a HealthAction row (and, given an ingest's outcome, as a sentence on it)."""
    action = HealthAction.objects.create(
        tray=tray,
        kind=kind,
        event=event,
        rule=rule,
        rule_name=rule.name if rule else "",
        partition=partition,
        dry_run=dry_run,
        reason=reason[:500],
        actor=actor,
        created_at=at or timezone.now(),
    )
    if outcome is not None:
        with override("en"):  # the node agent's answer, in English like the reason beside it
            outcome.actions.append(f"{ActionKind(kind).label}: {reason}")
    return action


def set_state(tray: ComputeTray, state: str, reason: str, *, source: str, actor) -> None:
    """Change the tray's state (a save: audited, and the scheduler's watcher asks for a pass) and tell the
    backends once the transaction commits."""
    tray.state = state
    tray.state_reason = reason[:REASON_LIMIT]
    tray.save(update_fields=["state", "state_reason"])
    event, words = {
        TrayState.UP: (NotificationEvent.TRAY_RETURNED, "back in service"),
        TrayState.NEEDS_SERVICE: (NotificationEvent.NEEDS_SERVICE, "needs service"),
        TrayState.MAINTENANCE: (NotificationEvent.TRAY_DRAINED, "in maintenance"),
    }.get(state, (NotificationEvent.TRAY_DRAINED, "drained"))
    notify(
        event,
        f"{tray.hostname} {words}" + (f": {reason}" if reason else ""),
        {"tray": tray.hostname, "rack": tray.rack.name, "state": state, "reason": reason, "source": source},
        scope=[f"rack:{tray.rack.name}", f"tray:{tray.hostname}"],
    )
    tray_id, kind = (
        tray.pk,
        {
            TrayState.UP: ActionKind.RETURN,
            TrayState.NEEDS_SERVICE: ActionKind.NEEDS_SERVICE,
            TrayState.MAINTENANCE: ActionKind.MAINTENANCE,
        }.get(state, ActionKind.DRAIN),
    )
    transaction.on_commit(
        lambda: tray_health_changed.send(
            sender=ComputeTray,
            tray_id=tray_id,
            state=state,
            reason=reason,
            source=source,
            action=kind,
            actor=actor,
        )
    )


def hand_reason(text: str, actor=None, *, needs_service: bool = False) -> str:
    """The reason drain_tray keeps for a drain by hand: ``rackplane: <username>: <text>`` (the owner, the
    person, what they typed); what a preview of the drain's effects reads too."""
    who = f"{actor.get_username()}: " if actor is not None else ""
    prefix = NEEDS_SERVICE_PREFIX if needs_service else REASON_PREFIX
    return f"{prefix}{who}{(text or '').strip()}"[:REASON_LIMIT]


def drain_tray(
    tray: ComputeTray, reason: str, *, actor=None, needs_service: bool = False, maintenance: bool = False
) -> HealthAction:
    """Take a tray out of service by hand (an admin, or another service), recorded as a health decision.

    The reason is prefixed with "rackplane: " (the owner, as in Slurm) and the actor's name. A tray already
    out for another owner's reason keeps it: HealthError. `maintenance`: planned work, not a fault: the tray
    goes to the maintenance state (drained on the schedulers all the same, but counted and shown apart from
    the health drains), and may return as soon as its owner says, unless a fault came since (returns).
    """
    text = (reason or "").strip()
    if not text:
        raise HealthError(
            _("Say why the tray is drained: the reason is shown to operators and sent to Slurm.")
        )
    # Callers pass what a person typed (the portal's forms check it first, for a field error); a maintenance
    # window's dates come in front of it, so only the control characters and the prefix are checked here.
    problem = typed_text_problem(text, limit=REASON_LIMIT)
    if problem:
        raise HealthError(problem)
    with transaction.atomic():
        tray = ComputeTray.objects.select_for_update().get(pk=tray.pk)
        if tray.state != TrayState.UP and not owned_by_rules(tray):
            raise HealthError(
                _(
                    "%(host)s is already %(state)s (%(reason)s); that owner's reason is kept. Return it "
                    "first "
                    "if Rackplane should own the drain."
                )
                % {"host": tray.hostname, "state": shown_state_words(tray.state), "reason": tray.state_reason}
            )
        if tray.state != TrayState.UP and not (needs_service and tray.state != TrayState.NEEDS_SERVICE):
            # Out already (the rules' or an admin's drain, a maintenance window): a second drain would replace
            # its reason and notify again.
            raise HealthError(
                _(
                    "%(host)s is already %(state)s (%(reason)s). Return it to service first to take it out "
                    "for "
                    "another reason."
                )
                % {"host": tray.hostname, "state": shown_state_words(tray.state), "reason": tray.state_reason}
            )
        full = hand_reason(text, actor, needs_service=needs_service)
        state = (
            TrayState.NEEDS_SERVICE
            if needs_service
            else TrayState.MAINTENANCE
            if maintenance
            else TrayState.DRAIN
        )
        set_state(tray, state, full, source="admin", actor=actor)
        kind = (
            ActionKind.NEEDS_SERVICE
            if needs_service
            else ActionKind.MAINTENANCE
            if maintenance
            else ActionKind.DRAIN
        )
        return record_action(None, tray, kind, full, actor=actor)
