"""Serializer fields that take only the JSON type the OpenAPI document promises, and a serializer mixin that
takes only the fields it declares.

DRF's CharField reads a number as text (`"name": 0`), its IntegerField reads "4" and 4.0 as 4, and its
BooleanField reads 0, 1 and strings such as "yes" as booleans: a client's wrong type is then accepted
silently, and the document (string, integer, boolean) does not say what the API does. These refuse any other
JSON type with a 400 naming the field. Likewise a serializer drops a field it does not know (`"toplogy"`),
so the client's intent is lost without a word; KnownFieldsOnly refuses it.

TextField is also where the one text rule (core.textrule: no lone surrogates, control characters, bidi or
other invisible characters, no more than max_length) meets the API; core.text re-exports it beside the
Django validator and the form field of the same rule.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from django.core.validators import RegexValidator, slug_re
from django.utils.translation import gettext, gettext_lazy
from drf_spectacular.extensions import OpenApiSerializerExtension
from rest_framework import serializers
from rest_framework.exceptions import UnsupportedMediaType
from rest_framework.settings import api_settings

from core.text_i18n import problem_message
from core.textrule import text_problem

# The mixins below go in front of a DRF field or serializer and call it through super(); to mypy that is
# their base (at run time the class they are mixed into is).
if TYPE_CHECKING:
    from rest_framework.serializers import Field as _FieldBase
    from rest_framework.serializers import Serializer as _SerializerBase
else:
    _FieldBase = _SerializerBase = object


class StringOnly(_FieldBase):
    default_error_messages = {"not_a_string": gettext_lazy("Not a valid string.")}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("not_a_string")
        return super().to_internal_value(data)


class TextField(StringOnly, serializers.CharField):
    """A JSON string held to the text rule (core.textrule), checked against `max_length` too.

    `multiline=True` takes newlines and tabs (a job script, a check's output, nvidia-smi's XML); a name or a
    reason is one line. The error names the field and the character (U+XXXX, its position).
    """

    def __init__(self, *, multiline: bool = False, **kwargs):
        self.multiline = multiline
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        problem = text_problem(value, max_length=self.max_length, multiline=self.multiline)
        if problem:
            raise serializers.ValidationError(
                problem_message(problem, self.field_name or None), code=problem.code
            )
        return value


class SlugTextField(StringOnly, serializers.SlugField):
    """A slug as sent: `" ai-lab "` is refused like `"AI-Lab"` (DRF would trim the first and accept it), and
    `"ai-lab\\n"` too: DRF's pattern ends in `$`, which matches before a final line break, so its validator
    is replaced by one with Django's own slug pattern (`\\Z`), keeping DRF's words."""

    def __init__(self, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        if not self.allow_unicode:
            # DRF appends its slug validator last.
            self.validators[-1] = RegexValidator(slug_re, message=self.error_messages["invalid"])


class JSONIntegerField(serializers.IntegerField):
    """A JSON integer (4), not a string ("4"), a number with a fraction part (4.0) nor a boolean."""

    default_error_messages = {"not_an_integer": gettext_lazy('Must be a JSON integer (4, not "4" nor 4.0).')}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("not_an_integer")
        return super().to_internal_value(data)


class JSONBooleanField(serializers.BooleanField):
    """true or false, nothing else."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


FORM = "application/x-www-form-urlencoded"


class KnownFieldsOnly(_SerializerBase):
    """Serializer mixin: a body field the serializer does not take is a 400 naming it, with the closest field
    it does take; the OpenAPI document says so (`additionalProperties: false`, KnownFieldsOnlySchema)."""

    def to_internal_value(self, data):
        unknown = self.unknown_fields(data) if isinstance(data, Mapping) else {}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as error:
            if unknown and isinstance(error.detail, Mapping):
                raise serializers.ValidationError({**unknown, **error.detail}) from error
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value

    def unknown_fields(self, data: Mapping) -> dict[str, list[str]]:
        known = [name for name, field in self.fields.items() if not field.read_only]
        errors = {}
        for name in data:
            if name in known:
                continue
            close = difflib.get_close_matches(str(name), known, n=1)
            if close:
                errors[name] = [gettext('Unknown field: did you mean "%(field)s"?') % {"field": close[0]}]
            else:
                errors[name] = [
                    gettext("Unknown field: this request takes %(fields)s.") % {"fields": ", ".join(known)}
                ]
        return errors


def refuse_body(request) -> None:
    """For a write endpoint that takes no body (cancel a job, rotate a token): a body with fields is a 400
    naming each, as KnownFieldsOnly answers, rather than being dropped without a word (`{"force": true}` to a
    cancel must not look as if it was heard). An empty body, `{}` or `null` is taken. A form (which the API's
    parsers do not read) is read by Django's, so an empty one is taken and one with fields refused alike."""
    try:
        data = request.data
    except UnsupportedMediaType:
        if request.content_type.split(";")[0].strip() not in ("multipart/form-data", FORM):
            raise
        data = request._request.POST
    if data is None or (isinstance(data, Mapping) and not data):
        return
    if not isinstance(data, Mapping):
        raise serializers.ValidationError(
            {api_settings.NON_FIELD_ERRORS_KEY: [gettext("This request takes no body: send none, or {}.")]}
        )
    raise serializers.ValidationError(
        {
            str(name): [gettext("Unknown field: this request takes no body (send none, or {}).")]
            for name in data
        }
    )


class KnownFieldsOnlySchema(OpenApiSerializerExtension):
    """The document of a KnownFieldsOnly serializer: drf-spectacular's, with `additionalProperties: false`."""

    target_class = KnownFieldsOnly
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        return {**schema, "additionalProperties": False}
