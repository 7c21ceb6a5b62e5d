"""Refusals at the edge, before a view or the database sees a request it cannot handle. Ref: #15

``RejectNulMiddleware``: PostgreSQL refuses text holding a NUL character, so ``/api/v1/nodes/%00/`` or
``?name=%00`` turned into a database error, a 500. A NUL in the path is a 404 (nothing can be named so), in the
query string a 400.

``BodyLimitMiddleware``: a request body larger than its view accepts is a 413 that names the limit, checked from
``Content-Length`` before anything reads the body (CSRF included: it runs before ``CsrfViewMiddleware``). The limit
is ``settings.DATA_UPLOAD_MAX_MEMORY_SIZE`` (Django's, 2.5 MiB), unless the view declares its own as a class or
function attribute::

    class LogUploadView(AgentView):
        max_body_bytes = 64 * 2**20  # None: no limit

A larger limit covers only bodies the view reads as a stream (``request.stream``, ``request.read()``, a streaming
parser): ``request.body``, ``request.POST`` and DRF's JSON and form parsers keep Django's own check at
``DATA_UPLOAD_MAX_MEMORY_SIZE``. When that check fires as a view reads its body (``RequestDataTooBig``, also for
bodies whose length was not announced) the answer is the same 413, not Django's 400 page.

Both answer JSON in the API's error shape (``{"detail": ..., "code": ...}``) under ``/api/``, and a readable page
in the site's layout elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

API_PREFIX = "/api/"


def refusal(request: HttpRequest, *, status: int, detail: str, code: str) -> HttpResponse:
    """A refusal as JSON under ``/api/`` (the API's error shape), else the page ``templates/<status>.html``."""
    if request.path_info.startswith(API_PREFIX):
        return JsonResponse({"detail": detail, "code": code}, status=status)
    return render(request, f"{status}.html", {"detail": detail}, status=status)


def _has_nul(request: HttpRequest) -> tuple[bool, bool]:
    """Whether the path, and whether the query string (its decoded names and values), hold a NUL character."""
    in_query = any("\x00" in name or any("\x00" in v for v in values) for name, values in request.GET.lists())
    return "\x00" in request.path_info, in_query


class RejectNulMiddleware:
    """Refuses a NUL character in the path (404) or the query string (400), before the URL is even resolved."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        in_path, in_query = _has_nul(request)
        if in_path:
            return refusal(request, status=404, detail="Not found: the path holds a NUL character.", code="not_found")
        if in_query:
            return refusal(request, status=400, detail="The query string holds a NUL character.", code="invalid")
        return self.get_response(request)


def _size(size: int) -> str:
    """``2621440`` as ``2.5 MiB``, ``65536`` as ``64 KiB``."""
    unit, scale = ("MiB", 2**20) if size >= 2**20 else ("KiB", 2**10)
    return f"{round(size / scale, 2):g} {unit}"


def too_large(request: HttpRequest, limit: int) -> HttpResponse:
    detail = f"request body too large: at most {_size(limit)} ({limit} bytes)"
    return refusal(request, status=413, detail=detail, code="too_large")


def body_limit(view_func: Callable[..., Any]) -> int | None:
    """The most bytes ``view_func`` accepts: its ``max_body_bytes``, else Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE``.
    DRF's ``as_view()`` keeps the class as ``.cls``, Django's as ``.view_class``; a function view carries it itself."""
    owner = getattr(view_func, "cls", None) or getattr(view_func, "view_class", None) or view_func
    limit: int | None = getattr(owner, "max_body_bytes", settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    return limit


class BodyLimitMiddleware:
    """Answers 413 for a body larger than its view's limit (see the module docstring for how a view sets it)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self, request: HttpRequest, view_func: Callable[..., Any], view_args: Any, view_kwargs: Any
    ) -> HttpResponse | None:
        limit = body_limit(view_func)
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0  # as Django reads it: no body
        if limit is not None and length > limit:
            return too_large(request, limit)
        return None

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, RequestDataTooBig) and settings.DATA_UPLOAD_MAX_MEMORY_SIZE is not None:
            return too_large(request, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
        return None
