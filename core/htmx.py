"""The htmx page-or-partial helper: one view answers a full page, or just the partial htmx asked for."""

from django.http import HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers


def page_or_partial(request, full_template: str, partial_template: str, context: dict):
    """htmx asks for the panel content only; a plain request (a link, a reload) gets the whole page."""
    template = partial_template if getattr(request, "htmx", False) else full_template
    response = render(request, template, context)
    # The same URL answers two ways: caches must key on the header that decides which.
    patch_vary_headers(response, ["HX-Request"])
    return response


CONFIRMED_FIELD = "confirmed"


def confirm_plain_post(
    request, *, question_template: str, context: dict, title: str, action: str, back_url: str
) -> HttpResponse | None:
    """A form that asks with `hx-confirm` asks only when htmx sends it. Posted plainly (JavaScript off, or a
    click before the deferred htmx script ran), it would act unasked: answer it with a page asking the same
    question (`question_template`, the template its hx-confirm attribute includes), whose button posts the
    same fields again with `confirmed=yes`. None: asked already, go on."""
    if getattr(request, "htmx", False) or request.POST.get(CONFIRMED_FIELD) == "yes":
        return None
    fields = [
        (name, value)
        for name, values in request.POST.lists()
        if name not in ("csrfmiddlewaretoken", CONFIRMED_FIELD)
        for value in values
    ]
    return render(
        request,
        "confirm.html",
        {
            **context,
            "question_template": question_template,
            "confirm_title": title,
            "confirm_action": action,
            "confirm_fields": fields,
            "confirmed_field": CONFIRMED_FIELD,
            "back_url": back_url,
        },
    )
