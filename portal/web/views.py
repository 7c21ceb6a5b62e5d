"""Pages that belong to the site as a whole rather than to one app."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.views.decorators.http import require_safe


@require_safe
def favicon(request: HttpRequest) -> HttpResponsePermanentRedirect:
    """``/favicon.ico``, which browsers (and the admin and API pages, which link no icon) ask for by themselves:
    a permanent redirect to the static icon, which WhiteNoise serves with the other static files. Public, and
    touches no database, so it answers even while the rest of the site is failing. Ref: #18"""
    return HttpResponsePermanentRedirect(static("favicon.ico"))
