"""Inventory's pages of the fabric: the rack list (with its CSV/JSON exports), a GPU's page and a tray's page.

Each shows only inventory (inventory.selectors, inventory.health's timeline and checks, the tray action forms
of inventory.views.tray_forms); what other apps add to them (the jobs that held a GPU, its utilization, the
actions' effects on the schedulers) are their own pages, which these link to or load with htmx.
"""

from django.shortcuts import get_object_or_404, render
from django.utils.translation import gettext as _

from core.htmx import page_or_partial
from core.tables import Column, Table
from inventory import selectors
from inventory.choices import SystemModel
from inventory.models import Gpu
from inventory.views.tray_context import health_context, tray_context
from inventory.views.tray_forms import actions_context

RACK_SORTS = {
    "name": ("name",),
    "system": ("system_model", "name"),
    "location": ("location", "name"),
    "cluster": ("cluster_uuid", "name"),
    "created": ("created_at",),
    # The computed figures (inventory.selectors.RACK_FIGURES), sorted in the database, ties by name.
    "trays": ("trays_up", "trays_total", "name"),
    "gpus": ("gpus_healthy", "gpus_total", "name"),
    "partitions": ("partitions_total", "name"),
    "problems": ("problems", "name"),
}
RACK_COLUMNS = [
    Column("name", lambda r: r.name),
    Column("system_model", lambda r: r.system_model),
    Column("location", lambda r: r.location),
    Column("cluster_uuid", lambda r: str(r.cluster_uuid) if r.cluster_uuid else ""),
    Column("trays_up", lambda r: r.trays_up),
    Column("trays_total", lambda r: r.trays_total),
    Column("gpus_healthy", lambda r: r.gpus_healthy),
    Column("gpus_total", lambda r: r.gpus_total),
    Column("partitions", lambda r: r.partitions_total),
    Column("problems", lambda r: r.problems),
]
GPU_COLUMNS = [
    Column("rack", lambda g: g.tray.rack.name),
    Column("tray", lambda g: g.tray.hostname),
    Column("slot", lambda g: g.tray.slot),
    Column("index", lambda g: g.index),
    Column("uuid", lambda g: g.uuid),
    Column("serial", lambda g: g.serial),
    Column("product", lambda g: g.product),
    Column("health", lambda g: g.health),
    Column("fabric_state", lambda g: g.fabric_state),
    Column("partition", lambda g: g.tray.partition.name if g.tray.partition else ""),
    Column("last_report_at", lambda g: g.last_report_at),
]


def _export_racks(request, table: Table, filterset):
    """`?export=csv|json`: the filtered racks with their figures; `&rows=gpus`: the GPUs in them."""
    if request.GET.get("rows") == "gpus":
        gpus = (
            Gpu.objects.visible_to(request.user)
            .filter(tray__rack__in=filterset.qs.values("pk"))
            .select_related("tray__rack", "tray__partition")
            .order_by("tray__rack__name", "tray__slot", "index")
        )
        return table.export(GPU_COLUMNS, gpus, noun="gpus")
    racks = selectors.annotate_rack_summary(filterset.qs, request.user).order_by(*table.ordering)
    return table.export(RACK_COLUMNS, racks)


def rack_list(request):
    table = Table(request, "racks", RACK_SORTS, "name", per_page=selectors.RACKS_PER_PAGE)
    filterset, page = selectors.rack_list(
        request.user, request.GET, request.GET.get("page"), table.per_page, table.ordering
    )
    if table.export_format:
        return _export_racks(request, table, filterset)
    gpu_exports = {}
    for fmt in ("csv", "json"):
        gpu_exports[fmt] = table.export_urls[fmt] + "&rows=gpus"
    return render(
        request,
        "inventory/rack_list.html",
        {
            "filter": filterset,
            "page": page,
            "table": table,
            "gpu_exports": [(_("GPUs CSV"), gpu_exports["csv"]), (_("GPUs JSON"), gpu_exports["json"])],
            "filtered": any(request.GET.get(name) for name in filterset.filters),
            "system_models": SystemModel.choices,
        },
    )


def gpu_detail(request, pk):
    gpu = get_object_or_404(selectors.gpus_for_detail(request.user), pk=pk)
    context = {**selectors.gpu_context(gpu), **health_context(request, gpu=gpu)}
    return page_or_partial(request, "inventory/gpu_detail.html", "inventory/_gpu_detail.html", context)


def tray_detail(request, pk):
    tray = get_object_or_404(selectors.trays_for_detail(request.user), pk=pk)
    context = tray_context(request, tray)
    context.update(actions_context(request.user, tray, context.get("gpus")))
    return page_or_partial(request, "inventory/tray_detail.html", "inventory/_tray_detail.html", context)


def tray_page(request, tray, status: int = 200, **extra):
    """The tray page (or its partial, for htmx) again, with `extra` in its context: how the tray actions
    (integrations.views.tray_actions) show a refused form without naming inventory's templates."""
    tray.refresh_from_db()
    context = tray_context(request, tray)
    context.update(actions_context(request.user, tray, context.get("gpus"), **extra.pop("bound", {})))
    context.update(extra)
    template = (
        "inventory/_tray_detail.html" if getattr(request, "htmx", False) else "inventory/tray_detail.html"
    )
    return render(request, template, context, status=status)
