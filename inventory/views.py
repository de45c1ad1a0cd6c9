"""Inventory screens: rack list, rack view, GPU and tray details. Queries live in inventory.selectors."""

from django.shortcuts import get_object_or_404, render
from django.utils.cache import patch_vary_headers

from inventory import selectors
from inventory.choices import SystemModel


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


def rack_detail(request, name):
    rack = get_object_or_404(selectors.racks(request.user), name=name)
    return render(
        request, "inventory/rack_detail.html", {"layout": selectors.rack_layout(request.user, rack)}
    )


def _full_page_or_partial(request, full_template, partial_template, context):
    """htmx asks for the panel content only; a plain request (a link, a reload) gets the whole page."""
    template = partial_template if request.htmx else full_template
    response = render(request, template, context)
    # The same URL answers two ways: caches must key on the header that decides which.
    patch_vary_headers(response, ["HX-Request"])
    return response


def gpu_detail(request, pk):
    gpu = get_object_or_404(selectors.gpus_for_detail(request.user), pk=pk)
    return _full_page_or_partial(
        request, "inventory/gpu_detail.html", "inventory/_gpu_detail.html", selectors.gpu_context(gpu)
    )


def tray_detail(request, pk):
    tray = get_object_or_404(selectors.trays_for_detail(request.user), pk=pk)
    return _full_page_or_partial(
        request,
        "inventory/tray_detail.html",
        "inventory/_tray_detail.html",
        selectors.tray_context(request.user, tray),
    )
