"""The reclaims panel of the nodes page (issue #19): open and recent reclaims, polled by htmx. Staff only, like
the pools API: the nodes page asks for it only for them."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import render

from portal.pools.selectors import pool_list, reclaims_recent
from portal.web.auth import AuthenticatedHttpRequest


@login_required
def reclaim_panel_view(request: AuthenticatedHttpRequest) -> HttpResponse:
    if not request.user.is_staff:
        raise PermissionDenied("Only an administrator sees the pools' reclaims.")
    context = {"pools": pool_list(), "reclaims": reclaims_recent()}
    return render(request, "pools/partials/_reclaims.html", context)
