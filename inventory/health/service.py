"""Service and RMA tracking: an admin marks a tray (or one of its GPUs) as needing service, sent for RMA, or
returned, with a note; each step is a `ServiceRecord` row saying who and when (and the row's save is in the
audit log, core.audit).

A tray's newest record is its mark. While that mark is open (needs service or sent for RMA) the tray is not
returned to service, neither by the rules' own return nor by hand (inventory.health.returns), until an admin
marks it returned; from then on it returns as a drained tray does (healthy for `return_after_s`, and the
`return_check` passed, both after the return), by itself or by hand.

Marking a tray that is in service (or out for one of Rackplane's own reasons) takes it out: its state becomes
"needs service" through `set_state`, which tells the schedulers once the transaction commits, and a
"needs service" decision is recorded. A tray out for another owner's reason (an admin in Slurm, a partition
plan) keeps that owner's state and reason; the mark is recorded beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop, override

from inventory.choices import OPEN_SERVICE, ActionKind, ServiceStatus, TrayState
from inventory.health.actions import (
    NEEDS_SERVICE_PREFIX,
    HealthError,
    owned_by_rules,
    record_action,
    set_state,
    shown_state_words,
    typed_text_problem,
)
from inventory.health.events import timestamp
from inventory.health.phrases import Phrase
from inventory.models import ComputeTray, Gpu, ServiceRecord

SERVICE_NOTE_LIMIT = 300  # ServiceRecord.note
# Which mark may follow which (None: no mark yet, or the last one returned). Sending a tray for RMA needs no
# "needs service" first: an admin who finds a dead GPU ships it the same day.
NEXT_MARKS = {
    None: (ServiceStatus.NEEDS_SERVICE, ServiceStatus.RMA),
    ServiceStatus.NEEDS_SERVICE: (ServiceStatus.RMA, ServiceStatus.RETURNED),
    ServiceStatus.RMA: (ServiceStatus.RETURNED,),
}
NOTE_REQUIRED = {
    ServiceStatus.NEEDS_SERVICE: gettext_noop(
        "Say what is wrong: the note is shown on the tray and in the health centre."
    ),
    ServiceStatus.RMA: gettext_noop(
        "Give the RMA number or where the tray (or GPU) went: the note is what finds it again."
    ),
}


def latest_record(tray: ComputeTray) -> ServiceRecord | None:
    return ServiceRecord.objects.filter(tray=tray).select_related("actor", "gpu").order_by("-pk").first()


def open_mark(tray: ComputeTray) -> ServiceRecord | None:
    """The tray's open service mark (needs service or sent for RMA), None when it has none."""
    record = latest_record(tray)
    return record if record is not None and record.status in OPEN_SERVICE else None


def current_marks(records):
    """Of `records`, each tray's newest (its mark): one anti-join, no count of the whole table."""
    newer = ServiceRecord.objects.filter(tray=OuterRef("tray"), pk__gt=OuterRef("pk"))
    return records.filter(~Exists(newer))


def open_marks(user):
    """The open marks the user may see, newest first (the health centre's service list)."""
    return (
        current_marks(ServiceRecord.objects.visible_to(user))
        .filter(status__in=OPEN_SERVICE)
        .select_related("tray__rack", "gpu", "actor")
        .order_by("-created_at", "-pk")
    )


def status_phrase(status: str) -> Phrase:
    """A step as a sentence says it: “sent for RMA”, “needs service” (the label, its first letter lowered)."""
    # The label's English text is its catalogue id (inventory.choices marks it): shown() translates it.
    with override("en"):
        english = str(ServiceStatus(status).label)
    return Phrase(english, lower_first=True)


def status_words(status: str) -> str:
    """A step as a sentence says it, in English (reasons and notes are kept, and sent to Slurm, in "
    "English)."""
    return status_phrase(status).english()


def mark_phrase(record: ServiceRecord) -> Phrase:
    """“sent for RMA by alice at 2026-11-30 01:00:00 UTC”."""
    who = record.actor.get_username() if record.actor_id else "Rackplane"
    return Phrase(
        gettext_noop("%(step)s by %(name)s at %(at)s"),
        {"step": status_phrase(record.status), "name": who, "at": timestamp(record.created_at)},
    )


def mark_words(record: ServiceRecord) -> str:
    """mark_phrase in English (kept in reasons and decisions)."""
    return mark_phrase(record).english()


def shown_mark_words(record: ServiceRecord) -> str:
    """mark_phrase in the viewer's language (pages, form errors, messages)."""
    return mark_phrase(record).shown()


@dataclass(frozen=True)
class MarkOutcome:
    record: ServiceRecord
    taken_out: bool  # the tray's state became "needs service"
    kept_state: str  # why the tray's state was left as it was ("" when it changed or needed no change)


def mark_service(
    tray: ComputeTray, status: str, *, actor, note: str = "", gpu: Gpu | None = None
) -> MarkOutcome:
    """Record the next step of the tray's service tracking (with the tray row locked): HealthError, and
    nothing written, when the step cannot follow the tray's mark, the note is missing or not plain text, or
    the GPU is not the tray's."""
    if status not in ServiceStatus.values:
        raise HealthError(
            _("Unknown service step %(step)r: one of %(steps)s.")
            % {"step": status, "steps": ", ".join(ServiceStatus.values)}
        )
    note = (note or "").strip()
    if not note and status in NOTE_REQUIRED:
        raise HealthError(_(NOTE_REQUIRED[status]))
    problem = typed_text_problem(note, what=_("The note"), limit=SERVICE_NOTE_LIMIT) if note else ""
    if problem:
        raise HealthError(problem)
    with transaction.atomic():
        tray = ComputeTray.objects.select_for_update().select_related("rack").get(pk=tray.pk)
        if gpu is not None and gpu.tray_id != tray.pk:
            raise HealthError(
                _("GPU %(uuid)s is not in %(host)s.") % {"uuid": gpu.uuid, "host": tray.hostname}
            )
        mark = open_mark(tray)
        current = mark.status if mark is not None else None
        if status not in NEXT_MARKS[current]:
            raise HealthError(_refusal(tray, mark, status))
        if status == ServiceStatus.RETURNED and gpu is None and mark is not None:
            gpu = mark.gpu  # the GPU that went away is the one that came back
        record = ServiceRecord.objects.create(
            tray=tray,
            gpu=gpu,
            gpu_uuid=gpu.uuid if gpu is not None else "",
            status=status,
            note=note,
            actor=actor,
        )
        taken_out, kept = False, ""
        if status in OPEN_SERVICE:
            taken_out, kept = _take_out(tray, record, actor)
        return MarkOutcome(record, taken_out, kept)


def _refusal(tray: ComputeTray, mark: ServiceRecord | None, status: str) -> str:
    host = tray.hostname
    if mark is None:
        return _("%(host)s has no open service mark: mark it needing service or sent for RMA first.") % {
            "host": host
        }
    if mark.status == status:
        return _("%(host)s is already %(mark)s.") % {"host": host, "mark": shown_mark_words(mark)}
    return _("%(host)s is %(mark)s: it cannot be marked “%(step)s” now (mark it returned first).") % {
        "host": host,
        "mark": shown_mark_words(mark),
        "step": status_phrase(status).shown(),
    }


def _take_out(tray: ComputeTray, record: ServiceRecord, actor) -> tuple[bool, str]:
    """A tray in service (or out for Rackplane's own reason) goes to "needs service"; another owner's state
    is kept."""
    if tray.state == TrayState.NEEDS_SERVICE:
        return False, ""
    if tray.state != TrayState.UP and not owned_by_rules(tray):
        return False, (
            _(
                "it stays %(state)s for its owner's reason (%(reason)s); the mark keeps Rackplane from "
                "returning it"
            )
            % {"state": shown_state_words(tray.state), "reason": tray.state_reason}
        )
    who = f"{actor.get_username()}: " if actor is not None else ""
    what = f" ({record.gpu_uuid})" if record.gpu_uuid else ""
    reason = f"{NEEDS_SERVICE_PREFIX}{who}{status_words(record.status)}{what}: {record.note}"
    set_state(tray, TrayState.NEEDS_SERVICE, reason, source="admin", actor=actor)
    record_action(None, tray, ActionKind.NEEDS_SERVICE, reason, actor=actor)
    return True, ""
