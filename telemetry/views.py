"""Telemetry pages: ``/metrics`` for Prometheus and ``/nodes/<name>/`` with each GPU's telemetry, health and risk.

Like every view here they only parse input, call a selector and render; the node page's htmx poll gets just the
GPU panel partial.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from portal.jobs.selectors import cordon_rule
from telemetry.metrics import CorralCollector
from telemetry.selectors import metrics_data, node_page


def _metrics_authorised(request: HttpRequest) -> bool:
    """Open by default (Prometheus scrapes without credentials); with ``CORRAL_METRICS_TOKEN`` set, a matching
    ``Authorization: Bearer <token>`` is required. Compared in constant time."""
    token = getattr(settings, "CORRAL_METRICS_TOKEN", "")
    if not token:
        return True
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), str(token).encode())


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    if not _metrics_authorised(request):
        response = HttpResponse("a bearer token is required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="corral-metrics"'
        return response
    # Latest samples older than a few sampling periods are from a silent agent: leave them out, as a dead
    # dcgm-exporter would.
    stale_after = float(getattr(settings, "CORRAL_METRICS_STALE_SECONDS", 6 * settings.CORRAL_SAMPLE_INTERVAL))
    now = timezone.now()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CorralCollector(metrics_data(now=now), now=now, stale_after=stale_after))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


@login_required
def node_detail_view(request: HttpRequest, name: str) -> HttpResponse:
    page = node_page(name=name)
    if page is None:
        raise Http404("No such node.")
    context = {"page": page, "node": page.node, "cordon_rule": cordon_rule()}
    if request.headers.get("HX-Request") == "true":
        return render(request, "telemetry/partials/_gpu_panel.html", context)
    return render(request, "telemetry/node_detail.html", context)
