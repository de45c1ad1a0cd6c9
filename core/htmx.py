"""The htmx page-or-partial helper: one view answers a full page, or just the partial htmx asked for."""

from django.shortcuts import render
from django.utils.cache import patch_vary_headers


def page_or_partial(request, full_template: str, partial_template: str, context: dict):
    """htmx asks for the panel content only; a plain request (a link, a reload) gets the whole page."""
    template = partial_template if getattr(request, "htmx", False) else full_template
    response = render(request, template, context)
    # The same URL answers two ways: caches must key on the header that decides which.
    patch_vary_headers(response, ["HX-Request"])
    return response
