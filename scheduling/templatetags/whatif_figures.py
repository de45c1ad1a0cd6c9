"""`{{ cell|whatif_value:row.unit }}` and `{{ cell|whatif_delta:row.unit }}`: a what-if figure and its
difference to the cluster now (scheduling.whatif.comparison's cells) in the viewer's language and number
format. The comparison's own `text`/`delta` stay English (the plain-text table of `simulate`)."""

from django import template
from django.utils.formats import number_format
from django.utils.translation import pgettext

register = template.Library()


def _number(value: float, places: int, *, signed: bool = False) -> str:
    text = number_format(abs(value) if signed else value, places, use_l10n=True, force_grouping=True)
    return (("+" if value >= 0 else "-") + text) if signed else text


def _places(unit: str) -> int:
    return {"%": 1, "GPU-h": 0, "slices": 2}.get(unit, 2)


@register.filter
def whatif_value(cell, unit: str) -> str:
    value = cell.get("value")
    if value is None:
        return pgettext("a what-if figure that could not be computed", "n/a")
    number = _number(value, _places(unit))
    if unit == "%":
        return pgettext("a what-if figure", "%(value)s%%") % {"value": number}
    if unit == "GPU-h":
        return pgettext("a what-if figure", "%(value)s GPU-h") % {"value": number}
    if unit == "slices":
        return number
    return pgettext("a what-if figure", "%(value)s h") % {"value": number}


@register.filter
def whatif_delta(cell, unit: str) -> str:
    diff = cell.get("diff")
    if diff is None:
        return ""
    number = _number(diff, _places(unit), signed=True)
    if unit == "%":
        return pgettext("a what-if difference in percentage points", "%(diff)s pts") % {"diff": number}
    if unit == "GPU-h":
        return pgettext("a what-if difference", "%(diff)s GPU-h") % {"diff": number}
    if unit == "slices":
        return number
    return pgettext("a what-if difference", "%(diff)s h") % {"diff": number}
