"""Rack pages: rack list, rack view (with the jobs holding its GPUs), GPU and tray details.

They live in the project shell because the rack view combines inventory (inventory.selectors) with the
jobs that hold its GPUs (scheduling.usage) and the partitions' dedications to departments (tenancy).
"""

from django.db.models import Exists, OuterRef
from django.shortcuts import get_object_or_404, render

from core.access import is_admin
from core.htmx import page_or_partial
from core.tables import Column, Table
from inventory import selectors
from inventory.choices import SystemModel
from inventory.models import Gpu
from inventory.services import mark_silent
from portal.gpu_life import colour_layout, colour_links, colour_mode
from portal.tray_actions import BULK_LIMIT, actions_context
from portal.tray_context import health_context, tray_context
from scheduling.models import Job
from scheduling.usage import holder_annotations
from tenancy.models import DedicatedPartition, Department

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
            "gpu_exports": [("GPUs CSV", gpu_exports["csv"]), ("GPUs JSON", gpu_exports["json"])],
            "filtered": any(request.GET.get(name) for name in filterset.filters),
            "system_models": SystemModel.choices,
        },
    )


def _shown_job(request):
    """The job whose trays the rack view highlights (`?job=<pk>`), if the user may see it; one query."""
    pk = request.GET.get("job", "")
    if not pk.isdigit():
        return None
    return (
        Job.objects.visible_to(request.user)
        .select_related("department")
        .only("pk", "name", "state", "gpus", "placement", "department__name")
        .filter(pk=int(pk))
        .first()
    )


def mark_dedications(user, rack, partitions) -> None:
    """Set `dedicated_to` on each partition of `rack`: the department it is dedicated to ("" when shared;
    "another department" for one `user` may not see). One query."""
    visible = Department.objects.visible_to(user).filter(pk=OuterRef("department_id"))
    owners = {
        partition_id: name if shown else "another department"
        for partition_id, name, shown in DedicatedPartition.objects.filter(partition__rack=rack)
        .annotate(shown=Exists(visible))
        .values_list("partition_id", "department__name", "shown")
    }
    for partition in partitions:
        partition.dedicated_to = owners.get(partition.pk, "")


def rack_detail(request, name):
    rack = get_object_or_404(selectors.racks(request.user), name=name)
    layout = selectors.rack_layout(request.user, rack, holder_annotations(request.user))
    mark_dedications(request.user, rack, layout.partitions)  # the rows' tray.partition are these objects
    context = {
        "layout": layout,
        "silent_trays": mark_silent([row.tray for row in layout.rows]),  # nodes that stopped reporting
        "job_param": request.GET.get("job", ""),
        "bulk_limit": BULK_LIMIT,
        "bulk_actions": is_admin(request.user) and bool(layout.rows),
    }
    # The "colour by" switch (portal.gpu_life): partition, health, or recent utilization (fresh rows only).
    colour_by = colour_mode(request)
    context.update(
        colour_by=colour_by,
        colour_links=colour_links(request, colour_by),
        utilization_legend=colour_layout(layout, colour_by),
    )
    job = _shown_job(request) if context["job_param"] else None
    if job is not None:
        # Its trays (kept after it ends, for history); its GPUs too while it holds them.
        hosts = set(job.placement or [])
        for row in layout.rows:
            row.job_tray = row.tray.hostname in hosts
            for cell in row.cells:
                if cell is not None:
                    cell.job_gpu = cell.gpu.held_job_id == job.pk
        context.update(
            shown_job=job,
            shown_here=sum(1 for row in layout.rows if row.job_tray),
            shown_elsewhere=len(hosts) - sum(1 for row in layout.rows if row.job_tray),
        )
    return render(request, "inventory/rack_detail.html", context)


def gpu_detail(request, pk):
    gpu = get_object_or_404(selectors.gpus_for_detail(request.user), pk=pk)
    context = {**selectors.gpu_context(gpu), **health_context(request, gpu=gpu)}
    return page_or_partial(request, "inventory/gpu_detail.html", "inventory/_gpu_detail.html", context)


def tray_detail(request, pk):
    tray = get_object_or_404(selectors.trays_for_detail(request.user), pk=pk)
    context = {**tray_context(request, tray), **actions_context(request.user, tray)}
    return page_or_partial(request, "inventory/tray_detail.html", "inventory/_tray_detail.html", context)
