"""The one text rule (core.textrule) for Django: a function, a model/form validator, a DRF and a form field.

What is refused and why is written once, in core.textrule's docstring (and docs/input.md). Use:
- models: `name = models.CharField(max_length=200, validators=[TextValidator()])` (full_clean, so the
  admin, model forms and services that call full_clean refuse it too; Django checks the max_length);
- API: `core.text.TextField(max_length=200)` (the same class as core.fields.TextField), `multiline=True` for
  a script;
- forms: `TextFormField(max_length=200)` or `validators=[TextValidator()]` on a form field;
- anywhere else (a service, a report parser): `validate_text(value, field="reason", max_length=160)`.
"""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError
from django.utils.deconstruct import deconstructible

from core.fields import TextField
from core.text_i18n import problem_message
from core.textrule import BIDI_CONTROLS, TextProblem, is_clean_text, text_problem

__all__ = [
    "BIDI_CONTROLS",
    "TextField",
    "TextFormField",
    "TextProblem",
    "TextValidator",
    "is_clean_text",
    "text_problem",
    "validate_text",
]


def validate_text(value: str, *, field: str | None, max_length: int | None, multiline: bool = False) -> None:
    """Raise django's ValidationError naming `field` and the offending character when `value` breaks the
    text rule (or is longer than `max_length` characters; None: no limit here)."""
    problem = text_problem(value, max_length=max_length, multiline=multiline)
    if problem:
        raise ValidationError(problem_message(problem, field), code=problem.code)


@deconstructible
class TextValidator:
    """The text rule as a validator for model and form fields.

    On a model field it needs no arguments: full_clean files the error under the field's name, and the
    field's own max_length is checked by Django. `field` names it in the message when given.
    """

    def __init__(self, *, field: str | None = None, max_length: int | None = None, multiline: bool = False):
        self.field = field
        self.max_length = max_length
        self.multiline = multiline

    def __call__(self, value) -> None:
        if isinstance(value, str):
            validate_text(value, field=self.field, max_length=self.max_length, multiline=self.multiline)

    def __eq__(self, other) -> bool:
        return isinstance(other, TextValidator) and (self.field, self.max_length, self.multiline) == (
            other.field,
            other.max_length,
            other.multiline,
        )

    def __hash__(self) -> int:
        return hash((self.field, self.max_length, self.multiline))


class TextFormField(forms.CharField):
    """A form's CharField held to the text rule; `multiline=True` takes newlines and tabs (a Textarea)."""

    def __init__(self, *, multiline: bool = False, **kwargs):
        self.multiline = multiline
        if multiline:
            kwargs.setdefault("widget", forms.Textarea)
        super().__init__(**kwargs)

    def validate(self, value) -> None:
        super().validate(value)
        if value not in self.empty_values:
            validate_text(
                value, field=self.label and str(self.label), max_length=None, multiline=self.multiline
            )
