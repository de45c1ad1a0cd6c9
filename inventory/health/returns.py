"""Return to service: when a tray the health rules (or drain_tray) took out may come back, and bringing it.

Step 6 of the loop (the package docstring): a tray the rules drained returns by itself (`consider_return`,
on ingest) when its agent has reported it healthy for `return_after_s` and, when `return_check` names an
active check, that check passed after the drain; with dry run or without `auto_return` that is recorded
as "would return". `return_to_service` is the return by hand (an admin may force it); another owner's
drain is never undone here. A tray with an open service mark (needs service, sent for RMA:
inventory.health.service) returns neither way until an admin marks it returned; then, needs service or
drained, it returns like a drained tray, its healthy time and check counted from the return.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from core.sentences import gettext_noop, say
from inventory.choices import OPEN_SERVICE, QUARANTINE_ACTIONS, ActionKind, ServiceStatus, TrayState
from inventory.health.actions import HealthError, owned_by_rules, record_action, set_state
from inventory.health.events import HealthOutcome, timestamp
from inventory.health.phrases import Phrase
from inventory.health.rules import RulesContext
from inventory.health.service import latest_record, mark_phrase, shown_mark_words
from inventory.health.words import FORCED, RETURNED, RETURNED_BY
from inventory.models import (
    ComputeTray,
    HealthAction,
    HealthCheckResult,
    HealthEvent,
    HealthSettings,
    ServiceRecord,
)

NOTE_LIMIT = 300  # a return-to-service note


@dataclass(frozen=True)
class Eligibility:
    eligible: bool
    phrase: Phrase

    @property
    def why(self) -> str:
        """In English: what the decisions and reasons keep."""
        return self.phrase.english()

    @property
    def shown(self) -> str:
        """In the viewer's language: what the tray page shows."""
        return self.phrase.shown()


def _no(text: str, **values) -> Eligibility:
    return Eligibility(False, Phrase(text, values))


def _yes(text: str, **values) -> Eligibility:
    return Eligibility(True, Phrase(text, values))


def return_eligibility(
    tray: ComputeTray, settings: HealthSettings | None = None, now: datetime | None = None
) -> Eligibility:
    """Whether a tray the rules drained may return: healthy for return_after_s and, when return_check is
    set, that check passed after the drain. Other owners' drains, trays with an open service mark and
    needs-service trays not marked returned from service never qualify; a tray marked returned is judged
    from its return."""
    settings = settings or HealthSettings.load()
    now = now or timezone.now()
    if tray.state == TrayState.UP:
        return _no(gettext_noop("it is in service"))
    record = latest_record(tray)
    if record is not None and record.status in OPEN_SERVICE:
        return _no(
            gettext_noop("it is %(mark)s; mark it returned from service first"), mark=mark_phrase(record)
        )
    if not owned_by_rules(tray):
        return _no(
            gettext_noop("it is out for another owner's reason (%(reason)s); they return it"),
            reason=tray.state_reason,
        )
    drained = (
        HealthAction.objects.filter(tray=tray, kind__in=QUARANTINE_ACTIONS)
        .order_by("-created_at", "-pk")
        .first()
    )
    drained_at = drained.created_at if drained else None
    back = _back_from_service(record, drained_at)
    if tray.state == TrayState.NEEDS_SERVICE and back is None:
        return _no(gettext_noop("it needs service; return it by hand once repaired"))
    if back is not None:
        # Back from service: the healthy time and the check count from the return, not from the fault.
        words = Phrase(gettext_noop("it came back from service"))
        return _healthy_enough(tray, settings, now, back, words, words, healthy_from=back)
    by_rules = drained is not None and bool(drained.rule_name or drained.event_id is not None)
    if drained is not None and not by_rules and drained.kind in (ActionKind.MAINTENANCE, ActionKind.DRAIN):
        # A person's decision (planned work, a drain by hand), not a fault the rules saw: back when its owner
        # says, unless a fault came while it was out. The healthy-time wait is for the rules' own drains.
        fault = (
            HealthEvent.objects.filter(tray=tray, last_seen__gte=drained_at)
            .filter(Q(drains=True) | Q(degrades=True))
            .order_by("-last_seen")
            .first()
        )
        maintenance = drained.kind == ActionKind.MAINTENANCE
        if fault is None:
            if maintenance:
                return _yes(gettext_noop("it was out for maintenance, with no fault since"))
            return _yes(gettext_noop("it was drained by hand, not by the health rules, with no fault since"))
        what = fault.mnemonic or fault.code or fault.kind
        if maintenance:
            return _no(gettext_noop("a fault came while it was out for maintenance (%(fault)s)"), fault=what)
        return _no(gettext_noop("a fault came while it was drained by hand (%(fault)s)"), fault=what)
    # A drain by the rules waits until the fault is seen gone: healthy for return_after_s (and the check).
    drained_words = Phrase(gettext_noop("it was drained"))
    since = Phrase(gettext_noop("the fault")) if by_rules else drained_words
    return _healthy_enough(tray, settings, now, drained_at, since, drained_words)


def _back_from_service(record: ServiceRecord | None, drained_at: datetime | None) -> datetime | None:
    """When an admin marked the tray returned from service, if that is its newest mark and came after it was
    last taken out (a later drain starts a new story)."""
    if record is None or record.status != ServiceStatus.RETURNED:
        return None
    if drained_at is not None and record.created_at < drained_at:
        return None
    return record.created_at


def _healthy_enough(
    tray: ComputeTray,
    settings: HealthSettings,
    now: datetime,
    since: datetime | None,
    since_words: Phrase,
    check_words: Phrase,
    healthy_from: datetime | None = None,
) -> Eligibility:
    """Healthy for return_after_s (counted from `healthy_from` at the earliest) and, when return_check is
    set, that check passed after `since`."""
    if tray.healthy_since is None:
        return _no(gettext_noop("its agent has not reported it healthy since %(since)s"), since=since_words)
    healthy_since = max(tray.healthy_since, healthy_from) if healthy_from else tray.healthy_since
    needed = timedelta(seconds=settings.return_after_s)
    if now - healthy_since < needed:
        left = needed - (now - healthy_since)
        return _no(
            gettext_noop("healthy since %(since)s; %(minutes)s more minutes"),
            since=timestamp(healthy_since),
            minutes=f"{left.total_seconds() / 60:.0f}",
        )
    if settings.return_check:
        checks = HealthCheckResult.objects.filter(tray=tray, name=settings.return_check)
        if since is not None:
            checks = checks.filter(started__gte=since)
        last = checks.order_by("-started", "-pk").first()
        if last is None:
            return _no(
                gettext_noop("no %(check)s check has run since %(since)s"),
                check=repr(settings.return_check),
                since=check_words,
            )
        if not last.passed:
            return _no(
                gettext_noop("the last %(check)s check failed (exit status %(status)s)"),
                check=repr(settings.return_check),
                status=last.exit_status,
            )
        return _yes(
            gettext_noop("healthy since %(since)s and %(check)s passed at %(at)s"),
            since=timestamp(healthy_since),
            check=repr(settings.return_check),
            at=timestamp(last.started),
        )
    return _yes(gettext_noop("healthy since %(since)s"), since=timestamp(healthy_since))


def consider_return(tray: ComputeTray, context: RulesContext, outcome: HealthOutcome) -> None:
    """Return a tray the rules drained, or one an admin marked returned from service, once it qualifies; a
    drain by hand (drain_tray) is returned by hand."""
    if tray.state not in (TrayState.DRAIN, TrayState.NEEDS_SERVICE) or not owned_by_rules(tray):
        return
    drained = HealthAction.objects.filter(tray=tray, kind__in=QUARANTINE_ACTIONS).order_by(
        "-created_at", "-pk"
    )
    last = drained.first()
    back = _back_from_service(latest_record(tray), last.created_at if last is not None else None)
    if back is None and (tray.state != TrayState.DRAIN or last is None or not last.rule_name):
        return
    verdict = return_eligibility(tray, context.settings, context.now)
    if not verdict.eligible:
        return
    if context.settings.dry_run or not context.settings.auto_return:
        last = HealthAction.objects.filter(tray=tray).order_by("-created_at", "-pk").first()
        if last is None or last.kind != ActionKind.WOULD_RETURN:
            record_action(
                outcome,
                tray,
                ActionKind.WOULD_RETURN,
                f"eligible to return: {verdict.why}",
                dry_run=True,
                at=context.now,
            )
        return
    set_state(tray, TrayState.UP, "", source="rules", actor=None)
    record_action(outcome, tray, ActionKind.RETURN, say(RETURNED, why=verdict.why), at=context.now)


def return_to_service(tray: ComputeTray, *, actor=None, note: str = "", force: bool = False) -> HealthAction:
    """Put a tray the health rules (or drain_tray) took out back in service.

    Without `force` the tray must qualify (return_eligibility); an admin may force it (a needs-service tray
    repaired, an eligibility rule they know to be wrong), and the note says why. Another owner's drain (an
    admin in Slurm, a partition plan) is never undone here: HealthError.
    """
    with transaction.atomic():
        tray = ComputeTray.objects.select_for_update().get(pk=tray.pk)
        if tray.state == TrayState.UP:
            raise HealthError(_("%(host)s is already in service.") % {"host": tray.hostname})
        record = latest_record(tray)
        if record is not None and record.status in OPEN_SERVICE:
            # Not even forced: the tray (or its GPU) may be at the vendor; marked returned, it is back.
            raise HealthError(
                _(
                    "%(host)s is %(mark)s: mark it returned from service first (Service / RMA), then "
                    "return it."
                )
                % {"host": tray.hostname, "mark": shown_mark_words(record)}
            )
        if not owned_by_rules(tray):
            raise HealthError(
                _(
                    "%(host)s is out for another owner's reason (%(reason)s); Rackplane does not undo it. "
                    "Its "
                    "owner returns it."
                )
                % {"host": tray.hostname, "reason": tray.state_reason}
            )
        verdict = return_eligibility(tray)
        if not verdict.eligible and not force:
            raise HealthError(
                _("%(host)s cannot return yet: %(why)s.") % {"host": tray.hostname, "why": verdict.shown}
            )
        why = verdict.why if verdict.eligible else say(FORCED, why=verdict.why)
        returned = say(RETURNED_BY, who=actor.get_username(), why=why) if actor else say(RETURNED, why=why)
        text = returned + (f"; {note.strip()}" if note and note.strip() else "")
        set_state(tray, TrayState.UP, "", source="admin" if actor else "rules", actor=actor)
        return record_action(None, tray, ActionKind.RETURN, text, actor=actor)
