"""The partition wizard's what-if: this cluster's own jobs replayed under the previewed plan.

Started from the preview step (integrations.plans.views); the replays run in Celery tasks
(scheduling.whatif_runs), never here: the run's page and the preview's partial poll its progress every 2 s
and stop (HTTP 286) once it is done. Platform admins only, as the wizard.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseStopPolling

from core.access import require_admin
from integrations.plans import service as plans
from integrations.plans import whatif as whatif_page
from integrations.plans.forms import PlanForm, WhatIfForm, current_layout, plan_form
from integrations.plans.views import WIZARD, admin_rack, preview_context
from inventory.models import ComputeTray, Rack
from scheduling import whatif_runs
from scheduling.models import WhatIfRun
from scheduling.whatif import WhatIfError

# ---- the preview's what-if: this cluster's own jobs replayed under the plan ------------------------------


@require_POST
def plan_whatif(request, name):
    """Start a what-if from the preview: the last N days of this portal's jobs replayed under the cluster as
    it is, this plan and the other layouts asked for, in Celery tasks (scheduling.whatif_runs), never here.
    Answers the run's progress (htmx, which then polls it) or redirects to its page. Bad input is a 400 that
    says what to change, and writes nothing."""
    rack = admin_rack(request, name)
    form = plan_form(rack, request.POST)
    whatif_form = WhatIfForm(request.POST)
    refusal = ""
    if not form.partitions or getattr(form, "layout_errors", None) or form.errors:
        refusal = _("The plan has errors: fix them in the layout first, then run the what-if.")
    elif not plans.check(rack, form.partitions, drain=bool(form.cleaned_data.get("drain_first"))).ok:
        refusal = _("The plan has errors (see the checks): fix them first, then run the what-if.")
    if refusal or not whatif_form.is_valid():
        return _whatif_refused(request, rack, form, whatif_form, refusal)
    chosen = whatif_page.layouts(
        rack, form.partitions, current_layout(rack).partitions, whatif_form.cleaned_data["also"]
    )
    try:
        run = whatif_runs.start(request.user, whatif_form.cleaned_data["days"], chosen, rack=rack.name)
    except WhatIfError as error:
        return _whatif_refused(request, rack, form, whatif_form, str(error))
    if not request.htmx:
        return redirect("integrations:whatif-detail", pk=run.pk)
    return _whatif_partial(request, run)


def _whatif_refused(request, rack: Rack, form: PlanForm, whatif_form: WhatIfForm, refusal: str):
    errors = [refusal] if refusal else [m for messages in whatif_form.errors.values() for m in messages]
    if request.htmx:
        response = render(request, "integrations/wizard/_whatif_errors.html", {"errors": errors}, status=400)
        patch_vary_headers(response, ["HX-Request"])
        return response
    context = preview_context(request, rack, form, whatif_form)
    context["whatif_errors"] = errors
    return render(request, "integrations/wizard/preview.html", context, status=400)


def _whatif_partial(request, run: WhatIfRun):
    context = whatif_page.context(whatif_runs.progress(run))
    # Polled from the run's own page, the partial links to no other.
    context["own_page"] = request.htmx.current_url_abs_path == reverse(
        "integrations:whatif-detail", args=[run.pk]
    )
    if context["whatif"].done:
        return HttpResponseStopPolling(
            render(request, "integrations/wizard/_whatif.html", context).content,
            headers={"Vary": "HX-Request"},
        )
    response = render(request, "integrations/wizard/_whatif.html", context)
    patch_vary_headers(response, ["HX-Request"])
    return response


@require_GET
def whatif_detail(request, pk):
    """A what-if's progress, then its comparison (table and chart); polls every 2 s until it is done.

    Read-only: the replays move on in tasks (scheduling.tasks.whatif_prepare, whatif_replay)."""
    require_admin(request.user, WIZARD)
    run = get_object_or_404(WhatIfRun.objects.visible_to(request.user), pk=pk)
    if request.htmx:
        return _whatif_partial(request, run)
    context = whatif_page.context(whatif_runs.progress(run))
    context["rack"] = Rack.objects.filter(name=run.rack).first() if run.rack else None
    context["tray"] = ComputeTray.objects.filter(hostname=run.tray).first() if run.tray else None
    if context["tray"]:
        context["nav"] = "racks"  # the header marks where the breadcrumb starts: Racks, then the tray
    return render(request, "integrations/wizard/whatif.html", context)
