"""The health centre (platform admins only): the fleet's health events over time, the repeat offenders, and
service / RMA tracking of trays and GPUs.

The lists read through inventory.health.centre (keyset pages, grouped counts: nothing counts the fleet's
events) with the FilterSets of inventory.filters; a filter value the page cannot read is a 400 that says
which and why, with nothing listed. A tray's service page records the next step of its tracking through
inventory.health.service.mark_service (a transaction, the tray row locked), Post/Redirect/Get; a refused
step (the tray's mark changed since the page was shown) is a 409 that says why, with nothing written. A GET
writes nothing.

Department leads do not see the centre: events name trays, GPUs and kernel lines of every department's
work, and the tray and GPU pages already show each tray's own timeline to whoever may see the tray.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_GET, require_http_methods

from core.access import require_admin
from inventory import selectors
from inventory.choices import ServiceStatus
from inventory.filters import OFFENDER_WINDOWS, HealthEventFilter, OffenderFilter
from inventory.forms import ServiceMarkForm
from inventory.health.actions import HealthError
from inventory.health.centre import (
    CursorError,
    events_chart,
    events_page,
    gpu_offenders,
    parse_cursor,
    tray_offenders,
)
from inventory.health.service import latest_record, mark_service, open_marks, shown_mark_words
from inventory.models import HealthEvent, ServiceRecord

WHAT = gettext_lazy("the health centre")
SERVICE_HISTORY_PER_PAGE = 50
OPEN_MARKS_SHOWN = 200


def _filtered(request, filter_class, tab: str):
    """For a platform admin, the FilterSet of the centre's events bound to the request, and the page's
    context (the invalid filter is the caller's 400)."""
    require_admin(request.user, WHAT)
    filterset = filter_class(request.GET, queryset=HealthEvent.objects.visible_to(request.user))
    filtered = any(request.GET.get(name) for name in filterset.filters)
    return filterset, {"tab": tab, "filter": filterset, "filtered": filtered}


@require_GET
def health_events(request):
    """The fleet's events, newest first, a keyset page at a time (`?before=`), with the chart."""
    filterset, context = _filtered(request, HealthEventFilter, "events")
    if not filterset.is_valid():
        return render(request, "inventory/health_events.html", context, status=400)
    before = request.GET.get("before", "")
    try:
        cursor = parse_cursor(before) if before else None
    except CursorError as error:
        return render(request, "inventory/health_events.html", {**context, "page_error": error}, status=400)
    rows, next_cursor = events_page(filterset.qs, cursor)
    data = filterset.form.cleaned_data
    chart = events_chart(filterset.qs, data.get("since"), data.get("until"))
    return render(
        request,
        "inventory/health_events.html",
        {**context, "rows": rows, "next_cursor": next_cursor, "paged": cursor is not None, "chart": chart},
    )


@require_GET
def health_offenders(request):
    """Trays and GPUs ranked by their faults in the window (30 days unless chosen)."""
    filterset, context = _filtered(request, OffenderFilter, "offenders")
    if not filterset.is_valid():
        return render(request, "inventory/health_offenders.html", context, status=400)
    since = filterset.since()
    window = filterset.form.cleaned_data["window"]
    return render(
        request,
        "inventory/health_offenders.html",
        {
            **context,
            "since": since,
            "window_days": OFFENDER_WINDOWS[window],
            "trays": tray_offenders(filterset.qs, since),
            "gpus": gpu_offenders(filterset.qs),
        },
    )


@require_GET
def health_service(request):
    """The trays with an open service mark, and every step recorded, newest first."""
    require_admin(request.user, WHAT)
    history = (
        ServiceRecord.objects.visible_to(request.user)
        .select_related("tray__rack", "actor")
        .order_by("-created_at", "-pk")
    )
    page = Paginator(history, SERVICE_HISTORY_PER_PAGE).get_page(request.GET.get("page"))
    return render(
        request,
        "inventory/health_service.html",
        {"tab": "service", "marks": list(open_marks(request.user)[:OPEN_MARKS_SHOWN]), "page": page},
    )


@require_http_methods(["GET", "POST"])
def tray_service(request, pk):
    """A tray's service tracking: its mark, its history, and (POST) the next step."""
    require_admin(request.user, WHAT)
    tray = get_object_or_404(selectors.trays_for_detail(request.user), pk=pk)
    status = 200
    if request.method == "POST":
        form = ServiceMarkForm(request.POST, tray=tray)
        if form.is_valid():
            data = form.cleaned_data
            try:
                outcome = mark_service(
                    tray, data["status"], actor=request.user, note=data["note"], gpu=data["gpu"]
                )
            except HealthError as error:
                form.add_error(None, str(error))
                status = 409
            else:
                messages.success(request, _done_words(tray.hostname, outcome))
                return HttpResponseRedirect(
                    reverse("inventory:health-tray-service", args=[tray.pk]), status=303
                )
        else:
            status = 400
        tray.refresh_from_db()
    else:
        form = ServiceMarkForm(tray=tray)
    return render(request, "inventory/health_tray_service.html", _service_context(tray, form), status=status)


def _service_context(tray, form) -> dict:
    """A tray's service page: its mark (open), its last step and its history, newest first."""
    record = latest_record(tray)
    history = ServiceRecord.objects.filter(tray=tray).select_related("actor").order_by("-created_at", "-pk")
    return {
        "tab": "service",
        "tray": tray,
        "form": form,
        "mark": record if record is not None and record.status != ServiceStatus.RETURNED else None,
        "last_record": record,
        "history": history[:SERVICE_HISTORY_PER_PAGE],
    }


def _done_words(hostname: str, outcome) -> str:
    values = {"host": hostname, "mark": shown_mark_words(outcome.record)}
    if outcome.taken_out:
        return (
            _(
                "%(host)s: %(mark)s. It is out of service (needs service) until it is marked returned and "
                "passes its checks."
            )
            % values
        )
    if outcome.kept_state:
        return _("%(host)s: %(mark)s. Its state is unchanged: %(kept)s.") % {
            **values,
            "kept": outcome.kept_state,
        }
    if outcome.record.status == ServiceStatus.RETURNED:
        return (
            _(
                "%(host)s: %(mark)s. It goes back in service once its agent reports it healthy (and its "
                "return check passes)."
            )
            % values
        )
    return _("%(host)s: %(mark)s.") % values
