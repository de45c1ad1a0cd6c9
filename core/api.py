"""API helpers every app's viewsets share."""

from django.core.exceptions import NON_FIELD_ERRORS
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from django.utils.translation import gettext
from rest_framework import exceptions, negotiation, serializers, views
from rest_framework.settings import api_settings

from core.errors import RackplaneError
from core.throttling import refusal_throttled
from core.tokens import AgentTokenElsewhere


def api_validation_error(error: DjangoValidationError) -> serializers.ValidationError:
    """A service's ValidationError as DRF's: field errors by field, the rest under non_field_errors."""
    detail = serializers.as_serializer_error(error)
    if NON_FIELD_ERRORS in detail:
        detail[api_settings.NON_FIELD_ERRORS_KEY] = detail.pop(NON_FIELD_ERRORS)
    return serializers.ValidationError(detail)


class ClientError(exceptions.APIException):
    """A RackplaneError the caller made, without a field to name: `{"detail": text}`, 400."""

    status_code = 400
    default_code = "invalid"


def client_error(error: RackplaneError) -> exceptions.APIException:
    """A client RackplaneError as DRF's 400: `{field: [text]}` naming its field, else `{"detail": text}`."""
    if error.field:
        return serializers.ValidationError({error.field: [str(error)]})
    return ClientError(str(error))


class ContentNegotiation(negotiation.DefaultContentNegotiation):
    """DRF's, except that a `?format=` no renderer of the operation answers is a 406 naming the formats it
    has: DRF answers 404, as if the jobs or the object did not exist (`?format=csv`). A `.suffix` in the
    path stays a 404: that path names no resource (`/jobs/0.5/` is not job 0 in format '5')."""

    def select_renderer(self, request, renderers, format_suffix=None):
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except Http404:
            if format_suffix:
                raise
            asked = str(request.query_params.get(self.settings.URL_FORMAT_OVERRIDE) or "")
            formats = ", ".join(sorted({renderer.format for renderer in renderers}))
            raise exceptions.NotAcceptable(
                gettext("No %(format)s answer here; formats: %(formats)s.")
                % {"format": repr(asked[:40]), "formats": formats}
            ) from None


def exception_handler(exc, context):
    """DRF's, and the one place domain errors become 400s: a service's (Django's) ValidationError as
    `api_validation_error` words it, a client RackplaneError (core.errors) as `client_error` does; views let
    both propagate. A throttled request's answer also says in its JSON when to come back (`retry_after`, in
    seconds, as the Retry-After header does).

    A refused authentication (an unknown, invalid, revoked or expired token: 401; or none where one is
    needed) counts against the anonymous rate of the client's address (core.throttling.refusal_throttled):
    DRF refuses credentials before its throttles run, so a flood of guessed tokens would otherwise never be
    throttled. Within the rate the 401 stands; over it the answer is 429, as for anonymous requests. An agent
    token outside the node agent's endpoints (403, core.tokens.AgentTokenElsewhere) counts the same way."""
    # The one mapping of domain errors to 400: a service's ValidationError, a RackplaneError the caller made.
    if isinstance(exc, DjangoValidationError):
        exc = api_validation_error(exc)
    elif isinstance(exc, RackplaneError) and exc.client_error:
        exc = client_error(exc)
    if isinstance(exc, (exceptions.AuthenticationFailed, exceptions.NotAuthenticated, AgentTokenElsewhere)):
        request, view = context.get("request"), context.get("view")
        if request is not None and view is not None:
            exc = refusal_throttled(request, view) or exc
    response = views.exception_handler(exc, context)
    if response is not None and isinstance(exc, exceptions.Throttled) and isinstance(response.data, dict):
        retry_after = response.headers.get("Retry-After")
        response.data["retry_after"] = int(retry_after) if retry_after else None
    return response
