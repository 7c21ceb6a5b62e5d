"""The dashboard page. It validates the window and tenant parameters and calls the selectors; htmx polls it every
30 s for the stats fragment alone (``HX-Request: true``), with the window the first load chose written out."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.http import urlencode

from portal.dashboards.charts import dashboard_charts, figures_by_key
from portal.dashboards.forms import DashboardForm
from portal.dashboards.idle import idle_panel
from portal.dashboards.selectors import dashboard_get, dashboard_tenants, default_window, window_of
from portal.energy.selectors import energy_enabled, node_hours_saved
from portal.web.htmx import is_htmx

if TYPE_CHECKING:
    from portal.web.auth import AuthenticatedHttpRequest

#: Seconds between two refreshes of the live fragment (docs/dashboards.md says the same).
REFRESH_SECONDS = 30


@login_required
def dashboard_view(request: AuthenticatedHttpRequest) -> HttpResponse:
    """No ``window`` (or a bad one, with a message; 200) shows the default, the shortest window that holds the
    reader's jobs (``default_window``); a tenant the user cannot see, or that does not exist, shows the message and
    no figures at all (400), so nobody learns anything about it."""
    tenants = dashboard_tenants(user=request.user)
    form = DashboardForm(request.GET, tenants=tenants)
    form.is_valid()
    problems = [str(error) for errors in form.errors.values() for error in errors]
    context: dict[str, object] = {
        "form": form,
        "problems": problems,
        "window_key": form.cleaned_data.get("window") or "",
        "refresh_seconds": REFRESH_SECONDS,
        "dashboard": None,
    }
    status = 200
    if "tenant" in form.errors:
        status = 400
    else:
        now = timezone.now()
        slug = form.cleaned_data.get("tenant") or ""
        tenant = next((t for t in tenants if t.slug == slug), None)
        window_key = form.cleaned_data.get("window") or default_window(user=request.user, tenant=tenant, now=now)
        context["window_key"] = window_key
        window = window_of(window_key, now=now)
        dashboard = dashboard_get(user=request.user, window=window, tenant=tenant)
        context["idle"] = idle_panel(user=request.user, window=window, now=now, tenant=tenant)
        if energy_enabled():  # node-hours saved by powering idle nodes down (issue #19): cluster-wide, one query
            context["node_hours_saved"] = node_hours_saved(start=window.start, end=min(window.end, now))
        charts = dashboard_charts(dashboard)
        context |= {
            "dashboard": dashboard,
            "charts": charts,
            "figures": figures_by_key(charts),
            "tenant": slug,
            "query": urlencode({"window": window_key, **({"tenant": slug} if slug else {})}),
        }
    if is_htmx(request):
        return render(request, "dashboards/partials/_dashboard.html", context, status=status)
    return render(request, "dashboards/dashboard.html", context, status=status)
