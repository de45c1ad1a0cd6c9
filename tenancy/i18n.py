"""Translated text that is built once, at import, but read in the language of each request.

`gettext_lazy("... %(n)s ...") % {"n": 3}` would translate at import time (a lazy string's `%` is not lazy):
a help text that names a constant goes through `interpolate_lazy` instead.
"""

from django.utils.functional import lazy
from django.utils.translation import override


def _interpolate(message, params: dict) -> str:
    return str(message) % params


_interpolated = lazy(_interpolate, str)


def interpolate_lazy(message, **params):
    """`message` (a gettext_lazy text with %(name)s placeholders) filled with `params` when it is read."""
    return _interpolated(message, params)


def english(text) -> str:
    """`text` (a lazy translation, e.g. a choice's label, or a function that makes one, e.g. a model's
    get_role_display) in English whatever the request's language: for what is stored (audit records keep
    objects' names as they read in English) and logged."""
    with override("en"):
        return str(text() if callable(text) else text)
