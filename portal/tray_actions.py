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
from datetime import timedelta

from django import forms
from django.contrib import messages
from django.db import transaction
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from core.access import is_admin, require_admin
from integrations import drain as schedulers
from inventory import health, selectors
from inventory.choices import ActionKind, TrayState
from inventory.models import ComputeTray, HealthAction
from portal.tray_context import tray_context

WHAT = "tray actions"
BULK_LIMIT = 72  # trays per bulk request (four racks' worth; a rack view offers at most 18)
REASON_MAX = health.TYPED_REASON_LIMIT
NOTE_MAX = health.NOTE_LIMIT
# Window clocks may lag the browser's a little: a start this close to now is "now", not the past.
PAST_SLACK_S = 120
# A maintenance window is for work on a tray, not a way to retire it: longer than this is a typo (a year for
# a day) or a decommission, which is "needs service". Slurm would hold the reservation for the whole time.
MAX_WINDOW_DAYS = 30
MAX_LEAD_DAYS = 365
BULK_RESULT_SESSION_KEY = "portal_tray_bulk_result"
# A refusal carried to the tray page after the redirect: shown in its actions (_tray_actions.html), not in the
# page's message list (base.html leaves "in-place" messages to the part of the page that shows them).
REFUSED_TAGS = "in-place tray-action"
MAINTENANCE_WINDOW = "maintenance window "
_WINDOW_FORMAT = "%Y-%m-%d %H:%M"


def _checked(form: forms.Form, field: str, what: str, limit: int) -> str:
    """A typed reason or note as plain text (inventory.health.typed_text_problem): a form error naming the
    field otherwise, so nothing is saved."""
    value = form.cleaned_data.get(field, "")
    problem = health.typed_text_problem(value, what=what, limit=limit) if value else ""
    if problem:
        raise forms.ValidationError(problem, code="typed_text")
    return value


class ReasonMixin:
    """The reason field's checks, shared by the drain, maintenance and bulk forms."""

    def clean_reason(self):
        return _checked(self, "reason", "The reason", REASON_MAX)

    def clean_note(self):
        return _checked(self, "note", "The note", NOTE_MAX)


_TOO_LONG = (
    "At most %(limit_value)d characters (Rackplane and your name go in front): this is %(show_value)d."
)


class DrainForm(ReasonMixin, forms.Form):
    reason = forms.CharField(
        max_length=REASON_MAX,
        strip=True,
        help_text="Shown to operators and sent to Slurm and Kubernetes as “rackplane: <you>: <reason>”.",
        error_messages={
            "required": "Say why the tray is drained: operators and Slurm see this reason.",
            "max_length": _TOO_LONG,
        },
    )


class ReturnForm(ReasonMixin, forms.Form):
    note = forms.CharField(
        max_length=NOTE_MAX, required=False, strip=True, help_text="Optional: what was done, e.g. “reseated”."
    )
    force = forms.BooleanField(
        required=False,
        label="Return it although it is not eligible",
        help_text="Only when you know the tray is sound (repaired, or the eligibility rule is wrong).",
    )


class DateTimeInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self, **kwargs):
        super().__init__(format="%Y-%m-%dT%H:%M", **kwargs)


class MaintenanceForm(ReasonMixin, forms.Form):
    reason = forms.CharField(
        max_length=REASON_MAX,
        strip=True,
        help_text="E.g. “fan swap”. The tray is drained now with this reason.",
        error_messages={
            "required": "Say what the maintenance is for: operators and Slurm see it.",
            "max_length": _TOO_LONG,
        },
    )
    start = forms.DateTimeField(
        required=False,
        widget=DateTimeInput(),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"],
        help_text="Optional window (UTC): Slurm reserves the node for maintenance from start to end.",
    )
    end = forms.DateTimeField(
        required=False,
        widget=DateTimeInput(),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"],
        help_text=f"At most {MAX_WINDOW_DAYS} days after the start.",
    )

    def clean(self):
        data = super().clean()
        start, end = data.get("start"), data.get("end")
        if self.errors:
            return data
        if (start is None) != (end is None):
            raise forms.ValidationError(
                "Give both the start and the end of the maintenance window, or neither (drain only)."
            )
        if start is not None:
            now = timezone.now()
            if start < now - timedelta(seconds=PAST_SLACK_S):
                self.add_error("start", "The window starts in the past: choose a start from now on (UTC).")
            if end <= start:
                self.add_error("end", "The window ends before it starts: choose an end after the start.")
            elif end - start > timedelta(days=MAX_WINDOW_DAYS):
                self.add_error(
                    "end",
                    f"A maintenance window lasts at most {MAX_WINDOW_DAYS} days: choose an earlier end (a "
                    "tray out for longer is marked “needs service” instead).",
                )
            if start > now + timedelta(days=MAX_LEAD_DAYS):
                self.add_error(
                    "start", f"The window starts more than {MAX_LEAD_DAYS} days from now: check the year."
                )
        return data


def _forms(tray: ComputeTray, **bound) -> dict:
    return {
        "drain_form": bound.get("drain") or DrainForm(prefix="drain"),
        "return_form": bound.get("return") or ReturnForm(prefix="return"),
        "maintenance_form": bound.get("maintenance") or MaintenanceForm(prefix="maintenance"),
    }


def actions_context(user, tray: ComputeTray, **bound) -> dict:
    """What the tray page needs for its action forms (nothing for anyone but a platform admin)."""
    if not is_admin(user):
        return {}
    context = _forms(tray, **bound)
    if tray.state != TrayState.UP:
        context["return_eligibility"] = health.return_eligibility(tray)
        context["return_ours"] = health.owned_by_rules(tray)
    context["tray_actions"] = True
    return context


def _tray(request, pk: int) -> ComputeTray:
    require_admin(request.user, WHAT)
    return get_object_or_404(selectors.trays_for_detail(request.user), pk=pk)


def _refused(request, tray: ComputeTray, status: int, error: str = "", **bound):
    """The tray page again, with the bound form's errors (or `error` from the service) and nothing changed."""
    tray.refresh_from_db()
    context = tray_context(request, tray)
    context.update(actions_context(request.user, tray, **bound))
    context["action_error"] = error
    context["action_error_form"] = next(iter(bound), "")
    template = (
        "inventory/_tray_detail.html" if getattr(request, "htmx", False) else "inventory/tray_detail.html"
    )
    return render(request, template, context, status=status)


def _done(tray: ComputeTray) -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("inventory:tray-detail", args=[tray.pk]), status=303)


def _conflict(request, tray: ComputeTray, error: str, **bound):
    """The service refused (the tray is no longer in the state the page showed) and nothing changed: back to
    the tray page (Post/Redirect/Get: a reload does not post again), whose actions say why; htmx: in place."""
    if getattr(request, "htmx", False):
        return _refused(request, tray, 409, error, **bound)
    messages.error(request, f"Nothing was changed: {error}", extra_tags=REFUSED_TAGS)
    return _done(tray)


@require_POST
def tray_drain(request, pk):
    tray = _tray(request, pk)
    form = DrainForm(request.POST, prefix="drain")
    if not form.is_valid():
        return _refused(request, tray, 400, drain=form)
    try:
        action = health.drain_tray(tray, form.cleaned_data["reason"], actor=request.user)
    except health.HealthError as error:
        return _conflict(request, tray, str(error), drain=form)
    messages.success(request, f"{tray.hostname} drained: {action.reason}")
    return _done(tray)


def _open_windows(tray: ComputeTray) -> list[HealthAction]:
    """The maintenance windows reserved since the tray last returned to service (drain actions whose
    reason names a window; each one's pk is its reservation's window id)."""
    last_return = (
        HealthAction.objects.filter(tray=tray, kind=ActionKind.RETURN).order_by("-created_at", "-pk").first()
    )
    drains = HealthAction.objects.filter(
        tray=tray, kind=ActionKind.DRAIN, reason__contains=MAINTENANCE_WINDOW
    )
    if last_return is not None:
        drains = drains.filter(pk__gt=last_return.pk)
    return list(drains.order_by("pk"))


def _return(tray: ComputeTray, user, note: str, force: bool) -> tuple[HealthAction, list[HealthAction]]:
    windows = _open_windows(tray)
    action = health.return_to_service(tray, actor=user, note=note, force=force)
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
    except health.HealthError as error:
        return _conflict(request, tray, str(error), **{"return": form})
    messages.success(request, f"{tray.hostname} is back in service: {action.reason}")
    for problem in _end_windows(tray, windows):
        messages.warning(request, f"The maintenance reservation was not removed: {problem}")
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
        action = health.drain_tray(tray, maintenance_reason(data["reason"], start, end), actor=request.user)
    except health.HealthError as error:
        return _conflict(request, tray, str(error), maintenance=form)
    messages.success(request, f"{tray.hostname} is out for maintenance: {action.reason}")
    if start is not None:
        outcomes = schedulers.schedule_maintenance(tray.hostname, action.pk, start, end, action.reason)
        for outcome in outcomes:
            if outcome.ok:
                messages.info(request, str(outcome))
            else:
                messages.warning(
                    request,
                    f"The tray is drained, but the maintenance reservation failed: {outcome}",
                )
    return _done(tray)


# --------------------------------------------------------------------------------------------------------
# Bulk: several trays of one rack, one transaction
# --------------------------------------------------------------------------------------------------------


class BulkForm(ReasonMixin, forms.Form):
    action = forms.ChoiceField(
        choices=[("drain", "Drain"), ("return", "Return to service")],
        error_messages={
            "invalid_choice": "Choose Drain or Return to service.",
            "required": "Choose an action.",
        },
    )
    reason = forms.CharField(
        max_length=REASON_MAX, required=False, strip=True, error_messages={"max_length": _TOO_LONG}
    )
    note = forms.CharField(max_length=NOTE_MAX, required=False, strip=True)
    force = forms.BooleanField(required=False)

    def __init__(self, data, *, rack, **kwargs):
        super().__init__(data, **kwargs)
        self.rack = rack
        self.raw_trays = data.getlist("tray") if data is not None else []
        self.trays: list[ComputeTray] = []

    def clean(self):
        data = super().clean()
        if data.get("action") == "drain" and not data.get("reason") and "reason" not in self.errors:
            self.add_error("reason", "Say why the trays are drained: operators and Slurm see this reason.")
        raw = self.raw_trays
        if not raw:
            raise forms.ValidationError("Select at least one tray.")
        if len(raw) > BULK_LIMIT:
            raise forms.ValidationError(
                f"{len(raw)} trays selected; at most {BULK_LIMIT} go in one request. Select fewer."
            )
        if not all(value.isdigit() and len(value) <= 18 for value in raw):
            raise forms.ValidationError("The selection names trays by number only; reload the page.")
        ids = [int(value) for value in raw]
        if len(set(ids)) != len(ids):
            raise forms.ValidationError("A tray is selected twice; reload the page and select again.")
        trays = {tray.pk: tray for tray in ComputeTray.objects.filter(rack=self.rack, pk__in=ids)}
        missing = [pk for pk in ids if pk not in trays]
        if missing:
            raise forms.ValidationError(
                f"{len(missing)} of the selected trays are not in rack {self.rack.name} (or no longer "
                "exist); reload the page and select again."
            )
        self.trays = sorted(trays.values(), key=lambda tray: tray.slot)
        return data


@dataclass
class BulkOutcome:
    hostname: str
    pk: int
    ok: bool
    message: str


class _RollBack(Exception):
    pass


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
                        action = health.drain_tray(tray, data["reason"], actor=user)
                    else:
                        action, windows[tray.pk] = _return(tray, user, data["note"], data["force"])
                except health.HealthError as error:
                    outcomes.append(BulkOutcome(tray.hostname, tray.pk, False, str(error)))
                else:
                    outcomes.append(BulkOutcome(tray.hostname, tray.pk, True, action.reason))
            if not all(outcome.ok for outcome in outcomes):
                raise _RollBack
    except _RollBack:
        refused = [outcome.hostname for outcome in outcomes if not outcome.ok]
        names = ", ".join(refused[:4]) + (f" and {len(refused) - 4} more" if len(refused) > 4 else "")
        done = "drained" if data["action"] == "drain" else "returned to service"
        for outcome in outcomes:
            if outcome.ok:
                outcome.message = (
                    f"Not changed, although it could have been {done}: {names} refused (see "
                    f"{'its row' if len(refused) == 1 else 'their rows'}), and the selected trays change all "
                    "together or not at all. Deselect the refused trays and try again."
                )
        return False, outcomes
    for tray in form.trays:
        for problem in _end_windows(tray, windows.get(tray.pk, [])):
            outcomes.append(BulkOutcome(tray.hostname, tray.pk, True, f"reservation not removed: {problem}"))
    return True, outcomes


@require_POST
def tray_bulk(request, name):
    require_admin(request.user, WHAT)
    rack = get_object_or_404(selectors.racks(request.user), name=name)
    form = BulkForm(request.POST, rack=rack)
    if not form.is_valid():
        return render(
            request,
            "inventory/tray_bulk_result.html",
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
            request, "inventory/tray_bulk_result.html", {"rack": rack, "form": form, **result}, status=409
        )
    request.session[BULK_RESULT_SESSION_KEY] = {"rack": rack.name, **result}
    return HttpResponseRedirect(reverse("inventory:tray-bulk-result", args=[rack.name]), status=303)


@require_GET
def tray_bulk_result(request, name):
    require_admin(request.user, WHAT)
    rack = get_object_or_404(selectors.racks(request.user), name=name)
    result = request.session.get(BULK_RESULT_SESSION_KEY) or {}
    if result.get("rack") != rack.name:
        result = {}
    return render(
        request,
        "inventory/tray_bulk_result.html",
        {
            "rack": rack,
            "form": None,
            "action": result.get("action", ""),
            "applied": bool(result),
            "outcomes": result.get("outcomes", []),
            "nothing": not result,
        },
    )
