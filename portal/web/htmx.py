"""What every page needs to know about htmx."""

from __future__ import annotations

from django.http import HttpRequest


def is_htmx(request: HttpRequest) -> bool:
    """Whether htmx sent the request: such a request gets only the partial it swaps in, not the whole page."""
    return request.headers.get("HX-Request") == "true"
