"""How the API describes itself to drf-spectacular, beyond what it finds alone: the node agents' ``Node`` token
scheme, and the error answers an operation can give.

The common error answers are added here, in one place, from what each view really does: 400 where it validates a
documented body or query parameter, 401 where it authenticates, 403 where a permission can refuse a signed-in
caller or a session call may lack its CSRF token, 404 on detail routes, past the last page and for an unknown
``?format=``, 415 where it parses a body. A view documents its own domain refusals (a 409, or a 403 with its reason)
with ``extend_schema(responses=...)``; those are kept as they are. Only the schema changes here, never an answer.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ComponentRegistry
from drf_spectacular.utils import Direction
from rest_framework import authentication, permissions, serializers

from portal.api.serializers import ErrorSerializer, ValidationErrorSerializer

#: Permissions that refuse only a caller who is not authenticated, which is a 401, never a 403. A permission class of
#: an app says it is one with ``authentication_only = True`` (the node agents' ``IsNodeAgent``: agent views
#: authenticate node tokens and nothing else, so any authenticated caller there is a node).
AUTHENTICATION_ONLY = (permissions.AllowAny, permissions.IsAuthenticated)


def _authentication_only(permission: object) -> bool:
    return isinstance(permission, AUTHENTICATION_ONLY) or getattr(permission, "authentication_only", False)


#: Query parameters whose bad values are a 404, not a 400: DRF's page number and its ``?format=`` override.
NOT_FOUND_PARAMETERS = {"page": "`page` is past the last page, or not a page number", "format": "no such `format`"}


# Extensions register themselves in drf-spectacular's __init_subclass__, which is not annotated; hence the ignores.
class ValidationErrorSchema(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """DRF's field errors as they are: an object keyed by the input's own fields, so no serializer can declare it."""

    target_class = ValidationErrorSerializer

    def map_serializer(self, auto_schema: AutoSchema, direction: Direction) -> dict[str, Any]:
        return {
            "type": "object",
            "description": (
                'Each field at fault with its messages: `{"gpus": ["This field is required."]}`. Nested input '
                'nests them, by field or list index: `{"tasks": {"0": {"state": ["..."]}}}`. `detail` or '
                "`non_field_errors` when no single field is at fault; a refusal by the portal's rules adds `code`."
            ),
            "properties": {"code": {"type": "string", "description": "Only on refusals by the portal's rules."}},
            "additionalProperties": {
                "oneOf": [
                    {"type": "array", "items": {"type": "string"}},
                    {"type": "string"},
                    {"type": "object", "description": "Nested field errors, of this same shape."},
                ]
            },
        }


class CorralAutoSchema(AutoSchema):
    """drf-spectacular's ``AutoSchema``, plus the error answers every operation shares (see the module docstring)."""

    def get_operation(
        self, path: str, path_regex: str, path_prefix: str, method: str, registry: ComponentRegistry
    ) -> dict[str, Any] | None:
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        responses: dict[str, Any] = operation["responses"]
        for status, answer in self._error_answers(operation).items():
            responses.setdefault(status, answer)
        operation["responses"] = dict(sorted(responses.items()))
        return operation

    def _error_answers(self, operation: dict[str, Any]) -> dict[str, dict[str, Any]]:
        parameters = operation.get("parameters", [])
        query = {p["name"] for p in parameters if p["in"] == "query"}
        path = [p["name"] for p in parameters if p["in"] == "path"]
        body = "requestBody" in operation
        authenticators = self.view.get_authenticators()
        answers = {}
        if body or query:  # a NUL in any query string is refused before the view runs (portal.web.middleware)
            answers["400"] = self._answer(ValidationErrorSerializer, "The input is not valid.")
        if authenticators:
            if "security" in operation:
                refused = "No credentials, or ones that are not valid"
            else:  # it needs none, yet it refuses ones that are not valid
                refused = "Credentials that are not valid, although this needs none"
            answers["401"] = self._answer(ErrorSerializer, f"{refused}; `WWW-Authenticate` names the scheme.")
        forbidden = []
        if not all(_authentication_only(p) for p in self.view.get_permissions()):
            forbidden.append("Signed in, but not allowed here.")
        session = any(isinstance(a, authentication.SessionAuthentication) for a in authenticators)
        if session and self.method not in permissions.SAFE_METHODS:
            forbidden.append("A session (cookie) call without its CSRF token; token calls need none.")
        if forbidden:
            answers["403"] = self._answer(ErrorSerializer, " ".join(forbidden))
        missing = [NOT_FOUND_PARAMETERS[name] for name in sorted(query & NOT_FOUND_PARAMETERS.keys())]
        if path:
            missing.insert(0, f"nothing by this {' and '.join(path)} that you may see")
        if missing:
            answer = self._answer(ErrorSerializer, f"Not found: {'; or '.join(missing)}.")
            if path:  # Django itself answers a path that no route matches, before any view runs
                answer["description"] += " A path no route matches (a parameter holding a `/`) gets Django's HTML page."
                answer["content"]["text/html"] = {"schema": {"type": "string"}}
            answers["404"] = answer
        if body:
            accepted = " or ".join(self.map_parsers())
            answers["413"] = self._answer(ErrorSerializer, "The body is larger than this endpoint takes.")
            answers["415"] = self._answer(ErrorSerializer, f"The body is not {accepted}.")
        return answers

    def _answer(self, shape: type[serializers.Serializer[Any]], description: str) -> dict[str, Any]:
        """An error body: JSON, under whichever of the view's media types was negotiated (its renderers write errors
        as JSON, see ``PlainTextRenderer``)."""
        schema = self.resolve_serializer(shape, "response").ref
        return {
            "content": {media_type: {"schema": schema} for media_type in self.map_renderers("media_type")},
            "description": description,
        }
