"""GPU utilization charts on a GPU's page and a job's page, for the time range the screen asks for.

htmx loads the fragment after the page (so a slow Prometheus never holds the page up) and swaps it when
the range changes. The figures come from tenancy.metrics_source.utilization_history: a range query to the
site's Prometheus (the step chosen from the range), or the direct source's stored buckets. A GET never
writes.
"""

from __future__ import annotations

from datetime import timedelta

from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from inventory import selectors
from inventory.models import Gpu
from scheduling.charts import utilization_html
from scheduling.models import Job
from tenancy.metrics_source import utilization_history
from tenancy.models import MetricsSource
from tenancy.prometheus import PrometheusError

RANGES = {
    "1h": (gettext_lazy("Last hour"), timedelta(hours=1)),
    "6h": (gettext_lazy("6 hours"), timedelta(hours=6)),
    "24h": (gettext_lazy("24 hours"), timedelta(hours=24)),
    "7d": (gettext_lazy("7 days"), timedelta(days=7)),
    "30d": (gettext_lazy("30 days"), timedelta(days=30)),
}
JOB_RANGE = "job"  # the job's own run, start to end (or now)
MAX_LINES = 8  # a job on more GPUs is drawn as their mean


def _step_words(seconds: int) -> str:
    if seconds % 3600 == 0:
        return _("%(n)s h") % {"n": seconds // 3600}
    if seconds % 60 == 0:
        return _("%(n)s min") % {"n": seconds // 60}
    return _("%(n)s s") % {"n": seconds}


def _chart(
    request, *, kind: str, pk: int, url: str, uuids: list[str], names: dict, start, end, ranges, chosen
):
    source = MetricsSource.objects.filter(pk=1).first() or MetricsSource()  # a GET never writes: no load()
    context = {
        "kind": kind,
        "pk": pk,
        "url": url,
        "ranges": ranges,
        "range": chosen,
        "source": _("the site's Prometheus") if source.is_prometheus else _("Rackplane's own samples"),
    }
    if not uuids:
        context["empty"] = _("No GPUs to show.")
        return render(request, "scheduling/_utilization.html", context)
    mean = len(uuids) > MAX_LINES
    try:
        series, step = utilization_history(uuids, start, end, mean=mean, source=source)
    except PrometheusError as error:
        context["error"] = _(
            "Prometheus could not be asked: %(error)s. The chart is back once it answers."
        ) % {"error": error}
        return render(request, "scheduling/_utilization.html", context)
    if not any(series.values()):
        context["empty"] = _(
            "No utilization samples in this range: the exporter did not report, or was not scraped."
        )
    else:
        context["chart"] = utilization_html(
            series, div_id=f"utilization-chart-{kind}-{pk}", names=names, height=360, x_range=(start, end)
        )
        context["step"] = _step_words(step)
        context["mean"] = mean
    return render(request, "scheduling/_utilization.html", context)


def gpu_utilization(request, pk):
    """One GPU's utilization over ?range= (1h, 6h, 24h, 7d, 30d; 6h by default)."""
    gpu = get_object_or_404(selectors.gpus_for_detail(request.user), pk=pk)
    chosen = request.GET.get("range") if request.GET.get("range") in RANGES else "6h"
    end = timezone.now()
    return _chart(
        request,
        kind="gpu",
        pk=gpu.pk,
        url=reverse("scheduling:gpu-utilization", args=[gpu.pk]),
        uuids=[gpu.uuid],
        names={gpu.uuid: f"GPU {gpu.index}" if gpu.index is not None else gpu.uuid},
        start=end - RANGES[chosen][1],
        end=end,
        ranges=[(key, label) for key, (label, _) in RANGES.items()],
        chosen=chosen,
    )


def job_utilization(request, pk):
    """A job's GPUs over its run (?range=job, the default once it started) or a recent range."""
    job = get_object_or_404(Job.objects.visible_to(request.user), pk=pk)
    gpus = list(
        Gpu.objects.filter(allocations__job=job).select_related("tray").order_by("tray__hostname", "index")
    )
    if not gpus and job.placement:
        gpus = list(
            Gpu.objects.filter(tray__hostname__in=job.placement)
            .select_related("tray")
            .order_by("tray__hostname", "index")
        )
    ranges = [(JOB_RANGE, _("Its run")), *((key, label) for key, (label, _) in RANGES.items())]
    asked = request.GET.get("range")
    chosen = asked if asked in RANGES or (asked == JOB_RANGE and job.started_at) else None
    chosen = chosen or (JOB_RANGE if job.started_at else "6h")
    end = timezone.now()
    if chosen == JOB_RANGE:
        start, end = job.started_at, job.finished_at or end
    else:
        start = end - RANGES[chosen][1]
    return _chart(
        request,
        kind="job",
        pk=job.pk,
        url=reverse("scheduling:job-utilization", args=[job.pk]),
        uuids=[gpu.uuid for gpu in gpus],
        names={gpu.uuid: f"{gpu.tray.hostname if gpu.tray_id else '?'} GPU {gpu.index}" for gpu in gpus},
        start=start,
        end=end,
        ranges=ranges,
        chosen=chosen,
    )
