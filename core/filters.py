"""Filters that refuse what they cannot read instead of ignoring it.

Django's NullBooleanField reads any unknown value (`has_problems=-1`, `=maybe`) as "no filter", so an API
client's typo silently returned everything. `BooleanFilter` here reads true/false (and 1/0; empty means no
filter) and anything else is a form error: the API answers 400 naming the filter (DjangoFilterBackend), the
HTML lists show the unfiltered page as before. `IntegerFilter` likewise refuses `0.5` for a whole number.
An empty value is no filter for both, as for every django-filter filter (the OpenAPI document says
`allowEmptyValue`). A query parameter the endpoint does not read at all is refused too (`KnownParameters`).
"""

from __future__ import annotations

import django_filters
from django import forms
from django.utils.translation import gettext_lazy as _
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.exceptions import ValidationError
from rest_framework.filters import BaseFilterBackend
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


class KnownParameters(BaseFilterBackend):
    """Refuses query parameters an API list or object does not read: a 400 naming each unknown one and the
    ones it reads, so a typo (`?submited_by=`, `?State=`) is not silently "no filter" and the whole list.

    Known: the view's filters (its django-filter filterset), `sort` where it sorts (core.tables.SortFilter),
    its paginator's parameters, DRF's `format`, and `query_parameters`, the names a view reads itself. First
    of the filter backends, so nothing else has read the request yet.
    """

    def filter_queryset(self, request, queryset, view):
        known = known_parameters(request, queryset, view)
        unknown = sorted(name for name in request.query_params if name not in known)
        if unknown:
            reads = ", ".join(sorted(known))
            raise ValidationError(
                {
                    name[:NAME_SHOWN]: [
                        _("Unknown query parameter; this endpoint reads: %(known)s.") % {"known": reads}
                    ]
                    for name in unknown[:UNKNOWN_NAMED]
                }
            )
        return queryset


def known_parameters(request, queryset, view) -> set[str]:
    """The query parameters `view` reads (`KnownParameters`)."""
    known = {api_settings.URL_FORMAT_OVERRIDE, *getattr(view, "query_parameters", ())}
    filterset = DjangoFilterBackend().get_filterset_class(view, queryset)
    if filterset is not None:
        for name, declared in filterset.base_filters.items():
            known.add(name)
            # A range's two ends are two parameters (`date_after`, `date_before`: django-filter's widgets).
            # Read from the declaration: `declared.field` would build (and keep on the class's filter) a field
            # whose choices some filters make per request.
            widget = declared.extra.get("widget") or getattr(declared.field_class, "widget", None)
            known.update(f"{name}_{suffix}" for suffix in getattr(widget, "suffixes", ()))
    if getattr(view, "sort_fields", None):
        known.add("sort")
    paginator = getattr(view, "paginator", None)
    # A paginator that pages two ways (core.pagination.CursorOrPagePagination) names both ways' parameters.
    for one in (paginator, *getattr(paginator, "ways", ())):
        for attribute in ("page_query_param", "page_size_query_param", "cursor_query_param"):
            if name := getattr(one, attribute, None):
                known.add(name)
    known.discard(None)
    return known
