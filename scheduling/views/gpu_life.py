"""The GPUs' life on the screens (scheduling's pages: they show jobs): the rack view's "colour by" switch,
the time ranges the life pages share,
the jobs that held a GPU or a tray, a job's resubmit and a department's quota chart.
A job's logs are integrations' (integrations.views.job_logs: they are read from the backend).

* **Colour by** (``?colour=partition|health|utilization`` on the rack view): partition is the rack view's
  own colouring; health fills each GPU by its health; utilization fills it by its recent utilization, for
  the GPUs whose activity row is fresh (tenancy.activity's one staleness rule, the same the idle lists and
  the department page use, so the screens agree): with the site's Prometheus, the row itself (the source's
  ``avg_over_time`` window, 300 s by default); direct, the mean of the 5-minute buckets of the last five
  minutes, or the row's latest sample when those have none. A GPU whose row is stale or missing is drawn as
  "no data", never as idle.
* **Ranges** (``?range=1h|24h|7d|30d``): a range the page does not know falls back to the default, and the
  page says so (``RangeChoice.note``); nothing fails on a bad link.
* **Jobs that held it**: from the jobs' placements (``Job.placement``, the trays, kept after the job ends)
  and, for GPUs, their allocations while they ran; over the chosen range. A job the viewer may not see is
  counted, never named.

Pure reads: a GET never writes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import F, FloatField, IntegerField, OuterRef, Q, Subquery, Sum
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_http_methods

from core.sentences import say
from inventory import selectors
from inventory.models import Gpu
from scheduling import charts, slice_holders, usage, words
from scheduling.choices import ACTIVE_STATES, JobEventKind
from scheduling.jobspec import JobSpec
from scheduling.models import Job, JobEvent
from scheduling.resubmit import resubmit_offer
from scheduling.services.admission import submit_job, submittable_departments
from scheduling.views import utilization
from tenancy.activity import STALE_AFTER, bucket_start, fresh_activity
from tenancy.models import GpuUtilization, MetricsSource
from tenancy.quota_history import snapshot_rows

# ------------------------------------------------------------------------------------------ colour by

COLOUR_MODES = {
    "partition": gettext_lazy("Partition"),
    "health": gettext_lazy("Health"),
    "utilization": gettext_lazy("Utilization"),
}
DEFAULT_COLOUR = "partition"
# The direct source's buckets averaged for a GPU with a fresh activity row (whether it has data is not
# decided here: tenancy.activity.fresh_activity).
RECENT = timedelta(minutes=5)
# (band, lowest percent, legend); a GPU's band is the last whose lowest its value reaches.
UTILIZATION_BANDS = (
    (0, 0.0, gettext_lazy("under 5 %")),
    (1, 5.0, "5-25 %"),
    (2, 25.0, "25-50 %"),
    (3, 50.0, "50-75 %"),
    (4, 75.0, gettext_lazy("75 % and over")),
)
HEALTH_LEGEND = (
    ("healthy", gettext_lazy("Healthy")),
    ("limited_capacity", gettext_lazy("Limited capacity")),
    ("unhealthy", gettext_lazy("Unhealthy")),
    ("unknown", gettext_lazy("Unknown or not supported")),
)


def colour_mode(request) -> str:
    asked = request.GET.get("colour", "")
    return asked if asked in COLOUR_MODES else DEFAULT_COLOUR


def utilization_band(value: float | None) -> str:
    """The CSS band of a utilization: "0".."4", or "none" when there is no data."""
    if value is None:
        return "none"
    band = 0
    for number, lowest, _label in UTILIZATION_BANDS:
        if value >= lowest:
            band = number
    return str(band)


def recent_utilization(gpu_ids: list[int], now: datetime | None = None) -> dict[int, float]:
    """GPU pk -> recent utilization, for the GPUs with a fresh activity row (the one staleness rule); the
    others (stale or no row) are left out: "no data". One query.

    Prometheus: the activity row (the source's window average, refreshed every cycle). Direct: the
    sample-weighted mean of the 5-minute buckets from the one holding `now - 5 min` on, or the row's latest
    sample when those have none (a GPU 6 minutes silent is still known, as on the department page).
    """
    if not gpu_ids:
        return {}
    now = now or timezone.now()
    rows = fresh_activity(now).filter(gpu_id__in=gpu_ids)
    if MetricsSource.load().is_prometheus:
        return dict(rows.values_list("gpu_id", "utilization"))
    buckets = (
        GpuUtilization.objects.filter(
            gpu_id=OuterRef("gpu_id"),
            bucket_start__gte=bucket_start(now - RECENT),
            bucket_start__lte=now,
            seconds=GpuUtilization.BUCKET_SECONDS,
            samples__gt=0,
        )
        .order_by()
        .values("gpu_id")
    )
    weighted = buckets.annotate(value=Sum(F("mean") * F("samples"))).values("value")
    count = buckets.annotate(value=Sum("samples")).values("value")
    rows = rows.annotate(
        weighted=Subquery(weighted, output_field=FloatField()),
        n=Subquery(count, output_field=IntegerField()),
    )
    return {
        gpu_id: weighted / n if n else latest
        for gpu_id, latest, weighted, n in rows.values_list("gpu_id", "utilization", "weighted", "n")
    }


def colour_layout(layout, mode: str, now: datetime | None = None) -> dict:
    """Give every GPU cell of a rack layout `utilization` (percent or None) and `band`, when `mode` is
    utilization; return what the legend shows (how many GPUs in each band, and with no data)."""
    if mode != "utilization":
        return {}
    cells = [cell for row in layout.rows for cell in row.cells if cell is not None]
    values = recent_utilization([cell.gpu.pk for cell in cells], now)
    counts = {str(number): 0 for number, _, _ in UTILIZATION_BANDS} | {"none": 0}
    for cell in cells:
        cell.utilization = values.get(cell.gpu.pk)
        cell.band = utilization_band(cell.utilization)
        counts[cell.band] += 1
    with_data = list(values.values())
    return {
        "bands": [(str(number), label, counts[str(number)]) for number, _, label in UTILIZATION_BANDS],
        "no_data": counts["none"],
        "mean": sum(with_data) / len(with_data) if with_data else None,
        "source": _("the site's Prometheus")
        if MetricsSource.load().is_prometheus
        else _("the DCGM exporters"),
        "stale_after_minutes": int(STALE_AFTER.total_seconds() // 60),
    }


def colour_links(request, mode: str) -> list[tuple[str, str, str, bool]]:
    """(key, label, query string, chosen) for the switch; other query parameters (``job``) are kept."""
    links = []
    for key, label in COLOUR_MODES.items():
        query = request.GET.copy()
        query.pop("colour", None)
        if key != DEFAULT_COLOUR:
            query["colour"] = key
        encoded = query.urlencode()
        links.append((key, label, f"?{encoded}" if encoded else "?", key == mode))
    return links


# --------------------------------------------------------------------------------------------- ranges

RANGES = {
    "1h": (gettext_lazy("1 hour"), timedelta(hours=1)),
    "24h": (gettext_lazy("24 hours"), timedelta(hours=24)),
    "7d": (gettext_lazy("7 days"), timedelta(days=7)),
    "30d": (gettext_lazy("30 days"), timedelta(days=30)),
}
DEFAULT_RANGE = "24h"


@dataclass(frozen=True)
class RangeChoice:
    key: str
    label: str
    start: datetime
    end: datetime
    note: str = ""  # set when the asked range was not one of RANGES

    @property
    def choices(self) -> list[tuple[str, str, bool]]:
        return [(key, label, key == self.key) for key, (label, _) in RANGES.items()]


def parse_range(value: str | None, now: datetime | None = None, default: str = DEFAULT_RANGE) -> RangeChoice:
    """The range a page shows, ending now. Unknown or missing values give `default`; an unknown one also a
    note saying what was shown instead."""
    now = now or timezone.now()
    note = ""
    key = (value or "").strip().lower()
    if key not in RANGES:
        if key:
            shown = (value or "")[:20]
            note = _(
                "There is no time range “%(shown)s”: showing the last %(default)s. Choose one of %(keys)s."
            ) % {"shown": shown, "default": RANGES[default][0], "keys": ", ".join(RANGES)}
        key = default
    label, length = RANGES[key]
    return RangeChoice(key=key, label=label, start=now - length, end=now, note=note)


# ----------------------------------------------------------------------------------- jobs that held it

MAX_JOBS = 50


def _overlapping(queryset, start: datetime, end: datetime):
    """Jobs that ran during start..end: started before its end, and not finished before its start."""
    return queryset.filter(started_at__isnull=False, started_at__lte=end).filter(
        Q(finished_at__isnull=True) | Q(finished_at__gte=start)
    )


def _placement_q(hostnames: list[str]) -> Q:
    """Jobs whose placement (the job's latest, or any of its events': a preempted job's earlier runs)
    names one of these trays. placement is a JSON list of hostnames: matched as its quoted text."""
    q = Q(pk__in=[])
    for hostname in hostnames:
        needle = f'"{hostname}"'
        q |= Q(placement__icontains=needle) | Q(events__placement__icontains=needle)
    return q


def jobs_that_held(user, *, hostnames: list[str], start: datetime, end: datetime) -> dict:
    """The jobs placed on these trays during start..end, newest first (a GPU's: its tray's, since jobs take
    whole trays).

    Returns {"jobs": [Job ...] the user may see, "hidden": how many others, "more": True when cut at
    MAX_JOBS}. Two queries.
    """
    every = _overlapping(Job.objects.filter(_placement_q(hostnames)), start, end)
    pks = set(every.values_list("pk", flat=True))
    visible = list(
        Job.objects.visible_to(user)
        .filter(pk__in=pks)
        .select_related("department", "submitted_by")
        .order_by("-started_at", "-pk")[: MAX_JOBS + 1]
    )
    shown = len(Job.objects.visible_to(user).filter(pk__in=pks)) if len(visible) > MAX_JOBS else len(visible)
    return {"jobs": visible[:MAX_JOBS], "more": len(visible) > MAX_JOBS, "hidden": max(0, len(pks) - shown)}


# ------------------------------------------------------------------------------------------------ views


def _range_links(url: str, chosen: RangeChoice) -> list[tuple[str, str, str, bool]]:
    return [(key, label, f"{url}?range={key}", is_chosen) for key, label, is_chosen in chosen.choices]


def held_jobs(request, kind: str, pk: int):
    """The jobs that held a GPU (its tray's) or a tray over ?range=1h|24h|7d|30d: a fragment htmx loads
    after the page and swaps when the range changes."""
    if kind == "gpu":
        gpu = get_object_or_404(selectors.gpus_for_detail(request.user), pk=pk)
        hostnames, url = (
            [gpu.tray.hostname] if gpu.tray_id else [],
            reverse("scheduling:gpu-held-jobs", args=[pk]),
        )
        what = _("its tray")
    else:
        tray = get_object_or_404(selectors.trays_for_detail(request.user), pk=pk)
        hostnames, url, what = (
            [tray.hostname],
            reverse("scheduling:tray-held-jobs", args=[pk]),
            _("this tray"),
        )
    chosen = parse_range(request.GET.get("range"))
    held = jobs_that_held(request.user, hostnames=hostnames, start=chosen.start, end=chosen.end)
    response = render(
        request,
        "scheduling/_held_jobs.html",
        {
            "kind": kind,
            "pk": pk,
            "what": what,
            "range": chosen,
            "range_links": _range_links(url, chosen),
            **held,
        },
    )
    patch_vary_headers(response, ["HX-Request"])
    return response


def tray_utilization(request, pk):
    """A tray's four GPUs over ?range= (scheduling.views.utilization's chart, its ranges)."""
    tray = get_object_or_404(selectors.trays_for_detail(request.user), pk=pk)
    gpus = list(Gpu.objects.filter(tray=tray).order_by("index"))
    asked = request.GET.get("range")
    chosen = asked if asked in utilization.RANGES else "6h"
    end = timezone.now()
    return utilization._chart(
        request,
        kind="tray",
        pk=tray.pk,
        url=reverse("scheduling:tray-utilization", args=[tray.pk]),
        uuids=[gpu.uuid for gpu in gpus],
        names={gpu.uuid: f"GPU {gpu.index}" for gpu in gpus},
        start=end - utilization.RANGES[chosen][1],
        end=end,
        ranges=[(key, label) for key, (label, _) in utilization.RANGES.items()],
        chosen=chosen,
    )


# --------------------------------------------------------------------------------------------- resubmit


def _may_resubmit(user, job: Job) -> bool:
    return submittable_departments(user).filter(pk=job.department_id).exists()


@require_http_methods(["GET", "POST"])
def job_resubmit(request, pk):
    """ "Resubmit": a new job with the same spec (department, project, size, topology, class, backend, work,
    time limit, fallback), submitted by the user. GET asks to confirm; POST submits (through
    scheduling.services.admission.submit_job: validated, audited as the new job's creation by this user) and
    goes to the new job. A retried POST with the same form key returns the first new job."""
    job = get_object_or_404(
        Job.objects.visible_to(request.user).select_related("department", "project"), pk=pk
    )
    if not _may_resubmit(request.user, job):
        raise PermissionDenied(
            _(
                "Only members of %(department)s and platform admins may submit its jobs: ask its lead to add "
                "you."
            )
            % {"department": job.department.name}
        )
    errors: list[str] = []
    # A job without a project, in a department that now has projects, asks for one (scheduling.resubmit).
    offer = resubmit_offer(request.user, job)
    chosen = request.POST.get("project", "") if request.method == "POST" else ""
    if request.method == "POST":
        key = (request.POST.get("key") or "").strip()[:100] or f"resubmit-{job.pk}-{uuid.uuid4().hex}"
        new, errors = _resubmit(request.user, job, offer, chosen, key)
        if new is not None:
            messages.success(
                request,
                _("Job #%(pk)s %(name)s submitted with the spec of job #%(old)s: it waits for the scheduler.")
                % {"pk": new.pk, "name": new.name, "old": job.pk},
            )
            return redirect("scheduling:job-detail", pk=new.pk)
    context = {
        "job": job,
        "errors": errors,
        "offer": offer,
        "chosen": chosen,
        "key": f"resubmit-{job.pk}-{uuid.uuid4().hex}",
        "original_active": job.state in ACTIVE_STATES,  # resubmitting adds a job: this one goes on
    }
    return render(request, "scheduling/job_resubmit.html", context, status=400 if errors else 200)


def _resubmit(user, job: Job, offer, chosen: str, key: str) -> tuple[Job | None, list[str]]:
    """Submit `job`'s spec again as `user` under its project (or `chosen`, the slug of one of `offer`'s
    projects, when it needs one): (the new job, []) or (None, why not)."""
    project = job.project
    if offer.needs_project:
        project = next((p for p in offer.projects if p.slug == chosen), None)
    if not offer.possible:
        return None, [offer.reason]
    if project is None and offer.needs_project:
        names = ", ".join(p.name for p in offer.projects)
        return None, [
            _("Choose the project to run the job under (yours in %(department)s: %(names)s).")
            % {"department": job.department.name, "names": names}
        ]
    try:
        new, created = submit_job(user=user, spec=JobSpec.from_job(job, project=project), idempotency_key=key)
    except ValidationError as refused:
        return None, list(refused.messages)
    if created:
        JobEvent.objects.filter(job=new, kind=JobEventKind.SUBMITTED).update(
            message=say(words.RESUBMITTED_FROM, job=job.pk, user=user.get_username())
        )
    return new, []


# ----------------------------------------------------------------------------------- dashboards "now"

REFRESH_SECONDS = 60


def quota_chart_context(
    request, department, position=None, now: datetime | None = None, last_day: list | None = None
) -> dict:
    """The department dashboard's quota chart over ?range= (default 24 h), ending now: the stored snapshots
    (five-minute for the last day, hourly before: tenancy.quota_history) and a last point of the live
    figures. `position`: the live figures, and `last_day` the last 24 hours of snapshots, when the page has
    them already (scheduling.dashboard_data.DepartmentDashboard: no second query)."""
    chosen = parse_range(request.GET.get("range"), now=now)
    if chosen.key == DEFAULT_RANGE and last_day is not None:
        rows = last_day
    else:
        rows = snapshot_rows(department, chosen.start, chosen.end)
    chart = ""
    if rows:
        if position is None:
            position = usage.department_positions(chosen.end).of(department)
        live = {"taken_at": chosen.end, **position.figures()}
        chart = charts.quota_history_html([*rows, live], div_id="quota-chart")
    url = reverse("scheduling:quota-chart", args=[department.slug])
    page = reverse("scheduling:department-detail", args=[department.slug])
    return {
        "chart": chart,
        "has_history": bool(rows),
        "quota_range": chosen,
        "quota_chart_url": f"{url}?range={chosen.key}",
        "quota_range_links": [
            (key, label, f"{url}?range={key}", f"{page}?range={key}", is_chosen)
            for key, label, is_chosen in chosen.choices
        ],
        "quota_points": len(rows),
        "refresh_seconds": REFRESH_SECONDS,
    }


def quota_chart(request, slug):
    """The quota chart fragment: htmx swaps it when the range changes and every minute (static/portal/
    live_charts.js, paused while the tab is hidden). A GET never writes."""
    department = usage.visible_department(request.user, slug)
    if department is None:
        raise Http404(_("No such department."))
    response = render(request, "scheduling/_quota_chart.html", quota_chart_context(request, department))
    patch_vary_headers(response, ["HX-Request"])
    response["Cache-Control"] = "no-store"
    return response


def slices(request, kind: str, pk: int):
    """A GPU's or a tray's MIG slices and who holds each (scheduling.slice_holders): a fragment htmx loads on
    the GPU and tray pages, whose GPUs inventory shows without their jobs."""
    if kind == "gpu":
        gpu = get_object_or_404(selectors.gpus_for_detail(request.user), pk=pk)
        gpu_ids = [gpu.pk]
    else:
        tray = get_object_or_404(selectors.trays_for_detail(request.user), pk=pk)
        gpu_ids = list(Gpu.objects.filter(tray=tray).values_list("pk", flat=True))
    found = slice_holders.slices_of(request.user, gpu_ids)
    response = render(
        request,
        "scheduling/_slices.html",
        {
            "kind": kind,
            "pk": pk,
            "slices": found,
            "holders": slice_holders.holders(found),
            "idle": slice_holders.idle_summary(found),
            "held": sum(1 for s in found if s.held),
        },
    )
    patch_vary_headers(response, ["HX-Request"])
    return response
