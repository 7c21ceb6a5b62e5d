"""One exception handler for the API: domain refusals (``portal.errors``) become 4xx answers with field errors
where a field is at fault, so a client never sees a 500 for bad input."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from portal.errors import ServiceError
from scheduling.core.states import InvalidTransition


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ServiceError):
        body: dict[str, Any] = {exc.field: [exc.message]} if exc.field else {"detail": exc.message}
        body["code"] = exc.code
        return Response(body, status=exc.status_code)
    if isinstance(exc, InvalidTransition):
        return Response({"detail": str(exc), "code": "invalid_transition"}, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, DjangoValidationError):
        return Response({"detail": exc.messages, "code": "invalid"}, status=status.HTTP_400_BAD_REQUEST)
    return drf_exception_handler(exc, context)
