"""The rack view: a rack's trays and GPUs with the jobs holding them (scheduling.usage), its partitions'
dedications to departments (tenancy), the "colour by" switch and a job's trays highlighted (`?job=`).

It is scheduling's page (in the `scheduling` namespace, at /inventory/racks/<name>/) because it shows jobs;
the rack list, GPU and tray pages are inventory's (inventory.views.racks).
"""

from django.db.models import Exists, OuterRef
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.utils.translation import gettext as _

from core.access import is_admin
from inventory import recarving, selectors
from inventory.choices import MigMode
from inventory.fabric import rack_fabric
from inventory.forms import RecarvePolicyForm
from inventory.staleness import mark_silent
from inventory.views.tray_forms import BULK_LIMIT
from scheduling import slice_holders
from scheduling.models import Job
from scheduling.usage import holder_annotations
from scheduling.views.gpu_life import colour_layout, colour_links, colour_mode
from tenancy.models import DedicatedPartition, Department


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
        partition_id: name if shown else _("another department")
        for partition_id, name, shown in DedicatedPartition.objects.filter(partition__rack=rack)
        .annotate(shown=Exists(visible))
        .values_list("partition_id", "department__name", "shown")
    }
    for partition in partitions:
        partition.dedicated_to = owners.get(partition.pk, "")


def _mark_slices(user, layout) -> None:
    """Each GPU in MIG mode gets its slices (`cell.slices`), each tray the jobs holding its slices
    (`row.slice_holders`) and its idle slices by profile (`row.idle_slices`): two queries."""
    cells = [
        cell for row in layout.rows for cell in row.cells if cell and cell.gpu.mig_mode == MigMode.ENABLED
    ]
    layout.has_mig = bool(cells)  # the legend's MIG markers, only where they can be seen
    found = slice_holders.by_gpu(slice_holders.slices_of(user, [cell.gpu.pk for cell in cells]))
    for row in layout.rows:
        held = []
        for cell in row.cells:
            if cell is not None:
                cell.slices = found.get(cell.gpu.pk, [])
                held += cell.slices
        row.slice_holders = slice_holders.holders(held)
        row.idle_slices = slice_holders.idle_summary(held)


def rack_detail(request, name):
    rack = get_object_or_404(selectors.racks(request.user).select_related("recarve_policy"), name=name)
    layout = selectors.rack_layout(request.user, rack, holder_annotations(request.user))
    mark_dedications(request.user, rack, layout.partitions)  # the rows' tray.partition are these objects
    context = {
        "layout": layout,
        "silent_trays": mark_silent([row.tray for row in layout.rows]),  # nodes that stopped reporting
        "job_param": request.GET.get("job", ""),
        "bulk_limit": BULK_LIMIT,
        "bulk_actions": is_admin(request.user) and bool(layout.rows),
        # Its place in the compute fabric above the racks (issue 33), and any source that disagrees.
        "rack_fabric": rack_fabric(rack),
        # Carving that follows demand: the policy for everyone, its form for admins (inventory's view saves).
        **recarving.policy_context(rack, timezone.now()),
    }
    if is_admin(request.user):
        context["recarve_form"] = RecarvePolicyForm(instance=context["policy"])
    # The "colour by" switch (scheduling.views.gpu_life): partition, health, or recent utilization (fresh
    # rows only).
    colour_by = colour_mode(request)
    context.update(
        colour_by=colour_by,
        colour_links=colour_links(request, colour_by),
        utilization_legend=colour_layout(layout, colour_by),
    )
    _mark_slices(request.user, layout)
    if context["job_param"]:
        context.update(_job_shown(request, layout))
    return render(request, "scheduling/rack_detail.html", context)


def _job_shown(request, layout) -> dict:
    """?job=N: its trays marked (kept after it ends, for history), its GPUs too while it holds them."""
    job = _shown_job(request)
    if job is None:
        return {}
    hosts = set(job.placement or [])
    for row in layout.rows:
        row.job_tray = row.tray.hostname in hosts
        for cell in row.cells:
            if cell is not None:
                cell.job_gpu = cell.gpu.held_job_id == job.pk
    here = sum(1 for row in layout.rows if row.job_tray)
    return {"shown_job": job, "shown_here": here, "shown_elsewhere": len(hosts) - here}
