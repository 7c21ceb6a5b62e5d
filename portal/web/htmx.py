"""What every page needs to know about htmx."""

from __future__ import annotations

from django.http import HttpRequest


def is_htmx(request: HttpRequest) -> bool:
    """Whether htmx sent the request: such a request gets only the partial it swaps in, not the whole page. Not so
    for htmx restoring a page the browser's Back button returns to (a URL a pager or filter pushed) that is not in
    its cache: that request wants the whole page."""
    restoring = request.headers.get("HX-History-Restore-Request") == "true"
    return request.headers.get("HX-Request") == "true" and not restoring
