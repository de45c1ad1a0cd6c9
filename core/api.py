"""API helpers every app's viewsets share."""

from django.core.exceptions import NON_FIELD_ERRORS
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers
from rest_framework.settings import api_settings


def api_validation_error(error: DjangoValidationError) -> serializers.ValidationError:
    """A service's ValidationError as DRF's: field errors by field, the rest under non_field_errors."""
    detail = serializers.as_serializer_error(error)
    if NON_FIELD_ERRORS in detail:
        detail[api_settings.NON_FIELD_ERRORS_KEY] = detail.pop(NON_FIELD_ERRORS)
    return serializers.ValidationError(detail)
