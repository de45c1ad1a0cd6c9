"""Rack pages: rack list, rack view (with the jobs holding its GPUs), GPU and tray details.

They live in the project shell because the rack view combines inventory (inventory.selectors) with the
jobs that hold its GPUs (scheduling.usage) and the partitions' dedications to departments (tenancy).
"""

from django.db.models import Exists, OuterRef
from django.shortcuts import get_object_or_404, render

from core.access import is_admin
from core.htmx import page_or_partial
from inventory import selectors
from inventory.choices import SystemModel
from portal.tray_actions import BULK_LIMIT, actions_context
from portal.tray_context import health_context, tray_context
from scheduling.models import Job
from scheduling.usage import holder_annotations
from tenancy.models import DedicatedPartition, Department


def rack_list(request):
    filterset, page = selectors.rack_list(request.user, request.GET, request.GET.get("page"))
    return render(
        request,
        "inventory/rack_list.html",
        {
            "filter": filterset,
            "page": page,
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
        "job_param": request.GET.get("job", ""),
        "bulk_limit": BULK_LIMIT,
        "bulk_actions": is_admin(request.user) and bool(layout.rows),
    }
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
