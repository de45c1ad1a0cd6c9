"""Serializer fields that take only the JSON type the OpenAPI document promises.

DRF's CharField reads a number as text (`"name": 0`) and its BooleanField reads 0, 1 and strings such as
"yes" as booleans: a client's wrong type is then accepted silently, and the document (string, boolean) does
not say what the API does. These refuse any other JSON type with a 400 naming the field.
"""

from rest_framework import serializers


class StringOnly:
    default_error_messages = {"not_a_string": "Not a valid string."}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("not_a_string")
        return super().to_internal_value(data)


class TextField(StringOnly, serializers.CharField):
    pass


class SlugTextField(StringOnly, serializers.SlugField):
    pass


class JSONBooleanField(serializers.BooleanField):
    """true or false, nothing else."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data
