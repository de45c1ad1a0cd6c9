"""The fabric page (issue 33): spine groups, their scalable units, each unit's racks and free GPUs, the source
in use and where another source disagrees with it (flagged as clique drift is, never overwritten).

Scheduling's page (in the `scheduling` namespace, at /inventory/fabric/, in the inventory's menu) because its
free GPUs per unit count what the jobs hold (scheduling.usage.free_gpus_queryset); importing a fabric is
inventory's (inventory.views.fabric). Site topology, not tenant data: every signed-in user reads it. It shows
counts of free GPUs only, never a job, a department or who holds what.
"""

from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.shortcuts import render
from django.views.decorators.http import require_GET

from inventory.fabric import conflicts, current_fabric, overview
from inventory.models import Gpu
from scheduling.usage import free_gpus_queryset


def gpus_per_rack(queryset) -> dict[str, int]:
    """Rack name -> GPUs of `queryset` in it; one query."""
    return dict(
        queryset.filter(tray__isnull=False)
        .values_list("tray__rack__name")
        .annotate(n=Count("pk"))
        .order_by()
        .values_list("tray__rack__name", "n")
    )


@login_required
@require_GET
def fabric(request):
    in_use, others, found = conflicts()
    conflicted = {rack for conflict in found for rack in conflict.racks}
    fabric = current_fabric()
    spines = overview(
        fabric,
        free=gpus_per_rack(free_gpus_queryset()),
        total=gpus_per_rack(Gpu.objects.visible_to(request.user)),
        conflicted=conflicted,
    )
    return render(
        request,
        "scheduling/fabric.html",
        {
            "in_use": in_use,
            "others": others,
            "conflicts": found,
            "spines": spines,
            "units": sum(len(spine.units) for spine in spines),
            "racks": len(fabric.racks),
        },
    )
