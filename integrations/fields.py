"""Small validators and form fields the kinds' settings share (each kind's own rules live in its folder)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django import forms
from django.utils.translation import gettext_lazy

from core.textrule import text_problem

HOST_RE = re.compile(r"^[A-Za-z0-9.:-]+$")


def text(value, key: str, errors: dict) -> str:
    """A one-line text setting (a path, a user, an address, a token), held to the text rule (core.textrule):
    a newline, control, bidi or invisible character in a target's settings is refused like anywhere else."""
    if value is None:
        return ""
    if not isinstance(value, str):
        errors[key] = "must be text"
        return ""
    value = value.strip()
    if problem := text_problem(value):
        errors[key] = problem.message("it")
    return value


def integer(value, key: str, errors: dict, low: int, high: int | None = None):
    if value in (None, ""):
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        errors[key] = "must be a whole number"
        return None
    if value < low or (high is not None and value > high):
        errors[key] = f"must be between {low} and {high}" if high is not None else f"must be at least {low}"
        return None
    return value


def flag(value, key: str, errors: dict) -> bool:
    if value in (None, ""):
        return False
    if not isinstance(value, bool):
        errors[key] = "must be true or false"
        return False
    return value


def url(value: str, key: str, errors: dict) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        errors[key] = f"{value!r} is not an http:// or https:// address"
    return value.rstrip("/")


def absolute_path(value: str, key: str, errors: dict, what: str = "must be an absolute path") -> None:
    if value and not value.startswith("/"):
        errors[key] = what


# --- form fields (the target form shows the chosen kind's fields) -----------------------------------------
# Labels, help texts and choice labels are each kind's English, marked there with gettext_noop and shown
# here in the reader's language.


def _words(text):
    return gettext_lazy(text) if text else ""


def text_field(label, help_text="", **kwargs):
    return lambda: forms.CharField(label=_words(label), required=False, help_text=_words(help_text), **kwargs)


def number_field(label, help_text=""):
    return lambda: forms.IntegerField(label=_words(label), required=False, help_text=_words(help_text))


def flag_field(label, help_text=""):
    return lambda: forms.BooleanField(label=_words(label), required=False, help_text=_words(help_text))


def choice_field(label, choices, initial):
    return lambda: forms.ChoiceField(
        label=_words(label),
        choices=[(value, _words(words)) for value, words in choices],
        initial=initial,
        required=False,
    )


def token_field(label):
    return lambda: forms.CharField(
        label=_words(label),
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
    )
