"""Filters that refuse what they cannot read instead of ignoring it.

Django's NullBooleanField reads any unknown value (`has_problems=-1`, `=maybe`) as "no filter", so an API
client's typo silently returned everything. `BooleanFilter` here reads true/false (and 1/0; empty means no
filter) and anything else is a form error: the API answers 400 naming the filter (DjangoFilterBackend), the
HTML lists show the unfiltered page as before. `IntegerFilter` likewise refuses `0.5` for a whole number.
An empty value is no filter for both, as for every django-filter filter (the OpenAPI document says
`allowEmptyValue`).
"""

from __future__ import annotations

import django_filters
from django import forms
from django.utils.translation import gettext_lazy as _

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
