"""A busy rack's two ways besides "Drain first": "Requeue now" (its confirm page and the POST that does it)
and scheduling the plan for a maintenance window. Platform admins only, as the whole wizard; the plan
travels in the query string (GET) and hidden fields (POST) as on the preview; a GET never writes. The rules
are integrations.plans.requeue_now's and integrations.plans.windows'.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from integrations.plans import service as plans
from integrations.plans import windows
from integrations.plans.forms import WindowForm, plan_form
from integrations.plans.requeue_now import requeue_now
from integrations.plans.views import _rack_context, admin_rack, preview_context


def _refused(
    request, template: str, context: dict, error: str, *, conflict: bool = False, window: bool = False
):
    """The page again, saying why nothing was done (409: not now; 400: not like this). `window`: the plan is
    fine, the maintenance window is not (too short, ended, backwards): the advice is about the window."""
    context.update(apply_error=error, conflict=conflict, window_refused=window)
    return render(request, template, context, status=409 if conflict else 400)


def _rack_requeue_context(request, rack, form) -> dict:
    context = _rack_context(request, rack, form, "preview")
    context["hidden"] = form.hidden_fields_list()
    return context


@require_http_methods(["GET", "POST"])
def plan_requeue(request, name):
    """GET: which jobs in the plan's way would be requeued, which waited for, and when the plan would apply.
    POST: save the plan, drain its busy trays and requeue the checkpointable jobs; then follow the plan."""
    rack = admin_rack(request, name)
    template = "integrations/wizard/requeue.html"
    if request.method == "GET":
        return render(request, template, _rack_requeue_context(request, rack, plan_form(rack, request.GET)))
    form = plan_form(rack, request.POST)
    try:
        if not form.partitions or getattr(form, "layout_errors", None) or form.errors:
            raise ValidationError(_("The plan has errors: go back to the layout and fix them."))
        plan = requeue_now(rack, form.partitions, user=request.user)
    except plans.PlanConflict as error:
        return _refused(
            request, template, _rack_requeue_context(request, rack, form), str(error), conflict=True
        )
    except ValidationError as error:
        return _refused(
            request, template, _rack_requeue_context(request, rack, form), " ".join(error.messages)
        )
    return redirect("integrations:plan-detail", pk=plan.pk)


@require_POST
def plan_schedule(request, name):
    """Save the previewed plan with a maintenance window (typed in the viewer's time zone); the beat starts
    it at the window's start (integrations.plans.windows). A refusal re-shows the preview with why."""
    rack = admin_rack(request, name)
    form = plan_form(rack, request.POST)
    window = WindowForm(request.POST)
    template = "integrations/wizard/preview.html"
    if not window.is_valid():
        messages = [
            f"{window.fields[f].label}: {' '.join(e)}" for f, e in window.errors.items() if f in window.fields
        ]
        messages += window.non_field_errors()
        context = preview_context(request, rack, form, window_form=window)
        return _refused(request, template, context, " ".join(messages), window=True)
    try:
        if not form.partitions or getattr(form, "layout_errors", None) or form.errors:
            raise ValidationError(_("The plan has errors: go back to the layout and fix them."))
        when = {
            "starts_at": window.cleaned_data["window_start"],
            "ends_at": window.cleaned_data["window_end"],
            "requeue": window.cleaned_data["window_requeue"],
        }
        # A window the plan cannot apply in would only expire at its end: said before anything is saved.
        if (missed := windows.misses_window(rack, form.partitions, **when)) is not None:
            context = preview_context(request, rack, form, window_form=window)
            return _refused(request, template, context, missed, window=True)
        plan = windows.schedule(rack, form.partitions, user=request.user, **when)
    except ValidationError as error:
        context = preview_context(request, rack, form, window_form=window)
        return _refused(request, template, context, " ".join(error.messages))
    return redirect("integrations:plan-detail", pk=plan.pk)
