"""``GET /metrics`` for Prometheus: the GPUs' latest telemetry under dcgm-exporter's names, plus Corral's own series
(jobs, queue, scheduler rounds, nodes, alerts, the failure predictor)."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from portal.metrics.collector import CorralCollector
from portal.metrics.selectors import metrics_data


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
