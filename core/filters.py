"""Filters that refuse what they cannot read instead of ignoring it.

Django's NullBooleanField reads any unknown value (`has_problems=-1`, `=maybe`) as "no filter", so an API
client's typo silently returned everything. `BooleanFilter` here reads true/false (and 1/0; empty means no
filter) and anything else is a form error: the API answers 400 naming the filter (DjangoFilterBackend), the
HTML lists show the unfiltered page as before. `IntegerFilter` likewise refuses `0.5` for a whole number.
An empty value is no filter for both, as for every django-filter filter (the OpenAPI document says
`allowEmptyValue`). A query parameter the operation does not read is refused too (`unknown_parameters`).
"""

from __future__ import annotations

import functools

import django_filters
from django import forms
from django.utils.translation import gettext_lazy as _
from rest_framework.settings import api_settings

TRUE = frozenset({"true", "1"})
FALSE = frozenset({"false", "0"})


class RawSelect(forms.Select):
    """A true/false/any select whose value reaches the field as sent (the field decides what it means)."""

    def __init__(self, attrs=None):
        super().__init__(attrs, choices=[("", _("Any")), ("true", _("Yes")), ("false", _("No"))])

    def format_value(self, value):
        if isinstance(value, bool):
            value = "true" if value else "false"
        return super().format_value(value)


class StrictBooleanField(forms.NullBooleanField):
    widget = RawSelect
    default_error_messages = {"invalid": _("Enter true or false (not %(value)r).")}

    def to_python(self, value):
        if value is None or value == "":
            return None
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in TRUE:
            return True
        if text in FALSE:
            return False
        raise forms.ValidationError(self.error_messages["invalid"], code="invalid", params={"value": value})

    def validate(self, value):
        pass


class BooleanFilter(django_filters.BooleanFilter):
    """true/false; another value is an error naming the filter (not "no filter")."""

    field_class = StrictBooleanField


class IntegerFilter(django_filters.NumberFilter):
    """A whole number (django-filter's NumberFilter reads `0.5` as a decimal and finds nothing)."""

    field_class = forms.IntegerField


# At most this many unknown parameters are named in a 400, each cut to this many characters.
UNKNOWN_NAMED = 10
NAME_SHOWN = 80


def unknown_parameters(request, view_func) -> dict[str, list[str]] | None:
    """A 400's body naming the query parameters the API operation `view_func` (a DRF view, as resolved)
    does not read, or None when it reads them all: a typo (`?submited_by=`, `?State=`), a list's filter on
    one object or a write (`POST .../cancel/?state=running`), `?dry_run=1` on a create. Not "no filter" and
    the whole list, nor a write done as if the parameter had been read (portal.web.middleware
    .KnownQueryParameters asks before the view runs).
    """
    known = operation_parameters(view_func, request.method)
    unknown = sorted(name for name in request.GET if name not in known)
    if not unknown:
        return None
    reads = ", ".join(sorted(known))
    message = str(_("Unknown query parameter; this operation reads: %(known)s.") % {"known": reads})
    body = {name[:NAME_SHOWN]: [message] for name in unknown[:UNKNOWN_NAMED]}
    if len(unknown) > UNKNOWN_NAMED:
        more = len(unknown) - UNKNOWN_NAMED
        body["detail"] = [str(_("%(count)s more unknown query parameters are not named.") % {"count": more})]
    return body


@functools.lru_cache(maxsize=512)
def operation_parameters(view_func, method: str) -> frozenset[str]:
    """The query parameters an operation reads: DRF's `format` and the view's own `query_parameters`
    everywhere; on a list (a viewset's `list` action) also its filters (a range's two ends, not its bare
    name), `sort` where it sorts (core.tables.SortFilter) and its paginator's parameters. Kept per view and
    method (they are declarations)."""
    view = view_func.cls(**getattr(view_func, "initkwargs", {}))
    actions = getattr(view_func, "actions", None) or {}
    action = actions.get(method.lower()) or (actions.get("get") if method.upper() == "HEAD" else None)
    known = {api_settings.URL_FORMAT_OVERRIDE, *getattr(view, "query_parameters", ())}
    if action == "list":
        known |= list_parameters(view)
    known.discard(None)
    return frozenset(known)


def list_parameters(view) -> set[str]:
    """A list view's filters, `sort` and paging parameters (`operation_parameters`)."""
    known: set[str] = set()
    filterset = getattr(view, "filterset_class", None)
    if filterset is not None:
        for name, declared in filterset.base_filters.items():
            # A range is its two ends (`date_after`, `date_before`: django-filter's widgets), read from the
            # declaration: `declared.field` would build (and keep on the class's filter) a field whose
            # choices some filters make per request.
            widget = declared.extra.get("widget") or getattr(declared.field_class, "widget", None)
            suffixes = getattr(widget, "suffixes", ())
            if suffixes:
                known.update(f"{name}_{suffix}" for suffix in suffixes)
            else:
                known.add(name)
    if getattr(view, "sort_fields", None):
        known.add("sort")
    paginator = view.paginator
    # A paginator that pages two ways (core.pagination.CursorOrPagePagination) names both ways' parameters.
    for one in (paginator, *getattr(paginator, "ways", ())):
        for attribute in ("page_query_param", "page_size_query_param", "cursor_query_param"):
            if name := getattr(one, attribute, None):
                known.add(name)
    return known
