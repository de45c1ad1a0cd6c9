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
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_POST

from core.access import require_admin
from integrations import drain as schedulers
from inventory import selectors
from inventory.choices import ActionKind
from inventory.health.actions import HealthError, drain_tray
from inventory.health.returns import return_to_service
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
from scheduling.services.mig_layouts import MigLayoutRefused, set_mig_layout

BULK_RESULT_SESSION_KEY = "portal_tray_bulk_result"
_WINDOW_FORMAT = "%Y-%m-%d %H:%M"


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
def tray_drain(request, pk):
    tray = _tray(request, pk)
    form = DrainForm(request.POST, prefix="drain")
    if not form.is_valid():
        return _refused(request, tray, 400, drain=form)
    try:
        action = drain_tray(tray, form.cleaned_data["reason"], actor=request.user)
    except HealthError as error:
        return _conflict(request, tray, str(error), drain=form)
    messages.success(
        request, _("%(tray)s drained: %(reason)s") % {"tray": tray.hostname, "reason": action.reason}
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
        _("%(tray)s is back in service: %(reason)s") % {"tray": tray.hostname, "reason": action.reason},
    )
    for problem in _end_windows(tray, windows):
        messages.warning(
            request, _("The maintenance reservation was not removed: %(problem)s") % {"problem": problem}
        )
    return _done(tray)


def maintenance_reason(reason: str, start=None, end=None) -> str:
    if start is None:
        return f"maintenance: {reason}"
    utc = timezone.get_fixed_timezone(0)
    first = timezone.localtime(start, utc).strftime(_WINDOW_FORMAT)
    last = timezone.localtime(end, utc).strftime(_WINDOW_FORMAT)
    return f"{MAINTENANCE_WINDOW}{first} to {last} UTC: {reason}"


@require_POST
def tray_maintenance(request, pk):
    tray = _tray(request, pk)
    form = MaintenanceForm(request.POST, prefix="maintenance")
    if not form.is_valid():
        return _refused(request, tray, 400, maintenance=form)
    data = form.cleaned_data
    start, end = data.get("start"), data.get("end")
    try:
        action = drain_tray(
            tray, maintenance_reason(data["reason"], start, end), actor=request.user, maintenance=True
        )
    except HealthError as error:
        return _conflict(request, tray, str(error), maintenance=form)
    messages.success(
        request,
        _("%(tray)s is out for maintenance: %(reason)s") % {"tray": tray.hostname, "reason": action.reason},
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
