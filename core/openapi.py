"""The OpenAPI document's error answers: every operation lists the 4xx codes it can give, with their body.

REST_FRAMEWORK's DEFAULT_SCHEMA_CLASS. The codes follow from what the operation is, the way DRF and the
portal answer them:

- 400 on every operation: a query parameter it does not read is refused, named
  (portal.web.middleware.KnownQueryParameters), as are the body, the parameters and the headers it reads
  (serializer and filter errors name the field or parameter, `{"field": ["reason"]}`; a body that is not
  JSON is `{"detail": ...}`);
- 401 without valid credentials (every operation needs them);
- 403 where a permission beyond "signed in" applies, and for every unsafe method (also the answer to a
  session request without its CSRF token);
- 404 where the path names an object (or something it is found through), and for paginated lists (a page
  past the last);
- 413 and 415 where a body is parsed (core.parsers: its size limit; a Content-Type or charset it does not
  read);
- 429 where the view is throttled, with Retry-After.

Codes an operation documents itself (extend_schema: a 409, the jobs API's 422) are kept; the common body is
added where they gave none. `tests/test_openapi.py` checks the rules, the schemathesis run
(tests/test_openapi_fuzz.py) checks them against the API's real answers.
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.plumbing import ResolvedComponent
from rest_framework import permissions

from core.parsers import JSONParser, size_in_words

UNSAFE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
# Permission classes that only ask for a signed-in user: they give 401, never 403.
SIGNED_IN_ONLY = (permissions.IsAuthenticated, permissions.AllowAny)

ERROR = {
    "type": "object",
    "description": "What went wrong, in words.",
    "properties": {"detail": {"type": "string"}},
    "required": ["detail"],
}
VALIDATION_ERROR = {
    "type": "object",
    "description": "Each invalid field, query parameter or header by name, with its reasons "
    '(`{"gpus": ["Ensure this value is greater than or equal to 1."]}`); errors of the whole body under '
    "`non_field_errors`; a body that cannot be parsed under `detail`.",
    "properties": {
        "detail": {"type": "string"},
        "non_field_errors": {"type": "array", "items": {"type": "string"}},
    },
    "additionalProperties": {},
}
THROTTLED = {
    "type": "object",
    "description": "Over the rate: what to wait (core.api's exception handler adds `retry_after`).",
    "properties": {"detail": {"type": "string"}, "retry_after": {"type": "integer", "nullable": True}},
    "required": ["detail"],
}
RETRY_AFTER = {
    "Retry-After": {
        "schema": {"type": "integer", "minimum": 0},
        "description": "Seconds to wait before the next request.",
    }
}


def _descriptions() -> dict[str, str]:
    return {
        "400": "Invalid input: the body, a query parameter or a header; each is named with its reasons.",
        "401": "No valid credentials: send `Authorization: Token <key>` (or a signed-in session).",
        "403": "Signed in but not allowed; `detail` says why (also: a session request without CSRF token).",
        "404": "Not found, or not visible to you (for a list: a page past the last).",
        "413": f"The body is larger than {size_in_words(JSONParser.max_body_bytes)}, this API's limit.",
        "415": "The body is not `application/json`, or its charset is not a text encoding.",
        "429": "Too many requests: wait the `Retry-After` seconds.",
    }


class AutoSchema(SpectacularAutoSchema):
    """drf-spectacular's AutoSchema, with the common error answers added to every operation."""

    def get_operation(self, path, path_regex, path_prefix, method, registry):
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        for parameter in operation.get("parameters", []):
            if parameter["in"] == "query" and parameter.get("schema", {}).get("type") != "array":
                # Filters and pagination read an empty value as no value (django-filter's convention; a
                # multiple choice reads it as a choice, and refuses it).
                parameter["allowEmptyValue"] = True
        responses = operation.setdefault("responses", {})
        descriptions = _descriptions()
        for code in self.error_codes(operation):
            responses.setdefault(code, {"description": descriptions[code]})
            if code == "429":
                responses[code].setdefault("headers", {}).update(RETRY_AFTER)
        for code, response in responses.items():
            if code >= "400" and "content" not in response:
                response["content"] = {"application/json": {"schema": self._error_schema(code)}}
        operation["responses"] = dict(sorted(responses.items()))
        return operation

    def error_codes(self, operation: dict) -> list[str]:
        parameters = operation.get("parameters", [])
        names_object = any(p["in"] == "path" for p in parameters)
        paginated = any(p["in"] == "query" and p["name"] == "page" for p in parameters)
        view_permissions = self.view.get_permissions()
        codes = ["400"]  # every operation refuses a query parameter it does not read
        if not all(isinstance(p, permissions.AllowAny) for p in view_permissions):
            codes.append("401")
        if self.method in UNSAFE_METHODS or not all(isinstance(p, SIGNED_IN_ONLY) for p in view_permissions):
            codes.append("403")
        if names_object or paginated:
            codes.append("404")
        if "requestBody" in operation:
            codes += ["413", "415"]
        if self.view.get_throttles():
            codes.append("429")
        return codes

    def _error_schema(self, code: str) -> dict:
        # 400 and 422 name what they refuse by field or header (the jobs API's reused Idempotency-Key).
        name, schema = {
            "400": ("ValidationError", VALIDATION_ERROR),
            "422": ("ValidationError", VALIDATION_ERROR),
            "429": ("Throttled", THROTTLED),
        }.get(code, ("Error", ERROR))
        component = ResolvedComponent(name=name, type=ResolvedComponent.SCHEMA, object=name, schema=schema)
        self.registry.register_on_missing(component)
        return component.ref


class AgentTokenScheme(OpenApiAuthenticationExtension):
    """The node-agent endpoints' agent tokens (inventory.api.auth; named by path: core imports no app)."""

    target_class = "inventory.api.auth.AgentTokenAuthentication"
    name = "agentToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An agent token (`rpa_...`), bound to one rack or one host.",
        }
