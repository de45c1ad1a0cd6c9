"""The tray action forms (drain, return to service, maintenance, and the rack view's bulk form) and what the
tray page needs to show them: input checks only, in inventory's words (inventory.health's text rules).

The actions themselves (the POSTs, which tell the schedulers) are integrations.views.tray_actions.
"""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.utils import timezone
from django.utils.text import format_lazy
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from core.access import is_admin
from core.sentences import say
from inventory.choices import PlanStatus, TrayState
from inventory.forms import DataChoices
from inventory.health.actions import TYPED_REASON_LIMIT, owned_by_rules, typed_text_problem
from inventory.health.returns import NOTE_LIMIT, return_eligibility
from inventory.health.service import open_mark
from inventory.mig_layouts import DISABLED
from inventory.mig_options import LayoutOptions, layout_options, layout_status, layout_summary, tray_layout
from inventory.models import ComputeTray, PartitionPlan
from inventory.planning import PLAN_DRAIN

WHAT = gettext_lazy("tray actions")
BULK_LIMIT = 72  # trays per bulk request (four racks' worth; a rack view offers at most 18)
REASON_MAX = TYPED_REASON_LIMIT
NOTE_MAX = NOTE_LIMIT
# Window clocks may lag the browser's a little: a start this close to now is "now", not the past.
PAST_SLACK_S = 120
# A maintenance window is for work on a tray, not a way to retire it: longer than this is a typo (a year for
# a day) or a decommission, which is "needs service". Slurm would hold the reservation for the whole time.
MAX_WINDOW_DAYS = 30
MAX_LEAD_DAYS = 365
# A refusal carried to the tray page after the redirect: shown in its actions (_tray_actions.html), not in the
# page's message list (base.html leaves "in-place" messages to the part of the page that shows them).
REFUSED_TAGS = "in-place tray-action"
MAINTENANCE_WINDOW = "maintenance window "


def _checked(form: forms.Form, field: str, what: str, limit: int) -> str:
    """A typed reason or note as plain text (inventory.health.actions.typed_text_problem): a form error
    naming the field otherwise, so nothing is saved."""
    value = form.cleaned_data.get(field, "")
    problem = typed_text_problem(value, what=what, limit=limit) if value else ""
    if problem:
        raise forms.ValidationError(problem, code="typed_text")
    return value


class ReasonMixin:
    """The reason field's checks, shared by the drain, maintenance and bulk forms."""

    def clean_reason(self):
        return _checked(self, "reason", _("The reason"), REASON_MAX)

    def clean_note(self):
        return _checked(self, "note", _("The note"), NOTE_MAX)


_TOO_LONG = gettext_lazy(
    "At most %(limit_value)d characters (Rackplane and your name go in front): this is %(show_value)d."
)


class DrainForm(ReasonMixin, forms.Form):
    reason = forms.CharField(
        max_length=REASON_MAX,
        strip=True,
        label=gettext_lazy("Reason"),
        help_text=gettext_lazy(
            "Shown to operators and sent to Slurm and Kubernetes as “rackplane: <you>: <reason>”."
        ),
        error_messages={
            "required": gettext_lazy("Say why the tray is drained: operators and Slurm see this reason."),
            "max_length": _TOO_LONG,
        },
    )


class ReturnForm(ReasonMixin, forms.Form):
    note = forms.CharField(
        max_length=NOTE_MAX,
        required=False,
        strip=True,
        label=gettext_lazy("Note"),
        help_text=gettext_lazy("Optional: what was done, e.g. “reseated”."),
    )
    force = forms.BooleanField(
        required=False,
        label=gettext_lazy("Return it although it is not eligible"),
        help_text=gettext_lazy(
            "Only when you know the tray is sound (repaired, or the eligibility rule is wrong)."
        ),
    )


class DateTimeInput(forms.DateTimeInput):
    input_type = "datetime-local"

    def __init__(self, **kwargs):
        super().__init__(format="%Y-%m-%dT%H:%M", **kwargs)


class MaintenanceForm(ReasonMixin, forms.Form):
    reason = forms.CharField(
        max_length=REASON_MAX,
        strip=True,
        label=gettext_lazy("Reason"),
        help_text=gettext_lazy("E.g. “fan swap”. The tray is drained now with this reason."),
        error_messages={
            "required": gettext_lazy("Say what the maintenance is for: operators and Slurm see it."),
            "max_length": _TOO_LONG,
        },
    )
    start = forms.DateTimeField(
        required=False,
        widget=DateTimeInput(),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"],
        label=gettext_lazy("Start"),
        help_text=gettext_lazy(
            "Optional window, in %(zone)s: Slurm reserves the node for maintenance from start to end."
        ),
    )
    end = forms.DateTimeField(
        required=False,
        widget=DateTimeInput(),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"],
        label=gettext_lazy("End"),
        help_text=format_lazy(gettext_lazy("At most {days} days after the start."), days=MAX_WINDOW_DAYS),
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Typed in the viewer's time zone (portal.web.middleware.ViewerTimezoneMiddleware; UTC without it).
        zone = timezone.get_current_timezone_name()
        self.fields["start"].help_text = self.fields["start"].help_text % {"zone": zone}

    def clean(self):
        data = super().clean()
        start, end = data.get("start"), data.get("end")
        if self.errors:
            return data
        if (start is None) != (end is None):
            raise forms.ValidationError(
                _("Give both the start and the end of the maintenance window, or neither (drain only).")
            )
        if start is not None:
            now = timezone.now()
            if start < now - timedelta(seconds=PAST_SLACK_S):
                self.add_error(
                    "start",
                    _("The window starts in the past: choose a start from now on (%(zone)s).")
                    % {"zone": timezone.get_current_timezone_name()},
                )
            if end <= start:
                self.add_error("end", _("The window ends before it starts: choose an end after the start."))
            elif end - start > timedelta(days=MAX_WINDOW_DAYS):
                self.add_error(
                    "end",
                    _(
                        "A maintenance window lasts at most %(days)s days: choose an earlier end (a tray out "
                        "for longer is marked “needs service” instead)."
                    )
                    % {"days": MAX_WINDOW_DAYS},
                )
            if start > now + timedelta(days=MAX_LEAD_DAYS):
                self.add_error(
                    "start",
                    _("The window starts more than %(days)s days from now: check the year.")
                    % {"days": MAX_LEAD_DAYS},
                )
        return data


class MigLayoutForm(forms.Form):
    """The MIG layout for every GPU of the tray: one of the catalogue's (inventory.mig_options)."""

    layout = forms.ChoiceField(
        label=gettext_lazy("MIG layout"),
        widget=DataChoices,
        error_messages={
            # Not echoing the value: it may be anything (5,000 characters, control or bidi characters).
            "invalid_choice": gettext_lazy("That is not a layout these GPUs allow: choose one of the list."),
            "required": gettext_lazy("Choose a layout."),
        },
    )

    def __init__(self, *args, options: LayoutOptions, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["layout"].choices = [
            (o.name, f"{o.name}: {layout_summary(o)}") for o in options.layouts
        ] or [(DISABLED, f"{DISABLED}: {_('MIG off (whole GPUs)')}")]


def _forms(tray: ComputeTray, gpus: list | None, **bound) -> dict:
    options = layout_options(tray, gpus)
    return {
        "drain_form": bound.get("drain") or DrainForm(prefix="drain"),
        "return_form": bound.get("return") or ReturnForm(prefix="return"),
        "maintenance_form": bound.get("maintenance") or MaintenanceForm(prefix="maintenance"),
        "mig_form": bound.get("mig")
        or MigLayoutForm(prefix="mig", options=options, initial={"layout": tray.mig_layout or None}),
        "mig_options": options,
        "mig_status": layout_status(tray, tray_layout(tray), gpus),
    }


def drained_for(tray: ComputeTray) -> PartitionPlan | None:
    """The draining plan that drained `tray` (its state reason is the plan's drain reason), or None. The plan
    owns that drain: cancelling it, or its applying, returns the tray (integrations.plans.service)."""
    if tray.state != TrayState.DRAIN or not tray.state_reason:
        return None
    plan = PartitionPlan.objects.filter(rack_id=tray.rack_id, status=PlanStatus.DRAINING).first()
    if plan is None or tray.state_reason != say(PLAN_DRAIN, plan=plan.pk, rack=tray.rack.name):
        return None
    return plan


def actions_context(user, tray: ComputeTray, gpus: list | None = None, **bound) -> dict:
    """What the tray page needs for its action forms (nothing for anyone but a platform admin). `gpus`: the
    tray's GPUs when the page has them (inventory.selectors.tray_context)."""
    if not is_admin(user):
        return {}
    context = _forms(tray, gpus, **bound)
    if tray.state != TrayState.UP:
        context["return_eligibility"] = return_eligibility(tray)
        context["return_ours"] = owned_by_rules(tray)
        context["drain_plan"] = drained_for(tray)
        # An open service mark keeps it out, even forced (returns.return_to_service): marked returned first.
        context["return_marked"] = open_mark(tray)
    context["tray_actions"] = True
    return context


class BulkForm(ReasonMixin, forms.Form):
    action = forms.ChoiceField(
        choices=[("drain", gettext_lazy("Drain")), ("return", gettext_lazy("Return to service"))],
        error_messages={
            "invalid_choice": gettext_lazy("Choose Drain or Return to service."),
            "required": gettext_lazy("Choose an action."),
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
            self.add_error("reason", _("Say why the trays are drained: operators and Slurm see this reason."))
        raw = self.raw_trays
        if not raw:
            raise forms.ValidationError(_("Select at least one tray."))
        if len(raw) > BULK_LIMIT:
            raise forms.ValidationError(
                _("%(n)s trays selected; at most %(limit)s go in one request. Select fewer.")
                % {"n": len(raw), "limit": BULK_LIMIT}
            )
        if not all(value.isdigit() and len(value) <= 18 for value in raw):
            raise forms.ValidationError(_("The selection names trays by number only; reload the page."))
        ids = [int(value) for value in raw]
        if len(set(ids)) != len(ids):
            raise forms.ValidationError(_("A tray is selected twice; reload the page and select again."))
        trays = {tray.pk: tray for tray in ComputeTray.objects.filter(rack=self.rack, pk__in=ids)}
        missing = [pk for pk in ids if pk not in trays]
        if missing:
            raise forms.ValidationError(
                _(
                    "%(n)s of the selected trays are not in rack %(rack)s (or no longer exist); reload the "
                    "page and select again."
                )
                % {"n": len(missing), "rack": self.rack.name}
            )
        self.trays = sorted(trays.values(), key=lambda tray: tray.slot)
        return data
