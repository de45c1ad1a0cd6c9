"""Operator actions on compute trays (platform admins only): drain, return to service and maintenance, on
one tray from its page or on several selected on the rack view.

Every change goes through inventory.health (`drain_tray`, `return_to_service`): a HealthAction row says who
and why, the tray's save is audited (core.audit names the signed-in user), and integrations.signals pushes
the new state to every scheduler (Slurm DRAIN/RESUME, Kubernetes cordon and taint) once the transaction
commits. A maintenance window with a start and an end also becomes a Slurm `Flags=MAINT` reservation
(integrations.drain.schedule_maintenance), named after the HealthAction that drained the tray, and is removed
when the tray returns to service.

Forms follow Post/Redirect/Get: a change redirects (303) to the tray page or the bulk result page; input the
form refuses re-shows the form with what was wrong, in words, and changes nothing. A refusal by the service
(the tray changed since the page was shown: returned already, drained by another owner) changes nothing and
redirects (303) back to the tray page, whose actions say why; an htmx request is answered in place (409).
A bulk request is all or nothing: one transaction, rolled back when any tray refuses, and the result page
says for each tray what happened or why not (a tray that could have changed names the trays that refused).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from django.contrib import messages
from django.db import transaction
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.html import conditional_escape, escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core.access import require_admin
from core.fingerprint import fingerprint
from core.moments import utc_words
from core.sentences_i18n import translate_html
from integrations import drain as schedulers
from integrations.plans.forms import MigWhatIfForm
from inventory import selectors
from inventory.choices import ActionKind
from inventory.health.actions import HealthError, drain_tray, hand_reason
from inventory.health.returns import return_to_service
from inventory.mig_layouts import DISABLED, WHOLE_GPU_LAYOUTS
from inventory.mig_options import layout_options
from inventory.models import ComputeTray, HealthAction
from inventory.views.racks import tray_page
from inventory.views.tray_forms import (
    MAINTENANCE_WINDOW,
    REFUSED_TAGS,
    WHAT,
    BulkForm,
    DrainForm,
    MaintenanceForm,
    MigLayoutForm,
    ReturnForm,
)
from scheduling import whatif, whatif_runs
from scheduling.requeue import REQUEUE, SIGNAL, Planned, preview_drain
from scheduling.services.mig_layouts import MigLayoutRefused, set_mig_layout
from scheduling.whatif import WhatIfError

BULK_RESULT_SESSION_KEY = "portal_tray_bulk_result"
CONFIRM_FIELD = "confirm"  # the confirmation page's fingerprint of the jobs it showed (_fingerprint)


def _said(template: str, tray: ComputeTray, reason: str) -> SafeString:
    """A message naming the tray and its stored reason, read back in the viewer's language and zone."""
    values = {"tray": escape(tray.hostname), "reason": translate_html(reason)}
    return mark_safe(conditional_escape(template) % values)  # the words and the name escaped


def _tray(request, pk: int) -> ComputeTray:
    require_admin(request.user, WHAT)
    return get_object_or_404(selectors.trays_for_detail(request.user), pk=pk)


def _refused(request, tray: ComputeTray, status: int, error: str = "", **bound):
    """The tray page again (inventory.views.racks.tray_page), with the bound form's errors (or `error` from
    the service) and nothing changed."""
    return tray_page(
        request, tray, status, bound=bound, action_error=error, action_error_form=next(iter(bound), "")
    )


def _done(tray: ComputeTray) -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("inventory:tray-detail", args=[tray.pk]), status=303)


def _conflict(request, tray: ComputeTray, error: str, **bound):
    """The service refused (the tray is no longer in the state the page showed) and nothing changed: back to
    the tray page (Post/Redirect/Get: a reload does not post again), whose actions say why; htmx: in place."""
    if getattr(request, "htmx", False):
        return _refused(request, tray, 409, error, **bound)
    messages.error(request, _("Nothing was changed: %(error)s") % {"error": error}, extra_tags=REFUSED_TAGS)
    return _done(tray)


@require_POST
def tray_mig_layout(request, pk):
    """Give every GPU of the tray a MIG layout (scheduling.services.mig_layouts.set_mig_layout): the push
    that follows labels the node for the GPU Operator's MIG manager and gives Slurm the MIG GRES."""
    tray = _tray(request, pk)
    form = MigLayoutForm(request.POST, prefix="mig", options=layout_options(tray))
    if not form.is_valid():
        return _refused(request, tray, 400, mig=form)
    try:
        tray = set_mig_layout(tray.pk, form.cleaned_data["layout"])
    except MigLayoutRefused as error:
        return _conflict(request, tray, str(error), mig=form)
    messages.success(
        request,
        _(
            "%(tray)s: MIG layout %(layout)s chosen; the configuration push applies it, and the GPUs' next "
            "reports show when it is in place."
        )
        % {"tray": tray.hostname, "layout": tray.mig_layout},
    )
    return _done(tray)


@require_POST
def tray_mig_whatif(request, pk):
    """ "What would this do?": the site's own job history replayed with the chosen MIG layout on this tray,
    against the cluster now (scheduling.whatif_runs.start_mig: Celery tasks, as the wizard's what-if), then
    its page (integrations:whatif-detail), which shows the progress and the figures side by side. Nothing
    is applied. Input the form refuses, or a layout the tray already has, is a 400 and writes nothing."""
    tray = _tray(request, pk)
    options = layout_options(tray)
    form = MigLayoutForm(request.POST, prefix="mig", options=options)
    data = request.POST.copy()
    data.setdefault("mig-days", str(whatif.DEFAULT_DAYS))
    days_form = MigWhatIfForm(data, prefix="mig")
    if not form.is_valid():
        return _refused(request, tray, 400, mig=form)
    if not days_form.is_valid():
        error = " ".join(m for messages_ in days_form.errors.values() for m in messages_)
        return _refused(request, tray, 400, error, mig=form)
    name = form.cleaned_data["layout"]
    if name == (tray.mig_layout if tray.mig_layout not in WHOLE_GPU_LAYOUTS else DISABLED):
        error = _("%(tray)s already has the layout %(layout)s: choose another one to compare it with.") % {
            "tray": tray.hostname,
            "layout": name,
        }
        return _refused(request, tray, 400, error, mig=form)
    try:
        layout, profiles = whatif_runs.tray_mig_choice(tray, name)
        run = whatif_runs.start_mig(request.user, days_form.cleaned_data["days"], tray, layout, profiles)
    except WhatIfError as error:
        return _refused(request, tray, 400, str(error), mig=form)
    return HttpResponseRedirect(reverse("integrations:whatif-detail", args=[run.pk]), status=303)


# --------------------------------------------------------------------------------------------------------
# Confirming a drain of running work: what happens to each job, asked before anything changes
# --------------------------------------------------------------------------------------------------------


def _fingerprint(planned: list[tuple[ComputeTray, list[Planned]]]) -> str:
    """What the confirmation showed, in one word: the trays' jobs and what would happen to each. A
    confirmation whose fingerprint is no longer the trays' (a job ended or came, a policy changed) is shown
    again."""
    return fingerprint(
        [
            (tray.pk, [(item.job.pk, item.what, item.grace_s, item.signal) for item in items])
            for tray, items in planned
        ]
    )


def _grace(seconds: int) -> str:
    minutes, rest = divmod(seconds, 60)
    if seconds and not rest:
        return ngettext("%(n)s minute", "%(n)s minutes", minutes) % {"n": minutes}
    return ngettext("%(n)s second", "%(n)s seconds", seconds) % {"n": seconds}


def _what_happens(item: Planned) -> str:
    """What the drain does to the job (scheduling.requeue's decision), in the viewer's language."""
    if item.what == SIGNAL:
        return _(
            "Asked to checkpoint (SIG%(signal)s), then requeued after %(grace)s unless it ends first."
        ) % {"signal": item.signal, "grace": _grace(item.grace_s)}
    if item.what == REQUEUE:
        if item.why == "not started in its backend yet":
            return _(
                "Requeued at once: it has not started in its backend yet, so there is nothing to checkpoint."
            )
        return _("Requeued at once: its class's policy stops it without a checkpoint.")
    if item.why == "maintenance lets running jobs finish":
        return _("Left to finish on the tray: maintenance waits for running jobs.")
    if item.why == "already asked to checkpoint":
        return _("Already asked to checkpoint: it is requeued when that grace period ends.")
    return _("Left to finish on the tray: its class's policy waits for it.")


def _job_rows(planned: list[Planned]) -> list[dict]:
    return [
        {
            "job": item.job,
            "person": item.job.submitted_by.get_username() if item.job.submitted_by else "—",
            "department": item.job.department.name,
            "what": item.what,
            "words": _what_happens(item),
        }
        for item in planned
    ]


def _hidden(form) -> list[tuple[str, str]]:
    """The posted values of `form` (reason, window; the bulk's trays), carried by the confirmation."""
    return [
        (name, value)
        for name in form.data
        if name not in (CONFIRM_FIELD, "csrfmiddlewaretoken")
        for value in form.data.getlist(name)
    ]


def _confirmation(request, rack, kind: str, form, reason: str, planned, stale: bool, tray=None):
    """The confirmation page: the jobs the drain handles and how, the form's values kept; nothing changed.
    409 when a confirmation was posted for jobs that are no longer the trays'."""
    if tray is not None:
        if kind == "maintenance":
            heading = _("Confirm maintenance of %(host)s") % {"host": tray.hostname}
        else:
            heading = _("Confirm the drain of %(host)s") % {"host": tray.hostname}
        action_url = reverse(f"integrations:tray-{kind}", args=[tray.pk])
    else:
        heading = ngettext(
            "Confirm the drain of %(n)s tray on %(rack)s",
            "Confirm the drain of %(n)s trays on %(rack)s",
            len(planned),
        ) % {"n": len(planned), "rack": rack.name}
        action_url = reverse("integrations:tray-bulk", args=[rack.name])
    return render(
        request,
        "integrations/tray_confirm.html",
        {
            "rack": rack,
            "tray": tray,
            "kind": kind,
            "heading": heading,
            "reason": reason,
            "hidden": _hidden(form),
            "groups": [{"tray": each, "rows": _job_rows(items)} for each, items in planned],
            "fingerprint": _fingerprint(planned),
            "stale": stale,
            "action_url": action_url,
        },
        status=409 if stale else 200,
    )


def _unconfirmed(request, rack, kind: str, form, typed: str, trays: list[ComputeTray], single: bool):
    """The confirmation page when the drain must be confirmed first, else None (apply it): a GET always
    shows it; a POST on trays holding running work needs the fingerprint of the jobs it will handle, and a
    posted fingerprint that no longer matches is shown again. Call with the trays' rows locked."""
    reason = hand_reason(typed, request.user)
    planned = [(tray, preview_drain(tray.pk, reason)) for tray in trays]
    if request.method == "POST":
        posted = request.POST.get(CONFIRM_FIELD, "")
        if posted == _fingerprint(planned) or not (posted or any(items for _each, items in planned)):
            return None
    else:
        posted = ""
    return _confirmation(
        request, rack, kind, form, typed, planned, bool(posted), tray=trays[0] if single else None
    )


@require_http_methods(["GET", "POST"])
def tray_drain(request, pk):
    """Drain by hand. On a tray holding running work, the GET (or a first POST) shows which jobs are asked
    to checkpoint, requeued or waited for, and only the confirmed POST applies."""
    tray = _tray(request, pk)
    form = DrainForm(request.POST if request.method == "POST" else request.GET, prefix="drain")
    if not form.is_valid():
        return _refused(request, tray, 400, drain=form)
    with transaction.atomic():
        ComputeTray.objects.select_for_update().filter(pk=tray.pk).first()
        held = _unconfirmed(request, tray.rack, "drain", form, form.cleaned_data["reason"], [tray], True)
        if held is not None:
            return held
        try:
            action = drain_tray(tray, form.cleaned_data["reason"], actor=request.user)
        except HealthError as error:
            transaction.set_rollback(True)
            refused = error
        else:
            refused = None
    if refused is not None:
        return _conflict(request, tray, str(refused), drain=form)
    messages.success(
        request,
        _said(_("%(tray)s drained: %(reason)s"), tray, action.reason),
    )
    return _done(tray)


def _open_windows(tray: ComputeTray) -> list[HealthAction]:
    """The maintenance windows reserved since the tray last returned to service (drain actions whose
    reason names a window; each one's pk is its reservation's window id)."""
    last_return = (
        HealthAction.objects.filter(tray=tray, kind=ActionKind.RETURN).order_by("-created_at", "-pk").first()
    )
    drains = HealthAction.objects.filter(
        tray=tray, kind__in=[ActionKind.MAINTENANCE, ActionKind.DRAIN], reason__contains=MAINTENANCE_WINDOW
    )
    if last_return is not None:
        drains = drains.filter(pk__gt=last_return.pk)
    return list(drains.order_by("pk"))


def _return(tray: ComputeTray, user, note: str, force: bool) -> tuple[HealthAction, list[HealthAction]]:
    windows = _open_windows(tray)
    action = return_to_service(tray, actor=user, note=note, force=force)
    return action, windows


def _end_windows(tray: ComputeTray, windows: list[HealthAction]) -> list[str]:
    """Remove the tray's maintenance reservations; the problems, in words (an empty list when none)."""
    problems = []
    for window in windows:
        for outcome in schedulers.end_maintenance(tray.hostname, window.pk):
            if not outcome.ok:
                problems.append(str(outcome))
    return problems


@require_POST
def tray_return(request, pk):
    tray = _tray(request, pk)
    form = ReturnForm(request.POST, prefix="return")
    if not form.is_valid():
        return _refused(request, tray, 400, **{"return": form})
    try:
        action, windows = _return(tray, request.user, form.cleaned_data["note"], form.cleaned_data["force"])
    except HealthError as error:
        return _conflict(request, tray, str(error), **{"return": form})
    messages.success(
        request,
        _said(_("%(tray)s is back in service: %(reason)s"), tray, action.reason),
    )
    for problem in _end_windows(tray, windows):
        messages.warning(
            request, _("The maintenance reservation was not removed: %(problem)s") % {"problem": problem}
        )
    return _done(tray)


def maintenance_reason(reason: str, start=None, end=None) -> str:
    if start is None:
        return f"maintenance: {reason}"
    # Each moment named in UTC (core.moments.utc_words): read back in the viewer's zone and language
    # (inventory.health.words.MAINTENANCE_WINDOW_BY).
    first, last = utc_words(start, seconds=False), utc_words(end, seconds=False)
    return f"{MAINTENANCE_WINDOW}{first} to {last}: {reason}"


@require_http_methods(["GET", "POST"])
def tray_maintenance(request, pk):
    """Maintenance: drained now (its jobs waited for), with an optional Slurm reservation. On a tray holding
    running work it is confirmed first, as a drain is (tray_drain)."""
    tray = _tray(request, pk)
    form = MaintenanceForm(request.POST if request.method == "POST" else request.GET, prefix="maintenance")
    if not form.is_valid():
        return _refused(request, tray, 400, maintenance=form)
    data = form.cleaned_data
    start, end = data.get("start"), data.get("end")
    reason = maintenance_reason(data["reason"], start, end)
    refused = None
    with transaction.atomic():
        ComputeTray.objects.select_for_update().filter(pk=tray.pk).first()
        held = _unconfirmed(request, tray.rack, "maintenance", form, reason, [tray], True)
        if held is not None:
            return held
        try:
            action = drain_tray(tray, reason, actor=request.user, maintenance=True)
        except HealthError as error:
            transaction.set_rollback(True)
            refused = error
    if refused is not None:
        return _conflict(request, tray, str(refused), maintenance=form)
    messages.success(
        request,
        _said(_("%(tray)s is out for maintenance: %(reason)s"), tray, action.reason),
    )
    if start is not None:
        outcomes = schedulers.schedule_maintenance(tray.hostname, action.pk, start, end, action.reason)
        for outcome in outcomes:
            if outcome.ok:
                messages.info(request, str(outcome))
            else:
                messages.warning(
                    request,
                    _("The tray is drained, but the maintenance reservation failed: %(outcome)s")
                    % {"outcome": outcome},
                )
    return _done(tray)


# --------------------------------------------------------------------------------------------------------
# Bulk: several trays of one rack, one transaction
# --------------------------------------------------------------------------------------------------------


@dataclass
class BulkOutcome:
    hostname: str
    pk: int
    ok: bool
    message: str


class _RollBack(Exception):
    pass


def _not_changed(action: str, refused: list[str]) -> str:
    """What a tray that could have changed says when others refused (the whole sentence, translated)."""
    names = ", ".join(refused[:4])
    if len(refused) > 4:
        names = _("%(names)s and %(more)s more") % {"names": names, "more": len(refused) - 4}
    if action == "drain":
        sentence = ngettext(
            "Not changed, although it could have been drained: %(names)s refused (see its row), and the "
            "selected trays change all together or not at all. Deselect the refused trays and try again.",
            "Not changed, although it could have been drained: %(names)s refused (see their rows), and "
            "the selected trays change all together or not at all. Deselect the refused trays and try "
            "again.",
            len(refused),
        )
    else:
        sentence = ngettext(
            "Not changed, although it could have been returned to service: %(names)s refused (see its "
            "row), and the selected trays change all together or not at all. Deselect the refused trays "
            "and try again.",
            "Not changed, although it could have been returned to service: %(names)s refused (see their "
            "rows), and the selected trays change all together or not at all. Deselect the refused trays "
            "and try again.",
            len(refused),
        )
    return sentence % {"names": names}


def _apply_bulk(form: BulkForm, user) -> tuple[bool, list[BulkOutcome]]:
    """All or nothing: every tray's action in one transaction, rolled back when any refuses."""
    data = form.cleaned_data
    outcomes: list[BulkOutcome] = []
    windows: dict[int, list[HealthAction]] = {}
    try:
        with transaction.atomic():
            for tray in form.trays:
                try:
                    if data["action"] == "drain":
                        action = drain_tray(tray, data["reason"], actor=user)
                    else:
                        action, windows[tray.pk] = _return(tray, user, data["note"], data["force"])
                except HealthError as error:
                    outcomes.append(BulkOutcome(tray.hostname, tray.pk, False, str(error)))
                else:
                    outcomes.append(BulkOutcome(tray.hostname, tray.pk, True, action.reason))
            if not all(outcome.ok for outcome in outcomes):
                raise _RollBack
    except _RollBack:
        refused = [outcome.hostname for outcome in outcomes if not outcome.ok]
        sentence = _not_changed(data["action"], refused)
        for outcome in outcomes:
            if outcome.ok:
                outcome.message = sentence
        return False, outcomes
    for tray in form.trays:
        for problem in _end_windows(tray, windows.get(tray.pk, [])):
            outcomes.append(
                BulkOutcome(
                    tray.hostname,
                    tray.pk,
                    True,
                    _("reservation not removed: %(problem)s") % {"problem": problem},
                )
            )
    return True, outcomes


@require_POST
def tray_bulk(request, name):
    require_admin(request.user, WHAT)
    rack = get_object_or_404(selectors.racks(request.user), name=name)
    form = BulkForm(request.POST, rack=rack)
    if not form.is_valid():
        return render(
            request,
            "integrations/tray_bulk_result.html",
            {"rack": rack, "form": form, "applied": False, "outcomes": []},
            status=400,
        )
    with transaction.atomic():
        if form.cleaned_data["action"] == "drain":
            locked = ComputeTray.objects.select_for_update().filter(pk__in=[t.pk for t in form.trays])
            list(locked.order_by("pk"))
            held = _unconfirmed(request, rack, "drain", form, form.cleaned_data["reason"], form.trays, False)
            if held is not None:
                return held
        applied, outcomes = _apply_bulk(form, request.user)
    result = {
        "action": form.cleaned_data["action"],
        "applied": applied,
        "outcomes": [asdict(outcome) for outcome in outcomes],
    }
    if not applied:
        return render(
            request, "integrations/tray_bulk_result.html", {"rack": rack, "form": form, **result}, status=409
        )
    request.session[BULK_RESULT_SESSION_KEY] = {"rack": rack.name, **result}
    return HttpResponseRedirect(reverse("integrations:tray-bulk-result", args=[rack.name]), status=303)


@require_GET
def tray_bulk_result(request, name):
    require_admin(request.user, WHAT)
    rack = get_object_or_404(selectors.racks(request.user), name=name)
    result = request.session.get(BULK_RESULT_SESSION_KEY) or {}
    if result.get("rack") != rack.name:
        result = {}
    return render(
        request,
        "integrations/tray_bulk_result.html",
        {
            "rack": rack,
            "form": None,
            "action": result.get("action", ""),
            "applied": bool(result),
            "outcomes": result.get("outcomes", []),
            "nothing": not result,
        },
    )
